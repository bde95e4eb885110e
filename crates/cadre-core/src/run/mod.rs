//! Running agents: the loop, the orchestrator that builds every agent of a run, the `Task`,
//! `Skill` and `Workflow` tools, the tool set, the shared budget, and compaction that keeps the context in check.

pub mod agent;
pub mod answer;
pub mod background;
pub mod budget;
pub mod builder;
pub mod compaction;
pub mod context;
pub mod continuation;
pub mod delegate;
pub mod fork;
pub mod hooks;
#[cfg(feature = "mcp")]
pub(crate) mod mcp_tools;
// Built without MCP: the same names, and no server is ever there.
#[cfg(not(feature = "mcp"))]
#[path = "mcp_tools_off.rs"]
pub(crate) mod mcp_tools;
pub mod model_settings;
pub mod orchestrator;
pub mod permissions;
pub mod prompt;
pub(crate) mod provider_stop;
pub mod skill_tool;
pub(crate) mod spans;
pub mod state;
#[cfg(test)]
mod state_props;
pub mod task;
pub mod task_result;
pub mod team;
pub mod toolset;
pub mod workflow;
pub mod workflow_tool;

// The paths these modules had before they moved down into the vocabulary, so code that
// names them still builds; to go once nothing names them.
