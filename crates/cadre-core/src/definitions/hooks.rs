//! Hooks as users write them: Claude Code's `hooks` object (`{"PreToolUse": [{"matcher":
//! "Bash|Edit", "hooks": [{"type": "command", "command": "…", "timeout": 60}]}]}`), read
//! from settings files, cadre's own `[hooks]` table and agent files' `hooks:` front matter.
//!
//! Reading is forgiving: an unknown event, a matcher that is not a regular expression or a
//! hook of a type cadre does not run is dropped with a warning, and the rest still loads.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// The timeout of a hook that gives none, in seconds (as in Claude Code).
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 60;

/// The moments a hook runs at, by Claude Code's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEvent {
    /// A run starts (or is resumed).
    SessionStart,
    /// The user's prompt is about to be sent.
    UserPromptSubmit,
    /// A tool call is about to run; may block it or change its input.
    PreToolUse,
    /// A tool call succeeded.
    PostToolUse,
    /// A tool call failed (its result is an error).
    PostToolUseFailure,
    /// The primary agent is about to stop; may keep it going.
    Stop,
    /// A subagent starts.
    SubagentStart,
    /// A subagent is about to stop; may keep it going.
    SubagentStop,
    /// A conversation is about to be compacted.
    PreCompact,
    /// A run ends.
    SessionEnd,
    /// A team task was created.
    TaskCreated,
    /// A team task was completed.
    TaskCompleted,
    /// A team member finished its work and waits.
    TeammateIdle,
}

impl HookEvent {
    /// Every event, in the order a run meets them.
    pub const ALL: [HookEvent; 13] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::Stop,
        Self::SubagentStart,
        Self::SubagentStop,
        Self::PreCompact,
        Self::SessionEnd,
        Self::TaskCreated,
        Self::TaskCompleted,
        Self::TeammateIdle,
    ];

    /// Its name as settings files write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::Stop => "Stop",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
            Self::PreCompact => "PreCompact",
            Self::SessionEnd => "SessionEnd",
            Self::TaskCreated => "TaskCreated",
            Self::TaskCompleted => "TaskCompleted",
            Self::TeammateIdle => "TeammateIdle",
        }
    }

    /// The event named `name`, if cadre knows it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
    fn merged_keeps_order() {
        let (a, _) = Hooks::from_json(&json!({"Stop": [{"hooks": [{"command": "a"}]}]}), "a");
        let (b, _) = Hooks::from_json(&json!({"Stop": [{"hooks": [{"command": "b"}]}]}), "b");
        let both = a.merged(&b);
        let commands: Vec<&str> = both.all().iter().map(|h| h.command.as_str()).collect();
        assert_eq!(commands, ["a", "b"]);
        assert!(Hooks::default().is_empty());
    }
}
