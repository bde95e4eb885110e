//! YAML front matter at the top of a Markdown file (`SKILL.md`, Claude Code agent files):
//! the lines between an opening `---` line and the next `---` line.

use crate::definitions::yaml::without_positions;
use std::io::BufRead;

/// The most front matter read before giving up, so a file missing its closing line is not
/// read whole into memory.
pub const MAX_FRONT_MATTER_BYTES: usize = 64 * 1024;

/// Why a file's front matter could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrontMatterError {
    /// The first line is not `---`.
    #[error("missing front matter: the file must start with a line `---`, then YAML (name, description, …), then a line `---`")]
    Missing,
    /// No closing `---` line.
    #[error("the front matter is not closed: no `---` line after the opening one")]
    Unclosed,
    /// The front matter is larger than [`MAX_FRONT_MATTER_BYTES`].
    #[error("the front matter is longer than {MAX_FRONT_MATTER_BYTES} bytes")]
    TooLong,
    /// Reading failed (including text that is not UTF-8).
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads the front matter from the start of `reader` and returns its YAML text, leaving the
/// reader at the first line of the body. Line `n` of the YAML is line `n + 1` of the file.
///
/// Only the front matter is read, so a loader can list many files without reading their
/// bodies; reading on from the same reader gives the body.
pub fn read_front_matter<R: BufRead>(reader: &mut R) -> Result<String, FrontMatterError> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // A byte-order mark is invisible in editors; tolerate it rather than report it.
    if !is_delimiter(line.trim_start_matches('\u{feff}')) {
        return Err(FrontMatterError::Missing);
    }
    let mut yaml = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(FrontMatterError::Unclosed);
        }
        if is_delimiter(&line) {
            return Ok(yaml);
        }
        if yaml.len() + line.len() > MAX_FRONT_MATTER_BYTES {
            return Err(FrontMatterError::TooLong);
        }
        yaml.push_str(&line);
    }
}

/// Splits a whole file's `text` into its front matter YAML and its body.
pub fn split(text: &str) -> Result<(String, &str), FrontMatterError> {
    let mut reader = text.as_bytes();
    let yaml = read_front_matter(&mut reader)?;
    // `reader` now holds the bytes after the closing line, which end on a char boundary.
    let body = &text[text.len() - reader.len()..];
    Ok((yaml, body))
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end() == "---"
}

/// Where a YAML parse error is, as a 1-based (line, column) of the whole file, and the
/// message without the YAML reader's own copy of the position.
pub fn yaml_error(e: &crate::definitions::yaml::Error) -> ((usize, usize), String) {
    let pos = e.location().map_or((1, 1), |l| (l.line() + 1, l.column()));
    (pos, without_positions(&e.to_string()))
}

/// Where `needle` (or else `key`) is in the front matter `yaml`, as a 1-based (line, column)
/// of the whole file; the opening `---` line when the key is absent.
pub fn locate(yaml: &str, key: &str, needle: Option<&str>) -> (usize, usize) {
    let has_key = yaml.lines().any(|l| {
        l.trim_start()
            .strip_prefix(key)
            .is_some_and(|r| r.starts_with(':'))
    });
    if !has_key {
        return (1, 1);
    }
    let (line, column) = crate::definitions::problem::locate(yaml, key, needle);
    (line + 1, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_front_matter_and_body() {
        let (yaml, body) = split("---\nname: a\ndescription: b\n---\n# Title\nText\n").unwrap();
        assert_eq!(yaml, "name: a\ndescription: b\n");
        assert_eq!(body, "# Title\nText\n");
    }

    #[test]
    fn handles_crlf_bom_and_an_empty_body() {
        let (yaml, body) = split("\u{feff}---\r\nname: a\r\n---\r\n").unwrap();
        assert_eq!(yaml, "name: a\r\n");
        assert_eq!(body, "");
        let (yaml, body) = split("---\n---\nbody").unwrap();
        assert_eq!(yaml, "");
        assert_eq!(body, "body");
    }

    #[test]
    fn reports_missing_and_unclosed_front_matter() {
        assert!(matches!(split("# no"), Err(FrontMatterError::Missing)));
        assert!(matches!(split(""), Err(FrontMatterError::Missing)));
        assert!(matches!(
            split("---\nname: a\n"),
            Err(FrontMatterError::Unclosed)
        ));
        let huge = format!("---\n{}", "a: b\n".repeat(20_000));
        assert!(matches!(split(&huge), Err(FrontMatterError::TooLong)));
    }

    #[test]
    fn stops_reading_at_the_closing_line() {
        let text = "---\nname: a\n---\nBODY\n";
        let mut reader = std::io::BufReader::new(text.as_bytes());
        assert_eq!(read_front_matter(&mut reader).unwrap(), "name: a\n");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
        assert_eq!(rest, "BODY\n");
    }

    #[test]
    fn positions_are_lines_of_the_file() {
        let yaml = "name: a\ndescription: [x\n";
        let e = crate::definitions::yaml::from_str::<crate::definitions::yaml::Value>(yaml)
            .unwrap_err();
        let ((line, _), msg) = yaml_error(&e);
        assert_eq!(line, 4, "{msg}");
        assert_eq!(
            msg,
            "did not find expected ',' or ']', while parsing a flow sequence"
        );
        assert_eq!(
            locate("name: a\ntools: [x, y]\n", "tools", Some("y")),
            (3, 12)
        );
        assert_eq!(locate("name: a\n", "description", None), (1, 1));
    }
}
