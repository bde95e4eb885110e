//! Replay: a [`Model`] that answers from a cassette, without any network.
//!
//! A request is matched by its [`request_key`] (agent type and messages, caching ignored),
//! never by arrival order, so concurrent agents replay identically whatever order they run
//! in. Identical requests (two agents of one type given the same prompt) are served their
//! recorded responses in recording order. The rest of the request (system prompt, tools,
//! model) must equal the recording; any difference, and any request the cassette has no
//! answer for, fails with [`ModelError::Replay`] naming the agent and showing a diff.

use crate::cassette::{request_key, Cassette, Exchange, RecordedRequest};
use crate::error::plural_messages as messages;
use crate::{
    ContentBlock, EventSink, Message, Model, ModelError, ModelEvent, ReplayError, Request, Response,
};
use crate::{RequestOrigin, SystemBlock};
use async_trait::async_trait;
use similar::TextDiff;
use std::collections::{HashMap, VecDeque};
use std::fmt::{self, Write as _};
use std::path::Path;
use std::sync::Mutex;

/// The most diff lines an error shows.
const MAX_DIFF_LINES: usize = 40;

/// Answers requests from a recorded cassette.
pub struct ReplayModel {
    /// Where the cassette came from, for messages.
    source: String,
    exchanges: Vec<Exchange>,
    /// Per key, the indexes of the exchanges not served yet, in recording order.
    queues: Mutex<HashMap<String, VecDeque<usize>>>,
    truncated_tail: Option<usize>,
    server_compaction: bool,
    run_id: Option<String>,
}

impl fmt::Debug for ReplayModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayModel")
            .field("source", &self.source)
            .field("exchanges", &self.exchanges.len())
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl ReplayModel {
    /// Loads the cassette at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        Ok(Self::from_cassette(
            Cassette::load(path)?,
            path.display().to_string(),
        ))
    }

    /// Replays an already loaded cassette; `source` names it in errors.
    pub fn from_cassette(cassette: Cassette, source: impl Into<String>) -> Self {
        let source = source.into();
        let mut queues: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (i, exchange) in cassette.exchanges.iter().enumerate() {
            // The key is recomputed, so a hand-edited message still matches what it says.
            let key = exchange.computed_key();
            if key != exchange.key {
                tracing::warn!(
                    cassette = %source,
                    agent = %exchange.agent,
                    "a recorded key does not match its request (edited by hand?); using the request"
                );
            }
            queues.entry(key).or_default().push_back(i);
        }
        Self {
            source,
            exchanges: cassette.exchanges,
            queues: Mutex::new(queues),
            truncated_tail: cassette.truncated_tail,
            server_compaction: cassette.header.server_compaction,
            run_id: cassette.header.run_id,
        }
    }

    /// The id of the run the cassette recorded, when its header says.
    pub fn recorded_run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// How many recorded responses have not been served yet.
    pub fn remaining(&self) -> usize {
        self.lock().values().map(VecDeque::len).sum()
    }

    /// How many exchanges the cassette holds.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// Whether the cassette holds no exchange.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }

    /// The line number of an unreadable last line that was dropped when loading, if any.
    pub fn truncated_tail(&self) -> Option<usize> {
        self.truncated_tail
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<usize>>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The recorded response for `request`, taken off its queue, or why there is none.
    fn take(&self, request: &Request) -> Result<Response, ModelError> {
        let origin = request.origin.clone().unwrap_or_default();
        let key = request_key(request);
        let now = RecordedRequest::from_request(request);
        let mut queues = self.lock();
        let Some(queue) = queues.get_mut(&key) else {
            return Err(self.no_match(&origin, &now));
        };
        let Some(&index) = queue.front() else {
            let times = self
                .exchanges
                .iter()
                .filter(|e| e.computed_key() == key)
                .count();
            return Err(ModelError::Replay(ReplayError::Exhausted {
                agent: who(&origin),
                messages: now.messages.len(),
                cassette: self.source.clone(),
                times,
            }));
        };
        let exchange = self.exchanges.get(index).ok_or_else(|| {
            ModelError::Replay(ReplayError::LostExchange {
                cassette: self.source.clone(),
            })
        })?;
        self.check(&origin, &exchange.request, &now)?;
        queue.pop_front();
        Ok(exchange.response.clone())
    }

    /// Fails if the system prompt, the tools or the model differ from the recording.
    fn check(
        &self,
        origin: &RequestOrigin,
        recorded: &RecordedRequest,
        now: &RecordedRequest,
    ) -> Result<(), ModelError> {
        let differs = |field: &str, old: &str, new: &str| {
            ModelError::Replay(ReplayError::Differs {
                agent: who(origin),
                part: field.to_owned(),
                cassette: self.source.clone(),
                diff: short_diff(old, new),
            })
        };
        if recorded.system != now.system {
            let (old, new) = (system_text(&recorded.system), system_text(&now.system));
            if old == new {
                return Err(differs(
                    "system prompt (split into blocks differently)",
                    &format!("{:#?}", recorded.system),
                    &format!("{:#?}", now.system),
                ));
            }
            return Err(differs("system prompt", &old, &new));
        }
        if recorded.tools != now.tools {
            let names = |r: &RecordedRequest| {
                r.tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let (old, new) = (names(recorded), names(now));
            if old != new {
                return Err(differs("tool names", &old, &new));
            }
            for (a, b) in recorded.tools.iter().zip(&now.tools) {
                if a != b {
                    return Err(differs(
                        &format!("definition of tool {:?}", a.name),
                        &pretty(a),
                        &pretty(b),
                    ));
                }
            }
        }
        if recorded.model != now.model {
            return Err(differs("model", &recorded.model, &now.model));
        }
        Ok(())
    }

    /// The error for a request the cassette has no key for, with a diff against the
    /// closest recorded request of the same agent type.
    fn no_match(&self, origin: &RequestOrigin, now: &RecordedRequest) -> ModelError {
        let mut msg = String::new();
        let same_type: Vec<&Exchange> = self
            .exchanges
            .iter()
            .filter(|e| e.agent_type == origin.agent_type)
            .collect();
        // The closest: the longest common message prefix, then the nearest length.
        let closest = same_type.iter().max_by_key(|e| {
            let common = common_prefix(&e.request.messages, &now.messages);
            let gap = e.request.messages.len().abs_diff(now.messages.len());
            (common, std::cmp::Reverse(gap))
        });
        match closest {
            Some(e) => {
                let common = common_prefix(&e.request.messages, &now.messages);
                let also: Vec<&str> = [
                    (e.request.system != now.system, "system prompt"),
                    (e.request.tools != now.tools, "tools"),
                    (e.request.model != now.model, "model"),
                ]
                .iter()
                .filter_map(|(differs, field)| differs.then_some(*field))
                .collect();
                let also = if also.is_empty() {
                    String::new()
                } else {
                    format!(" Its {} differ(s) too.", also.join(", "))
                };
                let _ = write!(
                    msg,
                    ". The closest recorded request of type {:?} (from agent {}, {}, the first \
                     {common} equal) differs so:{also}\n{}",
                    origin.agent_type,
                    e.agent,
                    messages(e.request.messages.len()),
                    short_diff(
                        &render_messages(&e.request.messages),
                        &render_messages(&now.messages)
                    )
                );
            }
            None if self.exchanges.is_empty() => {
                msg.push_str(
                    ". The cassette holds no recorded requests at all (was the recording stopped before the first answer?)",
                );
            }
            None => {
                let mut types: Vec<&str> = self
                    .exchanges
                    .iter()
                    .map(|e| e.agent_type.as_str())
                    .collect();
                types.sort_unstable();
                types.dedup();
                let _ = write!(
                    msg,
                    ". It holds no request from an agent of type {:?}; it has types: {}",
                    origin.agent_type,
                    types.join(", ")
                );
            }
        }
        ModelError::Replay(ReplayError::NoMatch {
            agent: who(origin),
            messages: now.messages.len(),
            cassette: self.source.clone(),
            closest: msg,
        })
    }
}

#[async_trait]
impl Model for ReplayModel {
    fn provider(&self) -> &str {
        "replay"
    }

    fn server_compaction(&self) -> bool {
        self.server_compaction
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        let response = self.take(&request)?;
        // The same events a live stream gives, so displays behave the same.
        for block in &response.content {
            match block {
                ContentBlock::Text(t) if !t.text.is_empty() => {
                    events(ModelEvent::TextDelta(t.text.clone()))
                }
                ContentBlock::Thinking(t) if !t.thinking.is_empty() => {
                    events(ModelEvent::ThinkingDelta(t.thinking.clone()))
                }
                ContentBlock::Compaction(_) => events(ModelEvent::Compacting),
                ContentBlock::ToolUse(t) => events(ModelEvent::ToolUseStart {
                    id: t.id.clone(),
                    name: t.name.clone(),
                }),
                _ => {}
            }
        }
        Ok(response)
    }
}

/// `path (type T)`, or a note that the request carried no origin.
fn who(origin: &RequestOrigin) -> String {
    if origin.path.is_empty() && origin.agent_type.is_empty() {
        return "<unknown> (the request names no agent)".into();
    }
    format!("{} (type {:?})", origin.path, origin.agent_type)
}

fn common_prefix(a: &[Message], b: &[Message]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn system_text(blocks: &[SystemBlock]) -> String {
    blocks
        .iter()
        .map(|b| &*b.text)
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn pretty<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Messages as readable lines, one block after another, for diffs.
fn render_messages(messages: &[Message]) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role {
            crate::Role::User => "user",
            crate::Role::Assistant => "assistant",
        };
        let _ = writeln!(out, "#{} {role}:", i + 1);
        for block in &m.content {
            match block {
                ContentBlock::Text(t) => indent(&mut out, &t.text),
                ContentBlock::ToolUse(t) => {
                    let _ = writeln!(out, "  [tool_use {} {}] {}", t.id, t.name, t.input);
                }
                ContentBlock::ToolResult(r) => {
                    let error = if r.is_error { " error" } else { "" };
                    let _ = writeln!(out, "  [tool_result {}{error}]", r.tool_use_id);
                    indent(&mut out, &crate::join_text(&r.content));
                }
                ContentBlock::Thinking(t) => {
                    let _ = writeln!(out, "  [thinking]");
                    indent(&mut out, &t.thinking);
                }
                other => {
                    let json = serde_json::to_string(other).unwrap_or_default();
                    let _ = writeln!(out, "  [{}] {json}", other.type_name());
                }
            }
        }
    }
    out
}

fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "    {line}");
    }
}

/// A unified diff of `old` (recorded) and `new` (now), cut to [`MAX_DIFF_LINES`] lines.
fn short_diff(old: &str, new: &str) -> String {
    let (mut old, mut new) = (old.to_owned(), new.to_owned());
    // A missing final newline would add "\ No newline" noise.
    for s in [&mut old, &mut new] {
        if !s.ends_with('\n') {
            s.push('\n');
        }
    }
    let diff = TextDiff::from_lines(&old, &new);
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header("recorded", "now")
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= MAX_DIFF_LINES {
        return text;
    }
    let mut out = lines[..MAX_DIFF_LINES].join("\n");
    let _ = write!(
        out,
        "\n… ({} more diff lines)\n",
        lines.len() - MAX_DIFF_LINES
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_are_unified_and_short() {
        let d = short_diff("a\nb\nc", "a\nB\nc");
        assert!(d.contains("--- recorded"), "{d}");
        assert!(d.contains("+++ now"), "{d}");
        assert!(d.contains("-b\n"), "{d}");
        assert!(d.contains("+B\n"), "{d}");
        let old: String = (0..200).map(|i| format!("{i}\n")).collect();
        let new: String = (0..200).map(|i| format!("{}\n", i * 2)).collect();
        let d = short_diff(&old, &new);
        assert!(d.lines().count() <= MAX_DIFF_LINES + 1);
        assert!(d.contains("more diff lines"), "{d}");
    }
}
