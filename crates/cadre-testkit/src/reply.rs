//! Scripted replies: what the mock server answers to one request.

use std::time::Duration;

use serde_json::{json, Value};

use crate::openai;
use crate::sse;

/// One content block of a scripted assistant message.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A `text` block.
    Text(String),
    /// A `thinking` block with its signature.
    Thinking {
        /// The visible reasoning.
        thinking: String,
        /// The signature sent in the final `signature_delta`.
        signature: String,
    },
    /// A `redacted_thinking` block holding this `data`.
    RedactedThinking(String),
    /// A `tool_use` block.
    ToolUse {
        /// The tool use id.
        id: String,
        /// The tool name.
        name: String,
        /// The tool input.
        input: Value,
    },
    /// Any block JSON (e.g. an unknown type), streamed as `content_block_start` with no deltas.
    Raw(Value),
    /// A `compaction` block (its JSON), streamed as the API does: a start with no content,
    /// then one `compaction_delta` with every field.
    Compaction(Value),
}

impl Block {
    /// The complete block as it appears in a non-streamed message.
    pub fn to_json(&self) -> Value {
        match self {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            Block::RedactedThinking(data) => json!({"type": "redacted_thinking", "data": data}),
            Block::ToolUse { id, name, input } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            Block::Raw(value) | Block::Compaction(value) => value.clone(),
        }
    }

    /// The SSE events (start, deltas, stop) that stream this block at `index`.
    pub fn sse_events(&self, index: usize) -> Vec<String> {
        let mut events = Vec::new();
        match self {
            Block::Text(text) => {
                events.push(sse::content_block_start(
                    index,
                    &json!({"type": "text", "text": ""}),
                ));
                // Several pieces so clients must concatenate deltas rather than take the first.
                for piece in sse::split_pieces(text, 3) {
                    events.push(sse::text_delta(index, piece));
                }
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                events.push(sse::content_block_start(
                    index,
                    &json!({"type": "thinking", "thinking": "", "signature": ""}),
                ));
                for piece in sse::split_pieces(thinking, 3) {
                    events.push(sse::thinking_delta(index, piece));
                }
                events.push(sse::signature_delta(index, signature));
            }
            Block::ToolUse { id, name, input } => {
                events.push(sse::content_block_start(
                    index,
                    &json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                ));
                // The real API often opens with an empty partial_json; then the JSON is cut at
                // arbitrary points so clients must buffer it before parsing.
                events.push(sse::input_json_delta(index, ""));
                let json_text = input.to_string();
                for piece in sse::split_pieces(&json_text, 3) {
                    events.push(sse::input_json_delta(index, piece));
                }
            }
            Block::Compaction(value) => {
                events.push(sse::content_block_start(
                    index,
                    &json!({"type": "compaction", "content": null, "encrypted_content": null}),
                ));
                let mut delta = value.clone();
                if let Some(obj) = delta.as_object_mut() {
                    obj.insert("type".into(), json!("compaction_delta"));
                }
                events.push(sse::event(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index, "delta": delta}),
                ));
            }
            Block::RedactedThinking(_) | Block::Raw(_) => {
                events.push(sse::content_block_start(index, &self.to_json()));
            }
        }
        events.push(sse::content_block_stop(index));
        events
    }
}

/// Token usage reported by a scripted reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens`.
    pub input_tokens: u64,
    /// `output_tokens`.
    pub output_tokens: u64,
    /// `cache_creation_input_tokens`.
    pub cache_creation_input_tokens: u64,
    /// `cache_read_input_tokens`.
    pub cache_read_input_tokens: u64,
}

impl Default for Usage {
    /// Input 10, output 5, no cache.
    fn default() -> Self {
        Self {
            input_tokens: 10,
            output_tokens: 5,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        }
    }
}

impl Usage {
    /// The `usage` object of a non-streamed message.
    pub fn to_json(&self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        })
    }
}

/// How a reply's body is cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Send n events, then end the body cleanly.
    Truncate(usize),
    /// Send n events, then abort the body with an error.
    Drop(usize),
    /// Send n events, then nothing until the client leaves (or ~120 s pass).
    Stall(usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Message {
        blocks: Vec<Block>,
        stop_reason: String,
    },
    Error {
        status: u16,
        kind: String,
        message: String,
    },
    StreamError {
        kind: String,
        message: String,
    },
    RawSse(String),
}

/// A scripted answer to one request (builder).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    body: Body,
    usage: Usage,
    /// `usage.iterations`, when the server compacted.
    iterations: Vec<Value>,
    delay: Option<Duration>,
    retry_after: Option<u64>,
    fault: Option<Fault>,
}

/// What the server sends for a reply, before faults are applied.
pub(crate) enum Rendered {
    /// A JSON body with this status.
    Json {
        /// HTTP status.
        status: u16,
        /// The body.
        body: Value,
    },
    /// A `text/event-stream` body made of these events.
    Sse(Vec<String>),
}

impl Reply {
    fn new(body: Body) -> Reply {
        Reply {
            body,
            usage: Usage::default(),
            iterations: Vec::new(),
            delay: None,
            retry_after: None,
            fault: None,
        }
    }

    /// One text block, stop reason `end_turn`.
    pub fn text(text: &str) -> Reply {
        Reply::blocks(vec![Block::Text(text.to_owned())])
    }

    /// One `tool_use` block, stop reason `tool_use`.
    pub fn tool_use(id: &str, name: &str, input: Value) -> Reply {
        Reply::tool_uses(vec![(id, name, input)])
    }

    /// `Task` calls in one turn, each `(id, subagent_type, prompt)`, described as `job {id}`.
    pub fn tasks<S: AsRef<str>>(calls: impl IntoIterator<Item = (S, S, S)>) -> Reply {
        let calls: Vec<(String, Value)> = calls
            .into_iter()
            .map(|(id, kind, prompt)| {
                let (id, kind, prompt) = (id.as_ref(), kind.as_ref(), prompt.as_ref());
                let input = json!({"description": format!("job {id}"), "prompt": prompt, "subagent_type": kind});
                (id.to_owned(), input)
            })
            .collect();
        Reply::tool_uses(
            calls
                .iter()
                .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                .collect(),
        )
    }

    /// Several `tool_use` blocks (id, name, input) in one turn, stop reason `tool_use`.
    pub fn tool_uses(calls: Vec<(&str, &str, Value)>) -> Reply {
        Reply::blocks(
            calls
                .into_iter()
                .map(|(id, name, input)| Block::ToolUse {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    input,
                })
                .collect(),
        )
    }

    /// These blocks; stop reason `tool_use` if any is a `ToolUse`, else `end_turn`.
    pub fn blocks(blocks: Vec<Block>) -> Reply {
        let stop_reason = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
            "tool_use"
        } else {
            "end_turn"
        };
        Reply::new(Body::Message {
            blocks,
            stop_reason: stop_reason.to_owned(),
        })
    }

    /// Overrides the stop reason (any string; only affects message replies).
    pub fn stop_reason(mut self, reason: &str) -> Reply {
        if let Body::Message { stop_reason, .. } = &mut self.body {
            reason.clone_into(stop_reason);
        }
        self
    }

    /// Sets the reported usage (default: input 10, output 5, cache 0/0).
    pub fn usage(mut self, input: u64, output: u64, cache_creation: u64, cache_read: u64) -> Reply {
        self.usage = Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: cache_creation,
            cache_read_input_tokens: cache_read,
        };
        self
    }

    /// Prepends a text block (only affects message replies).
    pub fn with_text_before(mut self, text: &str) -> Reply {
        if let Body::Message { blocks, .. } = &mut self.body {
            blocks.insert(0, Block::Text(text.to_owned()));
        }
        self
    }

    /// Waits this long before answering.
    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = Some(d);
        self
    }

    /// An HTTP error status with body `{"type":"error","error":{"type":kind,"message":message}}`.
    pub fn error_status(status: u16, kind: &str, message: &str) -> Reply {
        Reply::new(Body::Error {
            status,
            kind: kind.to_owned(),
            message: message.to_owned(),
        })
    }

    /// Adds a `retry-after: secs` header to the response.
    pub fn retry_after(mut self, secs: u64) -> Reply {
        self.retry_after = Some(secs);
        self
    }

    /// 200 OK stream of `message_start`, `ping`, then an `error` event, then the end.
    ///
    /// A non-streaming request gets the HTTP error the API uses for `kind` instead.
    pub fn stream_error(kind: &str, message: &str) -> Reply {
        Reply::new(Body::StreamError {
            kind: kind.to_owned(),
            message: message.to_owned(),
        })
    }

    /// 200 OK `text/event-stream` with exactly this body, whatever the request's `stream`.
    pub fn raw_sse(body: &str) -> Reply {
        Reply::new(Body::RawSse(body.to_owned()))
    }

    /// Sends only the first `after_events` SSE events, then ends the body cleanly.
    ///
    /// For this and the other faults, a non-streamed message reply sends the first half of
    /// its JSON instead of n events.
    pub fn truncated(mut self, after_events: usize) -> Reply {
        self.fault = Some(Fault::Truncate(after_events));
        self
    }

    /// Sends `after_events` SSE events, then aborts the body with an error.
    pub fn drop_connection(mut self, after_events: usize) -> Reply {
        self.fault = Some(Fault::Drop(after_events));
        self
    }

    /// Sends `after_events` SSE events, then nothing until the client disconnects (or ~120 s).
    pub fn stall(mut self, after_events: usize) -> Reply {
        self.fault = Some(Fault::Stall(after_events));
        self
    }

    /// This reply as the server sends it after compacting `tokens` of input first: the
    /// compaction `block` leads, and the usage lists both iterations.
    pub(crate) fn after_compaction(mut self, block: Value, tokens: u64) -> Reply {
        if let Body::Message { blocks, .. } = &mut self.body {
            blocks.insert(0, Block::Compaction(block));
            self.iterations = vec![
                json!({"type": "compaction", "input_tokens": tokens,
                       "output_tokens": crate::compaction::SUMMARY_TOKENS,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}),
                {
                    let mut m = self.usage.to_json();
                    if let Some(obj) = m.as_object_mut() {
                        obj.insert("type".into(), json!("message"));
                        obj.insert("model".into(), json!("claude-mock"));
                    }
                    m
                },
            ];
        }
        self
    }

    /// A reply holding only a compaction `block` of `tokens` input, stop reason
    /// `compaction`: an on-demand compaction, or one with `pause_after_compaction`.
    pub(crate) fn compaction_only(block: Value, tokens: u64) -> Reply {
        let mut reply = Reply::blocks(vec![Block::Compaction(block)]).stop_reason("compaction");
        reply.usage = Usage {
            input_tokens: tokens,
            output_tokens: crate::compaction::SUMMARY_TOKENS,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        };
        reply
    }

    /// This reply with its input counted by the prompt cache (its output as scripted).
    pub(crate) fn with_cache_use(mut self, used: crate::cache::CacheUse) -> Reply {
        self.usage.input_tokens = used.input_tokens;
        self.usage.cache_creation_input_tokens = used.cache_creation_input_tokens;
        self.usage.cache_read_input_tokens = used.cache_read_input_tokens;
        self
    }

    pub(crate) fn delay_time(&self) -> Option<Duration> {
        self.delay
    }

    pub(crate) fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }

    pub(crate) fn fault(&self) -> Option<Fault> {
        self.fault
    }

    /// What to send to a Chat Completions request asking for `model`, streamed or not.
    pub(crate) fn render_openai(&self, id: &str, model: &str, stream: bool) -> Rendered {
        let usage = openai::usage_json(
            self.usage.input_tokens,
            self.usage.output_tokens,
            self.usage.cache_read_input_tokens,
        );
        match &self.body {
            Body::Message {
                blocks,
                stop_reason,
            } if stream => Rendered::Sse(openai::stream_message(
                id,
                model,
                blocks,
                stop_reason,
                usage,
            )),
            Body::Message {
                blocks,
                stop_reason,
            } => Rendered::Json {
                status: 200,
                body: openai::message(id, model, blocks, stop_reason, usage),
            },
            Body::Error {
                status,
                kind,
                message,
            } => Rendered::Json {
                status: *status,
                body: openai::error_body(kind, message),
            },
            Body::StreamError { kind, message } if stream => Rendered::Sse(vec![
                openai::chunk(
                    &json!({"id": id, "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
                ),
                openai::chunk(&openai::error_body(kind, message)),
            ]),
            Body::StreamError { kind, message } => Rendered::Json {
                status: status_for_error_kind(kind),
                body: openai::error_body(kind, message),
            },
            Body::RawSse(body) => Rendered::Sse(split_events(body)),
        }
    }

    /// What to send for a request asking for `model`, streamed or not.
    pub(crate) fn render(&self, id: &str, model: &str, stream: bool) -> Rendered {
        match &self.body {
            Body::Message {
                blocks,
                stop_reason,
            } => {
                if stream {
                    let mut events = vec![sse::message_start(id, model, &self.usage), sse::ping()];
                    for (index, block) in blocks.iter().enumerate() {
                        events.extend(block.sse_events(index));
                    }
                    events.push(sse::message_delta_with(
                        stop_reason,
                        self.usage.output_tokens,
                        &self.iterations,
                    ));
                    events.push(sse::message_stop());
                    Rendered::Sse(events)
                } else {
                    Rendered::Json {
                        status: 200,
                        body: json!({
                            "id": id,
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": blocks.iter().map(Block::to_json).collect::<Vec<_>>(),
                            "stop_reason": stop_reason,
                            "stop_sequence": null,
                            "usage": self.usage_json(),
                        }),
                    }
                }
            }
            Body::Error {
                status,
                kind,
                message,
            } => Rendered::Json {
                status: *status,
                body: error_body(kind, message),
            },
            Body::StreamError { kind, message } => {
                if stream {
                    Rendered::Sse(vec![
                        sse::message_start(id, model, &self.usage),
                        sse::ping(),
                        sse::error(kind, message),
                    ])
                } else {
                    Rendered::Json {
                        status: status_for_error_kind(kind),
                        body: error_body(kind, message),
                    }
                }
            }
            Body::RawSse(body) => Rendered::Sse(split_events(body)),
        }
    }
}

impl Reply {
    /// The `usage` object of a non-streamed message, with iterations when it compacted.
    fn usage_json(&self) -> Value {
        let mut usage = self.usage.to_json();
        if let (false, Some(obj)) = (self.iterations.is_empty(), usage.as_object_mut()) {
            obj.insert("iterations".into(), Value::Array(self.iterations.clone()));
        }
        usage
    }
}

/// The API's error body.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The HTTP status the API answers with for an error `type`.
fn status_for_error_kind(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Splits a raw SSE body into events (each keeping its blank-line terminator) so faults can
/// cut it at event boundaries; any unterminated tail becomes the last piece.
fn split_events(body: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut rest = body;
    while let Some(pos) = rest.find("\n\n") {
        events.push(rest[..pos + 2].to_owned());
        rest = &rest[pos + 2..];
    }
    if !rest.is_empty() {
        events.push(rest.to_owned());
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reason_defaults() {
        let Body::Message { stop_reason, .. } = Reply::text("hi").body else {
            panic!("not a message")
        };
        assert_eq!(stop_reason, "end_turn");
        let r = Reply::tool_use("t1", "read", json!({})).with_text_before("let me look");
        let Body::Message {
            stop_reason,
            blocks,
        } = r.body
        else {
            panic!("not a message")
        };
        assert_eq!(stop_reason, "tool_use");
        assert_eq!(blocks[0], Block::Text("let me look".into()));
        let r = Reply::text("x").stop_reason("max_tokens");
        assert!(matches!(r.body, Body::Message { stop_reason, .. } if stop_reason == "max_tokens"));
    }

    #[test]
    fn split_events_keeps_bytes() {
        let body = "event: a\ndata: {}\n\nevent: b\ndata: {}\n\ntail";
        let events = split_events(body);
        assert_eq!(events.len(), 3);
        assert_eq!(events.concat(), body);
    }

    #[test]
    fn tool_input_deltas_rebuild_input() {
        let input = json!({"path": "src/main.rs", "limit": 20});
        let events = Block::ToolUse {
            id: "t".into(),
            name: "read".into(),
            input: input.clone(),
        }
        .sse_events(0);
        let mut json_text = String::new();
        let mut pieces = 0;
        for e in &events {
            let data: Value =
                serde_json::from_str(e.split("data: ").nth(1).unwrap().trim()).unwrap();
            if let Some(p) = data["delta"]["partial_json"].as_str() {
                json_text.push_str(p);
                pieces += 1;
            }
        }
        assert!(pieces >= 3);
        assert_eq!(serde_json::from_str::<Value>(&json_text).unwrap(), input);
    }
}
