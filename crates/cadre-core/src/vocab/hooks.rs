//! Hooks as a run speaks of them: the moments they run at ([`HookEvent`]), what came of
//! one as an event shows it ([`HookOutcome`]), and a decision that changed what an agent
//! does as the journal keeps it ([`HookDecision`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// The moments a hook runs at, by Claude Code's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
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

/// What came of one hook run, as [`Event::Hook`](crate::Event::Hook) reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookOutcome {
    /// Exit 0 with no decision.
    Ok {
        /// Whether it added context for the model (stdout or `additionalContext`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        context: bool,
        /// Whether it changed the tool call's input (`updatedInput`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        updated_input: bool,
    },
    /// `permissionDecision: "allow"`: the call skips the allow rules and the question (deny
    /// rules and the sandbox still hold).
    Allowed {
        /// Whether it changed the tool call's input (`updatedInput`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        updated_input: bool,
    },
    /// `permissionDecision: "ask"`: the person is asked (refused where no one can be).
    Asked {
        /// The hook's reason, if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// `permissionDecision: "deny"`: the call is refused.
    Denied {
        /// Why, as the model is told.
        reason: String,
    },
    /// Exit 2, or `decision: "block"`: what it blocks depends on the event.
    Blocked {
        /// Why (its stderr or `reason`), as the model is told.
        reason: String,
    },
    /// `continue: false`: the agent stops.
    Stopped {
        /// Its `stopReason`.
        reason: String,
    },
    /// Another exit code: a warning, and the run goes on.
    Failed {
        /// The exit code (`None` when a signal ended it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        /// The end of its stderr.
        stderr: String,
    },
    /// Killed with its process group at its timeout; the run goes on.
    TimedOut {
        /// The timeout, in seconds.
        secs: u64,
    },
    /// Killed with its process group because the run was cancelled.
    Cancelled,
    /// It could not be started.
    NotRun {
        /// Why.
        why: String,
    },
}

impl HookOutcome {
    /// Whether it only warns: the hook failed, and nothing it meant was done.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            Self::Failed { .. } | Self::TimedOut { .. } | Self::NotRun { .. }
        )
    }
}

impl fmt::Display for HookOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ok {
                context,
                updated_input,
            } => {
                f.write_str("ok")?;
                if *context {
                    f.write_str(", added context")?;
                }
                if *updated_input {
                    f.write_str(", changed the input")?;
                }
                Ok(())
            }
            Self::Allowed { updated_input } => {
                f.write_str("allowed")?;
                if *updated_input {
                    f.write_str(", changed the input")?;
                }
                Ok(())
            }
            Self::Asked { reason: None } => f.write_str("asks the person"),
            Self::Asked { reason: Some(r) } => write!(f, "asks the person: {r}"),
            Self::Denied { reason } => write!(f, "denied: {reason}"),
            Self::Blocked { reason } => write!(f, "blocked: {reason}"),
            Self::Stopped { reason } => write!(f, "stops the agent: {reason}"),
            Self::Failed {
                code: Some(c),
                stderr,
            } if stderr.is_empty() => {
                write!(f, "failed (exit {c})")
            }
            Self::Failed {
                code: Some(c),
                stderr,
            } => write!(f, "failed (exit {c}): {stderr}"),
            Self::Failed { code: None, stderr } => write!(f, "killed by a signal {stderr}"),
            Self::TimedOut { secs } => write!(f, "killed at its timeout ({secs}s)"),
            Self::Cancelled => f.write_str("killed: the run was cancelled"),
            Self::NotRun { why } => write!(f, "not run: {why}"),
        }
    }
}

/// A hook decision that changed what an agent does, journaled ([`Step::Hooked`]) before it
/// takes effect so a resumed run folds it the same way and does not run the hook again.
///
/// [`Step::Hooked`]: crate::vocab::step::Step::Hooked
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookDecision {
    /// The agent does not stop: `reason` is its next user message (a `Stop`,
    /// `SubagentStop` or `TeammateIdle` hook blocked its end).
    Continue {
        /// What the hook said, given to the model.
        reason: String,
    },
    /// The agent stops here, with [`StopKind::Hook`](crate::StopKind::Hook).
    Stop {
        /// Why.
        reason: String,
    },
    /// What `PreToolUse` hooks decided for a call that is not refused.
    Call {
        /// `allow` or `ask`, when a hook said so.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        permission: Option<CallPermission>,
        /// The input the call runs with instead of the model's (cadre's field names).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        /// Context added to the call's result for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<String>,
    },
}

/// A `PreToolUse` hook's say on a call it does not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPermission {
    /// Skip the allow rules and the question; deny rules and the sandbox still hold.
    Allow,
    /// Ask the person, whatever the allow rules say.
    Ask,
}
