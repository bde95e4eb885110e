//! `cadre workflow run --engine restate` and `cadre resume` of such a run: each item is one
//! durable `CadreAgent/run` invocation on the workers, submitted under an idempotency key
//! made of the run id and the item's content key, so that submitting it again (a resume
//! after the client was killed) attaches to the invocation, running or ended, instead of
//! running the item again. The file, its input, its templates, the results file and the
//! live block are a local workflow run's.

mod items;
mod submitted;
mod tally;

use crate::args::{OutputFormat, RunArgs};
use crate::common::engine::{
    agent_call, decide, keep_transcripts, now_ms, ready, write_note, EngineRun, Waiting,
};
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::workspace_root;
use crate::common::signals::{self, Ending};
use crate::common::workflow_output::{LiveBlock, OutputFile, Progress, ResultTeller};
use crate::common::workflow_run::{count_items, finish, load, Again, Invocation, Loaded};
use cadre_core::internal::new_run_id;
use cadre_core::internal::ResultsFile;
use cadre_core::workflow::Workflow as Run;
use cadre_core::{Registry, RunDir, RunSummary, StopKind, UsageReport};
use cadre_engine::client::{Admin, Ingress, Stuck};
use cadre_engine::wire::AgentCall;
use items::{Attempts, Earlier, Items};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use submitted::Submitted;
use tally::Tally;

/// Which engine workflow run: a new one, or one carried on.
pub enum Job {
    /// A new run, invoked so.
    Fresh(Invocation),
    /// The run in this folder, with what to do again.
    Resume(PathBuf, Again),
}

/// Runs an engine workflow job with the live block; returns the exit code.
pub async fn run(
    mut args: RunArgs,
    job: Job,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    // Watched from the start, so a SIGTERM or SIGHUP that comes early is not lost.
    let mut endings = signals::watch_endings();
    let format = args.output_format;
    let started = match job {
        Job::Fresh(invocation) => start(&mut args, invocation, directory, quiet).await?,
        Job::Resume(dir, again) => reopen(&dir, again, directory, quiet)?,
    };
    let meta = &started.meta;
    if !quiet {
        errln!(
            "cadre: workflow run {} on the engine at {} (`cadre resume {}` goes on with it)",
            meta.run,
            meta.ingress,
            meta.run
        );
    }
    let admin = args
        .restate_admin_url
        .clone()
        .or_else(|| meta.admin.clone())
        .or_else(|| Admin::beside(&meta.ingress));
    let progress = Arc::new(Mutex::new(Progress::default()));
    let driven = go(started, admin, format, quiet, &progress, &mut endings).await?;
    let hung_up = *endings.borrow() == Some(Ending::HungUp);
    let Some((summary, dir)) = driven else {
        return Ok(if hung_up {
            Code::HungUp
        } else {
            Code::Cancelled
        });
    };
    let code = finish(Some(&dir), &summary, format, quiet);
    let p = progress.lock().unwrap_or_else(|e| e.into_inner());
    Ok(match code {
        _ if hung_up => Code::HungUp,
        // A script must tell 200 failed items from 200 completed ones.
        Code::Done if p.completed < p.done => Code::StoppedEarly,
        code => code,
    })
}

/// Drives the items of the run `started` to their ends with the live block (`admin` asked
/// why items wait), told to `progress`; the run's summary and folder, or `None` when a
/// second Ctrl-C gave the run up.
async fn go(
    started: Started,
    admin: Option<String>,
    format: OutputFormat,
    quiet: bool,
    progress: &Arc<Mutex<Progress>>,
    endings: &mut tokio::sync::watch::Receiver<Option<Ending>>,
) -> Result<Option<(RunSummary, RunDir)>> {
    let Started {
        dir,
        meta,
        call,
        workflow,
        invocation,
        registry,
        root,
        again,
    } = started;
    let ingress = Ingress::new(&meta.ingress).map_err(CliError::invalid)?;
    let results = dir.path().join(Run::RESULTS_FILE);
    let earlier = Earlier::read(&results, retrying(&dir, &again));
    let teller = teller(invocation.output.as_deref(), format, progress.clone())?;
    let items = items_of(&workflow, &invocation, &root, registry, earlier, &dir)?;
    let concurrency = invocation
        .concurrency
        .unwrap_or(workflow.file.map.concurrency)
        .max(1);
    let file = dir.engine_submitted_file();
    let attempts = Attempts::new(ingress.clone(), call, workflow.file.map.retries, file);
    let name = workflow.file.name.clone();
    let live = LiveBlock::new(
        &name,
        count_items(&workflow, &invocation, &root),
        format,
        quiet,
    );
    let records = dir.engine_records_file();
    let mut tally = Tally::new(ResultsFile::create(Some(results)), teller, records);
    let begun = Instant::now();
    let (_polling, tokens) = poll_tokens(&ingress, &meta.run);
    let (_asking, stuck) = ask_why_items_wait(admin, attempts.in_flight());
    let mut watcher = Watcher {
        live: &live,
        progress,
        tokens,
        stuck,
        waiting: Waiting::default(),
        begun,
        quiet,
    };
    let tick = |running| watcher.tick(running);
    let driven = items::drive(items, attempts, &mut tally, concurrency, endings, tick).await;
    live.finish();
    let Some(stop) = driven else {
        errln!(
            "cadre: quitting now; `cadre resume {}` goes on with the run",
            meta.run
        );
        return Ok(None);
    };
    if matches!(stop, StopKind::Done) {
        // Every item was told: a retry this part carried on has ended.
        let _ = std::fs::remove_file(dir.engine_retrying_file());
    }
    keep_transcripts(&ingress, &meta.run, &dir).await;
    // The run's whole time, from its first submission.
    let before = Duration::from_millis(
        meta.submitted_ms
            .map_or(0, |at| now_ms().saturating_sub(at)),
    );
    let elapsed_ms = u64::try_from((before + begun.elapsed()).as_millis()).unwrap_or(u64::MAX);
    let summary = summarise(&dir, &meta, name, tally, stop, elapsed_ms);
    Ok(Some((summary, dir)))
}

/// Whether this part of the run tries its failed items again: `again` asks it, or a
/// `workflow retry --failed` that did not end did (its mark stays in the run folder until
/// a part ends with every item told, so a killed retry's resume finishes it).
fn retrying(dir: &RunDir, again: &Again) -> bool {
    let mark = dir.engine_retrying_file();
    if matches!(again, Again::Failed) {
        if let Err(e) = std::fs::write(&mark, "") {
            tracing::warn!("cannot write {}: {e}", mark.display());
        }
        return true;
    }
    mark.is_file()
}

/// What the live block is redrawn from: the progress, the tokens the run used, and why
/// items wait, said once as it changes.
struct Watcher<'a> {
    live: &'a LiveBlock,
    progress: &'a Mutex<Progress>,
    tokens: tokio::sync::watch::Receiver<u64>,
    stuck: tokio::sync::watch::Receiver<Vec<Stuck>>,
    waiting: Waiting,
    begun: Instant,
    quiet: bool,
}

impl Watcher<'_> {
    /// Redraws the block with `running` items at work; says why items wait, if that changed.
    fn tick(&mut self, running: u64) {
        if self.stuck.has_changed().unwrap_or(false) {
            let now = self.stuck.borrow_and_update().clone();
            if let Some(line) = self.waiting.update(&now).filter(|_| !self.quiet) {
                self.live.note(&line);
            }
        }
        let p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        // The ETA is of this part: the items it ran, in its time.
        let tokens = *self.tokens.borrow();
        self.live.tick(&p, running, tokens, self.begun.elapsed());
    }
}

/// The items of `workflow`'s input (as `invocation` names it, relative to `root`), each
/// made into its call as it is read; `earlier` has what an earlier part finished, and the
/// run folder `dir` what it submitted.
fn items_of(
    workflow: &Loaded,
    invocation: &Invocation,
    root: &Path,
    registry: Registry,
    earlier: Earlier,
    dir: &RunDir,
) -> Result<Items> {
    let submitted = Submitted::read(&dir.engine_submitted_file(), earlier.agents());
    let source = workflow
        .file
        .items(invocation.input.as_deref(), root)
        .map_err(CliError::invalid)?;
    let map = workflow.file.map.clone();
    let (prompts, args) = (workflow.prompts.clone(), workflow.args.clone());
    let work =
        source.map(move |item| crate::common::workflow_run::work_item(item, &map, &prompts, &args));
    Ok(Items::new(
        Box::new(work),
        registry,
        invocation.model.clone(),
        earlier,
        submitted,
    ))
}

/// The run's summary, written to its folder: `name`'s items as `tally` has them, stopped
/// for `stop`, after `elapsed_ms` (its whole time, from its first submission).
fn summarise(
    dir: &RunDir,
    meta: &EngineRun,
    name: String,
    tally: Tally,
    stop: StopKind,
    elapsed_ms: u64,
) -> RunSummary {
    let (answer, records) = tally.end();
    let mut summary = RunSummary::new(name, answer, stop, elapsed_ms, UsageReport::new(records));
    summary.run_id = Some(meta.run.clone());
    if let Err(e) = dir.write_summary(&summary) {
        errln!("cadre: warning: could not write the run summary: {e}");
    }
    summary
}

/// What a run needs to go: its folder and note, the call its items are sent with, the
/// workflow read, how it was invoked, the agent types, the project's root, and what to do
/// again.
struct Started {
    dir: RunDir,
    meta: EngineRun,
    call: AgentCall,
    workflow: Loaded,
    invocation: Invocation,
    registry: Registry,
    root: PathBuf,
    again: Again,
}

/// A new run: the workflow read, the run decided as `cadre run --engine restate` decides
/// one, its folder made with its note, invocation and call.
async fn start(
    args: &mut RunArgs,
    invocation: Invocation,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Started> {
    // Asked before the settings are decided, which take what the command line gave.
    let parallel_given = args.given.source("limits.max_parallel").is_some();
    let decided = decide(args, directory, quiet)?;
    let workflow = load(&invocation, &decided.registry, quiet)?;
    if workflow.file.reduce.is_some() {
        // The reduce reads the results file, which is on this machine, not the workers'.
        return Err(CliError::config(
            "--engine restate does not run a workflow's `reduce:` yet; run it here (without --engine), or leave `reduce:` out",
        ));
    }
    let concurrency = invocation
        .concurrency
        .unwrap_or(workflow.file.map.concurrency);
    if !parallel_given {
        // Each item's requests would else wait for one of --max-parallel's 16 slots.
        args.max_parallel = args.max_parallel.max(concurrency);
    }
    let spec = decided
        .registry
        .get(&workflow.file.map.agent)
        .cloned()
        .ok_or_else(|| CliError::config("the map's agent type is gone"))?;
    let run = new_run_id();
    let mut call = agent_call(
        args,
        &decided.registry,
        spec,
        &invocation.model,
        "",
        run.clone(),
        decided.permissions.clone(),
    );
    call.settings.budget_tokens = args.budget_tokens.or(workflow.file.budget.tokens);
    let registry = decided.registry.clone();
    let root = decided.root.clone();
    ready(&mut call, decided, args, quiet).await?;
    // The note says the run is on the engine: `cadre resume` finds it as one.
    let mut meta = EngineRun::new(
        args,
        run,
        invocation.model.clone(),
        workflow.file.name.clone(),
        now_ms(),
    );
    meta.agent = Run::ROOT_TYPE.to_owned();
    let dir = write_note(&root, &meta)?;
    write_json(&dir.path().join(Run::INVOCATION_FILE), &invocation)?;
    write_json(&dir.engine_call_file(), &call)?;
    Ok(Started {
        dir,
        meta,
        call,
        workflow,
        invocation,
        registry,
        root,
        again: Again::Nothing,
    })
}

/// The run in `dir`, as it began: its note, invocation and call read back, the workflow
/// file read again (an edited file changes some items' calls: only those run).
fn reopen(dir: &Path, again: Again, directory: Option<PathBuf>, quiet: bool) -> Result<Started> {
    if let Again::Item(..) = again {
        return Err(CliError::config(
            "--item/--prompt: a fix round does not run on the engine yet (an item's agent ends with its invocation); `cadre workflow retry RUN --failed` runs the failed items again",
        ));
    }
    let dir = RunDir::open(dir)?;
    let meta: EngineRun = read_json(&dir.engine_file())?;
    let invocation: Invocation = read_json(&dir.path().join(Run::INVOCATION_FILE))?;
    let call: AgentCall = read_json(&dir.engine_call_file())?;
    // The run's own agent types, as it began: the workers are sent those.
    let mut registry = Registry::shipped();
    for wire in call.settings.agents.clone() {
        registry.insert(wire.into_spec());
    }
    let workflow = load(&invocation, &registry, quiet)?;
    let root = workspace_root(directory)?;
    Ok(Started {
        dir,
        meta,
        call,
        workflow,
        invocation,
        registry,
        root,
        again,
    })
}

/// What each result is told to besides the results file: `--output`, stream-json, the
/// progress.
fn teller(
    output: Option<&Path>,
    format: OutputFormat,
    progress: Arc<Mutex<Progress>>,
) -> Result<ResultTeller> {
    let output = match output {
        Some(path) => Some(OutputFile::create(path).map_err(|e| {
            CliError::config_from(format!("cannot write --output {}", path.display()), e)
        })?),
        None => None,
    };
    Ok(ResultTeller {
        output,
        stream: format == OutputFormat::StreamJson,
        progress,
    })
}

/// Reads the tokens the run's items have used, twice a second, into the watch it returns
/// (with the poller, which stops when dropped).
fn poll_tokens(
    ingress: &Ingress,
    run: &str,
) -> (
    tokio_util::task::AbortOnDropHandle<()>,
    tokio::sync::watch::Receiver<u64>,
) {
    let (tx, rx) = tokio::sync::watch::channel(0);
    let ingress = ingress.clone();
    let run = run.to_owned();
    let poller = tokio::spawn(async move {
        loop {
            if let Ok(tokens) = ingress.tokens(&run).await {
                if tx.send(tokens).is_err() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    (tokio_util::task::AbortOnDropHandle::new(poller), rx)
}

/// Asks Restate's admin API at `admin` every two seconds what the items in flight
/// (`inflight`) wait for, into the watch it returns (with the asker, which stops when
/// dropped): an unreachable worker is said while the run waits.
fn ask_why_items_wait(
    admin: Option<String>,
    inflight: Arc<Mutex<std::collections::BTreeMap<String, String>>>,
) -> (
    Option<tokio_util::task::AbortOnDropHandle<()>>,
    tokio::sync::watch::Receiver<Vec<Stuck>>,
) {
    let (tx, rx) = tokio::sync::watch::channel(Vec::new());
    let Some(admin) = admin.and_then(|a| Admin::new(&a).ok()) else {
        return (None, rx);
    };
    let asker = tokio::spawn(async move {
        loop {
            // The query reads every partition: asked seldom, it costs Restate little.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let roots: Vec<String> = items::lock(&inflight).values().cloned().collect();
            // Best effort: an admin API out of reach only means no reason is shown.
            if let Ok(stuck) = admin.stuck_among(&roots).await {
                if tx.send(stuck).is_err() {
                    break;
                }
            }
        }
    });
    (Some(tokio_util::task::AbortOnDropHandle::new(asker)), rx)
}

/// Writes `value` as JSON to `file`.
fn write_json(file: &Path, value: &impl serde::Serialize) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| CliError::failed_from(format!("cannot encode {}", file.display()), e))?;
    std::fs::write(file, bytes)
        .map_err(|e| CliError::failed_from(format!("cannot write {}", file.display()), e))
}

/// Reads the JSON `file` as a `T`.
fn read_json<T: serde::de::DeserializeOwned>(file: &Path) -> Result<T> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::failed_from(format!("cannot read {}", file.display()), e))?;
    serde_json::from_str(&text)
        .map_err(|e| CliError::failed_from(format!("{} is damaged", file.display()), e))
}
