//! A run's folder on disk (`<project>/.cadre/runs/<run-id>/`): where its journal, summary,
//! engine note and transcript are, and the path that names each agent.

use crate::record::journal::JOURNAL_FILE;
use crate::vocab::agent_path::AgentPath;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The run's summary, written when it ends.
pub const SUMMARY_FILE: &str = "summary.json";

/// The file a run's listing reads instead of the whole run (see [`RunDir::index_file`]).
pub const INDEX_FILE: &str = "index.json";

/// What a run on a durable engine leaves in its folder: how to find the run again.
pub const ENGINE_FILE: &str = "engine.json";

/// What a workflow run on a durable engine sends each item with (settings, agent types,
/// rules, workspace), kept so a resume sends what the run began with.
pub const ENGINE_CALL_FILE: &str = "engine-call.json";

/// The records of a workflow run's agents that ended on a durable engine, one a line, kept
/// across the run's parts.
pub const ENGINE_RECORDS_FILE: &str = "engine-records.jsonl";

/// The attempts a workflow run on a durable engine submitted, one a line (call, attempt,
/// agent, invocation), each written before it goes out.
pub const ENGINE_SUBMITTED_FILE: &str = "engine-submitted.jsonl";

/// The mark of a `workflow retry --failed` on a durable engine that has not ended yet: a
/// resume of the run goes on retrying its failed items.
pub const ENGINE_RETRYING_FILE: &str = "engine-retrying";

/// The folder of a run's whole subagent answers that were too long for a tool result.
pub const RESULTS_DIR: &str = "results";

/// The run's transcript, in its run folder.
pub const TRANSCRIPT_FILE: &str = "transcript.jsonl";

/// The extension of transcripts (the journal has it too).
pub(crate) const JSONL: &str = "jsonl";

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

    /// The call an engine workflow run sends each item with (`engine-call.json`).
    pub fn engine_call_file(&self) -> PathBuf {
        self.dir.join(ENGINE_CALL_FILE)
    }

    /// The records of an engine workflow run's ended agents (`engine-records.jsonl`).
    pub fn engine_records_file(&self) -> PathBuf {
        self.dir.join(ENGINE_RECORDS_FILE)
    }

    /// The attempts an engine workflow run submitted (`engine-submitted.jsonl`).
    pub fn engine_submitted_file(&self) -> PathBuf {
        self.dir.join(ENGINE_SUBMITTED_FILE)
    }

    /// The mark of an engine workflow retry not yet ended (`engine-retrying`).
    pub fn engine_retrying_file(&self) -> PathBuf {
        self.dir.join(ENGINE_RETRYING_FILE)
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
    let mut git = std::process::Command::new("git");
    // cadre's telemetry settings are not the user's git's.
    for name in cadre_tools::telemetry_env_names(std::env::vars_os()) {
        git.env_remove(name);
    }
    git.arg("-C")
        .arg(project)
        .args(["ls-files", "--error-unmatch", "--"])
        .arg(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_or(true, |s| s.success())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::transcript::{RunTranscript, TranscriptRecord};

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
        assert_eq!(t.earlier(&main).messages, 1);
        let again = t.agent(&main, None);
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
        assert_eq!(
            read[0].1[2].agent.as_ref().map(AgentPath::as_str),
            Some("main")
        );
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
                path: path.clone(),
                ..Default::default()
            })
        };
        let t = std::sync::Arc::new(RunTranscript::open(&run).unwrap());
        // The copy kept for hooks is not read as a transcript of its own.
        t.agent(&explorer, Some(&run.agent_file(&explorer)))
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
