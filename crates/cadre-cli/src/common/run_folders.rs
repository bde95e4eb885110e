//! Finding runs to resume or continue in `.cadre/runs/`.

use crate::common::exit::{CliError, Result};
use crate::common::run_index;
use cadre_core::internal::run_state;
use cadre_core::JournaledRun;
use cadre_core::RunDir;
use std::path::{Path, PathBuf};

/// The run folders of the workspace at `root`, newest first (ids start with a UTC time).
fn run_dirs(root: &Path) -> Vec<RunDir> {
    // An unreadable runs folder holds no run to go on from.
    let mut dirs = RunDir::all_in(&RunDir::runs_root(root)).unwrap_or_default();
    dirs.reverse();
    dirs
}

/// The run whose `Workflow` call started the run in `dir`, if one did (`called_by` in its
/// `workflow.json`).
pub fn caller_of(dir: &Path) -> Option<String> {
    let file = dir.join(cadre_core::workflow::Workflow::INVOCATION_FILE);
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    kept.get("called_by")?.as_str().map(str::to_owned)
}

/// Whether the run in `dir` was started by another run's `Workflow` call: it goes on
/// through its caller, so it is passed over when runs are looked for by age or prefix.
fn called(dir: &RunDir) -> bool {
    caller_of(dir.path()).is_some()
}

/// The newest run with a journal that can take a follow-up (`finished`), or that can be
/// resumed (cancelled runs are both); never a run a `Workflow` call started (its id sorts
/// after its caller's, and resuming its caller goes on with it).
pub fn newest(root: &Path, finished: bool) -> Option<PathBuf> {
    run_dirs(root).into_iter().find_map(|dir| {
        // From the run's small index: finished runs passed over are not read whole.
        let standing = run_index::standing(&dir)?;
        let fits = if finished {
            // A workflow run takes no follow-up: `cadre workflow retry` goes on with its items.
            standing.continuable
                && !dir
                    .path()
                    .join(cadre_core::workflow::Workflow::INVOCATION_FILE)
                    .exists()
        } else {
            standing.resumable && !called(&dir)
        };
        fits.then(|| dir.path().to_path_buf())
    })
}

/// The run folder for `id`: an exact id or a unique prefix of one (a prefix names no run
/// a `Workflow` call started: its caller's id is a prefix of its own).
pub fn find(root: &Path, id: &str) -> Result<PathBuf> {
    let dirs = run_dirs(root);
    if let Some(exact) = dirs.iter().find(|d| d.id() == id) {
        return Ok(exact.path().to_path_buf());
    }
    let matching: Vec<&RunDir> = dirs
        .iter()
        .filter(|d| d.id().starts_with(id) && !called(d))
        .collect();
    let ids = |dirs: &[&RunDir]| dirs.iter().map(|d| d.id()).collect::<Vec<_>>().join(", ");
    match matching.as_slice() {
        [one] => Ok(one.path().to_path_buf()),
        [] => {
            let newest: Vec<&RunDir> = dirs.iter().take(5).collect();
            Err(CliError::config(format!(
                "no run {id:?} in .cadre/runs/; the newest are: {}",
                if newest.is_empty() {
                    "(none)".into()
                } else {
                    ids(&newest)
                }
            )))
        }
        many => Err(CliError::config(format!(
            "{id:?} matches {} runs ({}); give more of the id",
            many.len(),
            ids(many)
        ))),
    }
}

/// The run in `dir` opened to go on with: its journal is read once, here, and what it says
/// (the primary agent's type, whether it ended) travels with it to the core.
pub fn open_run(dir: &Path) -> Result<JournaledRun> {
    match JournaledRun::open(dir) {
        Ok(Some(run)) => Ok(run),
        Ok(None) => Err(CliError::config(format!(
            "run {} has no journal to go on from (it was made by an older cadre)",
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))),
        // The journal is there but cannot be read: the run folder is damaged.
        Err(e) => Err(CliError::failed_from(
            format!("cannot go on from the run in {}", dir.display()),
            e,
        )),
    }
}

/// One line per run of the workspace, newest first: id, state, task.
pub fn print_runs(root: &Path) {
    let dirs = run_dirs(root);
    if dirs.is_empty() {
        outln!("no runs yet in .cadre/runs/");
    }
    for dir in dirs.iter().take(20) {
        let (state, task) = match run_state(dir.path()) {
            Ok(Some(s)) => (
                s.finished
                    .as_ref()
                    .map_or("unfinished".to_owned(), |f| f.label().to_owned()),
                s.task,
            ),
            _ => ("(no journal)".to_owned(), String::new()),
        };
        let task: String = task.chars().take(60).collect();
        outln!("{:<24} {state:<11} {task}", dir.id());
    }
}
