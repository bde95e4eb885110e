//! A workflow's `results.jsonl`: one line per item, written whole as each item's result is
//! known. A resume writes it again from the journal beside the old one, which stays whole
//! and readable until the new one replaces it at the end of the items, so no finished
//! item's line is ever missing from it.

use super::ItemResult;
use crate::vocab::outcome::StopKind;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The results file being written (a workflow run's, here or on a durable engine).
pub struct ResultsFile {
    path: PathBuf,
    /// Where the lines go: `path` itself for a new run, else a `.partial` file beside it.
    writing: PathBuf,
    file: Option<File>,
}

impl ResultsFile {
    /// A new results file at `path`, written in place when there is none yet, else beside
    /// the earlier one until [`finish`](Self::finish) replaces it; `None` for a run without
    /// a folder, whose results go only to the caller.
    pub fn create(path: Option<PathBuf>) -> Self {
        let path = path.unwrap_or_default();
        let writing = if path.exists() {
            let mut name = path.clone().into_os_string();
            name.push(".partial");
            PathBuf::from(name)
        } else {
            path.clone()
        };
        let file = if path.as_os_str().is_empty() {
            None
        } else {
            File::create(&writing)
                .map_err(|e| tracing::warn!("cannot write {}: {e}", writing.display()))
                .ok()
        };
        Self {
            path,
            writing,
            file,
        }
    }

    /// Ends the writing: the new file takes the earlier one's place.
    pub fn finish(&mut self) {
        if self.file.take().is_none() || self.writing == self.path {
            return;
        }
        if let Err(e) = std::fs::rename(&self.writing, &self.path) {
            tracing::warn!("cannot replace {}: {e}", self.path.display());
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `result`'s line, whole, in one write.
    pub fn write(&mut self, result: &ItemResult) {
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
            tracing::warn!("cannot write {}: {e}", self.writing.display());
        }
    }
}

/// A digest of the results told so far, whatever order they came in: the reduce's call id
/// carries it, so new results make a new reduce and the same ones find the old answer.
///
/// Items end in a different order on every run, so the digest is the sum (per 64-bit lane,
/// wrapping) of each result's own SHA-256, not one hash over the lines as they came: the
/// same results in any order give the same digest, and two equal lines do not cancel out.
#[derive(Default)]
pub(crate) struct ResultsDigest {
    lanes: [u64; 4],
}

impl ResultsDigest {
    /// Adds `result`: its key, call, outcome and output (a fix round changes the output
    /// alone).
    pub(crate) fn add(&mut self, result: &ItemResult) {
        let line = serde_json::json!([result.key, result.call, result.outcome, result.output]);
        let hash: [u8; 32] = Sha256::digest(line.to_string().as_bytes()).into();
        for (lane, bytes) in self.lanes.iter_mut().zip(hash.chunks_exact(8)) {
            let mut word = [0; 8];
            word.copy_from_slice(bytes);
            *lane = lane.wrapping_add(u64::from_le_bytes(word));
        }
    }

    /// The digest, as 16 hex digits (enough to tell one set of results from another).
    pub(crate) fn short(&self) -> String {
        format!("{:016x}", self.lanes.iter().fold(0, |a: u64, l| a ^ l))
    }
}

/// An item's output and error from how its agent stopped and its final text: a typed
/// answer is its JSON value, any other the text; a stop other than `Done` is the error.
pub(crate) fn output_of(stop: &StopKind, text: &str, typed: bool) -> (Value, Option<String>) {
    ItemResult::output_of(stop, text, typed)
}

impl ItemResult {
    /// An item's output and error from how its agent `stop`ped and its final `text`: a
    /// `typed` answer is its JSON value, any other the text; a stop other than `Done` is
    /// the error (for a driver other than cadre-core's, too).
    pub fn output_of(stop: &StopKind, text: &str, typed: bool) -> (Value, Option<String>) {
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
}
