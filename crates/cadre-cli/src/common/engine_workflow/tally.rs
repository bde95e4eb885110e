//! Where an engine workflow run's items are told: each item's line written and told as it
//! ends, and the records of the agents that ran kept across the run's parts.

use cadre_core::internal::ResultsFile;
use cadre_core::workflow::ItemResult;
use cadre_core::{AgentPath, AgentRecord};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One line of the records file: an agent's record, and the attempt it ended in (`KEY~n`;
/// empty in a file written before attempts were told apart).
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptRecord {
    #[serde(default)]
    call: String,
    #[serde(flatten)]
    record: AgentRecord,
}

/// The record of an agent's attempt `later`, with what its attempt `before` used added.
fn added(before: AgentRecord, mut later: AgentRecord) -> AgentRecord {
    later.usage.add(&before.usage);
    later.turns += before.turns;
    later.tool_calls += before.tool_calls;
    later.elapsed_ms += before.elapsed_ms;
    later
}

/// Where each item's line goes, and what the run's end is told from.
pub(super) struct Tally {
    file: ResultsFile,
    teller: crate::common::workflow_output::ResultTeller,
    outcomes: BTreeMap<String, u64>,
    /// The records of the agents that ended, one line each, kept across the run's parts
    /// (`engine-records.jsonl`): a resume's usage table counts the items it did not run.
    records: PathBuf,
}

impl Tally {
    /// Lines written to `file` and told to `teller`; agents' records appended to `records`.
    pub(super) fn new(
        file: ResultsFile,
        teller: crate::common::workflow_output::ResultTeller,
        records: PathBuf,
    ) -> Self {
        Self {
            file,
            teller,
            outcomes: BTreeMap::new(),
            records,
        }
    }

    /// Appends `records`, those of the attempt `call`, to the records file, a whole line
    /// each.
    pub(super) fn keep(&self, call: &str, records: &[AgentRecord]) {
        let mut text = Vec::new();
        for record in records {
            let kept = KeptRecord {
                call: call.to_owned(),
                record: record.clone(),
            };
            if serde_json::to_writer(&mut text, &kept).is_ok() {
                text.push(b'\n');
            }
        }
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.records)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &text));
        if let Err(e) = appended {
            tracing::warn!("cannot write {}: {e}", self.records.display());
        }
    }

    /// The records kept, one for each agent: an attempt's last (a resume may fetch the
    /// same attempt's again), and an agent's attempts added up (each used tokens and
    /// turns), the last attempt's outcome standing.
    fn kept(&self) -> Vec<AgentRecord> {
        let text = std::fs::read_to_string(&self.records).unwrap_or_default();
        let mut attempts: Vec<KeptRecord> = Vec::new();
        for kept in text
            .lines()
            .filter_map(|l| serde_json::from_str::<KeptRecord>(l).ok())
        {
            let same = |k: &KeptRecord| k.call == kept.call && k.record.path == kept.record.path;
            match attempts.iter_mut().find(|k| same(k)) {
                Some(earlier) => *earlier = kept,
                None => attempts.push(kept),
            }
        }
        let mut by_path: BTreeMap<AgentPath, AgentRecord> = BTreeMap::new();
        for KeptRecord { record, .. } in attempts {
            match by_path.remove(&record.path) {
                Some(before) => by_path.insert(record.path.clone(), added(before, record)),
                None => by_path.insert(record.path.clone(), record),
            };
        }
        by_path.into_values().collect()
    }

    /// Writes `r`'s line and tells it.
    pub(super) fn tell(&mut self, r: &ItemResult) {
        self.file.write(r);
        self.teller.tell(r);
        *self.outcomes.entry(r.outcome.clone()).or_default() += 1;
    }

    /// Ends the results file (it takes an earlier one's place); the run's answer
    /// (`N items: a completed, b failed: …`) and the records of the agents that ran.
    pub(super) fn end(mut self) -> (String, Vec<AgentRecord>) {
        self.file.finish();
        let total: u64 = self.outcomes.values().sum();
        let parts: Vec<String> = self
            .outcomes
            .iter()
            .map(|(outcome, n)| format!("{n} {outcome}"))
            .collect();
        let records = self.kept();
        (format!("{total} items: {}", parts.join(", ")), records)
    }
}
