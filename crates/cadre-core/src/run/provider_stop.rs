//! A terminal provider error stops all scheduling: once one request of a run is refused for
//! good (a key refused, no credit or quota left: [`ModelError::is_terminal`]), no new
//! subagent or workflow item starts, and no further request is sent — each would be
//! refused the same way, and a run that kept starting agents would report 133 failures
//! where one says it all.

use async_trait::async_trait;
use cadre_model::{EventSink, Model, ModelError, Request, Response};
use std::sync::{Arc, OnceLock};

/// The first terminal provider error of a run, once there was one.
#[derive(Debug, Default)]
pub(crate) struct ProviderStop {
    reason: OnceLock<String>,
}

impl ProviderStop {
    /// The first terminal error, in words, if the provider refused the run.
    pub(crate) fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Keeps `error` as the run's reason to stop, unless one was kept before.
    fn refused(&self, error: &ModelError) {
        let _ = self.reason.set(error.to_string());
    }
}

/// The run's model client, watched for a terminal error (see the module's doc).
pub(crate) struct Guarded {
    inner: Arc<dyn Model>,
    stop: Arc<ProviderStop>,
}

impl Guarded {
    /// `inner`, its terminal errors kept in `stop`.
    pub(crate) fn new(inner: Arc<dyn Model>, stop: Arc<ProviderStop>) -> Self {
        Self { inner, stop }
    }
}

#[async_trait]
impl Model for Guarded {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        if let Some(reason) = self.stop.reason() {
            return Err(ModelError::Custom {
                provider: self.inner.provider().to_owned(),
                source: format!("not sent: the provider refused this run for good ({reason})")
                    .into(),
            });
        }
        let result = self.inner.send(request, events).await;
        if let Err(e) = &result {
            if e.is_terminal() {
                self.stop.refused(e);
            }
        }
        result
    }

    fn server_compaction(&self) -> bool {
        self.inner.server_compaction()
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.inner.context_window(model).await
    }
}
