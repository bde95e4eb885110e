//! One limit on model requests for every call the server runs at once: each call is a run
//! with its own orchestrator (and its own `--max-parallel`), so the server's bound is kept
//! by the model client they all share.

use async_trait::async_trait;
use cadre_model::{EventSink, Model, ModelError, Request, Response};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// A model client that lets at most N requests be in flight at once, across every run
/// that uses it.
pub struct SharedLimit {
    inner: Arc<dyn Model>,
    permits: Arc<Semaphore>,
    /// How many requests may be in flight at once.
    most: usize,
}

impl SharedLimit {
    /// `inner`, with at most `max_parallel` (at least 1) requests in flight at once.
    pub fn new(inner: Arc<dyn Model>, max_parallel: usize) -> Self {
        let most = max_parallel.max(1);
        Self {
            inner,
            permits: Arc::new(Semaphore::new(most)),
            most,
        }
    }
}

#[async_trait]
impl Model for SharedLimit {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        // The semaphore is never closed, so acquiring fails only if it were; a request
        // then goes out unlimited rather than not at all.
        let _permit = match self.permits.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                tracing::info!(
                    "a model request waits: all {} slots of --max-parallel are in use by the calls running",
                    self.most
                );
                self.permits.acquire().await.ok()
            }
        };
        self.inner.send(request, events).await
    }

    fn server_compaction(&self) -> bool {
        self.inner.server_compaction()
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.inner.context_window(model).await
    }
}
