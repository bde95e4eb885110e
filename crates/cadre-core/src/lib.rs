//! Thinks in loops.
//!
//! The agent loop ([`Agent::run`]): send the history and tools to a model, run the tools it
//! asks for, append the results, repeat until it stops. Around it: the tool set an agent may
//! use ([`ToolSet`]), the token [`Budget`] shared by a run, the structured [`Event`]s every
//! agent emits, and how a run ended ([`AgentOutcome`]). Nothing here knows about terminals.

pub mod agent;
pub mod budget;
pub mod events;
pub mod outcome;
pub mod prompt;
pub mod registry;
pub mod spec;
pub mod toolset;

pub use agent::{Agent, AgentConfig};
pub use budget::Budget;
pub use events::{no_events, Event, EventHandler};
pub use outcome::{AgentOutcome, StopKind};
pub use registry::{tools_for, Registry};
pub use spec::{AgentSpec, Mode, Problem};
pub use toolset::ToolSet;
