//! The agent type a fork runs as: its parent's, under the name `fork`.

use crate::definitions::spec::AgentSpec;
use crate::run::fork::{ForkBase, FORK_TYPE};
use crate::run::orchestrator::Orchestrator;
use crate::run::task_result::SubagentError;

impl Orchestrator {
    /// The spec of a fork of an agent of type `base.agent_type`: that type as it is (its
    /// tools, limits, effort and schema), named `fork`, working in its parent's workspace
    /// and waited for like any call. `Err` when subagents run on the engine, which cannot
    /// carry a conversation.
    pub(super) fn fork_spec(
        &self,
        base: &ForkBase,
        delegated: bool,
    ) -> Result<AgentSpec, SubagentError> {
        if delegated {
            return Err(SubagentError::ForkOnEngine);
        }
        let spec =
            self.registry
                .get(&base.agent_type)
                .ok_or_else(|| SubagentError::ForkTypeGone {
                    agent_type: base.agent_type.clone(),
                })?;
        Ok(AgentSpec {
            name: FORK_TYPE.to_owned(),
            isolation: None,
            background: false,
            ..spec.clone()
        })
    }
}
