//! A team's state as its journaled changes leave it: the members, every message sent and
//! which were delivered, and the shared task list. The live team applies each change here
//! after journaling it; a resumed run folds the journal's changes through the same
//! [`TeamState::apply`], so the two cannot disagree.

use crate::vocab::agent_path::AgentPath;
use crate::vocab::step::Step;
use crate::vocab::team::{Envelope, Member, SharedTask, TeamChange};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// How much of a returned message its sender is shown again.
const RETURNED_CHARS: usize = 200;

/// A team as its changes leave it.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TeamState {
    /// The members, by name.
    pub members: BTreeMap<String, Member>,
    /// Every message sent, in the order sent.
    pub messages: Vec<Envelope>,
    /// The messages each member has not been given yet (indexes into `messages`), oldest
    /// first.
    pub inboxes: HashMap<String, VecDeque<usize>>,
    /// The shared task list, by id.
    pub tasks: BTreeMap<u32, SharedTask>,
    /// The last sequence number per (sender, recipient).
    seqs: HashMap<(String, String), u64>,
    /// The message each (sender, key) sent, so a send is never made twice.
    sent_keys: HashMap<(String, String), usize>,
    /// Messages delivered, as (recipient, sender, seq).
    delivered: HashSet<(String, String, u64)>,
}

impl TeamState {
    /// Folds one change into the state: the team's rules, written once.
    pub fn apply(&mut self, change: TeamChange) {
        match change {
            TeamChange::Joined { member } => {
                self.members.insert(member.name.clone(), member);
            }
            TeamChange::Sent { message } => {
                let pair = (message.from.clone(), message.to.clone());
                let seq = self.seqs.entry(pair).or_insert(0);
                *seq = (*seq).max(message.seq);
                let i = self.messages.len();
                self.sent_keys
                    .insert((message.from.clone(), message.key.clone()), i);
                let undelivered = !self.delivered.contains(&(
                    message.to.clone(),
                    message.from.clone(),
                    message.seq,
                ));
                if undelivered {
                    self.inboxes
                        .entry(message.to.clone())
                        .or_default()
                        .push_back(i);
                }
                self.messages.push(message);
            }
            TeamChange::Asked { name, what } => {
                if let Some(m) = self.members.get_mut(&name) {
                    m.last_asked = what;
                }
            }
            TeamChange::Closed { name, unseen } => {
                if let Some(m) = self.members.get_mut(&name) {
                    m.closed = true;
                }
                self.return_unread(&name, &unseen);
            }
            TeamChange::TaskCreated { task } => {
                self.tasks.insert(task.id, task);
            }
            TeamChange::TaskUpdated { id, status, owner } => {
                if let Some(t) = self.tasks.get_mut(&id) {
                    t.status = status;
                    t.owner = owner;
                }
            }
        }
    }

    /// Sends what waits for the closed member `name`, and the messages it was given but
    /// never read (`unseen`), back to their senders, as notices, so no message stays where
    /// nobody reads it. Part of the fold, so a resumed run
    /// returns the same messages under the same numbers. Notices are not returned (they
    /// asked for nothing), nor is a message whose sender is closed too.
    fn return_unread(&mut self, name: &str, unseen: &[(String, u64)]) {
        let mut waiting: Vec<usize> = self.inboxes.remove(name).map(Vec::from).unwrap_or_default();
        // Given, but its model never answered after reading them.
        waiting.extend(self.messages.iter().enumerate().filter_map(|(i, m)| {
            let given = m.to == name && unseen.iter().any(|(f, s)| *f == m.from && *s == m.seq);
            given.then_some(i)
        }));
        waiting.sort_unstable();
        waiting.dedup();
        for i in waiting {
            let m = self.messages[i].clone();
            let sender_open = self.members.get(&m.from).is_some_and(|s| !s.closed);
            if m.notice || !sender_open || m.from == name {
                continue;
            }
            let text: String = m.text.chars().take(RETURNED_CHARS).collect();
            let cut = if text.len() < m.text.len() { "…" } else { "" };
            let returned = Envelope {
                seq: self.next_seq(name, &m.from),
                from: name.to_owned(),
                to: m.from.clone(),
                text: format!(
                    "{name} ended before reading your message #{}: {text}{cut}",
                    m.seq
                ),
                notice: true,
                key: format!("returned/{}#{}", m.from, m.seq),
                trace: None,
            };
            self.apply(TeamChange::Sent { message: returned });
        }
    }

    /// Marks messages given to `to` (its journal says so), taking them out of its inbox.
    pub fn delivered<'a>(&mut self, to: &str, given: impl IntoIterator<Item = &'a Envelope>) {
        let mut any = false;
        for m in given {
            any |= self
                .delivered
                .insert((to.to_owned(), m.from.clone(), m.seq));
        }
        if !any {
            return;
        }
        let (messages, delivered) = (&self.messages, &self.delivered);
        if let Some(inbox) = self.inboxes.get_mut(to) {
            inbox.retain(|&i| {
                let m = &messages[i];
                !delivered.contains(&(m.to.clone(), m.from.clone(), m.seq))
            });
        }
    }

    /// Whether the message `from` sent to `to` with number `seq` was delivered.
    pub fn was_delivered(&self, to: &str, from: &str, seq: u64) -> bool {
        self.delivered
            .contains(&(to.to_owned(), from.to_owned(), seq))
    }

    /// The next sequence number from `from` to `to`.
    pub fn next_seq(&self, from: &str, to: &str) -> u64 {
        self.seqs
            .get(&(from.to_owned(), to.to_owned()))
            .copied()
            .unwrap_or(0)
            + 1
    }

    /// The message `from` sent under `key`, if it did.
    pub fn sent_under(&self, from: &str, key: &str) -> Option<&Envelope> {
        self.sent_keys
            .get(&(from.to_owned(), key.to_owned()))
            .map(|&i| &self.messages[i])
    }

    /// How many messages `name` has not been given yet.
    pub fn unread(&self, name: &str) -> usize {
        self.inboxes.get(name).map_or(0, VecDeque::len)
    }

    /// Whether some message waits for a member that can still read it (a closed member's
    /// inbox never counts: nobody will read it).
    pub fn any_undelivered(&self) -> bool {
        self.inboxes
            .iter()
            .any(|(name, q)| !q.is_empty() && self.members.get(name).is_some_and(|m| !m.closed))
    }

    /// Rebuilds the team from a run's journaled steps (any order of agents; the team's own
    /// steps in the order journaled): the one fold of a journal into a team, used by a
    /// resumed run and by whatever shows a run. The messages each agent's `Delivered` steps
    /// say it was given never enter its inbox. `None` when the steps hold no team change.
    pub fn from_steps(steps: impl IntoIterator<Item = Step>) -> Option<Self> {
        let mut state = Self::default();
        let mut changes = Vec::new();
        for step in steps {
            match step {
                Step::Team { change, .. } => changes.push(change),
                // Deliveries are folded before the sends: a delivered message then never
                // enters its recipient's inbox, wherever its step stands in the journal.
                Step::Delivered { messages, .. } => {
                    for m in &messages {
                        state.delivered(&m.to, std::iter::once(m));
                    }
                }
                _ => {}
            }
        }
        if changes.is_empty() {
            return None;
        }
        for change in changes {
            state.apply(change);
        }
        Some(state)
    }

    /// Messages members sent themselves (notices excluded): what the run's cap counts.
    pub fn sent_by_members(&self) -> usize {
        self.messages.iter().filter(|m| !m.notice).count()
    }

    /// The task `creator` made under `key`, if it did.
    pub fn created_under(&self, creator: &str, key: &str) -> Option<&SharedTask> {
        self.tasks
            .values()
            .find(|t| t.created_by == creator && t.key == key && !key.is_empty())
    }

    /// The member at agent path `path`.
    pub fn member_at(&self, path: &AgentPath) -> Option<&Member> {
        self.members.values().find(|m| m.path == *path)
    }

    /// The names of the members, for messages that list them.
    pub fn names(&self) -> String {
        self.members
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(from: &str, to: &str, seq: u64, key: &str) -> TeamChange {
        TeamChange::Sent {
            message: Envelope {
                from: from.into(),
                to: to.into(),
                seq,
                text: format!("{from}->{to} #{seq}"),
                notice: false,
                key: key.into(),
                trace: None,
            },
        }
    }

    #[test]
    fn messages_queue_per_recipient_and_leave_the_queue_once_delivered() {
        let mut s = TeamState::default();
        s.apply(sent("a", "b", 1, "c1"));
        s.apply(sent("a", "b", 2, "c2"));
        s.apply(sent("c", "b", 1, "c3"));
        assert_eq!(s.unread("b"), 3);
        assert_eq!(s.next_seq("a", "b"), 3);
        assert_eq!(s.next_seq("b", "a"), 1);
        let first = s.messages[0].clone();
        s.delivered("b", [&first]);
        assert_eq!(s.unread("b"), 2);
        assert!(s.was_delivered("b", "a", 1) && !s.was_delivered("b", "a", 2));
        assert_eq!(s.sent_under("a", "c2").map(|m| m.seq), Some(2));
        // A resumed run folds the deliveries first, then the sends: the delivered one
        // does not come back.
        let mut r = TeamState::default();
        r.delivered("b", [&first]);
        r.apply(sent("a", "b", 1, "c1"));
        r.apply(sent("a", "b", 2, "c2"));
        assert_eq!(r.unread("b"), 1);
    }

    fn joined(name: &str) -> TeamChange {
        TeamChange::Joined {
            member: Member::new(
                name,
                &format!("main/w#{name}").into(),
                "w",
                Some("main".into()),
            ),
        }
    }

    #[test]
    fn a_closed_member_s_unread_messages_go_back_to_their_senders() {
        let mut s = TeamState::default();
        for name in ["a", "b", "c"] {
            s.apply(joined(name));
        }
        s.apply(sent("a", "b", 1, "k1"));
        s.apply(sent("c", "b", 1, "k2"));
        s.apply(TeamChange::Closed {
            name: "c".into(),
            unseen: vec![],
        });
        assert!(s.any_undelivered());
        s.apply(TeamChange::Closed {
            name: "b".into(),
            unseen: vec![],
        });
        // b's inbox is empty; a is told, c (closed) is not.
        assert_eq!(s.unread("b"), 0);
        assert_eq!(s.unread("a"), 1);
        assert_eq!(s.unread("c"), 0);
        let back = s.messages.last().unwrap();
        assert!(back.notice && back.from == "b" && back.to == "a");
        assert_eq!(back.key, "returned/a#1");
        assert!(back
            .text
            .starts_with("b ended before reading your message #1"));
        // What waits for a closed member never counts as mail in flight.
        s.apply(TeamChange::Closed {
            name: "a".into(),
            unseen: vec![],
        });
        assert!(!s.any_undelivered());
    }

    #[test]
    fn a_message_given_but_never_read_goes_back_when_its_reader_is_closed() {
        let mut s = TeamState::default();
        for name in ["a", "b"] {
            s.apply(joined(name));
        }
        s.apply(sent("a", "b", 1, "k1"));
        s.apply(sent("a", "b", 2, "k2"));
        let first = s.messages[0].clone();
        s.delivered("b", [&first]);
        // b was given #1 and closed before its model answered; #2 still waited.
        s.apply(TeamChange::Closed {
            name: "b".into(),
            unseen: vec![("a".into(), 1)],
        });
        let back: Vec<&str> = s
            .messages
            .iter()
            .filter(|m| m.notice)
            .map(|m| m.key.as_str())
            .collect();
        assert_eq!(back, ["returned/a#1", "returned/a#2"]);
    }
}
