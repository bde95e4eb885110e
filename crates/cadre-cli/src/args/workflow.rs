//! `cadre workflow`'s options.

use clap::Args;
use std::path::PathBuf;

/// What `cadre workflow run --help` shows after the options.
pub(crate) const RUN_HELP: &str = "Each item of the input is one agent call (map.agent on its rendered map.prompt), at
most --concurrency at once; items are read from the input only as slots free, so any
number of items may be given. A run is a run like any other: .cadre/runs/RUN_ID/ holds its
journal, transcript and summary, and results.jsonl, one line per item as it ends:
  {\"key\", \"outcome\", \"output\", \"usage\", \"agent\", \"call\", \"error\", \"line\", \"attempts\"}
output is the typed JSON when map.output_schema is given, else the answer's text. A bad
item (not JSON, no key field, a duplicate key, a prompt that does not render) is its own
outcome, `failed: bad input`, and the others go on.

Each call is remembered in the journal by its content (agent type, rendered prompt,
schema, limits, model): `cadre resume RUN_ID` runs only what has no finished result, and
after editing the file only the items whose call changed run again.

A failed item is tried again map.retries times, with backoff. A key the provider refuses
(401, a 403 whose error says permission, no credit or quota) stops all scheduling: no item
starts after it, and cadre exits 3 naming the error; `cadre resume RUN_ID` goes on later.
budget.tokens is the whole run's token budget (--budget-tokens overrides it), what it spent
before a resume included.

Exit codes: 0 every item completed, 1 an item did not (failed, cut, budget…: see each
outcome in results.jsonl) or the budget ran out, 2 usage, 3 the provider refused the run,
129 the terminal hung up, 130 cancelled (Ctrl-C, SIGTERM). A resume or retry of a workflow
run exits the same way.

Examples:
  cadre workflow run label-issues
  cadre workflow run review.yaml --input changed.jsonl --concurrency 32 --output labels.csv
  cadre workflow retry RUN_ID --failed
  cadre workflow retry RUN_ID --item 17 --prompt \"Use the label `bug` only for crashes.\"";

/// What `cadre workflow retry --help` shows after the options.
pub(crate) const RETRY_HELP: &str =
    "--failed runs again every item whose last attempt failed (the others' results stand).
--item KEY --prompt TEXT continues that item's agent from its history with TEXT as a new
message (a fix round): the model sees the earlier turns, and the item's line in
results.jsonl is its new answer. The workflow file and input are read again as the run
was invoked.

Examples:
  cadre workflow retry 20261205-101500-4242 --failed
  cadre workflow retry 20261205-101500-4242 --item 17 --prompt \"Answer in one word.\"";

/// What `cadre workflow check --help` shows after the options.
pub(crate) const CHECK_HELP: &str =
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
cadre. The file format is in docs/workflows.md; `cadre workflow run` runs it.

Examples:
  cadre workflow check label-issues
  cadre workflow check path/to/review.yaml --input changed.jsonl --arg style=terse";

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
pub(crate) fn parse_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}
