//! Signals every binary of the package waits for.

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// Resolves when the process is asked to stop: SIGINT (Ctrl-C), SIGTERM or SIGHUP (a
/// server's terminal or parent went away). The handlers are installed when this is called,
/// not when first polled, so a signal that comes before the wait begins is not lost, and
/// SIGHUP never ends the process at once with its agents' commands still running.
pub fn stop_requested() -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    async move {
        tokio::select! {
            Some(()) = next(&mut int) => {}
            Some(()) = next(&mut term) => {}
            Some(()) = next(&mut hup) => {}
            // None of them can be watched: nothing will ask.
            else => std::future::pending().await,
        }
    }
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
pub(crate) async fn next(s: &mut Option<Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => None,
    }
}
