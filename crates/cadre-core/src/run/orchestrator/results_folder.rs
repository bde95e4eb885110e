//! The folder long answers are kept in when a run has no run folder (a library run without
//! `runs_dir`): a folder of the system's temporary directory that belongs to the
//! orchestrator and is removed when it is dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Where long answers are kept when the run has no folder: a folder in the system's
/// temporary directory, made when the first one comes and removed with the orchestrator.
#[derive(Debug)]
pub(super) struct ResultsFolder {
    /// The temporary folder.
    pub(super) dir: PathBuf,
    /// Whether this orchestrator made it (and so removes it).
    made: Mutex<bool>,
}

impl ResultsFolder {
    /// A folder name no other orchestrator of this or another process uses.
    pub(super) fn new(run_id: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self {
            dir: std::env::temp_dir().join(format!("cadre-results-{run_id}-{n}")),
            made: Mutex::new(false),
        }
    }

    /// The folder's path.
    pub(super) fn path(&self) -> Arc<Path> {
        self.dir.as_path().into()
    }

    /// Makes the folder (private to the user) unless this orchestrator already did; one
    /// that exists and is not ours is refused rather than written into.
    pub(super) fn make(&self) -> std::io::Result<()> {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if !*made {
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(&self.dir)?;
            *made = true;
        }
        Ok(())
    }
}

impl Drop for ResultsFolder {
    fn drop(&mut self) {
        if *self.made.get_mut().unwrap_or_else(|e| e.into_inner()) {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                tracing::warn!("could not remove {}: {e}", self.dir.display());
            }
        }
    }
}
