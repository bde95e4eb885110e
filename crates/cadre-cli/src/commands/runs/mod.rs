//! `cadre runs list|show`: past runs read back from `.cadre/runs/<run-id>/` — the
//! summary when the run finished, otherwise whatever its transcripts say.

use crate::args::RunsCommand;
use crate::display::{clock, human_tokens, truncate};
use crate::exit::{Code, ConfigError};
use anyhow::{Context, Result};
use cadre_core::record::usage::tree_key;
use cadre_core::StopKind;
use cadre_model::{ContentBlock, Message, Role, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// How many ids an error message lists.
const IDS_SHOWN: usize = 5;

/// Runs one `cadre runs` command in the workspace at `root`.
pub async fn runs(cmd: RunsCommand, root: &Path) -> Result<Code> {
    let runs_dir = root.join(".cadre").join("runs");
    match cmd {
        RunsCommand::List { limit, json } => {
            let found = find_runs(&runs_dir)?;
            let shown: Vec<RunView> = found
                .iter()
                .take(limit)
                .map(|r| load_run(&r.dir, &r.id))
                .collect();
            if json {
                let items: Vec<Value> = shown.iter().map(RunView::list_json).collect();
                outln!("{}", Value::Array(items));
            } else if shown.is_empty() {
                outln!(
                    "no runs yet in {}: each `cadre run TASK` in this folder records one",
                    runs_dir.display()
                );
            } else {
                print_list(&shown, found.len());
            }
            Ok(Code::Done)
        }
        RunsCommand::Show { run_id, html } => {
            let found = find_runs(&runs_dir)?;
            let found = resolve(&found, &run_id, &runs_dir)?;
            let run = load_run(&found.dir, &found.id);
            match html {
                Some(file) => {
                    std::fs::write(&file, crate::runs_html::page(&run))
                        .with_context(|| format!("cannot write {}", file.display()))?;
                    errln!(
                        "wrote the timeline of run {} ({} agents) to {}",
                        run.id,
                        run.agents.len(),
                        file.display()
                    );
                }
                None => {
                    print_show(&run);
                    // Outside a git repository there are no branches to list.
                    let branches = cadre_tools::worktree::branches(root, &run.id)
                        .await
                        .unwrap_or_default();
                    if !branches.is_empty() {
                        outln!("\nbranches made by its isolated subagents (review with `git diff HEAD...BRANCH`; `cadre runs branches {} --delete` removes them):", run.id);
                        for b in branches {
                            outln!("  {b}");
                        }
                    }
                }
            }
            Ok(Code::Done)
        }
        RunsCommand::Branches { run_id, delete } => {
            let found = find_runs(&runs_dir)?;
            let found = resolve(&found, &run_id, &runs_dir)?;
            let result = if delete {
                cadre_tools::worktree::delete_branches(root, &found.id).await
            } else {
                cadre_tools::worktree::branches(root, &found.id).await
            };
            let branches = result.map_err(|e| ConfigError(e.to_string()))?;
            match (delete, branches.is_empty()) {
                (_, true) => outln!("run {} has no branches", found.id),
                (true, false) => outln!("deleted {}", branches.join(", ")),
                (false, false) => branches.iter().for_each(|b| outln!("{b}")),
            }
            Ok(Code::Done)
        }
    }
}

/// A run folder found on disk, before it is read.
#[derive(Debug, Clone)]
struct Found {
    id: String,
    dir: PathBuf,
}

/// Every run folder under `runs_dir`, newest first. A missing folder means no runs.
fn find_runs(runs_dir: &Path) -> Result<Vec<Found>> {
    let entries = match std::fs::read_dir(runs_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", runs_dir.display())),
    };
    let mut found: Vec<(Option<SystemTime>, Found)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let id = e.file_name().to_str()?.to_owned();
            let dir = e.path();
            let start = first_time(&dir);
            // A folder with neither a summary nor a transcript is not a run.
            let is_run = dir.join("summary.json").is_file() || !transcript_files(&dir).is_empty();
            is_run.then(|| (start.or_else(|| id_time(&id)), Found { id, dir }))
        })
        .collect();
    // Two runs may start in the same second; their first records' times still tell them apart.
    found.sort_by(|(ta, a), (tb, b)| tb.cmp(ta).then_with(|| b.id.cmp(&a.id)));
    Ok(found.into_iter().map(|(_, f)| f).collect())
}

/// The run `wanted` names: an id, a unique prefix of one, or `latest`.
fn resolve<'a>(found: &'a [Found], wanted: &str, runs_dir: &Path) -> Result<&'a Found> {
    if found.is_empty() {
        return Err(ConfigError(format!(
            "there are no runs in {} yet: each `cadre run TASK` in this folder records one",
            runs_dir.display()
        ))
        .into());
    }
    if wanted == "latest" {
        return Ok(&found[0]);
    }
    if let Some(exact) = found.iter().find(|f| f.id == wanted) {
        return Ok(exact);
    }
    let matches: Vec<&Found> = found.iter().filter(|f| f.id.starts_with(wanted)).collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(ConfigError(format!(
            "there is no run {wanted:?} in {}; the newest are: {} (or say `latest`)",
            runs_dir.display(),
            ids(found.iter())
        ))
        .into()),
        many => Err(ConfigError(format!(
            "{wanted:?} matches {} runs: {}; give more of the id",
            many.len(),
            ids(many.iter().copied())
        ))
        .into()),
    }
}

fn ids<'a>(found: impl Iterator<Item = &'a Found>) -> String {
    let all: Vec<&str> = found.map(|f| f.id.as_str()).collect();
    let mut text = all
        .iter()
        .take(IDS_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if all.len() > IDS_SHOWN {
        text.push_str(&format!(", … ({} in all)", all.len()));
    }
    text
}

/// The time in a run id (`20261201-101500-1234` → 2026-12-01T10:15:00Z).
fn id_time(id: &str) -> Option<SystemTime> {
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

/// A run's start for people: `2026-12-01 10:15` (UTC), from its id.
fn start_label(id: &str) -> String {
    match id_time(id) {
        Some(t) => {
            let text = humantime::format_rfc3339_seconds(t).to_string();
            text.get(0..16).unwrap_or(&text).replace('T', " ")
        }
        None => "?".to_owned(),
    }
}

/// The `.jsonl` files of a run folder whose first record is an agent's: its transcripts
/// (other files, such as a journal, are left alone).
fn transcript_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter(|p| first_record(p).is_some_and(|r| r["type"] == "agent"))
        .collect();
    files.sort();
    files
}

fn first_record(path: &Path) -> Option<Value> {
    let file = std::fs::File::open(path).ok()?;
    let mut line = String::new();
    std::io::BufReader::new(file).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

/// When the run's first transcript record was written, if its transcripts carry times.
fn first_time(dir: &Path) -> Option<SystemTime> {
    transcript_files(dir)
        .iter()
        .filter_map(|p| first_record(p))
        .filter_map(|r| record_time(&r))
        .min()
}

fn record_time(record: &Value) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(record.get("t")?.as_str()?).ok()
}

/// How an agent or a run ended.
#[derive(Debug, Clone)]
pub struct Stop {
    /// A short label: `done`, `max turns`, …
    pub label: String,
    /// The whole story: `the model API failed: …`.
    pub detail: String,
}

impl Stop {
    fn from_json(value: &Value) -> Self {
        match serde_json::from_value::<StopKind>(value.clone()) {
            Ok(stop) => Self {
                label: stop.label().to_owned(),
                detail: stop.to_string(),
            },
            // A stop a newer cadre wrote: show its kind as written.
            Err(_) => {
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

    fn is_done(&self) -> bool {
        self.label == "done"
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
    pub path: String,
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
    /// Its transcript.
    pub records: Vec<Record>,
}

impl AgentView {
    /// Its name in a tree: the last segment of its path (`explore#1`).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// How deep it is: 0 for the primary agent.
    pub fn depth(&self) -> usize {
        self.path.matches('/').count()
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

    fn from_transcript(path: &Path) -> Option<Self> {
        let file = std::fs::File::open(path).ok()?;
        let mut agent = Self::default();
        let mut outcome_time = None;
        for line in std::io::BufReader::new(file).lines() {
            let Ok(line) = line else { break };
            // A line cut short by a crash is skipped; the rest still reads.
            let Ok(value) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let t = record_time(&value);
            let text = |key: &str| value[key].as_str().unwrap_or_default().to_owned();
            let kind = match value["type"].as_str() {
                Some("agent") => {
                    agent.path = text("path");
                    agent.agent_type = text("agent_type");
                    agent.description = text("description");
                    agent.model = text("model");
                    RecordKind::Agent
                }
                Some("message") => {
                    match serde_json::from_value::<Message>(value["message"].clone()) {
                        Ok(m) => message_kind(&m),
                        Err(_) => RecordKind::Other,
                    }
                }
                Some("outcome") => {
                    agent.stop = Some(Stop::from_json(&value["stop"]));
                    agent.turns = count(&value["turns"]);
                    agent.tool_calls = count(&value["tool_calls"]);
                    agent.usage = serde_json::from_value(value["usage"].clone()).ok();
                    outcome_time = t;
                    RecordKind::Outcome
                }
                _ => RecordKind::Other,
            };
            agent.records.push(Record { t, kind });
        }
        if agent.path.is_empty() {
            return None;
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
        let start = agent.records.first().and_then(|r| r.t);
        let end = outcome_time.or_else(|| agent.records.iter().rev().find_map(|r| r.t));
        agent.elapsed_ms = match (start, end) {
            (Some(s), Some(e)) => e
                .duration_since(s)
                .ok()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            _ => None,
        };
        Some(agent)
    }
}

fn count(v: &Value) -> u32 {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or_default()
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
    stop: Value,
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
    path: String,
    agent_type: String,
    description: String,
    model: String,
    turns: u32,
    tool_calls: u32,
    usage: Usage,
    elapsed_ms: u64,
    stop: Value,
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
}

impl RunView {
    /// The run's outcome label, `unfinished` without a summary.
    pub fn outcome(&self) -> &str {
        self.stop
            .as_ref()
            .map_or("unfinished", |s| s.label.as_str())
    }

    /// Tokens used by every agent whose usage is known.
    pub fn tokens(&self) -> u64 {
        self.agents.iter().map(AgentView::tokens).sum()
    }

    fn list_json(&self) -> Value {
        json!({
            "id": self.id,
            "started": id_time(&self.id).map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            "task": self.task,
            "outcome": self.outcome(),
            "finished": self.stop.is_some(),
            "agents": self.agents.len(),
            "unfinished_agents": self.agents.iter().filter(|a| a.stop.is_none()).count(),
            "tokens": self.tokens(),
            "elapsed_ms": self.elapsed_ms,
        })
    }
}

/// Reads one run folder: its transcripts, and its summary when it has one.
fn load_run(dir: &Path, id: &str) -> RunView {
    let mut agents: Vec<AgentView> = transcript_files(dir)
        .iter()
        .filter_map(|p| AgentView::from_transcript(p))
        .collect();
    let summary = match std::fs::read_to_string(dir.join("summary.json")) {
        Ok(text) => match serde_json::from_str::<SavedSummary>(&text) {
            Ok(s) => Some(s),
            Err(e) => {
                errln!("cadre: {id}/summary.json cannot be read ({e}); showing the transcripts");
                None
            }
        },
        Err(_) => None,
    };
    if let Some(summary) = &summary {
        // The summary is the record of what each agent used; transcripts add the timeline.
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
            a.stop = Some(Stop::from_json(&saved.stop));
        }
    }
    agents.sort_by_cached_key(|a| tree_key(&a.path));
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
    let derived_elapsed = {
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
    };
    match summary {
        Some(s) => RunView {
            id: id.to_owned(),
            started: start_label(id),
            task: if s.task.is_empty() { prompt } else { s.task },
            answer: Some(s.answer),
            stop: Some(Stop::from_json(&s.stop)),
            elapsed_ms: Some(s.elapsed_ms),
            agents,
        },
        None => RunView {
            id: id.to_owned(),
            started: start_label(id),
            task: prompt,
            answer: None,
            stop: None,
            elapsed_ms: derived_elapsed,
            agents,
        },
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn time_column(ms: Option<u64>) -> String {
    ms.map_or("–".to_owned(), clock)
}

fn print_list(runs: &[RunView], total: usize) {
    outln!(
        "{:<22} {:<16} {:<11} {:>6} {:>7} {:>6}  task",
        "run",
        "started (UTC)",
        "outcome",
        "agents",
        "tokens",
        "time"
    );
    for r in runs {
        outln!(
            "{:<22} {:<16} {:<11} {:>6} {:>7} {:>6}  {}",
            r.id,
            r.started,
            r.outcome(),
            r.agents.len(),
            human_tokens(r.tokens()),
            time_column(r.elapsed_ms),
            truncate(&one_line(&r.task), 48)
        );
    }
    if total > runs.len() {
        outln!(
            "… {} older run(s) not shown (--limit N shows more)",
            total - runs.len()
        );
    }
}

fn print_show(run: &RunView) {
    outln!(
        "run {} · started {} UTC · {} · {} agents · {} tok · {}",
        run.id,
        run.started,
        run.outcome(),
        run.agents.len(),
        human_tokens(run.tokens()),
        time_column(run.elapsed_ms)
    );
    if run.stop.is_none() {
        outln!("this run has no summary.json: it was stopped before it ended (or is still running); what follows comes from its transcripts");
    }
    outln!();
    outln!(
        "{:<20} {:<9} {:<11} {:>5} {:>5} {:>7} {:>7} {:>6}  description",
        "agent",
        "type",
        "outcome",
        "turns",
        "tools",
        "input",
        "output",
        "time"
    );
    for a in &run.agents {
        let name = format!("{}{}", "  ".repeat(a.depth()), a.name());
        let (input, output) = match a.usage {
            Some(u) => (human_tokens(u.total_input()), human_tokens(u.output_tokens)),
            None => ("–".to_owned(), "–".to_owned()),
        };
        outln!(
            "{:<20} {:<9} {:<11} {:>5} {:>5} {:>7} {:>7} {:>6}  {}",
            name,
            a.agent_type,
            a.outcome(),
            a.turns,
            a.tool_calls,
            input,
            output,
            time_column(a.elapsed_ms),
            truncate(&one_line(&a.description), 48)
        );
    }
    for a in &run.agents {
        if let Some(stop) = a.stop.as_ref().filter(|s| !s.is_done()) {
            outln!("{}: {}", a.path, stop.detail);
        }
    }
    outln!();
    outln!("task:");
    outln!("{}", indent(&run.task));
    outln!();
    match &run.answer {
        Some(answer) => {
            outln!("answer:");
            outln!("{}", indent(answer));
        }
        None => outln!("answer: (none: the run did not finish)"),
    }
}

fn indent(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
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

    fn found(ids: &[&str]) -> Vec<Found> {
        ids.iter()
            .map(|id| Found {
                id: (*id).to_owned(),
                dir: PathBuf::from(id),
            })
            .collect()
    }

    #[test]
    fn run_ids_resolve_by_prefix_and_latest() {
        let all = found(&[
            "20261202-090000-7",
            "20261201-101500-1",
            "20261201-101500-2",
        ]);
        let dir = Path::new(".cadre/runs");
        assert_eq!(
            resolve(&all, "latest", dir).unwrap().id,
            "20261202-090000-7"
        );
        assert_eq!(
            resolve(&all, "20261202", dir).unwrap().id,
            "20261202-090000-7"
        );
        assert_eq!(
            resolve(&all, "20261201-101500-2", dir).unwrap().id,
            "20261201-101500-2"
        );
        let ambiguous = resolve(&all, "20261201", dir).unwrap_err().to_string();
        assert!(ambiguous.contains("matches 2 runs"), "{ambiguous}");
        let unknown = resolve(&all, "1999", dir).unwrap_err().to_string();
        assert!(unknown.contains("20261202-090000-7"), "{unknown}");
        assert!(resolve(&[], "latest", dir).is_err());
    }
}
