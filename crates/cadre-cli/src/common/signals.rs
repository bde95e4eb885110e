//! Signals every binary of the package waits for.

/// Resolves when the process gets SIGTERM (never, where that cannot be watched).
pub async fn sigterm() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
