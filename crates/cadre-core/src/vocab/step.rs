//! A run's steps, as the journal keeps them: every step of every agent is one [`Step`],
//! keyed by the agent's path; the team's changes are kept under [`TEAM_STEPS`].

use crate::vocab::agent_path::AgentPath;
use crate::vocab::hooks::{HookDecision, HookEvent};
use crate::vocab::outcome::StopKind;
use crate::vocab::team::{Envelope, TeamChange};
use cadre_model::{ContentBlock, Message, Response, Usage};
use serde::{Deserialize, Serialize};

/// The key the team's steps are kept under (no agent path looks like it).
pub const TEAM_STEPS: &str = "@team";

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Step {
    /// The run began: the primary agent's type and task.
    Run {
        /// The primary agent's type.
        agent_type: String,
        /// The task it was given.
        task: String,
        /// The primary agent's model.
        model: String,
    },
    /// An agent began, with its first messages.
    Started {
        /// Its path (`main`, `main/explore#2`).
        agent: AgentPath,
        /// Its type.
        agent_type: String,
        /// What it was asked to do, in a few words.
        description: String,
        /// The history it started from.
        history: Vec<Message>,
    },
    /// A parent's `Task` call started a subagent.
    Spawned {
        /// The parent's path.
        agent: AgentPath,
        /// The `tool_use` id of the `Task` call.
        call: String,
        /// The subagent's path.
        child: AgentPath,
    },
    /// A model response, journaled before the loop acts on it.
    Response {
        /// The agent's path.
        agent: AgentPath,
        /// The response as received.
        response: Response,
    },
    /// A tool that may change something is about to run.
    ToolStarted {
        /// The agent's path.
        agent: AgentPath,
        /// The `tool_use` id.
        id: String,
        /// The tool.
        name: String,
    },
    /// A tool's result (a `tool_result` block), journaled before the model sees it.
    ToolResult {
        /// The agent's path.
        agent: AgentPath,
        /// The `tool_result` block.
        result: ContentBlock,
        /// What a run the call started spent (a `Workflow` call's workflow), counted as
        /// the agent's own: its budget counted it live, its resume counts it from here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spent: Option<Box<Usage>>,
    },
    /// The agent's conversation was compacted on demand or summarised by cadre: `history`
    /// replaces it from here on.
    Compacted {
        /// The agent's path.
        agent: AgentPath,
        /// The history that replaces the conversation.
        history: Vec<Message>,
        /// What compacting cost.
        usage: Usage,
    },
    /// Old tool results were cleared to keep the next request inside the context window:
    /// all but the newest `keep` user messages holding results have their output replaced.
    Cleared {
        /// The agent's path.
        agent: AgentPath,
        /// How many of the newest messages with tool results kept their output.
        keep: usize,
    },
    /// A new user message for an agent whose conversation had ended (a follow-up).
    UserMessage {
        /// The agent's path.
        agent: AgentPath,
        /// The message.
        message: Message,
    },
    /// A change to the run's team (a member joined or closed, a message sent, the task list
    /// changed); grouped under `TEAM_STEPS`, not under the agent that made it.
    Team {
        /// The path of the agent that made the change.
        by: AgentPath,
        /// The change.
        change: TeamChange,
    },
    /// Messages given to an agent as (part of) a user turn.
    Delivered {
        /// The recipient's path.
        agent: AgentPath,
        /// The messages, in the order given. A member's message is journaled without its
        /// text, which its `Sent` step holds already; reading the journal puts it back (a
        /// journal written before keeps it, and reads as it did). A notice keeps its text:
        /// a returned one has no step of its own.
        #[serde(serialize_with = "without_text")]
        messages: Vec<Envelope>,
    },
    /// An agent's final answer did not match its output schema: it is asked again, told
    /// `error`.
    Rejected {
        /// The agent's path.
        agent: AgentPath,
        /// What was wrong with the answer.
        error: String,
    },
    /// A hook's decision that changes what the agent does (it keeps going, stops, or runs
    /// a call otherwise), journaled before it takes effect.
    Hooked {
        /// The agent's path.
        agent: AgentPath,
        /// The moment the hook ran at.
        event: HookEvent,
        /// The `tool_use` id of the call it is about, for `PreToolUse`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<String>,
        /// What it decided.
        #[serde(flatten)]
        decision: HookDecision,
    },
    /// An agent ended.
    Finished {
        /// The agent's path.
        agent: AgentPath,
        /// Why it stopped.
        stop: StopKind,
        /// Its final text.
        text: String,
    },
}

impl Step {
    /// The key the journal keeps the step under: the path of the agent it belongs to,
    /// `@team` for the team's, `None` for the run header.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Self::Team { .. } => Some(TEAM_STEPS),
            _ => self.path().map(AgentPath::as_str),
        }
    }

    /// The path of the agent the step belongs to (`None` for the run header and the
    /// team's steps).
    pub fn path(&self) -> Option<&AgentPath> {
        match self {
            Self::Run { .. } | Self::Team { .. } => None,
            Self::Started { agent, .. }
            | Self::Spawned { agent, .. }
            | Self::Response { agent, .. }
            | Self::ToolStarted { agent, .. }
            | Self::ToolResult { agent, .. }
            | Self::UserMessage { agent, .. }
            | Self::Compacted { agent, .. }
            | Self::Cleared { agent, .. }
            | Self::Delivered { agent, .. }
            | Self::Rejected { agent, .. }
            | Self::Hooked { agent, .. }
            | Self::Finished { agent, .. } => Some(agent),
        }
    }
}

/// Writes given messages without the text of members' own (see [`Step::Delivered`]).
fn without_text<S: serde::Serializer>(messages: &[Envelope], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(messages.iter().map(|m| {
        let mut m = m.clone();
        if !m.notice {
            m.text.clear();
        }
        m
    }))
}
