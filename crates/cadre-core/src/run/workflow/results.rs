//! A workflow's `results.jsonl`: one line per item, written whole as each item's result is
//! known; a resume writes it again from the journal, so it ends with one line per item
//! whatever happened before.

use super::ItemResult;
use crate::vocab::outcome::StopKind;
use serde_json::Value;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The results file being written.
pub(crate) struct ResultsFile {
    path: PathBuf,
    file: Option<File>,
}

impl ResultsFile {
    /// A new, empty results file at `path` (an earlier one is replaced); `None` for a run
    /// without a folder, whose results go only to the caller.
    pub(crate) fn create(path: Option<PathBuf>) -> Self {
        let file = path.as_deref().and_then(|p| match File::create(p) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!("cannot write {}: {e}", p.display());
                None
            }
        });
        Self {
            path: path.unwrap_or_default(),
            file,
        }
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `result`'s line, whole, in one write.
    pub(crate) fn write(&mut self, result: &ItemResult) {
        let Some(file) = &mut self.file else {
            return;
        };
        let mut line = match serde_json::to_vec(result) {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!("cannot encode the result of item {}: {e}", result.key);
                return;
            }
        };
        line.push(b'\n');
        if let Err(e) = file.write_all(&line) {
            tracing::warn!("cannot write {}: {e}", self.path.display());
        }
    }
}

/// An item's output and error from how its agent stopped and its final text: a typed
/// answer is its JSON value, any other the text; a stop other than `Done` is the error.
pub(crate) fn output_of(stop: &StopKind, text: &str, typed: bool) -> (Value, Option<String>) {
    if !stop.is_done() {
        return (Value::String(text.to_owned()), Some(stop.to_string()));
    }
    if typed {
        if let Ok(value) = serde_json::from_str(text) {
            return (value, None);
        }
    }
    (Value::String(text.to_owned()), None)
}
