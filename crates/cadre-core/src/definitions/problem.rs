//! What is wrong with a definition, and where: the [`Problem`]s loading reports, the
//! places in a file they point at, and the rules of a name.

use std::fmt;
use std::path::{Path, PathBuf};

/// A problem found in an agent or skill file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, 0 when unknown.
    pub line: usize,
    /// 1-based column, 0 when unknown.
    pub column: usize,
    /// What is wrong and what was expected.
    pub message: String,
    /// Whether loading can go on without fixing it (a dropped tool, say).
    pub warning: bool,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.warning { "warning" } else { "error" };
        write!(
            f,
            "{}:{}:{}: {kind}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

impl Problem {
    /// An error at `line:column` of `file`.
    pub fn at(file: &Path, (line, column): (usize, usize), message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line,
            column,
            message: message.into(),
            warning: false,
        }
    }

    /// A warning at `line:column` of `file`: reported, but loading goes on.
    pub fn warning_at(
        file: &Path,
        (line, column): (usize, usize),
        message: impl Into<String>,
    ) -> Self {
        Self {
            warning: true,
            ..Self::at(file, (line, column), message)
        }
    }
}

/// Whether `name` is a valid agent or skill name: 1–64 chars of `[a-z0-9-]`, no leading,
/// trailing or doubled hyphen.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// What is wrong with `name` as an agent or skill name, if anything: `Err` when it cannot
/// be used (empty, or holding whitespace, `/` or control characters), `Ok(Some(warning))`
/// when it is used as written but is not `[a-z0-9-]` (a dot, a capital, an underscore).
pub fn check_name(name: &str) -> Result<Option<String>, String> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(format!(
            "bad name {name:?}: a name must not be empty nor hold spaces, `/` or control characters"
        ));
    }
    Ok((!valid_name(name)).then(|| {
        format!(
            "name {name:?} is used as written, but names are usually 1–64 characters of a-z, 0-9 and single inner hyphens"
        )
    }))
}

/// Where `needle` first appears in `text` at or after the line that starts with `key:`,
/// as 1-based (line, column); the key's own line when the needle is not found.
pub fn locate(text: &str, key: &str, needle: Option<&str>) -> (usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.starts_with(':'))
        })
        .unwrap_or(0);
    if let Some(needle) = needle.filter(|n| !n.is_empty()) {
        for (i, line) in lines.iter().enumerate().skip(start) {
            if let Some(col) = line.find(needle) {
                return (i + 1, line[..col].chars().count() + 1);
            }
        }
    }
    let col = lines
        .get(start)
        .map_or(0, |l| l.len() - l.trim_start().len());
    (start + 1, col + 1)
}

/// Places a problem in a file: at a key (spelled as in the file) and an optional needle
/// after it, as a 1-based (line, column).
pub(crate) type Locator<'a> = dyn Fn(&str, Option<&str>) -> (usize, usize) + 'a;

/// The problems of one file, each placed by a [`Locator`] at the key it is about.
pub(crate) struct Report<'a> {
    /// The file.
    pub(crate) file: &'a Path,
    /// Places a key (and a needle after it) in the file.
    pub(crate) at: &'a Locator<'a>,
    /// Where problems go.
    pub(crate) problems: &'a mut Vec<Problem>,
}

impl Report<'_> {
    /// A warning (`warning`) or an error at `key`, at `needle` after it when given.
    pub(crate) fn push(&mut self, warning: bool, key: &str, needle: Option<&str>, msg: String) {
        let at = (self.at)(key, needle);
        self.problems.push(if warning {
            Problem::warning_at(self.file, at, msg)
        } else {
            Problem::at(self.file, at, msg)
        });
    }
}
