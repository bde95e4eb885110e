//! Cassettes: the file format of record/replay, and how a request is keyed.
//!
//! A cassette is a JSON Lines file. Its first line is a [`CassetteHeader`]
//! (`{"cadre_cassette": 1, "created_by": "cadre 0.1.0"}`); every further line is one
//! [`Exchange`]: `{"key", "agent", "agent_type", "request": {"model", "system",
//! "tool_names", "tools", "messages"}, "response": <Response>}`. Only successful responses
//! are recorded.
//!
//! The key of a request ([`request_key`]) is the hex SHA-256 of the canonical JSON (keys
//! sorted, no spaces) of its agent type and its messages with every `cache_control`
//! removed. It does not depend on the order requests arrive in, nor on the agent's path
//! (`main/explore#2` may be numbered differently in another run), nor on prompt caching.
//!
//! A crash while recording can leave the last line cut short: [`Cassette::parse`] drops
//! an unreadable *last* line with a warning (see [`Cassette::truncated_tail`]); an
//! unreadable line anywhere else is an error naming the line.

use crate::{
    ContentBlock, Message, ModelError, ReplayError, Request, Response, SystemBlock, ToolDefinition,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::Path;

/// The cassette format version this build reads and writes.
pub const CASSETTE_FORMAT: u32 = 1;

/// The first line of a cassette.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CassetteHeader {
    /// The format version ([`CASSETTE_FORMAT`]).
    pub cadre_cassette: u32,
    /// What wrote it (`cadre 0.1.0`).
    pub created_by: String,
    /// Whether the recorded model compacted on the server, so a replay asks for compaction
    /// the same way (absent in older cassettes: no).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub server_compaction: bool,
    /// The recorded run's id, so a replay names what it makes (worktree branches) the same
    /// and its requests match the recording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Default for CassetteHeader {
    fn default() -> Self {
        Self {
            cadre_cassette: CASSETTE_FORMAT,
            created_by: concat!("cadre ", env!("CARGO_PKG_VERSION")).into(),
            server_compaction: false,
            run_id: None,
        }
    }
}

/// The parts of a request a cassette keeps (every `cache_control` removed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// Model id.
    pub model: String,
    /// The system prompt blocks.
    #[serde(default)]
    pub system: Vec<SystemBlock>,
    /// The names of the offered tools, in order (for people reading the file).
    #[serde(default)]
    pub tool_names: Vec<String>,
    /// The full tool definitions.
    #[serde(default)]
    pub tools: Vec<ToolDefinition>,
    /// The conversation.
    pub messages: Vec<Message>,
}

impl RecordedRequest {
    /// The recorded form of `request`.
    pub fn from_request(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            system: request
                .system
                .iter()
                .map(|s| SystemBlock {
                    cache_control: None,
                    ..s.clone()
                })
                .collect(),
            tool_names: request.tools.iter().map(|t| t.name.clone()).collect(),
            tools: request
                .tools
                .iter()
                .map(|t| ToolDefinition {
                    cache_control: None,
                    ..t.clone()
                })
                .collect(),
            messages: strip_cache_control(&request.messages),
        }
    }
}

/// One recorded request and its response: one line of a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Exchange {
    /// The request's [`request_key`].
    pub key: String,
    /// The path of the agent that sent it (`main/explore#2`).
    pub agent: String,
    /// Its agent type (`explore`).
    pub agent_type: String,
    /// What was asked.
    pub request: RecordedRequest,
    /// What the model answered.
    pub response: Response,
}

impl Exchange {
    /// The exchange of `request` answered by `response`.
    pub fn new(request: &Request, response: Response) -> Self {
        let origin = request.origin.clone().unwrap_or_default();
        Self {
            key: request_key(request),
            agent: origin.path,
            agent_type: origin.agent_type,
            request: RecordedRequest::from_request(request),
            response,
        }
    }

    /// The key recomputed from the recorded agent type and messages.
    pub fn computed_key(&self) -> String {
        key_of(&self.agent_type, &self.request.messages)
    }
}

/// A loaded cassette.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cassette {
    /// Its header.
    pub header: CassetteHeader,
    /// Its exchanges, in the order they were recorded.
    pub exchanges: Vec<Exchange>,
    /// The line number of an unreadable last line that was dropped (a crash mid-write).
    pub truncated_tail: Option<usize>,
}

impl Cassette {
    /// Reads and parses the cassette at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Cassette {
            what: format!("replay: the cassette {} could not be read", path.display()),
            source: Box::new(source),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses cassette text; `name` (usually the path) appears in errors.
    pub fn parse(text: &str, name: &str) -> Result<Self, ModelError> {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        let Some(((_, first), rest)) = lines.split_first() else {
            return Err(ModelError::Replay(ReplayError::Empty {
                cassette: name.to_owned(),
            }));
        };
        let header: CassetteHeader =
            serde_json::from_str(first).map_err(|source| ModelError::Cassette {
                what: format!(
                    "replay: the cassette {name} does not start with a cadre cassette header (is it a cassette?)"
                ),
                source: Box::new(source),
            })?;
        if header.cadre_cassette != CASSETTE_FORMAT {
            return Err(ModelError::Replay(ReplayError::Version {
                cassette: name.to_owned(),
                found: header.cadre_cassette,
                expected: CASSETTE_FORMAT,
                created_by: header.created_by,
            }));
        }
        let mut exchanges = Vec::with_capacity(rest.len());
        let mut truncated_tail = None;
        for (pos, (line_no, line)) in rest.iter().enumerate() {
            match serde_json::from_str::<Exchange>(line) {
                Ok(exchange) => exchanges.push(exchange),
                Err(e) if pos + 1 == rest.len() => {
                    tracing::warn!(
                        cassette = name,
                        line = line_no,
                        "dropping the unreadable last line of the cassette (a recording cut short?): {e}"
                    );
                    truncated_tail = Some(*line_no);
                }
                Err(source) => {
                    return Err(ModelError::Cassette {
                        what: format!(
                            "replay: the cassette {name} has an unreadable line {line_no}"
                        ),
                        source: Box::new(source),
                    })
                }
            }
        }
        Ok(Self {
            header,
            exchanges,
            truncated_tail,
        })
    }

    /// The cassette as JSON Lines text (header first, one exchange a line).
    pub fn to_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut out = serde_json::to_string(&self.header)?;
        out.push('\n');
        for exchange in &self.exchanges {
            out.push_str(&serde_json::to_string(exchange)?);
            out.push('\n');
        }
        Ok(out)
    }
}

/// The replay key of `request`: hex SHA-256 of the canonical JSON of its agent type and
/// its messages without `cache_control`.
pub fn request_key(request: &Request) -> String {
    let agent_type = request
        .origin
        .as_ref()
        .map(|o| o.agent_type.as_str())
        .unwrap_or_default();
    key_of(agent_type, &strip_cache_control(&request.messages))
}

/// The key of already stripped messages.
fn key_of(agent_type: &str, messages: &[Message]) -> String {
    let value = serde_json::json!({
        "agent_type": agent_type,
        "messages": messages,
    });
    let mut canonical = String::new();
    write_canonical(&value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// `messages` with every cache breakpoint removed (nested tool_result blocks included).
pub fn strip_cache_control<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Vec<Message> {
    let mut out: Vec<Message> = messages.into_iter().cloned().collect();
    for message in &mut out {
        strip_blocks(&mut message.content);
    }
    out
}

fn strip_blocks(blocks: &mut [ContentBlock]) {
    for block in blocks {
        block.set_cache_control(None);
        match block {
            ContentBlock::ToolResult(r) => strip_blocks(&mut r.content),
            ContentBlock::Unknown(Value::Object(obj)) => {
                obj.remove("cache_control");
            }
            _ => {}
        }
    }
}

/// Canonical JSON: object keys sorted, no whitespace. Non-integer numbers are written with
/// 15 significant digits, so a last-bit difference from a JSON round trip cannot change a
/// key.
fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&v.to_string()),
        Value::Number(n) => {
            if n.is_f64() {
                let f = n.as_f64().unwrap_or_default();
                let _ = write!(out, "{f:.14e}");
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(item) = map.get(key) {
                    write_canonical(item, out);
                }
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CacheControl, RequestOrigin, Role, StopReason, Usage};
    use serde_json::json;

    fn request(agent_type: &str, text: &str) -> Request {
        let mut r = Request::new("m", 10, vec![Message::user_text(text)]);
        r.origin = Some(RequestOrigin {
            path: format!("main/{agent_type}#1"),
            agent_type: agent_type.into(),
        });
        r
    }

    fn response(text: &str) -> Response {
        Response {
            id: "msg_1".into(),
            model: "m".into(),
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
            stop_reason: Some(StopReason::EndTurn),
            stop_sequence: None,
            usage: Usage::default(),
        }
    }

    #[test]
    fn key_ignores_caching_path_and_key_order() {
        let a = request("explore", "hi");
        let mut b = a.clone();
        b.apply_prompt_caching();
        b.messages.make_mut()[0].content[0].set_cache_control(Some(CacheControl::ephemeral()));
        b.origin = Some(RequestOrigin {
            path: "main/explore#7".into(),
            agent_type: "explore".into(),
        });
        b.messages.make_mut().push(Message::new(
            Role::Assistant,
            vec![ContentBlock::Unknown(
                json!({"type": "document", "z": 1, "a": 2, "cache_control": {"type": "ephemeral"}}),
            )],
        ));
        let mut c = a.clone();
        c.messages.make_mut().push(Message::new(
            Role::Assistant,
            vec![ContentBlock::Unknown(
                json!({"a": 2, "type": "document", "z": 1}),
            )],
        ));
        assert_eq!(request_key(&b), request_key(&c));
        assert_eq!(request_key(&a).len(), 64);
        assert_ne!(request_key(&a), request_key(&request("plan", "hi")));
        assert_ne!(request_key(&a), request_key(&request("explore", "hi!")));
    }

    #[test]
    fn canonical_numbers() {
        let mut a = String::new();
        write_canonical(&json!({"b": [1, -2, 0.1], "a": "x\"y"}), &mut a);
        assert_eq!(a, r#"{"a":"x\"y","b":[1,-2,1.00000000000000e-1]}"#);
    }

    #[test]
    fn parse_round_trip_and_truncated_tail() {
        let cassette = Cassette {
            header: CassetteHeader::default(),
            exchanges: vec![
                Exchange::new(&request("main", "one"), response("1")),
                Exchange::new(&request("main", "two"), response("2")),
            ],
            truncated_tail: None,
        };
        let text = cassette.to_jsonl().unwrap();
        assert!(text.starts_with(r#"{"cadre_cassette":1,"created_by":"cadre "#));
        let back = Cassette::parse(&text, "c.jsonl").unwrap();
        assert_eq!(back, cassette);
        assert_eq!(back.exchanges[0].computed_key(), back.exchanges[0].key);

        let cut = &text[..text.len() - 20];
        let back = Cassette::parse(cut, "c.jsonl").unwrap();
        assert_eq!(back.exchanges.len(), 1);
        assert_eq!(back.truncated_tail, Some(3));

        let lines: Vec<&str> = text.lines().collect();
        let broken = format!("{}\n{{oops\n{}\n", lines[0], lines[2]);
        let err = Cassette::parse(&broken, "c.jsonl").unwrap_err();
        assert!(err.to_string().contains("unreadable line 2"), "{err}");

        let err = Cassette::parse("", "c.jsonl").unwrap_err();
        assert!(err.to_string().contains("is empty"), "{err}");
        let err =
            Cassette::parse("{\"cadre_cassette\": 9, \"created_by\": \"x\"}", "c").unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");
    }
}
