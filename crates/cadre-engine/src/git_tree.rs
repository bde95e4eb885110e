//! A writing agent's worktree as the driver checkpoints it.

use crate::error::WorkerError;
use crate::workspace::WriterTree;
use async_trait::async_trait;
use cadre_tools::Finished;
use tokio::sync::Mutex;

/// A writing agent's tree, checkpointed after each change so another worker can go on
/// from it.
#[async_trait]
pub trait Checkpoints: Send + Sync {
    /// Commits every change and pushes it where other workers fetch it; its commit id.
    async fn checkpoint(&self, message: &str) -> Result<String, WorkerError>;
    /// Makes the tree exactly the checkpoint `sha`.
    async fn restore(&self, sha: &str) -> Result<(), WorkerError>;
    /// Commits what is left and pushes the agent's branch, when it changed something.
    async fn finish(&self, message: &str) -> Result<cadre_tools::Finished, WorkerError>;
}

/// A [`WriterTree`] behind the driver's [`Checkpoints`]; finishing takes it.
pub(crate) struct GitTree(Mutex<Option<WriterTree>>);

impl GitTree {
    /// Wraps `tree`.
    pub(crate) fn new(tree: WriterTree) -> Self {
        Self(Mutex::new(Some(tree)))
    }
}

#[async_trait]
impl Checkpoints for GitTree {
    async fn checkpoint(&self, message: &str) -> Result<String, WorkerError> {
        let tree = self.0.lock().await;
        let tree = tree.as_ref().ok_or(WorkerError::TreeGone)?;
        Ok(tree.checkpoint(message).await?)
    }

    async fn restore(&self, sha: &str) -> Result<(), WorkerError> {
        let tree = self.0.lock().await;
        let tree = tree.as_ref().ok_or(WorkerError::TreeGone)?;
        Ok(tree.restore(sha).await?)
    }

    async fn finish(&self, message: &str) -> Result<Finished, WorkerError> {
        let tree = self.0.lock().await.take().ok_or(WorkerError::TreeGone)?;
        Ok(tree.finish(message).await?)
    }
}
