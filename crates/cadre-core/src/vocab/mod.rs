//! The vocabulary of a run: the serialized things the log keeps and the loop speaks in
//! (how agents stop, their limits, hook decisions, team changes, steps, events, agent paths). It lies
//! beneath both `record` (which writes and reads them) and `run` (which makes them), and
//! imports neither, so the log does not depend on the mechanism that writes it.
//!
//! Its files are the crate's own; an embedder names their types from here.

pub(crate) mod agent_path;
pub(crate) mod event;
pub(crate) mod hooks;
pub(crate) mod limits;
pub(crate) mod numbers;
pub(crate) mod outcome;
pub(crate) mod step;
pub(crate) mod team;

pub use agent_path::AgentPath;
pub use event::Event;
pub use hooks::{CallPermission, HookDecision, HookEvent, HookOutcome};
pub use limits::AgentLimits;
pub use outcome::{AgentOutcome, Outcome, StopKind};
pub use step::Step;
pub use team::{Envelope, Member, SharedTask, TaskStatus, TeamChange};
