//! What an engine workflow run submitted (`engine-submitted.jsonl`): each attempt's call,
//! number and agent, written before it goes out, so that a later part of the run names no
//! new item's agent after an earlier one (its branch and transcript) and goes on from the
//! attempt the item had reached, whatever lines the input gained or lost meanwhile; an
//! attempt the run cancelled is marked, so a resume sends a fresh one in its place.

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
    /// The agent it runs as (a cancel mark names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<AgentPath>,
    /// Its invocation on the engine, once it was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invocation: Option<String>,
    /// The run cancelled this attempt on the engine.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cancelled: bool,
}

/// What the file tells of one call: its last attempt, its agent, whether it was cancelled.
struct Known {
    attempt: u32,
    agent: AgentPath,
    cancelled: bool,
}

/// The attempts the run submitted so far, by call, and the next agent number free.
pub(super) struct Submitted {
    by_call: HashMap<String, Known>,
    next: u32,
}

impl Submitted {
    /// The attempts `file` records; `used` are agent paths earlier parts of the run gave
    /// out without recording them here (their numbers are not given again).
    pub(super) fn read(file: &Path, used: impl Iterator<Item = AgentPath>) -> Self {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let mut by_call: HashMap<String, Known> = HashMap::new();
        for line in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        {
            match (line.agent, by_call.get_mut(&line.call)) {
                (Some(agent), _) => {
                    let known = Known {
                        attempt: line.attempt,
                        agent,
                        cancelled: line.cancelled,
                    };
                    by_call.insert(line.call, known);
                }
                (None, Some(known)) if known.attempt == line.attempt => {
                    known.cancelled |= line.cancelled;
                }
                (None, _) => {}
            }
        }
        let next = by_call
            .values()
            .map(|k| k.agent.clone())
            .chain(used)
            .filter_map(|p| p.ordinal())
            .max()
            .map_or(1, |n| n + 1);
        Self { by_call, next }
    }

    /// The agent of the call `call` of type `agent_type`: the one it was submitted as
    /// before, else the next number no agent of the run had.
    pub(super) fn agent_of(&mut self, call: &str, agent_type: &str) -> AgentPath {
        if let Some(known) = self.by_call.get(call) {
            return known.agent.clone();
        }
        let path = AgentPath::primary(Workflow::ROOT_TYPE).child(agent_type, self.next);
        self.next += 1;
        path
    }

    /// The attempt of `call` to go on with, if one was submitted: the last one, or the
    /// one after it when the run cancelled it (its invocation cannot go on).
    pub(super) fn attempt_of(&self, call: &str) -> Option<u32> {
        self.by_call
            .get(call)
            .map(|k| k.attempt + u32::from(k.cancelled))
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
    append(
        file,
        &[Line {
            call: call.to_owned(),
            attempt,
            agent: Some(agent.clone()),
            invocation: invocation.map(str::to_owned),
            cancelled: false,
        }],
    );
}

/// Marks the attempts `keys` (`RUN:CALL~n` each) of run `run` cancelled in the submitted
/// file `file`.
pub(super) fn mark_cancelled<'a>(file: &Path, run: &str, keys: impl Iterator<Item = &'a String>) {
    let lines: Vec<Line> = keys
        .filter_map(|key| key.strip_prefix(run)?.strip_prefix(':'))
        .map(|id| {
            let (call, attempt) = match id.split_once('~') {
                Some((call, n)) => (call, n.parse().unwrap_or(0)),
                None => (id, 0),
            };
            Line {
                call: call.to_owned(),
                attempt,
                agent: None,
                invocation: None,
                cancelled: true,
            }
        })
        .collect();
    append(file, &lines);
}

/// Appends `lines` to `file`, in one write.
fn append(file: &Path, lines: &[Line]) {
    let mut text = Vec::new();
    for line in lines {
        if serde_json::to_writer(&mut text, line).is_ok() {
            text.push(b'\n');
        }
    }
    if text.is_empty() {
        return;
    }
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &text));
    if let Err(e) = appended {
        tracing::warn!("cannot write {}: {e}", file.display());
    }
}
