//! Transcripts: one JSON Lines file per agent in its run folder, each line one
//! [`TranscriptLine`], written as the agent goes and read back by whoever browses the run.

use crate::run::outcome::{AgentOutcome, StopKind};
use cadre_model::{CompactionUsage, Message, Usage};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

/// One line of a transcript: when it was written, and what it holds. On disk it is one
/// JSON object, `{"type": KIND, "t": TIME, ...fields}`, its keys in alphabetical order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptLine<'a> {
    /// When it was written (RFC 3339, UTC, milliseconds), so a run's agents can be laid on
    /// one timeline; transcripts from before times were recorded have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<String>,
    /// What it holds.
    #[serde(flatten)]
    pub record: TranscriptRecord<'a>,
}

/// What a transcript line holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TranscriptRecord<'a> {
    /// The agent's header: its first line.
    Agent(AgentHeader),
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
    /// How the agent ended: its last line.
    Outcome(OutcomeRecord),
    /// A line of a kind this version does not know (a newer cadre's).
    #[serde(other)]
    Other,
}

/// The first line of an agent's transcript: who it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentHeader {
    /// Its path (`main/explore#2`).
    pub path: String,
    /// Its agent type.
    pub agent_type: String,
    /// What it was asked to do, in a few words.
    pub description: String,
    /// The model it talks to.
    pub model: String,
    /// Its system prompt.
    pub system: String,
    /// The tools it was given.
    pub tools: Vec<String>,
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
}

impl From<&AgentOutcome> for OutcomeRecord {
    fn from(outcome: &AgentOutcome) -> Self {
        Self {
            stop: Recorded::Known(outcome.stop.clone()),
            text: outcome.text.clone(),
            turns: outcome.turns,
            tool_calls: outcome.tool_calls,
            usage: Some(outcome.usage),
        }
    }
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
        }
        let timed = serde_json::from_str::<Timed>(line).ok()?;
        Some(Self {
            t: timed.t,
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

    /// The line as written to the file, without its newline.
    fn to_json(&self) -> serde_json::Result<String> {
        // Through a `Value`, whose objects keep their keys sorted: the order transcripts
        // have always had, so files written before and after read the same byte for byte.
        serde_json::to_string(&serde_json::to_value(self)?)
    }
}

/// One agent's history as JSON Lines, each line written whole and flushed, so the file is
/// valid JSONL whenever the run stops.
#[derive(Debug)]
pub struct Transcript {
    out: Mutex<BufWriter<File>>,
}

impl Transcript {
    /// Creates (or empties) the transcript `file`.
    pub(crate) fn create(file: &Path) -> std::io::Result<Self> {
        Ok(Self {
            out: Mutex::new(BufWriter::new(File::create(file)?)),
        })
    }

    /// Appends one record, stamped with the UTC time it is written.
    pub fn write(&self, record: TranscriptRecord<'_>) {
        let t = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let line = TranscriptLine { t: Some(t), record };
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let written = line
            .to_json()
            .map_err(std::io::Error::other)
            .and_then(|text| out.write_all(text.as_bytes()))
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            tracing::warn!("could not write a transcript line: {e}");
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::run_dir::{AgentPath, RunDir};
    use serde_json::{json, Value};

    #[test]
    fn transcript_lines_are_whole_json() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path()).unwrap();
        let path = AgentPath::parse("main/explore#2");
        let t = run.transcript(&path).unwrap();
        t.message(&Message::user_text("hi"));
        t.outcome(&AgentOutcome {
            text: "done".into(),
            stop: StopKind::Done,
            turns: 1,
            tool_calls: 0,
            usage: Usage::default(),
            history: Vec::new(),
        });
        let text = std::fs::read_to_string(run.path().join("main.explore-2.jsonl")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["message"]["content"][0]["text"], "hi");
        assert_eq!(lines[1]["type"], "outcome");
        assert_eq!(lines[1]["stop"], json!({"kind": "done"}));
        for line in &lines {
            let t = line["t"].as_str().unwrap();
            assert!(humantime::parse_rfc3339(t).is_ok(), "{t}");
        }
        let back = TranscriptLine::read_all(&run.transcript_file(&path)).unwrap();
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

    /// Each record, written as a line, is byte for byte what the untyped writer of earlier
    /// versions wrote: `{"type": kind, "t": time}` with the fields merged in.
    #[test]
    fn lines_are_written_as_before() {
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
                t: Some(t.to_owned()),
                record,
            }
            .to_json()
            .unwrap()
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
            assert_eq!(new, old);
            let back = TranscriptLine::parse(&new).unwrap();
            assert_eq!(back.to_json().unwrap(), new);
        }
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
