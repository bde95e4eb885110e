//! `cadre workflow`'s options.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// What `cadre workflow check --help` shows after the options.
const CHECK_HELP: &str =
    "A workflow is named by a path to its file, or by NAME for .cadre/workflows/NAME.yaml
(else the saved workflow whose `name:` is NAME).

The check reads the file strictly (an unknown key is a problem, where a run would only
warn), finds each step's agent type among the project's types (as `cadre run` loads them,
with --agents-dir), checks map.output_schema as a typed answer's schema is checked, opens
the input and renders the first item's prompt (and the reduce prompt). It then reads the
whole input once and counts the items a run would fail at once (bad input, a prompt that
does not render), which does not change the exit code. It calls no model and spends no
token. Exit 0 with a summary and the first prompt; exit 2 with every problem listed.

The file's `input:` is relative to the project root; --input is relative to where you run
cadre. The file format is in docs/workflows.md. Running a workflow (`cadre workflow run`)
is not there yet.

Examples:
  cadre workflow check label-issues
  cadre workflow check path/to/review.yaml --input changed.jsonl --arg style=terse";

/// `cadre workflow …`.
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Check a workflow without spending a token: the file, its agent types, its output
    /// schema, its input and the first item's rendered prompt; exit 2 listing every problem.
    #[command(after_help = CHECK_HELP)]
    Check(Box<WorkflowCheckCmd>),
    /// List the saved workflows (.cadre/workflows/*.yaml): name, description and file.
    List,
}

/// `cadre workflow check`.
#[derive(Debug, Args)]
pub struct WorkflowCheckCmd {
    /// The workflow: a path to its file, or NAME for .cadre/workflows/NAME.yaml.
    #[arg(value_name = "FILE|NAME")]
    pub workflow: String,
    /// Read the items from FILE (or a glob) instead of the file's `input:`.
    #[arg(long, value_name = "FILE")]
    pub input: Option<String>,
    /// Give the template's `args.NAME` the value VALUE (repeatable); NAME must be one the
    /// file's `args:` declares.
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_arg)]
    pub args: Vec<(String, String)>,
    /// Also load agent files from DIR (nearest of all: its types win), as `cadre run
    /// --agents-dir` does.
    #[arg(long = "agents-dir", value_name = "DIR")]
    pub agents_dir: Vec<PathBuf>,
}

/// `--arg NAME=VALUE`.
fn parse_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}
