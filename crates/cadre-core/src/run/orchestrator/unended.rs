//! Agents that never ended: still on the roster when the run is summarised (the run was
//! given up, or their task was dropped before it could end). Each is recorded with how it
//! was cut off, so no report shows it as completed or leaves it out.

use super::*;

impl Orchestrator {
    /// Records every agent still on the roster as stopped by `stop` and tells the events,
    /// taking it off the roster.
    pub(super) fn record_unended(&self, stop: &StopKind) {
        let unended: Vec<String> = self.roster.iter().map(|e| e.key().clone()).collect();
        for path in unended {
            // One that ends meanwhile records itself.
            let Some((_, entry)) = self.roster.remove(&path) else {
                continue;
            };
            let elapsed_ms = millis(entry.started.elapsed());
            self.observe(Event::Finished {
                agent: entry.path.clone(),
                outcome: stop.outcome(),
                stop: stop.clone(),
                turns: entry.turn,
                usage: entry.usage,
                elapsed_ms,
            });
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(AgentRecord {
                    path: entry.path,
                    agent_type: entry.agent_type,
                    description: entry.description,
                    model: String::new(),
                    turns: entry.turn,
                    tool_calls: 0,
                    usage: entry.usage,
                    elapsed_ms,
                    outcome: stop.outcome(),
                    stop: stop.clone(),
                    result_file: None,
                    worker: None,
                    member: entry.member,
                });
        }
    }
}
