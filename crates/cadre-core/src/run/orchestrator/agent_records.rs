//! The records of the agents of a run that ended, in the order they were kept, found by
//! path: a resumed run forgets the record of an agent that goes on in constant time (after
//! one pass that indexes them), where a scan of every record per forget made a resumed
//! 10,000-item workflow quadratic.

use crate::record::usage::AgentRecord;
use crate::vocab::agent_path::AgentPath;
use std::collections::HashMap;

/// The records of the agents that ended, in the order they were kept.
#[derive(Default)]
pub(super) struct AgentRecords {
    /// Each record, or the gap a forgotten one left (gaps keep the others' places).
    slots: Vec<Option<AgentRecord>>,
    /// The slots of each path's records: made at the first forget, kept up to date after.
    /// A run that forgets none (most) never pays for it.
    by_path: Option<HashMap<AgentPath, Vec<usize>>>,
    /// How many slots hold a record.
    kept: usize,
}

impl AgentRecords {
    /// Keeps `record` after the others.
    pub(super) fn push(&mut self, record: AgentRecord) {
        if let Some(by_path) = &mut self.by_path {
            let at = self.slots.len();
            by_path.entry(record.path.clone()).or_default().push(at);
        }
        self.slots.push(Some(record));
        self.kept += 1;
    }

    /// Drops every record kept for `path`.
    pub(super) fn forget(&mut self, path: &AgentPath) {
        let slots = &mut self.slots;
        let by_path = self.by_path.get_or_insert_with(|| {
            let mut by_path: HashMap<AgentPath, Vec<usize>> = HashMap::new();
            for (at, slot) in slots.iter().enumerate() {
                if let Some(record) = slot {
                    by_path.entry(record.path.clone()).or_default().push(at);
                }
            }
            by_path
        });
        for at in by_path.remove(path).unwrap_or_default() {
            if slots.get_mut(at).and_then(Option::take).is_some() {
                self.kept -= 1;
            }
        }
    }

    /// How many records are kept.
    pub(super) fn len(&self) -> usize {
        self.kept
    }

    /// The records kept, in the order they were.
    pub(super) fn to_vec(&self) -> Vec<AgentRecord> {
        self.slots.iter().flatten().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::outcome::{Outcome, StopKind};
    use cadre_model::Usage;

    fn record(path: &str, turns: u32) -> AgentRecord {
        AgentRecord {
            path: AgentPath::from(path),
            agent_type: "explore".into(),
            description: String::new(),
            model: String::new(),
            turns,
            tool_calls: 0,
            usage: Usage::default(),
            elapsed_ms: 0,
            outcome: Outcome::Completed,
            stop: StopKind::Done,
            result_file: None,
            worker: None,
            member: None,
        }
    }

    fn listed(records: &AgentRecords) -> Vec<(String, u32)> {
        records
            .to_vec()
            .into_iter()
            .map(|r| (r.path.as_str().to_owned(), r.turns))
            .collect()
    }

    #[test]
    fn forgetting_a_path_drops_all_its_records_and_keeps_the_others_in_order() {
        let mut records = AgentRecords::default();
        records.push(record("main/a#1", 1));
        records.push(record("main/a#2", 2));
        records.push(record("main/a#1", 3));
        records.push(record("main/a#3", 4));
        records.forget(&AgentPath::from("main/a#1"));
        assert_eq!(records.len(), 2);
        assert_eq!(
            listed(&records),
            [("main/a#2".into(), 2), ("main/a#3".into(), 4)]
        );
        // Forgotten, then kept again: only the new one stands.
        records.push(record("main/a#1", 5));
        records.forget(&AgentPath::from("main/a#9"));
        assert_eq!(records.len(), 3);
        assert_eq!(
            listed(&records),
            [
                ("main/a#2".into(), 2),
                ("main/a#3".into(), 4),
                ("main/a#1".into(), 5)
            ]
        );
    }
}
