//! Transcripts: one JSON Lines file per run (`transcript.jsonl`) holding every agent's
//! history, each line one [`TranscriptLine`] naming its agent, written as the agents go and
//! read back by whoever browses the run. (One file rather than one per agent: a fan-out of
//! thousands spent most of its run folder's cost creating files. An agent whose hooks are
//! handed a `transcript_path` also gets a file of its own, `<agent>.jsonl`, with the same
//! lines; runs written before kept only those.)

use crate::record::run_dir::{RunDir, JSONL};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::{AgentOutcome, StopKind};
use cadre_model::{CompactionUsage, Message, Usage};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// One line of a transcript: when it was written, whose it is, and what it holds. On disk
/// it is one JSON object, `{"t": TIME, "agent": PATH, "type": KIND, ...fields}`, the fields in the order their types
/// declare them. (Versions before wrote the keys sorted, through a `Value`: a second pass
/// that cost a fleet's run folder a tenth of its time, on an order no reader depends on.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptLine<'a> {
    /// When it was written (RFC 3339, UTC, milliseconds), so a run's agents can be laid on
    /// one timeline; transcripts from before times were recorded have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<Cow<'a, str>>,
    /// The path of the agent it belongs to (`main/explore#2`); lines of runs written before
    /// the run-wide file have none (their file named the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentPath>,
    /// What it holds.
    #[serde(flatten)]
    pub record: TranscriptRecord<'a>,
}

/// What a transcript line holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TranscriptRecord<'a> {
    /// The agent's header: its first line.
    Agent(AgentHeader<'a>),
    /// One message of the agent's conversation.
    Message {
        /// The message.
        message: Cow<'a, Message>,
    },
    /// The conversation was compacted: `history` replaces it from here on.
    Compacted {
        /// Why: `auto`, `overflow`, `manual`, …
        by: String,
        /// What compacting cost.
        usage: CompactionUsage,
        /// The conversation from here on.
        history: Cow<'a, [Message]>,
    },
    /// A hook ran for the agent.
    Hook(HookRecord),
    /// How the agent ended: its last line.
    Outcome(OutcomeRecord),
    /// A line of a kind this version does not know (a newer cadre's).
    #[serde(other)]
    Other,
}

/// The first line of an agent's transcript: who it is. (Borrowed when written: every agent
/// of a fan-out writes one, and copying its system prompt to do so is wasted.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentHeader<'a> {
    /// Its path (`main/explore#2`).
    pub path: AgentPath,
    /// Its agent type.
    pub agent_type: Cow<'a, str>,
    /// What it was asked to do, in a few words.
    pub description: Cow<'a, str>,
    /// The model it talks to.
    pub model: Cow<'a, str>,
    /// Its system prompt.
    pub system: Cow<'a, str>,
    /// The tools it was given.
    pub tools: Vec<Cow<'a, str>>,
}

/// The last line of an agent's transcript: how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRecord {
    /// Why it stopped.
    #[serde(default)]
    pub stop: Recorded<StopKind>,
    /// Its final text.
    #[serde(default)]
    pub text: String,
    /// Model requests made.
    #[serde(default)]
    pub turns: u32,
    /// Tool calls made.
    #[serde(default)]
    pub tool_calls: u32,
    /// Tokens it used itself; absent in transcripts that did not record it.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// How long it has run, in milliseconds, over every part of the run so far (a run goes
    /// on after a follow-up or a resume); absent in transcripts that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
}

impl From<&AgentOutcome> for OutcomeRecord {
    fn from(outcome: &AgentOutcome) -> Self {
        Self {
            stop: Recorded::Known(outcome.stop.clone()),
            text: outcome.text.clone(),
            turns: outcome.turns,
            tool_calls: outcome.tool_calls,
            usage: Some(outcome.usage),
            elapsed_ms: None,
        }
    }
}

/// One hook run, as a transcript keeps it (the same as [`crate::Event::Hook`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HookRecord {
    /// The moment it ran at.
    pub hook_event: Recorded<crate::vocab::hooks::HookEvent>,
    /// The command, as written.
    pub command: String,
    /// Where it was written.
    pub source: String,
    /// Its matcher, as written, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// What came of it.
    pub outcome: Recorded<crate::vocab::hooks::HookOutcome>,
}

/// A value as a record holds it: one this version reads, or one another version wrote,
/// kept as written (so a newer cadre's stop still shows its kind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Recorded<T> {
    /// A value this version knows.
    Known(T),
    /// A value it does not, as written (`null` when it is missing).
    Unknown(serde_json::Value),
}

impl<T> Default for Recorded<T> {
    fn default() -> Self {
        Self::Unknown(serde_json::Value::Null)
    }
}

impl TranscriptLine<'static> {
    /// Reads one line. A line of a kind (or shape) this version does not know reads as
    /// [`TranscriptRecord::Other`], keeping its time; `None` when it is not a JSON object
    /// at all (a line cut short by a crash).
    pub fn parse(line: &str) -> Option<Self> {
        if let Ok(line) = serde_json::from_str::<Self>(line) {
            return Some(line);
        }
        #[derive(Deserialize)]
        struct Timed {
            #[serde(default)]
            t: Option<String>,
            #[serde(default)]
            agent: Option<AgentPath>,
        }
        let timed = serde_json::from_str::<Timed>(line).ok()?;
        Some(Self {
            t: timed.t.map(Cow::Owned),
            agent: timed.agent,
            record: TranscriptRecord::Other,
        })
    }

    /// Every line of the transcript `file` that reads (see [`parse`](Self::parse)), in order.
    pub fn read_all(file: &Path) -> std::io::Result<Vec<Self>> {
        let reader = std::io::BufReader::new(File::open(file)?);
        let mut lines = Vec::new();
        for line in reader.lines() {
            // A read error ends the file: what came before still reads.
            let Ok(line) = line else { break };
            lines.extend(Self::parse(&line));
        }
        Ok(lines)
    }
}

impl TranscriptLine<'_> {
    /// When it was written, if the line says.
    pub fn time(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339_weak(self.t.as_deref()?).ok()
    }
}

/// What an agent's transcript holds from the earlier parts of its run (a run continued
/// or resumed goes on in the same transcript).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Earlier {
    /// How long the agent ran in them, in milliseconds: each finished part as its outcome
    /// says, a part cut short (the run killed) from its first line to its last.
    pub elapsed_ms: u64,
    /// How many messages of the agent's history the transcript holds.
    pub messages: usize,
    /// How many content blocks of the last of them it holds.
    pub last_blocks: usize,
}

impl Earlier {
    /// What each agent's lines in the run folder `dir` hold, by path: read a line at a
    /// time, never holding the lines (a resumed 10,000-item workflow's transcript is tens
    /// of megabytes).
    fn of_run(dir: &RunDir) -> HashMap<AgentPath, Self> {
        let mut folds: HashMap<AgentPath, EarlierFold> = HashMap::new();
        dir.each_transcript_line(|path, line| {
            folds.entry(path.clone()).or_default().take(&line);
        });
        folds
            .into_iter()
            .map(|(path, fold)| (path, fold.done()))
            .collect()
    }

    /// Reads what `lines` (an agent's, in order) hold.
    pub fn of(lines: &[TranscriptLine<'_>]) -> Self {
        let mut fold = EarlierFold::default();
        for line in lines {
            fold.take(line);
        }
        fold.done()
    }
}

/// [`Earlier`] being read from an agent's lines, one at a time.
#[derive(Debug, Default)]
struct EarlierFold {
    /// The time of the parts read whole.
    elapsed: u64,
    /// The start of the part being read, while it has no outcome yet.
    part: Option<SystemTime>,
    /// The time of the last line that said one.
    last: Option<SystemTime>,
    /// (role, blocks) of each message of the history the lines rebuild.
    history: Vec<(cadre_model::Role, usize)>,
}

impl EarlierFold {
    /// Takes in the agent's next line.
    fn take(&mut self, line: &TranscriptLine<'_>) {
        let t = line.time();
        match &line.record {
            TranscriptRecord::Agent(_) => {
                self.elapsed += span_ms(self.part, self.last);
                self.part = t;
            }
            TranscriptRecord::Message { message } => match self.history.last_mut() {
                // A turn that went on (or a follow-up joining a user message) is logged
                // as its new blocks: they belong to the message before.
                Some((role, n)) if *role == message.role => *n += message.content.len(),
                _ => self.history.push((message.role, message.content.len())),
            },
            TranscriptRecord::Compacted { history: h, .. } => {
                self.history = h.iter().map(|m| (m.role, m.content.len())).collect();
            }
            TranscriptRecord::Outcome(o) => {
                self.elapsed = match o.elapsed_ms {
                    Some(total) => total,
                    None => self.elapsed + span_ms(self.part, t),
                };
                self.part = None;
            }
            TranscriptRecord::Hook(_) | TranscriptRecord::Other => {}
        }
        self.last = t.or(self.last);
    }

    /// What the lines taken in hold.
    fn done(self) -> Earlier {
        Earlier {
            elapsed_ms: self.elapsed + span_ms(self.part, self.last),
            messages: self.history.len(),
            last_blocks: self.history.last().map_or(0, |(_, n)| *n),
        }
    }
}

/// The milliseconds from `from` to `to`; 0 unless both are known.
fn span_ms(from: Option<SystemTime>, to: Option<SystemTime>) -> u64 {
    match (from, to) {
        (Some(a), Some(b)) => b
            .duration_since(a)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        _ => 0,
    }
}

/// The run's transcript file, open to add to: every agent's [`Transcript`] writes its
/// lines into it.
#[derive(Debug)]
pub struct RunTranscript {
    /// Opened to append, and written without a lock: each line is one `write`, which a
    /// file opened to append takes whole, after every other.
    out: File,
    /// What each agent's lines held when the file was opened (a run that goes on after a
    /// follow-up or a resume), by path.
    earlier: HashMap<AgentPath, Earlier>,
    /// Whether a line that could not be written was told: a full disk fails every line
    /// after it too, and one warning says as much.
    warned: std::sync::atomic::AtomicBool,
}

impl RunTranscript {
    /// Opens the transcript of the run in `dir` to add to it, creating it when it does not
    /// exist; reads what the agents of a run going on wrote before.
    pub fn open(dir: &RunDir) -> std::io::Result<Self> {
        let (out, existed) = open_to_add(&dir.transcript_file())?;
        // A new run has nothing earlier, unless it is one written before the run-wide file.
        let earlier = if existed || dir.has_agent_files() {
            Earlier::of_run(dir)
        } else {
            HashMap::new()
        };
        Ok(Self {
            out,
            earlier,
            warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The same file, for the next part of a run kept open (a conversation's next
    /// message), in which the agent at `path` goes on from `earlier`: what the lines hold
    /// now, known without reading the file again.
    pub fn carried_on(&self, path: &AgentPath, earlier: Earlier) -> std::io::Result<Self> {
        let mut all = self.earlier.clone();
        all.insert(path.clone(), earlier);
        Ok(Self {
            out: self.out.try_clone()?,
            earlier: all,
            warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether a line could not be written: what the file holds is not what was written.
    pub(crate) fn lost_a_line(&self) -> bool {
        self.warned.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the lines of the agent at `path` held when the file was opened.
    pub fn earlier(&self, path: &AgentPath) -> Earlier {
        self.earlier.get(path).copied().unwrap_or_default()
    }

    /// The transcript of the agent at `path`: its lines go into the run's file and, with
    /// `own` (for hooks that are handed its path), into that file of its own too.
    pub fn agent(self: &Arc<Self>, path: &AgentPath, own: Option<&Path>) -> Transcript {
        let own = own.and_then(|file| match open_to_add(file) {
            Ok((out, _)) => Some(out),
            Err(e) => {
                tracing::warn!("could not open {}: {e}", file.display());
                None
            }
        });
        Transcript {
            run: self.clone(),
            agent: path.clone(),
            own,
            earlier: self.earlier(path),
        }
    }
}

/// Opens `file` to append to, creating it; says whether it existed. A line cut short (a
/// kill, a full disk) is cut off, so the next line starts on a line of its own and is read.
fn open_to_add(file: &Path) -> std::io::Result<(File, bool)> {
    // Most files are new: made in one call.
    match std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(file)
    {
        Ok(out) => return Ok((out, false)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // Read too: the end of the file is looked at for a cut line.
    let out = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(file)?;
    super::jsonl::cut_partial_line(&out)?;
    Ok((out, true))
}

/// One agent's history, as lines of its run's transcript, each line written whole in one
/// `write`, so the file is valid JSONL whenever the run stops. (No buffer of its own: it
/// would only be copied through, and would cost every waiting agent of a fan-out its size.)
#[derive(Debug)]
pub struct Transcript {
    run: Arc<RunTranscript>,
    /// The agent's path, which each line names.
    agent: AgentPath,
    /// The agent's own file, when it has one.
    own: Option<File>,
    earlier: Earlier,
}

impl Transcript {
    /// What the agent's lines held when the run's transcript was opened.
    pub fn earlier(&self) -> Earlier {
        self.earlier
    }

    /// Writes what `history` (the agent's, rebuilt to go on) holds beyond what the
    /// transcript already did: the follow-up, or what a killed run journaled last.
    pub fn catch_up(&self, history: &[Message]) {
        let Earlier {
            messages,
            last_blocks,
            ..
        } = self.earlier;
        // A transcript that does not match the history (written by another version, or
        // missing a compaction) gets the history whole.
        let matches = messages > 0
            && history
                .get(messages - 1)
                .is_some_and(|m| m.content.len() >= last_blocks);
        if !matches {
            history.iter().for_each(|m| self.message(m));
            return;
        }
        let last = &history[messages - 1];
        if last.content.len() > last_blocks {
            self.message(&Message::new(
                last.role,
                last.content[last_blocks..].to_vec(),
            ));
        }
        history[messages..].iter().for_each(|m| self.message(m));
    }

    /// Appends one record, stamped with the UTC time it is written.
    pub fn write(&self, record: TranscriptRecord<'_>) {
        let written = with_stamp(SystemTime::now(), |t| {
            let line = TranscriptLine {
                t: Some(Cow::Borrowed(t)),
                agent: Some(self.agent.clone()),
                record,
            };
            super::jsonl::with_line(&line, |line| {
                (&self.run.out).write_all(line)?;
                match &self.own {
                    Some(own) => (&*own).write_all(line),
                    None => Ok(()),
                }
            })
        })
        .map_err(std::io::Error::other)
        .and_then(|written| written);
        if let Err(e) = written {
            if !self
                .run
                .warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    "could not write a transcript line: {e} (later ones may be missing too)"
                );
            }
        }
    }

    /// Appends one message of the conversation.
    pub fn message(&self, message: &Message) {
        self.write(TranscriptRecord::Message {
            message: Cow::Borrowed(message),
        });
    }

    /// Appends the agent's outcome.
    pub fn outcome(&self, outcome: &AgentOutcome) {
        self.write(TranscriptRecord::Outcome(outcome.into()));
    }

    /// Appends the agent's outcome with how long it has run over every part of the run.
    pub fn outcome_after(&self, outcome: &AgentOutcome, elapsed_ms: u64) {
        let mut record = OutcomeRecord::from(outcome);
        record.elapsed_ms = Some(elapsed_ms);
        self.write(TranscriptRecord::Outcome(record));
    }
}

/// Calls `f` with `now` as a line's time: RFC 3339, UTC, to the millisecond. Each thread
/// formats the date and time to the second once a second and only adds the milliseconds,
/// since a fan-out stamps hundreds of thousands of lines.
fn with_stamp<R>(now: SystemTime, f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        /// The second last formatted, and its stamp.
        static STAMP: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (second, millis) = (since.as_secs(), since.subsec_millis());
    STAMP.with(|cell| {
        let Ok(mut cell) = cell.try_borrow_mut() else {
            return f(&humantime::format_rfc3339_millis(now).to_string());
        };
        let (formatted, stamp) = &mut *cell;
        if *formatted == second {
            // What follows the `.` is the last line's milliseconds.
            stamp.truncate(stamp.rfind('.').map_or(0, |dot| dot + 1));
        } else {
            *stamp = humantime::format_rfc3339_seconds(now).to_string();
            // `…:SSZ` becomes `…:SS.` for the milliseconds to follow.
            stamp.pop();
            stamp.push('.');
            *formatted = second;
        }
        for digit in [millis / 100, millis / 10 % 10, millis % 10] {
            stamp.extend(char::from_digit(digit, 10));
        }
        stamp.push('Z');
        f(stamp)
    })
}

/// A run folder's transcripts, as written by every version.
impl RunDir {
    /// Every agent's transcript lines, in order, by path (a parent before its subagents):
    /// those of a run written before the run-wide transcript from each agent's file, then
    /// those of `transcript.jsonl`. A line that names no agent belongs to the header it
    /// follows.
    pub fn transcripts(&self) -> Vec<(AgentPath, Vec<TranscriptLine<'static>>)> {
        let mut agents: BTreeMap<AgentPath, Vec<TranscriptLine<'static>>> = BTreeMap::new();
        self.each_transcript_line(|path, line| {
            agents.entry(path.clone()).or_default().push(line);
        });
        agents.into_iter().collect()
    }

    /// Hands `each` every transcript line that reads, with the agent it belongs to, in the
    /// order of [`transcripts`](Self::transcripts), one line at a time.
    fn each_transcript_line(&self, mut each: impl FnMut(&AgentPath, TranscriptLine<'static>)) {
        let files = self.agent_files().into_iter();
        for file in files.chain(Some(self.transcript_file())) {
            let Ok(opened) = File::open(&file) else {
                continue;
            };
            let mut whose: Option<AgentPath> = None;
            for line in std::io::BufReader::new(opened).lines() {
                // A read error ends the file: what came before still reads.
                let Ok(line) = line else { break };
                let Some(line) = TranscriptLine::parse(&line) else {
                    continue;
                };
                if let TranscriptRecord::Agent(header) = &line.record {
                    whose = Some(header.path.clone());
                }
                if let Some(agent) = &line.agent {
                    whose = Some(agent.clone());
                }
                if let Some(path) = &whose {
                    each(path, line);
                }
            }
        }
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
        let Ok(entries) = std::fs::read_dir(self.path()) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_last_line_is_cut_off_before_the_next_is_added() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.jsonl");
        std::fs::write(&file, "{\"a\":1}\n{\"b\":").unwrap();
        let (mut out, existed) = open_to_add(&file).unwrap();
        assert!(existed);
        out.write_all(b"{\"c\":3}\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "{\"a\":1}\n{\"c\":3}\n"
        );
    }
    use crate::record::run_dir::RunDir;
    use serde_json::{json, Value};
    use std::time::Duration;

    impl TranscriptLine<'_> {
        /// The line as [`Transcript::write`] writes it, without its newline.
        fn to_json(&self) -> String {
            crate::record::jsonl::with_line(self, |line| {
                String::from_utf8(line.strip_suffix(b"\n").unwrap().to_vec()).unwrap()
            })
            .unwrap()
        }
    }

    #[test]
    fn a_stamp_is_the_time_to_the_millisecond() {
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        // The same second again (only the milliseconds change), the next, and an earlier one.
        for ms in [
            1_796_000_000_007,
            1_796_000_000_450,
            1_796_000_000_999,
            1_796_000_001_000,
            1_796_000_001_080,
            1_700_000_000_123,
        ] {
            let now = at(ms);
            let want = humantime::format_rfc3339_millis(now).to_string();
            assert_eq!(with_stamp(now, str::to_owned), want);
        }
    }

    #[test]
    fn transcript_lines_are_whole_json() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path()).unwrap();
        let t = Arc::new(RunTranscript::open(&run).unwrap()).agent(&"main/explore#2".into(), None);
        t.message(&Message::user_text("hi"));
        t.outcome(&AgentOutcome {
            text: "done".into(),
            stop: StopKind::Done,
            turns: 1,
            tool_calls: 0,
            usage: Usage::default(),
            history: Vec::new(),
        });
        let text = std::fs::read_to_string(run.path().join("transcript.jsonl")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["message"]["content"][0]["text"], "hi");
        assert_eq!(lines[0]["agent"], "main/explore#2");
        assert_eq!(lines[1]["type"], "outcome");
        assert_eq!(lines[1]["stop"], json!({"kind": "done"}));
        for line in &lines {
            let t = line["t"].as_str().unwrap();
            assert!(humantime::parse_rfc3339(t).is_ok(), "{t}");
        }
        let back = TranscriptLine::read_all(&run.transcript_file()).unwrap();
        assert_eq!(back.len(), 2);
        assert!(back[0].time().is_some());
        assert!(matches!(
            &back[1].record,
            TranscriptRecord::Outcome(OutcomeRecord {
                stop: Recorded::Known(StopKind::Done),
                turns: 1,
                ..
            })
        ));
    }

    /// Each record, written as a line, holds what the untyped writer of earlier versions
    /// wrote (`{"type": kind, "t": time}` with the fields merged in, keys sorted), and each
    /// reads back as the other does.
    #[test]
    fn lines_hold_what_they_held_before() {
        let t = "2026-12-01T10:15:00.123Z";
        let old = |kind: &str, fields: Value| {
            let mut line = json!({"type": kind, "t": t});
            if let (Value::Object(l), Value::Object(f)) = (&mut line, fields) {
                l.extend(f);
            }
            serde_json::to_string(&line).unwrap()
        };
        let new = |record: TranscriptRecord<'_>| {
            TranscriptLine {
                t: Some(t.into()),
                agent: None,
                record,
            }
            .to_json()
        };
        let message = Message::user_text("hi");
        let outcome = AgentOutcome {
            text: "the answer".into(),
            stop: StopKind::ModelError("boom".into()),
            turns: 3,
            tool_calls: 2,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
            history: Vec::new(),
        };
        let cases = [
            (
                new(TranscriptRecord::Agent(AgentHeader {
                    path: "main/explore#1".into(),
                    agent_type: "explore".into(),
                    description: "look".into(),
                    model: "m".into(),
                    system: "be brief".into(),
                    tools: vec!["read_file".into(), "grep".into()],
                })),
                old(
                    "agent",
                    json!({"path": "main/explore#1", "agent_type": "explore", "description": "look", "model": "m", "system": "be brief", "tools": ["read_file", "grep"]}),
                ),
            ),
            (
                new(TranscriptRecord::Message {
                    message: Cow::Borrowed(&message),
                }),
                old("message", json!({ "message": message })),
            ),
            (
                new(TranscriptRecord::Compacted {
                    by: "auto".into(),
                    usage: CompactionUsage::default(),
                    history: Cow::Borrowed(std::slice::from_ref(&message)),
                }),
                old(
                    "compacted",
                    json!({"by": "auto", "usage": CompactionUsage::default(), "history": [message]}),
                ),
            ),
            (
                new(TranscriptRecord::Outcome((&outcome).into())),
                old(
                    "outcome",
                    json!({"stop": outcome.stop, "text": outcome.text, "turns": outcome.turns, "tool_calls": outcome.tool_calls, "usage": outcome.usage}),
                ),
            ),
        ];
        for (new, old) in cases {
            let value = |line: &str| serde_json::from_str::<Value>(line).unwrap();
            assert_eq!(value(&new), value(&old), "{new}");
            assert!(new.starts_with(r#"{"t":"#), "{new}");
            let back = TranscriptLine::parse(&new).unwrap();
            assert_eq!(back, TranscriptLine::parse(&old).unwrap());
            assert_eq!(back.to_json(), new);
        }
    }

    /// Finished parts count as their outcome says, a killed part from its first line to
    /// its last; the history counts joined turns as one message.
    #[test]
    fn earlier_parts_add_up() {
        let line = |t: &str, record: TranscriptRecord<'static>| TranscriptLine {
            t: Some(format!("2026-12-01T10:00:{t}Z").into()),
            agent: None,
            record,
        };
        let header = || TranscriptRecord::Agent(AgentHeader::default());
        let message = |role, text: &str| TranscriptRecord::Message {
            message: Cow::Owned(Message::new(
                role,
                vec![cadre_model::ContentBlock::text(text)],
            )),
        };
        let outcome = |elapsed_ms| {
            let mut o = OutcomeRecord::from(&AgentOutcome {
                text: String::new(),
                stop: StopKind::Done,
                turns: 1,
                tool_calls: 0,
                usage: Usage::default(),
                history: Vec::new(),
            });
            o.elapsed_ms = elapsed_ms;
            TranscriptRecord::Outcome(o)
        };
        use cadre_model::Role::{Assistant, User};
        let lines = vec![
            line("00", header()),
            line("00", message(User, "hi")),
            line("02", message(Assistant, "hello")),
            line("02", outcome(Some(2500))),
            // Idle time between parts does not count.
            line("30", header()),
            line("30", message(User, "more")),
            line("31", message(User, "and more")),
            // Killed here.
            line("34", message(Assistant, "ok")),
        ];
        let earlier = Earlier::of(&lines);
        assert_eq!(earlier.elapsed_ms, 2500 + 4000);
        assert_eq!((earlier.messages, earlier.last_blocks), (4, 1));
        let mut older = lines.clone();
        older[3] = line("02", outcome(None));
        assert_eq!(Earlier::of(&older).elapsed_ms, 2000 + 4000);
    }

    #[test]
    fn lines_of_other_versions_still_read() {
        // Written before times were recorded.
        let line = TranscriptLine::parse(r#"{"type":"agent","path":"main"}"#).unwrap();
        assert_eq!(line.t, None);
        assert!(matches!(&line.record, TranscriptRecord::Agent(h) if h.path == "main"));
        // A newer cadre's stop keeps its kind; a newer kind of line keeps its time.
        let line =
            TranscriptLine::parse(r#"{"type":"outcome","stop":{"kind":"asleep"},"turns":2}"#)
                .unwrap();
        match line.record {
            TranscriptRecord::Outcome(o) => {
                assert_eq!(o.stop, Recorded::Unknown(json!({"kind": "asleep"})));
                assert_eq!(o.turns, 2);
                assert_eq!(o.usage, None);
            }
            other => panic!("{other:?}"),
        }
        let line = TranscriptLine::parse(r#"{"type":"dream","t":"2026-12-01T10:15:00Z"}"#).unwrap();
        assert_eq!(line.record, TranscriptRecord::Other);
        assert!(line.time().is_some());
        let line =
            TranscriptLine::parse(r#"{"type":"message","message":{"role":"robot"},"t":"x"}"#)
                .unwrap();
        assert_eq!(line.record, TranscriptRecord::Other);
        assert_eq!(line.t.as_deref(), Some("x"));
        // A line cut short by a crash does not read.
        assert!(TranscriptLine::parse(r#"{"type":"mess"#).is_none());
    }
}
