//! Finding runs to resume or continue in `.cadre/runs/`.

use crate::exit::ConfigError;
use anyhow::Result;
use cadre_core::record::journal::{run_state, RunState};
use std::path::{Path, PathBuf};

/// The run folders of the workspace at `root`, newest first (ids start with a UTC time).
fn run_dirs(root: &Path) -> Vec<PathBuf> {
    let runs = root.join(".cadre").join("runs");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs
}

/// The newest run with a journal that can take a follow-up (`finished`), or that can be
/// resumed (cancelled runs are both).
pub fn newest(root: &Path, finished: bool) -> Result<Option<PathBuf>> {
    for dir in run_dirs(root) {
        if let Ok(Some(state)) = run_state(&dir) {
            let fits = if finished {
                state.continuable()
            } else {
                state.resumable()
            };
            if fits {
                return Ok(Some(dir));
            }
        }
    }
    Ok(None)
}

/// The run folder for `id`: an exact id or a unique prefix of one.
pub fn find(root: &Path, id: &str) -> Result<PathBuf> {
    let dirs = run_dirs(root);
    let name = |d: &PathBuf| {
        d.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if let Some(exact) = dirs.iter().find(|d| name(d) == id) {
        return Ok(exact.clone());
    }
    let matching: Vec<&PathBuf> = dirs.iter().filter(|d| name(d).starts_with(id)).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let newest: Vec<String> = dirs.iter().take(5).map(name).collect();
            Err(ConfigError(format!(
                "no run {id:?} in .cadre/runs/; the newest are: {}",
                if newest.is_empty() {
                    "(none)".into()
                } else {
                    newest.join(", ")
                }
            ))
            .into())
        }
        many => Err(ConfigError(format!(
            "{id:?} matches {} runs ({}); give more of the id",
            many.len(),
            many.iter().map(|d| name(d)).collect::<Vec<_>>().join(", ")
        ))
        .into()),
    }
}

/// The primary agent type of the run in `dir`, from its journal.
pub fn primary_type(dir: &Path) -> Result<String> {
    match run_state(dir) {
        Ok(Some(RunState { agent_type, .. })) => Ok(agent_type),
        Ok(None) => Err(ConfigError(format!(
            "run {} has no journal to go on from (it was made by an older cadre)",
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
        .into()),
        Err(e) => Err(ConfigError(e.to_string()).into()),
    }
}

/// One line per run of the workspace, newest first: id, state, task.
pub fn print_runs(root: &Path) {
    let dirs = run_dirs(root);
    if dirs.is_empty() {
        outln!("no runs yet in .cadre/runs/");
    }
    for dir in dirs.iter().take(20) {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (state, task) = match run_state(dir) {
            Ok(Some(s)) => (
                s.finished
                    .as_ref()
                    .map_or("unfinished".to_owned(), |f| f.label().to_owned()),
                s.task,
            ),
            _ => ("(no journal)".to_owned(), String::new()),
        };
        let task: String = task.chars().take(60).collect();
        outln!("{id:<24} {state:<11} {task}");
    }
}
