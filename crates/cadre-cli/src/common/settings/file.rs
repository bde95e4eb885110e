//! One cadre settings file, read: its values checked where the file and line are known.

use crate::args::{parse_compact_at, Source};
use crate::common::claude_settings::read_if_present;
use crate::common::exit::CliError;
use crate::common::table;
use cadre_core::internal::{HooksCheck, HOOK_REFUSED};
use cadre_core::{Hooks, PermissionMode};
use std::collections::BTreeMap;
use std::path::Path;
use toml::de::{DeTable, DeValue};

/// The project's settings file, at its root.
pub const PROJECT_FILE: &str = "cadre.toml";

/// The user's settings file, in their cadre folder (`~/.config/cadre/`).
pub const USER_FILE: &str = "config.toml";

/// Every setting a file may hold, by its dotted name, as the table of settings declares.
pub fn known_keys() -> impl Iterator<Item = &'static str> {
    table::file_keys()
}

/// One value as a file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Text(String),
    Number(u64),
    CompactAt(Option<u64>),
    List(Vec<String>),
    Mode(PermissionMode),
    Flag(bool),
}

/// One settings file, read.
#[derive(Debug, Clone)]
pub struct SettingsFile {
    /// How it is named in messages.
    pub label: String,
    /// Whether it exists.
    pub found: bool,
    pub(super) values: BTreeMap<&'static str, (Value, usize)>,
    /// Keys cadre does not know and hooks it cannot run, as warnings (`file:line: …`).
    pub unknown: Vec<String>,
    /// Its `[hooks]` table, each hook naming this file as its source.
    pub hooks: Hooks,
}

impl SettingsFile {
    /// No file: nothing set.
    pub fn empty() -> Self {
        Self {
            label: String::new(),
            found: false,
            values: BTreeMap::new(),
            unknown: Vec::new(),
            hooks: Hooks::default(),
        }
    }

    /// Reads `path`, named `label` in messages. A missing file is an empty one; a file
    /// that is not TOML, or a value of the wrong kind, is an error naming the line.
    pub fn read(path: &Path, label: String) -> Result<Self, CliError> {
        let mut file = Self {
            label,
            found: false,
            values: BTreeMap::new(),
            unknown: Vec::new(),
            hooks: Hooks::default(),
        };
        let Some(text) = read_if_present(path, &file.label)? else {
            return Ok(file);
        };
        file.found = true;
        let doc = DeTable::parse(&text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(&text, s.start));
            CliError::config(format!(
                "{}:{line}: not valid TOML: {}",
                file.label,
                e.message().trim()
            ))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        file.walk(doc.get_ref(), "", &text, dir)?;
        if let Some((key, _)) = doc.get_ref().get_key_value("hooks") {
            check_hooks(&file.label, &text)?;
            file.read_hooks(&text, line_of(&text, key.span().start))?;
        }
        Ok(file)
    }

    /// Reads the `[hooks]` table (at `line`) as Claude Code's `hooks` object; a table that
    /// cannot be read refuses the file (a guard fails closed).
    fn read_hooks(&mut self, text: &str, line: usize) -> Result<(), CliError> {
        // Read again as plain data: the table has Claude Code's JSON shape.
        let doc: serde_json::Value = toml::from_str(text).map_err(|e| {
            CliError::config(format!(
                "{}:{line}: {HOOK_REFUSED}: {}",
                self.label,
                e.message().trim()
            ))
        })?;
        let (hooks, warnings) = Hooks::from_json(&doc["hooks"], &self.label);
        self.hooks = hooks;
        let label = &self.label;
        self.unknown
            .extend(warnings.into_iter().map(|w| format!("{label}:{line}: {w}")));
        Ok(())
    }

    fn walk(
        &mut self,
        table: &DeTable,
        prefix: &str,
        text: &str,
        dir: &Path,
    ) -> Result<(), CliError> {
        for (key, value) in table.iter() {
            let line = line_of(text, key.span().start);
            // Liberal: `max-parallel` is `max_parallel`, `Model` is `model`.
            let name = key.get_ref().trim().to_lowercase().replace('-', "_");
            // Read whole by `read_hooks`, under this exact name alone; another spelling would
            // be a guard read by no one, so it refuses the file.
            if prefix.is_empty() && name == "hooks" {
                if key.get_ref() == "hooks" {
                    continue;
                }
                return Err(CliError::config(format!(
                    "{}:{line}: {HOOK_REFUSED}: `{}` is not read: the table of hooks is spelled `hooks`",
                    self.label,
                    key.get_ref()
                )));
            }
            let full = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}.{name}")
            };
            if let DeValue::Table(inner) = value.get_ref() {
                if prefix.is_empty() && table::file_tables().contains(&full.as_str()) {
                    self.walk(inner, &full, text, dir)?;
                    continue;
                }
            }
            // A limit or compact_at at the top level is taken as if in its table.
            let canonical = known_keys().find(|k| {
                *k == full
                    || (prefix.is_empty()
                        && k.split_once('.').is_some_and(|(t, n)| {
                            n == full && t != "permissions" && t != "telemetry"
                        }))
            });
            let Some(key) = canonical else {
                self.unknown.push(format!(
                    "{}:{line}: unknown setting `{full}` ignored (known: {})",
                    self.label,
                    known_keys().collect::<Vec<_>>().join(", ")
                ));
                continue;
            };
            let line = line_of(text, value.span().start);
            let parsed = parse_value(key, value.get_ref(), dir)
                .map_err(|e| CliError::config(format!("{}:{line}: {key} {e}", self.label)))?;
            self.values.insert(key, (parsed, line));
        }
        Ok(())
    }

    /// Whether the file sets `key`.
    pub fn has(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    pub(super) fn get(&self, key: &str) -> Option<(&Value, Source)> {
        self.values
            .get(key)
            .map(|(v, line)| (v, Source::File(self.label.clone(), *line)))
    }
}

/// Refuses a file whose `[hooks]` hold an entry that cannot load, naming its line and
/// column: a guard that cannot load must not let the command it guards through.
fn check_hooks(label: &str, text: &str) -> Result<(), CliError> {
    toml::from_str::<HooksCheck>(text).map(|_| ()).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        let line = line_of(text, at);
        let start = text
            .get(..at)
            .and_then(|t| t.rfind('\n'))
            .map_or(0, |i| i + 1);
        let column = text.get(start..at).map_or(0, |t| t.chars().count()) + 1;
        CliError::config(format!(
            "{label}:{line}:{column}: {HOOK_REFUSED}: {}",
            e.message().trim()
        ))
    })
}

/// The 1-based line of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at).map_or(0, |t| t.matches('\n').count()) + 1
}

/// What a TOML value says, as text for messages.
fn shown(value: &DeValue) -> String {
    match value {
        DeValue::String(s) => format!("{s:?}"),
        DeValue::Integer(i) => i.to_string(),
        DeValue::Float(f) => f.to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => d.to_string(),
        DeValue::Array(_) => "a list".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// A whole number, written as a TOML integer or (liberally) as a string of digits.
fn number(value: &DeValue) -> Option<u64> {
    match value {
        DeValue::Integer(i) => u64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok(),
        DeValue::String(s) => s.trim().replace(['_', ','], "").parse().ok(),
        _ => None,
    }
}

/// A permission rule, refused here (where the file and line are known) when it is not one.
fn checked_rule(rule: &str) -> Result<String, String> {
    cadre_core::Rule::parse(rule)
        .map(|_| rule.trim().to_owned())
        .map_err(|e| e.why)
}

/// Checks and converts the value of `key`; the error reads after "`file:line: key`".
fn parse_value(key: &str, value: &DeValue, dir: &Path) -> Result<Value, String> {
    match key {
        "model" | "base_url" => text(value).map(Value::Text),
        "permissions.mode" => text(value)?.parse().map(Value::Mode),
        "provider" => provider(value),
        "mcp_config" => mcp_config(value, dir),
        "compaction.compact_at" => compact_at(value),
        "mcp.allow_env" => variable_names(value),
        "permissions.allow" | "permissions.deny" => rules(value),
        _ if key.starts_with("telemetry.") => telemetry(key, value),
        _ => limit(key, value),
    }
}

/// A `[telemetry]` value, written as its `OTEL_*` variable would hold it.
fn telemetry(key: &str, value: &DeValue) -> Result<Value, String> {
    match key {
        "telemetry.endpoint" => {
            let url = text(value)?;
            if url.starts_with("http://") || url.starts_with("https://") {
                Ok(Value::Text(url))
            } else {
                Err(format!(
                    "must be an http:// or https:// URL, not {}",
                    shown(value)
                ))
            }
        }
        "telemetry.protocol" => {
            let p = text(value)?;
            if matches!(p.as_str(), "http/protobuf" | "http/json" | "grpc") {
                Ok(Value::Text(p))
            } else {
                Err(format!(
                    "must be \"http/protobuf\", \"http/json\" or \"grpc\", not {}",
                    shown(value)
                ))
            }
        }
        "telemetry.headers" | "telemetry.resource_attributes" => key_values(value),
        "telemetry.service_name" => text(value).map(Value::Text),
        _ => match value {
            DeValue::Boolean(b) => Ok(Value::Flag(*b)),
            _ => Err(format!("must be true or false, not {}", shown(value))),
        },
    }
}

/// `key=value` pairs, as a table of strings or as the variable's `k=v,k2=v2` text; kept
/// as that text, each part percent-encoded where a table's value holds `,` `=` or `%`.
fn key_values(value: &DeValue) -> Result<Value, String> {
    const SPECIAL: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b',')
        .add(b'=')
        .add(b'%')
        .add(b' ');
    let encode = |s: &str| percent_encoding::utf8_percent_encode(s, SPECIAL).to_string();
    match value {
        DeValue::String(s) if s.contains('=') => Ok(Value::Text(s.trim().to_owned())),
        DeValue::Table(table) => table
            .iter()
            .map(|(k, v)| match v.get_ref() {
                DeValue::String(v) => Ok(format!("{}={}", encode(k.get_ref()), encode(v))),
                other => Err(format!(
                    "must be a table of strings; {} = {} is not one",
                    k.get_ref(),
                    shown(other)
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|pairs| Value::Text(pairs.join(","))),
        other => Err(format!(
            "must be a table of strings or \"key=value,…\", not {}",
            shown(other)
        )),
    }
}

/// A non-empty string, trimmed.
fn text(value: &DeValue) -> Result<String, String> {
    match value {
        DeValue::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(format!("must be a non-empty string, not {}", shown(value))),
    }
}

/// `provider`: "anthropic" or "openai", in any case.
fn provider(value: &DeValue) -> Result<Value, String> {
    let p = text(value)?.to_lowercase();
    if matches!(p.as_str(), "anthropic" | "openai") {
        Ok(Value::Text(p))
    } else {
        Err(format!(
            "must be \"anthropic\" or \"openai\", not {}",
            shown(value)
        ))
    }
}

/// `mcp_config`: a file that exists, relative to the settings file's folder `dir`.
fn mcp_config(value: &DeValue, dir: &Path) -> Result<Value, String> {
    let path = dir.join(text(value)?);
    if path.is_file() {
        Ok(Value::Text(path.to_string_lossy().into_owned()))
    } else {
        Err(format!("names {}: no such file", path.display()))
    }
}

/// `compaction.compact_at`: a number of input tokens, or "off" (or `false`).
fn compact_at(value: &DeValue) -> Result<Value, String> {
    let written = match value {
        DeValue::Boolean(false) => "off".to_owned(),
        DeValue::String(s) => s.to_string(),
        _ => number(value).map(|n| n.to_string()).ok_or_else(|| {
            format!(
                "must be a number of input tokens or \"off\", not {}",
                shown(value)
            )
        })?,
    };
    parse_compact_at(&written).map(|c| Value::CompactAt(c.0))
}

/// `mcp.allow_env`: a list of environment variable names.
fn variable_names(value: &DeValue) -> Result<Value, String> {
    match value {
        DeValue::Array(items) => items
            .iter()
            .map(|item| match item.get_ref() {
                DeValue::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                other => Err(format!(
                    "must be a list of environment variable names; {} is not one",
                    shown(other)
                )),
            })
            .collect::<Result<_, _>>()
            .map(Value::List),
        other => Err(format!(
            "must be a list of environment variable names, not {}",
            shown(other)
        )),
    }
}

/// `permissions.allow` or `permissions.deny`: a list of rules, each checked.
fn rules(value: &DeValue) -> Result<Value, String> {
    match value {
        // Liberal: one rule may be written without the list around it.
        DeValue::String(s) => Ok(Value::List(vec![checked_rule(s)?])),
        DeValue::Array(items) => items
            .iter()
            .map(|item| match item.get_ref() {
                DeValue::String(s) => checked_rule(s),
                other => Err(format!(
                    "must be a list of strings; {} is not one",
                    shown(other)
                )),
            })
            .collect::<Result<_, _>>()
            .map(Value::List),
        other => Err(format!("must be a list of strings, not {}", shown(other))),
    }
}

/// A limit (`limits.*`): a whole number in the range `key` allows.
fn limit(key: &str, value: &DeValue) -> Result<Value, String> {
    let (least, most) = match key {
        "limits.max_depth" => (0, u64::from(u32::MAX)),
        "limits.max_turns" | "limits.max_tokens" => (1, u64::from(u32::MAX)),
        _ => (1, u64::MAX),
    };
    match number(value) {
        Some(n) if (least..=most).contains(&n) => Ok(Value::Number(n)),
        _ => Err(format!(
            "must be a whole number from {least} to {most}, not {}",
            shown(value)
        )),
    }
}

impl Value {
    /// The value as text, for listings.
    pub(super) fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Number(n) => n.to_string(),
            Self::CompactAt(c) => c.map_or_else(|| "off".to_owned(), |n| n.to_string()),
            Self::List(l) => l.join(", "),
            Self::Mode(m) => m.to_string(),
            Self::Flag(b) => b.to_string(),
        }
    }
}
