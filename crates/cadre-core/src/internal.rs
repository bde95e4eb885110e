//! What the workspace's own crates (the CLI, the engine, cadre-core's tests and benchmarks)
//! take from the mechanism beyond the facade: each item is here for a named user, none is
//! part of the library's surface, and any may change. An embedder needs none of them.

/// The agent-file YAML dialect (serde's, through yaml_serde), so `cadre agents show` and
/// `cadre skills show` print a spec or a skill's front matter as cadre reads it.
pub mod yaml {
    pub use crate::definitions::yaml::{to_string, Mapping, Value};
}

// Hooks as the CLI's settings files load them: the strict check that fails closed, the
// warning a refused entry gives, and the default timeout (settings tests).
pub use crate::definitions::hooks::{HooksCheck, DEFAULT_HOOK_TIMEOUT_SECS, HOOK_REFUSED};
// `cadre doctor` says where each instruction file came from; the CLI's settings name the
// user's folder as the instructions do.
pub use crate::definitions::instructions::{Origin, USER_DIR_LABEL};
// `cadre mcp serve` checks a call's answer schema and model as an agent type's are checked.
pub use crate::definitions::model_settings::schema_problem;
pub use crate::definitions::spec::valid_model;
// A workflow run on a durable engine writes its results file as cadre-core's driver does.
pub use crate::run::workflow::results::ResultsFile;
// The CLI reads Claude Code's `permissions.defaultMode` with cadre's own parser.
pub use crate::definitions::permissions::file_mode;
// cadre-core's fuzz test feeds arbitrary text to the parsers of Claude Code agent files,
// front matter and tool names.
pub use crate::definitions::tools::resolve_tool_name;

/// The Claude Code agent-file parser (cadre-core's fuzz test).
pub mod claude_agents {
    pub use crate::definitions::claude_agents::parse;
}

/// The front matter readers (cadre-core's fuzz test).
pub mod frontmatter {
    pub use crate::definitions::frontmatter::{read_front_matter, split};
}

// The journal's seam: cadre-engine's durable journal implements `Journal` and runs the
// effects it is handed; the CLI's run lists and `runs view` read a journal without running it.
pub use crate::record::journal::{
    read_steps, run_state, Done, Effect, EffectOutcome, Journal, ModelStep, Run, Work, JOURNAL_FILE,
};
// The run folder's names: the CLI makes a run's id before it starts (for the engine's
// invocation), reads the run index, and its tests check the `.gitignore` cadre writes.
pub use crate::record::run_dir::{new_run_id, GITIGNORE, INDEX_FILE};

// The CLI and the engine pick the primary agent's type the way `Orchestrator::run` does.
pub use crate::run::orchestrator::primary_spec;
// cadre-engine refuses the agent settings its workers cannot honour.
pub use crate::run::builder::unhonoured_by_workers;
// A run refuses the tools an untrusted or unloadable PreToolUse hook would have guarded.
pub use crate::run::hooks::guarded_tools;
// The CLI's `runs view` and cadre-core's interleaving test rebuild a team from its steps.
pub use crate::run::team::TeamState;
// cadre-core's results test rebuilds an agent from its journaled steps.
pub use crate::run::state::AgentState;
// The message that asks a cut-off agent to go on (the results tests look for it).
pub use crate::run::continuation::CONTINUE_PROMPT;
// The skills section of a system prompt (the corpus test checks a real skill's entry).
pub use crate::run::prompt::skills_section;

// Numbers and times as people write them in YAML (`50_000`, `5m`): cadre-workflow reads its
// files' with the reader agent types' `limits` use.
pub use crate::vocab::numbers::{opt_time, opt_u64};
