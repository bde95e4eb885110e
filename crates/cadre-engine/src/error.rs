//! Why a worker could not set up an agent.

use cadre_core::RunError;

/// Why a worker could not set up an agent (Restate retries the invocation).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The run works in each worker's own folder, and this worker was started without one.
    #[error("the run works in each worker's own folder, and this worker has none (start it with --workspace DIR)")]
    NoWorkspace,
    /// The folder cannot be a workspace.
    #[error("cannot work in {dir}: {source}")]
    Workspace {
        /// The folder.
        dir: String,
        /// Why not.
        source: cadre_tools::ToolError,
    },
    /// The run's repository could not be checked out, checkpointed or pushed.
    #[error("{0}")]
    Checkout(#[from] crate::workspace::WorkspaceError),
    /// The agent's worktree was asked for after it was finished.
    #[error("the agent's worktree was already finished")]
    TreeGone,
    /// The agent types the run sent cannot make an orchestrator (a tool name no tool
    /// answers to).
    #[error("{0}")]
    Setup(#[source] RunError),
    /// The run's permission rules cannot be read here.
    #[error("the run's permissions: {0}")]
    Permissions(#[source] cadre_core::RuleError),
    /// The run asks for something a worker does not do (hooks, an MCP server): running it
    /// without would silently change what its agents may do.
    #[error("the worker cannot honour what this run asks for, so it was not started: {}", .unhonoured.join("; "))]
    Unsupported {
        /// What it cannot honour, one setting each.
        unhonoured: Vec<String>,
    },
    /// The request-identity key given to the worker is not one.
    #[error("{0}")]
    IdentityKey(#[from] crate::identity::IdentityKeyError),
}

impl WorkerError {
    /// Whether trying again on this worker cannot help (its set-up, or the run's, is wrong).
    pub fn is_lasting(&self) -> bool {
        matches!(
            self,
            Self::NoWorkspace
                | Self::Workspace { .. }
                | Self::Setup(_)
                | Self::Permissions(_)
                | Self::Unsupported { .. }
                | Self::IdentityKey(_)
        )
    }
}
