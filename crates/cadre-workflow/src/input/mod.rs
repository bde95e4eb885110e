//! A workflow's input, read as a stream: one [`Item`] (or [`ItemError`]) at a time, so a
//! million-line file is never held whole. A bad item is that item's outcome; the items
//! after it are read as usual.

mod files;
pub(crate) mod item;
mod json_array;
mod readers;

pub(crate) use item::Raw;
pub use item::{BadItem, Item, ItemError};

use crate::error::WorkflowError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How an input is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// JSON Lines: one JSON value per line (blank lines skipped).
    Jsonl,
    /// CSV with a header row: each row an object of strings, by the header's names.
    Csv,
    /// One JSON array: each element an item.
    Json,
    /// A glob of files: each file an item `{path, name, text}`.
    Files,
}

impl InputFormat {
    /// The format `input`'s name tells: a glob is files, else by extension.
    pub fn of(input: &str) -> Option<Self> {
        if input.contains(['*', '?', '[', '{']) {
            return Some(Self::Files);
        }
        let ext = Path::new(input).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "csv" => Some(Self::Csv),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    /// Its name, as `format:` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Csv => "csv",
            Self::Json => "json",
            Self::Files => "files",
        }
    }
}

impl std::str::FromStr for InputFormat {
    type Err = WorkflowError;

    fn from_str(s: &str) -> Result<Self, WorkflowError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "jsonl" | "ndjson" => Ok(Self::Jsonl),
            "csv" => Ok(Self::Csv),
            "json" => Ok(Self::Json),
            "files" | "glob" => Ok(Self::Files),
            _ => Err(WorkflowError::BadFormat {
                format: s.to_owned(),
            }),
        }
    }
}

/// Where the items come from and how they are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// The input as written.
    pub written: String,
    /// The file, or the glob, resolved against the project root.
    pub path: PathBuf,
    /// Its format.
    pub format: InputFormat,
    /// What a file item's `path` is relative to (the project root).
    pub base: PathBuf,
}

impl InputSpec {
    /// The input `written` (relative to `base`), in `format` or the one its name tells.
    pub fn new(
        written: &str,
        format: Option<InputFormat>,
        base: &Path,
    ) -> Result<Self, WorkflowError> {
        let format = format.or_else(|| InputFormat::of(written)).ok_or_else(|| {
            WorkflowError::UnknownFormat {
                input: written.to_owned(),
            }
        })?;
        Ok(Self {
            written: written.to_owned(),
            path: base.join(written),
            format,
            base: base.to_path_buf(),
        })
    }
}

/// The items of an input, read one at a time; keys are checked as they come (only the
/// keys seen are remembered, for duplicates).
pub struct Items {
    raw: Box<dyn Iterator<Item = Raw> + Send>,
    key: Option<String>,
    next_position: u64,
    seen: HashMap<String, u64>,
}

impl std::fmt::Debug for Items {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items")
            .field("key", &self.key)
            .field("next_position", &self.next_position)
            .finish_non_exhaustive()
    }
}

impl Items {
    /// Opens `spec`'s input; items are named by their `key` field, else by position.
    pub fn open(spec: &InputSpec, key: Option<&str>) -> Result<Self, WorkflowError> {
        let raw: Box<dyn Iterator<Item = Raw> + Send> = match spec.format {
            InputFormat::Jsonl => Box::new(readers::jsonl(open(&spec.path)?)),
            InputFormat::Json => Box::new(json_array::JsonArray::new(open(&spec.path)?)),
            InputFormat::Csv => Box::new(readers::csv_rows(open(&spec.path)?)),
            InputFormat::Files => Box::new(files::glob(&spec.path, &spec.written, &spec.base)?),
        };
        Ok(Self::from_raw(raw, key))
    }

    /// Items from a format's reader.
    pub(crate) fn from_raw(raw: Box<dyn Iterator<Item = Raw> + Send>, key: Option<&str>) -> Self {
        Self {
            raw,
            key: key.map(str::to_owned),
            next_position: 0,
            seen: HashMap::new(),
        }
    }

    /// The key of `value` at `position`, or why it has none.
    fn key_of(&mut self, value: &Value, position: u64) -> Result<String, BadItem> {
        let Some(field) = &self.key else {
            return Ok(position.to_string());
        };
        let key = match value.get(field) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            None | Some(Value::Null) | Some(Value::String(_)) => {
                return Err(BadItem::MissingKey {
                    field: field.clone(),
                })
            }
            Some(other) => {
                return Err(BadItem::KeyNotScalar {
                    field: field.clone(),
                    found: other.clone(),
                })
            }
        };
        if let Some(&first) = self.seen.get(&key) {
            return Err(BadItem::DuplicateKey { key, first });
        }
        self.seen.insert(key.clone(), position);
        Ok(key)
    }
}

impl Iterator for Items {
    type Item = Result<Item, ItemError>;

    fn next(&mut self) -> Option<Self::Item> {
        let raw = self.raw.next()?;
        let position = self.next_position;
        self.next_position += 1;
        Some(match raw {
            Err((line, why)) => Err(ItemError {
                position,
                line,
                why,
            }),
            Ok((line, value)) => match self.key_of(&value, position) {
                Ok(key) => Ok(Item {
                    position,
                    line,
                    key,
                    value,
                }),
                Err(why) => Err(ItemError {
                    position,
                    line,
                    why,
                }),
            },
        })
    }
}

/// Opens an input file, or says which cannot be opened.
fn open(path: &Path) -> Result<std::fs::File, WorkflowError> {
    std::fs::File::open(path).map_err(|source| WorkflowError::InputOpen {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
