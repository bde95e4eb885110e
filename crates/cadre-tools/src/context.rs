//! What every tool call gets: the workspace, limits, cancellation and shared file state.

use crate::{SandboxMode, Workspace};
use dashmap::DashMap;
use std::collections::HashMap;
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

/// What an agent saw of a file: its mtime and, when known, a hash of its bytes.
///
/// The hash catches writes that land within one mtime tick, which an mtime alone would miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// When the file was last modified as the agent saw it.
    pub mtime: SystemTime,
    /// Hash of the file's bytes (length included), if the agent had them.
    pub content_hash: Option<u64>,
}

impl FileStamp {
    /// The stamp of a file whose bytes are `bytes` and mtime `mtime`.
    pub fn of(mtime: SystemTime, bytes: &[u8]) -> Self {
        Self {
            mtime,
            content_hash: Some(content_hash(bytes)),
        }
    }

    /// Whether `current` shows the same content this stamp saw.
    ///
    /// Compares content hashes when both are known (so a `touch` is not a change), else mtimes.
    pub fn matches(&self, current: &FileStamp) -> bool {
        match (self.content_hash, current.content_hash) {
            (Some(a), Some(b)) => a == b,
            _ => self.mtime == current.mtime,
        }
    }
}

/// A cheap hash of `bytes`; only ever compared within one process.
pub fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    // Hashing the slice writes its length first, so files differing only in length differ.
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// What one agent has read, so `edit_file` can refuse to edit a file that changed since.
///
/// A plain map under a lock: one agent's calls barely contend, and an empty map allocates
/// nothing, where a sharded map costs every agent of a fan-out a kilobyte before it reads.
#[derive(Debug, Default)]
pub struct FileTracker {
    seen: std::sync::Mutex<HashMap<PathBuf, FileStamp>>,
}

impl FileTracker {
    /// Records that the agent has seen `path` as last modified at `mtime` (content unknown).
    pub fn record(&self, path: &Path, mtime: SystemTime) {
        self.record_stamp(
            path,
            FileStamp {
                mtime,
                content_hash: None,
            },
        );
    }

    /// When the agent last saw `path` modified, if it has read it.
    pub fn last_seen(&self, path: &Path) -> Option<SystemTime> {
        self.stamp(path).map(|s| s.mtime)
    }

    /// Records everything the agent saw of `path`.
    pub fn record_stamp(&self, path: &Path, stamp: FileStamp) {
        self.seen().insert(path.to_path_buf(), stamp);
    }

    /// What the agent last saw of `path`, if it has read or written it.
    pub fn stamp(&self, path: &Path) -> Option<FileStamp> {
        self.seen().get(path).copied()
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, FileStamp>> {
        // A panic while holding the lock leaves the map whole: each update is one insert.
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
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
    /// Whether `bash` runs in the Landlock sandbox (default) or unsandboxed (opt-out).
    pub sandbox: SandboxMode,
    /// Whether sandboxed `bash` may bind and connect TCP sockets (default true).
    pub allow_network: bool,
    /// The `tool_use` id of the call being run (empty outside a call).
    pub call_id: String,
    /// A folder outside the workspace that `read_file` may read too, by absolute path (where
    /// the run keeps subagents' answers too long for a tool result); `None` for none.
    pub also_readable: Option<Arc<Path>>,
}

impl ToolContext {
    /// A context for `workspace` with default limits, fresh state, a new cancel token, the
    /// Landlock sandbox on and network allowed.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self {
            workspace,
            cancel: CancellationToken::new(),
            limits: ToolLimits::default(),
            read_only: false,
            locks: Arc::default(),
            files: Arc::default(),
            sandbox: SandboxMode::default(),
            allow_network: true,
            call_id: String::new(),
            also_readable: None,
        }
    }

    /// Resolves a path a tool only reads: inside the workspace, or (an absolute path)
    /// inside the folder it may read too; the workspace's refusal otherwise.
    pub fn resolve_for_reading(&self, path: &str) -> Result<PathBuf, crate::ToolError> {
        match self.workspace.resolve(path) {
            Err(refused @ crate::ToolError::OutsideWorkspace { .. }) => self
                .also_readable
                .as_deref()
                .and_then(|folder| Workspace::resolve_in_folder(folder, path))
                .ok_or(refused),
            resolved => resolved,
        }
    }
}
