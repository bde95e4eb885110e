//! The vocabulary of a run: the serialized things the log keeps and the loop speaks in
//! (how agents stop, hook decisions, team changes, steps, events, agent paths). It lies
//! beneath both `record` (which writes and reads them) and `run` (which makes them), and
//! imports neither, so the log does not depend on the mechanism that writes it.

pub mod agent_path;
pub mod event;
pub mod hooks;
pub mod outcome;
pub mod step;
pub mod team;
