//! `cadre workflow check|list|run|retry`: a workflow checked without spending a token, the
//! project's saved workflows, a workflow run, and a run's failed items or one item again.

use crate::args::{Engine, WorkflowCheckCmd, WorkflowCommand, WorkflowRetryCmd, WorkflowRunCmd};
use crate::common::definitions::{load_registry, print_problems};
use crate::common::display::{fit_lines, one_line, stdout_width};
use crate::common::engine_workflow;
use crate::common::exit::{CliError, Code, Result};
use crate::common::model::model_id;
use crate::common::project::workspace_root;
use crate::common::run_folders::{find, open_run};
use crate::common::workflow_run::{self, Again, Invocation, Job};
use cadre_workflow::{
    find_workflow, saved_workflows, InputSpec, Items, Workflow, WorkflowError, WORKFLOWS_DIR,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Runs one `cadre workflow` command.
pub async fn workflow(
    cmd: WorkflowCommand,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    let root = workspace_root(directory.clone())?;
    match cmd {
        WorkflowCommand::Check(cmd) => check(&cmd, &root),
        WorkflowCommand::List => Ok(list(&root)),
        WorkflowCommand::Run(cmd) => run(*cmd, &root, directory, quiet).await,
        WorkflowCommand::Retry(cmd) => retry(*cmd, &root, directory, quiet).await,
    }
}

/// `cadre workflow run`: a new run of the workflow, invoked as the run folder keeps it.
async fn run(
    cmd: WorkflowRunCmd,
    root: &Path,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    let file = find_workflow(root, &cmd.workflow).map_err(CliError::invalid)?;
    let invocation = Invocation {
        file: std::path::absolute(&file).unwrap_or(file),
        input: cmd.input.as_deref().map(from_here),
        args: cmd.args,
        concurrency: cmd.concurrency.map(|n| n as usize),
        model: model_id(&cmd.run)?,
        output: cmd.output.as_deref().map(absolute),
        called_by: None,
    };
    if cmd.run.engine == Engine::Restate {
        let job = engine_workflow::Job::Fresh(invocation);
        return engine_workflow::run(cmd.run, job, directory, quiet).await;
    }
    workflow_run::run(cmd.run, Job::Fresh(invocation), directory, quiet).await
}

/// `cadre workflow retry`: the run goes on, its failed items (or one item) run again.
async fn retry(
    cmd: WorkflowRetryCmd,
    root: &Path,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    let dir = find(root, &cmd.run_id)?;
    let Some(invocation) = Invocation::read(&dir) else {
        return Err(CliError::config(format!(
            "run {} is not a workflow run; `cadre resume {}` carries it on",
            cmd.run_id, cmd.run_id
        )));
    };
    let again = match (cmd.item, cmd.prompt) {
        (Some(key), Some(text)) => {
            known_item(&dir, &key)?;
            Again::Item(key, text)
        }
        _ => Again::Failed,
    };
    let mut invocation = invocation?;
    if let Some(output) = cmd.output.as_deref() {
        // Kept: a later resume writes it too.
        invocation.output = Some(absolute(output));
    }
    if crate::common::engine::find(root, &cmd.run_id).is_some() {
        // An engine run goes on on the engine, invoked as its folder now keeps it.
        let kept = serde_json::to_vec_pretty(&invocation)
            .map_err(|e| CliError::failed_from("cannot encode the run's invocation", e))?;
        let file = dir.join(cadre_core::workflow::Workflow::INVOCATION_FILE);
        std::fs::write(&file, kept)
            .map_err(|e| CliError::failed_from(format!("cannot write {}", file.display()), e))?;
        let job = engine_workflow::Job::Resume(dir, again);
        return engine_workflow::run(cmd.run, job, directory, quiet).await;
    }
    let job = Job::Resume(Box::new(open_run(&dir)?), invocation, again);
    workflow_run::run(cmd.run, job, directory, quiet).await
}

/// Refuses an item `key` the run in `dir` has no result line for.
fn known_item(dir: &Path, key: &str) -> Result<()> {
    let results = dir.join(cadre_core::workflow::Workflow::RESULTS_FILE);
    let text = std::fs::read_to_string(&results).unwrap_or_default();
    let known = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| v["key"] == key && v["agent"].is_string());
    if known {
        return Ok(());
    }
    Err(CliError::config(format!(
        "--item {key}: the run has no item {key:?} whose agent ran (see {})",
        results.display()
    )))
}

/// What the check of the first item found: its prompt, or nothing when a problem stopped it.
struct FirstItem {
    /// `item "KEY" (line N)`.
    label: String,
    /// Its rendered map prompt.
    prompt: String,
}

/// `cadre workflow check`: every problem of the file, its agent types, its schema, its
/// input and its first prompt, or a summary; no model is called.
fn check(cmd: &WorkflowCheckCmd, root: &Path) -> Result<Code> {
    let file = find_workflow(root, &cmd.workflow).map_err(CliError::invalid)?;
    let (workflow, warnings) = Workflow::load(&file).map_err(CliError::invalid)?;
    let input = cmd.input.as_deref().map(from_here);
    let mut problems = workflow.problems(&warnings, input.as_deref());
    let registry = load_registry(root, &cmd.agents_dir)?;
    print_problems(registry.problems());
    problems.extend(workflow.check_agents(&registry));
    let first = render_first(&workflow, cmd, input.as_deref(), root, &mut problems);
    let shown = shown_path(&file, root);
    if !problems.is_empty() {
        outln!("{shown}: {} problem(s):", problems.len());
        for p in &problems {
            outln!("  - {p}");
        }
        return Ok(Code::Config);
    }
    out!("{}", summary(&workflow, &shown, input.as_deref(), root));
    if let Some(scan) = scan(&workflow, cmd, input.as_deref(), root) {
        out!("{scan}");
    }
    if let Some(first) = first {
        outln!("first item, {}; its prompt:", first.label);
        for line in first.prompt.lines() {
            outln!("  {line}");
        }
    }
    outln!("OK: no model was called, no token spent");
    Ok(Code::Done)
}

/// A path given on the command line, made absolute from where cadre runs.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// A path given on the command line, made absolute from where cadre runs (a path in the
/// file stays relative to the project root).
fn from_here(path: &str) -> String {
    std::path::absolute(path).map_or_else(|_| path.to_owned(), |p| p.display().to_string())
}

/// `path` as shown: relative to the project root when it lies there.
fn shown_path(path: &Path, root: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    absolute
        .strip_prefix(root)
        .unwrap_or(&absolute)
        .display()
        .to_string()
}

/// Renders the first item's prompt (and the reduce prompt), adding what stops either to
/// `problems`.
fn render_first(
    workflow: &Workflow,
    cmd: &WorkflowCheckCmd,
    input: Option<&str>,
    root: &Path,
    problems: &mut Vec<WorkflowError>,
) -> Option<FirstItem> {
    let mut fail = |e: WorkflowError| {
        problems.push(e);
        None
    };
    let args = match workflow.args_with(&cmd.args) {
        Ok(args) => args,
        Err(e) => return fail(e),
    };
    let prompts = match workflow.prompts() {
        Ok(p) => p,
        Err(e) => return fail(e.into()),
    };
    // Where a run would write its results: the reduce prompt renders with it.
    let results = PathBuf::from(".cadre/runs/RUN_ID/results.jsonl");
    if let Some(Err(e)) = prompts.reduce(&results, &args) {
        fail(e.into());
    }
    let spec = workflow.input_spec(input, root).ok()?;
    let item = match first_item(&spec, workflow.key.as_deref()) {
        Ok(item) => item,
        Err(e) => return fail(e),
    };
    let label = match item.line {
        Some(line) => format!("key {:?} (line {line})", item.key),
        None => format!("key {:?}", item.key),
    };
    match prompts.map(&item, &args) {
        Ok(prompt) => Some(FirstItem { label, prompt }),
        Err(e) => fail(e.into()),
    }
}

/// How many examples of failing items the check shows.
const EXAMPLES: usize = 3;

/// What reading the whole input found: how many items, and which would fail at once.
struct Scan {
    /// Every item, bad ones counted.
    items: u64,
    /// The items that are bad input or whose prompt does not render.
    failing: u64,
    /// The first few of those, said.
    examples: Vec<String>,
}

impl std::fmt::Display for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.failing == 0 {
            return writeln!(f, "  items   {}", self.items);
        }
        writeln!(
            f,
            "  items   {}, of which {} would fail (bad input, or a prompt that does not render):",
            self.items, self.failing
        )?;
        for example in &self.examples {
            writeln!(f, "    - {example}")?;
        }
        let more = self.failing - self.examples.len() as u64;
        if more > 0 {
            writeln!(f, "    … and {more} more")?;
        }
        Ok(())
    }
}

/// Reads the whole input once, an item at a time, rendering each prompt (no model is
/// called): how many items there are and which would fail. None when the input or the
/// templates cannot be used at all (a problem said already).
fn scan(
    workflow: &Workflow,
    cmd: &WorkflowCheckCmd,
    input: Option<&str>,
    root: &Path,
) -> Option<Scan> {
    let args = workflow.args_with(&cmd.args).ok()?;
    let prompts = workflow.prompts().ok()?;
    let mut scan = Scan {
        items: 0,
        failing: 0,
        examples: Vec::new(),
    };
    for item in workflow.items(input, root).ok()? {
        scan.items += 1;
        let failure = match item {
            Err(e) => e.to_string(),
            Ok(item) => match prompts.map(&item, &args) {
                Ok(_) => continue,
                Err(e) => e.to_string(),
            },
        };
        scan.failing += 1;
        if scan.examples.len() < EXAMPLES {
            scan.examples.push(failure);
        }
    }
    Some(scan)
}

/// The first item of `spec`'s input, or why there is none.
fn first_item(spec: &InputSpec, key: Option<&str>) -> Result<cadre_workflow::Item, WorkflowError> {
    match Items::open(spec, key)?.next() {
        Some(item) => Ok(item?),
        None => Err(WorkflowError::NoItems {
            input: spec.written.clone(),
        }),
    }
}

/// What `cadre workflow check` says of a workflow that checks out.
fn summary(w: &Workflow, shown: &str, input: Option<&str>, root: &Path) -> String {
    let mut text = format!("workflow {} ({shown})", w.name);
    if !w.description.trim().is_empty() {
        let _ = write!(text, ": {}", one_line(&w.description));
    }
    text.push('\n');
    if let Ok(spec) = w.input_spec(input, root) {
        let named = w
            .key
            .as_ref()
            .map_or("by position".to_owned(), |k| format!("by `{k}`"));
        let _ = writeln!(
            text,
            "  input   {} ({}), items named {named}",
            spec.written,
            spec.format.as_str()
        );
    }
    let m = &w.map;
    let answer = if m.output_schema.is_some() {
        "typed answers (output_schema)"
    } else {
        "text answers"
    };
    let _ = writeln!(
        text,
        "  map     {}, {} at once, {} retries, {answer}, limits: {}",
        m.agent,
        m.concurrency,
        m.retries,
        limits(&m.limits)
    );
    if let Some(r) = &w.reduce {
        let _ = writeln!(text, "  reduce  {}", r.agent);
    }
    let budget = w
        .budget
        .tokens
        .map_or("none".to_owned(), |t| format!("{t} tokens"));
    let _ = writeln!(text, "  budget  {budget}");
    if !w.args.is_empty() {
        let names: Vec<String> = w.args.keys().map(|k| format!("args.{k}")).collect();
        let _ = writeln!(text, "  args    {}", names.join(", "));
    }
    text
}

/// An agent's limits in words: `50000 tokens, 10 turns, 5m`, or `none`.
fn limits(l: &cadre_workflow::Limits) -> String {
    let parts: Vec<String> = [
        l.tokens.map(|t| format!("{t} tokens")),
        l.turns.map(|t| format!("{t} turns")),
        l.time.map(|t| humantime::format_duration(t).to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `cadre workflow list`: each saved workflow's name, description and file.
fn list(root: &Path) -> Code {
    let files = saved_workflows(root);
    if files.is_empty() {
        errln!(
            "no saved workflows: none in {} (a workflow is a YAML file there; see docs/workflows.md)",
            root.join(WORKFLOWS_DIR).display()
        );
        return Code::Done;
    }
    let mut rows = Vec::new();
    let mut unreadable = 0;
    for file in &files {
        match Workflow::load(file) {
            Ok((w, _)) => {
                let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
                let name = if w.name.trim().is_empty() {
                    stem.unwrap_or_default()
                } else {
                    w.name
                };
                rows.push((name, one_line(&w.description), shown_path(file, root)));
            }
            Err(e) => {
                unreadable += 1;
                errln!("cadre: skipped: {e}");
            }
        }
    }
    let width = |f: fn(&(String, String, String)) -> &String, min: usize| {
        rows.iter()
            .map(|r| f(r).chars().count())
            .max()
            .unwrap_or(0)
            .max(min)
    };
    let name_width = width(|r| &r.0, 4);
    let file_width = width(|r| &r.2, 4);
    let mut text = format!(
        "{:<name_width$} {:<file_width$} description\n",
        "name", "file"
    );
    for (name, description, file) in &rows {
        let _ = writeln!(
            text,
            "{name:<name_width$} {file:<file_width$} {description}"
        );
    }
    out!("{}", fit_lines(&text, stdout_width()));
    if unreadable > 0 {
        errln!("\n{unreadable} workflow file(s) could not be read; `cadre workflow check FILE` says why");
    }
    Code::Done
}
