//! Where the events every agent emits go: a shared handler, or a stream (the events
//! themselves, [`Event`], are in the vocabulary).

use crate::vocab::event::Event;
use std::sync::Arc;
use std::time::Duration;

/// Where events go: a shared callback, cheap to clone into every agent.
pub type EventHandler = Arc<dyn Fn(Event) + Send + Sync>;

/// The events of a run as a [`futures::Stream`] (from [`crate::Orchestrator::events`]); it
/// ends when the run does.
#[derive(Debug)]
pub struct EventStream {
    rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
}

impl EventStream {
    pub(crate) fn new(rx: tokio::sync::mpsc::UnboundedReceiver<Event>) -> Self {
        Self { rx }
    }

    /// The next event, waiting for it; `None` once the run has ended (no `StreamExt`
    /// needed).
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next event if one is waiting, without waiting for one.
    pub fn try_next(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }
}

impl futures::Stream for EventStream {
    type Item = Event;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Event>> {
        self.rx.poll_recv(cx)
    }
}

/// A handler that drops every event.
pub fn no_events() -> EventHandler {
    Arc::new(|_| {})
}

/// Milliseconds in `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A one-line description of a tool call for live displays: `read_file src/main.rs`.
pub fn describe_call(name: &str, input: &serde_json::Value) -> String {
    let pick = ["description", "command", "path", "pattern", "name"]
        .iter()
        .find_map(|k| input.get(*k).and_then(|v| v.as_str()));
    let detail = pick.map(str::to_owned).unwrap_or_default();
    let line = detail.lines().next().unwrap_or_default();
    let line = match line.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_owned(),
    };
    if line.is_empty() {
        name.to_owned()
    } else {
        format!("{name} {line}")
    }
}
