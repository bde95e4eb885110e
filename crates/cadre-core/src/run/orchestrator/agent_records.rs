//! The records of the agents of a run that ended, in the order they were kept, found by
//! path: a resumed run forgets the record of an agent that goes on in constant time,
//! where a scan of every record made a 10,000-item workflow quadratic.

use crate::record::usage::AgentRecord;
use crate::vocab::agent_path::AgentPath;
use std::collections::HashMap;

/// One kept record, or the gap a forgotten one left (gaps keep the others' places).
struct Slot {
    record: Option<AgentRecord>,
    /// The slot of the record kept before this one for the same path, if any.
    same_path_before: Option<usize>,
}

/// The records of the agents that ended, in the order they were kept.
#[derive(Default)]
pub(super) struct AgentRecords {
    slots: Vec<Slot>,
    /// The slot of the last record kept for each path.
    last: HashMap<AgentPath, usize>,
    /// How many slots hold a record.
    kept: usize,
}

impl AgentRecords {
    /// Keeps `record` after the others.
    pub(super) fn push(&mut self, record: AgentRecord) {
        let at = self.slots.len();
        let same_path_before = self.last.insert(record.path.clone(), at);
        self.slots.push(Slot {
            record: Some(record),
            same_path_before,
        });
        self.kept += 1;
    }

    /// Drops every record kept for `path`.
    pub(super) fn forget(&mut self, path: &AgentPath) {
        let mut next = self.last.remove(path);
        while let Some(at) = next {
            let Some(slot) = self.slots.get_mut(at) else {
                break;
            };
            if slot.record.take().is_some() {
                self.kept -= 1;
            }
            next = slot.same_path_before.take();
        }
    }

    /// How many records are kept.
    pub(super) fn len(&self) -> usize {
        self.kept
    }

    /// The records kept, in the order they were.
    pub(super) fn to_vec(&self) -> Vec<AgentRecord> {
        self.slots.iter().filter_map(|s| s.record.clone()).collect()
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
