//! A run's folder on disk (`<project>/.cadre/runs/<run-id>/`): where its journal, summary,
//! engine note and transcript are, and the path that names each agent.

use crate::record::journal::JOURNAL_FILE;
use crate::record::transcript::{TranscriptLine, TranscriptRecord, TRANSCRIPT_FILE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The run's summary, written when it ends.
pub const SUMMARY_FILE: &str = "summary.json";

/// The file a run's listing reads instead of the whole run (see [`RunDir::index_file`]).
pub const INDEX_FILE: &str = "index.json";

/// What a run on a durable engine leaves in its folder: how to find the run again.
pub const ENGINE_FILE: &str = "engine.json";

/// The folder of a run's whole subagent answers that were too long for a tool result.
pub const RESULTS_DIR: &str = "results";

/// The extension of transcripts (the journal has it too).
const JSONL: &str = "jsonl";

/// What `.cadre/.gitignore` holds when cadre writes it: what cadre writes under `.cadre/`
/// stays out of git, this file too; the agent types and skills kept there do not.
pub const GITIGNORE: &str = "# Written by cadre: run transcripts, agents' worktrees and this file stay out of git.\n/.gitignore\nruns/\nworktrees/\n";

/// What earlier versions wrote to `.cadre/.gitignore`, which left the file itself to show in
/// `git status`; found as it was and untracked, it is brought up to date.
const OLD_GITIGNORE: &str =
    "# Written by cadre: run transcripts and agents' worktrees stay out of git.\nruns/\nworktrees/\n";

/// `.cadre/runs/<run-id>/`: one run's folder.
#[derive(Debug, Clone)]
pub struct RunDir {
    dir: PathBuf,
    id: String,
}

impl RunDir {
    /// `<project>/.cadre/runs`: where the runs of the project at `project` are kept.
    pub fn runs_root(project: &Path) -> PathBuf {
        project.join(".cadre").join("runs")
    }

    /// In a git repository, writes `<project>/.cadre/.gitignore` ([`GITIGNORE`]) unless one
    /// is there already: the user's is never overwritten, only one that earlier versions of
    /// cadre wrote is brought up to date, and only while git does not track it (a committed
    /// one rewritten would show as changed after every run). Returns whether it wrote. Every run calls it, on
    /// any engine, so that nothing of cadre's shows in `git status`.
    pub fn write_gitignore(project: &Path) -> std::io::Result<bool> {
        let file = project.join(".cadre").join(".gitignore");
        if !project.ancestors().any(|d| d.join(".git").exists()) || file.is_symlink() {
            return Ok(false);
        }
        match std::fs::read_to_string(&file) {
            Ok(text) if text == OLD_GITIGNORE && !tracked(project, &file) => {
                std::fs::write(&file, GITIGNORE)?;
                return Ok(true);
            }
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Something is there that cannot be read as text: it is not ours.
            Err(_) => return Ok(false),
        }
        std::fs::create_dir_all(project.join(".cadre"))?;
        // `create_new`: a file made meanwhile by another run is kept, not overwritten.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
        {
            Ok(mut f) => {
                std::io::Write::write_all(&mut f, GITIGNORE.as_bytes())?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The folder of run `id` of the project at `project`, whether or not it exists.
    pub fn path_in(project: &Path, id: &str) -> PathBuf {
        Self::runs_root(project).join(id)
    }

    /// Creates `<runs>/<run-id>/`, the id made from the current UTC time and the process id.
    pub fn create(runs: &Path) -> std::io::Result<Self> {
        Self::create_named(runs, &new_run_id())
    }

    /// Creates a run folder named `id`, or `id-1`, `id-2`, … when that is taken. An id that
    /// is not one plain folder name (ASCII letters, digits, `.`, `_`, `-`, not starting
    /// with `.` or `-`) is refused, so no id can lead outside `runs`.
    pub fn create_named(runs: &Path, id: &str) -> std::io::Result<Self> {
        let plain = !id.is_empty()
            && !id.starts_with(['.', '-'])
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !plain {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{id:?} is not a run id (letters, digits, '.', '_' and '-' only)"),
            ));
        }
        for n in 0..1000u32 {
            let id = match n {
                0 => id.to_owned(),
                n => format!("{id}-{n}"),
            };
            let dir = runs.join(&id);
            match std::fs::create_dir_all(runs).and_then(|()| std::fs::create_dir(&dir)) {
                Ok(()) => return Ok(Self { dir, id }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("could not find a free run id"))
    }

    /// An existing run folder (to resume or continue the run in it).
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        if !dir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no run folder {}", dir.display()),
            ));
        }
        Ok(Self::at(dir.to_path_buf()))
    }

    fn at(dir: PathBuf) -> Self {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self { dir, id }
    }

    /// Every folder under `runs`, by id: oldest first, as ids start with their UTC time.
    /// No `runs` folder means no runs.
    pub fn all_in(runs: &Path) -> std::io::Result<Vec<Self>> {
        let entries = match std::fs::read_dir(runs) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut dirs: Vec<Self> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .map(Self::at)
            .collect();
        dirs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(dirs)
    }

    /// The run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The run's journal.
    pub fn journal_file(&self) -> PathBuf {
        self.dir.join(JOURNAL_FILE)
    }

    /// The run's `summary.json`.
    pub fn summary_file(&self) -> PathBuf {
        self.dir.join(SUMMARY_FILE)
    }

    /// The run's index for listings (`index.json`, kept by the CLI).
    pub fn index_file(&self) -> PathBuf {
        self.dir.join(INDEX_FILE)
    }

    /// The note a run on a durable engine leaves (`engine.json`).
    pub fn engine_file(&self) -> PathBuf {
        self.dir.join(ENGINE_FILE)
    }

    /// The folder of whole answers too long for a tool result (`results/`).
    pub fn results_dir(&self) -> PathBuf {
        self.dir.join(RESULTS_DIR)
    }

    /// Where the whole final answer of the agent at `agent` is kept when it is too long for
    /// its parent's tool result (`main/explore#2` → `results/main.explore-2.md`).
    pub fn result_file(&self, agent: &AgentPath) -> PathBuf {
        self.dir.join(Self::result_name(agent))
    }

    /// [`result_file`](Self::result_file) relative to the run folder, as `summary.json`
    /// names it.
    pub fn result_name(agent: &AgentPath) -> String {
        format!("{RESULTS_DIR}/{}.md", agent.transcript_key())
    }

    /// The run's transcript, every agent's lines (`transcript.jsonl`).
    pub fn transcript_file(&self) -> PathBuf {
        self.dir.join(TRANSCRIPT_FILE)
    }

    /// The file of the agent at `agent` alone (`main/explore#2` → `main.explore-2.jsonl`):
    /// kept for an agent whose hooks are handed its path; runs written before the run-wide
    /// transcript kept every agent's lines in one.
    pub fn agent_file(&self, agent: &AgentPath) -> PathBuf {
        self.dir.join(format!("{}.{JSONL}", agent.transcript_key()))
    }

    /// Every agent's transcript lines, in order, by path (a parent before its subagents):
    /// those of a run written before the run-wide transcript from each agent's file, then
    /// those of `transcript.jsonl`. A line that names no agent belongs to the header it
    /// follows.
    pub fn transcripts(&self) -> Vec<(AgentPath, Vec<TranscriptLine<'static>>)> {
        let mut agents: BTreeMap<AgentPath, Vec<TranscriptLine<'static>>> = BTreeMap::new();
        let files = self.agent_files().into_iter();
        for file in files.chain(Some(self.transcript_file())) {
            let Ok(lines) = TranscriptLine::read_all(&file) else {
                continue;
            };
            let mut whose: Option<AgentPath> = None;
            for line in lines {
                if let TranscriptRecord::Agent(header) = &line.record {
                    whose = Some(AgentPath::parse(&header.path));
                }
                if let Some(agent) = &line.agent {
                    whose = Some(AgentPath::parse(agent));
                }
                if let Some(path) = &whose {
                    agents.entry(path.clone()).or_default().push(line);
                }
            }
        }
        agents.into_iter().collect()
    }

    /// Whether the folder holds agents' transcripts of their own from before the run-wide
    /// transcript.
    pub fn has_agent_files(&self) -> bool {
        !self.agent_files().is_empty()
    }

    /// The `.jsonl` files that are agents' transcripts from before the run-wide one, by
    /// name: their first line is an agent's header naming no agent (the copies kept for
    /// hooks name theirs; the journal, and anything else, is left alone).
    pub fn agent_files(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == JSONL))
            .filter(|p| starts_as_agent_file(p))
            .collect();
        files.sort();
        files
    }

    /// Whether the folder holds a run: a summary, a transcript, or an engine run's note.
    pub fn holds_a_run(&self) -> bool {
        self.summary_file().is_file()
            || self.engine_file().is_file()
            || self.transcript_file().is_file()
            || self.has_agent_files()
    }

    /// Writes `summary.json`.
    ///
    /// Written beside it and renamed into place: a disk too full for it leaves the one it
    /// had (or none), never a file cut short.
    pub fn write_summary(&self, summary: &impl Serialize) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(summary).map_err(std::io::Error::other)?;
        write_replacing(&self.summary_file(), (text + "\n").as_bytes())
    }
}

/// Writes `bytes` to `file` through a file beside it renamed into place: a disk too full
/// for them leaves the copy `file` had (or none), never a file cut short.
pub(crate) fn write_replacing(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = file.file_name().unwrap_or_default().to_owned();
    name.push(".new");
    let new = file.with_file_name(name);
    let written = std::fs::write(&new, bytes).and_then(|()| std::fs::rename(&new, file));
    if written.is_err() {
        let _ = std::fs::remove_file(&new);
    }
    written
}

/// Whether git tracks `file` in the repository of `project`; when git cannot say, it is
/// taken to, so the file is left alone.
fn tracked(project: &Path, file: &Path) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(project)
        .args(["ls-files", "--error-unmatch", "--"])
        .arg(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_or(true, |s| s.success())
}

/// Whether the first line of `file` is an agent's header that names no agent: the first
/// line of an agent's transcript written before the run-wide one.
fn starts_as_agent_file(file: &Path) -> bool {
    let Ok(f) = std::fs::File::open(file) else {
        return false;
    };
    let mut line = String::new();
    if std::io::BufReader::new(f).read_line(&mut line).is_err() {
        return false;
    }
    TranscriptLine::parse(&line)
        .is_some_and(|l| l.agent.is_none() && matches!(l.record, TranscriptRecord::Agent(_)))
}

/// A new run id: the UTC time and the process id (`20261201-101500-1234`).
pub fn new_run_id() -> String {
    format!(
        "{}-{}",
        utc_stamp(std::time::SystemTime::now()),
        std::process::id()
    )
}

/// `YYYYMMDD-HHMMSS` (UTC) for a moment.
fn utc_stamp(at: std::time::SystemTime) -> String {
    // "2026-11-29T17:50:00Z" → "20261129-175000"
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .chars()
        .filter_map(|c| match c {
            'T' => Some('-'),
            c if c.is_ascii_digit() => Some(c),
            _ => None,
        })
        .collect()
}

/// Where an agent sits in its run's tree: the primary agent's type (`main`), then for each
/// subagent below it its type and its number among its run's agents of that type
/// (`main/explore#2`). Written and read as that text; any text reads back as itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct AgentPath {
    /// From the primary agent down; never empty. Ordered as a tree is read: a parent before
    /// its subagents, numbers compared as numbers.
    segments: Vec<Segment>,
}

/// One step of an agent path: `explore#2`, or the primary agent's `main`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Segment {
    agent_type: String,
    ordinal: Option<u32>,
}

impl Segment {
    /// `explore#2` → (`explore`, 2); a segment whose tail is not a plain number (`a#01`,
    /// `main`) is all type, so every segment reads back as written.
    fn parse(text: &str) -> Self {
        let numbered = text.rsplit_once('#').and_then(|(kind, n)| {
            let plain = !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'));
            let n: u32 = n.parse().ok().filter(|_| plain)?;
            Some((kind, n))
        });
        match numbered {
            Some((kind, n)) => Self {
                agent_type: kind.to_owned(),
                ordinal: Some(n),
            },
            None => Self {
                agent_type: text.to_owned(),
                ordinal: None,
            },
        }
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ordinal {
            Some(n) => write!(f, "{}#{n}", self.agent_type),
            None => f.write_str(&self.agent_type),
        }
    }
}

impl AgentPath {
    /// The primary agent of type `agent_type`.
    pub fn primary(agent_type: &str) -> Self {
        Self {
            segments: vec![Segment {
                agent_type: agent_type.to_owned(),
                ordinal: None,
            }],
        }
    }

    /// Reads a path as [`Display`](fmt::Display) writes it.
    pub fn parse(text: &str) -> Self {
        Self {
            segments: text.split('/').map(Segment::parse).collect(),
        }
    }

    /// The subagent of type `agent_type` numbered `ordinal`, started by this agent.
    pub fn child(&self, agent_type: &str, ordinal: u32) -> Self {
        let mut segments = self.segments.clone();
        segments.push(Segment {
            agent_type: agent_type.to_owned(),
            ordinal: Some(ordinal),
        });
        Self { segments }
    }

    /// The agent that started this one; `None` for the primary agent.
    pub fn parent(&self) -> Option<Self> {
        let (_, up) = self.segments.split_last()?;
        (!up.is_empty()).then(|| Self {
            segments: up.to_vec(),
        })
    }

    fn last(&self) -> Option<&Segment> {
        self.segments.last()
    }

    /// The agent's type.
    pub fn agent_type(&self) -> &str {
        self.last().map_or("", |s| s.agent_type.as_str())
    }

    /// The agent's number among its run's agents of its type; `None` for the primary agent.
    pub fn ordinal(&self) -> Option<u32> {
        self.last().and_then(|s| s.ordinal)
    }

    /// How deep it is: 0 for the primary agent.
    pub fn depth(&self) -> usize {
        self.segments.len().saturating_sub(1)
    }

    /// Its name in a tree: the last step of its path (`explore#2`).
    pub fn name(&self) -> String {
        self.last().map(Segment::to_string).unwrap_or_default()
    }

    /// The name of its transcript in the run folder, without the extension
    /// (`main/explore#2` → `main.explore-2`).
    pub fn transcript_key(&self) -> String {
        self.to_string().replace('/', ".").replace('#', "-")
    }
}

impl fmt::Display for AgentPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{segment}")?;
        }
        Ok(())
    }
}

impl From<&str> for AgentPath {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for AgentPath {
    fn from(text: String) -> Self {
        Self::parse(&text)
    }
}

impl From<AgentPath> for String {
    fn from(path: AgentPath) -> Self {
        path.to_string()
    }
}

impl std::str::FromStr for AgentPath {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::parse(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::transcript::RunTranscript;

    #[test]
    fn the_gitignore_is_written_in_git_only_and_an_old_one_of_cadres_brought_up_to_date() {
        let project = tempfile::tempdir().unwrap();
        let file = project.path().join(".cadre/.gitignore");
        assert!(!RunDir::write_gitignore(project.path()).unwrap());
        assert!(!file.exists());
        git(project.path(), &["init", "-q"]);
        assert!(RunDir::write_gitignore(project.path()).unwrap());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), GITIGNORE);
        assert!(!RunDir::write_gitignore(project.path()).unwrap());
        std::fs::write(&file, OLD_GITIGNORE).unwrap();
        assert!(RunDir::write_gitignore(project.path()).unwrap());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), GITIGNORE);
        // An old one that git tracks stays as committed.
        std::fs::write(&file, OLD_GITIGNORE).unwrap();
        git(project.path(), &["add", "-f", ".cadre/.gitignore"]);
        assert!(!RunDir::write_gitignore(project.path()).unwrap());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), OLD_GITIGNORE);
        git(
            project.path(),
            &["rm", "-q", "--cached", ".cadre/.gitignore"],
        );
        // The user's own is kept.
        std::fs::write(&file, "mine\n").unwrap();
        assert!(!RunDir::write_gitignore(project.path()).unwrap());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine\n");
    }

    /// Runs git in `dir`; fails the test if it fails.
    fn git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .current_dir(dir)
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    #[test]
    fn a_replacing_write_that_fails_keeps_the_copy_there_was() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("answer.md");
        write_replacing(&file, b"first").unwrap();
        write_replacing(&file, b"good copy").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "good copy");
        // The file beside it cannot be written (as on a full disk): the copy stays whole.
        std::fs::create_dir(dir.path().join("answer.md.new")).unwrap();
        assert!(write_replacing(&file, b"lost").is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "good copy");
    }

    #[test]
    fn stamps_are_utc_dates() {
        let at = |s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        assert_eq!(utc_stamp(at(0)), "19700101-000000");
        assert_eq!(utc_stamp(at(1_709_210_096)), "20240229-123456");
    }

    #[test]
    fn agent_paths_read_back_as_written() {
        let path = AgentPath::primary("main")
            .child("code", 1)
            .child("explore", 12);
        assert_eq!(path.to_string(), "main/code#1/explore#12");
        assert_eq!(AgentPath::parse("main/code#1/explore#12"), path);
        assert_eq!(path.agent_type(), "explore");
        assert_eq!(path.ordinal(), Some(12));
        assert_eq!(path.depth(), 2);
        assert_eq!(path.name(), "explore#12");
        assert_eq!(path.transcript_key(), "main.code-1.explore-12");
        assert_eq!(path.parent(), Some(AgentPath::parse("main/code#1")));
        assert_eq!(AgentPath::parse("main").parent(), None);
        assert_eq!(AgentPath::parse("main").ordinal(), None);
        // Text of any shape reads back as itself.
        for text in [
            "main",
            "a#01",
            "a#",
            "#",
            "x#-1",
            "a//b",
            "",
            "b#4294967296",
            "é#3",
        ] {
            assert_eq!(AgentPath::parse(text).to_string(), text);
        }
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(json, "\"main/code#1/explore#12\"");
        assert_eq!(serde_json::from_str::<AgentPath>(&json).unwrap(), path);
    }

    #[test]
    fn agent_paths_sort_as_a_tree_with_numbers_as_numbers() {
        let mut paths: Vec<AgentPath> = [
            "main/explore#10",
            "main/explore#2",
            "main",
            "main/code#1/explore#1",
            "main/code#1",
        ]
        .map(AgentPath::parse)
        .to_vec();
        paths.sort();
        let shown: Vec<String> = paths.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "main",
                "main/code#1",
                "main/code#1/explore#1",
                "main/explore#2",
                "main/explore#10"
            ]
        );
    }

    /// A run written before the run-wide transcript kept a file per agent, its lines
    /// naming none: they read first, then what the run-wide file adds when it goes on.
    #[test]
    fn transcripts_of_earlier_versions_read_with_the_run_wide_one() {
        let project = tempfile::tempdir().unwrap();
        let run = RunDir::create(&RunDir::runs_root(project.path())).unwrap();
        let main = AgentPath::parse("main");
        std::fs::write(
            run.agent_file(&main),
            concat!(
                r#"{"t":"2026-12-01T10:00:00Z","type":"agent","path":"main"}"#,
                "\n",
                r#"{"t":"2026-12-01T10:00:01Z","type":"message","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}"#,
                "\n",
            ),
        )
        .unwrap();
        assert_eq!(run.agent_files(), [run.agent_file(&main)]);
        assert!(run.holds_a_run());
        let t = std::sync::Arc::new(RunTranscript::open(&run).unwrap());
        assert_eq!(t.earlier("main").messages, 1);
        let again = t.agent("main", None);
        assert_eq!(again.earlier().messages, 1);
        again.message(&cadre_model::Message::new(
            cadre_model::Role::Assistant,
            vec![cadre_model::ContentBlock::text("hello")],
        ));
        let read = run.transcripts();
        assert_eq!(read.len(), 1);
        let kinds: Vec<bool> = read[0]
            .1
            .iter()
            .map(|l| matches!(l.record, TranscriptRecord::Message { .. }))
            .collect();
        assert_eq!(kinds, [false, true, true]);
        assert_eq!(read[0].1[2].agent.as_deref(), Some("main"));
    }

    #[test]
    fn a_run_folder_knows_its_files() {
        let project = tempfile::tempdir().unwrap();
        let runs = RunDir::runs_root(project.path());
        assert_eq!(runs, project.path().join(".cadre/runs"));
        assert!(RunDir::all_in(&runs).unwrap().is_empty());
        let run = RunDir::create_named(&runs, "20261201-101500-7").unwrap();
        assert_eq!(run.path(), RunDir::path_in(project.path(), run.id()));
        assert_eq!(run.journal_file(), run.path().join("journal.jsonl"));
        assert_eq!(run.summary_file(), run.path().join("summary.json"));
        assert_eq!(run.engine_file(), run.path().join("engine.json"));
        let explorer = AgentPath::parse("main/explore#2");
        assert_eq!(
            run.result_file(&explorer),
            run.path().join("results/main.explore-2.md")
        );
        assert!(run.result_file(&explorer).starts_with(run.results_dir()));
        assert_eq!(run.transcript_file(), run.path().join("transcript.jsonl"));
        assert_eq!(
            run.agent_file(&explorer),
            run.path().join("main.explore-2.jsonl")
        );
        assert!(!run.holds_a_run());
        // A journal is no transcript; an agent's header makes one.
        std::fs::write(run.journal_file(), "{\"step\":\"run\"}\n").unwrap();
        assert!(run.transcripts().is_empty());
        assert!(!run.holds_a_run());
        let header = |path: &AgentPath| {
            TranscriptRecord::Agent(crate::record::transcript::AgentHeader {
                path: path.to_string().into(),
                ..Default::default()
            })
        };
        let t = std::sync::Arc::new(RunTranscript::open(&run).unwrap());
        // The copy kept for hooks is not read as a transcript of its own.
        t.agent(&explorer.to_string(), Some(&run.agent_file(&explorer)))
            .write(header(&explorer));
        assert!(run.holds_a_run());
        assert!(run.agent_files().is_empty());
        let read = run.transcripts();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].0, explorer);
        assert_eq!(read[0].1.len(), 1);
        assert_eq!(
            std::fs::read(run.agent_file(&explorer)).unwrap(),
            std::fs::read(run.transcript_file()).unwrap()
        );
        let again = RunDir::create_named(&runs, "20261201-101500-7").unwrap();
        assert_eq!(again.id(), "20261201-101500-7-1");
        let ids: Vec<String> = RunDir::all_in(&runs)
            .unwrap()
            .iter()
            .map(|r| r.id().to_owned())
            .collect();
        assert_eq!(ids, ["20261201-101500-7", "20261201-101500-7-1"]);
        assert!(RunDir::create_named(&runs, "../x").is_err());
    }
}
