//! Signals every binary of the package waits for.

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

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

/// The SIGTERM and SIGHUP of the whole process, each published as it arrives: the value is
/// the first one's (it says how the process ends) and every later signal marks it changed
/// again, so a listener can tell a second from the first. The handlers are installed before
/// this returns, so no signal falls between two listeners: once a handler is installed, one
/// that nothing waits for is thrown away. Watching SIGHUP keeps it from ending the process at
/// once, which would leave the agents' commands running.
pub fn watch_endings() -> watch::Receiver<Option<Ending>> {
    let (tx, rx) = watch::channel(None);
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    tokio::spawn(async move {
        loop {
            let ending = tokio::select! {
                Some(()) = next(&mut term) => Ending::Terminated,
                Some(()) = next(&mut hup) => Ending::HungUp,
                else => return,
            };
            tx.send_modify(|first| {
                first.get_or_insert(ending);
            });
        }
    });
    rx
}

/// The next delivery of a watched signal; `None` once it cannot come (or was never watched).
async fn next(s: &mut Option<Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => None,
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
