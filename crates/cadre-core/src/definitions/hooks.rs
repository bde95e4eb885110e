//! Hooks as users write them: Claude Code's `hooks` object (`{"PreToolUse": [{"matcher":
//! "Bash|Edit", "hooks": [{"type": "command", "command": "…", "timeout": 60}]}]}`), read
//! from settings files, cadre's own `[hooks]` table and agent files' `hooks:` front matter.
//!
//! Hooks are guards, so they fail closed: [`HooksCheck`] and [`StrictHooks`] read a file's
//! `hooks` strictly, and an entry that cannot load (an unknown event, a matcher that is not
//! a regular expression, an object where a list belongs, a hook of a type cadre does not
//! run) is an error at its place in the file, which refuses the run. [`Hooks::from_json`]
//! then builds the hooks; the only thing it still repairs is a bad timeout.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use crate::vocab::hooks::HookEvent;

/// The timeout of a hook that gives none, in seconds (as in Claude Code).
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 60;

/// One hook command, with the event and matcher it runs for and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// When it runs.
    pub event: HookEvent,
    /// The regular expression over tool names (or agent types, for `SubagentStart` /
    /// `SubagentStop`) it runs for, as written; `None` (or `""`, `*`) runs for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// The shell command run, with the event's JSON on its stdin.
    pub command: String,
    /// Seconds it may take before it is killed.
    pub timeout_secs: u64,
    /// Where it was written (a file's path, or `agent <name>`), for messages and listings.
    pub source: String,
}

/// Every hook that applies to a run or to an agent type, in the order they were read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hooks {
    hooks: Arc<[Hook]>,
}

impl Hooks {
    /// Reads Claude Code's `hooks` object (the value of the `hooks` key) written in
    /// `source`. Returns what loaded and one warning per thing dropped.
    pub fn from_json(value: &Value, source: &str) -> (Self, Vec<String>) {
        let mut hooks = Vec::new();
        let mut warnings = Vec::new();
        let Some(events) = value.as_object() else {
            warnings.push(format!(
                "`hooks` ignored: expected an object of events (PreToolUse, Stop, …), found {}",
                kind(value)
            ));
            return (Self::default(), warnings);
        };
        for (name, groups) in events {
            let Some(event) = HookEvent::parse(name) else {
                warnings.push(format!(
                    "hook event `{name}` ignored: cadre runs {}",
                    HookEvent::ALL.map(HookEvent::name).join(", ")
                ));
                continue;
            };
            let Some(groups) = groups.as_array() else {
                warnings.push(format!(
                    "`hooks.{name}` ignored: expected a list of {{matcher, hooks}}, found {}",
                    kind(groups)
                ));
                continue;
            };
            for group in groups {
                read_group(event, group, source, &mut hooks, &mut warnings);
            }
        }
        (
            Self {
                hooks: hooks.into(),
            },
            warnings,
        )
    }

    /// These hooks followed by `other`'s.
    pub fn merged(&self, other: &Hooks) -> Hooks {
        if other.is_empty() {
            return self.clone();
        }
        if self.is_empty() {
            return other.clone();
        }
        Self {
            hooks: self
                .hooks
                .iter()
                .chain(other.hooks.iter())
                .cloned()
                .collect(),
        }
    }

    /// Whether there are none: a run without hooks does no hook work at all.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Every hook, in the order read.
    pub fn all(&self) -> &[Hook] {
        &self.hooks
    }

    /// The hooks of `event`, in the order read.
    pub fn of(&self, event: HookEvent) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(move |h| h.event == event)
    }
}

impl From<Vec<Hook>> for Hooks {
    fn from(hooks: Vec<Hook>) -> Self {
        Self {
            hooks: hooks.into(),
        }
    }
}

/// Reads one `{matcher, hooks: [...]}` entry of `event`.
fn read_group(
    event: HookEvent,
    group: &Value,
    source: &str,
    hooks: &mut Vec<Hook>,
    warnings: &mut Vec<String>,
) {
    let name = event.name();
    let matcher = match group.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if m.is_empty() || m == "*" => None,
        Some(Value::String(m)) => match regex::Regex::new(m) {
            Ok(_) => Some(m.clone()),
            Err(e) => {
                warnings.push(format!(
                    "a `{name}` entry ignored: its matcher {m:?} is not a regular expression ({})",
                    e.to_string().lines().last().unwrap_or_default().trim()
                ));
                return;
            }
        },
        Some(other) => {
            warnings.push(format!(
                "a `{name}` matcher ignored: expected a regular expression as text, found {}",
                kind(other)
            ));
            return;
        }
    };
    let Some(commands) = group.get("hooks").and_then(Value::as_array) else {
        warnings.push(format!(
            "a `{name}` entry ignored: it has no `hooks` list of {{\"type\": \"command\", \"command\": …}}"
        ));
        return;
    };
    for command in commands {
        let kind_of = command
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("command");
        if kind_of != "command" {
            warnings.push(format!(
                "a `{name}` hook of type `{kind_of}` ignored: cadre runs hooks of type `command`"
            ));
            continue;
        }
        let Some(text) = command.get("command").and_then(Value::as_str) else {
            warnings.push(format!("a `{name}` hook ignored: it has no `command`"));
            continue;
        };
        let timeout_secs = match command.get("timeout") {
            None | Some(Value::Null) => DEFAULT_HOOK_TIMEOUT_SECS,
            Some(t) => match t.as_f64() {
                Some(secs) if secs > 0.0 => secs.ceil() as u64,
                _ => {
                    warnings.push(format!(
                        "a `{name}` hook's timeout {t} ignored: expected seconds above 0; it gets {DEFAULT_HOOK_TIMEOUT_SECS}"
                    ));
                    DEFAULT_HOOK_TIMEOUT_SECS
                }
            },
        };
        hooks.push(Hook {
            event,
            matcher: matcher.clone(),
            command: text.to_owned(),
            timeout_secs,
            source: source.to_owned(),
        });
    }
}

/// The start of the message of a hook entry that cannot load, wherever it is reported.
pub const HOOK_REFUSED: &str = "a hook entry cannot load";

/// A settings document read only for its `hooks` key, strictly: deserializing it (from
/// JSON or TOML text) fails at the first hook entry cadre cannot run, so the error carries
/// that entry's line and column, as a syntax error does. Every other key is left alone.
#[derive(Debug, Deserialize)]
pub struct HooksCheck {
    #[serde(default)]
    #[allow(dead_code)]
    hooks: Option<StrictHooks>,
}

/// Claude Code's `hooks` object, checked strictly (see [`HooksCheck`]); it keeps nothing.
#[derive(Debug)]
pub struct StrictHooks;

impl<'de> Deserialize<'de> for StrictHooks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Events;
        impl<'de> Visitor<'de> for Events {
            type Value = StrictHooks;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of hook events (PreToolUse, Stop, …)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictHooks, A::Error> {
                while let Some(name) = map.next_key::<String>()? {
                    if HookEvent::parse(&name).is_none() {
                        return Err(de::Error::custom(unknown_event(&name)));
                    }
                    map.next_value::<Vec<StrictGroup>>()?;
                }
                Ok(StrictHooks)
            }
        }
        d.deserialize_map(Events)
    }
}

/// What is said of an event cadre does not know, with the one meant when only its case
/// differs (`PreTooluse`).
fn unknown_event(name: &str) -> String {
    let meant = HookEvent::ALL
        .into_iter()
        .find(|e| e.name().eq_ignore_ascii_case(name))
        .map_or_else(String::new, |e| format!(" (did you mean `{e}`?)"));
    format!(
        "unknown hook event `{name}`{meant}; cadre runs {}",
        HookEvent::ALL.map(HookEvent::name).join(", ")
    )
}

/// One `{matcher, hooks}` entry, checked.
#[derive(Deserialize)]
struct StrictGroup {
    #[serde(default)]
    #[allow(dead_code)]
    matcher: Option<StrictMatcher>,
    #[allow(dead_code)]
    hooks: Vec<StrictCommand>,
}

/// A matcher that must be a regular expression (or empty, or `*`).
struct StrictMatcher;

impl<'de> Deserialize<'de> for StrictMatcher {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = String::deserialize(d)?;
        if m.is_empty() || m == "*" {
            return Ok(Self);
        }
        regex::Regex::new(&m).map(|_| Self).map_err(|e| {
            de::Error::custom(format!(
                "matcher {m:?} is not a regular expression ({})",
                e.to_string().lines().last().unwrap_or_default().trim()
            ))
        })
    }
}

/// One hook of an entry, checked: a `command` of type `command`.
#[derive(Deserialize)]
struct StrictCommand {
    #[serde(rename = "type", default)]
    #[allow(dead_code)]
    kind: Option<CommandKind>,
    #[allow(dead_code)]
    command: String,
}

/// A hook's `type`, which must be `command`.
struct CommandKind;

impl<'de> Deserialize<'de> for CommandKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let kind = String::deserialize(d)?;
        if kind == "command" {
            Ok(Self)
        } else {
            Err(de::Error::custom(format!(
                "a hook of type `{kind}` cannot run in cadre: it runs hooks of type `command`"
            )))
        }
    }
}

/// How a JSON value is named in messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_claude_code_hooks_and_drops_what_it_cannot_run() {
        let value = json!({
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh", "timeout": 5}]},
                {"hooks": [{"type": "prompt", "prompt": "is this ok?"}]}
            ],
            "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "fmt.sh"}]}],
            "Whenever": [],
            "Stop": [{"matcher": "(", "hooks": [{"command": "x"}]}]
        });
        let (hooks, warnings) = Hooks::from_json(&value, ".claude/settings.json");
        assert_eq!(hooks.all().len(), 2, "{hooks:?}");
        let guard = &hooks.of(HookEvent::PreToolUse).collect::<Vec<_>>()[0];
        assert_eq!(guard.matcher.as_deref(), Some("Bash"));
        assert_eq!(guard.timeout_secs, 5);
        let format = &hooks.of(HookEvent::PostToolUse).collect::<Vec<_>>()[0];
        assert_eq!(format.matcher, None);
        assert_eq!(format.timeout_secs, DEFAULT_HOOK_TIMEOUT_SECS);
        assert_eq!(format.source, ".claude/settings.json");
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings
            .iter()
            .any(|w| w.contains("not a regular expression")));
        assert!(warnings.iter().any(|w| w.contains("`Whenever`")));
        assert!(warnings.iter().any(|w| w.contains("type `prompt`")));
    }

    #[test]
    fn an_entry_that_cannot_load_is_an_error_at_its_place() {
        let at = |text: &str| {
            let e = serde_json::from_str::<HooksCheck>(text).unwrap_err();
            (e.line(), e.column(), e.to_string())
        };
        let (line, column, e) = at(
            "{\"model\": 1,\n \"hooks\": {\"PreToolUse\": [\n  {\"matcher\": \"Bash(\", \"hooks\": []}]}}",
        );
        assert_eq!((line, column), (3, 21), "{e}");
        assert!(e.contains("not a regular expression"), "{e}");
        let (line, _, e) = at("{\"hooks\": {\n\"PreTooluse\": []}}");
        assert_eq!(line, 2, "{e}");
        assert!(e.contains("did you mean `PreToolUse`"), "{e}");
        let (line, _, e) = at("{\"hooks\": {\"Stop\":\n {\"hooks\": []}}}");
        assert_eq!(line, 2, "{e}");
        assert!(e.contains("expected a sequence"), "{e}");
        let (_, _, e) =
            at(r#"{"hooks": {"Stop": [{"hooks": [{"type": "prompt", "prompt": "ok?"}]}]}}"#);
        assert!(e.contains("type `prompt`"), "{e}");
        assert!(serde_json::from_str::<HooksCheck>(
            r#"{"other": {"x": 1}, "hooks": {"Stop": [{"matcher": "*", "hooks": [{"command": "a", "timeout": 5}]}]}}"#
        )
        .is_ok());
        assert!(serde_json::from_str::<HooksCheck>("{}").is_ok());
    }

    #[test]
    fn merged_keeps_order() {
        let (a, _) = Hooks::from_json(&json!({"Stop": [{"hooks": [{"command": "a"}]}]}), "a");
        let (b, _) = Hooks::from_json(&json!({"Stop": [{"hooks": [{"command": "b"}]}]}), "b");
        let both = a.merged(&b);
        let commands: Vec<&str> = both.all().iter().map(|h| h.command.as_str()).collect();
        assert_eq!(commands, ["a", "b"]);
        assert!(Hooks::default().is_empty());
    }
}
