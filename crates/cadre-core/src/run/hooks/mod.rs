//! Hooks at the edges of an agent's steps: the user's own commands, run as Claude Code runs
//! them (`sh -c`, the event's JSON on stdin, in the project root, in a process group of their
//! own, killed at their timeout or on cancel, without the API keys), whose answers may block
//! a call, change its input, keep an agent from stopping, or add context.
//!
//! A run without hooks does none of this: an agent gets no [`AgentHooks`] at all.

mod outcome;

pub use outcome::{CallPermission, HookDecision, HookOutcome, MAX_STOP_BLOCKS};

/// The hooks one agent runs (the run's and its type's), with who it is, as each hook's input
/// tells it. Made by the orchestrator for agents that have any.
pub struct AgentHooks {
    _private: (),
}

impl std::fmt::Debug for AgentHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHooks").finish_non_exhaustive()
    }
}
