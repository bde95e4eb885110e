//! How an agent's run ended.

use cadre_model::{Message, Usage};
use serde::{Deserialize, Serialize};

/// Why an agent stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopKind {
    /// The model finished (`end_turn` or `stop_sequence`).
    Done,
    /// The answer was cut at `max_tokens`.
    MaxTokens,
    /// The model refused.
    Refusal,
    /// The conversation outgrew the model's context window.
    ContextWindowExceeded,
    /// The agent used all its turns.
    MaxTurns,
    /// The shared token budget ran out.
    Budget,
    /// It reached its own token limit (its tokens and its subagents', or its parent's).
    TokenLimit,
    /// It reached its wall time limit.
    TimeLimit,
    /// The run was cancelled.
    Cancelled,
    /// The model API failed; the message says how.
    ModelError(String),
    /// The model stopped for a reason cadre does not know.
    Other(String),
    /// Its answers did not match the output schema it was given; the last error.
    InvalidAnswer(String),
    /// It never ended: it was still at work when its run was given up or its process died,
    /// and it was not resumed.
    Killed,
    /// A hook stopped it (`continue: false`, a refused prompt, or a `Stop` hook that kept
    /// blocking past the bound); the text says which and why.
    Hook(String),
}

/// What became of an agent's work, in one word: the label every report uses (the `Task`
/// result, the events, the usage table, `summary.json`, `cadre runs`). [`StopKind`] keeps
/// the raw reason beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It finished its work and its answer is whole.
    Completed,
    /// Its answer was cut at the output token limit (after the continuations it was given).
    Cut,
    /// It used all its turns.
    TurnLimit,
    /// The run's token budget ran out, or its own token limit was reached.
    Budget,
    /// It reached its wall time limit.
    TimeLimit,
    /// It was cancelled (Ctrl-C, `TaskStop`, or its parent stopping).
    Cancelled,
    /// It failed: the model API failed or refused, its context overflowed, it was killed,
    /// its answer never matched its output schema, or a hook stopped it.
    Failed,
}

impl Outcome {
    /// The word for it: `completed`, `cut`, `turn limit`, `budget`, `time limit`,
    /// `cancelled`, `failed`.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Cut => "cut",
            Self::TurnLimit => "turn limit",
            Self::Budget => "budget",
            Self::TimeLimit => "time limit",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl StopKind {
    /// Whether the agent finished its work normally.
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Done)
    }

    /// Whether an agent that stopped so is carried on by a resume rather than left ended:
    /// it was cancelled, or the model API failed (its request is sent again).
    pub fn resumes(&self) -> bool {
        matches!(self, Self::Cancelled | Self::ModelError(_))
    }

    /// What became of the work, in one word.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Done => Outcome::Completed,
            Self::MaxTokens => Outcome::Cut,
            Self::MaxTurns => Outcome::TurnLimit,
            Self::Budget | Self::TokenLimit => Outcome::Budget,
            Self::TimeLimit => Outcome::TimeLimit,
            Self::Cancelled => Outcome::Cancelled,
            Self::Refusal
            | Self::ContextWindowExceeded
            | Self::ModelError(_)
            | Self::Other(_)
            | Self::Killed
            | Self::InvalidAnswer(_)
            | Self::Hook(_) => Outcome::Failed,
        }
    }

    /// A short label for tables and logs: the [`Outcome`], with how it failed when it did
    /// (`failed: API error`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Refusal => "failed: refused",
            Self::ContextWindowExceeded => "failed: context full",
            Self::ModelError(_) => "failed: API error",
            Self::Other(_) => "failed: stopped",
            Self::Killed => "failed: killed",
            Self::InvalidAnswer(_) => "failed: invalid answer",
            Self::Hook(_) => "failed: hook",
            other => other.outcome().label(),
        }
    }
}

impl std::fmt::Display for StopKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done => f.write_str("finished"),
            Self::MaxTokens => {
                f.write_str("the answer was cut off at the output token limit (max_tokens)")
            }
            Self::Refusal => f.write_str("the model declined to answer (refusal)"),
            Self::ContextWindowExceeded => {
                f.write_str("the conversation no longer fits the model's context window")
            }
            Self::MaxTurns => f.write_str("stopped after reaching its turn limit"),
            Self::Budget => f.write_str("stopped because the token budget ran out"),
            Self::TokenLimit => {
                f.write_str("stopped at its token limit (the tokens of it and its subagents)")
            }
            Self::TimeLimit => f.write_str("stopped at its time limit"),
            Self::Cancelled => f.write_str("cancelled"),
            Self::ModelError(e) => write!(f, "the model API failed: {e}"),
            Self::Other(r) => write!(f, "the model stopped for an unknown reason: {r}"),
            Self::InvalidAnswer(e) => write!(f, "its answer did not match the output schema: {e}"),
            Self::Killed => {
                f.write_str("it was still at work when its run was given up or its process died")
            }
            Self::Hook(why) => write!(f, "stopped by a hook: {why}"),
        }
    }
}

/// Everything an agent's run produced.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentOutcome {
    /// The final answer: the text of the last assistant message.
    pub text: String,
    /// Why it stopped.
    pub stop: StopKind,
    /// Model requests made.
    pub turns: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tokens used by this agent alone.
    pub usage: Usage,
    /// The whole conversation.
    pub history: Vec<Message>,
}

impl AgentOutcome {
    /// An outcome with answer `text` that stopped for `stop`, before any turn or call.
    pub fn new(text: impl Into<String>, stop: StopKind) -> Self {
        Self {
            text: text.into(),
            stop,
            turns: 0,
            tool_calls: 0,
            usage: Usage::default(),
            history: Vec::new(),
        }
    }
}
