//! Past runs read back from `.cadre/runs/<run-id>/`: the summary when the run finished,
//! otherwise whatever its transcripts say.

use crate::common::run_index::RunRow;
use cadre_core::internal::TeamState;
use cadre_core::internal::{read_steps, JOURNAL_FILE};
use cadre_core::{
    AgentPath, Earlier, Outcome, OutcomeRecord, Recorded, RunDir, StopKind, TranscriptLine,
    TranscriptRecord,
};
use cadre_model::{ContentBlock, Message, Role, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use std::time::SystemTime;

/// Every run under `runs`, newest first. A missing folder means no runs; a folder with
/// neither a summary nor a transcript is not a run.
pub fn find_runs(runs: &Path) -> std::io::Result<Vec<RunDir>> {
    let mut found: Vec<(Option<SystemTime>, RunDir)> = RunDir::all_in(runs)?
        .into_iter()
        .filter(RunDir::holds_a_run)
        .map(|dir| (first_time(&dir).or_else(|| id_time(dir.id())), dir))
        .collect();
    // Two runs may start in the same second; their first records' times still tell them apart.
    found.sort_by(|(ta, a), (tb, b)| tb.cmp(ta).then_with(|| b.id().cmp(a.id())));
    Ok(found.into_iter().map(|(_, dir)| dir).collect())
}

/// The time in a run id (`20261201-101500-1234` → 2026-12-01T10:15:00Z).
pub fn id_time(id: &str) -> Option<SystemTime> {
    // Byte slicing below needs ASCII; a folder named otherwise has no time in its name.
    if !id.is_ascii() {
        return None;
    }
    let (date, time) = (id.get(0..8)?, id.get(9..15)?);
    if id.as_bytes().get(8) != Some(&b'-') {
        return None;
    }
    let text = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &date[0..4],
        &date[4..6],
        &date[6..8],
        &time[0..2],
        &time[2..4],
        &time[4..6]
    );
    humantime::parse_rfc3339(&text).ok()
}

/// The run's `summary.json`, if it has one that reads (one that does not is said, and the
/// transcripts are shown alone).
fn read_summary(dir: &RunDir) -> Option<SavedSummary> {
    let id = dir.id();
    match std::fs::read_to_string(dir.summary_file()) {
        Ok(text) => match serde_json::from_str::<SavedSummary>(&text) {
            Ok(s) => Some(s),
            Err(e) => {
                errln!("cadre: {id}/summary.json cannot be read ({e}); showing the transcripts");
                None
            }
        },
        Err(_) => None,
    }
}

/// Adds what `summary` records of each agent to `agents` (an agent without a transcript
/// gets a view of its own): the summary is the record of what each agent used;
/// transcripts add the timeline.
fn add_usage(agents: &mut Vec<AgentView>, summary: &SavedSummary) {
    for saved in &summary.usage.agents {
        let at = match agents.iter().position(|a| a.path == saved.path) {
            Some(at) => at,
            None => {
                agents.push(AgentView {
                    path: saved.path.clone(),
                    ..AgentView::default()
                });
                agents.len() - 1
            }
        };
        let a = &mut agents[at];
        a.agent_type.clone_from(&saved.agent_type);
        a.description.clone_from(&saved.description);
        a.model.clone_from(&saved.model);
        a.turns = saved.turns;
        a.tool_calls = saved.tool_calls;
        a.usage = Some(saved.usage);
        a.elapsed_ms = Some(saved.elapsed_ms);
        a.stop = Some(Stop::from_recorded(&saved.stop));
        a.result_file.clone_from(&saved.result_file);
    }
}

/// The run's task: the primary agent's prompt, or (an engine run's, while the workers have
/// it) the task its note keeps.
fn prompt_of(agents: &[AgentView], dir: &RunDir, engine: bool) -> String {
    let prompt = agents
        .iter()
        .find(|a| a.depth() == 0)
        .and_then(|a| {
            a.records.iter().find_map(|r| match &r.kind {
                RecordKind::Prompt(text) => Some(text.clone()),
                _ => None,
            })
        })
        .unwrap_or_default();
    // An engine run's note keeps its task while the workers have it.
    match (prompt.is_empty(), engine) {
        (true, true) => std::fs::read_to_string(dir.engine_file())
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|v| v.get("task").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default(),
        _ => prompt,
    }
}

/// How long the run took by its transcripts' first and last times, if they have any.
fn derived_elapsed(agents: &[AgentView]) -> Option<u64> {
    let times = agents
        .iter()
        .flat_map(|a| a.records.iter().filter_map(|r| r.t));
    let (first, last) = times.fold((None, None), |(lo, hi): (Option<SystemTime>, _), t| {
        (
            Some(lo.map_or(t, |lo| lo.min(t))),
            Some(hi.map_or(t, |hi: SystemTime| hi.max(t))),
        )
    });
    match (first, last) {
        (Some(a), Some(b)) => b
            .duration_since(a)
            .ok()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        _ => None,
    }
}

/// A run's start for people: `2026-12-01 10:15` (UTC), from its id.
pub fn start_label(id: &str) -> String {
    match id_time(id) {
        Some(t) => {
            let text = humantime::format_rfc3339_seconds(t).to_string();
            text.get(0..16).unwrap_or(&text).replace('T', " ")
        }
        None => "?".to_owned(),
    }
}

/// When the run's first transcript record was written, if its transcripts carry times.
fn first_time(dir: &RunDir) -> Option<SystemTime> {
    let mut files = dir.agent_files();
    files.push(dir.transcript_file());
    files
        .iter()
        .filter_map(|p| {
            let file = std::fs::File::open(p).ok()?;
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut line).ok()?;
            TranscriptLine::parse(&line)?.time()
        })
        .min()
}

/// The label of work that finished: [`Outcome::Completed`]'s.
pub const COMPLETED: &str = Outcome::Completed.label();

/// How an agent or a run ended.
#[derive(Debug, Clone)]
pub struct Stop {
    /// A short label: `completed`, `turn limit`, `failed: API error`, …
    pub label: String,
    /// The whole story: `the model API failed: …`.
    pub detail: String,
}

impl Stop {
    fn from_recorded(stop: &Recorded<StopKind>) -> Self {
        match stop {
            Recorded::Known(stop) => Self {
                label: stop.label().to_owned(),
                detail: stop.to_string(),
            },
            // A stop a newer cadre wrote: show its kind as written.
            Recorded::Unknown(value) => {
                let kind = value
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .replace('_', " ");
                Self {
                    label: kind.clone(),
                    detail: kind,
                }
            }
        }
    }

    /// Whether it finished its work.
    pub fn is_done(&self) -> bool {
        self.label == COMPLETED
    }
}

/// One line of a transcript, as far as browsing needs it.
#[derive(Debug, Clone)]
pub struct Record {
    /// When it was written; transcripts from before times were recorded have none.
    pub t: Option<SystemTime>,
    /// What it holds.
    pub kind: RecordKind,
}

/// What a transcript line holds.
#[derive(Debug, Clone)]
pub enum RecordKind {
    /// The agent's header line.
    Agent,
    /// A model response, with the tool calls it asked for.
    Response {
        /// Its text.
        text: String,
        /// Its tool calls.
        calls: Vec<Call>,
    },
    /// The results of the previous response's tool calls.
    Results {
        /// The tool_use ids answered, each with whether it failed.
        answered: Vec<(String, bool)>,
    },
    /// The prompt (or another plain user message).
    Prompt(String),
    /// The agent's outcome line.
    Outcome,
    /// A record this version does not know.
    Other,
}

/// One tool call asked for in a response.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool_use id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its input.
    pub input: Value,
}

/// One agent of a run.
#[derive(Debug, Clone, Default)]
pub struct AgentView {
    /// Its path: `main`, `main/explore#1`.
    pub path: AgentPath,
    /// Its agent type.
    pub agent_type: String,
    /// What it was asked to do, in a few words.
    pub description: String,
    /// The model it talked to.
    pub model: String,
    /// How it ended; `None` while unfinished.
    pub stop: Option<Stop>,
    /// Model requests made.
    pub turns: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tokens it used itself, when recorded (agents that never finished have none).
    pub usage: Option<Usage>,
    /// How long it ran, when known.
    pub elapsed_ms: Option<u64>,
    /// Where its whole answer is kept (relative to the run folder), when it was too long
    /// for its parent's tool result.
    pub result_file: Option<String>,
    /// Its transcript.
    pub records: Vec<Record>,
}

impl AgentView {
    /// Its name in a tree: the last step of its path (`explore#1`).
    pub fn name(&self) -> &str {
        self.path.name()
    }

    /// How deep it is: 0 for the primary agent.
    pub fn depth(&self) -> usize {
        self.path.depth()
    }

    /// Its outcome label, `unfinished` when it has none.
    pub fn outcome(&self) -> &str {
        self.stop
            .as_ref()
            .map_or("unfinished", |s| s.label.as_str())
    }

    /// Tokens used, 0 when unknown.
    pub fn tokens(&self) -> u64 {
        self.usage.map_or(0, |u| u.total())
    }

    /// The agent at `path`, from its transcript lines.
    fn from_lines(path: &AgentPath, lines: Vec<TranscriptLine<'static>>) -> Self {
        // Each part of a run in several parts counts from its first record to its last.
        let earlier = Earlier::of(&lines);
        let mut agent = Self {
            path: path.clone(),
            ..Self::default()
        };
        for line in lines {
            let t = line.time();
            let kind = match line.record {
                TranscriptRecord::Agent(header) => {
                    agent.agent_type = header.agent_type.into_owned();
                    agent.description = header.description.into_owned();
                    agent.model = header.model.into_owned();
                    RecordKind::Agent
                }
                TranscriptRecord::Message { message } => message_kind(&message),
                TranscriptRecord::Outcome(OutcomeRecord {
                    stop,
                    turns,
                    tool_calls,
                    usage,
                    ..
                }) => {
                    agent.stop = Some(Stop::from_recorded(&stop));
                    agent.turns = turns;
                    agent.tool_calls = tool_calls;
                    agent.usage = usage;
                    RecordKind::Outcome
                }
                TranscriptRecord::Compacted { .. }
                | TranscriptRecord::Hook(_)
                | TranscriptRecord::Other => RecordKind::Other,
            };
            agent.records.push(Record { t, kind });
        }
        if agent.stop.is_none() {
            // Unfinished: count what the transcript shows so far.
            for r in &agent.records {
                if let RecordKind::Response { calls, .. } = &r.kind {
                    agent.turns += 1;
                    agent.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
                }
            }
        }
        agent.elapsed_ms = agent
            .records
            .iter()
            .any(|r| r.t.is_some())
            .then_some(earlier.elapsed_ms);
        agent
    }
}

fn message_kind(m: &Message) -> RecordKind {
    match m.role {
        Role::Assistant => RecordKind::Response {
            text: m.text(),
            calls: m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse(u) => Some(Call {
                        id: u.id.clone(),
                        name: u.name.clone(),
                        input: u.input.clone(),
                    }),
                    _ => None,
                })
                .collect(),
        },
        Role::User => {
            let answered: Vec<(String, bool)> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult(r) => Some((r.tool_use_id.clone(), r.is_error)),
                    _ => None,
                })
                .collect();
            if answered.is_empty() {
                RecordKind::Prompt(m.text())
            } else {
                RecordKind::Results { answered }
            }
        }
    }
}

/// `summary.json` as far as browsing needs it; missing fields default, so summaries from
/// other versions still read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SavedSummary {
    task: String,
    answer: String,
    stop: Recorded<StopKind>,
    elapsed_ms: u64,
    usage: SavedUsage,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SavedUsage {
    agents: Vec<SavedAgent>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SavedAgent {
    path: AgentPath,
    agent_type: String,
    description: String,
    model: String,
    turns: u32,
    tool_calls: u32,
    usage: Usage,
    elapsed_ms: u64,
    stop: Recorded<StopKind>,
    result_file: Option<String>,
}

/// One run, read back.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The run id.
    pub id: String,
    /// When it started, as people read it (`2026-12-01 10:15`, UTC).
    pub started: String,
    /// The task given to the primary agent.
    pub task: String,
    /// The primary agent's answer, when the run finished.
    pub answer: Option<String>,
    /// How the run ended; `None` when it has no summary (killed, or still running).
    pub stop: Option<Stop>,
    /// Wall time, when known.
    pub elapsed_ms: Option<u64>,
    /// Every agent, in tree order.
    pub agents: Vec<AgentView>,
    /// Whether it ran on a durable engine (its folder holds `engine.json`).
    pub engine: bool,
    /// Its team as the journal leaves it (members, messages, tasks); `None` for a run
    /// without a team or without a journal.
    pub team: Option<TeamState>,
}

impl RunView {
    /// Reads one run folder: its transcripts, and its summary when it has one.
    pub fn load(dir: &RunDir) -> Self {
        let id = dir.id();
        let mut agents: Vec<AgentView> = dir
            .transcripts()
            .into_iter()
            .map(|(path, lines)| AgentView::from_lines(&path, lines))
            .collect();
        let summary = read_summary(dir);
        if let Some(summary) = &summary {
            add_usage(&mut agents, summary);
        }
        agents.sort_by(|a, b| a.path.cmp(&b.path));
        let engine = dir.engine_file().is_file();
        let prompt = prompt_of(&agents, dir, engine);
        let team = team_of(dir);
        match summary {
            Some(s) => RunView {
                engine,
                id: id.to_owned(),
                started: start_label(id),
                task: if s.task.is_empty() { prompt } else { s.task },
                answer: Some(s.answer),
                stop: Some(Stop::from_recorded(&s.stop)),
                elapsed_ms: Some(s.elapsed_ms),
                agents,
                team,
            },
            None => RunView {
                engine,
                id: id.to_owned(),
                started: start_label(id),
                task: prompt,
                answer: None,
                stop: None,
                // The primary agent ran through every part of the run.
                elapsed_ms: agents
                    .iter()
                    .find(|a| a.depth() == 0)
                    .and_then(|a| a.elapsed_ms)
                    .or_else(|| derived_elapsed(&agents)),
                agents,
                team,
            },
        }
    }

    /// The run's outcome label: `unfinished` without a summary, `on engine` for an engine
    /// run the client has not seen end (it may still be running there).
    pub fn outcome(&self) -> &str {
        let unfinished = if self.engine {
            "on engine"
        } else {
            "unfinished"
        };
        self.stop.as_ref().map_or(unfinished, |s| s.label.as_str())
    }

    /// Tokens used by every agent whose usage is known.
    pub fn tokens(&self) -> u64 {
        self.agents.iter().map(AgentView::tokens).sum()
    }

    /// The run as a row of `cadre runs list`.
    pub fn row(&self) -> RunRow {
        RunRow {
            id: self.id.clone(),
            task: self.task.clone(),
            outcome: self.outcome().to_owned(),
            finished: self.stop.is_some(),
            engine: self.engine,
            agents: self.agents.len(),
            unfinished_agents: self.agents.iter().filter(|a| a.stop.is_none()).count(),
            tokens: self.tokens(),
            elapsed_ms: self.elapsed_ms,
        }
    }
}

/// A run's row as one object of `cadre runs list --json`.
pub fn list_json(row: &RunRow) -> Value {
    json!({
        "id": row.id,
        "started": id_time(&row.id).map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        "task": row.task,
        "outcome": row.outcome,
        "finished": row.finished,
        "engine": row.engine,
        "agents": row.agents,
        "unfinished_agents": row.unfinished_agents,
        "tokens": row.tokens,
        "elapsed_ms": row.elapsed_ms,
    })
}

/// The team of the run in `dir`, read from its journal; `None` when it has no journal or
/// the journal has no team steps.
fn team_of(dir: &RunDir) -> Option<TeamState> {
    let file = dir.path().join(JOURNAL_FILE);
    if !file.is_file() {
        return None;
    }
    match read_steps(&file) {
        // The same fold a resumed run makes.
        Ok((steps, _, _)) => TeamState::from_steps(steps),
        Err(e) => {
            errln!("cadre: {e}; its team is not shown");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_give_their_start_time() {
        assert_eq!(start_label("20261201-101500-1234"), "2026-12-01 10:15");
        assert_eq!(start_label("20261201-101500-1234-2"), "2026-12-01 10:15");
        assert_eq!(start_label("not-an-id"), "?");
        assert_eq!(start_label("20261301-101500-1"), "?");
    }
}
