//! `cadre resume [RUN_ID]`: carries on a killed run from its journal, or follows an engine
//! run again.

use crate::args::{Engine, ResumeCmd};
use crate::common::engine;
use crate::common::engine_workflow;
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::workspace_root;
use crate::common::run_folders::{caller_of, find, newest, open_run};
use crate::common::served::{self, ServedCall};
use crate::common::session::{run, Job, Session};
use crate::common::workflow_run::{self, Again, Invocation};
use crate::common::workflow_tool::offering_workflows;
use cadre_core::RunError;
use std::path::PathBuf;

/// `cadre resume [RUN_ID]`: carries on a killed run (default: the newest unfinished one).
pub async fn resume_cmd(cmd: ResumeCmd, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let ResumeCmd { run_id, mut args } = cmd;
    let root = workspace_root(directory.clone())?;
    if let Some(dir) = run_id.as_deref().and_then(|id| engine::find(&root, id)) {
        return resume_engine(&dir, args, directory, quiet).await;
    }
    if args.engine == Engine::Restate {
        return Err(CliError::config(
            "--engine restate: `cadre resume RUN_ID` follows an engine run again by its id (the run named is not one)",
        ));
    }
    if run_id.is_none() {
        // The newer of the newest unfinished engine run and the newest resumable local one
        // (run ids start with their UTC time).
        let id = |p: &PathBuf| p.file_name().map(std::ffi::OsStr::to_os_string);
        if let Some(dir) = engine::newest_unfinished(&root) {
            if newest(&root, false).is_none_or(|local| id(&local) < id(&dir)) {
                return resume_engine(&dir, args, directory, quiet).await;
            }
        }
    }
    let dir = match run_id {
        Some(id) => find(&root, &id)?,
        None => newest(&root, false).ok_or_else(|| {
            CliError::config("no unfinished run (with a journal, or on the engine) in .cadre/runs/ of this workspace; `cadre run --continue TASK` continues a finished one")
        })?,
    };
    if let Some(caller) = caller_of(&dir) {
        return Err(CliError::config(format!(
            "run {} was started by a `Workflow` call of run {caller}: resume that run (`cadre resume {caller}`), which goes on with this one",
            dir.file_name().unwrap_or_default().to_string_lossy()
        )));
    }
    let journaled = open_run(&dir)?;
    // A workflow run goes on with its items, whether or not its last part ended.
    if let Some(invocation) = Invocation::read(&dir) {
        let job = workflow_run::Job::Resume(Box::new(journaled), invocation?, Again::Nothing);
        return workflow_run::run(args, job, directory, quiet).await;
    }
    // Told before a key or a model is needed: a finished run has nothing to carry on.
    if let Some(stop) = journaled.state.finished.as_ref() {
        if !journaled.state.resumable() {
            let id = dir
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            return Err(RunError::AlreadyFinished {
                id,
                stop: stop.to_string(),
            }
            .into());
        }
    }
    // A call of `cadre mcp serve` ran a type that may only be a subagent as its primary.
    if let Some(served) = ServedCall::read(&dir) {
        return served::resume(args, journaled, served, directory, quiet).await;
    }
    args.agent = journaled.state.agent_type.clone();
    let session = offering_workflows(Session::prepare(args, directory, quiet)?);
    run(session, Job::Resume(journaled), quiet).await
}

/// `cadre resume` of the engine run in `dir`: a workflow run goes on with its items, any
/// other is followed again.
async fn resume_engine(
    dir: &std::path::Path,
    args: crate::args::RunArgs,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    if dir
        .join(cadre_core::workflow::Workflow::INVOCATION_FILE)
        .is_file()
    {
        let job = engine_workflow::Job::Resume(dir.to_path_buf(), Again::Nothing);
        return engine_workflow::run(args, job, directory, quiet).await;
    }
    engine::resume(dir, &args, quiet).await
}
