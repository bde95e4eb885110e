//! The run journal: every step of every agent, appended before the loop acts on it, so a
//! run killed at any moment can be rebuilt without sending a journaled model request again
//! or running a journaled tool call again.
//!
//! The [`Journal`] trait is the seam: the local JSON Lines file ([`FileJournal`],
//! `.cadre/runs/<id>/journal.jsonl`) is the default, and a durable execution engine can
//! stand in for it without the loop knowing. Steps are keyed by agent path, so an agent
//! can be rebuilt from its own steps alone; a parent records which subagent each `Task`
//! call started ([`Step::Spawned`]), so subagents are found again by call id.

use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use crate::vocab::team::TeamChange;
use async_trait::async_trait;
use cadre_model::Response;
use cadre_tools::{Rerun, ToolOutput};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The journal's file name inside a run folder.
pub const JOURNAL_FILE: &str = "journal.jsonl";

/// Why the journal could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Reading or writing failed.
    #[error("journal {}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A line in the middle of the file is not a step: the file was changed or damaged.
    #[error("journal {}: line {line} is not a step ({message}); the journal is damaged", file.display())]
    Damaged {
        /// The file.
        file: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What the parser said.
        message: String,
    },
    /// A step could not be encoded.
    #[error("a journal step could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
    /// The step was not written: an earlier write failed, and a step written after a lost
    /// one would rebuild a run that never was.
    #[error("journal {}: not written, as an earlier step could not be", file.display())]
    Closed {
        /// The file.
        file: PathBuf,
    },
    /// The step was not written: the run is stopping, as a file it keeps could not be
    /// written (see `record::failure`).
    #[error("not journaled: the run is stopping, as a file it keeps could not be written")]
    Stopped,
}

/// Where the steps of a run go and come back from, and how the loop's effects run.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Appends `step`; when this returns, the step survives the process being killed.
    async fn append(&self, step: &Step) -> Result<(), JournalError>;
    /// Every step journaled for the agent at `agent` (the run header for `""`), in order.
    async fn steps(&self, agent: &str) -> Result<Vec<Step>, JournalError>;
    /// How `work`, the effect `effect` of the agent at `agent`, runs. The default hands it
    /// back to run here and now ([`Run::Here`]: a model request gives way to a cancel, a
    /// tool call stops by itself, within its grace); a durable engine returns one durable
    /// step instead ([`Run::Durably`]), which runs it or hands back the result it kept.
    fn once(&self, agent: &str, effect: Effect<'_>, work: Work) -> Run {
        let _ = (agent, effect);
        Run::Here(work)
    }

    /// Lets go of the steps read when the journal was opened, once the run is rebuilt from
    /// them: [`steps`](Self::steps) gives none after. By default there is nothing to let go.
    fn release_earlier(&self) {}
}

/// How a journal has an effect run (see [`Journal::once`]).
pub enum Run {
    /// Run it here and now (`run_here`).
    Here(Work),
    /// Await this durable step instead.
    Durably(futures::future::BoxFuture<'static, EffectOutcome>),
}

/// Runs an effect in this process: what a journal that keeps no effects does.
pub async fn run_here(effect: Effect<'_>, work: Work, cancel: &CancellationToken) -> EffectOutcome {
    match effect {
        Effect::Model => tokio::select! {
            biased;
            () = cancel.cancelled() => EffectOutcome::Stopped(StopKind::Cancelled),
            done = work => EffectOutcome::Ran(done),
        },
        Effect::Tool { .. } => EffectOutcome::Ran(work.await),
    }
}

/// An effect of the loop that a journal runs ([`Journal::once`]).
#[derive(Debug, Clone, Copy)]
pub enum Effect<'a> {
    /// A model request (a compaction's request is one too); it gives an [`Done::Model`].
    Model,
    /// A tool call; it gives a [`Done::Tool`].
    Tool {
        /// Its `tool_use` id.
        id: &'a str,
        /// The tool.
        name: &'a str,
        /// What may be done with it after a crash: the tool's own say.
        rerun: Rerun,
    },
}

/// What a model request brought, as a durable step keeps it: a final error is kept too,
/// so a replay stops the same way instead of asking again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelStep {
    /// The response.
    Response(Response),
    /// The server refused the request as too long for the context window.
    TooLong(String),
    /// The request failed for good (after the client's retries).
    Error(String),
}

/// What an effect gave: the value a durable step keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Done {
    /// A model request's result.
    Model(ModelStep),
    /// A tool call's output.
    Tool(ToolOutput),
}

/// The work of one effect.
pub type Work = futures::future::BoxFuture<'static, Done>;

/// What became of an effect handed to [`Journal::once`].
#[derive(Debug, Clone, PartialEq)]
pub enum EffectOutcome {
    /// It ran, now or in an earlier attempt: what it gave.
    Ran(Done),
    /// A changing tool had started in an attempt that died before its result was kept:
    /// it may or may not have taken effect, so it is not run again.
    Interrupted,
    /// The agent must stop instead (the run's token budget is spent, or it was cancelled).
    Stopped(StopKind),
}

/// The journal as a JSON Lines file, one step per line, each written whole.
///
/// A line is written by the task that appends it, in one `write` to the file under a lock
/// held for that call alone. A thread of its own that batched lines was tried and measured:
/// the hand-off to it and back cost the fleet benchmark's journal section more than half
/// again the CPU per model turn, for writes that land in the page cache in microseconds.
#[derive(Debug)]
pub struct FileJournal {
    file: PathBuf,
    out: Mutex<Out>,
    /// The steps read when the journal was opened, by agent, for rebuilding; emptied once
    /// the run is rebuilt ([`Journal::release_earlier`]).
    earlier: Mutex<HashMap<String, Vec<Step>>>,
}

/// The journal file as it is written: its whole lines end at `len`; after a failed write it
/// takes no more (`closed`).
#[derive(Debug)]
struct Out {
    file: File,
    len: u64,
    closed: bool,
}

impl Out {
    /// Appends `line` whole, or leaves the file as it was and takes nothing more: a line
    /// cut by a full disk is cut off again, so the journal ends on its last whole step.
    fn append(&mut self, line: &[u8]) -> Result<(), Option<std::io::Error>> {
        if self.closed {
            return Err(None);
        }
        match self.file.write_all(line) {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.closed = true;
                // Shortening a file needs no room; should it fail too, the cut line is
                // dropped when the journal is next opened.
                let _ = self.file.set_len(self.len);
                Err(Some(e))
            }
        }
    }
}

/// What opening an existing journal found besides its steps.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenNotes {
    /// The last line was cut off (the process died while writing it) and was dropped; the
    /// step it held never took effect, since the loop acts only after a step is written.
    pub dropped_partial_line: bool,
}

impl FileJournal {
    /// Creates a new, empty journal in the run folder `dir`.
    pub fn create(dir: &Path) -> Result<Self, JournalError> {
        let file = dir.join(JOURNAL_FILE);
        let out = File::create(&file).map_err(|source| JournalError::Io {
            file: file.clone(),
            source,
        })?;
        Ok(Self {
            out: Mutex::new(Out {
                file: out,
                len: 0,
                closed: false,
            }),
            file,
            earlier: Mutex::default(),
        })
    }

    /// Opens the journal of the run folder `dir` to go on appending, reading its steps.
    pub fn open(dir: &Path) -> Result<(Self, OpenNotes), JournalError> {
        let file = dir.join(JOURNAL_FILE);
        let io = |source| JournalError::Io {
            file: file.clone(),
            source,
        };
        // Put by agent as they are read: a list of every step first would double the
        // memory a journal of thousands of agents takes while it is opened.
        let mut earlier: HashMap<String, Vec<Step>> = HashMap::new();
        let (keep_bytes, notes) = read_each_step(&file, |step| {
            let agent = step.agent().unwrap_or_default();
            match earlier.get_mut(agent) {
                Some(steps) => steps.push(step),
                None => {
                    earlier.insert(agent.to_owned(), vec![step]);
                }
            }
        })?;
        let mut groups: Vec<&mut [Step]> = earlier.values_mut().map(Vec::as_mut_slice).collect();
        with_texts(&mut groups);
        let out = OpenOptions::new().write(true).open(&file).map_err(io)?;
        // A cut-off last line is dropped so new steps start on a line of their own.
        out.set_len(keep_bytes).map_err(io)?;
        let mut out = out;
        std::io::Seek::seek(&mut out, std::io::SeekFrom::End(0)).map_err(io)?;
        Ok((
            Self {
                out: Mutex::new(Out {
                    file: out,
                    len: keep_bytes,
                    closed: false,
                }),
                file,
                earlier: Mutex::new(earlier),
            },
            notes,
        ))
    }

    /// Whether the journal holds no step read when it was opened (none once they were let
    /// go: [`Journal::release_earlier`]).
    pub fn is_empty(&self) -> bool {
        self.earlier().is_empty()
    }

    /// The steps read when it was opened, by agent.
    fn earlier(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Step>>> {
        self.earlier.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Journal for FileJournal {
    async fn append(&self, step: &Step) -> Result<(), JournalError> {
        // One write per line: a line is either whole in the file or cut off at its end.
        super::jsonl::with_line(step, |line| {
            let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
            out.append(line)
        })?
        .map_err(|e| match e {
            Some(source) => JournalError::Io {
                file: self.file.clone(),
                source,
            },
            None => JournalError::Closed {
                file: self.file.clone(),
            },
        })
    }

    async fn steps(&self, agent: &str) -> Result<Vec<Step>, JournalError> {
        Ok(self.earlier().get(agent).cloned().unwrap_or_default())
    }

    fn release_earlier(&self) {
        // Taken out first: the steps are dropped after the lock is let go.
        let earlier = std::mem::take(&mut *self.earlier());
        drop(earlier);
    }
}

/// What a run folder's journal says of the run as a whole.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunState {
    /// The primary agent's type.
    pub agent_type: String,
    /// The task it was given.
    pub task: String,
    /// How the primary agent's conversation ended (`Cancelled` for Ctrl-C), unless it is
    /// still open (never ended, or a follow-up came after its end).
    pub finished: Option<StopKind>,
}

/// The size of the journal of the run folder `dir`, in bytes; `None` when it cannot be read.
pub(crate) fn journal_len(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir.join(JOURNAL_FILE))
        .ok()
        .map(|m| m.len())
}

/// Reads the state of the run in folder `dir`; `None` when it has no journal.
pub fn run_state(dir: &Path) -> Result<Option<RunState>, JournalError> {
    let file = dir.join(JOURNAL_FILE);
    if !file.is_file() {
        return Ok(None);
    }
    let (steps, _, _) = read_steps(&file)?;
    Ok(RunState::from_steps(&steps))
}

/// A run folder opened to go on with: its journal, read once, open for appending, and what
/// it says of the run.
#[derive(Debug)]
#[non_exhaustive]
pub struct JournaledRun {
    /// The run folder.
    pub dir: PathBuf,
    /// Its journal.
    pub journal: FileJournal,
    /// What the journal says of the run.
    pub state: RunState,
    /// What opening it found (a cut-off last line).
    pub notes: OpenNotes,
}

impl JournaledRun {
    /// Opens the run folder `dir`; `None` when it has no journal, or one without a run header
    /// (made by an older cadre).
    pub fn open(dir: &Path) -> Result<Option<Self>, JournalError> {
        if !dir.join(JOURNAL_FILE).is_file() {
            return Ok(None);
        }
        let (journal, notes) = FileJournal::open(dir)?;
        // The header and the primary agent's steps are all that say how the run stands.
        let state = {
            let earlier = journal.earlier();
            let header = earlier.get("").and_then(|steps| steps.first());
            let primary = match header {
                Some(Step::Run { agent_type, .. }) => earlier.get(agent_type),
                _ => None,
            };
            RunState::from_steps(header.into_iter().chain(primary.into_iter().flatten()))
        };
        let Some(state) = state else {
            return Ok(None);
        };
        Ok(Some(Self {
            dir: dir.to_path_buf(),
            journal,
            state,
            notes,
        }))
    }
}

impl RunState {
    /// What `steps`, in journal order from the run header on, say of the run; `None`
    /// without a run header.
    fn from_steps<'a>(steps: impl IntoIterator<Item = &'a Step>) -> Option<Self> {
        let mut steps = steps.into_iter();
        let mut state = Self::header(steps.next()?)?;
        steps.for_each(|step| state.take(step));
        Some(state)
    }

    /// The state a run header begins; `None` for any other step.
    pub(crate) fn header(step: &Step) -> Option<Self> {
        let Step::Run {
            agent_type, task, ..
        } = step
        else {
            return None;
        };
        Some(Self {
            agent_type: agent_type.clone(),
            task: task.clone(),
            finished: None,
        })
    }

    /// Takes in the next `step` of the run: the primary agent's end ends its conversation,
    /// a new message to it opens it again.
    pub(crate) fn take(&mut self, step: &Step) {
        match step {
            Step::Finished { agent, stop, .. } if *agent == self.agent_type => {
                self.finished = Some(stop.clone())
            }
            Step::UserMessage { agent, .. } if *agent == self.agent_type => self.finished = None,
            _ => {}
        }
    }

    /// Whether `cadre resume` can carry it on: it never ended, was cancelled, or stopped
    /// as the model API failed (the request is sent again).
    pub fn resumable(&self) -> bool {
        self.finished.as_ref().is_none_or(StopKind::resumes)
    }

    /// Whether it can take a follow-up: it ended (a cancelled run too).
    pub fn continuable(&self) -> bool {
        self.finished.is_some()
    }
}

/// Gives the messages of `Delivered` steps journaled without their text the text of the
/// `Sent` step of the same message (sender, recipient, number), among the steps of all
/// `groups`.
fn with_texts(groups: &mut [&mut [Step]]) {
    let bare = |s: &Step| matches!(s, Step::Delivered { messages, .. } if messages.iter().any(|m| m.text.is_empty()));
    if !groups.iter().flat_map(|g| g.iter()).any(bare) {
        return;
    }
    let texts: HashMap<(String, String, u64), String> = groups
        .iter()
        .flat_map(|g| g.iter())
        .filter_map(|s| match s {
            Step::Team {
                change: TeamChange::Sent { message: m },
                ..
            } => Some(((m.from.clone(), m.to.clone(), m.seq), m.text.clone())),
            _ => None,
        })
        .collect();
    for step in groups.iter_mut().flat_map(|g| g.iter_mut()) {
        if let Step::Delivered { agent, messages } = step {
            for m in messages.iter_mut().filter(|m| m.text.is_empty()) {
                match texts.get(&(m.from.clone(), m.to.clone(), m.seq)) {
                    Some(text) => text.clone_into(&mut m.text),
                    None => tracing::warn!(
                        agent = %agent,
                        "the journal has no text for message #{} from {} to {}: it is read as empty",
                        m.seq,
                        m.from,
                        m.to
                    ),
                }
            }
        }
    }
}

/// Reads every step of a journal file. Returns the steps, how many bytes of the file are
/// whole lines, and whether a cut-off last line was dropped.
pub fn read_steps(file: &Path) -> Result<(Vec<Step>, u64, OpenNotes), JournalError> {
    let mut steps = Vec::new();
    let (whole, notes) = read_each_step(file, |step| steps.push(step))?;
    with_texts(&mut [&mut steps[..]]);
    Ok((steps, whole, notes))
}

/// Hands `each` every step of a journal file, in order, as it is read (messages delivered
/// without their text still lack it: see [`with_texts`]). Returns how many bytes of the
/// file are whole lines, and whether a cut-off last line was dropped.
fn read_each_step(
    file: &Path,
    mut each: impl FnMut(Step),
) -> Result<(u64, OpenNotes), JournalError> {
    let io = |source| JournalError::Io {
        file: file.to_path_buf(),
        source,
    };
    let reader = BufReader::new(File::open(file).map_err(io)?);
    let mut notes = OpenNotes::default();
    let mut whole = 0u64;
    let mut lines = reader.split(b'\n').peekable();
    let mut n = 0;
    while let Some(line) = lines.next() {
        n += 1;
        let line = line.map_err(io)?;
        let last = lines.peek().is_none();
        match serde_json::from_slice::<Step>(&line) {
            Ok(step) => {
                each(step);
                whole += line.len() as u64 + 1;
            }
            Err(_) if line.iter().all(u8::is_ascii_whitespace) => {
                whole += line.len() as u64 + 1;
            }
            Err(_) if last => notes.dropped_partial_line = true,
            Err(e) => {
                return Err(JournalError::Damaged {
                    file: file.to_path_buf(),
                    line: n,
                    message: e.to_string(),
                })
            }
        }
    }
    // The last line of a whole file ends with a newline that `split` does not count.
    let len = std::fs::metadata(file).map_err(io)?.len();
    Ok((whole.min(len), notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::team::Envelope;
    use cadre_model::Message;

    fn started(agent: &str) -> Step {
        Step::Started {
            agent: agent.into(),
            agent_type: "main".into(),
            description: "d".into(),
            history: vec![Message::user_text("hi")],
        }
    }

    #[tokio::test]
    async fn the_steps_read_on_opening_are_let_go_once_the_run_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let j = FileJournal::create(dir.path()).unwrap();
        j.append(&started("main")).await.unwrap();
        drop(j);
        let (j, _) = FileJournal::open(dir.path()).unwrap();
        assert_eq!(j.steps("main").await.unwrap().len(), 1);
        assert_eq!(
            j.steps("main").await.unwrap().len(),
            1,
            "read as often as asked"
        );
        j.release_earlier();
        assert!(j.is_empty());
        assert!(j.steps("main").await.unwrap().is_empty());
        // Appending goes on as before.
        j.append(&started("main/plan#1")).await.unwrap();
        let (steps, _, _) = read_steps(&dir.path().join(JOURNAL_FILE)).unwrap();
        assert_eq!(steps.len(), 2);
    }

    #[tokio::test]
    async fn steps_come_back_by_agent_and_a_cut_off_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let j = FileJournal::create(dir.path()).unwrap();
        j.append(&started("main")).await.unwrap();
        j.append(&started("main/explore#1")).await.unwrap();
        j.append(&Step::Finished {
            agent: "main".into(),
            stop: StopKind::Done,
            text: "ok".into(),
        })
        .await
        .unwrap();
        drop(j);
        let path = dir.path().join(JOURNAL_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"step\":\"fini");
        std::fs::write(&path, &text).unwrap();
        let (j, notes) = FileJournal::open(dir.path()).unwrap();
        assert!(notes.dropped_partial_line);
        assert_eq!(j.steps("main").await.unwrap().len(), 2);
        assert_eq!(j.steps("main/explore#1").await.unwrap().len(), 1);
        j.append(&started("main/plan#1")).await.unwrap();
        let (steps, _, notes) = read_steps(&path).unwrap();
        assert_eq!(steps.len(), 4);
        assert!(!notes.dropped_partial_line);
    }

    #[test]
    fn a_failed_write_closes_the_file_to_later_steps() {
        // Every write to /dev/full fails as on a full disk.
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut out = Out {
            file: full,
            len: 0,
            closed: false,
        };
        assert!(matches!(out.append(b"{}\n"), Err(Some(_))));
        assert!(out.closed);
        assert!(matches!(out.append(b"{}\n"), Err(None)));
    }

    #[tokio::test]
    async fn a_damaged_middle_line_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let run = "{\"step\":\"run\",\"agent_type\":\"main\",\"task\":\"t\",\"model\":\"m\"}";
        std::fs::write(&path, format!("{run}\nnot json\n{run}\n")).unwrap();
        let e = FileJournal::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("line 2 is not a step"), "{e}");
    }

    #[tokio::test]
    async fn a_path_of_another_shape_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        // Written by hand, as an older or damaged journal may hold it: kept, not refused.
        let odd = "main//w#01/#";
        let line = format!(
            "{{\"step\":\"cleared\",\"agent\":\"{odd}\",\"keep\":2}}\n\
             {{\"step\":\"cleared\",\"agent\":\"main/w#1\",\"keep\":3}}\n"
        );
        std::fs::write(&path, &line).unwrap();
        let (j, _) = FileJournal::open(dir.path()).unwrap();
        let steps = j.steps(odd).await.unwrap();
        assert_eq!(steps.len(), 1);
        let agent = steps[0].path().unwrap();
        assert_eq!(agent.as_str(), odd);
        assert_eq!(agent.name(), "#");
        assert_eq!(agent.depth(), 3);
        let w = j.steps("main/w#1").await.unwrap();
        assert_eq!(w[0].path().unwrap().ordinal(), Some(1));
        // It is written back as it was read.
        let again = serde_json::to_string(&steps[0]).unwrap();
        assert_eq!(Some(again.as_str()), line.lines().next());
    }

    #[tokio::test]
    async fn a_delivered_message_s_text_is_journaled_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let j = FileJournal::create(dir.path()).unwrap();
        let message: Envelope = serde_json::from_value(serde_json::json!({
            "from": "main", "to": "bob", "seq": 1, "text": "the one text", "key": "c1"
        }))
        .unwrap();
        j.append(&Step::Team {
            by: "main".into(),
            change: TeamChange::Sent {
                message: message.clone(),
            },
        })
        .await
        .unwrap();
        j.append(&Step::Delivered {
            agent: "main/w#1".into(),
            messages: vec![message.clone()],
        })
        .await
        .unwrap();
        let text = std::fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
        assert_eq!(text.matches("the one text").count(), 1, "{text}");
        let (steps, _, _) = read_steps(&dir.path().join(JOURNAL_FILE)).unwrap();
        assert!(
            matches!(&steps[1], Step::Delivered { messages, .. } if messages == &vec![message]),
            "{steps:?}"
        );
    }
}
