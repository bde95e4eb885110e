//! Typed fields read out of a front matter mapping (a skill's, a Claude Code agent file's),
//! a problem recorded for each bad one.

use crate::definitions::frontmatter;
use crate::definitions::problem::Problem;
use crate::definitions::yaml::{Mapping, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub(crate) fn key_text(key: &Value) -> String {
    scalar_text(key).unwrap_or_else(|| format!("{key:?}"))
}

/// A scalar as text (`1.0`, `true`); `None` for lists, maps and tagged values.
pub(crate) fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

/// Splits `Read, Bash(git diff:*) Grep` into names on commas and whitespace, except inside
/// parentheses, where a permission pattern may hold both.
pub(crate) fn split_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c == ',' || c.is_whitespace()) {
            if !current.is_empty() {
                names.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        names.push(current);
    }
    names
}

/// Reads typed fields out of a front matter mapping, recording a problem for each bad one.
pub(crate) struct Fields<'a> {
    /// The file, for problems.
    pub file: &'a Path,
    /// The front matter text, for positions.
    pub yaml: &'a str,
    /// The parsed front matter.
    pub map: &'a Mapping,
    /// Where problems go.
    pub problems: &'a mut Vec<Problem>,
}

impl Fields<'_> {
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn error(&mut self, key: &str, message: String) {
        let pos = frontmatter::locate(self.yaml, key, None);
        self.problems.push(Problem::at(self.file, pos, message));
    }

    /// A string field; absent or null is `None`, another type is an error.
    pub fn string(&mut self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.error(key, format!("{key} must be text"));
                None
            }
        }
    }

    /// A whole number field.
    pub fn number(&mut self, key: &str) -> Option<u64> {
        let v = self.get(key)?;
        match v.as_u64() {
            Some(n) => Some(n),
            None => {
                self.error(key, format!("{key} must be a whole number"));
                None
            }
        }
    }

    /// A yes/no field (`true`, `false`, or those words as text).
    pub fn boolean(&mut self, key: &str) -> Option<bool> {
        match self.get(key)? {
            Value::Bool(b) => Some(*b),
            Value::String(s) if matches!(s.trim(), "true" | "yes") => Some(true),
            Value::String(s) if matches!(s.trim(), "false" | "no") => Some(false),
            _ => {
                self.error(key, format!("{key} must be true or false"));
                None
            }
        }
    }

    /// A list of names, written as a YAML list or as one string split on whitespace (the
    /// Agent Skills way) or commas (the Claude Code way).
    pub fn words(&mut self, key: &str) -> Vec<String> {
        let Some(v) = self.get(key).cloned() else {
            return Vec::new();
        };
        match v {
            Value::String(s) => split_names(&s),
            Value::Sequence(items) => {
                let mut out = Vec::new();
                for item in items {
                    match item {
                        Value::String(s) if !s.trim().is_empty() => out.push(s.trim().to_owned()),
                        _ => self.error(key, format!("{key} must be a list of names")),
                    }
                }
                out
            }
            _ => {
                self.error(
                    key,
                    format!("{key} must be a list of names or one string of names"),
                );
                Vec::new()
            }
        }
    }

    /// Whether `key` is present (even as null).
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// `metadata`: a map of text to text; numbers and booleans are kept as text, other
    /// values are dropped with a warning.
    pub(crate) fn metadata(&mut self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(v) = self.get("metadata").cloned() else {
            return out;
        };
        let Value::Mapping(map) = v else {
            self.error("metadata", "metadata must be a map of keys to text".into());
            return out;
        };
        for (k, v) in map {
            let key = key_text(&k);
            match scalar_text(&v) {
                Some(text) => {
                    out.insert(key, text);
                }
                None => {
                    let pos = frontmatter::locate(self.yaml, "metadata", Some(&key));
                    self.problems.push(Problem::warning_at(
                        self.file,
                        pos,
                        format!("metadata {key:?} ignored: values must be text"),
                    ));
                }
            }
        }
        out
    }
}
