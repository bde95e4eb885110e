//! A terminal provider error stops all scheduling: once one request of a run is refused for
//! good (a key refused, no credit or quota left: [`ModelError::is_terminal`]), no new
//! subagent or workflow item starts, and no further request is sent — each would be
//! refused the same way, and a run that kept starting agents would report 133 failures
//! where one says it all.

use async_trait::async_trait;
use cadre_model::{EventSink, Model, ModelError, Request, Response};
use futures::future::BoxFuture;
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

    // Written out, not `async`: the request goes into the inner client's future at once,
    // so this one holds only that future while it waits. An `async fn` would keep room for
    // the whole request in every waiting agent's future as well (half a KiB each, across
    // thousands of agents).
    fn send<'life0, 'life1, 'async_trait>(
        &'life0 self,
        request: Request,
        events: EventSink<'life1>,
    ) -> BoxFuture<'async_trait, Result<Response, ModelError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        if let Some(reason) = self.stop.reason() {
            let refused = ModelError::Custom {
                provider: self.inner.provider().to_owned(),
                source: format!("not sent: the provider refused this run for good ({reason})")
                    .into(),
            };
            return Box::pin(std::future::ready(Err(refused)));
        }
        let sent = self.inner.send(request, events);
        Box::pin(async move {
            let result = sent.await;
            if let Err(e) = &result {
                if e.is_terminal() {
                    self.stop.refused(e);
                }
            }
            result
        })
    }

    fn server_compaction(&self) -> bool {
        self.inner.server_compaction()
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.inner.context_window(model).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_model::Message;

    /// Refuses every request for good, as a key the server does not know is.
    struct Refusing;

    #[async_trait]
    impl Model for Refusing {
        fn provider(&self) -> &str {
            "refusing"
        }

        async fn send(&self, request: Request, _: EventSink<'_>) -> Result<Response, ModelError> {
            drop(request);
            Err(ModelError::Api {
                status: 401,
                kind: "authentication_error".into(),
                message: "invalid x-api-key".into(),
                retry_after: None,
            })
        }
    }

    fn request() -> Request {
        Request::new("m", 10, vec![Message::user_text("hi")])
    }

    #[tokio::test]
    async fn a_terminal_error_stops_every_later_request_and_a_waiting_request_holds_no_copy() {
        let stop = Arc::new(ProviderStop::default());
        let guarded = Guarded::new(Arc::new(Refusing), stop.clone());
        let events = |_| {};
        let sent = guarded.send(request(), &events);
        // The request went into the inner client's future: a waiting one holds only that.
        assert!(
            std::mem::size_of_val(&*sent) < std::mem::size_of::<Request>(),
            "{} bytes",
            std::mem::size_of_val(&*sent)
        );
        assert!(sent.await.is_err());
        assert!(stop
            .reason()
            .is_some_and(|r| r.contains("invalid x-api-key")));
        let again = guarded.send(request(), &events).await;
        let Err(ModelError::Custom { source, .. }) = again else {
            panic!("{again:?}");
        };
        assert!(source.to_string().starts_with("not sent"), "{source}");
    }
}
