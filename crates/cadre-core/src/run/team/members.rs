//! The team itself: who is in it, the messages on their way to each member, the shared task
//! list, and the journal every change goes to before it takes effect.

use super::error::TeamError;
use super::rules::{check_name, check_update, next_id, task_ids};
use super::state::TeamState;
use crate::record::events::EventHandler;
use crate::record::journal::Journal;
use crate::run::spans;
use crate::run::task_result::{SubagentError, TaskResult};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::event::Event;
use crate::vocab::step::Step;
use crate::vocab::team::{Envelope, Member, SharedTask, TaskStatus, TeamChange};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How far a team may go.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TeamLimits {
    /// Most members (the primary agent aside) not closed at once.
    pub max_members: usize,
    /// Longest message, in bytes.
    pub max_message_bytes: usize,
    /// Most messages one member may have waiting; a send beyond is refused.
    pub max_unread: usize,
    /// Most messages members may send in the whole run; a runaway exchange stops there.
    pub max_messages: usize,
}

impl Default for TeamLimits {
    fn default() -> Self {
        Self {
            max_members: 16,
            max_message_bytes: 32 * 1024,
            max_unread: 32,
            max_messages: 500,
        }
    }
}

impl TeamLimits {
    /// These limits with at most `n` members open at once.
    #[must_use]
    pub fn max_members(mut self, n: usize) -> Self {
        self.max_members = n;
        self
    }

    /// These limits with messages of at most `bytes`.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// These limits with at most `n` messages waiting per member.
    #[must_use]
    pub fn max_unread(mut self, n: usize) -> Self {
        self.max_unread = n;
        self
    }

    /// These limits with at most `n` messages in the whole run.
    #[must_use]
    pub fn max_messages(mut self, n: usize) -> Self {
        self.max_messages = n;
        self
    }
}

/// What a member is doing, as far as the team can tell.
pub(super) struct Live {
    /// Stops it (closing a running member cancels it).
    pub(super) cancel: CancellationToken,
    /// Its answer each time it goes idle (a `Task` call that started it waits for the first).
    pub(super) answer: watch::Sender<Option<TaskResult>>,
}

/// The team's journaled state and what only the live run knows (who is running).
#[derive(Default)]
/// The team's state behind its lock.
pub(super) struct Inner {
    /// The journaled state: members, messages, tasks.
    pub(super) state: TeamState,
    /// Members (the primary aside) that are working now, not waiting for a message.
    pub(super) running: HashSet<String>,
    /// Per member started in this process, how to stop it and where its answers go.
    pub(super) live: HashMap<String, Live>,
    /// Names a `Task` call checked and holds, not journaled yet: taken by the check itself,
    /// so two calls for one name (or past the member cap) cannot both pass it.
    pub(super) reserved: HashSet<String>,
    /// Per member, the messages (sender, number) given to it since it last acted on its
    /// model's response: closed now, it never read them.
    pub(super) unseen: HashMap<String, Vec<(String, u64)>>,
}

/// A run's team.
pub struct Team {
    pub(super) inner: tokio::sync::Mutex<Inner>,
    /// Bumped on every change, so waiters look again.
    pub(super) changed: watch::Sender<u64>,
    limits: TeamLimits,
    /// Where its changes are journaled: the run's journal, if it has one.
    journal: Option<Arc<dyn Journal>>,
    /// Where its events go: the run's roster.
    events: EventHandler,
    /// The tasks running members, awaited when the run ends.
    handles: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Team {
    /// An empty team under `limits`, journaling its changes to `journal` and telling its
    /// events to `events`.
    pub fn new(
        limits: TeamLimits,
        journal: Option<Arc<dyn Journal>>,
        events: EventHandler,
    ) -> Self {
        Self {
            inner: tokio::sync::Mutex::default(),
            changed: watch::channel(0).0,
            limits,
            journal,
            events,
            handles: Mutex::default(),
        }
    }

    /// The team as it stands.
    pub async fn snapshot(&self) -> TeamState {
        self.inner.lock().await.state.clone()
    }

    /// The agent paths of its members.
    pub async fn member_paths(&self) -> Vec<AgentPath> {
        let inner = self.inner.lock().await;
        inner
            .state
            .members
            .values()
            .map(|m| m.path.clone())
            .collect()
    }

    /// How many messages wait for the member `name`.
    pub async fn unread(&self, name: &str) -> usize {
        self.inner.lock().await.state.unread(name)
    }

    /// Whether the member `name` is working now.
    pub async fn is_running(&self, name: &str) -> bool {
        self.inner.lock().await.running.contains(name)
    }

    /// Starts over from a journaled team (a resumed run): its state, with every member not
    /// closed counted as working until it says otherwise, and what each was given and has
    /// not read (`unseen`, by member name).
    pub(crate) async fn restore(
        &self,
        state: TeamState,
        unseen: HashMap<String, Vec<(String, u64)>>,
    ) {
        let mut inner = self.inner.lock().await;
        inner.unseen = unseen;
        inner.running = state
            .members
            .values()
            .filter(|m| !m.closed && m.starter.is_some())
            .map(|m| m.name.clone())
            .collect();
        inner.state = state;
    }

    pub(super) fn emit(&self, event: Event) {
        (self.events)(event);
    }

    pub(super) fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Journals `change` made by the agent at `by` and folds it into `inner`.
    pub(super) async fn change(&self, inner: &mut Inner, by: &AgentPath, change: TeamChange) {
        if let Some(journal) = &self.journal {
            let step = Step::Team {
                by: by.clone(),
                change: change.clone(),
            };
            if let Err(e) = journal.append(&step).await {
                tracing::warn!("could not journal a team change: {e}");
            }
        }
        let before = inner.state.messages.len();
        let closing = matches!(change, TeamChange::Closed { .. });
        inner.state.apply(change);
        // Closing a member sends what it never read back to the senders (in the fold):
        // they are told like any message.
        if closing {
            for m in &inner.state.messages[before..] {
                self.emit(message_event(by, m));
            }
        }
    }

    /// Registers the primary agent as the member `name` at `path`.
    pub(crate) async fn lead(&self, name: &str, path: &AgentPath, agent_type: &str) {
        let mut inner = self.inner.lock().await;
        if inner.state.members.contains_key(name) {
            return;
        }
        let member = Member::new(name, path, agent_type, None);
        self.change(&mut inner, path, TeamChange::Joined { member })
            .await;
    }

    /// Reserves the name `name` for a member about to join, if it may join now: the check
    /// and the reservation are one step under the team's lock, so of two calls for one
    /// name only one passes, and the member cap counts the members on their way in.
    /// [`Team::join`] turns the reservation into a member (nothing can fail between).
    pub(crate) async fn reserve(&self, name: &str) -> Result<(), TeamError> {
        let mut inner = self.inner.lock().await;
        check_name(name)?;
        if inner.state.members.contains_key(name) || inner.reserved.contains(name) {
            return Err(TeamError::NameTaken {
                name: name.to_owned(),
            });
        }
        let live = inner
            .state
            .members
            .values()
            .filter(|m| !m.closed && m.starter.is_some())
            .count();
        if live + inner.reserved.len() >= self.limits.max_members {
            return Err(TeamError::TooManyMembers(self.limits.max_members));
        }
        inner.reserved.insert(name.to_owned());
        Ok(())
    }

    /// Adds `member` (its name reserved by [`Team::reserve`]), working from now on.
    pub(crate) async fn join(&self, by: &AgentPath, member: Member) {
        let mut inner = self.inner.lock().await;
        let name = member.name.clone();
        inner.reserved.remove(&name);
        if !inner.state.members.contains_key(&name) {
            self.change(&mut inner, by, TeamChange::Joined { member })
                .await;
        }
        inner.running.insert(name);
        drop(inner);
        self.bump();
    }

    /// Notes the member `name`'s cancel token and returns where its answers go.
    pub(crate) async fn seat(
        &self,
        name: &str,
        cancel: CancellationToken,
    ) -> watch::Receiver<Option<TaskResult>> {
        let mut inner = self.inner.lock().await;
        let live = inner.live.entry(name.to_owned()).or_insert_with(|| Live {
            cancel: cancel.clone(),
            answer: watch::channel(None).0,
        });
        live.cancel = cancel;
        live.answer.subscribe()
    }

    /// Where the answers of the member `name` go, if it runs now.
    pub(crate) async fn answers(&self, name: &str) -> Option<watch::Receiver<Option<TaskResult>>> {
        let inner = self.inner.lock().await;
        inner.live.get(name).map(|l| l.answer.subscribe())
    }

    /// Waits for the next answer of the member `name` (a `Task` call that started it).
    pub(crate) async fn answer(
        &self,
        mut rx: watch::Receiver<Option<TaskResult>>,
        cancel: &CancellationToken,
    ) -> TaskResult {
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(SubagentError::Lost),
            r = rx.wait_for(Option::is_some) => r.ok().and_then(|r| r.clone()).unwrap_or(Err(SubagentError::Lost)),
        }
    }

    /// Keeps the task running a member, to await it when the run ends.
    pub(crate) fn keep(&self, handle: tokio::task::JoinHandle<()>) {
        lock(&self.handles).push(handle);
    }

    /// A member's agent ended with `result` (`Ok` with its answer when it was closed): it is
    /// closed for good, and a `Task` call still waiting for it gets the result.
    pub(crate) async fn ended(&self, name: &str, path: &AgentPath, result: TaskResult) {
        let mut inner = self.inner.lock().await;
        inner.running.remove(name);
        if let Some(live) = inner.live.get(name) {
            live.answer.send_modify(|a| {
                if a.is_none() || result.is_err() {
                    *a = Some(result);
                }
            });
        }
        let open = inner.state.members.get(name).is_some_and(|m| !m.closed);
        if open {
            let change = closing(&mut inner, name);
            self.change(&mut inner, path, change).await;
        }
        drop(inner);
        self.bump();
    }

    /// Sends `text` from `from` to `to` (by name; `*` is every other member). `key` makes
    /// the send happen once: sent again under the same key (a resumed run re-running the
    /// call), it returns what the first send did.
    pub async fn send(
        &self,
        by: &AgentPath,
        from: &str,
        to: &str,
        text: &str,
        key: &str,
    ) -> Result<Vec<Envelope>, TeamError> {
        let mut inner = self.inner.lock().await;
        let state = &inner.state;
        let recipients: Vec<String> = if to == "*" {
            state
                .members
                .values()
                .filter(|m| m.name != from && !m.closed)
                .map(|m| m.name.clone())
                .collect()
        } else {
            vec![to.to_owned()]
        };
        let keyed = |r: &str| {
            if recipients.len() > 1 {
                format!("{key}/{r}")
            } else {
                key.to_owned()
            }
        };
        // Sent already (a resumed run): the first send stands.
        let earlier: Vec<Envelope> = recipients
            .iter()
            .filter_map(|r| state.sent_under(from, &keyed(r)).cloned())
            .collect();
        if !earlier.is_empty() {
            return Ok(earlier);
        }
        self.may_send(state, from, &recipients, text)?;
        // The current span is the sender's `SendMessage` call: each delivery links to it.
        let trace = cadre_tools::trace_context::traceparent();
        let mut sent = Vec::new();
        for r in &recipients {
            let message = Envelope {
                from: from.to_owned(),
                to: r.clone(),
                seq: inner.state.next_seq(from, r),
                text: text.to_owned(),
                notice: false,
                key: keyed(r),
                trace: trace.clone(),
            };
            self.post(&mut inner, by, message.clone()).await;
            sent.push(message);
        }
        drop(inner);
        self.bump();
        Ok(sent)
    }

    /// Whether `from` may send `text` to each of `recipients` now: `Err` says why not.
    fn may_send(
        &self,
        state: &TeamState,
        from: &str,
        recipients: &[String],
        text: &str,
    ) -> Result<(), TeamError> {
        if text.len() > self.limits.max_message_bytes {
            return Err(TeamError::TooLong {
                size: text.len(),
                limit: self.limits.max_message_bytes,
            });
        }
        for r in recipients {
            let Some(member) = state.members.get(r) else {
                return Err(TeamError::UnknownMember {
                    name: r.clone(),
                    known: state.names(),
                });
            };
            if r == from {
                return Err(TeamError::ToSelf);
            }
            if member.closed {
                return Err(TeamError::Closed { name: r.clone() });
            }
            if state.unread(r) >= self.limits.max_unread {
                return Err(TeamError::InboxFull {
                    name: r.clone(),
                    limit: self.limits.max_unread,
                });
            }
        }
        if state.sent_by_members() + recipients.len() > self.limits.max_messages {
            return Err(TeamError::Cap(self.limits.max_messages));
        }
        Ok(())
    }

    /// Journals and queues one message.
    pub(super) async fn post(&self, inner: &mut Inner, by: &AgentPath, message: Envelope) {
        self.emit(message_event(by, &message));
        self.change(inner, by, TeamChange::Sent { message }).await;
    }

    /// Takes the messages waiting for `name`, marking them given; the caller journals them
    /// as delivered before anything acts on them.
    pub(super) fn take(&self, inner: &mut Inner, name: &str, path: &AgentPath) -> Vec<Envelope> {
        let waiting: Vec<Envelope> = inner
            .state
            .inboxes
            .get(name)
            .map(|q| q.iter().map(|&i| inner.state.messages[i].clone()).collect())
            .unwrap_or_default();
        inner.state.delivered(name, &waiting);
        inner
            .unseen
            .entry(name.to_owned())
            .or_default()
            .extend(waiting.iter().map(|m| (m.from.clone(), m.seq)));
        for m in &waiting {
            self.emit(Event::Delivered {
                agent: path.clone(),
                from: m.from.clone(),
                seq: m.seq,
            });
        }
        spans::deliver(name, &waiting);
        waiting
    }

    /// Closes the member `name` on behalf of `by` (its starter, or the run ending), and
    /// every member it started; a member at work is cancelled.
    pub async fn close(&self, by: Option<&str>, name: &str) -> Result<Vec<String>, TeamError> {
        let mut inner = self.inner.lock().await;
        let Some(member) = inner.state.members.get(name) else {
            return Err(TeamError::UnknownMember {
                name: name.to_owned(),
                known: inner.state.names(),
            });
        };
        if let (Some(by), Some(starter)) = (by, &member.starter) {
            if by != starter {
                return Err(TeamError::NotStarter {
                    name: name.to_owned(),
                    starter: starter.clone(),
                });
            }
        }
        let mut closed = Vec::new();
        let mut queue = vec![name.to_owned()];
        while let Some(n) = queue.pop() {
            let Some(m) = inner.state.members.get(&n).cloned() else {
                continue;
            };
            queue.extend(
                inner
                    .state
                    .members
                    .values()
                    .filter(|c| c.starter.as_deref() == Some(&n))
                    .map(|c| c.name.clone()),
            );
            if m.closed || m.starter.is_none() {
                continue;
            }
            let change = closing(&mut inner, &n);
            self.change(&mut inner, &m.path, change).await;
            // One at work is cancelled; one waiting sees it was closed and ends.
            if let Some(live) = inner.live.get(&n).filter(|_| inner.running.contains(&n)) {
                live.cancel.cancel();
            }
            closed.push(n);
        }
        drop(inner);
        self.bump();
        Ok(closed)
    }

    /// The run is over: closes every member still open and waits for their agents to end.
    pub(crate) async fn finish(&self) {
        let names: Vec<String> = {
            let inner = self.inner.lock().await;
            inner
                .state
                .members
                .values()
                .filter(|m| !m.closed && m.starter.is_some())
                .map(|m| m.name.clone())
                .collect()
        };
        for name in names {
            let _ = self.close(None, &name).await;
        }
        let handles: Vec<_> = lock(&self.handles).drain(..).collect();
        for handle in handles {
            let _ = handle.await;
        }
    }

    /// Creates a task of the shared list.
    pub async fn create_task(
        &self,
        by: &AgentPath,
        creator: &str,
        subject: &str,
        description: &str,
        blocked_by: Vec<u32>,
        key: &str,
    ) -> Result<SharedTask, TeamError> {
        let mut inner = self.inner.lock().await;
        if let Some(made) = inner.state.created_under(creator, key) {
            return Ok(made.clone());
        }
        if let Some(&id) = blocked_by
            .iter()
            .find(|id| !inner.state.tasks.contains_key(id))
        {
            return Err(TeamError::UnknownTask {
                id,
                known: task_ids(&inner.state),
            });
        }
        let id = next_id(&inner.state);
        let task = SharedTask {
            id,
            subject: subject.to_owned(),
            description: description.to_owned(),
            blocked_by,
            status: TaskStatus::Pending,
            owner: None,
            created_by: creator.to_owned(),
            key: key.to_owned(),
        };
        self.change(
            &mut inner,
            by,
            TeamChange::TaskCreated { task: task.clone() },
        )
        .await;
        self.task_event(by, &task);
        Ok(task)
    }

    /// The id of the task `creator`'s call under `key` makes: the one it made before (a
    /// resumed run repeating the call), else the next free one. (Another member creating a
    /// task meanwhile may take that one first; the task then gets the next.)
    pub async fn task_id_for(&self, creator: &str, key: &str) -> u32 {
        let inner = self.inner.lock().await;
        inner
            .state
            .created_under(creator, key)
            .map_or_else(|| next_id(&inner.state), |t| t.id)
    }

    /// Whether [`Team::update_task`] would accept the change now (a `TaskCompleted` hook
    /// runs only for a change that would be made).
    pub async fn may_update_task(
        &self,
        who: &str,
        id: u32,
        status: Option<TaskStatus>,
        owner: Option<String>,
    ) -> Result<(), TeamError> {
        let inner = self.inner.lock().await;
        check_update(&inner.state, who, id, status, owner).map(|_| ())
    }

    /// Changes a task's status or owner for the member `who`. Claiming is atomic: a task
    /// owned by another member cannot be taken, and a blocked one cannot be started.
    pub async fn update_task(
        &self,
        by: &AgentPath,
        who: &str,
        id: u32,
        status: Option<TaskStatus>,
        owner: Option<String>,
    ) -> Result<SharedTask, TeamError> {
        let mut inner = self.inner.lock().await;
        let (status, owner) = check_update(&inner.state, who, id, status, owner)?;
        self.change(
            &mut inner,
            by,
            TeamChange::TaskUpdated { id, status, owner },
        )
        .await;
        let task = inner.state.tasks.get(&id).cloned();
        drop(inner);
        self.bump();
        let task = task.ok_or_else(|| TeamError::UnknownTask {
            id,
            known: String::new(),
        })?;
        self.task_event(by, &task);
        Ok(task)
    }

    fn task_event(&self, by: &AgentPath, task: &SharedTask) {
        self.emit(Event::TaskChanged {
            agent: by.clone(),
            id: task.id,
            subject: task.subject.clone(),
            status: task.status,
            owner: task.owner.clone(),
        });
    }
}

/// The change that closes the member `name`, with the messages it was given and never
/// read (taken from its unread list, which ends with it).
fn closing(inner: &mut Inner, name: &str) -> TeamChange {
    TeamChange::Closed {
        name: name.to_owned(),
        unseen: inner.unseen.remove(name).unwrap_or_default(),
    }
}

/// The event that tells of `message`, sent by the agent at `by`.
fn message_event(by: &AgentPath, message: &Envelope) -> Event {
    Event::Message {
        agent: by.clone(),
        from: message.from.clone(),
        to: message.to.clone(),
        seq: message.seq,
        text: message.text.clone(),
        notice: message.notice,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::{Member, Team, TeamError, TeamLimits};
    use std::sync::Arc;

    #[tokio::test]
    async fn the_check_for_a_name_takes_it_and_counts_it_against_the_cap() {
        let team = Team::new(
            TeamLimits {
                max_members: 2,
                ..TeamLimits::default()
            },
            None,
            Arc::new(|_| {}),
        );
        team.reserve("x").await.unwrap();
        // A second call for the same name, before the first joined: refused.
        assert!(matches!(
            team.reserve("x").await,
            Err(TeamError::NameTaken { name }) if name == "x"
        ));
        team.reserve("y").await.unwrap();
        // Two on their way in fill a cap of two.
        assert!(matches!(
            team.reserve("z").await,
            Err(TeamError::TooManyMembers(2))
        ));
        let member = Member::new("x", &"main/w#1".into(), "w", Some("main".into()));
        team.join(&"main".into(), member).await;
        assert!(matches!(
            team.reserve("x").await,
            Err(TeamError::NameTaken { .. })
        ));
        assert_eq!(team.snapshot().await.members.len(), 1);
    }
}
