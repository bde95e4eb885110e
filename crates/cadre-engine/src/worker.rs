//! A worker: the model client, the clone cache and the settings every invocation it serves
//! shares, and how one invocation's agent is set up on it.

use crate::pump::{Ask, Pump};
use crate::wire::{AgentCall, WorkspaceRef};

pub use crate::error::WorkerError;
pub use crate::git_tree::Checkpoints;
use cadre_core::{Instructions, Limits, Orchestrator, Permissions, Registry, SkillSet};
use cadre_model::Model;
use cadre_tools::{SandboxMode, ToolLimits, Workspace};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What one worker process shares between the invocations it serves.
pub struct Worker {
    name: String,
    model: Arc<dyn Model>,
    workspace: Option<PathBuf>,
    /// Where repositories named by runs are cloned.
    cache: crate::workspace::CloneCache,
    sandbox: SandboxMode,
    tool_limits: ToolLimits,
    attempts: AtomicU64,
    started: u128,
    /// Restate's request-identity public key: with one, only requests it signed are served.
    pub(crate) identity_key: Option<String>,
}

/// One invocation's agent, ready to drive.
pub(crate) struct Prepared {
    /// The orchestrator of this one agent (its subagents are delegated).
    pub orchestrator: Arc<Orchestrator>,
    /// What the agent asks the driver for.
    pub asks: mpsc::UnboundedReceiver<Ask>,
    /// The writing agent's tree, when the run names a repository.
    pub tree: Option<Arc<dyn Checkpoints>>,
    /// Where the agent's transcript is written, to be carried to the client; removed when
    /// dropped.
    pub transcripts: Option<tempfile::TempDir>,
}

/// The transcript lines the agent of run `run` wrote in `dir`, if any: the whole of the
/// run's transcript there, as the worker's orchestrator runs that one agent (its
/// subagents are delegated).
pub(crate) fn written_transcript(dir: Option<&tempfile::TempDir>, run: &str) -> Option<String> {
    let dir = cadre_core::RunDir::open(&dir?.path().join(run)).ok()?;
    std::fs::read_to_string(dir.transcript_file()).ok()
}

impl Worker {
    /// A worker named `name` (shown in the roster) talking to `model`.
    pub fn new(name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        Self {
            name: name.into(),
            model,
            workspace: None,
            cache: crate::workspace::CloneCache::new(crate::workspace::CloneCache::default_root()),
            sandbox: SandboxMode::default(),
            tool_limits: ToolLimits::default(),
            attempts: AtomicU64::new(0),
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            identity_key: None,
        }
    }

    /// Serves only requests signed by the Restate server whose public key is `key`
    /// (`publickeyv1_…`, or a PEM public key: see [`crate::identity::public_key`]).
    pub fn identity_key(mut self, key: &str) -> Result<Self, WorkerError> {
        self.identity_key = Some(crate::identity::public_key(key)?);
        Ok(self)
    }

    /// Whether it serves only signed requests.
    pub fn verifies_identity(&self) -> bool {
        self.identity_key.is_some()
    }

    /// The folder agents work in for runs that name no repository.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// Where the clones of runs' repositories are kept.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache = crate::workspace::CloneCache::new(dir.into());
        self
    }

    /// Whether `bash` runs under the sandbox.
    pub fn sandbox(mut self, mode: SandboxMode) -> Self {
        self.sandbox = mode;
        self
    }

    /// The caps of its agents' tools (bash timeout, output size, …).
    pub fn tool_limits(mut self, limits: ToolLimits) -> Self {
        self.tool_limits = limits;
        self
    }

    /// The worker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A mark no other attempt of any invocation on any worker carries.
    pub(crate) fn attempt_nonce(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.name,
            std::process::id(),
            self.started,
            self.attempts.fetch_add(1, Ordering::SeqCst)
        )
    }

    /// Sets up the agent of `call`: its workspace, its types, its orchestrator.
    pub(crate) async fn prepare(&self, call: &AgentCall) -> Result<Prepared, WorkerError> {
        // The client refuses these first; a worker checks again rather than trust it.
        let unhonoured = crate::unhonoured::unhonoured(call);
        if !unhonoured.is_empty() {
            return Err(WorkerError::Unsupported { unhonoured });
        }
        let permissions = Permissions::from_snapshot(&call.settings.permissions)
            .map_err(WorkerError::Permissions)?;
        let (root, tree) = self.checkout(call).await?;
        let workspace = Workspace::new(&root).map_err(|source| WorkerError::Workspace {
            dir: root.display().to_string(),
            source,
        })?;
        let mut registry = Registry::default();
        for wire in call.settings.agents.iter().cloned() {
            registry.insert(wire.into_spec());
        }
        let settings = &call.settings;
        // The transcript is worth having, not worth failing the agent for.
        let transcripts = tempfile::Builder::new()
            .prefix("cadre-transcript-")
            .tempdir()
            .map_err(|e| tracing::warn!("no transcript for {}: {e}", call.agent.path))
            .ok();
        let (pump, asks) = Pump::new();
        let pump = Arc::new(pump);
        let mut builder = Orchestrator::builder()
            .workspace_handle(Arc::new(workspace))
            .model(self.model.clone())
            .model_id(&call.agent.model)
            .registry(registry)
            .limits(
                Limits::default()
                    .max_depth(settings.max_depth)
                    .max_fanout(settings.max_fanout as usize)
                    // The run's slots and budget are the `CadreRun` object's; none are kept here.
                    .max_parallel(usize::MAX >> 4),
            )
            .max_tokens(settings.max_tokens)
            .context_tokens(settings.context_tokens)
            .compact_at(settings.compact_at)
            .tool_limits(self.tool_limits.clone())
            .sandbox(self.sandbox)
            .run_id(&call.run)
            // What the checkout holds is the same on every worker; the worker's home is not.
            .instructions(Arc::new(Instructions::load(&root, None)))
            .skills(Arc::new(SkillSet::load(&SkillSet::standard_dirs(
                &root, None,
            ))))
            .permissions(permissions)
            .journal(pump.clone())
            .delegate(pump);
        if let Some(turns) = settings.max_turns {
            builder = builder.max_turns(turns);
        }
        if let Some(dir) = &transcripts {
            builder = builder.runs_dir(dir.path());
        }
        let orchestrator = builder.build().map_err(WorkerError::Setup)?;
        Ok(Prepared {
            orchestrator,
            asks,
            tree,
            transcripts,
        })
    }

    /// The folder the agent of `call` works in: the worker's own outside git; in a
    /// repository, a shared read-only checkout or (for a writer) a tree of its own, which
    /// it checkpoints.
    async fn checkout(
        &self,
        call: &AgentCall,
    ) -> Result<(PathBuf, Option<Arc<dyn Checkpoints>>), WorkerError> {
        Ok(match &call.settings.workspace {
            WorkspaceRef::Local => (
                self.workspace.clone().ok_or(WorkerError::NoWorkspace)?,
                None,
            ),
            WorkspaceRef::Git { url, commit } => {
                let base = call.base.as_deref().unwrap_or(commit);
                if call.agent.spec.read_only {
                    let dir = self.cache.read_only(url, base).await?;
                    (dir, None)
                } else {
                    let tree = self
                        .cache
                        .writer(url, base, &call.run, call.agent.path.as_str())
                        .await?;
                    let dir = tree.path().to_path_buf();
                    (
                        dir,
                        Some(Arc::new(crate::git_tree::GitTree::new(tree)) as Arc<dyn Checkpoints>),
                    )
                }
            }
        })
    }
}
