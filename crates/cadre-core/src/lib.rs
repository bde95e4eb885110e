//! Thinks in loops.
//!
//! The agent loop ([`Agent::run`]): send the history and tools to a model, run the tools it
//! asks for, append the results, repeat until it stops. Around it: agent types loaded from
//! YAML ([`AgentSpec`], [`Registry`]), the [`Orchestrator`] that builds every agent of a run
//! and gives each the `Task` tool ([`run::task`]) to delegate to fresh subagents, skills loaded
//! on demand with the `Skill` tool ([`SkillSet`], [`run::skill_tool`]), Claude Code agent files
//! ([`definitions::claude_agents`]), the token
//! [`Budget`] shared by the tree, the structured [`Event`]s every agent emits, transcripts on
//! disk, and usage rolled up per agent and per type. A run's steps go to a journal
//! ([`record::journal`]) it can be resumed from; long conversations are compacted
//! ([`run::compaction`]); subagents may run in the background ([`run::background`]) or in
//! a git worktree of their own (`isolation: worktree`). Nothing here knows about terminals.
//!
//! A library caller needs a few lines:
//!
//! ```no_run
//! # async fn demo(model: std::sync::Arc<dyn cadre_model::Model>) -> Result<(), Box<dyn std::error::Error>> {
//! use cadre_core::{no_events, Orchestrator, Registry, RunConfig};
//! use cadre_tools::Workspace;
//! let workspace = std::sync::Arc::new(Workspace::new(".")?);
//! let config = RunConfig::new(workspace, model, "claude-sonnet-5-5");
//! let orchestrator = Orchestrator::new(Registry::shipped(), config, no_events());
//! let (outcome, summary) = orchestrator.run("main", "Map this project's modules").await?;
//! println!("{}\n{} tokens", outcome.text, summary.usage.total.usage.total());
//! # Ok(()) }
//! ```

pub mod definitions;
pub mod record;
pub mod run;

pub use definitions::permissions::{PermissionMode, PermissionRules, Rule, RuleError};
pub use definitions::registry::{tools_for, Registry};
pub use definitions::skills::{Skill, SkillError, SkillFile, SkillSet};
pub use definitions::spec::{AgentSpec, CompactAt, McpServerRef, Mode, Problem};
pub use record::events::{describe_call, no_events, Event, EventHandler};
pub use record::usage::{AgentRecord, Totals, UsageReport};
pub use run::agent::{Agent, AgentConfig};
pub use run::budget::Budget;
pub use run::compaction::CompactError;
pub use run::orchestrator::{
    Limits, Orchestrator, RosterEntry, RunConfig, RunError, RunSummary, SubagentError,
    DEFAULT_COMPACT_AT, DEFAULT_CONTEXT_TOKENS,
};
pub use run::outcome::{AgentOutcome, StopKind};
pub use run::permissions::{
    AgentPermissions, ApprovalRequest, Approver, Decision, PermissionSettings, Permissions,
};
pub use run::skill_tool::SkillTool;
pub use run::toolset::ToolSet;
