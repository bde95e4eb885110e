//! A team as the journal keeps it: its members, the messages between them, and the shared
//! task list's entries, each change to them one [`TeamChange`].

use crate::vocab::agent_path::AgentPath;
use crate::vocab::limits::AgentLimits;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One member of a run's team: the primary agent, or a subagent started with a name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Member {
    /// The name others address it by.
    pub name: String,
    /// Its agent path (`main/code#1`).
    pub path: AgentPath,
    /// Its agent type.
    pub agent_type: String,
    /// The name of the member that started it (`None` for the primary agent).
    pub starter: Option<String>,
    /// What it was last asked, in a few words.
    pub last_asked: String,
    /// Whether it was closed (it takes no more messages).
    pub closed: bool,
    /// The model id it talks to, as resolved when it joined (a type that says `inherit`
    /// takes its starter's), so a resumed run asks the same model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The schema its answers must match, when the call that started it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
    /// The limits the call that started it gave, so a resumed run holds it to them.
    #[serde(default, skip_serializing_if = "AgentLimits::is_unlimited")]
    pub limits: AgentLimits,
}

impl Member {
    /// A member named `name` at agent path `path`, of type `agent_type`, started by
    /// `starter` (`None` for the primary agent).
    pub fn new(name: &str, path: &AgentPath, agent_type: &str, starter: Option<String>) -> Self {
        Self {
            name: name.to_owned(),
            path: path.clone(),
            agent_type: agent_type.to_owned(),
            starter,
            last_asked: String::new(),
            closed: false,
            model: None,
            answer: None,
            limits: AgentLimits::default(),
        }
    }
}

/// One message between members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Envelope {
    /// The sender's name.
    pub from: String,
    /// The recipient's name.
    pub to: String,
    /// Its number among the messages from `from` to `to`, from 1.
    pub seq: u64,
    /// What it says (left out where a `Delivered` step journals it: see
    /// [`Step::Delivered`](crate::vocab::step::Step::Delivered)).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Whether cadre sent it on the sender's behalf (a member went idle), not the sender.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notice: bool,
    /// What makes a send happen once: the sender's tool call id, or the idle turn a notice
    /// reports. A resumed run that sends it again finds it sent.
    pub key: String,
    /// The W3C `traceparent` of the sender's `SendMessage` call, when it was traced: its
    /// delivery links back to it. Kept in memory only, never journaled, so a resumed run's
    /// messages (and old journals) have none.
    #[serde(skip)]
    pub trace: Option<String>,
}

impl Envelope {
    /// The text the recipient's conversation carries for it.
    pub fn render(&self) -> String {
        if self.notice {
            format!(
                "<team-notice from=\"{}\">\n{}\n</team-notice>",
                self.from, self.text
            )
        } else {
            format!(
                "<team-message from=\"{}\" seq=\"{}\">\n{}\n</team-message>",
                self.from, self.seq, self.text
            )
        }
    }
}

/// Where a shared task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Not started.
    Pending,
    /// Its owner is working on it.
    InProgress,
    /// Done.
    Completed,
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        })
    }
}

/// One task of the run's shared list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SharedTask {
    /// Its id (`1`, `2`, …).
    pub id: u32,
    /// A one-line subject.
    pub subject: String,
    /// What is to be done.
    pub description: String,
    /// The tasks that must be completed before this one can be started.
    pub blocked_by: Vec<u32>,
    /// Where it stands.
    pub status: TaskStatus,
    /// The member that owns it.
    pub owner: Option<String>,
    /// Who created it.
    pub created_by: String,
    /// The call that created it, so a resumed run re-running that call finds it made.
    #[serde(default)]
    pub key: String,
}

/// One change to a team, journaled before it takes effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TeamChange {
    /// A member joined.
    Joined {
        /// It.
        member: Member,
    },
    /// A message was sent (and queued for its recipient).
    Sent {
        /// It.
        message: Envelope,
    },
    /// A member was asked something new (a message woke it).
    Asked {
        /// Its name.
        name: String,
        /// What, in a few words.
        what: String,
    },
    /// A member was closed.
    Closed {
        /// Its name.
        name: String,
        /// Messages it was given that no response of its model followed (sender, number):
        /// it never read them, so they go back to their senders with what waits for it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unseen: Vec<(String, u64)>,
    },
    /// A task was added to the list.
    TaskCreated {
        /// It.
        task: SharedTask,
    },
    /// A task's status or owner changed.
    TaskUpdated {
        /// Its id.
        id: u32,
        /// Its new status.
        status: TaskStatus,
        /// Its new owner.
        owner: Option<String>,
    },
}
