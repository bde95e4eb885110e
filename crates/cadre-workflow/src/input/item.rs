//! One item of a workflow's input, or why it is bad input.

use serde_json::Value;
use std::path::PathBuf;

/// One item of the input.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Its place among the items, bad ones counted, from 0.
    pub position: u64,
    /// The line it starts on (from 1), for the formats that have lines.
    pub line: Option<u64>,
    /// What names it: its `key` field, else its position.
    pub key: String,
    /// The item itself.
    pub value: Value,
}

/// An item that is bad input: its outcome is `failed: bad input`.
#[derive(Debug, thiserror::Error)]
#[error("item {position}{}: {why}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
pub struct ItemError {
    /// Its place among the items, from 0.
    pub position: u64,
    /// The line it starts on, if the format has lines.
    pub line: Option<u64>,
    /// What is wrong with it.
    pub why: BadItem,
}

/// What is wrong with a bad item.
#[derive(Debug, thiserror::Error)]
pub enum BadItem {
    /// It is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A CSV row cannot be read (a field count unlike the header's, bad UTF-8).
    #[error("bad CSV row: {0}")]
    Csv(#[source] csv::Error),
    /// It has no `key` field, or an empty one.
    #[error("no `{field}` field to name it by")]
    MissingKey {
        /// The key field.
        field: String,
    },
    /// Its `key` field is not a string or a number.
    #[error("its `{field}` field is {found}, not a string or a number")]
    KeyNotScalar {
        /// The key field.
        field: String,
        /// What the field holds.
        found: Value,
    },
    /// An earlier item has the same key.
    #[error("duplicate key {key:?}: item {first} has it too")]
    DuplicateKey {
        /// The key.
        key: String,
        /// The position of the first item with it.
        first: u64,
    },
    /// A file of a glob cannot be read as text.
    #[error("cannot read {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The input broke off (a read error, an unterminated array): no item follows.
    #[error("the input cannot be read further: {0}")]
    Broken(#[source] std::io::Error),
}

/// What a format's reader yields: an item's line and value, or its line and fault.
pub(crate) type Raw = Result<(Option<u64>, Value), (Option<u64>, BadItem)>;
