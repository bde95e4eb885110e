//! Writing one JSON Lines record: serialised into a buffer the thread keeps, then handed to
//! the file in one `write`, so neither the journal nor a transcript allocates per line.

use serde::Serialize;
use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A buffer grown past this by a large line is given back after it, so a thread does not
/// keep a large tool result's worth of memory.
const KEEP_BYTES: usize = 64 * 1024;

thread_local! {
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Serialises `value` as one line (its JSON and a newline) and hands the bytes to `write`.
pub(crate) fn with_line<T: Serialize + ?Sized, R>(
    value: &T,
    write: impl FnOnce(&[u8]) -> R,
) -> serde_json::Result<R> {
    LINE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut line) => {
            line.clear();
            let written = serde_json::to_writer(&mut *line, value).map(|()| {
                line.push(b'\n');
                write(&line)
            });
            if line.capacity() > KEEP_BYTES {
                *line = Vec::new();
            }
            written
        }
        // Only if `write` itself wrote a line (it does not): a buffer of its own then.
        Err(_) => {
            let mut line = serde_json::to_vec(value)?;
            line.push(b'\n');
            Ok(write(&line))
        }
    })
}

/// Cuts `file` (open to read and write) back to the end of its last whole line: a line cut
/// short (a kill, a full disk) would otherwise have the next one appended onto it, and both
/// be lost to a reader. Needs no room on the disk.
pub(crate) fn cut_partial_line(file: &File) -> std::io::Result<()> {
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = [0u8; 8192];
    // Read backwards until a newline: only the cut line itself is read.
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..usize::try_from(end - start).unwrap_or(0)];
        file.read_exact_at(part, start)?;
        if let Some(nl) = part.iter().rposition(|b| *b == b'\n') {
            end = start + nl as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_is_its_json_and_a_newline_and_the_buffer_is_reused() {
        let first = with_line(&json!({"a": 1}), <[u8]>::to_vec).unwrap();
        assert_eq!(first, b"{\"a\":1}\n");
        let second = with_line(&json!("x"), <[u8]>::to_vec).unwrap();
        assert_eq!(second, b"\"x\"\n");
        // A line inside another's write still comes out whole.
        let nested = with_line(&json!(1), |outer| {
            let inner = with_line(&json!(2), <[u8]>::to_vec).unwrap();
            [outer.to_vec(), inner].concat()
        })
        .unwrap();
        assert_eq!(nested, b"1\n2\n");
        // A large line is not kept.
        let big = "y".repeat(2 * KEEP_BYTES);
        let len = with_line(&big, <[u8]>::len).unwrap();
        assert_eq!(len, big.len() + 3);
        LINE.with(|l| assert!(l.borrow().capacity() <= KEEP_BYTES));
    }
}
