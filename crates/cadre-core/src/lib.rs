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
//!
//! // An agent type defined in code: a read-only reviewer the primary agent may delegate to.
//! let reviewer = AgentSpec::builder("reviewer")
//!     .description("Reviews a change for bugs; read-only.")
//!     .mode(Mode::Subagent)
//!     .tools(["read_file", "grep"])
//!     .read_only(true)
//!     .prompt("You review code. Report real bugs only, with file and line.")
//!     .build();
//! let orchestrator = Orchestrator::builder()
//!     .anthropic(AnthropicConfig::from_env()?)
//!     .workspace(".")
//!     .agent(reviewer)
//!     .runs_dir(".cadre/runs")
//!     .build()?;
//! let mut events = orchestrator.events();
//! tokio::spawn(async move {
//!     while let Some(event) = events.recv().await {
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
//! A run with a `runs_dir` can be carried on after a crash or a failure of the model:
//! [`JournaledRun::open`] its folder and hand it to [`Orchestrator::resume`].
//! `docs/library.md` walks through the whole surface in order.
//!
//! A tool of your own is a struct, a derived input type and one native `async fn` (no
//! `async-trait`): see [`TypedTool`], and `examples/embedder/typed_tool.rs` for a whole
//! program that depends on cadre-core and tokio alone.
//!
//! Inside: the agent loop ([`Agent::run`]) sends the history and tools to a model, runs the
//! tools it asks for, appends the results and repeats until it stops. Around it: agent types
//! loaded from YAML ([`AgentSpec`], [`Registry`]), the `Task` tool (`run::task`) that
//! delegates to fresh subagents, skills loaded on demand with the `Skill` tool
//! ([`SkillSet`], `run::skill_tool`), Claude Code agent files
//! (`definitions::claude_agents`), the token [`Budget`] shared by the tree, the structured
//! [`Event`]s every agent emits, transcripts on disk, and usage rolled up per agent and per
//! type. A run's steps go to a journal (`record::journal`) it can be resumed from; long
//! conversations are compacted (`run::compaction`); subagents may run in the background
//! (`run::background`) or in a git worktree of their own (`isolation: worktree`). Nothing
//! here knows about terminals.
//!
//! The surface is this root and [`vocab`] (the serialized types a run's log and events speak
//! in). The modules `definitions`, `record` and `run` are the mechanism, private to the
//! crate; the few of their items the workspace's own crates (the CLI, the engine, tests and
//! benchmarks) need come through the hidden module `internal`, which is free to change.

// The mechanism: the facade below and `vocab` are its public face, `internal` the
// workspace's own way in.
pub(crate) mod definitions;
#[doc(hidden)]
pub mod internal;
pub(crate) mod record;
pub(crate) mod run;
pub mod vocab;

/// Workflows: one agent call per item over any number of items, remembered in the journal
/// by content, so a resumed run never repeats finished work (see
/// [`Orchestrator::run_workflow`]).
pub mod workflow {
    pub use crate::run::workflow::{CallKey, ItemCall, ItemResult, WorkItem, Workflow};
}

// One dependency is enough to embed cadre: the crates below it come along, whole and by
// their common names.
#[cfg(feature = "mcp")]
pub use cadre_mcp as mcp;
pub use cadre_model as model;
pub use cadre_model::semconv;
pub use cadre_model::{
    AnthropicConfig, ContentBlock, Message, Model, ModelError, OpenAiConfig, Response, Role, Usage,
};
pub use cadre_tools as tools;
// What a typed tool's input derives and a stream of events needs, so an embedder adds none
// of these crates itself (derives through them take `#[serde(crate = "cadre_core::serde")]`
// and `#[schemars(crate = "cadre_core::schemars")]`).
pub use cadre_tools::{
    Json, SandboxMode, Tool, ToolContext, ToolError, ToolLimits, ToolOutput, TypedTool, Workspace,
};
pub use futures;
pub use schemars;
pub use serde;
pub use serde_json;

pub use definitions::hooks::{Hook, Hooks};
pub use definitions::instructions::{InstructionFile, Instructions};
pub use definitions::permissions::{PermissionMode, PermissionRules, Rule, RuleError};
pub use definitions::registry::Registry;
pub use definitions::skills::{Skill, SkillError, SkillFile, SkillSet};
pub use definitions::spec::{AgentSpec, CompactAt, McpServerRef, Mode, Problem, ToolsDropped};
pub use definitions::spec_builder::AgentSpecBuilder;
pub use record::events::{describe_call, no_events, EventHandler, EventStream};
pub use record::journal::{JournalError, JournaledRun};
pub use record::run_dir::RunDir;
pub use record::transcript::{
    AgentHeader, Earlier, HookRecord, OutcomeRecord, Recorded, TranscriptLine, TranscriptRecord,
};
pub use record::usage::{AgentRecord, Totals, UsageReport};
pub use run::agent::{Agent, AgentConfig};
pub use run::budget::Budget;
pub use run::builder::OrchestratorBuilder;
pub use run::compaction::CompactError;
pub use run::delegate::{Delegate, Delegated, DelegatedCall};
pub use run::hooks::MAX_STOP_BLOCKS;
pub use run::orchestrator::{
    AnswerError, Conversation, Limits, Orchestrator, RosterEntry, RunError, RunErrorKind,
    RunSummary, SubagentError, DEFAULT_COMPACT_AT, DEFAULT_CONTEXT_TOKENS,
};
pub use run::permissions::{
    ApprovalRequest, Approver, Decision, PermissionSettings, Permissions, PermissionsSnapshot,
    RuleFrom,
};
pub use run::skill_tool::SkillTool;
pub use run::team::TeamLimits;
pub use run::toolset::ToolSet;
pub use vocab::{
    AgentLimits, AgentOutcome, AgentPath, CallPermission, Event, HookDecision, HookEvent,
    HookOutcome, Outcome, StopKind,
};
