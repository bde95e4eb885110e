//! A workflow run: the file and its input read (again, for a resume), each item made into
//! its agent call, the run driven by cadre-core with the live block, and its end told —
//! for `cadre workflow run`, `cadre workflow retry` and `cadre resume` of a workflow run.

use crate::args::{Engine, OutputFormat, RunArgs};
use crate::common::display::shown_path;
use crate::common::exit::{CliError, Code, Result};
use crate::common::session::Session;
use crate::common::signals::{self, Ending};
use crate::common::workflow_output::{
    tell_start, type_table, LiveBlock, OutputFile, Progress, ResultTeller,
};
use cadre_core::workflow::{ItemCall, WorkItem, Workflow as Run};
use cadre_core::{JournaledRun, Orchestrator, Registry, RunDir, RunSummary, StopKind};
use cadre_workflow::{Item, ItemError, Prompts, Workflow, WorkflowError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How a workflow run was invoked: what a resume needs to read the file and its input
/// again, kept in the run folder (`workflow.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invocation {
    /// The workflow file, absolute.
    pub file: PathBuf,
    /// `--input`, absolute, if given.
    pub input: Option<String>,
    /// `--arg NAME=VALUE`s.
    pub args: Vec<(String, String)>,
    /// `--concurrency`, if given.
    pub concurrency: Option<usize>,
    /// The model id the calls went to (part of each call's key).
    pub model: String,
    /// `--output`, absolute, if given: a resume writes it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    /// The run whose `Workflow` call started this one, if one did: this run goes on
    /// when that one is resumed, never on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_by: Option<String>,
}

impl Invocation {
    /// Reads the invocation kept in the run folder `dir`; `None` when it is no workflow run.
    pub fn read(dir: &Path) -> Option<Result<Self>> {
        let file = dir.join(Run::INVOCATION_FILE);
        let text = std::fs::read_to_string(&file).ok()?;
        Some(
            serde_json::from_str(&text).map_err(|e| {
                CliError::config_from(format!("{} cannot be read", file.display()), e)
            }),
        )
    }
}

/// What a resumed workflow run does again besides what never finished.
pub enum Again {
    /// Nothing more.
    Nothing,
    /// Every item whose last attempt failed.
    Failed,
    /// This item's agent goes on with this follow-up.
    Item(String, String),
}

/// Which run: a new one, or one carried on.
pub enum Job {
    /// A new run.
    Fresh(Invocation),
    /// The run opened, as it was invoked, with what to do again.
    Resume(Box<JournaledRun>, Invocation, Again),
}

/// Runs a workflow job with the live block; returns the exit code.
pub async fn run(
    mut args: RunArgs,
    job: Job,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    if args.engine == Engine::Restate {
        // An engine run is run by engine_workflow; a run of this process has its journal
        // here, and the engine has none of it.
        return Err(CliError::config(
            "--engine restate: this workflow run ran here, and goes on here (without --engine)",
        ));
    }
    let invocation = match &job {
        Job::Fresh(i) | Job::Resume(_, i, _) => i.clone(),
    };
    if matches!(job, Job::Resume(..)) && args.model.is_none() {
        // The model is part of each call's key: a resume asks the same one.
        args.model = Some(invocation.model.clone());
    }
    // Watched from the start, so a SIGTERM or SIGHUP that comes early is not lost.
    let mut endings = signals::watch_endings();
    let format = args.output_format;
    let mut session = Session::prepare(args, directory, quiet)?;
    let workflow = load(&invocation, &session.registry, quiet)?;
    let concurrency = invocation
        .concurrency
        .unwrap_or(workflow.file.map.concurrency);
    if session.args.given.source("limits.max_parallel").is_none() {
        // Each item's requests would else wait for one of --max-parallel's 16 slots.
        session.args.max_parallel = session.args.max_parallel.max(concurrency);
    }
    let name = workflow.file.name.clone();
    let total = count_items(&workflow, &invocation, &session.root);
    let output = invocation.output.as_deref();
    let (run, progress) = workflow.as_run(&invocation, &session, output, format)?;
    let mut builder = session.builder();
    if let (Some(n), None) = (workflow.file.budget.tokens, session.args.budget_tokens) {
        builder = builder.budget_tokens(n);
    }
    let orchestrator = builder.build()?;
    let live = LiveBlock::new(&name, total, format, quiet);
    let watched = Watched {
        orchestrator: &orchestrator,
        live: &live,
        progress: &progress,
    };
    let driven = match job {
        Job::Fresh(_) => {
            watched
                .drive(orchestrator.run_workflow(run), &mut endings)
                .await
        }
        Job::Resume(opened, _, again) => {
            let run = match again {
                Again::Nothing => run,
                Again::Failed => run.retry_failed(),
                Again::Item(key, text) => run.follow_up(key, text),
            };
            let resumed = orchestrator.resume_workflow(*opened, run);
            watched.drive(resumed, &mut endings).await
        }
    };
    live.finish();
    let summary = driven?;
    let mut code = finish(orchestrator.run_dir().as_ref(), &summary, format, quiet);
    let p = progress.lock().unwrap_or_else(|e| e.into_inner());
    if code == Code::Done && p.completed < p.done {
        // A script must tell 200 failed items from 200 completed ones.
        code = Code::StoppedEarly;
    }
    let hung_up = *endings.borrow() == Some(Ending::HungUp);
    Ok(if hung_up { Code::HungUp } else { code })
}

/// A workflow file read and checked, with its templates and arguments.
pub(crate) struct Loaded {
    /// The file.
    pub(crate) file: Workflow,
    /// Its templates.
    pub(crate) prompts: Arc<Prompts>,
    /// The arguments its templates read.
    pub(crate) args: Arc<Map<String, Value>>,
}

/// Reads and checks the workflow file of `invocation` against the agent types of
/// `registry`: a problem (a missing field, an unknown agent type, a bad template) is a
/// usage error naming every one.
pub(crate) fn load(invocation: &Invocation, registry: &Registry, quiet: bool) -> Result<Loaded> {
    let (file, warnings) = Workflow::load(&invocation.file).map_err(CliError::invalid)?;
    if !quiet {
        warnings
            .iter()
            .for_each(|w| errln!("cadre: warning: {}: {w}", invocation.file.display()));
    }
    let mut problems: Vec<String> = file
        .problems(&[], invocation.input.as_deref())
        .iter()
        .chain(&file.check_agents(registry))
        .map(ToString::to_string)
        .collect();
    let prompts = file.prompts().map_err(WorkflowError::from);
    let args = file.args_with(&invocation.args);
    problems.extend(prompts.as_ref().err().map(ToString::to_string));
    problems.extend(args.as_ref().err().map(ToString::to_string));
    match (prompts, args) {
        (Ok(prompts), Ok(args)) if problems.is_empty() => Ok(Loaded {
            file,
            prompts: Arc::new(prompts),
            args: Arc::new(args),
        }),
        _ => {
            let listed: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
            Err(CliError::config(format!(
                "{}: {} problem(s):\n{}",
                invocation.file.display(),
                problems.len(),
                listed.join("\n")
            )))
        }
    }
}

/// How many items the input has, read once without keeping them (for the live block's
/// queue and ETA); 0 when it cannot be read (the run then says why).
pub(crate) fn count_items(workflow: &Loaded, invocation: &Invocation, root: &Path) -> u64 {
    workflow
        .file
        .items(invocation.input.as_deref(), root)
        .map_or(0, |items| items.count() as u64)
}

impl Loaded {
    /// The run of this workflow as cadre-core takes it: the items read as a stream, each
    /// made into its call; its reduce; its results told to `output` and the stream.
    pub(crate) fn as_run(
        &self,
        invocation: &Invocation,
        session: &Session,
        output: Option<&Path>,
        format: OutputFormat,
    ) -> Result<(Run, Arc<Mutex<Progress>>)> {
        let items = self
            .file
            .items(invocation.input.as_deref(), &session.root)
            .map_err(CliError::invalid)?;
        let map = self.file.map.clone();
        let (prompts, args) = (self.prompts.clone(), self.args.clone());
        let work = items.map(move |item| work_item(item, &map, &prompts, &args));
        let output = match output {
            Some(path) => Some(OutputFile::create(path).map_err(|e| {
                CliError::config_from(format!("cannot write --output {}", path.display()), e)
            })?),
            None => None,
        };
        let progress = Arc::new(Mutex::new(Progress::default()));
        let mut teller = ResultTeller {
            output,
            stream: format == OutputFormat::StreamJson,
            progress: progress.clone(),
        };
        let concurrency = invocation.concurrency.unwrap_or(self.file.map.concurrency);
        let kept = serde_json::to_value(invocation).unwrap_or_default();
        let mut run = Run::from_items(self.file.name.clone(), work)
            .concurrency(concurrency)
            .retries(self.file.map.retries)
            .invocation(kept)
            .on_result(move |r| teller.tell(r));
        if format == OutputFormat::StreamJson {
            run = run.on_start(tell_start);
        }
        if let Some(reduce) = &self.file.reduce {
            let (prompts, args) = (self.prompts.clone(), self.args.clone());
            run = run.reduce(reduce.agent.clone(), move |results| {
                match prompts.reduce(results, &args) {
                    Some(Ok(prompt)) => prompt,
                    Some(Err(e)) => format!("(the reduce prompt did not render: {e})"),
                    None => String::new(),
                }
            });
        }
        Ok((run, progress))
    }
}

/// One item of the input made into its call: its map prompt rendered; bad input, or a
/// prompt that does not render, said.
pub(crate) fn work_item(
    item: std::result::Result<Item, ItemError>,
    map: &cadre_workflow::MapStep,
    prompts: &Prompts,
    args: &Map<String, Value>,
) -> WorkItem {
    let item = match item {
        Ok(item) => item,
        Err(e) => return WorkItem::bad(e.position.to_string(), e.line, e.why.to_string()),
    };
    match prompts.map(&item, args) {
        Ok(prompt) => {
            let mut call =
                ItemCall::new(map.agent.clone(), prompt).limits(map.limits.agent_limits());
            if let Some(schema) = &map.output_schema {
                call = call.schema(schema.clone());
            }
            WorkItem::new(item.key, call).at_line(item.line)
        }
        Err(e) => WorkItem::bad(item.key, item.line, e.to_string()),
    }
}

/// What a run is driven with: its orchestrator, its live block and its progress.
struct Watched<'a> {
    orchestrator: &'a Arc<Orchestrator>,
    live: &'a LiveBlock,
    progress: &'a Mutex<Progress>,
}

impl Watched<'_> {
    /// Drives `run` to its end, redrawing the live block; Ctrl-C, SIGTERM or SIGHUP
    /// (`endings`) stops every item, and a second one gives the run up at once.
    async fn drive(
        &self,
        run: impl std::future::Future<Output = std::result::Result<RunSummary, cadre_core::RunError>>,
        endings: &mut watch::Receiver<Option<Ending>>,
    ) -> Result<RunSummary> {
        tokio::pin!(run);
        let started = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_millis(200));
        let mut stopping = false;
        loop {
            let asked = tokio::select! {
                result = &mut run => return Ok(result?),
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                Ok(()) = endings.changed() => "a signal",
                _ = ticker.tick() => {
                    self.tick(started);
                    continue;
                }
            };
            if stopping {
                errln!("cadre: quitting now");
                let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                return Ok(self.orchestrator.abandon(self.live.name(), elapsed));
            }
            errln!("cadre: stopping every item ({asked}; a second one quits at once)");
            stopping = true;
            self.orchestrator.cancel_token().cancel();
        }
    }

    /// Redraws the live block.
    fn tick(&self, started: Instant) {
        // The items at work are the root's children on the roster.
        let running = self
            .orchestrator
            .roster()
            .iter()
            .filter(|e| e.path.as_str().matches('/').count() == 1)
            .count() as u64;
        let p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let tokens = self.orchestrator.tokens_used();
        self.live.tick(&p, running, tokens, started.elapsed());
    }
}

/// Tells the end of the run whose folder is `dir`; its exit code.
pub(crate) fn finish(
    dir: Option<&RunDir>,
    summary: &RunSummary,
    format: OutputFormat,
    quiet: bool,
) -> Code {
    match format {
        OutputFormat::Json | OutputFormat::StreamJson => {
            let mut v = serde_json::to_value(summary).unwrap_or_default();
            v["event"] = "result".into();
            if let Some(dir) = &dir {
                v["results"] = dir
                    .path()
                    .join(Run::RESULTS_FILE)
                    .display()
                    .to_string()
                    .into();
            }
            outln!("{v}");
        }
        OutputFormat::Text => {
            outln!("{}", summary.answer.trim_end());
            if !quiet {
                errln!("\n{}", type_table(summary));
                if let Some(dir) = &dir {
                    errln!(
                        "results: {}",
                        shown_path(&dir.path().join(Run::RESULTS_FILE)).display()
                    );
                }
            }
        }
    }
    if let (StopKind::ModelError(why), Some(dir)) = (&summary.stop, dir) {
        errln!("cadre: no item started after the provider refused the run: {why}");
        errln!(
            "cadre: once it answers again, `cadre resume {}` goes on with the items left",
            dir.id()
        );
    }
    Code::for_stop(&summary.stop)
}
