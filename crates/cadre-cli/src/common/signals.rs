//! Signals every binary of the package waits for.

use tokio::signal::unix::{signal, SignalKind};

/// Resolves when the process gets SIGTERM (never, where that cannot be watched).
pub async fn sigterm() {
    arrives(SignalKind::terminate()).await;
}

/// A signal that asks the whole process to end, as Ctrl-C asks a run to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// SIGTERM: asked to stop.
    Terminated,
    /// SIGHUP: the terminal closed (a closed window, `tmux kill-session`, a dropped ssh).
    HungUp,
}

/// Resolves with the first SIGTERM or SIGHUP the process gets. Watching SIGHUP keeps it
/// from ending the process at once, which would leave the agents' commands running.
pub async fn ending() -> Ending {
    tokio::select! {
        () = arrives(SignalKind::terminate()) => Ending::Terminated,
        () = arrives(SignalKind::hangup()) => Ending::HungUp,
    }
}

/// Resolves when the process gets `kind` (never, where that cannot be watched).
async fn arrives(kind: SignalKind) {
    match signal(kind) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
