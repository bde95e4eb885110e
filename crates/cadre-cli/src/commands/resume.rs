//! `cadre resume [RUN_ID]`: carries on a killed run from its journal, or follows an engine
//! run again.

use crate::args::{Engine, ResumeCmd};
use crate::common::engine;
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::workspace_root;
use crate::common::run_folders::{find, newest, open_run};
use crate::common::session::{run, Job};
use std::path::PathBuf;

/// `cadre resume [RUN_ID]`: carries on a killed run (default: the newest unfinished one).
pub async fn resume_cmd(cmd: ResumeCmd, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let ResumeCmd { run_id, mut args } = cmd;
    let root = workspace_root(directory.clone())?;
    if let Some(dir) = run_id.as_deref().and_then(|id| engine::find(&root, id)) {
        return engine::resume(&dir, &args, quiet).await;
    }
    if args.engine == Engine::Restate {
        return Err(CliError::config(
            "--engine restate: `cadre resume RUN_ID` follows an engine run again by its id (the run named is not one)",
        ));
    }
    let dir = match run_id {
        Some(id) => find(&root, &id)?,
        None => newest(&root, false).ok_or_else(|| {
            CliError::config("no unfinished run with a journal in .cadre/runs/ of this workspace; `cadre run --continue TASK` continues a finished one")
        })?,
    };
    let journaled = open_run(&dir)?;
    args.agent = journaled.state.agent_type.clone();
    run(args, Job::Resume(journaled), directory, quiet).await
}
