//! What the commands share: the project and its settings, hooks and definitions, the model,
//! a local run's session, an engine run, the run folders, permissions, the display, and the
//! exit codes. Nothing here knows any one command.

#[macro_use]
pub mod macros;

pub mod claude_settings;
pub mod definitions;
pub mod display;
pub mod engine;
pub mod engine_workflow;
pub mod exit;
pub mod hooks;
pub mod logging;
pub mod model;
pub mod permissions;
pub mod project;
pub mod project_items;
pub mod run_folders;
pub mod run_index;
pub mod served;
pub mod session;
pub mod settings;
pub mod signals;
pub mod table;
pub mod telemetry;
pub mod trust;
pub mod workflow_output;
pub mod workflow_run;
pub mod workflow_tool;
