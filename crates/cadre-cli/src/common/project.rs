//! The project root: where agent types, skills, MCP configuration, instructions, settings
//! and run folders are found, and the folder every tool is confined to.

use crate::common::exit::{CliError, Result};
use std::path::{Path, PathBuf};

/// What marks a folder as a project root, in the order they are named in messages.
pub const ROOT_MARKERS: [&str; 4] = [".cadre", ".claude", "agents", ".git"];

/// How the project root was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `-C DIR` named it.
    Flag,
    /// The nearest folder, from the current one up, holding this marker.
    Marker(&'static str),
    /// No folder up the tree has a marker: the current folder.
    Current,
}

/// The nearest folder from `start` up (itself included) holding one of [`ROOT_MARKERS`],
/// and the marker; `start` itself when none does. The home folder counts only when `start`
/// is the home folder: its `~/.claude/` and `~/.cadre/` hold the user's own settings, and
/// must not make every folder under it one project.
pub fn find_root(start: &Path, home: Option<&Path>) -> (PathBuf, Found) {
    for dir in start.ancestors() {
        if Some(dir) == home && dir != start {
            break;
        }
        if let Some(marker) = marker_of(dir) {
            return (dir.to_path_buf(), Found::Marker(marker));
        }
    }
    (start.to_path_buf(), Found::Current)
}

/// The first of [`ROOT_MARKERS`] that `dir` holds (`.git` may be a file, as in a worktree).
fn marker_of(dir: &Path) -> Option<&'static str> {
    ROOT_MARKERS.into_iter().find(|m| {
        let p = dir.join(m);
        if *m == ".git" {
            p.exists()
        } else {
            p.is_dir()
        }
    })
}

/// The folder to work in: `-C DIR`, else the project root found from the current folder
/// up (see [`find_root`]); a missing folder is a plain error.
pub fn workspace_root(directory: Option<PathBuf>) -> Result<PathBuf> {
    project_root(directory).map(|(root, _)| root)
}

/// [`workspace_root`], and how it was found.
pub fn project_root(directory: Option<PathBuf>) -> Result<(PathBuf, Found)> {
    match directory {
        Some(dir) if dir.exists() && !dir.is_dir() => Err(CliError::config(format!(
            "cannot use -C {}: it is a file, not a folder",
            dir.display()
        ))),
        Some(dir) if !dir.is_dir() => Err(CliError::config(format!(
            "cannot use -C {}: no such folder",
            dir.display()
        ))),
        Some(dir) => Ok((dir, Found::Flag)),
        None => {
            let cwd = std::env::current_dir()
                .map_err(|e| CliError::config_from("cannot read the current folder", e))?;
            Ok(find_root(&cwd, user_home(true).as_deref()))
        }
    }
}

/// The user's home folder, whose agent and skill folders are loaded unless `include_user`
/// is false (a replay must not depend on them).
pub fn user_home(include_user: bool) -> Option<PathBuf> {
    include_user
        .then(|| std::env::var_os("HOME").map(PathBuf::from))
        .flatten()
}

/// The user's cadre folder (`~/.config/cadre`), unless `include_user` is false.
pub fn user_dir(include_user: bool) -> Option<PathBuf> {
    user_home(include_user).map(|h| h.join(".config/cadre"))
}

/// Fails unless every folder given with `flag` exists: a typo must not pass silently.
pub fn require_dirs(dirs: &[PathBuf], flag: &str) -> Result<()> {
    match dirs.iter().find(|d| !d.is_dir()) {
        Some(d) => Err(CliError::config(format!(
            "cannot use {flag} {}: no such folder",
            d.display()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_marker_wins_and_home_is_not_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let deep = home.join("proj/src/a");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        assert_eq!(
            find_root(&deep, Some(&home)),
            (deep.clone(), Found::Current)
        );
        assert_eq!(
            find_root(&home, Some(&home)),
            (home.clone(), Found::Marker(".claude"))
        );
        std::fs::write(home.join("proj/.git"), "gitdir: elsewhere").unwrap();
        assert_eq!(
            find_root(&deep, Some(&home)),
            (home.join("proj"), Found::Marker(".git"))
        );
        std::fs::create_dir_all(home.join("proj/src/agents")).unwrap();
        assert_eq!(
            find_root(&deep, Some(&home)),
            (home.join("proj/src"), Found::Marker("agents"))
        );
    }
}
