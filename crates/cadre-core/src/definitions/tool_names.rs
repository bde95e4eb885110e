//! The names of the tools cadre itself gives (`Task`, `Skill`, `Workflow`, the team's) and of Claude
//! Code's tools it does not, as agent files and permission rules write them.

/// The name of the delegation tool.
pub const TASK_TOOL: &str = "Task";
/// The name of the skill-loading tool.
pub const SKILL_TOOL: &str = "Skill";
/// The name of the tool that starts a saved workflow.
pub const WORKFLOW_TOOL: &str = "Workflow";
/// The name of the tool that reads a background subagent's result (it comes with Task).
pub const TASK_OUTPUT_TOOL: &str = "TaskOutput";
/// The name of the tool that stops a background subagent (it comes with Task).
pub const TASK_STOP_TOOL: &str = "TaskStop";

/// The name agent files use for the team's tools (any of them gives all of them).
pub const TEAM_TOOL: &str = "SendMessage";

/// Claude Code tools cadre does not provide; an agent file naming one still loads, without it.
pub const DROPPED_TOOLS: [&str; 9] = [
    "WebFetch",
    "WebSearch",
    "NotebookEdit",
    "NotebookRead",
    "TodoWrite",
    "BashOutput",
    "KillShell",
    "SlashCommand",
    "ExitPlanMode",
];
