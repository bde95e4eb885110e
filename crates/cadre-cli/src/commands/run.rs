//! `cadre run`: the primary agent on one task, with every subagent it delegates to — here,
//! or on the workers of a Restate server (`--engine restate`).

use crate::args::{Engine, FollowUp, RunCmd};
use crate::common::engine;
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::workspace_root;
use crate::common::run_folders::{find, newest, open_run};
use crate::common::session::{run, Job, Session};
use crate::common::workflow_tool::offering_workflows;
use std::path::{Path, PathBuf};

/// `cadre run`: a new run, or a follow-up to a finished one (`--continue`, `--resume`).
pub async fn run_cmd(cmd: RunCmd, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let RunCmd {
        task,
        task_file,
        follow: FollowUp {
            continue_last,
            resume,
        },
        mut args,
    } = cmd;
    let task = read_task(task, task_file.as_deref())?;
    if args.engine == Engine::Restate {
        if continue_last || resume.is_some() {
            return Err(CliError::config(
                "--continue and --resume take a local run; an engine run is carried on with `cadre resume RUN_ID`",
            ));
        }
        return engine::run(args, task, directory, quiet).await;
    }
    let root = workspace_root(directory.clone())?;
    let job = match (continue_last, resume) {
        (false, None) => Job::Fresh(task),
        (true, _) => {
            let dir = newest(&root, true).ok_or_else(|| {
                CliError::config(
                    "--continue: no finished run with a journal in .cadre/runs/ of this workspace",
                )
            })?;
            Job::Continue(open_run(&dir)?, task)
        }
        (false, Some(id)) => Job::Continue(open_run(&find(&root, &id)?)?, task),
    };
    if let Job::Continue(run, _) = &job {
        args.agent.clone_from(&run.state.agent_type);
    }
    let session = offering_workflows(Session::prepare(args, directory, quiet)?);
    run(session, job, quiet).await
}

/// The task: TASK itself, or read from `--task-file`, or from stdin for `-` (or no TASK
/// when stdin is not a terminal). A blank task is a usage error.
fn read_task(task: Option<String>, file: Option<&Path>) -> Result<String> {
    use std::io::{IsTerminal, Read};
    let from_stdin = || -> Result<String> {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::config_from("cannot read the task from stdin", e))?;
        Ok(text)
    };
    let (text, from) = match (task, file) {
        (_, Some(file)) => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                CliError::config_from(format!("cannot read --task-file {}", file.display()), e)
            })?;
            (text, format!("--task-file {}", file.display()))
        }
        (Some(task), None) if task == "-" => (from_stdin()?, "stdin".to_owned()),
        (Some(task), None) => (task, "TASK".to_owned()),
        (None, None) if std::io::stdin().is_terminal() => {
            return Err(CliError::config(
                "no task given: pass it as TASK, `-` to read it from stdin, or --task-file FILE (`cadre chat` talks interactively)",
            ))
        }
        (None, None) => (from_stdin()?, "stdin".to_owned()),
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(CliError::config(format!(
            "the task is empty ({from}); say what the agent should do"
        )));
    }
    Ok(text.to_owned())
}
