//! Reading a Chat Completions answer, streamed as chunks or whole, back into a [`Response`].

use super::*;

/// A tool call being assembled.
#[derive(Debug, Default)]
pub(super) struct PendingCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
    pub(super) announced: bool,
}

impl PendingCall {
    /// Takes one `tool_calls` entry (a whole call or a stream fragment).
    pub(super) fn merge(&mut self, fragment: &Value) {
        if self.id.is_empty() {
            if let Some(id) = fragment.get("id").and_then(Value::as_str) {
                self.id = id.to_owned();
            }
        }
        let Some(function) = fragment.get("function") else {
            return;
        };
        if self.name.is_empty() {
            if let Some(name) = function.get("name").and_then(Value::as_str) {
                self.name = name.to_owned();
            }
        }
        match function.get("arguments") {
            Some(Value::String(part)) => self.arguments.push_str(part),
            // Some servers send the arguments as an object rather than a JSON string.
            Some(v @ (Value::Object(_) | Value::Array(_))) => {
                self.arguments.push_str(&v.to_string())
            }
            _ => {}
        }
    }

    /// Reports the call once its name is known, giving it an id if the server sent none.
    pub(super) fn announce(&mut self, ids: &AtomicU64, sink: EventSink<'_>) {
        if self.announced || self.name.is_empty() {
            return;
        }
        self.ensure_id(ids);
        self.announced = true;
        sink(ModelEvent::ToolUseStart {
            id: self.id.clone(),
            name: self.name.clone(),
        });
    }

    pub(super) fn ensure_id(&mut self, ids: &AtomicU64) {
        if self.id.is_empty() {
            self.id = format!("call_{}", ids.fetch_add(1, Ordering::Relaxed));
        }
    }

    pub(super) fn into_block(mut self, ids: &AtomicU64) -> ContentBlock {
        self.ensure_id(ids);
        let raw = self.arguments;
        let input = if raw.trim().is_empty() {
            Ok(Value::Object(Map::new()))
        } else {
            serde_json::from_str::<Value>(&raw)
        };
        // Bad JSON from the model is the model's mistake, not the stream's: keep the raw
        // text so the agent can answer with an `is_error` result instead of retrying.
        match input {
            Ok(input) => ContentBlock::tool_use(self.id, self.name, input),
            Err(e) => {
                tracing::debug!(tool = %self.name, id = %self.id, "tool arguments are not valid JSON: {e}");
                ContentBlock::ToolUse(crate::ToolUseBlock::invalid(self.id, self.name, raw, e))
            }
        }
    }
}

/// Everything a completion says, streamed or not.
#[derive(Debug, Default)]
pub(super) struct Completion {
    pub(super) id: String,
    pub(super) model: String,
    pub(super) text: String,
    pub(super) calls: BTreeMap<u64, PendingCall>,
    pub(super) finish_reason: Option<String>,
    pub(super) refused: bool,
    pub(super) usage: Usage,
}

impl Completion {
    pub(super) fn into_response(self, ids: &AtomicU64) -> Response {
        let has_calls = !self.calls.is_empty();
        let mut content = Vec::with_capacity(self.calls.len() + 1);
        if !self.text.is_empty() {
            content.push(ContentBlock::text(self.text));
        }
        content.extend(self.calls.into_values().map(|c| c.into_block(ids)));
        Response {
            id: self.id,
            model: self.model,
            role: Role::Assistant,
            content,
            stop_reason: map_finish_reason(self.finish_reason.as_deref(), has_calls, self.refused),
            stop_sequence: None,
            usage: self.usage,
        }
    }
}

/// The stop reason for a `finish_reason`.
///
/// Some local servers say `stop` (or nothing) when they ask for tools; a turn with tool
/// calls is a `ToolUse` turn unless it was cut short.
pub(super) fn map_finish_reason(
    reason: Option<&str>,
    has_calls: bool,
    refused: bool,
) -> Option<StopReason> {
    Some(match reason {
        None if has_calls => StopReason::ToolUse,
        None if refused => StopReason::Refusal,
        None => return None,
        Some("stop") if has_calls => StopReason::ToolUse,
        Some("stop") if refused => StopReason::Refusal,
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::Refusal,
        // A server that answers in the Messages API's words (`refusal`, `end_turn`) is
        // read as it means; only an unknown word stays `Other`.
        Some(other) => StopReason::parse(other),
    })
}

/// Token counts from a Chat Completions `usage` object; cached tokens are moved out of
/// `input_tokens` so that [`Usage::total_input`] equals `prompt_tokens`.
pub(super) fn parse_usage(v: &Value) -> Usage {
    let n = |ptr: &str| v.pointer(ptr).and_then(Value::as_u64).unwrap_or(0);
    let prompt = n("/prompt_tokens");
    let cached = n("/prompt_tokens_details/cached_tokens").min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: n("/completion_tokens"),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: cached,
        ..Usage::default()
    }
}

/// A `{"error": …}` object as a [`ModelError::StreamError`].
pub(super) fn stream_error(err: &Value) -> ModelError {
    let (kind, message) = error_fields(err);
    ModelError::StreamError {
        kind: kind.unwrap_or_else(|| "api_error".into()),
        message: message.unwrap_or_else(|| "the server reported an error without a message".into()),
    }
}

/// The type (or code) and message of an `error` value (an object or a bare string).
pub(super) fn error_fields(err: &Value) -> (Option<String>, Option<String>) {
    if let Some(s) = err.as_str() {
        return (None, Some(s.to_owned()).filter(|s| !s.trim().is_empty()));
    }
    let text = |name: &str| match err.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    (text("type").or_else(|| text("code")), text("message"))
}

/// Assembles a streamed completion from its `data:` chunks.
#[derive(Debug)]
pub(super) struct ChunkAssembler {
    pub(super) completion: Completion,
    pub(super) done: bool,
}

impl ChunkAssembler {
    pub(super) fn new(model: &str) -> Self {
        Self {
            completion: Completion {
                model: model.to_owned(),
                ..Completion::default()
            },
            done: false,
        }
    }

    /// Takes the data of one event, reporting progress to `sink`.
    pub(super) fn push(
        &mut self,
        data: &str,
        ids: &AtomicU64,
        sink: EventSink<'_>,
    ) -> Result<(), ModelError> {
        let data = data.trim();
        if data.is_empty() || self.done {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| ModelError::Malformed {
            what: "a stream chunk is not valid JSON".into(),
            source: Box::new(e),
        })?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(err));
        }
        let c = &mut self.completion;
        if let Some(id) = chunk.get("id").and_then(Value::as_str) {
            if !id.is_empty() {
                c.id = id.to_owned();
            }
        }
        if let Some(model) = chunk.get("model").and_then(Value::as_str) {
            if !model.is_empty() {
                c.model = model.to_owned();
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            c.usage = parse_usage(usage);
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta") {
                Self::delta(c, delta, ids, sink);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                c.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(())
    }

    pub(super) fn delta(c: &mut Completion, delta: &Value, ids: &AtomicU64, sink: EventSink<'_>) {
        let text = |name: &str| {
            delta
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        if let Some(t) = text("content") {
            c.text.push_str(t);
            sink(ModelEvent::TextDelta(t.to_owned()));
        }
        if let Some(t) = text("refusal") {
            c.refused = true;
            c.text.push_str(t);
            sink(ModelEvent::TextDelta(t.to_owned()));
        }
        // Visible reasoning is shown but not kept: these servers take nothing back.
        if let Some(t) = text("reasoning_content").or_else(|| text("reasoning")) {
            sink(ModelEvent::ThinkingDelta(t.to_owned()));
        }
        let fragments = delta.get("tool_calls").and_then(Value::as_array);
        for (pos, fragment) in fragments.into_iter().flatten().enumerate() {
            let index = fragment
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(pos as u64);
            let call = c.calls.entry(index).or_default();
            call.merge(fragment);
            call.announce(ids, sink);
        }
    }

    /// The assembled response; fails if the stream ended before a finish_reason or `[DONE]`.
    pub(super) fn finish(
        mut self,
        ids: &AtomicU64,
        sink: EventSink<'_>,
    ) -> Result<Response, ModelError> {
        if !self.done && self.completion.finish_reason.is_none() {
            return Err(ModelError::Protocol(ProtocolError::EndedEarly {
                expected: "a finish_reason or [DONE]",
            }));
        }
        for call in self.completion.calls.values_mut() {
            call.announce(ids, sink);
        }
        Ok(self.completion.into_response(ids))
    }
}

/// Decodes a whole (non-streamed) completion.
pub(super) fn decode_completion(
    body: &[u8],
    model: &str,
    ids: &AtomicU64,
) -> Result<Response, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ModelError::Malformed {
        what: "the response body is not a valid Chat Completions response".into(),
        source: Box::new(e),
    })?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(stream_error(err));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| ModelError::Protocol(ProtocolError::Incomplete { part: "choices" }))?;
    let message = choice
        .get("message")
        .ok_or_else(|| ModelError::Protocol(ProtocolError::Incomplete { part: "message" }))?;
    let str_of = |v: &Value, name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let mut c = Completion {
        id: str_of(&v, "id").unwrap_or_default(),
        model: str_of(&v, "model").unwrap_or_else(|| model.to_owned()),
        finish_reason: str_of(choice, "finish_reason"),
        usage: v.get("usage").map(parse_usage).unwrap_or_default(),
        ..Completion::default()
    };
    match message.get("content") {
        Some(Value::String(s)) => c.text.push_str(s),
        // Some servers answer with content parts.
        Some(Value::Array(parts)) => {
            for part in parts {
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    c.text.push_str(t);
                }
            }
        }
        _ => {}
    }
    if let Some(refusal) = str_of(message, "refusal") {
        c.refused = true;
        c.text.push_str(&refusal);
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for (pos, call) in calls.into_iter().flatten().enumerate() {
        let mut pending = PendingCall::default();
        pending.merge(call);
        pending.ensure_id(ids);
        c.calls.insert(pos as u64, pending);
    }
    Ok(c.into_response(ids))
}

/// The server's error type (or code) and message, or the status text and the start of a
/// non-JSON body.
pub(super) fn parse_error_body(status: StatusCode, body: &str) -> (String, String) {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        // `{"error": {...}}`, `{"error": "text"}`, or vLLM's flat `{"message", "type"}`.
        let (kind, message) = match v.get("error") {
            Some(err) if !err.is_null() => error_fields(err),
            _ => error_fields(&v),
        };
        if let Some(message) = message {
            return (kind.unwrap_or_else(|| status_text(status)), message);
        }
    }
    plain_error(status, body)
}
