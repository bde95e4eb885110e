//! What a hook answered, read as Claude Code reads it: exit 0 is success (its JSON on stdout
//! honoured, or its stdout taken as context where Claude Code takes it), exit 2 blocks with
//! its stderr, any other code is a warning and the run goes on.

use super::runner::{End, Ran};
use crate::vocab::hooks::HookEvent;
use crate::vocab::hooks::HookOutcome;
use serde_json::Value;

/// A permission decision of a `PreToolUse` hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Permission {
    /// Skip the allow rules and the question.
    Allow,
    /// Ask the person.
    Ask(Option<String>),
    /// Refuse the call.
    Deny(String),
}

impl Permission {
    /// How strict it is: when hooks disagree, the strictest wins.
    fn rank(&self) -> u8 {
        match self {
            Self::Allow => 0,
            Self::Ask(_) => 1,
            Self::Deny(_) => 2,
        }
    }
}

/// What one hook, or all hooks of one moment together, said.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Verdict {
    /// Exit 2, or `decision: "block"`: why.
    pub block: Option<String>,
    /// `continue: false`: why the agent stops.
    pub stop: Option<String>,
    /// `permissionDecision`.
    pub permission: Option<Permission>,
    /// `updatedInput` (Claude Code's field names).
    pub updated_input: Option<Value>,
    /// `additionalContext`, or stdout where Claude Code takes it as context.
    pub context: Option<String>,
}

impl Verdict {
    /// These verdicts together: any stop or block counts (their reasons joined), the
    /// strictest permission wins, the last input change wins, contexts are joined.
    pub(crate) fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut all = Verdict::default();
        for v in verdicts {
            all.block = join(all.block, v.block);
            all.stop = join(all.stop, v.stop);
            all.context = join(all.context, v.context);
            if v.updated_input.is_some() {
                all.updated_input = v.updated_input;
            }
            all.permission = match (all.permission, v.permission) {
                (Some(a), Some(b)) if b.rank() > a.rank() => Some(b),
                (Some(a), _) => Some(a),
                (None, b) => b,
            };
        }
        all
    }
}

/// Two optional texts, joined by a line break when both are there.
fn join(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    }
}

/// Whether Claude Code takes a successful hook's plain stdout as context for the model.
fn stdout_is_context(event: HookEvent) -> bool {
    matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
}

/// The last `max` characters of `text`, trimmed.
fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().rev().nth(max) {
        Some((i, _)) => format!("…{}", &text[i..]),
        None => text.to_owned(),
    }
}

/// Reads what one hook of `event` answered: the verdict, and the outcome its event reports.
pub(crate) fn read(event: HookEvent, ran: &Ran, timeout_secs: u64) -> (Verdict, HookOutcome) {
    let code = match &ran.end {
        End::Exited(code) => *code,
        End::TimedOut => {
            return (
                Verdict::default(),
                HookOutcome::TimedOut { secs: timeout_secs },
            )
        }
        End::Cancelled => return (Verdict::default(), HookOutcome::Cancelled),
        End::NotStarted(e) => {
            let why = format!("cannot run sh: {e}");
            return (Verdict::default(), HookOutcome::NotRun { why });
        }
    };
    match code {
        Some(0) => success(event, &ran.stdout),
        Some(2) => {
            let stderr = ran.stderr.trim();
            let reason = if stderr.is_empty() {
                format!("a {event} hook blocked it (exit 2) without saying why")
            } else {
                stderr.to_owned()
            };
            (
                Verdict {
                    block: Some(reason.clone()),
                    ..Verdict::default()
                },
                HookOutcome::Blocked { reason },
            )
        }
        code => (
            Verdict::default(),
            HookOutcome::Failed {
                code,
                stderr: tail(&ran.stderr, 500),
            },
        ),
    }
}

/// Exit 0: its JSON honoured, or its plain stdout taken as context where Claude Code does.
fn success(event: HookEvent, stdout: &str) -> (Verdict, HookOutcome) {
    let text = stdout.trim();
    let json = text
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten()
        .filter(Value::is_object);
    let Some(json) = json else {
        return plain_stdout(event, text);
    };
    let mut v = Verdict::default();
    read_decision(event, &json, &mut v);
    if let Some(specific) = json.get("hookSpecificOutput").filter(|s| s.is_object()) {
        read_specific(event, specific, &mut v);
    }
    let outcome = outcome_of(&v);
    (v, outcome)
}

/// A successful hook's stdout that is no JSON object: context where Claude Code takes it.
fn plain_stdout(event: HookEvent, text: &str) -> (Verdict, HookOutcome) {
    let context = (stdout_is_context(event) && !text.is_empty()).then(|| text.to_owned());
    let outcome = HookOutcome::Ok {
        context: context.is_some(),
        updated_input: false,
    };
    (
        Verdict {
            context,
            ..Verdict::default()
        },
        outcome,
    )
}

/// The text at `key` of `value`, trimmed, when there is some.
fn text_at(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The common fields of a hook's JSON: `continue`, `stopReason`, `decision` and `reason`.
fn read_decision(event: HookEvent, json: &Value, v: &mut Verdict) {
    if json.get("continue").and_then(Value::as_bool) == Some(false) {
        v.stop =
            Some(text_at(json, "stopReason").unwrap_or_else(|| format!("a {event} hook said so")));
    }
    match json.get("decision").and_then(Value::as_str) {
        Some("block") => {
            v.block = Some(
                text_at(json, "reason").unwrap_or_else(|| format!("a {event} hook blocked it")),
            );
        }
        // Claude Code's older words for a PreToolUse decision.
        Some("approve") => v.permission = Some(Permission::Allow),
        _ => {}
    }
}

/// The event's own fields of a hook's JSON (`hookSpecificOutput`): a permission decision,
/// a changed input, added context.
fn read_specific(event: HookEvent, specific: &Value, v: &mut Verdict) {
    let why = text_at(specific, "permissionDecisionReason");
    match specific.get("permissionDecision").and_then(Value::as_str) {
        Some("allow") => v.permission = Some(Permission::Allow),
        Some("ask") => v.permission = Some(Permission::Ask(why)),
        Some("deny") => {
            v.permission = Some(Permission::Deny(
                why.unwrap_or_else(|| format!("a {event} hook denied it")),
            ))
        }
        _ => {}
    }
    if let Some(input) = specific.get("updatedInput").filter(|i| i.is_object()) {
        v.updated_input = Some(input.clone());
    }
    v.context = text_at(specific, "additionalContext");
}

/// The outcome a verdict reports: the strongest thing it says (a stop, a deny, a block, an
/// ask, an allow), else that it went through.
fn outcome_of(v: &Verdict) -> HookOutcome {
    if let Some(reason) = &v.stop {
        HookOutcome::Stopped {
            reason: reason.clone(),
        }
    } else if let Some(Permission::Deny(reason)) = &v.permission {
        HookOutcome::Denied {
            reason: reason.clone(),
        }
    } else if let Some(reason) = &v.block {
        HookOutcome::Blocked {
            reason: reason.clone(),
        }
    } else if let Some(Permission::Ask(reason)) = &v.permission {
        HookOutcome::Asked {
            reason: reason.clone(),
        }
    } else if v.permission == Some(Permission::Allow) {
        HookOutcome::Allowed {
            updated_input: v.updated_input.is_some(),
        }
    } else {
        HookOutcome::Ok {
            context: v.context.is_some(),
            updated_input: v.updated_input.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn ran(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran {
            end: End::Exited(Some(code)),
            stdout: stdout.into(),
            stderr: stderr.into(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn exit_codes_mean_what_they_mean_in_claude_code() {
        let (v, o) = read(HookEvent::PreToolUse, &ran(2, "", "no rm -rf\n"), 60);
        assert_eq!(v.block.as_deref(), Some("no rm -rf"));
        assert_eq!(
            o,
            HookOutcome::Blocked {
                reason: "no rm -rf".into()
            }
        );
        let (v, o) = read(HookEvent::PreToolUse, &ran(1, "", "oops"), 60);
        assert_eq!(v, Verdict::default());
        assert!(o.is_failure(), "{o:?}");
        // Plain stdout is context only where Claude Code takes it so.
        let (v, _) = read(
            HookEvent::UserPromptSubmit,
            &ran(0, "today is Monday\n", ""),
            60,
        );
        assert_eq!(v.context.as_deref(), Some("today is Monday"));
        let (v, _) = read(HookEvent::PostToolUse, &ran(0, "formatted\n", ""), 60);
        assert_eq!(v.context, None);
        let timed_out = Ran {
            end: End::TimedOut,
            ..ran(0, "", "")
        };
        assert_eq!(
            read(HookEvent::Stop, &timed_out, 5).1,
            HookOutcome::TimedOut { secs: 5 }
        );
    }

    #[test]
    fn json_output_is_honoured() {
        let out = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "not here"}});
        let (v, o) = read(HookEvent::PreToolUse, &ran(0, &out.to_string(), ""), 60);
        assert_eq!(v.permission, Some(Permission::Deny("not here".into())));
        assert_eq!(
            o,
            HookOutcome::Denied {
                reason: "not here".into()
            }
        );
        let out = json!({"hookSpecificOutput": {"permissionDecision": "allow",
            "updatedInput": {"command": "ls"}, "additionalContext": "note"}});
        let (v, o) = read(HookEvent::PreToolUse, &ran(0, &out.to_string(), ""), 60);
        assert_eq!(v.permission, Some(Permission::Allow));
        assert_eq!(v.updated_input, Some(json!({"command": "ls"})));
        assert_eq!(v.context.as_deref(), Some("note"));
        assert_eq!(
            o,
            HookOutcome::Allowed {
                updated_input: true
            }
        );
        let out = json!({"decision": "block", "reason": "tests fail"});
        let (v, _) = read(HookEvent::Stop, &ran(0, &out.to_string(), ""), 60);
        assert_eq!(v.block.as_deref(), Some("tests fail"));
        let out = json!({"continue": false, "stopReason": "enough"});
        let (v, o) = read(HookEvent::PostToolUse, &ran(0, &out.to_string(), ""), 60);
        assert_eq!(v.stop.as_deref(), Some("enough"));
        assert_eq!(
            o,
            HookOutcome::Stopped {
                reason: "enough".into()
            }
        );
        // JSON that is not an object is plain text.
        let (v, _) = read(HookEvent::SessionStart, &ran(0, "[1]", ""), 60);
        assert_eq!(v.context.as_deref(), Some("[1]"));
    }

    #[test]
    fn verdicts_combine_strictest_first() {
        let allow = Verdict {
            permission: Some(Permission::Allow),
            context: Some("a".into()),
            ..Verdict::default()
        };
        let deny = Verdict {
            permission: Some(Permission::Deny("no".into())),
            context: Some("b".into()),
            ..Verdict::default()
        };
        let all = Verdict::combine([allow.clone(), deny, allow]);
        assert_eq!(all.permission, Some(Permission::Deny("no".into())));
        assert_eq!(all.context.as_deref(), Some("a\nb\na"));
        assert_eq!(Verdict::combine([]), Verdict::default());
    }
}
