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
    /// The run was cancelled.
    Cancelled,
    /// The model API failed; the message says how.
    ModelError(String),
    /// The model stopped for a reason cadre does not know.
    Other(String),
    /// A hook stopped it (`continue: false`, a refused prompt, or a `Stop` hook that kept
    /// blocking past the bound); the text says which and why.
    Hook(String),
}

impl StopKind {
    /// Whether the agent finished its work normally.
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Done)
    }

    /// A short label for tables and logs.
    pub fn label(&self) -> &str {
        match self {
            Self::Done => "done",
            Self::MaxTokens => "max tokens",
            Self::Refusal => "refused",
            Self::ContextWindowExceeded => "context full",
            Self::MaxTurns => "max turns",
            Self::Budget => "budget",
            Self::Cancelled => "cancelled",
            Self::ModelError(_) => "API error",
            Self::Other(_) => "stopped",
            Self::Hook(_) => "hook",
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
            Self::Cancelled => f.write_str("cancelled"),
            Self::ModelError(e) => write!(f, "the model API failed: {e}"),
            Self::Other(r) => write!(f, "the model stopped for an unknown reason: {r}"),
            Self::Hook(why) => write!(f, "stopped by a hook: {why}"),
        }
    }
}

/// Everything an agent's run produced.
#[derive(Debug, Clone)]
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
