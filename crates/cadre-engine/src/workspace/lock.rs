//! The locks of a worker's clones: an async mutex for the agents of this process and an
//! advisory file lock for other processes sharing the root.

use super::error::WorkspaceError;
use cadre_tools::git::create_dir_all;
use nix::fcntl::{Flock, FlockArg};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::{Arc, Mutex as StdMutex};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The clones' in-process locks, one per clone, shared by a cache and its writer trees.
#[derive(Debug, Clone, Default)]
pub(super) struct Locks(Arc<StdMutex<HashMap<String, Arc<Mutex<()>>>>>);

/// A clone's lock, held: released when dropped.
pub(super) struct RepoLock {
    _file: Flock<File>,
    _turn: OwnedMutexGuard<()>,
}

impl Locks {
    /// Takes the lock of the clone `<root>/repos/<key>`: this process's turn first, then
    /// the file lock `<root>/locks/<key>` other processes take.
    pub(super) async fn lock(&self, root: &Path, key: &str) -> Result<RepoLock, WorkspaceError> {
        let turn = {
            let mut map = self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            map.entry(key.to_string()).or_default().clone()
        };
        let turn = turn.lock_owned().await;

        let dir = root.join("locks");
        create_dir_all(&dir).await?;
        let path = dir.join(format!("{key}.lock"));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| WorkspaceError::Io { path, source }
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        // flock blocks; a thread of its own waits for it.
        let file = tokio::task::spawn_blocking(move || {
            Flock::lock(file, FlockArg::LockExclusive)
                .map_err(|(_, errno)| std::io::Error::from(errno))
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|locked| locked)
        .map_err(io(&path))?;
        Ok(RepoLock {
            _file: file,
            _turn: turn,
        })
    }

    /// [`lock`](Self::lock) for the clone at `repo` (`<root>/repos/<key>`).
    pub(super) async fn lock_repo(&self, repo: &Path) -> Result<RepoLock, WorkspaceError> {
        let key = repo
            .file_name()
            .map(|k| k.to_string_lossy().into_owned())
            .unwrap_or_default();
        let root = repo.parent().and_then(Path::parent).unwrap_or(repo);
        self.lock(root, &key).await
    }
}
