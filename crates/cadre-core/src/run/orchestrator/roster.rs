//! The roster: the agents running now, the records of those that ended, and the fan-out of
//! every agent's events to the run's handler and to the streams handed out.

use super::agent_records::AgentRecords;
use crate::record::events::{describe_call, millis, EventHandler, EventStream};
use crate::record::usage::{AgentRecord, UsageReport};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::event::Event;
use crate::vocab::outcome::StopKind;
use cadre_model::Usage;
use dashmap::{DashMap, DashSet};
use serde::Serialize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// One agent that is running now, as the live display shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RosterEntry {
    /// Its path.
    pub path: AgentPath,
    /// Its agent type.
    pub agent_type: String,
    /// What it was asked to do.
    pub description: String,
    /// Model requests made so far.
    pub turn: u32,
    /// The tool it is running, if any.
    pub current_tool: Option<String>,
    /// Tokens used so far.
    pub tokens: u64,
    /// Those tokens by kind, for the record of an agent that never ends.
    #[serde(skip)]
    pub usage: Usage,
    /// Its type's colour in the live display, if it has one.
    pub color: Option<String>,
    /// Whether it runs in the background (its parent goes on meanwhile).
    pub background: bool,
    /// Its name in the run's team, when it is a member started with one.
    pub member: Option<String>,
    /// Whether it is a team member waiting for a message (its turn is over).
    pub waiting: bool,
    /// Team messages waiting for it.
    pub unread: u32,
    /// When it started.
    #[serde(skip)]
    pub started: Instant,
}

/// The agents of a run: who runs now, how those that ended went, and where every event goes.
pub(crate) struct Roster {
    /// The agents running now, by their path.
    running: DashMap<AgentPath, RosterEntry>,
    /// The agents whose end was told: a run given up tells it for the agents still at work,
    /// and their own end, if it still comes, is not told again.
    ended: DashSet<AgentPath>,
    /// The records of the agents that ended (and of those a resumed run found ended).
    records: Mutex<AgentRecords>,
    /// The event streams handed out by [`Roster::subscribe`].
    streams: RwLock<Vec<UnboundedSender<Event>>>,
    /// The run's own event handler.
    events: EventHandler,
}

impl Roster {
    /// An empty roster whose events go on to `events`.
    pub(crate) fn new(events: EventHandler) -> Self {
        Self {
            running: DashMap::new(),
            ended: DashSet::new(),
            records: Mutex::default(),
            streams: RwLock::default(),
            events,
        }
    }

    /// A handler that passes events through this roster.
    pub(crate) fn handler(self: &Arc<Self>) -> EventHandler {
        let roster = self.clone();
        Arc::new(move |e| roster.observe(e))
    }

    /// A stream of every event from now until [`close`](Self::close).
    pub(crate) fn subscribe(&self) -> EventStream {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        EventStream::new(rx)
    }

    /// Ends every event stream (the run is over).
    pub(crate) fn close(&self) {
        self.streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The agents running now, in the order they started.
    pub(crate) fn entries(&self) -> Vec<RosterEntry> {
        let mut entries: Vec<RosterEntry> =
            self.running.iter().map(|e| e.value().clone()).collect();
        entries.sort_by_key(|e| e.started);
        entries
    }

    /// Usage of every agent that has ended.
    pub(crate) fn usage(&self) -> UsageReport {
        UsageReport::new(self.records())
    }

    /// How many agents have ended, counted without copying their records.
    pub(crate) fn finished_count(&self) -> usize {
        self.lock_records().len()
    }

    /// The records of every agent that has ended.
    pub(crate) fn records(&self) -> Vec<AgentRecord> {
        self.lock_records().to_vec()
    }

    fn lock_records(&self) -> std::sync::MutexGuard<'_, AgentRecords> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts an agent that starts on the roster.
    pub(crate) fn add(&self, entry: RosterEntry) {
        self.running.insert(entry.path.clone(), entry);
    }

    /// Takes the agent at `path` off the roster; `false` when it was not on it (it was
    /// recorded already, when the run was given up).
    pub(crate) fn leave(&self, path: &AgentPath) -> bool {
        self.running.remove(path).is_some()
    }

    /// Keeps the record of an agent that ended.
    pub(crate) fn record(&self, record: AgentRecord) {
        self.lock_records().push(record);
    }

    /// Keeps the records of agents that ran elsewhere.
    pub(crate) fn record_all(&self, records: Vec<AgentRecord>) {
        let mut kept = self.lock_records();
        for record in records {
            kept.push(record);
        }
    }

    /// Drops the record of the agent at `path`: it runs again, and the one it ends with
    /// replaces it.
    pub(crate) fn forget(&self, path: &AgentPath) {
        self.lock_records().forget(path);
    }

    /// Records every agent still on the roster as stopped by `stop` and tells the events,
    /// taking it off the roster: the run was given up, or their task was dropped before
    /// it could end, and no report may show them as completed or leave them out.
    pub(crate) fn record_unended(&self, stop: &StopKind) {
        let unended: Vec<AgentPath> = self.running.iter().map(|e| e.key().clone()).collect();
        for path in unended {
            // One that ends meanwhile records itself.
            let Some((_, entry)) = self.running.remove(&path) else {
                continue;
            };
            let elapsed_ms = millis(entry.started.elapsed());
            self.observe(Event::Finished {
                agent: entry.path.clone(),
                outcome: stop.outcome(),
                stop: stop.clone(),
                turns: entry.turn,
                usage: entry.usage,
                elapsed_ms,
            });
            self.record(AgentRecord {
                path: entry.path,
                agent_type: entry.agent_type,
                description: entry.description,
                model: String::new(),
                turns: entry.turn,
                tool_calls: 0,
                usage: entry.usage,
                elapsed_ms,
                outcome: stop.outcome(),
                stop: stop.clone(),
                result_file: None,
                worker: None,
                member: entry.member,
            });
        }
    }

    /// Keeps the roster current, then passes the event on.
    pub(crate) fn observe(&self, event: Event) {
        // Every start has one end: an agent's end is told once.
        if let Event::Finished { agent, .. } = &event {
            if !self.ended.insert(agent.clone()) {
                return;
            }
        }
        self.note(&event);
        {
            let streams = self.streams.read().unwrap_or_else(|e| e.into_inner());
            for tx in streams.iter() {
                let _ = tx.send(event.clone());
            }
        }
        (self.events)(event);
    }

    /// What `event` changes in its agent's entry (and in a message's recipient's).
    fn note(&self, event: &Event) {
        // Only these change an entry: the path is read for them alone (text comes often).
        let changes = matches!(
            event,
            Event::Turn { .. }
                | Event::ToolCall { .. }
                | Event::Compacting { .. }
                | Event::Compacted { .. }
                | Event::Usage { .. }
                | Event::Idle { .. }
                | Event::Woken { .. }
                | Event::Delivered { .. }
        );
        if changes {
            if let Some(mut entry) = self.running.get_mut(event.agent()) {
                update(&mut entry, event);
            }
        }
        if let Event::Message { to, .. } = event {
            let recipient = self
                .running
                .iter()
                .find(|e| e.member.as_deref() == Some(to.as_str()) || *e.key() == *to)
                .map(|e| e.key().clone());
            if let Some(mut entry) = recipient.and_then(|p| self.running.get_mut(&p)) {
                entry.unread += 1;
            }
        }
    }
}

/// `entry` as `event`, one of its own agent's, leaves it.
fn update(entry: &mut RosterEntry, event: &Event) {
    match event {
        Event::Turn { turn, .. } => {
            entry.turn = *turn;
            entry.current_tool = None;
        }
        Event::ToolCall { name, input, .. } => {
            entry.current_tool = Some(describe_call(name, input));
        }
        Event::Compacting { .. } => entry.current_tool = Some("compacting…".into()),
        Event::Compacted { .. } => entry.current_tool = None,
        Event::Usage { usage, .. } => {
            entry.tokens += usage.total();
            entry.usage.add(usage);
        }
        Event::Idle { .. } => entry.waiting = true,
        Event::Woken { .. } => entry.waiting = false,
        Event::Delivered { .. } => entry.unread = entry.unread.saturating_sub(1),
        _ => {}
    }
}
