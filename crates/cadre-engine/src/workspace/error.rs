//! Why a checkout, checkpoint or push failed.

use cadre_tools::git::GitError;
use std::path::PathBuf;

/// Why a checkout, checkpoint or push failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The `git` binary could not be run.
    #[error("`{command}` could not be run ({source}); cadre workers need git installed")]
    GitMissing {
        /// The command as it was to be run.
        command: String,
        /// What starting it failed with.
        source: std::io::Error,
    },
    /// A git command failed, or a folder for it could not be made.
    #[error(transparent)]
    Git(GitError),
    /// The repository has no such commit, even after fetching its branches and tags.
    #[error(
        "the repository {url} has no commit {commit} (fetched it, then all branches and tags)"
    )]
    CommitNotFound {
        /// The repository.
        url: String,
        /// The commit asked for.
        commit: String,
    },
    /// The run id cannot be part of a branch name and a folder name.
    #[error(
        "run id {run_id:?} cannot name a branch: use ASCII letters, digits, '.', '_' and '-', \
         not starting with '.' or '-'"
    )]
    InvalidRunId {
        /// The run id as given.
        run_id: String,
    },
    /// The writer's folder is no longer its checkout of its branch (its `.git` was removed,
    /// or it switched branches), so nothing was committed, pushed or removed.
    #[error("the worktree {} is no longer a checkout of {branch} ({why}); nothing was committed, pushed or removed", path.display())]
    NotIntact {
        /// The worktree folder.
        path: PathBuf,
        /// The branch it should be on.
        branch: String,
        /// What was found instead.
        why: String,
    },
    /// A file or folder of the cache could not be made, locked or removed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}
