//! What a `Task` call brings back: the subagent's final text, or why there is none.

use crate::definitions::spec::ToolsDropped;
use crate::run::team::error::TeamError;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use cadre_tools::{ToolError, WorktreeError};
use std::sync::Arc;

/// What a subagent handed back: its final text, or why it failed.
pub type TaskResult = Result<String, SubagentError>;

/// Why a `Task` call brought back no result: its parent receives this as an `is_error`
/// tool result, in these words.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SubagentError {
    /// No subagent type of that name.
    #[error("unknown subagent_type {name:?}; the subagent types are: {known}")]
    UnknownType {
        /// The name asked for.
        name: String,
        /// The subagent types there are.
        known: String,
    },
    /// The type cannot start (every entry of its `tools` was dropped while loading).
    #[error(transparent)]
    Unusable(ToolsDropped),
    /// A fork was asked for on a run whose subagents run on the engine, which cannot
    /// carry a conversation.
    #[error("a fork is not available when subagents run on the engine; start a subagent of a type with the context it needs in its prompt")]
    ForkOnEngine,
    /// The forking agent's type is not in this run.
    #[error("a fork of a {agent_type} agent cannot start: the type is not in this run")]
    ForkTypeGone {
        /// The forking agent's type.
        agent_type: String,
    },
    /// A `Task` call gave an `output_schema` on a run whose subagents run on the engine.
    #[error("output_schema on a Task call is not available when subagents run on the engine; give the agent type an output_schema instead")]
    SchemaOnEngine,
    /// The parent is at the depth limit.
    #[error("delegation is limited to {limit} levels; {parent} cannot start another subagent — do this work yourself")]
    DepthLimit {
        /// The limit.
        limit: u32,
        /// The parent's path.
        parent: AgentPath,
    },
    /// The parent has as many subagents running as it may.
    #[error("refused: {parent} already has {running} subagents running (the limit is {limit}); wait for their results and delegate the rest afterwards")]
    FanOut {
        /// The parent's path.
        parent: AgentPath,
        /// How many it has running.
        running: u32,
        /// The limit.
        limit: usize,
    },
    /// An isolated subagent could not get its worktree.
    #[error("subagent {path} could not get its own worktree: {source}")]
    Worktree {
        /// The subagent's path.
        path: AgentPath,
        /// Why (shared, so the error can be handed to every reader of a background result).
        source: Arc<WorktreeError>,
    },
    /// An isolated subagent's worktree was made but cannot be a workspace.
    #[error("subagent {path} could not get its own worktree: its worktree cannot be a workspace: {source}")]
    WorktreeWorkspace {
        /// The subagent's path.
        path: AgentPath,
        /// Why.
        source: Arc<ToolError>,
    },
    /// A named member was asked for by an agent that is no team member.
    #[error("only a team member can start a named member; start it without a name")]
    NotAMember,
    /// A named member was asked for on a run on the engine, which has no teams.
    #[error("{agent_type} cannot be a named member: a run on the engine has no teams; start it without a name")]
    MemberOnEngine {
        /// The member's agent type.
        agent_type: String,
    },
    /// A named member was asked for of a type that works in a worktree of its own.
    #[error("{agent_type} cannot be a named member: it works in a worktree of its own, and members share the run's workspace; start it without a name")]
    MemberIsolated {
        /// The member's agent type.
        agent_type: String,
    },
    /// The team refused the member (its name is taken or unusable, the team is full).
    #[error(transparent)]
    Team(TeamError),
    /// The model provider refused the run for good (a key refused, no credit or quota
    /// left): no new subagent starts.
    #[error("not started: the model provider refused this run for good ({reason}); {parent} can start no new subagent")]
    ProviderRefused {
        /// The parent whose call it was.
        parent: AgentPath,
        /// The provider's error.
        reason: String,
    },
    /// Its background task ended without handing back anything (it was aborted).
    #[error("outcome: cancelled — it ended without a result: its task was stopped")]
    Lost,
    /// It ran and stopped before finishing its work.
    #[error("subagent {path} did not finish — outcome: {} ({stop}). Its last message: {last}{report}", .stop.outcome())]
    Stopped {
        /// The subagent's path.
        path: AgentPath,
        /// Why it stopped.
        stop: StopKind,
        /// Its last message, or `(none)`.
        last: String,
        /// What became of its worktree, when it had one (empty otherwise).
        report: String,
    },
}
