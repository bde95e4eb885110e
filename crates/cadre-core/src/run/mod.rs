//! Running agents: the loop, the orchestrator that builds every agent of a run, the `Task`
//! and `Skill` tools, the tool set, the shared budget, and compaction that keeps the context in check.

pub mod agent;
pub mod background;
pub mod budget;
pub mod builder;
pub mod compaction;
pub mod context;
pub mod delegate;
pub mod hooks;
pub(crate) mod mcp_tools;
pub mod orchestrator;
pub mod outcome;
pub mod permissions;
pub mod prompt;
pub mod skill_tool;
pub mod state;
#[cfg(test)]
mod state_props;
pub mod task;
pub mod team;
pub mod toolset;
