//! A conversation shared between the agent that grows it and the requests that send it.
//!
//! An agent's [`History`] is one shared list of messages: a request takes a count of it
//! ([`Messages`]), not a copy, so a turn copies nothing it does not change. The cache
//! breakpoints a request puts on message blocks are kept beside the messages, as positions,
//! and laid over them only as the request is written out.

use crate::content::{CacheControl, ContentBlock};
use crate::types::Message;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::{Deref, DerefMut, Index};
use std::sync::Arc;

/// An agent's conversation: cloning it takes a count, and changing it copies the messages
/// only while a request (or a fork) still holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History(Arc<Vec<Message>>);

impl History {
    /// The messages, taken out: without a copy when nothing else holds them.
    pub fn into_vec(self) -> Vec<Message> {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl Deref for History {
    type Target = Vec<Message>;

    fn deref(&self) -> &Vec<Message> {
        &self.0
    }
}

impl DerefMut for History {
    /// The messages to change; copied first only if a request or a fork still holds them.
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<Message>> for History {
    fn from(messages: Vec<Message>) -> Self {
        Self(Arc::new(messages))
    }
}

impl PartialEq<Vec<Message>> for History {
    fn eq(&self, other: &Vec<Message>) -> bool {
        *self.0 == *other
    }
}

impl Serialize for History {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(d).map(Self::from)
    }
}

/// The messages a request sends: a shared history from one message on (the first of them
/// possibly cut to its last blocks), and the cache breakpoints laid over their blocks.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    /// The first message sent, when it is only the tail of a message of `history` (from a
    /// `compaction` block on): a copy of those blocks alone.
    head: Option<Message>,
    /// The history the rest is sent from.
    history: History,
    /// The first message of `history` sent whole.
    start: usize,
    /// Where the blocks carry cache breakpoints, as (message, block) positions among the
    /// messages sent; `None` sends the blocks' own.
    marks: Option<Vec<(usize, usize)>>,
}

impl Messages {
    /// Sends `history` from block `block` of message `message` on: the blocks before it,
    /// and the messages before that one, are left out.
    pub fn since(history: &History, message: usize, block: usize) -> Self {
        match history.get(message) {
            Some(first) if block > 0 => Self {
                head: Some(Message::new(
                    first.role,
                    first.content.get(block..).unwrap_or_default().to_vec(),
                )),
                history: history.clone(),
                start: message + 1,
                marks: None,
            },
            _ => Self {
                head: None,
                history: history.clone(),
                start: message.min(history.len()),
                marks: None,
            },
        }
    }

    /// How many messages are sent.
    pub fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.history.len() - self.start
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages sent, in order (as held: without the breakpoints laid over them).
    pub fn iter(&self) -> Iter<'_> {
        self.head.iter().chain(self.history[self.start..].iter())
    }

    /// The message sent at `i`.
    pub fn get(&self, i: usize) -> Option<&Message> {
        match (&self.head, i) {
            (Some(head), 0) => Some(head),
            (Some(_), i) => self.history.get(self.start + i - 1),
            (None, i) => self.history.get(self.start + i),
        }
    }

    /// The first message sent.
    pub fn first(&self) -> Option<&Message> {
        self.get(0)
    }

    /// The last message sent.
    pub fn last(&self) -> Option<&Message> {
        self.iter().next_back()
    }

    /// The messages sent as a list of their own, with their breakpoints (a copy).
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter()
            .enumerate()
            .map(|(i, m)| self.marked(i, m).into_owned())
            .collect()
    }

    /// The messages to change in place (a test, or a caller building a request by hand):
    /// copied into a list of their own first unless this request alone holds them.
    pub fn make_mut(&mut self) -> &mut Vec<Message> {
        if self.head.is_some() || self.start > 0 {
            let own: Vec<Message> = self.iter().cloned().collect();
            *self = Self {
                marks: self.marks.take(),
                ..Self::from(own)
            };
        }
        &mut self.history
    }

    /// Clears every breakpoint on the blocks sent, theirs and laid over alike.
    pub fn clear_breakpoints(&mut self) {
        self.marks = Some(Vec::new());
    }

    /// Puts a breakpoint on block `block` of message `message`, or the nearest block before
    /// it that can carry one; says whether it did.
    pub fn add_breakpoint(&mut self, message: usize, block: usize) -> bool {
        let Some(m) = self.get(message) else {
            return false;
        };
        let end = (block + 1).min(m.content.len());
        let Some(at) = m.content[..end].iter().rposition(ContentBlock::can_cache) else {
            return false;
        };
        let marks = self.marks.get_or_insert_with(|| {
            self.head
                .iter()
                .chain(self.history[self.start..].iter())
                .enumerate()
                .flat_map(|(i, m)| {
                    m.content
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| b.cache_control().is_some())
                        .map(move |(j, _)| (i, j))
                })
                .collect()
        });
        if !marks.contains(&(message, at)) {
            marks.push((message, at));
        }
        true
    }

    /// How many blocks sent carry a breakpoint.
    pub fn breakpoints(&self) -> usize {
        match &self.marks {
            Some(marks) => marks.len(),
            None => self
                .iter()
                .flat_map(|m| &m.content)
                .filter(|b| b.cache_control().is_some())
                .count(),
        }
    }

    /// Message `m`, the `i`th sent, with the breakpoints laid over it: itself when they
    /// change nothing, else a copy of it with its blocks' breakpoints set.
    fn marked<'a>(&self, i: usize, m: &'a Message) -> std::borrow::Cow<'a, Message> {
        let Some(marks) = &self.marks else {
            return std::borrow::Cow::Borrowed(m);
        };
        let wanted = |j: usize| marks.contains(&(i, j));
        let as_wanted = m
            .content
            .iter()
            .enumerate()
            .all(|(j, b)| b.cache_control().is_some() == wanted(j));
        if as_wanted {
            return std::borrow::Cow::Borrowed(m);
        }
        let mut own = m.clone();
        for (j, b) in own.content.iter_mut().enumerate() {
            b.set_cache_control(wanted(j).then(CacheControl::ephemeral));
        }
        std::borrow::Cow::Owned(own)
    }
}

impl Index<usize> for Messages {
    type Output = Message;

    #[allow(clippy::panic)] // as a slice's index does, out of bounds
    fn index(&self, i: usize) -> &Message {
        match self.get(i) {
            Some(m) => m,
            None => panic!("message {i} out of {}", self.len()),
        }
    }
}

/// The messages a request sends, in order.
pub type Iter<'a> = std::iter::Chain<std::option::Iter<'a, Message>, std::slice::Iter<'a, Message>>;

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl From<History> for Messages {
    fn from(history: History) -> Self {
        Self::since(&history, 0, 0)
    }
}

impl From<Vec<Message>> for Messages {
    fn from(messages: Vec<Message>) -> Self {
        Self::from(History::from(messages))
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .enumerate()
                .zip(other.iter().enumerate())
                .all(|((i, a), (j, b))| self.marked(i, a) == other.marked(j, b))
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for (i, m) in self.iter().enumerate() {
            seq.serialize_element(&*self.marked(i, m))?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(d).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Role;
    use serde_json::json;

    fn history() -> History {
        let compaction: ContentBlock =
            serde_json::from_value(json!({"type": "compaction", "content": "so far"})).unwrap();
        History::from(vec![
            Message::user_text("task"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("before"),
                    compaction,
                    ContentBlock::text("after"),
                ],
            ),
            Message::user_text("more"),
        ])
    }

    #[test]
    fn a_request_shares_the_history_and_sends_it_from_a_block_on() {
        let history = history();
        let sent = Messages::since(&history, 1, 1);
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].content.len(), 2);
        assert_eq!(sent[1], history[2]);
        // The history is shared, not copied: changing it now copies it once.
        assert_eq!(Arc::strong_count(&history.0), 2);
        let wire = serde_json::to_value(&sent).unwrap();
        assert_eq!(wire[0]["content"][0]["type"], "compaction");
        assert_eq!(wire[1]["content"][0]["text"], "more");
        let whole = Messages::from(history.clone());
        assert_eq!(
            serde_json::to_string(&whole).unwrap(),
            serde_json::to_string(&*history).unwrap()
        );
    }

    #[test]
    fn breakpoints_are_laid_over_the_blocks_as_they_are_written() {
        let history = history();
        let mut sent = Messages::from(history.clone());
        assert!(sent.add_breakpoint(1, 5));
        assert!(
            sent.add_breakpoint(1, 5),
            "the same spot twice is one breakpoint"
        );
        assert_eq!(sent.breakpoints(), 1);
        let wire = serde_json::to_value(&sent).unwrap();
        assert_eq!(
            wire[1]["content"][2]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(wire[1]["content"][1].get("cache_control").is_none());
        // The history itself carries none.
        assert!(history[1].content[2].cache_control().is_none());
        sent.clear_breakpoints();
        assert_eq!(
            serde_json::to_string(&sent).unwrap(),
            serde_json::to_string(&*history).unwrap()
        );
    }
}
