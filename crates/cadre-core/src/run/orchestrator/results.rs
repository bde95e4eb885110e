//! Results that arrive whole: a subagent's final answer too long for its parent's tool
//! result is kept whole in a file (the run folder's `results/`), and the parent gets its
//! head, its size and the file's path, which `read_file` reads — read-only agents and
//! agents in a worktree included.
//!
//! A run without a run folder (a library run without `runs_dir`) keeps these files in a
//! folder of the system's temporary directory that belongs to the orchestrator and is
//! removed when it is dropped.

use super::run_context::RunContext;
use super::spawn::subagent_result;
use super::Orchestrator;
use crate::record::failure::Lost;
use crate::record::run_dir::{write_replacing, RunDir};
use crate::run::task_result::SubagentError;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use std::path::{Path, PathBuf};

/// Room kept in a tool result beside an answer's head: the note that says where the rest
/// is, and what a failed or isolated subagent's result adds around its answer.
const ROOM_AROUND: usize = 2_000;

impl Orchestrator {
    /// The most of an answer a parent's tool result holds as it is.
    fn answer_room(&self) -> usize {
        self.config
            .tool_limits
            .max_output_bytes
            .saturating_sub(ROOM_AROUND)
    }

    /// Where `summary.json` says the whole answer `text` of the subagent at `path` is
    /// (relative to the run folder), when it is too long to reach its parent whole and the
    /// run has a folder.
    pub(super) fn result_name(
        &self,
        run: &RunContext,
        path: &AgentPath,
        depth: u32,
        text: &str,
    ) -> Option<String> {
        (depth > 0 && text.len() > self.answer_room() && run.dir.is_some())
            .then(|| RunDir::result_name(path))
    }

    /// What the parent's `Task` call gets from the subagent at `path` that stopped with
    /// `stop` and answered `text`: the answer, or, when it is too long, its head, its size
    /// and the file that keeps it whole.
    pub(super) fn task_result(
        &self,
        run: &RunContext,
        path: &AgentPath,
        stop: StopKind,
        text: String,
    ) -> Result<String, SubagentError> {
        let text = self.deliverable(run, path, text);
        subagent_result(path, stop, text)
    }

    /// `text` as it reaches the parent: itself when it fits; else kept whole in a file,
    /// and its head with where the rest is.
    fn deliverable(&self, run: &RunContext, path: &AgentPath, text: String) -> String {
        let room = self.answer_room();
        if text.len() <= room {
            return text;
        }
        let (file, ready) = self.result_file(run, path);
        let file = match ready.and_then(|()| write_whole(&file, &text)) {
            Ok(file) => file,
            Err(e) => {
                // Nothing to point at: the answer would be lost, so the run stops here,
                // before the parent's result is journaled, and a resume hands the answer
                // on again. Should the parent, stopping too, read this, it is told.
                let told = format!(
                    "[The answer of {path} is {} bytes, more than a tool result holds, and it could not be kept in a file ({e}): its middle is cut below.]",
                    text.len()
                );
                self.failure.fail(Lost::Result {
                    agent: path.clone(),
                    file,
                    source: e,
                });
                let cut = cadre_tools::cap_output(&text, room);
                return format!("{told}\n\n{cut}");
            }
        };
        head_with_note(path, &text, &file, room)
    }

    /// The file that keeps the whole answer of the agent at `path`, and whether its folder
    /// is ready: the run folder's `results/`, or the orchestrator's temporary folder.
    fn result_file(&self, run: &RunContext, at: &AgentPath) -> (PathBuf, std::io::Result<()>) {
        match &run.dir {
            Some(dir) => {
                let ready = std::fs::create_dir_all(dir.results_dir());
                (dir.result_file(at), ready)
            }
            None => {
                let ready = self.results.make();
                let name = RunDir::result_name(at);
                let name = Path::new(&name).file_name().map(PathBuf::from);
                (self.results.dir.join(name.unwrap_or_default()), ready)
            }
        }
    }
}

/// Writes `text` whole to `file`; returns its absolute path. A write that fails (a full
/// disk) leaves the copy that was there: a resumed run writes a finished child's answer again.
fn write_whole(file: &Path, text: &str) -> std::io::Result<PathBuf> {
    write_replacing(file, text.as_bytes())?;
    file.canonicalize()
}

/// The head of `text` that fits in `room` bytes, cut after a whole line when one ends in
/// its second half, with a note before it (its size, the file, where to read on) and
/// after it (what is left).
fn head_with_note(path: &AgentPath, text: &str, file: &Path, room: usize) -> String {
    let mut end = room.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(nl) = text[..end].rfind('\n').filter(|nl| *nl >= end / 2) {
        end = nl + 1;
    }
    let head = &text[..end];
    let lines = text.lines().count();
    // The line the rest starts on: the next one, or the one cut part-way.
    let next = head.matches('\n').count() + 1;
    let file = file.display();
    format!(
        "[The answer of {path} is {} bytes ({lines} lines), more than a tool result holds. Its first {} bytes are below; the whole answer is kept in {file} — read the rest with read_file (path \"{file}\", offset {next}).]\n\n{head}\n\n[… {} more bytes of the answer of {path} are in {file}, from line {next}.]",
        text.len(),
        head.len(),
        text.len() - head.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::head_with_note;
    use std::path::Path;

    #[test]
    fn the_head_ends_at_a_line_and_says_where_the_rest_starts() {
        let text: String = (1..=100).map(|i| format!("line {i:03}\n")).collect();
        let note = head_with_note(&"main/explore#1".into(), &text, Path::new("/r/a.md"), 205);
        // 9 bytes a line: 22 whole lines fit in 205 bytes.
        assert!(note.contains("is 900 bytes (100 lines)"), "{note}");
        assert!(note.contains("first 198 bytes"), "{note}");
        assert!(
            note.contains("line 022\n") && !note.contains("line 023"),
            "{note}"
        );
        assert!(note.contains("offset 23"), "{note}");
        assert!(note.contains("702 more bytes"), "{note}");
        // One long line is cut part-way, on a character boundary, and read again from it.
        let wide = "é".repeat(300);
        let note = head_with_note(&"p".into(), &wide, Path::new("/r/b.md"), 101);
        assert!(
            note.contains("first 100 bytes") && note.contains("offset 1"),
            "{note}"
        );
    }
}
