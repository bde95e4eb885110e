//! An item's agent call, and its content key: cadre-core computes the key
//! (`cadre_core::workflow::CallKey::of`), so a library user running items through core gets
//! the same keys as `cadre workflow run`.

use crate::limits::Limits;
pub use cadre_core::workflow::CallKey;
use serde_json::Value;

/// One agent call of a workflow, as it will be made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallSpec<'a> {
    /// The agent type.
    pub agent: &'a str,
    /// The rendered prompt.
    pub prompt: &'a str,
    /// The answer's JSON Schema, if the answer is typed.
    pub output_schema: Option<&'a Value>,
    /// The agent's limits.
    pub limits: &'a Limits,
    /// The model id the call goes to.
    pub model: &'a str,
}

impl CallSpec<'_> {
    /// The call's content key (see [`CallKey::of`]).
    pub fn key(&self) -> CallKey {
        CallKey::of(
            self.agent,
            self.prompt,
            self.output_schema,
            &self.limits.agent_limits(),
            self.model,
        )
    }
}

#[cfg(test)]
mod tests;
