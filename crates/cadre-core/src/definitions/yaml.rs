//! The one forgiving YAML reader used by cadre's agent files, Claude Code agent files and
//! `SKILL.md` front matter alike.
//!
//! Strict YAML first. Files written for Claude Code are often not strict YAML (an unquoted
//! `: ` inside a description is the usual case), and Claude Code reads them anyway; so on a
//! syntax error the text is read again line by line as `key: value` entries, and every
//! repair is reported as a warning with its position.

use crate::definitions::problem::Problem;
use std::path::Path;

// The YAML crate is named here alone; the rest of cadre reaches it through this module.
pub use yaml_serde::{from_str, to_string, Error, Mapping, Value};

/// Reads `yaml`, whose first line is line `first_line` of `file`. Strict YAML comes back
/// as is; text that is not strict YAML but reads as top-level `key: value` entries comes
/// back as a mapping with one warning per repair. The strict error is returned when the
/// text cannot be repaired (no keys at all, or a broken `[…]`/`{…}` collection, whose
/// meaning cannot be guessed).
pub fn read(file: &Path, yaml: &str, first_line: usize) -> Result<(Value, Vec<Problem>), Error> {
    let strict = match from_str::<Value>(yaml) {
        Ok(value) => return Ok((value, Vec::new())),
        Err(e) => e,
    };
    let at = |line: usize, column: usize| (line + first_line, column);
    let Some((map, repairs)) = line_by_line(yaml) else {
        return Err(strict);
    };
    let mut problems: Vec<Problem> = repairs
        .into_iter()
        .map(|r| Problem::warning_at(file, at(r.line, r.column), r.message))
        .collect();
    if problems.is_empty() {
        // Every entry parses alone, yet the whole does not (an alias across entries, say):
        // still say that the file was read loosely.
        let (line, column) = strict
            .location()
            .map_or((0, 1), |l| (l.line().saturating_sub(1), l.column()));
        problems.push(Problem::warning_at(
            file,
            at(line, column),
            format!(
                "not strict YAML ({}): read line by line",
                without_positions(&strict.to_string())
            ),
        ));
    }
    Ok((Value::Mapping(map), problems))
}

/// One repair, at a 0-based line and 1-based column of the YAML text.
struct Repair {
    line: usize,
    column: usize,
    message: String,
}

/// One top-level entry: its key, the line it starts on, and its lines (the key's own line,
/// then every line that continues it).
struct Entry<'a> {
    key: &'a str,
    line: usize,
    lines: Vec<&'a str>,
}

/// `key` and the text after `key:` when `line` starts a top-level entry
/// (`^[A-Za-z_][A-Za-z0-9_-]*:` followed by a space or the end of the line).
fn top_key(line: &str) -> Option<(&str, &str)> {
    let first = line.chars().next()?;
    if !(first.is_ascii_alphabetic() || first == '_') {
        return None;
    }
    let end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))?;
    let rest = line[end..].strip_prefix(':')?;
    (rest.is_empty() || rest.starts_with([' ', '\t', '\r'])).then(|| (&line[..end], rest))
}

/// Reads `yaml` as top-level entries. Each entry is parsed alone as strict YAML first, so
/// block scalars, lists and nested maps that are fine keep their meaning; only the entries
/// that fail are read as plain text (or a list of `- item` lines, or a `[a, b]` list).
fn line_by_line(yaml: &str) -> Option<(Mapping, Vec<Repair>)> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut repairs = Vec::new();
    for (i, line) in yaml.lines().enumerate() {
        if let Some((key, _)) = top_key(line) {
            entries.push(Entry {
                key,
                line: i,
                lines: vec![line],
            });
        } else if line.starts_with('#') || matches!(line.trim_end(), "---" | "...") {
            // A comment or a document marker between entries.
        } else if let Some(entry) = entries.last_mut() {
            // Indented lines continue the entry; so do unindented ones that are no key
            // (a description's second paragraph written flush left).
            entry.lines.push(line);
        } else if !line.trim().is_empty() {
            repairs.push(Repair {
                line: i,
                column: 1,
                message: "line ignored: it is not `key: value` and comes before the first key"
                    .into(),
            });
        }
    }
    if entries.is_empty() {
        return None;
    }
    let mut map = Mapping::new();
    for entry in entries {
        let value = match parse_alone(&entry) {
            Ok(value) => value,
            Err(reason) => {
                let (value, column) = repair(&entry)?;
                repairs.push(Repair {
                    line: entry.line,
                    column,
                    message: format!(
                        "not strict YAML ({reason}): read line by line; quote the value of `{}`",
                        entry.key
                    ),
                });
                value
            }
        };
        let key = Value::String(entry.key.to_owned());
        if map.insert(key, value).is_some() {
            repairs.push(Repair {
                line: entry.line,
                column: 1,
                message: format!("`{}` is given twice; the last one is used", entry.key),
            });
        }
    }
    Some((map, repairs))
}

/// The entry's value when the entry alone is strict YAML, else why not.
fn parse_alone(entry: &Entry) -> Result<Value, String> {
    let text = entry.lines.join("\n") + "\n";
    match from_str::<Value>(&text) {
        Ok(Value::Mapping(mut map)) if map.len() == 1 => map
            .remove(entry.key)
            .ok_or_else(|| "a key YAML reads differently".into()),
        Ok(_) => Err("not one `key: value` entry".into()),
        Err(e) => Err(without_positions(&e.to_string())),
    }
}

/// The entry's value read line by line, and the 1-based column where it starts; `None`
/// when it cannot be repaired.
fn repair(entry: &Entry) -> Option<(Value, usize)> {
    let first_line = entry.lines.first().copied().unwrap_or_default();
    let after_key = first_line.get(entry.key.len() + 1..).unwrap_or_default();
    let first = after_key.trim();
    let column = entry.key.chars().count() + 2 + (after_key.len() - after_key.trim_start().len());
    let rest: Vec<&str> = entry.lines[1..]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    let value = if first.starts_with(['[', '{']) {
        let all = std::iter::once(first)
            .chain(rest.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        // A broken flow list is read as its comma-separated items; a broken map is not
        // guessed at.
        let inner = all.strip_prefix('[')?.strip_suffix(']')?;
        Value::Sequence(
            inner
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(unquote(s).to_owned()))
                .collect(),
        )
    } else if first.is_empty() && !rest.is_empty() && rest.iter().all(|l| l.starts_with('-')) {
        Value::Sequence(
            rest.iter()
                .map(|l| Value::String(unquote(l.trim_start_matches('-').trim()).to_owned()))
                .collect(),
        )
    } else if matches!(first.trim_end_matches(['-', '+']), "|" | ">") {
        let sep = if first.starts_with('|') { "\n" } else { " " };
        Value::String(rest.join(sep))
    } else {
        let text = std::iter::once(first)
            .chain(rest.iter().copied())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        Value::String(unquote(&text).to_owned())
    };
    Some((value, column))
}

/// `s` without one pair of matching outer quotes.
fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

/// `message` without the YAML reader's ` at line N column M` parts (the position is reported
/// separately, and relative to the front matter they would be off by one).
pub(crate) fn without_positions(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(i) = rest.find(" at line ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + " at line ".len()..];
        let after = after.trim_start_matches(|c: char| c.is_ascii_digit());
        let after = after.strip_prefix(" column ").map_or(after, |a| {
            a.trim_start_matches(|c: char| c.is_ascii_digit())
        });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_ok(yaml: &str) -> (Mapping, Vec<Problem>) {
        let (value, problems) = read(Path::new("a.md"), yaml, 2).unwrap();
        match value {
            Value::Mapping(map) => (map, problems),
            other => panic!("{other:?}"),
        }
    }

    fn text<'a>(map: &'a Mapping, key: &str) -> &'a str {
        map.get(key).and_then(Value::as_str).unwrap_or_default()
    }

    #[test]
    fn strict_yaml_is_untouched() {
        let (map, problems) = read_ok("name: a\ndescription: \"x: y\"\ntools: [a, b]\n");
        assert!(problems.is_empty());
        assert_eq!(text(&map, "description"), "x: y");
    }

    #[test]
    fn an_unquoted_colon_is_repaired_and_the_rest_keeps_its_meaning() {
        let yaml = "name: stats\ndescription: Use when testing. Triggers on: 'p-value',\n  'regression'\ntools:\n  - Read\n  - Bash\nnotes: |\n  line one\n  line two\nmeta: {a: 1}\n";
        let (map, problems) = read_ok(yaml);
        assert_eq!(
            text(&map, "description"),
            "Use when testing. Triggers on: 'p-value', 'regression'"
        );
        assert_eq!(map["tools"], from_str::<Value>("[Read, Bash]").unwrap());
        assert_eq!(text(&map, "notes"), "line one\nline two\n");
        assert!(map["meta"].is_mapping());
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert!(p.warning);
        assert_eq!((p.line, p.column), (3, 14), "{p}");
        assert!(
            p.message.starts_with("not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`"),
            "{p}"
        );
    }

    #[test]
    fn broken_lists_and_duplicates() {
        let (map, problems) = read_ok("tools: [Read, Bash: x]\nname: a\nname: b\n");
        assert_eq!(map["tools"].as_sequence().map(Vec::len), Some(2));
        assert_eq!(text(&map, "name"), "b");
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages.iter().any(|m| m.contains("given twice")),
            "{messages:?}"
        );
        // A list item holding two `: ` breaks strict YAML; the line reader keeps the item.
        let (map, _) = read_ok("tools:\n  - Read\n  - Grep: a: b\nname: x: y\n");
        assert_eq!(
            map["tools"],
            from_str::<Value>("[Read, 'Grep: a: b']").unwrap()
        );
        assert_eq!(text(&map, "name"), "x: y");
    }

    #[test]
    fn what_cannot_be_repaired_is_the_strict_error() {
        for yaml in [
            "description: [unclosed\nname: a\n",
            "just text: : :\n  - {\n",
            "- a\n- b: c: d\n",
        ] {
            assert!(read(Path::new("a.md"), yaml, 2).is_err(), "{yaml}");
        }
    }
}
