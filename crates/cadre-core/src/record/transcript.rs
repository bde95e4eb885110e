//! Run folders on disk: one JSONL transcript per agent and a summary per run.

use cadre_model::Message;
use serde::Serialize;
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// `.cadre/runs/<run-id>/`: where one run's transcripts and summary go.
#[derive(Debug, Clone)]
pub struct RunDir {
    dir: PathBuf,
    id: String,
}

impl RunDir {
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
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Self {
            dir: dir.to_path_buf(),
            id,
        })
    }

    /// The run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Opens the transcript of the agent at `path` (`main/explore#2` → `main.explore-2.jsonl`).
    /// An agent that goes on after a resume writes its whole history anew.
    pub fn transcript(&self, agent_path: &str) -> std::io::Result<Transcript> {
        let name = agent_path.replace('/', ".").replace('#', "-");
        let file = File::create(self.dir.join(format!("{name}.jsonl")))?;
        Ok(Transcript {
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Writes `summary.json`.
    pub fn write_summary(&self, summary: &impl Serialize) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(summary).map_err(std::io::Error::other)?;
        std::fs::write(self.dir.join("summary.json"), text + "\n")
    }
}

/// One agent's history as JSON Lines, each line written whole and flushed, so the file is
/// valid JSONL whenever the run stops.
#[derive(Debug)]
pub struct Transcript {
    out: Mutex<BufWriter<File>>,
}

impl Transcript {
    /// Appends one record (`{"type": kind, "t": time, ...fields}`); `t` is the UTC time it
    /// was written (RFC 3339, milliseconds), so a run's agents can be laid on one timeline.
    pub fn record(&self, kind: &str, fields: Value) {
        let t = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let mut line = json!({"type": kind, "t": t});
        if let (Value::Object(l), Value::Object(f)) = (&mut line, fields) {
            l.extend(f);
        }
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let written = serde_json::to_writer(&mut *out, &line)
            .map_err(std::io::Error::other)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            tracing::warn!("could not write a transcript line: {e}");
        }
    }

    /// Appends one message of the conversation.
    pub fn message(&self, message: &Message) {
        self.record("message", json!({ "message": message }));
    }
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

    #[test]
    fn stamps_are_utc_dates() {
        let at = |s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        assert_eq!(utc_stamp(at(0)), "19700101-000000");
        assert_eq!(utc_stamp(at(1_709_210_096)), "20240229-123456");
    }

    #[test]
    fn transcript_lines_are_whole_json() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path()).unwrap();
        let t = run.transcript("main/explore#2").unwrap();
        t.message(&Message::user_text("hi"));
        t.record("outcome", json!({"stop": "done"}));
        let text = std::fs::read_to_string(run.path().join("main.explore-2.jsonl")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["message"]["content"][0]["text"], "hi");
        assert_eq!(lines[1]["type"], "outcome");
        for line in &lines {
            let t = line["t"].as_str().unwrap();
            assert!(humantime::parse_rfc3339(t).is_ok(), "{t}");
        }
    }
}
