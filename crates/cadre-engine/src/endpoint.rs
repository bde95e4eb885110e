//! A worker's endpoint: its Restate services served over HTTP/2.

use crate::worker::{Worker, WorkerError};
use std::sync::Arc;

/// Serves `worker`'s services on `listener` (HTTP/2 without TLS, as Restate speaks to
/// services) until `stop` resolves; with an identity key, a request Restate did not sign
/// is answered 401 and runs nothing.
pub async fn serve(
    worker: Arc<Worker>,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), WorkerError> {
    use restate_sdk::prelude::*;
    // Every call to the run's `CadreRun` object is a short HTTP/2 exchange, and the calls
    // of one run go one after another: with Nagle's algorithm on, each response's last
    // small write waits for Restate's delayed ACK (about 40 ms a call). The SDK's server
    // does not set TCP_NODELAY on what it accepts; Linux gives accepted connections the
    // listener's setting.
    if let Err(e) = socket2::SockRef::from(&listener).set_tcp_nodelay(true) {
        tracing::warn!("cannot set TCP_NODELAY on the worker's socket: {e}");
    }
    // A step may run as long as the longest bash command or model stream: Restate must not
    // take a quiet invocation for a dead one before that.
    let patient = ServiceOptions::new()
        .inactivity_timeout(std::time::Duration::from_secs(15 * 60))
        .abort_timeout(std::time::Duration::from_secs(15 * 60));
    let key = worker.identity_key.clone();
    let mut endpoint = Endpoint::builder()
        .bind(
            crate::driver::CadreAgent(worker)
                .into_service_definition()
                .options(patient),
        )
        .bind(crate::service::CadreRun)
        .bind(crate::service::CadreRoster);
    if let Some(key) = key {
        endpoint = endpoint
            .identity_key(&key)
            .map_err(|e| WorkerError::IdentityKey(crate::identity::rejected(&key, e)))?;
    }
    HttpServer::new(endpoint.build())
        .serve_with_cancel(listener, stop)
        .await;
    Ok(())
}
