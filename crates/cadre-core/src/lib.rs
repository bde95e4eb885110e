//! Thinks in loops: cadre as a library.
//!
//! Start from [`Orchestrator::builder`]: give it a model, a workspace, agent types (the
//! shipped ones, folders of YAML or Claude Code files, or [`AgentSpec`]s made in code),
//! skills, your own tools and limits; `build()` gives a running [`Orchestrator`], whose
//! [`run`](Orchestrator::run) drives the primary agent — and every subagent it delegates to
//! with the `Task` tool — to its answer, and whose [`events`](Orchestrator::events) stream
//! what every agent does while it runs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use cadre_core::{AgentSpec, AnthropicConfig, Event, Mode, Orchestrator};
//! use futures::StreamExt;
//!
//! // An agent type defined in code: a read-only reviewer the primary agent may delegate to.
//! let reviewer = AgentSpec {
//!     name: "reviewer".into(),
//!     description: "Reviews a change for bugs; read-only.".into(),
//!     mode: Mode::Subagent,
//!     tools: vec!["read_file".into(), "grep".into()],
//!     read_only: true,
//!     prompt: "You review code. Report real bugs only, with file and line.".into(),
//!     ..AgentSpec::default()
//! };
//! let orchestrator = Orchestrator::builder()
//!     .anthropic(AnthropicConfig::from_env()?)
//!     .workspace(".")
//!     .agent(reviewer)
//!     .runs_dir(".cadre/runs")
//!     .build()?;
//! let mut events = orchestrator.events();
//! tokio::spawn(async move {
//!     while let Some(event) = events.next().await {
//!         if let Event::ToolCall { agent, name, .. } = event {
//!             eprintln!("{agent}: {name}");
//!         }
//!     }
//! });
//! let (outcome, summary) = orchestrator.run("main", "Review the last commit").await?;
//! println!("{}\n{} tokens", outcome.text, summary.usage.total.usage.total());
//! # Ok(()) }
//! ```
//!
//! A tool of your own is a struct, a derived input type and one async fn: see
//! [`cadre_tools::TypedTool`], and `examples/weather.rs` for a whole program (a typed tool and
//! an agent type defined in code, replayed offline from a cassette).
//!
//! Inside: the agent loop ([`Agent::run`]) sends the history and tools to a model, runs the
//! tools it asks for, appends the results and repeats until it stops. Around it: agent types
//! loaded from YAML ([`AgentSpec`], [`Registry`]), the `Task` tool ([`run::task`]) that
//! delegates to fresh subagents, skills loaded on demand with the `Skill` tool
//! ([`SkillSet`], [`run::skill_tool`]), Claude Code agent files
//! ([`definitions::claude_agents`]), the token [`Budget`] shared by the tree, the structured
//! [`Event`]s every agent emits, transcripts on disk, and usage rolled up per agent and per
//! type. A run's steps go to a journal ([`record::journal`]) it can be resumed from; long
//! conversations are compacted ([`run::compaction`]); subagents may run in the background
//! ([`run::background`]) or in a git worktree of their own (`isolation: worktree`). Nothing
//! here knows about terminals.

pub mod definitions;
pub mod record;
pub mod run;
pub mod vocab;

// One dependency is enough to embed cadre: the crates below it come along, whole and by
// their common names.
pub use cadre_mcp as mcp;
pub use cadre_model as model;
pub use cadre_model::{
    AnthropicConfig, ContentBlock, Message, Model, ModelError, OpenAiConfig, Response, Role, Usage,
};
pub use cadre_tools as tools;
pub use cadre_tools::{
    Json, SandboxMode, Tool, ToolContext, ToolError, ToolLimits, ToolOutput, TypedTool, Workspace,
};

/// The README's code, compiled as a doctest so it cannot drift from the library.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The library guide's code (the README links to it), compiled as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDoctests;

pub use definitions::hooks::{Hook, Hooks, DEFAULT_HOOK_TIMEOUT_SECS};
pub use definitions::instructions::{InstructionFile, Instructions};
pub use definitions::permissions::{PermissionMode, PermissionRules, Rule, RuleError};
pub use definitions::registry::{tools_for, Registry};
pub use definitions::skills::{Skill, SkillError, SkillFile, SkillSet};
pub use definitions::spec::{AgentSpec, CompactAt, McpServerRef, Mode, Problem};
pub use record::events::{describe_call, no_events, EventHandler, EventStream};
pub use record::run_dir::RunDir;
pub use record::transcript::{
    AgentHeader, Earlier, HookRecord, OutcomeRecord, Recorded, RunTranscript, Transcript,
    TranscriptLine, TranscriptRecord,
};
pub use record::usage::{AgentRecord, Totals, UsageReport};
pub use run::agent::{Agent, AgentConfig};
pub use run::budget::Budget;
pub use run::builder::{unhonoured_by_workers, OrchestratorBuilder};
pub use run::compaction::CompactError;
pub use run::delegate::{Delegate, Delegated, DelegatedCall};
pub use run::hooks::{guarded_tools, MAX_STOP_BLOCKS};
pub use run::orchestrator::{
    primary_spec, Limits, Orchestrator, RosterEntry, RunError, RunSummary, SubagentError,
    DEFAULT_COMPACT_AT, DEFAULT_CONTEXT_TOKENS,
};
pub use run::permissions::{
    AgentPermissions, ApprovalRequest, Approver, Decision, PermissionSettings, Permissions,
    PermissionsSnapshot, RuleFrom,
};
pub use run::skill_tool::SkillTool;
pub use run::team::{Seat, Team, TeamError, TeamLimits};
pub use run::toolset::ToolSet;
pub use vocab::agent_path::AgentPath;
pub use vocab::event::Event;
pub use vocab::hooks::HookEvent;
pub use vocab::hooks::{CallPermission, HookDecision, HookOutcome};
pub use vocab::outcome::{AgentOutcome, Outcome, StopKind};
