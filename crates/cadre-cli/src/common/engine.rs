//! `cadre run --engine restate` and `cadre resume` of such a run: a run on the workers of
//! a Restate server (each a `cadre worker`), followed from here with the same live roster,
//! usage table and exit codes as a local one.

mod refusals;
mod workspace;

use crate::args::RunArgs;
use crate::common::definitions::{load_servers, print_problems};
use crate::common::display::{one_line, shown_path, Display};
use crate::common::exit::{CliError, Code, Result};
use crate::common::model::model_id;
use crate::common::project::{user_dir, workspace_root};
use cadre_core::internal::new_run_id;
use cadre_core::{
    AgentOutcome, AgentPath, AgentSpec, Delegated, DelegatedCall, Event, PermissionsSnapshot,
    Registry, RosterEntry, RunDir, RunSummary, UsageReport,
};
use cadre_engine::client::{Admin, Ingress, Stuck};
use cadre_engine::wire::{AgentCall, Progress, RunSettings, WireSpec, WorkspaceRef};
use refusals::{hooks_for_workers, refuse, unhonoured, NO_CASSETTE};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use workspace::workspace_ref;

/// An engine run, as `engine.json` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EngineRun {
    /// The run id.
    pub(crate) run: String,
    /// Its primary invocation (none for a workflow run: each item is one).
    pub(crate) invocation: String,
    /// Restate's ingress.
    pub(crate) ingress: String,
    /// The primary agent's type (`workflow` for a workflow run).
    pub(crate) agent: String,
    /// The model.
    pub(crate) model: String,
    /// The task (a workflow run's name).
    pub(crate) task: String,
    /// Restate's admin API, asked why the run waits (older notes have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) admin: Option<String>,
    /// When the run was submitted, in milliseconds since the Unix epoch: a client that
    /// follows it again counts its time from there (older notes have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) submitted_ms: Option<u64>,
}

/// `cadre run --engine restate TASK`: submits the run and follows it to its end.
pub async fn run(
    mut args: RunArgs,
    task: String,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    let decided = decide(&mut args, directory, quiet)?;
    let spec = cadre_core::internal::primary_spec(&decided.registry, &args.agent)?.clone();
    let model = model_id(&args)?;
    let run = new_run_id();
    let mut call = agent_call(
        &args,
        &decided.registry,
        spec,
        &model,
        &task,
        run.clone(),
        decided.permissions.clone(),
    );
    let root = decided.root.clone();
    ready(&mut call, decided, &args, quiet).await?;
    let ingress = Ingress::new(&args.restate_url).map_err(CliError::invalid)?;
    let submitted_ms = now_ms();
    let invocation = ingress
        .submit(&call)
        .await
        .map_err(|e| not_submitted(&args.restate_url, e))?;
    let mut meta = EngineRun::new(&args, run, model, task, submitted_ms);
    meta.invocation = invocation;
    let dir = write_note(&root, &meta)?;
    follow(&meta, &dir, &args, quiet).await
}

/// What an engine run is made from, decided before anything is submitted: the project,
/// its agent types, the permission rules that travel with the run, and what in the flags
/// and settings the workers cannot honour.
pub(crate) struct Decided {
    /// The project's root.
    pub(crate) root: PathBuf,
    /// Its agent types, as the run sends them.
    pub(crate) registry: Registry,
    /// The permission mode and rules.
    pub(crate) permissions: PermissionsSnapshot,
    /// What the workers would not honour, said.
    refused: Vec<String>,
}

/// Decides an engine run from `args` and the project: see [`Decided`].
pub(crate) fn decide(
    args: &mut RunArgs,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Decided> {
    let root = workspace_root(directory)?;
    let crate::common::project_items::Decided {
        settings,
        mut registry,
        ..
    } = crate::common::project_items::decide_run(args, &root, user_dir(true).as_deref(), true)?;
    let mcp = load_servers(&root, &args.mcp, true)?;
    if !quiet {
        settings
            .warnings()
            .for_each(|w| errln!("cadre: warning: {w}"));
        print_problems(registry.problems());
    }
    let mut refused = unhonoured(args, &settings, mcp.config());
    refused.extend(hooks_for_workers(args, &settings, &mut registry, &root));
    let permissions = crate::common::permissions::rules(args, &settings.permissions)?.snapshot();
    Ok(Decided {
        root,
        registry,
        permissions,
        refused,
    })
}

/// Makes `call` ready to submit: refuses the run (exit 2, naming each) when the workers
/// would not honour what it asks, then names its workspace (a repository's commit, made
/// reachable as `refs/cadre/RUN/base`, or the workers' folder).
pub(crate) async fn ready(
    call: &mut AgentCall,
    decided: Decided,
    args: &RunArgs,
    quiet: bool,
) -> Result<()> {
    let Decided {
        root, mut refused, ..
    } = decided;
    // The workers' own check, made here too, before the repository is touched: what they
    // would refuse is not submitted, and leaves no `refs/cadre/RUN/base` behind.
    refused.extend(cadre_engine::unhonoured(call));
    refuse(&refused)?;
    // Written before git is asked about uncommitted changes: cadre's own files are not any.
    if let Err(e) = cadre_core::RunDir::write_gitignore(&root) {
        errln!("cadre: warning: cannot write .cadre/.gitignore: {e}");
    }
    let (workspace, base) = workspace_ref(&root, args.repo.as_deref(), &call.run, quiet).await?;
    call.settings.workspace = workspace;
    call.base = base;
    Ok(())
}

/// The error of a submission Restate did not take.
pub(crate) fn not_submitted(ingress: &str, e: cadre_engine::client::ClientError) -> CliError {
    CliError::config_from(
        format!(
            "cannot submit the run to {ingress} (is a Restate server running there, with a `cadre worker` registered? see docs/engine.md)"
        ),
        e,
    )
}

impl EngineRun {
    /// The note of run `run`, submitted now (`submitted_ms`) with `args`, of `task` on
    /// `model`; its invocation filled in once it is known.
    pub(crate) fn new(
        args: &RunArgs,
        run: String,
        model: String,
        task: String,
        submitted_ms: u64,
    ) -> Self {
        Self {
            run,
            invocation: String::new(),
            ingress: args.restate_url.clone(),
            agent: args.agent.clone(),
            model,
            task,
            admin: args
                .restate_admin_url
                .clone()
                .or_else(|| Admin::beside(&args.restate_url)),
            submitted_ms: Some(submitted_ms),
        }
    }
}

/// The call that starts the run `run`'s primary agent `spec` on `model` with `task`, and
/// the settings it carries to the workers (the workspace filled in later).
pub(crate) fn agent_call(
    args: &RunArgs,
    registry: &Registry,
    spec: AgentSpec,
    model: &str,
    task: &str,
    run: String,
    permissions: PermissionsSnapshot,
) -> AgentCall {
    let context_tokens = args
        .context_tokens
        .or_else(|| cadre_model::known_context_window(model))
        .unwrap_or(cadre_core::DEFAULT_CONTEXT_TOKENS);
    AgentCall {
        run,
        agent: DelegatedCall {
            path: AgentPath::primary(&spec.name),
            depth: 0,
            spec,
            model: model.to_owned(),
            description: task.chars().take(60).collect(),
            prompt: task.to_owned(),
            // The caller's trace, if it is in one: the primary's span is its child.
            trace: cadre_tools::trace_context::traceparent()
                .or_else(|| std::env::var("TRACEPARENT").ok()),
            output_schema: None,
        },
        // Filled in below, once the call is known to be honoured.
        base: None,
        settings: RunSettings {
            workspace: WorkspaceRef::Local,
            agents: registry.all().map(WireSpec::new).collect(),
            max_parallel: u32::try_from(args.max_parallel).unwrap_or(u32::MAX),
            max_depth: args.max_depth,
            max_fanout: u32::try_from(cadre_core::Limits::default().max_fanout).unwrap_or(u32::MAX),
            budget_tokens: args.budget_tokens,
            max_tokens: args.max_tokens,
            max_turns: args.max_turns,
            context_tokens,
            compact_at: args.compact_at.0,
            permissions,
        },
    }
}

/// Makes the run's folder and writes its note (`engine.json`) there.
pub(crate) fn write_note(root: &Path, meta: &EngineRun) -> Result<RunDir> {
    let dir = RunDir::create_named(&RunDir::runs_root(root), &meta.run)?;
    let note = serde_json::to_vec_pretty(meta)
        .map_err(|e| CliError::failed_from("cannot encode the engine run's note", e))?;
    std::fs::write(dir.engine_file(), note).map_err(|e| {
        CliError::failed_from(format!("cannot write {}", dir.engine_file().display()), e)
    })?;
    Ok(dir)
}

/// The engine run in `root`'s run folder `id` (or a unique prefix of it), if it is one.
pub fn find(root: &Path, id: &str) -> Option<PathBuf> {
    crate::common::run_folders::find(root, id)
        .ok()
        .filter(|dir| RunDir::open(dir).is_ok_and(|d| d.engine_file().is_file()))
}

/// The newest engine run in `root`'s run folders that this client has not seen end (no
/// `summary.json` yet): a run whose client was stopped, perhaps still going on the engine;
/// or a workflow run that stopped early in a way a resume goes on from (cancelled, or
/// refused by the provider).
pub fn newest_unfinished(root: &Path) -> Option<PathBuf> {
    let dirs = RunDir::all_in(&RunDir::runs_root(root)).unwrap_or_default();
    dirs.into_iter()
        .rev()
        .find(|d| d.engine_file().is_file() && (!d.summary_file().is_file() || goes_on(d)))
        .map(|d| d.path().to_path_buf())
}

/// Whether the engine workflow run `dir` ended with a stop a resume goes on from.
fn goes_on(dir: &RunDir) -> bool {
    if !dir
        .path()
        .join(cadre_core::workflow::Workflow::INVOCATION_FILE)
        .is_file()
    {
        return false;
    }
    /// What of `summary.json` tells.
    #[derive(Deserialize)]
    struct Ended {
        stop: cadre_core::StopKind,
    }
    let summary = std::fs::read_to_string(dir.summary_file()).unwrap_or_default();
    serde_json::from_str::<Ended>(&summary).is_ok_and(|s| s.stop.resumes())
}

/// `cadre resume RUN_ID` of an engine run: attaches to it again and follows it.
pub async fn resume(dir: &Path, args: &RunArgs, quiet: bool) -> Result<Code> {
    // The workers hold the rules the run started with; new ones here would be ignored.
    if args.permission_mode.is_some() || !args.allow.is_empty() || !args.deny.is_empty() {
        return Err(CliError::config(
            "--permission-mode/--allow/--deny: an engine run keeps the rules it started with, and `cadre resume` only follows it again",
        ));
    }
    if args.record.is_some() || args.replay.is_some() {
        return Err(CliError::config(format!(
            "--record/--replay: {NO_CASSETTE} (`cadre resume` of an engine run only follows it again)"
        )));
    }
    let dir = RunDir::open(dir)?;
    let file = dir.engine_file();
    let text = std::fs::read_to_string(&file)
        .map_err(|e| CliError::failed_from(format!("cannot read {}", file.display()), e))?;
    let meta: EngineRun = serde_json::from_str(&text)
        .map_err(|e| CliError::failed_from(format!("{} is damaged", file.display()), e))?;
    follow(&meta, &dir, args, quiet).await
}

/// Follows the run to its end: the live roster while it runs, then the answer, the usage
/// table and the exit code of its primary agent's stop. Ctrl-C cancels the run on the
/// engine; a second Ctrl-C stops following (the run goes on being cancelled).
async fn follow(meta: &EngineRun, dir: &RunDir, args: &RunArgs, quiet: bool) -> Result<Code> {
    let ingress = Ingress::new(&meta.ingress).map_err(CliError::invalid)?;
    if !quiet {
        // Said first, in every output format: with it, a run whose client is stopped can be
        // found again.
        errln!(
            "cadre: run {} on the engine at {} (`cadre resume {}` follows it again)",
            meta.run,
            meta.ingress,
            meta.run
        );
    }
    let header = format!("cadre · {} · {} · restate", meta.agent, meta.model);
    let mut display = Display::new(args.output_format, quiet, &meta.agent, header);
    // A client that follows the run again counts from its submission, not from itself (an
    // offset, not an earlier Instant: one before the machine booted cannot be made).
    let before = Duration::from_millis(
        meta.submitted_ms
            .map_or(0, |at| now_ms().saturating_sub(at)),
    );
    let started = Instant::now();
    let (roster_tx, roster_rx) = tokio::sync::watch::channel((Vec::<Progress>::new(), 0u64));
    let (stuck_tx, mut stuck_rx) = tokio::sync::watch::channel(Vec::<Stuck>::new());
    let _stop_asking = ask_why_stuck(meta, args, stuck_tx);
    let mut waiting = Waiting::default();
    let _stop_poller = poll_roster(&ingress, &meta.run, roster_tx);
    let attach = ingress.attach(&meta.invocation);
    tokio::pin!(attach);
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    let mut seen: BTreeMap<AgentPath, Instant> = BTreeMap::new();
    let mut done: BTreeSet<AgentPath> = BTreeSet::new();
    let mut cancelled = false;
    let report = loop {
        tokio::select! {
            report = &mut attach => break report,
            _ = tokio::signal::ctrl_c() => {
                if cancelled {
                    errln!("cadre: no longer following run {}; `cadre resume {}` follows it again", meta.run, meta.run);
                    return Ok(Code::Cancelled);
                }
                cancelled = true;
                errln!("\ncadre: cancelling run {} on the engine (Ctrl-C again stops following it)", meta.run);
                if let Err(e) = ingress.cancel(&meta.run).await {
                    errln!("cadre: could not cancel: {e}");
                }
            }
            Ok(()) = stuck_rx.changed() => {
                let stuck = stuck_rx.borrow_and_update().clone();
                if let Some(line) = waiting.update(&stuck) {
                    if !quiet {
                        display.note(&line);
                    }
                }
            }
            _ = ticker.tick() => {
                let (roster, tokens) = roster_rx.borrow().clone();
                let entries = entries(&roster, &mut seen, &mut done);
                display.tick(&entries, done.len(), tokens, before + started.elapsed());
            }
        }
    };
    let report = report.map_err(|e| {
        CliError::failed_from(
            format!(
                "lost run {} while following it (it may still be going on: `cadre resume {}` follows it again)",
                meta.run, meta.run
            ),
            e,
        )
    })?;
    keep_transcripts(&ingress, &meta.run, dir).await;
    let elapsed_ms = u64::try_from((before + started.elapsed()).as_millis()).unwrap_or(u64::MAX);
    Ok(show_end(&mut display, meta, dir, report, elapsed_ms))
}

/// Writes the run's summary from the `report` it ended with and shows its end as a local
/// run's would be: the answer, the usage table; returns the exit code of its stop.
fn show_end(
    display: &mut Display,
    meta: &EngineRun,
    dir: &RunDir,
    report: Delegated,
    elapsed_ms: u64,
) -> Code {
    let (outcome, summary) = ended(meta, report, elapsed_ms);
    if let Err(e) = dir.write_summary(&summary) {
        errln!("cadre: warning: could not write the run summary: {e}");
    }
    let text = outcome.text.clone();
    // The workers streamed nothing here: the answer is shown as a local run's would be.
    display.event(&Event::Text {
        agent: AgentPath::primary(&meta.agent),
        delta: text,
    });
    let shown = shown_path(dir.path());
    display.finish(&outcome, &summary, &meta.model, Some(&shown));
    Code::for_stop(&outcome.stop)
}

/// Asks Restate's admin API (the flag given now, else where the run was told it is, else
/// its default) every two seconds what the run's invocations wait for, into `stuck_tx`;
/// stops when dropped.
fn ask_why_stuck(
    meta: &EngineRun,
    args: &RunArgs,
    stuck_tx: tokio::sync::watch::Sender<Vec<Stuck>>,
) -> Option<tokio_util::task::AbortOnDropHandle<()>> {
    let admin = args
        .restate_admin_url
        .clone()
        .or_else(|| meta.admin.clone())
        .or_else(|| Admin::beside(&meta.ingress));
    admin.and_then(|admin| {
        let admin = Admin::new(&admin).ok()?;
        let root = meta.invocation.clone();
        Some(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            async move {
                loop {
                    // Best effort: an admin API out of reach only means no reason is shown.
                    if let Ok(stuck) = admin.stuck(&root).await {
                        if stuck_tx.send(stuck).is_err() {
                            break;
                        }
                    }
                    // The query reads every partition: asked seldom, it costs Restate little.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            },
        )))
    })
}

/// Reads the run's roster and tokens four times a second into `roster_tx`; stops when
/// dropped.
fn poll_roster(
    ingress: &Ingress,
    run: &str,
    roster_tx: tokio::sync::watch::Sender<(Vec<Progress>, u64)>,
) -> tokio_util::task::AbortOnDropHandle<()> {
    let ingress = ingress.clone();
    let run = run.to_owned();
    let poller = tokio::spawn(async move {
        loop {
            if let (Ok(roster), Ok(tokens)) =
                tokio::join!(ingress.roster(&run), ingress.tokens(&run))
            {
                if roster_tx.send((roster, tokens)).is_err() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    tokio_util::task::AbortOnDropHandle::new(poller)
}

/// The primary agent's outcome and the run's summary, from the `report` its invocation
/// ended with.
fn ended(meta: &EngineRun, report: Delegated, elapsed_ms: u64) -> (AgentOutcome, RunSummary) {
    let own = report
        .records
        .iter()
        .find(|r| r.path == meta.agent)
        .cloned();
    let text = format!("{}{}", report.text, report.report);
    let mut outcome = AgentOutcome::new(text.clone(), report.stop.clone());
    outcome.turns = own.as_ref().map_or(0, |r| r.turns);
    outcome.tool_calls = own.as_ref().map_or(0, |r| r.tool_calls);
    outcome.usage = own.map(|r| r.usage).unwrap_or_default();
    let mut summary = RunSummary::new(
        meta.task.clone(),
        text,
        report.stop.clone(),
        elapsed_ms,
        UsageReport::new(report.records),
    );
    summary.run_id = Some(meta.run.clone());
    (outcome, summary)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What the client last said about invocations Restate keeps retrying, so that it speaks
/// when the reason changes, and again every ten seconds while it lasts.
#[derive(Default)]
pub(crate) struct Waiting {
    said: Option<(String, Instant)>,
}

impl Waiting {
    /// The line to show now for `stuck`, if any.
    pub(crate) fn update(&mut self, stuck: &[Stuck]) -> Option<String> {
        let Some(first) = stuck.first() else {
            return self
                .said
                .take()
                .map(|_| "cadre: the engine is going on again".to_owned());
        };
        let reason = one_line(&first.last_failure);
        let again = match &self.said {
            Some((said, at)) => *said != reason || at.elapsed() >= Duration::from_secs(10),
            None => true,
        };
        if !again {
            return None;
        }
        self.said = Some((reason.clone(), Instant::now()));
        let others = match stuck.len() {
            1 => String::new(),
            n => format!("; {} more calls wait too", n - 1),
        };
        let tries = match first.retry_count {
            1 => "1 try".to_owned(),
            n => format!("{n} tries"),
        };
        Some(format!(
            "cadre: waiting: {} ({tries}{others})",
            why(&reason)
        ))
    }
}

/// Restate's reason for a failed attempt, told plainly: a worker it cannot connect to is
/// named as such.
fn why(failure: &str) -> String {
    let called = failure
        .split_once("error when calling '")
        .and_then(|(_, rest)| rest.split_once('\''));
    match called {
        Some((url, rest)) if rest.contains("connection") || rest.contains("Connection") => {
            let cause = rest.rsplit(": ").next().unwrap_or_default().trim();
            format!("Restate cannot reach {url} ({cause})")
        }
        _ => format!("Restate's last attempt failed: {failure}"),
    }
}

/// Writes the transcripts the workers kept into the run folder, as a local run's are, so
/// that every `cadre runs` command reads an engine run the same way.
pub(crate) async fn keep_transcripts(ingress: &Ingress, run: &str, dir: &RunDir) {
    let transcripts = match ingress.transcripts(run).await {
        Ok(t) => t,
        Err(e) => {
            errln!("cadre: warning: could not fetch the run's transcripts: {e}");
            return;
        }
    };
    // Each worker's lines name their agent: together they are the run's transcript (written
    // whole, as the engine keeps them all, so fetching them again changes nothing).
    let file = dir.transcript_file();
    let mut text = String::new();
    for t in transcripts {
        text.push_str(&t.text);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if text.is_empty() {
        return;
    }
    if let Err(e) = std::fs::write(&file, text) {
        errln!("cadre: warning: could not write {}: {e}", file.display());
    }
}

/// The roster's lines as the live display shows them, the worker in the tool column;
/// notes which agents have ended since.
fn entries(
    roster: &[Progress],
    seen: &mut BTreeMap<AgentPath, Instant>,
    done: &mut BTreeSet<AgentPath>,
) -> Vec<RosterEntry> {
    let running: BTreeSet<&AgentPath> = roster.iter().map(|p| &p.path).collect();
    for path in seen.keys() {
        if !running.contains(path) {
            done.insert(path.clone());
        }
    }
    roster
        .iter()
        .map(|p| {
            let started = *seen.entry(p.path.clone()).or_insert_with(Instant::now);
            RosterEntry {
                path: p.path.clone(),
                agent_type: p.agent_type.clone(),
                description: p.description.clone(),
                turn: p.turn,
                current_tool: Some(match &p.tool {
                    Some(tool) => format!("on {} · {tool}", p.worker),
                    None => format!("on {}", p.worker),
                }),
                tokens: p.tokens,
                usage: Default::default(),
                color: None,
                background: false,
                member: None,
                waiting: false,
                unread: 0,
                started,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_restate_cannot_connect_to_is_named_plainly() {
        assert_eq!(
            why("[500 Internal] error when calling 'http://127.0.0.1:9191/': h2 pool connection error: Connection refused (os error 111)"),
            "Restate cannot reach http://127.0.0.1:9191/ (Connection refused (os error 111))"
        );
        assert_eq!(
            why("[500] the handler panicked"),
            "Restate's last attempt failed: [500] the handler panicked"
        );
    }
}
