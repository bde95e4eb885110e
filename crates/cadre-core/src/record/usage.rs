//! Token use and outcomes rolled up per agent, per agent type, and for the whole run.

use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::{Outcome, StopKind};
use cadre_model::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What one agent did, recorded when it finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentRecord {
    /// Its path (`main/explore#2`).
    pub path: AgentPath,
    /// Its agent type.
    pub agent_type: String,
    /// What it was asked to do, in a few words.
    pub description: String,
    /// The model it talked to.
    pub model: String,
    /// Model requests made.
    pub turns: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tokens it used itself (not its subagents').
    pub usage: Usage,
    /// How long it ran, in milliseconds.
    pub elapsed_ms: u64,
    /// What became of its work (always `stop`'s outcome).
    #[serde(default = "unknown_outcome")]
    pub outcome: Outcome,
    /// Why it stopped, as the raw reason.
    pub stop: StopKind,
    /// Its whole final answer, kept in the run folder (this path is relative to it) because
    /// it was longer than its parent's tool result may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_file: Option<String>,
    /// The worker that ran its last step, when it ran on an engine's workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Its name in the run's team, when it was a member started with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// What a record from before outcomes were written says until [`UsageReport::new`] reads
/// its stop.
fn unknown_outcome() -> Outcome {
    Outcome::Failed
}

/// Sums of several agents' records.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// How many agents.
    pub agents: u32,
    /// Model requests made.
    pub turns: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tokens used.
    pub usage: Usage,
}

impl Totals {
    fn add(&mut self, r: &AgentRecord) {
        self.agents += 1;
        self.turns += r.turns;
        self.tool_calls += r.tool_calls;
        self.usage.add(&r.usage);
    }
}

/// Usage of a whole run: every agent, each type, and the total.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct UsageReport {
    /// One record per agent, in the order they started.
    pub agents: Vec<AgentRecord>,
    /// Totals per agent type.
    pub by_type: BTreeMap<String, Totals>,
    /// Totals over every agent.
    pub total: Totals,
}

impl UsageReport {
    /// Rolls up `agents`, listed in tree order (`main`, then `main/explore#1`,
    /// `main/explore#2`, … with numbers compared as numbers).
    pub fn new(mut agents: Vec<AgentRecord>) -> Self {
        agents.sort_by(|a, b| a.path.cmp(&b.path));
        // The outcome follows from the stop, whoever made the record.
        for a in &mut agents {
            a.outcome = a.stop.outcome();
        }
        let mut by_type: BTreeMap<String, Totals> = BTreeMap::new();
        let mut total = Totals::default();
        for r in &agents {
            by_type.entry(r.agent_type.clone()).or_default().add(r);
            total.add(r);
        }
        Self {
            agents,
            by_type,
            total,
        }
    }
}
