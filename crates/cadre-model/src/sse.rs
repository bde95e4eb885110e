//! Assembles a streamed Messages API response from its server-sent events.
//!
//! SSE framing is done by `eventsource-stream`; this module only interprets the events
//! (`message_start`, `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`).

use crate::{
    CompactionBlock, ContentBlock, EventSink, ModelError, ModelEvent, ProtocolError, Response,
    Role, StopReason, Usage,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Builds one [`Response`] from the events of a streamed Messages API response.
///
/// Feed it every event with [`push`](Self::push), then call [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct StreamAssembler {
    id: String,
    model: String,
    usage: Usage,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    blocks: BTreeMap<u64, Slot>,
    complete: bool,
}

#[derive(Debug)]
struct Slot {
    block: ContentBlock,
    /// `input_json_delta` fragments, joined and parsed once the block stops: fragments
    /// split JSON mid-token, so no prefix of them is valid on its own.
    json: Option<String>,
    stopped: bool,
}

impl StreamAssembler {
    /// An assembler that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `message_stop` has arrived.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Takes one event (its SSE `event:` name and `data:` text), reporting progress to `sink`.
    ///
    /// Unknown events and delta types are skipped; an `error` event gives
    /// [`ModelError::StreamError`]; malformed data gives [`ModelError::Protocol`].
    pub fn push(&mut self, event: &str, data: &str, sink: EventSink<'_>) -> Result<(), ModelError> {
        let parsed;
        let name = if event.is_empty() || event == "message" {
            // No `event:` line: the SSE default name; the JSON `type` still says what it is.
            parsed = serde_json::from_str::<Value>(data).ok();
            match parsed
                .as_ref()
                .and_then(|v| v.get("type"))
                .and_then(Value::as_str)
            {
                Some(t) => t,
                None => {
                    tracing::debug!("skipping an unnamed stream event without a JSON type");
                    return Ok(());
                }
            }
        } else {
            event
        };
        match name {
            "ping" => return Ok(()),
            "message_start"
            | "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "message_delta"
            | "message_stop"
            | "error" => {}
            other => {
                // New event types must not break old clients.
                tracing::debug!(event = other, "skipping an unknown stream event");
                return Ok(());
            }
        }
        if self.complete {
            tracing::debug!(event = name, "skipping an event after message_stop");
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| ModelError::Malformed {
            what: format!("the data of a `{name}` event is not valid JSON"),
            source: Box::new(e),
        })?;
        match name {
            "message_start" => self.message_start(&v),
            "content_block_start" => self.block_start(&v, sink),
            "content_block_delta" => self.block_delta(&v, sink),
            "content_block_stop" => self.block_stop(&v),
            "message_delta" => {
                self.message_delta(&v);
                Ok(())
            }
            "message_stop" => {
                self.complete = true;
                Ok(())
            }
            _ => Err(stream_error(&v)),
        }
    }

    /// The assembled response; fails if `message_stop` never came or a tool input is bad.
    pub fn finish(mut self) -> Result<Response, ModelError> {
        if !self.complete {
            return Err(ModelError::Protocol(ProtocolError::EndedEarly {
                expected: "message_stop",
            }));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for (_, mut slot) in std::mem::take(&mut self.blocks) {
            // A block the stream never stopped still counts once the message is complete.
            if !slot.stopped {
                finalize(&mut slot)?;
            }
            content.push(slot.block);
        }
        Ok(Response {
            id: self.id,
            model: self.model,
            role: Role::Assistant,
            content,
            stop_reason: self.stop_reason,
            stop_sequence: self.stop_sequence,
            usage: self.usage,
        })
    }

    fn message_start(&mut self, v: &Value) -> Result<(), ModelError> {
        let Some(msg) = v.get("message").and_then(Value::as_object) else {
            return Err(missing("message_start", "message"));
        };
        if let Some(id) = msg.get("id").and_then(Value::as_str) {
            self.id = id.to_owned();
        }
        if let Some(model) = msg.get("model").and_then(Value::as_str) {
            self.model = model.to_owned();
        }
        if let Some(usage) = msg.get("usage") {
            merge_usage(&mut self.usage, usage);
        }
        Ok(())
    }

    fn block_start(&mut self, v: &Value, sink: EventSink<'_>) -> Result<(), ModelError> {
        const EV: &str = "content_block_start";
        let index = index_of(v, EV)?;
        let raw = v
            .get("content_block")
            .ok_or_else(|| missing(EV, "content_block"))?;
        let block: ContentBlock =
            serde_json::from_value(raw.clone()).map_err(|e| ModelError::Malformed {
                what: format!("the block in a `{EV}` event is malformed"),
                source: Box::new(e),
            })?;
        if self.blocks.contains_key(&index) {
            return Err(ModelError::Protocol(ProtocolError::StartedTwice { index }));
        }
        match &block {
            ContentBlock::ToolUse(t) => sink(ModelEvent::ToolUseStart {
                id: t.id.clone(),
                name: t.name.clone(),
            }),
            ContentBlock::Text(t) if !t.text.is_empty() => {
                sink(ModelEvent::TextDelta(t.text.clone()))
            }
            ContentBlock::Thinking(t) if !t.thinking.is_empty() => {
                sink(ModelEvent::ThinkingDelta(t.thinking.clone()))
            }
            ContentBlock::Compaction(_) => sink(ModelEvent::Compacting),
            _ => {}
        }
        self.blocks.insert(
            index,
            Slot {
                block,
                json: None,
                stopped: false,
            },
        );
        Ok(())
    }

    /// The slot of block `index`, started and not yet stopped, for a delta of `kind`.
    fn open_slot(&mut self, index: u64, kind: &str) -> Result<&mut Slot, ModelError> {
        let slot = self.blocks.get_mut(&index).ok_or_else(|| {
            ModelError::Protocol(ProtocolError::NotStarted {
                event: kind.to_owned(),
                index,
            })
        })?;
        if slot.stopped {
            return Err(ModelError::Protocol(ProtocolError::AfterStop {
                delta: kind.to_owned(),
                index,
            }));
        }
        Ok(slot)
    }

    fn block_delta(&mut self, v: &Value, sink: EventSink<'_>) -> Result<(), ModelError> {
        const EV: &str = "content_block_delta";
        let index = index_of(v, EV)?;
        let delta = v.get("delta").ok_or_else(|| missing(EV, "delta"))?;
        let kind = delta
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| missing(EV, "delta.type"))?;
        let slot = self.open_slot(index, kind)?;
        let field = |name: &str| {
            delta.get(name).and_then(Value::as_str).ok_or_else(|| {
                ModelError::Protocol(ProtocolError::DeltaField {
                    delta: kind.to_owned(),
                    field: name.to_owned(),
                })
            })
        };
        match (kind, &mut slot.block) {
            ("text_delta", ContentBlock::Text(b)) => {
                let text = field("text")?;
                b.text.push_str(text);
                sink(ModelEvent::TextDelta(text.to_owned()));
            }
            ("thinking_delta", ContentBlock::Thinking(b)) => {
                let text = field("thinking")?;
                b.thinking.push_str(text);
                sink(ModelEvent::ThinkingDelta(text.to_owned()));
            }
            ("signature_delta", ContentBlock::Thinking(b)) => {
                b.signature.push_str(field("signature")?);
            }
            ("citations_delta", ContentBlock::Text(b)) => {
                let citation = delta
                    .get("citation")
                    .ok_or_else(|| missing(EV, "delta.citation"))?;
                push_citation(&mut b.extra, citation.clone());
            }
            // Each field a delta carries replaces the block's (as the official SDKs do).
            ("compaction_delta", ContentBlock::Compaction(b)) => apply_compaction_delta(b, delta),
            ("input_json_delta", ContentBlock::ToolUse(_) | ContentBlock::Unknown(_)) => {
                let part = field("partial_json")?;
                slot.json.get_or_insert_with(String::new).push_str(part);
            }
            // A block type this version does not know (server tools, …) may still stream
            // text-like fields; append them to the field of the same name, verbatim.
            ("text_delta" | "thinking_delta" | "signature_delta", ContentBlock::Unknown(raw)) => {
                let name = kind.trim_end_matches("_delta");
                let part = field(name)?;
                append_field(raw, name, part);
            }
            ("citations_delta", ContentBlock::Unknown(raw)) => {
                if let (Some(obj), Some(c)) = (raw.as_object_mut(), delta.get("citation")) {
                    push_citation(obj, c.clone());
                }
            }
            (
                "text_delta" | "thinking_delta" | "signature_delta" | "citations_delta"
                | "input_json_delta",
                block,
            ) => {
                return Err(ModelError::Protocol(ProtocolError::WrongBlock {
                    delta: kind.to_owned(),
                    index,
                    block: block.type_name().to_owned(),
                }));
            }
            (other, _) => {
                tracing::debug!(delta = other, index, "ignoring an unknown delta type");
            }
        }
        Ok(())
    }

    fn block_stop(&mut self, v: &Value) -> Result<(), ModelError> {
        const EV: &str = "content_block_stop";
        let index = index_of(v, EV)?;
        let slot = self.blocks.get_mut(&index).ok_or_else(|| {
            ModelError::Protocol(ProtocolError::NotStarted {
                event: EV.to_owned(),
                index,
            })
        })?;
        finalize(slot)
    }

    fn message_delta(&mut self, v: &Value) {
        if let Some(delta) = v.get("delta") {
            if let Some(reason) = delta.get("stop_reason").and_then(Value::as_str) {
                self.stop_reason = Some(StopReason::parse(reason));
            }
            if let Some(seq) = delta.get("stop_sequence") {
                self.stop_sequence = seq.as_str().map(str::to_owned);
            }
        }
        if let Some(usage) = v.get("usage") {
            merge_usage(&mut self.usage, usage);
        }
    }
}

/// Parses a finished block's accumulated tool input and marks it stopped.
fn finalize(slot: &mut Slot) -> Result<(), ModelError> {
    slot.stopped = true;
    let Some(json) = slot.json.take() else {
        return Ok(());
    };
    // The API streams `""` for a tool called without arguments.
    let parsed = if json.trim().is_empty() {
        Ok(Value::Object(Map::new()))
    } else {
        serde_json::from_str::<Value>(&json)
    };
    match &mut slot.block {
        ContentBlock::ToolUse(t) => {
            // Bad JSON from the model is the model's mistake, not the stream's: keep the raw
            // text so the agent can answer with an `is_error` result instead of retrying.
            match parsed {
                Ok(input) => t.input = input,
                Err(e) => {
                    tracing::debug!(tool = %t.name, id = %t.id, "tool input is not valid JSON: {e}");
                    t.input = Value::Object(Map::new());
                    t.invalid_input = Some(crate::InvalidInput {
                        text: json,
                        error: e.to_string(),
                    });
                }
            }
        }
        ContentBlock::Unknown(raw) => {
            let kind = raw
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned();
            let input = parsed.map_err(|e| ModelError::Malformed {
                what: format!(
                    "the input the model streamed for a `{kind}` block is not valid JSON"
                ),
                source: Box::new(e),
            })?;
            if let Some(obj) = raw.as_object_mut() {
                obj.insert("input".into(), input);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Applies a `compaction_delta`: each field it carries replaces the block's.
fn apply_compaction_delta(b: &mut CompactionBlock, delta: &Value) {
    for (key, value) in delta.as_object().into_iter().flatten() {
        match (key.as_str(), value) {
            ("type", _) | (_, Value::Null) => {}
            ("content", Value::String(v)) => b.content = Some(v.clone()),
            ("encrypted_content", Value::String(v)) => {
                b.encrypted_content = Some(v.clone());
            }
            (other, v) => {
                b.extra.insert(other.to_owned(), v.clone());
            }
        }
    }
}

fn index_of(v: &Value, event: &str) -> Result<u64, ModelError> {
    v.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| missing(event, "index"))
}

fn missing(event: &str, field: &'static str) -> ModelError {
    ModelError::Protocol(ProtocolError::MissingField {
        event: event.to_owned(),
        field,
    })
}

fn stream_error(v: &Value) -> ModelError {
    let err = v.get("error");
    let text = |name: &str, default: &str| {
        err.and_then(|e| e.get(name))
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    ModelError::StreamError {
        kind: text("type", "unknown_error"),
        message: text("message", "the stream reported an error without a message"),
    }
}

/// Overwrites every usage count present in `v` (absent or null fields keep their value).
fn merge_usage(usage: &mut Usage, v: &Value) {
    let set = |field: &mut u64, key: &str| {
        if let Some(n) = v.get(key).and_then(Value::as_u64) {
            *field = n;
        }
    };
    set(&mut usage.input_tokens, "input_tokens");
    set(&mut usage.output_tokens, "output_tokens");
    set(
        &mut usage.cache_creation_input_tokens,
        "cache_creation_input_tokens",
    );
    set(
        &mut usage.cache_read_input_tokens,
        "cache_read_input_tokens",
    );
    if let Some(iterations) = v.get("iterations").and_then(Value::as_array) {
        usage.compaction = crate::CompactionUsage::from_iterations(iterations);
    }
}

fn push_citation(obj: &mut Map<String, Value>, citation: Value) {
    match obj.get_mut("citations") {
        Some(Value::Array(list)) => list.push(citation),
        _ => {
            obj.insert("citations".into(), Value::Array(vec![citation]));
        }
    }
}

fn append_field(raw: &mut Value, name: &str, part: &str) {
    let Some(obj) = raw.as_object_mut() else {
        return;
    };
    match obj.get_mut(name) {
        Some(Value::String(s)) => s.push_str(part),
        _ => {
            obj.insert(name.into(), Value::String(part.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    struct Run {
        asm: StreamAssembler,
        seen: Mutex<Vec<ModelEvent>>,
    }

    impl Run {
        fn new() -> Self {
            Self {
                asm: StreamAssembler::new(),
                seen: Mutex::new(Vec::new()),
            }
        }

        fn push(&mut self, event: &str, data: Value) -> Result<(), ModelError> {
            self.push_raw(event, &data.to_string())
        }

        fn push_raw(&mut self, event: &str, data: &str) -> Result<(), ModelError> {
            let seen = &self.seen;
            let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
            self.asm.push(event, data, &sink)
        }

        fn start(&mut self) {
            self.push(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                    "model": "claude-sonnet-5-5", "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 12, "output_tokens": 1,
                              "cache_creation_input_tokens": 100, "cache_read_input_tokens": 50}
                }}),
            )
            .unwrap();
        }

        fn block(&mut self, index: u64, block: Value) {
            self.push(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            )
            .unwrap();
        }

        fn delta(&mut self, index: u64, delta: Value) {
            self.push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            )
            .unwrap();
        }

        fn stop_block(&mut self, index: u64) -> Result<(), ModelError> {
            self.push(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            )
        }

        fn end(&mut self, reason: &str) {
            self.push(
                "message_delta",
                json!({"type": "message_delta",
                       "delta": {"stop_reason": reason, "stop_sequence": null},
                       "usage": {"output_tokens": 42}}),
            )
            .unwrap();
            self.push("message_stop", json!({"type": "message_stop"}))
                .unwrap();
        }

        fn events(&self) -> Vec<ModelEvent> {
            self.seen.lock().unwrap().clone()
        }
    }

    #[test]
    fn a_compaction_block_streams_whole_with_unknown_fields_and_its_usage() {
        let mut r = Run::new();
        r.start();
        r.block(
            0,
            json!({"type": "compaction", "content": null, "encrypted_content": null}),
        );
        r.delta(
            0,
            json!({"type": "compaction_delta", "content": "Earlier: read 30 files.",
                   "encrypted_content": "EpwB", "signature": "sig-1"}),
        );
        r.stop_block(0).unwrap();
        r.block(1, json!({"type": "text", "text": ""}));
        r.delta(1, json!({"type": "text_delta", "text": "Going on."}));
        r.stop_block(1).unwrap();
        r.push(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                   "usage": {"output_tokens": 7, "iterations": [
                       {"type": "compaction", "input_tokens": 150000, "output_tokens": 900,
                        "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0},
                       {"type": "message", "model": "claude-sonnet-5-5", "input_tokens": 12,
                        "output_tokens": 7, "cache_read_input_tokens": 0,
                        "cache_creation_input_tokens": 0}]}}),
        )
        .unwrap();
        r.push("message_stop", json!({"type": "message_stop"}))
            .unwrap();
        assert_eq!(r.events()[0], ModelEvent::Compacting);
        let resp = r.asm.finish().unwrap();
        let block = serde_json::to_value(&resp.content[0]).unwrap();
        assert_eq!(
            block,
            json!({"type": "compaction", "content": "Earlier: read 30 files.",
                   "encrypted_content": "EpwB", "signature": "sig-1"})
        );
        assert_eq!(resp.text(), "Going on.");
        let c = resp.usage.compaction;
        assert_eq!(
            (c.count, c.input_tokens, c.output_tokens),
            (1, 151_000, 900)
        );
        // The top-level counts stay the answer's; the budget counts both.
        assert_eq!(resp.usage.output_tokens, 7);
        assert_eq!(resp.usage.total(), 12 + 150 + 7 + 151_900);
        // cadre's own spelling reads back the same.
        let again: crate::Usage =
            serde_json::from_value(serde_json::to_value(resp.usage).unwrap()).unwrap();
        assert_eq!(again, resp.usage);
        assert_eq!(StopReason::parse("compaction"), StopReason::Compaction);
    }

    #[test]
    fn text_in_many_deltas() {
        let mut r = Run::new();
        r.start();
        r.push("ping", json!({"type": "ping"})).unwrap();
        r.block(0, json!({"type": "text", "text": ""}));
        let pieces = ["Hel", "lo", ", ", "wor", "ld", "!"];
        for p in pieces {
            r.delta(0, json!({"type": "text_delta", "text": p}));
        }
        r.stop_block(0).unwrap();
        r.end("end_turn");
        assert!(r.asm.is_complete());
        let events = r.events();
        let resp = r.asm.finish().unwrap();
        assert_eq!(resp.text(), "Hello, world!");
        assert_eq!(resp.id, "msg_1");
        assert_eq!(resp.model, "claude-sonnet-5-5");
        assert_eq!(resp.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 42,
                cache_creation_input_tokens: 100,
                cache_read_input_tokens: 50,
                ..Default::default()
            }
        );
        let expected: Vec<_> = pieces
            .iter()
            .map(|p| ModelEvent::TextDelta((*p).into()))
            .collect();
        assert_eq!(events, expected);
    }

    #[test]
    fn tool_input_split_mid_token() {
        let mut r = Run::new();
        r.start();
        r.block(0, json!({"type": "text", "text": ""}));
        r.delta(0, json!({"type": "text_delta", "text": "Let me look."}));
        r.stop_block(0).unwrap();
        r.block(
            1,
            json!({"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}),
        );
        let json = r#"{"command": "ls -la \"my dir\"", "timeout": 1200, "flags": [true, null]}"#;
        // Three-byte chunks split keys, strings, escapes and numbers mid-token.
        let chars: Vec<char> = json.chars().collect();
        for chunk in chars.chunks(3) {
            let part: String = chunk.iter().collect();
            r.delta(1, json!({"type": "input_json_delta", "partial_json": part}));
        }
        r.stop_block(1).unwrap();
        r.block(
            2,
            json!({"type": "tool_use", "id": "toolu_2", "name": "list_files", "input": {}}),
        );
        r.delta(2, json!({"type": "input_json_delta", "partial_json": ""}));
        r.stop_block(2).unwrap();
        r.end("tool_use");
        let events = r.events();
        let resp = r.asm.finish().unwrap();
        assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
        let uses: Vec<_> = resp.tool_uses().collect();
        assert_eq!(uses.len(), 2);
        assert_eq!(
            uses[0].input,
            json!({"command": "ls -la \"my dir\"", "timeout": 1200, "flags": [true, null]})
        );
        assert_eq!(uses[1].input, json!({}));
        assert!(events.contains(&ModelEvent::ToolUseStart {
            id: "toolu_1".into(),
            name: "bash".into()
        }));
    }

    #[test]
    fn invalid_tool_json_is_kept_for_an_error_result() {
        let mut r = Run::new();
        r.start();
        r.block(
            0,
            json!({"type": "tool_use", "id": "toolu_9", "name": "edit_file", "input": {}}),
        );
        r.delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"path\": "}),
        );
        r.stop_block(0).unwrap();
        r.end("tool_use");
        let response = r.asm.finish().unwrap();
        let t = response.tool_uses().next().unwrap();
        let bad = t.invalid_input.as_ref().unwrap();
        assert_eq!(bad.text, "{\"path\": ");
        assert_eq!(t.input, json!({}));
    }

    #[test]
    fn thinking_and_signature_kept_verbatim() {
        let mut r = Run::new();
        r.start();
        r.block(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        );
        r.delta(0, json!({"type": "thinking_delta", "thinking": "First, "}));
        r.delta(0, json!({"type": "thinking_delta", "thinking": "think."}));
        r.delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM+/=="}),
        );
        r.stop_block(0).unwrap();
        r.block(1, json!({"type": "redacted_thinking", "data": "opaque=="}));
        r.stop_block(1).unwrap();
        r.block(2, json!({"type": "text", "text": ""}));
        r.delta(2, json!({"type": "text_delta", "text": "Done."}));
        r.stop_block(2).unwrap();
        r.end("end_turn");
        let events = r.events();
        let resp = r.asm.finish().unwrap();
        assert_eq!(
            serde_json::to_value(&resp.content).unwrap(),
            json!([
                {"type": "thinking", "thinking": "First, think.", "signature": "EqQBCgIYAhIM+/=="},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "text", "text": "Done."}
            ])
        );
        assert_eq!(events[0], ModelEvent::ThinkingDelta("First, ".into()));
    }

    #[test]
    fn unknown_block_kept_and_citations_collected() {
        let mut r = Run::new();
        r.start();
        let server_use =
            json!({"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}});
        r.block(0, server_use);
        r.delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"query\":"}),
        );
        r.delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "\"rust\"}"}),
        );
        r.stop_block(0).unwrap();
        let result = json!({"type": "web_search_tool_result", "tool_use_id": "srv_1",
                            "content": [{"type": "web_search_result", "url": "https://x"}]});
        r.block(1, result.clone());
        r.stop_block(1).unwrap();
        r.block(2, json!({"type": "text", "text": ""}));
        r.delta(2, json!({"type": "citations_delta", "citation": {"type": "web_search_result_location", "url": "https://x"}}));
        r.delta(2, json!({"type": "text_delta", "text": "Rust is"}));
        r.delta(2, json!({"type": "brand_new_delta", "whatever": 1}));
        r.stop_block(2).unwrap();
        r.end("end_turn");
        let resp = r.asm.finish().unwrap();
        assert_eq!(
            resp.content[0],
            ContentBlock::Unknown(json!({"type": "server_tool_use", "id": "srv_1",
                                         "name": "web_search", "input": {"query": "rust"}}))
        );
        assert_eq!(resp.content[1], ContentBlock::Unknown(result));
        assert_eq!(
            serde_json::to_value(&resp.content[2]).unwrap(),
            json!({"type": "text", "text": "Rust is",
                   "citations": [{"type": "web_search_result_location", "url": "https://x"}]})
        );
    }

    #[test]
    fn unknown_events_are_skipped() {
        let mut r = Run::new();
        r.start();
        r.push_raw("some_future_event", "not even json").unwrap();
        r.push("message", json!({"type": "ping"})).unwrap();
        r.push_raw("message", "unnamed and not json").unwrap();
        r.block(0, json!({"type": "text", "text": ""}));
        r.delta(0, json!({"type": "text_delta", "text": "ok"}));
        r.stop_block(0).unwrap();
        r.end("end_turn");
        assert_eq!(r.asm.finish().unwrap().text(), "ok");
    }

    #[test]
    fn error_event_is_a_stream_error() {
        let mut r = Run::new();
        r.start();
        let err = r
            .push(
                "error",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            )
            .unwrap_err();
        match &err {
            ModelError::StreamError { kind, message } => {
                assert_eq!(kind, "overloaded_error");
                assert_eq!(message, "Overloaded");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.is_transient());
    }

    #[test]
    fn missing_message_stop_fails() {
        let mut r = Run::new();
        r.start();
        r.block(0, json!({"type": "text", "text": ""}));
        r.delta(0, json!({"type": "text_delta", "text": "cut off"}));
        let err = r.asm.finish().unwrap_err();
        assert!(matches!(err, ModelError::Protocol(_)));
        assert!(err
            .to_string()
            .contains("the stream ended before message_stop"));
    }

    #[test]
    fn malformed_data_names_the_event() {
        let mut r = Run::new();
        r.start();
        let err = r
            .push_raw("content_block_delta", "{\"index\": 0, ")
            .unwrap_err();
        assert!(matches!(err, ModelError::Malformed { .. }));
        assert!(err.to_string().contains("content_block_delta"), "{err}");
        let err = r.push(
            "content_block_delta",
            json!({"index": 5, "delta": {"type": "text_delta", "text": "x"}}),
        );
        assert!(matches!(err, Err(ModelError::Protocol(_))));
    }

    #[test]
    fn stop_sequence_and_usage_overwrite() {
        let mut r = Run::new();
        r.start();
        r.push(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
                   "usage": {"output_tokens": 7, "input_tokens": 3, "cache_read_input_tokens": null}}),
        )
        .unwrap();
        r.push("message_stop", json!({"type": "message_stop"}))
            .unwrap();
        let resp = r.asm.finish().unwrap();
        assert_eq!(resp.stop_reason, Some(StopReason::StopSequence));
        assert_eq!(resp.stop_sequence.as_deref(), Some("END"));
        assert_eq!(resp.usage.output_tokens, 7);
        assert_eq!(resp.usage.input_tokens, 3);
        assert_eq!(resp.usage.cache_read_input_tokens, 50);
        assert!(resp.content.is_empty());
    }
}
