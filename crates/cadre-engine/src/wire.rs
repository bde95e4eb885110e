//! What goes over the wire between the client, Restate and the workers. Every payload a
//! handler sends is built only from its input and from journaled values, so a replay on
//! another worker sends the same bytes (Restate compares them).

use cadre_core::{AgentPath, AgentSpec, DelegatedCall, PermissionsSnapshot};
use serde::{Deserialize, Serialize};

/// One agent to run: the input of `CadreAgent/run`, for the primary agent and each subagent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCall {
    /// The run's id (its `CadreRun` object's key, its branches' names).
    pub run: String,
    /// The agent: path, depth, type, model, task.
    pub agent: DelegatedCall,
    /// The commit its workspace starts from, when the run names a repository: the run's
    /// commit for the primary agent, the parent's last checkpoint for a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// What holds for the whole run.
    pub settings: RunSettings,
}

/// What holds for every agent of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Where the agents work.
    pub workspace: WorkspaceRef,
    /// Every agent type of the run, by name (the client's, so every worker knows the same).
    pub agents: Vec<WireSpec>,
    /// Most model requests in flight at once across the whole tree.
    pub max_parallel: u32,
    /// How deep delegation may go.
    pub max_depth: u32,
    /// Most `Task` calls one agent may have running at once.
    pub max_fanout: u32,
    /// Token budget for the whole tree; `None` is unlimited.
    #[serde(default)]
    pub budget_tokens: Option<u64>,
    /// Output cap per model response.
    pub max_tokens: u32,
    /// Overrides the primary agent's `max_turns`.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// The model's context window in tokens, resolved once by the client.
    pub context_tokens: u64,
    /// Input tokens at which conversations are compacted; `None` never compacts.
    #[serde(default)]
    pub compact_at: Option<u64>,
    /// The run's permission mode and rules (the settings files' and the flags'), checked
    /// on the worker as a local run checks them. Required: a payload without them comes
    /// from a client that did not send them, and running it would drop its rules.
    pub permissions: PermissionsSnapshot,
}

/// Where a run's agents work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkspaceRef {
    /// A repository and commit every worker can fetch: read-only agents get a checkout of
    /// it, writing agents a worktree on their own branch, pushed back to it.
    Git {
        /// The repository's URL (or a path every worker can read).
        url: String,
        /// The commit the run starts from.
        commit: String,
    },
    /// Each worker's own `--workspace` folder (every worker on one machine, sharing it).
    Local,
}

/// An agent type as sent to the workers, with what loading it found (which the type's own
/// serialisation leaves out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSpec {
    /// The type.
    pub spec: AgentSpec,
    /// Tools its `tools` gives only through patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limited_tools: Vec<String>,
    /// Entries of `tools` dropped while loading.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_tools: Vec<String>,
}

impl WireSpec {
    /// The wire form of `spec`.
    pub fn new(spec: &AgentSpec) -> Self {
        Self {
            spec: spec.clone(),
            limited_tools: spec.limited_tools.clone(),
            dropped_tools: spec.dropped_tools.clone(),
        }
    }

    /// The type as the worker's registry holds it.
    pub fn into_spec(self) -> AgentSpec {
        let mut spec = self.spec;
        spec.limited_tools = self.limited_tools;
        spec.dropped_tools = self.dropped_tools;
        spec
    }
}

/// A request for a model slot: the `CadreRun` object resolves the awakeable when one is free.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquire {
    /// The awakeable to resolve with a [`Grant`].
    pub awakeable: String,
    /// The run's `max_parallel`.
    pub max_parallel: u32,
    /// The run's token budget.
    pub budget_tokens: Option<u64>,
}

/// A model slot handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Grant {
    /// The run's token budget is spent: the agent stops instead of asking.
    pub exhausted: bool,
}

/// One agent's line in the live roster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Its path.
    pub path: AgentPath,
    /// Its type.
    pub agent_type: String,
    /// What it was asked to do.
    pub description: String,
    /// The worker that ran its latest step.
    pub worker: String,
    /// The turn under way (model requests started), as a local run's roster counts it.
    pub turn: u32,
    /// Tokens used.
    pub tokens: u64,
    /// The tools its latest response asked for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Whether it has ended (its line leaves the roster).
    #[serde(default)]
    pub done: bool,
}

/// One agent's transcript, as its worker wrote it (the JSONL a local run writes), kept by
/// the run's `CadreRoster` object until the client takes it into the run folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTranscript {
    /// The agent's path.
    pub path: AgentPath,
    /// Its transcript, line by line.
    pub text: String,
}
