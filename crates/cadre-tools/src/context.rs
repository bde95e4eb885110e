//! What every tool call gets: the workspace, limits, cancellation and shared file state.

use crate::Workspace;
use dashmap::DashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// Caps that keep one call from flooding the model's context or hanging the agent.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// Default `bash` timeout when the model gives none.
    pub bash_timeout: Duration,
    /// Longest `bash` timeout the model may ask for.
    pub bash_max_timeout: Duration,
    /// Most bytes of tool output returned to the model (head and tail kept).
    pub max_output_bytes: usize,
    /// Largest file `read_file` will read.
    pub max_read_bytes: u64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            bash_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            max_output_bytes: 30_000,
            max_read_bytes: 10 * 1024 * 1024,
        }
    }
}

/// One lock per path, shared by every agent of a run, so writes to a file never interleave.
#[derive(Debug, Default)]
pub struct PathLocks {
    locks: DashMap<PathBuf, Arc<Mutex<()>>>,
}

impl PathLocks {
    /// The lock for `path` (already resolved inside the workspace).
    pub fn lock_for(&self, path: &Path) -> Arc<Mutex<()>> {
        self.locks.entry(path.to_path_buf()).or_default().clone()
    }
}

/// What one agent has read, so `edit_file` can refuse to edit a file that changed since.
#[derive(Debug, Default)]
pub struct FileTracker {
    seen: DashMap<PathBuf, SystemTime>,
}

impl FileTracker {
    /// Records that the agent has seen `path` as last modified at `mtime`.
    pub fn record(&self, path: &Path, mtime: SystemTime) {
        self.seen.insert(path.to_path_buf(), mtime);
    }

    /// When the agent last saw `path` modified, if it has read it.
    pub fn last_seen(&self, path: &Path) -> Option<SystemTime> {
        self.seen.get(path).map(|t| *t)
    }
}

/// Everything a tool call may use.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The root every path is confined to.
    pub workspace: Arc<Workspace>,
    /// Cancelled when the run (or this agent) is stopped; long calls must watch it.
    pub cancel: CancellationToken,
    /// Output and time caps.
    pub limits: ToolLimits,
    /// Whether the calling agent's type is read-only.
    pub read_only: bool,
    /// Per-path write locks shared by every agent of the run.
    pub locks: Arc<PathLocks>,
    /// What this agent has read (one tracker per agent).
    pub files: Arc<FileTracker>,
}

impl ToolContext {
    /// A context for `workspace` with default limits, fresh state and a new cancel token.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self {
            workspace,
            cancel: CancellationToken::new(),
            limits: ToolLimits::default(),
            read_only: false,
            locks: Arc::default(),
            files: Arc::default(),
        }
    }
}
