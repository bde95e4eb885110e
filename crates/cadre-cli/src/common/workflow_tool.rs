//! What the `Workflow` tool starts: the project's saved workflows (`.cadre/workflows/`, as
//! `cadre workflow list` finds them), each call run as `cadre workflow run NAME --arg …`
//! would run it — its own run folder, which `cadre runs` lists and `cadre workflow retry`
//! takes — under the id the tool gives it, with the caller's options, its tokens counted
//! in the calling agent's budget.

use crate::args::{OutputFormat, RunArgs};
use crate::common::exit::Code;
use crate::common::session::Session;
use crate::common::workflow_output::Progress;
use crate::common::workflow_run::{load, Invocation};
use cadre_core::workflow::{SavedWorkflow, SavedWorkflows, Workflow as Run, WorkflowCall};
use cadre_core::{JournaledRun, Orchestrator, RunDir, RunSummary};
use cadre_model::Model;
use cadre_tools::ToolOutput;
use cadre_workflow::{saved_workflows, Workflow};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// `session`, offering the `Workflow` tool when its project has saved workflows.
pub fn offering_workflows(session: Session) -> Session {
    match ProjectWorkflows::find(&session.root, &session.args, session.model()) {
        Some(saved) => session.with_workflows(Arc::new(saved)),
        None => session,
    }
}

/// One saved workflow: its name, description and file.
struct Saved {
    listed: SavedWorkflow,
    file: PathBuf,
}

/// The saved workflows of a project, started with the options of the run that calls them.
pub struct ProjectWorkflows {
    root: PathBuf,
    args: RunArgs,
    /// The caller's model client, which the workflows' agents talk through too (a
    /// recording's or a replay's cassette is the caller's).
    model: Arc<dyn Model>,
    saved: Vec<Saved>,
}

impl ProjectWorkflows {
    /// The saved workflows of the project at `root` that can be read, for runs with `args`
    /// talking through `model`; `None` when there are none.
    pub fn find(root: &Path, args: &RunArgs, model: Arc<dyn Model>) -> Option<Self> {
        let saved: Vec<Saved> = saved_workflows(root)
            .into_iter()
            .filter_map(|file| {
                // One that cannot be read is not offered (`cadre workflow list` says why).
                let (w, _) = Workflow::load(&file).ok()?;
                let name = match w.name.trim() {
                    "" => file.file_stem()?.to_string_lossy().into_owned(),
                    name => name.to_owned(),
                };
                let description = w.description.lines().next().unwrap_or_default().to_owned();
                Some(Saved {
                    listed: SavedWorkflow::new(name, description),
                    file,
                })
            })
            .collect();
        (!saved.is_empty()).then(|| Self {
            root: root.to_path_buf(),
            args: args.clone(),
            model,
            saved,
        })
    }

    /// The session a called workflow runs in: the caller's options (but the model the
    /// run asked before, `model`, when it goes on), with no terminal to ask and no budget
    /// of its own but the workflow's (the caller's counts it anyway). For a `read_only`
    /// caller, in plan mode: every agent of the workflow, its items' subagents too, is
    /// read-only, whatever its type lets it start.
    fn session(&self, model: Option<String>, read_only: bool) -> Result<Session, String> {
        let mut args = self.args.clone();
        if model.is_some() {
            args.model = model;
        }
        if read_only {
            args.permission_mode = Some(cadre_core::PermissionMode::Plan);
        }
        args.budget_tokens = None;
        // The caller's client is used (see `model`): a second recorder would start the
        // caller's cassette again.
        args.record = None;
        args.output_format = OutputFormat::Text;
        Session::prepare(args, Some(self.root.clone()), true)
            .map(Session::without_terminal)
            .map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl SavedWorkflows for ProjectWorkflows {
    fn list(&self) -> Vec<SavedWorkflow> {
        self.saved.iter().map(|s| s.listed.clone()).collect()
    }

    async fn run(&self, call: WorkflowCall) -> ToolOutput {
        self.started(&call).await.unwrap_or_else(ToolOutput::error)
    }
}

impl ProjectWorkflows {
    /// Runs the workflow of `call`: its summary, or why it could not start or failed.
    async fn started(&self, call: &WorkflowCall) -> Result<ToolOutput, String> {
        let saved = self
            .saved
            .iter()
            .find(|s| s.listed.name == call.name)
            .ok_or_else(|| format!("there is no saved workflow {:?}", call.name))?;
        let dir = RunDir::runs_root(&self.root).join(&call.run_id);
        // A run gone on with keeps how it was invoked, its model above all (part of each
        // call's key), as a top-level resume does.
        let kept = Invocation::read(&dir)
            .transpose()
            .map_err(|e| e.to_string())?;
        let session = self.session(kept.as_ref().map(|k| k.model.clone()), call.read_only)?;
        let invocation = kept.unwrap_or_else(|| Invocation {
            file: std::path::absolute(&saved.file).unwrap_or_else(|_| saved.file.clone()),
            input: None,
            args: call.args.clone(),
            concurrency: None,
            model: session.model_id.clone(),
            output: None,
            called_by: Some(call.called_by.clone()),
        });
        let loaded = load(&invocation, &session.registry, true).map_err(|e| e.to_string())?;
        if call.read_only {
            refuse_writers(&loaded.file, &session.registry)?;
        }
        let (run, progress) = loaded
            .as_run(&invocation, &session, None, OutputFormat::Text)
            .map_err(|e| e.to_string())?;
        let mut builder = session
            .builder()
            .model(self.model.clone())
            .run_id(&call.run_id)
            .called_by(call);
        if let Some(n) = loaded.file.budget.tokens {
            builder = builder.budget_tokens(n);
        }
        let orchestrator = builder.build().map_err(|e| e.to_string())?;
        let summary = drive(&orchestrator, &dir, run, call).await?;
        call.spent(summary.usage.total.usage);
        Ok(told(
            call,
            &summary,
            &dir.join(Run::RESULTS_FILE),
            &progress,
        ))
    }
}

/// Refuses a workflow whose item or reduce agents can change files: a read-only agent may
/// not start agents that write.
fn refuse_writers(file: &Workflow, registry: &cadre_core::Registry) -> Result<(), String> {
    let steps = std::iter::once(("map", &file.map.agent))
        .chain(file.reduce.as_ref().map(|r| ("reduce", &r.agent)));
    for (step, agent) in steps {
        if registry.get(agent).is_some_and(|spec| !spec.read_only) {
            return Err(format!(
                "workflow {:?} was not started: its {step} agents are of type {agent:?}, which can change files, and you are read-only (only a workflow whose agents are all read-only may be started by a read-only agent)",
                file.name
            ));
        }
    }
    Ok(())
}

/// Runs `run` to its end in `orchestrator`: a new run in `dir`, or the one there carried on
/// (the same call made again after its caller was resumed); the caller's cancel stops it.
async fn drive(
    orchestrator: &Arc<Orchestrator>,
    dir: &Path,
    run: Run,
    call: &WorkflowCall,
) -> Result<RunSummary, String> {
    let earlier = match JournaledRun::open(dir) {
        Ok(earlier) => earlier,
        Err(e) => return Err(format!("cannot go on with run {}: {e}", call.run_id)),
    };
    let going = async {
        match earlier {
            Some(earlier) => orchestrator.resume_workflow(earlier, run).await,
            None => orchestrator.run_workflow(run).await,
        }
    };
    tokio::pin!(going);
    let ended = tokio::select! {
        ended = &mut going => ended,
        () = call.cancel.cancelled() => {
            // Its items stop as for Ctrl-C; the run stays resumable.
            orchestrator.cancel_token().cancel();
            going.await
        }
    };
    ended.map_err(|e| format!("workflow {:?} failed: {e}", call.name))
}

/// What the calling model is told of the run: how it ended, its counts per outcome (and
/// the reduce's answer), its tokens, and where its results are — never the items' texts.
fn told(
    call: &WorkflowCall,
    summary: &RunSummary,
    results: &Path,
    progress: &Mutex<Progress>,
) -> ToolOutput {
    let mut code = Code::for_stop(&summary.stop);
    let p = progress.lock().unwrap_or_else(|e| e.into_inner());
    if code == Code::Done && p.completed < p.done {
        code = Code::StoppedEarly;
    }
    let status = match code {
        Code::Done => "every item completed".to_owned(),
        Code::StoppedEarly if summary.stop.is_done() => "not every item completed".to_owned(),
        _ => format!("stopped: {}", summary.stop),
    };
    let usage = &summary.usage.total.usage;
    let text = format!(
        "workflow {} (run {}): {status} (exit {})\n{}\ntokens: {} input, {} output\nresults: {} (one JSON line per item: key, outcome, output)",
        call.name,
        call.run_id,
        code as u8,
        summary.answer.trim_end(),
        usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens,
        usage.output_tokens,
        results.display()
    );
    ToolOutput::ok(text)
}
