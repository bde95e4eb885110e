//! `cadre runs`'s options.

use super::worker::whole;
use clap::Subcommand;
use std::path::PathBuf;

/// `cadre runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List past runs, newest first: id, start (UTC), outcome, agents, tokens, time, task.
    /// A run stopped before it ended (killed, or still running) shows as `unfinished`.
    List {
        /// Show at most N runs.
        #[arg(long, default_value_t = 20, value_name = "N", value_parser = whole::<usize>(1, None), allow_negative_numbers = true)]
        limit: usize,
        /// Print a JSON array instead: one object per run (id, started, task, outcome,
        /// finished, agents, unfinished_agents, tokens, elapsed_ms).
        #[arg(long)]
        json: bool,
    },
    /// Show one run: every agent as a tree (type, outcome, turns, tool calls, tokens,
    /// time), then the task and the answer. A run with no summary.json is shown as
    /// unfinished, with what its transcripts tell (which agents ended, which did not).
    #[command(
        after_help = "Examples:\n  cadre runs show latest\n  cadre runs show 20261201-1015          (a unique prefix of an id)\n  cadre runs show latest --html run.html  (open run.html in any browser)"
    )]
    Show {
        /// The run: its id, a unique prefix of it, or `latest`.
        #[arg(value_name = "RUN_ID")]
        run_id: String,
        /// Write a self-contained HTML page instead (no network needed to view it): a
        /// timeline with one lane per agent, its turns and tool calls as bars; click a
        /// bar for its details.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// List the git branches a run's isolated subagents made (`cadre/<run-id>/<agent>`), or
    /// remove them, with any worktree left behind, with --delete.
    #[command(
        after_help = "Examples:\n  cadre runs branches latest\n  git diff main...cadre/20261201-101500-1234/code-1   (review one)\n  cadre runs branches latest --delete"
    )]
    Branches {
        /// The run: its id, a unique prefix of it, or `latest`.
        #[arg(value_name = "RUN_ID")]
        run_id: String,
        /// Delete the run's branches and worktrees instead of listing them.
        #[arg(long)]
        delete: bool,
    },
}
