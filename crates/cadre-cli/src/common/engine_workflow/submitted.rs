//! What an engine workflow run submitted (`engine-submitted.jsonl`): each attempt's call,
//! number and agent, written before it goes out, so that a later part of the run names no
//! new item's agent after an earlier one (its branch and transcript) and goes on from the
//! attempt the item had reached, whatever lines the input gained or lost meanwhile.

use cadre_core::workflow::Workflow;
use cadre_core::AgentPath;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// One attempt submitted (or about to be).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    /// The item's call id without its attempt (`KEY`, `KEY.1`).
    call: String,
    /// Which attempt (`0` for `KEY`, `n` for `KEY~n`).
    attempt: u32,
    /// The agent it runs as.
    agent: AgentPath,
    /// Its invocation on the engine, once it was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invocation: Option<String>,
}

/// The attempts the run submitted so far, by call, and the next agent number free.
pub(super) struct Submitted {
    by_call: HashMap<String, Line>,
    next: u32,
}

impl Submitted {
    /// The attempts `file` records; `used` are agent paths earlier parts of the run gave
    /// out without recording them here (their numbers are not given again).
    pub(super) fn read(file: &Path, used: impl Iterator<Item = AgentPath>) -> Self {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let mut by_call: HashMap<String, Line> = HashMap::new();
        for line in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        {
            by_call.insert(line.call.clone(), line);
        }
        let next = by_call
            .values()
            .map(|l| l.agent.clone())
            .chain(used)
            .filter_map(|p| p.ordinal())
            .max()
            .map_or(1, |n| n + 1);
        Self { by_call, next }
    }

    /// The agent of the call `call` of type `agent_type`: the one it was submitted as
    /// before, else the next number no agent of the run had.
    pub(super) fn agent_of(&mut self, call: &str, agent_type: &str) -> AgentPath {
        if let Some(line) = self.by_call.get(call) {
            return line.agent.clone();
        }
        let path = AgentPath::primary(Workflow::ROOT_TYPE).child(agent_type, self.next);
        self.next += 1;
        path
    }

    /// The last attempt of `call` submitted, if any was.
    pub(super) fn attempt_of(&self, call: &str) -> Option<u32> {
        self.by_call.get(call).map(|l| l.attempt)
    }
}

/// Appends attempt `attempt` of `call`, run as `agent` (and its `invocation` once known),
/// to the submitted file `file`, a whole line at once.
pub(super) fn record(
    file: &Path,
    call: &str,
    attempt: u32,
    agent: &AgentPath,
    invocation: Option<&str>,
) {
    let line = Line {
        call: call.to_owned(),
        attempt,
        agent: agent.clone(),
        invocation: invocation.map(str::to_owned),
    };
    let Ok(mut text) = serde_json::to_vec(&line) else {
        return;
    };
    text.push(b'\n');
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &text));
    if let Err(e) = appended {
        tracing::warn!("cannot write {}: {e}", file.display());
    }
}
