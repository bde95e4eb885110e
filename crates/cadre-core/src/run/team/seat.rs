//! A member's seat in its team: what the agent loop asks between turns — the messages
//! waiting for it, and, when its turn is over, to wait for the next one.

use super::members::Team;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::event::Event;
use crate::vocab::team::{Envelope, TeamChange};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One agent's place in the team: what the loop asks between turns.
#[derive(Clone)]
pub struct Seat {
    team: Arc<Team>,
    /// Its member name.
    pub name: String,
    /// Its agent path.
    pub path: AgentPath,
    /// Whether it is the primary agent (it waits for the team rather than for a message).
    pub primary: bool,
}

impl std::fmt::Debug for Seat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seat")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Seat {
    /// The seat of the member `name` at `path` in `team`.
    pub fn new(team: Arc<Team>, name: &str, path: &AgentPath, primary: bool) -> Self {
        Self {
            team,
            name: name.to_owned(),
            path: path.clone(),
            primary,
        }
    }

    /// The team it belongs to.
    pub fn team(&self) -> &Arc<Team> {
        &self.team
    }

    /// The agent acted on its model's response (it runs the response's tool calls, or its
    /// answer was accepted): every message it was given before has been read.
    pub async fn read(&self) {
        self.team.inner.lock().await.unseen.remove(&self.name);
    }

    /// Messages that arrived while the agent was busy, to go with its tool results.
    pub async fn arrived(&self) -> Option<Vec<Envelope>> {
        let mut inner = self.team.inner.lock().await;
        if inner.state.unread(&self.name) == 0 {
            return None;
        }
        let given = self.team.take(&mut inner, &self.name, &self.path);
        Some(given).filter(|g| !g.is_empty())
    }

    /// Hands on the answer the member gave after `turns` requests to whoever waits for it,
    /// and tells its starter once when a member's message started the turn (`woken`).
    async fn answered(&self, answer: &str, woken: bool, turns: u32) {
        let team = &self.team;
        let mut inner = team.inner.lock().await;
        // Its answer stands: what it was given before has been read.
        inner.unseen.remove(&self.name);
        inner.running.remove(&self.name);
        if let Some(live) = inner.live.get(&self.name) {
            live.answer.send_replace(Some(Ok(answer.to_owned())));
        }
        let starter = inner
            .state
            .members
            .get(&self.name)
            .and_then(|m| m.starter.clone())
            .filter(|s| inner.state.members.get(s).is_some_and(|m| !m.closed));
        let key = format!("idle@{turns}");
        if let Some(starter) = starter.filter(|_| woken) {
            if inner.state.sent_under(&self.name, &key).is_none() {
                let notice = Envelope {
                    seq: inner.state.next_seq(&self.name, &starter),
                    from: self.name.clone(),
                    to: starter,
                    text: format!(
                        "{} finished its turn and is waiting for messages. Its last reply:\n{}",
                        self.name,
                        answer.trim()
                    ),
                    notice: true,
                    key,
                    trace: None,
                };
                team.post(&mut inner, &self.path, notice).await;
            }
        }
    }

    /// The agent ended its turn with `answer` after `turns` requests (`woken`: the turn
    /// began with a member's message). Tells whoever waits for its answer, tells its
    /// starter once when a member's message started the turn, then waits for a message —
    /// or, for the primary agent, until nothing is left in flight. `None` when it is to
    /// stop: closed, cancelled, or (the primary) the team is done.
    pub async fn idle(
        &self,
        answer: &str,
        woken: bool,
        turns: u32,
        cancel: &CancellationToken,
    ) -> Option<Vec<Envelope>> {
        let team = &self.team;
        let mut rx = team.changed.subscribe();
        let mut told = false;
        self.answered(answer, woken, turns).await;
        team.bump();
        loop {
            {
                let mut inner = team.inner.lock().await;
                if inner.state.unread(&self.name) > 0 {
                    let given = team.take(&mut inner, &self.name, &self.path);
                    inner.running.insert(self.name.clone());
                    if let Some(first) = given.iter().find(|m| !m.notice) {
                        let what: String = first.text.chars().take(60).collect();
                        let change = TeamChange::Asked {
                            name: self.name.clone(),
                            what: format!("{}: {what}", first.from),
                        };
                        team.change(&mut inner, &self.path, change).await;
                    }
                    drop(inner);
                    if told {
                        team.emit(Event::Woken {
                            agent: self.path.clone(),
                        });
                    }
                    team.bump();
                    return Some(given);
                }
                let closed = inner
                    .state
                    .members
                    .get(&self.name)
                    .is_some_and(|m| m.closed);
                let done =
                    self.primary && inner.running.is_empty() && !inner.state.any_undelivered();
                if closed || done {
                    return None;
                }
            }
            if !told {
                told = true;
                team.emit(Event::Idle {
                    agent: self.path.clone(),
                });
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                changed = rx.changed() => if changed.is_err() { return None },
            }
        }
    }
}
