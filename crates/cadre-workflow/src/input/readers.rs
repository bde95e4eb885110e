//! The line-shaped formats: JSON Lines and CSV with a header row, each read a line (a row)
//! at a time.

use super::item::{BadItem, Raw};
use serde_json::{Map, Value};
use std::io::{BufRead, BufReader, Read};

/// The items of a JSON Lines file: one value per line, blank lines skipped.
pub(crate) fn jsonl<R: Read + Send>(reader: R) -> impl Iterator<Item = Raw> + Send {
    let mut reader = BufReader::new(reader);
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    let mut broken = false;
    std::iter::from_fn(move || loop {
        if broken {
            return None;
        }
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => return None,
            Ok(_) => line_no += 1,
            Err(e) => {
                broken = true;
                return Some(Err((Some(line_no + 1), BadItem::Broken(e))));
            }
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        return Some(
            serde_json::from_slice(&buf)
                .map(|v| (Some(line_no), v))
                .map_err(|e| (Some(line_no), BadItem::NotJson(e))),
        );
    })
}

/// The rows of a CSV file with a header row, each an object of strings by the header's
/// names.
pub(crate) fn csv_rows<R: Read + Send + 'static>(reader: R) -> impl Iterator<Item = Raw> + Send {
    let mut csv = csv::ReaderBuilder::new().from_reader(reader);
    let headers = csv.headers().cloned();
    let mut records = csv.into_records();
    let mut state = match headers {
        Ok(h) => Ok(h),
        Err(e) => Err(Some(e)),
    };
    std::iter::from_fn(move || {
        let headers = match &mut state {
            Ok(h) => h,
            // A header that cannot be read is the first item's fault; nothing follows it.
            Err(e) => return e.take().map(|e| Err((Some(1), BadItem::Csv(e)))),
        };
        let record = records.next()?;
        Some(match record {
            Ok(row) => {
                let line = row.position().map(csv::Position::line);
                let object: Map<String, Value> = headers
                    .iter()
                    .zip(row.iter())
                    .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                    .collect();
                Ok((line, Value::Object(object)))
            }
            Err(e) => {
                let line = e.position().map(csv::Position::line);
                if e.is_io_error() {
                    // An I/O error does not move the reader on: stop rather than repeat it.
                    state = Err(None);
                }
                Err((line, BadItem::Csv(e)))
            }
        })
    })
}
