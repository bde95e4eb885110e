//! A writing agent's worktree as the driver checkpoints it.

use crate::worker::{Checkpoints, WorkerError};
use crate::workspace::WriterTree;
use async_trait::async_trait;
use cadre_tools::Finished;
use tokio::sync::Mutex;

/// A [`WriterTree`] behind the driver's [`Checkpoints`]; finishing takes it.
pub(crate) struct GitTree(Mutex<Option<WriterTree>>);

impl GitTree {
    /// Wraps `tree`.
    pub(crate) fn new(tree: WriterTree) -> Self {
        Self(Mutex::new(Some(tree)))
    }
}

fn gone() -> WorkerError {
    WorkerError::Checkout("the agent's worktree was already finished".into())
}

#[async_trait]
impl Checkpoints for GitTree {
    async fn checkpoint(&self, message: &str) -> Result<String, WorkerError> {
        let tree = self.0.lock().await;
        let tree = tree.as_ref().ok_or_else(gone)?;
        tree.checkpoint(message)
            .await
            .map_err(|e| WorkerError::Checkout(e.to_string()))
    }

    async fn restore(&self, sha: &str) -> Result<(), WorkerError> {
        let tree = self.0.lock().await;
        let tree = tree.as_ref().ok_or_else(gone)?;
        tree.restore(sha)
            .await
            .map_err(|e| WorkerError::Checkout(e.to_string()))
    }

    async fn finish(&self, message: &str) -> Result<Finished, WorkerError> {
        let tree = self.0.lock().await.take().ok_or_else(gone)?;
        tree.finish(message)
            .await
            .map_err(|e| WorkerError::Checkout(e.to_string()))
    }
}
