//! The seam where a run hands its subagents to somewhere else: a durable engine runs each
//! one as a call to another worker instead of in this process.

use crate::definitions::spec::AgentSpec;
use crate::record::usage::AgentRecord;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Runs subagents for the run's agents (given with
/// [`OrchestratorBuilder::delegate`](crate::OrchestratorBuilder::delegate)).
/// The orchestrator still checks the type, the depth and the parent's fan-out first, and
/// names the subagent.
#[async_trait]
pub trait Delegate: Send + Sync {
    /// Runs the subagent `call` to its end and returns what it brought back.
    async fn run(&self, call: DelegatedCall) -> Delegated;
}

/// One subagent to run elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegatedCall {
    /// Its path in the tree of agents (`main/explore#2`).
    pub path: AgentPath,
    /// Its depth (1 for a subagent of the primary agent).
    pub depth: u32,
    /// Its type.
    pub spec: AgentSpec,
    /// The model id it talks to (aliases resolved, `inherit` taken from its parent).
    pub model: String,
    /// What it is asked to do, in a few words.
    pub description: String,
    /// Its first user message.
    pub prompt: String,
    /// The W3C `traceparent` of the caller's span (its `Task` call's): the subagent's
    /// `invoke_agent` span is its child, wherever it runs, so the run stays one trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The JSON Schema its answer must be valid against (a workflow item's typed answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
}

/// What a subagent run elsewhere brought back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delegated {
    /// Why it stopped.
    pub stop: StopKind,
    /// Its final text.
    pub text: String,
    /// What became of its worktree (`\n\n[Its changes are committed on branch …]`), or empty.
    #[serde(default)]
    pub report: String,
    /// The records of it and of every agent below it, for the run's usage.
    #[serde(default)]
    pub records: Vec<AgentRecord>,
}

impl Delegated {
    /// A subagent that never ran to its end: it stopped with `stop`, with nothing to show.
    pub fn stopped(stop: StopKind) -> Self {
        Self {
            stop,
            text: String::new(),
            report: String::new(),
            records: Vec::new(),
        }
    }
}
