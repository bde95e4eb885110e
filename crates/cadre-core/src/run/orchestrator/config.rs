//! How a run is configured (`RunConfig`, `Limits`) and why one cannot start (`RunError`).

use crate::definitions::instructions::Instructions;
use crate::definitions::skills::SkillSet;
use crate::definitions::spec::ToolsDropped;
use crate::record::journal::{Journal, JournalError};
use crate::run::mcp_tools::McpServers;
use crate::run::permissions::Permissions;
use crate::vocab::outcome::StopKind;
use cadre_model::Model;
use cadre_tools::{SandboxMode, Tool, ToolLimits, Workspace};
use std::path::PathBuf;
use std::sync::Arc;

/// Limits that hold across the whole tree of agents.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limits {
    /// Most model requests in flight at once, across every agent.
    pub max_parallel: usize,
    /// How deep delegation may go: the primary agent is depth 0, its subagents depth 1.
    pub max_depth: u32,
    /// Most `Task` calls one agent may have running at once; the excess is refused.
    pub max_fanout: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_parallel: 16,
            max_depth: 2,
            max_fanout: 64,
        }
    }
}

impl Limits {
    /// These limits with at most `n` model requests in flight at once.
    #[must_use]
    pub fn max_parallel(mut self, n: usize) -> Self {
        self.max_parallel = n;
        self
    }

    /// These limits with delegation at most `depth` deep.
    #[must_use]
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = depth;
        self
    }

    /// These limits with at most `n` `Task` calls running at once per agent.
    #[must_use]
    pub fn max_fanout(mut self, n: usize) -> Self {
        self.max_fanout = n;
        self
    }
}

/// Everything an orchestrator needs besides its registry, as
/// [`OrchestratorBuilder`](crate::OrchestratorBuilder) settles it.
pub(crate) struct RunConfig {
    /// The folder every agent works in.
    pub workspace: Arc<Workspace>,
    /// The model client every agent talks through.
    pub model: Arc<dyn Model>,
    /// The model id for the primary agent and for types that say `inherit`.
    pub model_id: String,
    /// Tree-wide limits.
    pub limits: Limits,
    /// Token budget for the whole tree; `None` is unlimited.
    pub budget_tokens: Option<u64>,
    /// Output cap per model response.
    pub max_tokens: u32,
    /// The models' context window in tokens (old tool results are cleared near it); `None`
    /// takes each model's own: known for Claude models, else as the server reports it,
    /// else [`DEFAULT_CONTEXT_TOKENS`].
    pub context_tokens: Option<u64>,
    /// Input tokens at which conversations are compacted, unless an agent type says
    /// otherwise; `None` never compacts.
    pub compact_at: Option<u64>,
    /// Overrides the primary agent's `max_turns`.
    pub max_turns: Option<u32>,
    /// Tool caps (bash timeout, output size, …).
    pub tool_limits: ToolLimits,
    /// Where run folders go (normally `<workspace>/.cadre/runs`); `None` writes nothing.
    pub runs_dir: Option<PathBuf>,
    /// The skills agents may load with the `Skill` tool.
    pub skills: Arc<SkillSet>,
    /// Whether `bash` runs under the Landlock sandbox (the default) or without one.
    pub sandbox: SandboxMode,
    /// The run's MCP servers, started when an agent allowed them is first built.
    pub mcp: Arc<McpServers>,
    /// Tools beyond the built-ins, for the agent types that name them or allow `"*"`;
    /// read-only types get only those that say they are read-only. One named like a
    /// built-in replaces it.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The run's id (its folder, when that name is free, and its worktree branches);
    /// `None` makes one. A replay passes the recorded run's, so it names things alike.
    pub run_id: Option<String>,
    /// The spec the primary agent runs under when its type has this name, instead of the
    /// registry's (see [`OrchestratorBuilder::primary`](crate::OrchestratorBuilder::primary)).
    pub primary: Option<crate::definitions::spec::AgentSpec>,
    /// The project's instructions (AGENTS.md, CLAUDE.md, …), read once for the whole run so
    /// every agent's system prompt carries the same text.
    pub instructions: Arc<Instructions>,
    /// The run's permission mode, rules and who is asked (default: `auto`, no rules).
    pub permissions: Permissions,
    /// Where the run's steps are journaled when it writes no run folder (a durable engine's
    /// journal); a run folder's own journal replaces it.
    pub journal: Option<Arc<dyn Journal>>,
    /// Where subagents run when not in this process (a durable engine's workers); `None`
    /// runs them here.
    pub delegate: Option<Arc<dyn crate::run::delegate::Delegate>>,
    /// Whether this is a team run, and its limits; `None` makes it one only when the
    /// primary type lists a team tool.
    pub team: Option<crate::run::team::TeamLimits>,
    /// The run's hooks, for every agent (an agent type's own add to them).
    pub hooks: crate::definitions::hooks::Hooks,
    /// What content the run's spans carry (none by default).
    pub record_content: cadre_model::RecordContent,
    /// The project's saved workflows, which the `Workflow` tool starts; `None` offers no
    /// such tool.
    pub workflows: Option<Arc<dyn crate::run::workflow_tool::SavedWorkflows>>,
    /// The budget of the agent this run was started from (by its `Workflow` tool): the
    /// run's own budget is below it, so its tokens count there too.
    pub budget_within: Option<crate::run::budget::Budget>,
    /// The calling run's record of a provider's refusal, shared with it (a run a
    /// `Workflow` call started); `None` gives the run one of its own.
    pub provider_stop: Option<Arc<crate::run::provider_stop::ProviderStop>>,
}

impl RunConfig {
    /// A configuration with default limits and no transcripts.
    pub(crate) fn new(
        workspace: Arc<Workspace>,
        model: Arc<dyn Model>,
        model_id: impl Into<String>,
    ) -> Self {
        Self {
            workspace,
            model,
            model_id: model_id.into(),
            limits: Limits::default(),
            budget_tokens: None,
            max_tokens: 8192,
            context_tokens: None,
            compact_at: Some(DEFAULT_COMPACT_AT),
            max_turns: None,
            tool_limits: ToolLimits::default(),
            runs_dir: None,
            skills: Arc::default(),
            sandbox: SandboxMode::default(),
            mcp: Arc::default(),
            tools: Vec::new(),
            run_id: None,
            primary: None,
            instructions: Arc::default(),
            permissions: Permissions::default(),
            journal: None,
            delegate: None,
            team: None,
            hooks: Default::default(),
            record_content: Default::default(),
            workflows: None,
            budget_within: None,
            provider_stop: None,
        }
    }
}

/// The context window assumed for a model that neither cadre nor its server knows.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 200_000;

/// Input tokens at which conversations are compacted by default.
pub const DEFAULT_COMPACT_AT: u64 = 150_000;

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run hands its subagents to an engine that cannot honour some of its settings
    /// (hooks, MCP servers, a team): refused rather than run with them silently dropped.
    #[error("the engine cannot honour {} of this run's settings:\n  {}", if .0.len() == 1 { "one" } else { "some" }, .0.join("\n  "))]
    Unhonoured(Vec<String>),
    /// An agent type names a tool that no one provides.
    #[error("agent type {agent:?} names the tool {tool:?}, which is no tool of this orchestrator{}", closest_hint(.closest))]
    UnknownTool {
        /// The agent type.
        agent: String,
        /// The name as written.
        tool: String,
        /// The known names closest to it, best first.
        closest: Vec<String>,
    },
    /// A typed run ([`Orchestrator::run_typed`](crate::Orchestrator::run_typed)) brought
    /// back no value of its type.
    #[error(transparent)]
    Answer(AnswerError),
    /// This orchestrator already ran: it is one run's handle.
    #[error("this orchestrator already ran; build another for the next run")]
    AlreadyRan,
    /// No model was given to the builder.
    #[error("no model: give the builder a model client, or an Anthropic or OpenAI-compatible configuration")]
    NoModel,
    /// An OpenAI-compatible server needs the name of its model.
    #[error(
        "an OpenAI-compatible server needs its model's name (for example qwen3:8b for Ollama)"
    )]
    NoModelId,
    /// The workspace folder cannot be used.
    #[error("cannot work in {}: {source}", .dir.display())]
    Workspace {
        /// The folder.
        dir: PathBuf,
        /// Why not.
        source: cadre_tools::ToolError,
    },
    /// The model client could not be made.
    #[error("{0}")]
    Model(#[from] cadre_model::ModelError),
    /// No such agent type.
    #[error("there is no agent type {name:?}; primary types: {known}")]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The types that may run as the primary agent.
        known: String,
    },
    /// The type exists but may not run as the primary agent.
    #[error(
        "agent type {agent_type:?} is a subagent type and cannot run as the primary agent; use a type with mode: primary or all"
    )]
    NotPrimary {
        /// The agent type.
        agent_type: String,
    },
    /// The type cannot start (every entry of its `tools` was dropped while loading).
    #[error(transparent)]
    Unusable(ToolsDropped),
    /// The run folder could not be created.
    #[error("cannot create the run folder: {0}")]
    RunDir(#[from] std::io::Error),
    /// The run's journal could not be read or written.
    #[error("{0}")]
    Journal(#[from] JournalError),
    /// Resuming needs a journal, and this run has none (or no run header).
    #[error("run {run_id} has no journal to resume from (it was made by an older cadre, or with --no-transcripts)")]
    NoJournal {
        /// The run's id.
        run_id: String,
    },
    /// The run to resume already ended.
    #[error("run {id} already finished{}; to ask a follow-up, use `cadre run --resume {id} TASK`", how_it_ended(.stop))]
    AlreadyFinished {
        /// The run id.
        id: String,
        /// How it ended.
        stop: String,
    },
    /// Compacting the conversation failed.
    #[error("could not compact the conversation: {0}")]
    Compact(#[source] crate::run::compaction::CompactError),
    /// The run stopped before its end, as a file it keeps (its journal, a whole answer)
    /// could not be written; its journal ends on the last step written whole.
    #[error("the run stopped, as it {lost}{}", resume_hint(.run.as_deref()))]
    Stopped {
        /// The run's id, when it has a folder to be resumed from.
        run: Option<String>,
        /// What it could not keep.
        #[source]
        lost: crate::record::failure::Lost,
    },
    /// A workflow was to go on in a run that is not a workflow run.
    #[error("run {run_id} is not a workflow run; `cadre resume {run_id}` carries it on")]
    NotAWorkflow {
        /// The run's id.
        run_id: String,
    },
    /// The run to continue has not ended: resume it first.
    #[error("run {run_id} has not finished; `cadre resume {run_id}` carries it on")]
    NotFinished {
        /// The run's id.
        run_id: String,
    },
}

/// Why a typed run brought back no value of its type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The type's schema cannot be sent as an answer schema.
    #[error("the answer's type cannot be used: {why}")]
    Type {
        /// The type's name.
        type_name: &'static str,
        /// Why its schema is no usable JSON Schema.
        why: String,
    },
    /// The agent stopped without an answer.
    #[error("the agent gave no answer: {stop}")]
    NoAnswer {
        /// How it stopped.
        stop: StopKind,
    },
    /// The answer was valid against the schema but does not decode as the type.
    #[error("the answer does not decode as the type asked for: {0}")]
    Undecodable(#[source] serde_json::Error),
}

/// Whose fault a [`RunError`] is, as the one who started the run can act on it (the `cadre`
/// command's exit code says which). Not `#[non_exhaustive]`: a program's mapping of it is
/// meant to be exhaustive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunErrorKind {
    /// Bad usage or configuration: something in what was given can be fixed.
    Usage,
    /// The model API failed.
    Model,
    /// cadre itself failed: a file it could not read or write.
    Cadre,
}

impl RunError {
    /// Whose fault this is. The match names every variant, so a new one must say.
    pub fn kind(&self) -> RunErrorKind {
        match self {
            Self::RunDir(_) | Self::Journal(_) | Self::Stopped { .. } => RunErrorKind::Cadre,
            // Compacting is one model request; its failure is the model's.
            Self::Compact(_) => RunErrorKind::Model,
            Self::Unhonoured(_)
            | Self::UnknownTool { .. }
            | Self::Answer(_)
            | Self::AlreadyRan
            | Self::NoModel
            | Self::NoModelId
            | Self::Workspace { .. }
            | Self::Model(_)
            | Self::UnknownAgent { .. }
            | Self::NotPrimary { .. }
            | Self::Unusable(_)
            | Self::NoJournal { .. }
            | Self::AlreadyFinished { .. }
            | Self::NotFinished { .. }
            | Self::NotAWorkflow { .. } => RunErrorKind::Usage,
        }
    }
}

/// How a run stopped by a file it could not keep goes on: `cadre resume` of its folder,
/// once the file can be written; nothing without a folder.
fn resume_hint(run: Option<&str>) -> String {
    match run {
        Some(run) => format!("; once that can be written, `cadre resume {run}` carries it on"),
        None => String::new(),
    }
}

/// ` (did you mean …?)` for the closest names, or nothing.
fn closest_hint(closest: &[String]) -> String {
    match closest {
        [] => String::new(),
        names => format!(" (did you mean {}?)", names.join(" or ")),
    }
}

/// How a finished run ended, for [`RunError::AlreadyFinished`]: nothing when it simply
/// finished, so the message does not say "finished" twice.
fn how_it_ended(stop: &str) -> String {
    if stop == StopKind::Done.to_string() {
        String::new()
    } else {
        format!(" ({stop})")
    }
}
