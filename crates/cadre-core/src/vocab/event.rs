//! The structured events every agent emits while it runs.

use crate::vocab::agent_path::AgentPath;
use crate::vocab::hooks::{HookEvent, HookOutcome};
use crate::vocab::outcome::{Outcome, StopKind};
use crate::vocab::team::TaskStatus;
use cadre_model::{CompactionUsage, Usage};
use serde::Serialize;

/// Something that happened in one agent, named by its path (`main`, `main/explore#2`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// An agent started.
    Started {
        /// Its path.
        agent: AgentPath,
        /// Its agent type.
        agent_type: String,
        /// What it was asked to do, in a few words.
        description: String,
        /// The model it talks to.
        model: String,
        /// Its type's colour in the live display, if it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        color: Option<String>,
        /// Whether it runs in the background (its parent goes on meanwhile).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        background: bool,
    },
    /// An agent sent request number `turn` to its model.
    Turn {
        /// Its path.
        agent: AgentPath,
        /// 1 for the first request.
        turn: u32,
    },
    /// A piece of answer text streamed in.
    Text {
        /// Its path.
        agent: AgentPath,
        /// The new text.
        delta: String,
    },
    /// A model request failed transiently and will be retried.
    Retrying {
        /// Its path.
        agent: AgentPath,
        /// Which retry.
        attempt: u32,
        /// Milliseconds until it.
        wait_ms: u64,
        /// What went wrong.
        reason: String,
    },
    /// The agent's conversation is being compacted (by the server, or summarised by cadre).
    Compacting {
        /// Its path.
        agent: AgentPath,
    },
    /// The agent's conversation was compacted: what came before is replaced by a summary.
    Compacted {
        /// Its path.
        agent: AgentPath,
        /// Who summarised it: `server` (the Messages API) or `cadre` (a summary request).
        by: String,
        /// What the compaction cost.
        usage: CompactionUsage,
    },
    /// A tool call started.
    ToolCall {
        /// Its path.
        agent: AgentPath,
        /// The tool_use id.
        id: String,
        /// The tool's name.
        name: String,
        /// Its input.
        input: serde_json::Value,
    },
    /// A tool call finished.
    ToolResult {
        /// Its path.
        agent: AgentPath,
        /// The tool_use id.
        id: String,
        /// The tool's name.
        name: String,
        /// Whether it failed.
        is_error: bool,
        /// The first line of its output.
        summary: String,
    },
    /// Tokens used by one model response.
    Usage {
        /// Its path.
        agent: AgentPath,
        /// This response's usage.
        usage: Usage,
    },
    /// A team member sent a message (or cadre sent a notice on a member's behalf).
    Message {
        /// The sender's path.
        agent: AgentPath,
        /// The sender's name.
        from: String,
        /// The recipient's name.
        to: String,
        /// Its number among the messages from `from` to `to`.
        seq: u64,
        /// What it says.
        text: String,
        /// Whether it is cadre's notice that a member went idle.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        notice: bool,
    },
    /// A message was given to its recipient as part of a user turn.
    Delivered {
        /// The recipient's path.
        agent: AgentPath,
        /// The sender's name.
        from: String,
        /// The message's number from that sender.
        seq: u64,
    },
    /// A team member ended its turn and waits for messages.
    Idle {
        /// Its path.
        agent: AgentPath,
    },
    /// A waiting team member was woken by a message.
    Woken {
        /// Its path.
        agent: AgentPath,
    },
    /// A task of the run's shared list was created or changed.
    TaskChanged {
        /// The path of the agent that changed it.
        agent: AgentPath,
        /// The task's id.
        id: u32,
        /// Its subject.
        subject: String,
        /// Its status.
        status: TaskStatus,
        /// Its owner's name.
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    /// A hook ran for one of the agent's moments (a tool call, its start or stop, …).
    Hook {
        /// The agent's path.
        agent: AgentPath,
        /// The moment it ran at (Claude Code's `hook_event_name`).
        hook_event: HookEvent,
        /// The command, as written.
        command: String,
        /// Where it was written (a settings file, `agent <type>`).
        source: String,
        /// Its matcher, as written, when it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        matcher: Option<String>,
        /// How long it ran, in milliseconds.
        duration_ms: u64,
        /// What came of it.
        outcome: HookOutcome,
    },
    /// An agent stopped.
    Finished {
        /// Its path.
        agent: AgentPath,
        /// What became of its work: `completed`, `cut`, `turn_limit`, `budget`,
        /// `time_limit`, `cancelled` or `failed` (always `stop`'s outcome).
        outcome: Outcome,
        /// Why, as the raw reason.
        stop: StopKind,
        /// Model requests made.
        turns: u32,
        /// Tokens used by this agent alone.
        usage: Usage,
        /// How long it ran, in milliseconds.
        elapsed_ms: u64,
    },
}

impl Event {
    /// The path of the agent this event is about.
    pub fn agent(&self) -> &AgentPath {
        match self {
            Self::Started { agent, .. }
            | Self::Turn { agent, .. }
            | Self::Text { agent, .. }
            | Self::Retrying { agent, .. }
            | Self::Compacting { agent, .. }
            | Self::Compacted { agent, .. }
            | Self::ToolCall { agent, .. }
            | Self::ToolResult { agent, .. }
            | Self::Usage { agent, .. }
            | Self::Message { agent, .. }
            | Self::Delivered { agent, .. }
            | Self::Idle { agent, .. }
            | Self::Woken { agent, .. }
            | Self::TaskChanged { agent, .. }
            | Self::Hook { agent, .. }
            | Self::Finished { agent, .. } => agent,
        }
    }
}
