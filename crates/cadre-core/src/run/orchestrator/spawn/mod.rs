//! Subagent spawning: a plain subagent for a `Task` call ([`plain`]), a named team member
//! that stays after it answers ([`member`]), and a fork of its parent's conversation
//! ([`fork`]). Here: what they share — the checks before one starts, its path, and what its
//! parent's call gets back.

mod fork;
mod member;
mod plain;

use super::handle::AgentHandle;
use super::run_context::RunContext;
use super::Orchestrator;
use crate::definitions::spec::AgentSpec;
use crate::run::task_result::SubagentError;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;

impl Orchestrator {
    /// The subagent type `name`, if a `Task` call may start it.
    fn subagent_spec(&self, name: &str) -> Result<&AgentSpec, SubagentError> {
        let Some(spec) = self.registry.get(name).filter(|s| s.mode.is_subagent()) else {
            return Err(self.unknown_type(name));
        };
        if let Some(why) = spec.unusable() {
            return Err(SubagentError::Unusable(why));
        }
        Ok(spec)
    }

    /// The error for a subagent type `name` this run does not have.
    fn unknown_type(&self, name: &str) -> SubagentError {
        let known: Vec<&str> = self.registry.subagents().map(|s| s.name.as_str()).collect();
        SubagentError::UnknownType {
            name: name.to_owned(),
            known: known.join(", "),
        }
    }

    /// The depth of a subagent of `parent`, if delegation may go that deep.
    fn depth_below(&self, parent: &AgentHandle) -> Result<u32, SubagentError> {
        let depth = parent.depth + 1;
        if depth > self.config.limits.max_depth {
            return Err(SubagentError::DepthLimit {
                limit: self.config.limits.max_depth,
                parent: parent.path.clone(),
            });
        }
        Ok(depth)
    }

    /// The path of a new subagent of type `agent_type` that `parent`'s call `call` starts,
    /// journaled, so a resumed run finds it by the call.
    pub(super) async fn spawned(
        &self,
        run: &RunContext,
        parent: &AgentHandle,
        agent_type: &str,
        call: &str,
    ) -> AgentPath {
        let n = run.lineage.next(agent_type);
        let path = parent.path.child(agent_type, n);
        run.journal(Step::Spawned {
            agent: parent.path.clone(),
            call: call.to_owned(),
            child: path.clone(),
        })
        .await;
        path
    }
}

/// A subagent's result with what became of its worktree added.
fn with_report(
    result: Result<String, SubagentError>,
    report: String,
) -> Result<String, SubagentError> {
    match result {
        Ok(text) => Ok(text + &report),
        Err(SubagentError::Stopped {
            path, stop, last, ..
        }) => Err(SubagentError::Stopped {
            path,
            stop,
            last,
            report,
        }),
        Err(other) => Err(other),
    }
}

/// What a parent's `Task` call gets from a subagent that stopped with `stop`.
pub(super) fn subagent_result(
    path: &AgentPath,
    stop: StopKind,
    text: String,
) -> Result<String, SubagentError> {
    match stop {
        StopKind::Done if text.trim().is_empty() => {
            Ok(format!("({path} finished without a final message)"))
        }
        StopKind::Done => Ok(text),
        stop => {
            let last = text.trim();
            Err(SubagentError::Stopped {
                path: path.clone(),
                stop,
                last: if last.is_empty() { "(none)" } else { last }.to_owned(),
                report: String::new(),
            })
        }
    }
}
