//! An OpenAI-compatible Chat Completions provider (OpenAI, Ollama, vLLM, llama.cpp, …).
//!
//! Each Messages-API [`Request`] is translated to one `POST {base_url}/chat/completions`
//! and the answer (streamed as `data:` chunks until `data: [DONE]`, or one JSON body) is
//! translated back into a [`Response`]. Errors and retries behave exactly as in the
//! Anthropic provider. The API key, when there is one, lives only in a sensitive
//! `Authorization` default header of the HTTP client: it is never logged, printed, or put
//! into an error.
//!
//! What does not translate is dropped: `thinking`, `redacted_thinking` and unknown blocks,
//! cache breakpoints, images given by URL, the `thinking` and `metadata` request fields.
//! Text a user message holds next to tool results is sent as a user message after the
//! `tool` messages, since those must follow the assistant message directly.
//!
//! [`Model::context_window`] asks the server once per model id: `GET {base_url}/models`
//! (vLLM's `max_model_len`, OpenRouter's `context_length`, LM Studio's
//! `max_context_length`), then `GET {server root}/props` (llama.cpp's `n_ctx`). Any failure
//! there only means the window is unknown.

use crate::transport::{
    http_setters, plain_error, status_text, Decoder, Endpoint, HttpOptions, Transport,
};
use crate::{
    ContentBlock, EventSink, ImageBlock, Message, Model, ModelError, ModelEvent, Request, Response,
    Role, StopReason, ToolResultBlock, Usage,
};
use async_trait::async_trait;
use eventsource_stream::Event;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::{StatusCode, Url};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::OnceCell;

/// The public OpenAI API (Ollama users give `http://localhost:11434/v1`).
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How long asking a server for its context window may take, both endpoints together: the
/// answer is only a hint, and a run must not wait on a server that ignores the question.
const INFO_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach an OpenAI-compatible Chat Completions API.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Where the API lives, `/v1` included (`{base_url}/chat/completions` is called).
    pub base_url: String,
    /// Kept private so it can only be handed to the HTTP client; local servers need none.
    api_key: Option<String>,
    /// Retries, streaming and timeouts.
    pub http: HttpOptions,
    /// Send the output cap as `max_completion_tokens` (newer OpenAI models) instead of `max_tokens`.
    pub max_completion_tokens: bool,
    /// Ask a stream for its usage (`stream_options: {include_usage: true}`).
    pub stream_usage: bool,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenAiConfig {
    /// A config for the public OpenAI API without a key, with every default.
    pub fn new() -> Self {
        Self {
            base_url: OPENAI_DEFAULT_BASE_URL.into(),
            api_key: None,
            http: HttpOptions::default(),
            max_completion_tokens: false,
            stream_usage: true,
        }
    }

    /// A config from `OPENAI_API_KEY` and `OPENAI_BASE_URL`, each used only when set.
    pub fn from_env() -> Self {
        let mut config = Self::new();
        if let Ok(key) = std::env::var("OPENAI_API_KEY") {
            config = config.with_api_key(key);
        }
        if let Ok(url) = std::env::var("OPENAI_BASE_URL") {
            if !url.trim().is_empty() {
                config.base_url = url.trim().to_owned();
            }
        }
        config
    }

    /// Sets the API key, sent as `Authorization: Bearer …`; a blank key means none.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        let key: String = api_key.into();
        self.api_key = (!key.trim().is_empty()).then(|| key.trim().to_owned());
        self
    }

    /// Removes the API key (for local servers).
    pub fn without_api_key(mut self) -> Self {
        self.api_key = None;
        self
    }

    /// Whether a key is set.
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// Sets the base URL (`/v1` included).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    http_setters!();

    /// Sends the output cap as `max_completion_tokens` when `true`, `max_tokens` when `false`.
    pub fn with_max_completion_tokens(mut self, yes: bool) -> Self {
        self.max_completion_tokens = yes;
        self
    }

    /// Asks streams for usage (`stream_options`) when `true`; some old servers reject it.
    pub fn with_stream_usage(mut self, yes: bool) -> Self {
        self.stream_usage = yes;
        self
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.api_key.is_some() {
            "Some(<redacted>)"
        } else {
            "None"
        };
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &format_args!("{key}"))
            .field("http", &self.http)
            .field("max_completion_tokens", &self.max_completion_tokens)
            .field("stream_usage", &self.stream_usage)
            .finish()
    }
}

/// A [`Model`] backed by an OpenAI-compatible Chat Completions API.
pub struct OpenAiModel {
    transport: Transport,
    config: OpenAiConfig,
    /// Numbers the `call_<n>` ids given to tool calls a server sent without one.
    call_ids: AtomicU64,
    /// `{base_url}/models`, where vLLM and others list each model's context length.
    models_url: Url,
    /// `{server root}/props`, where llama.cpp reports its `n_ctx`.
    props_url: Option<Url>,
    /// The context window per model id, asked for once each (`None`: the server did not say).
    windows: Mutex<HashMap<String, Arc<OnceCell<Option<u64>>>>>,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("url", &self.transport.shown_url())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// Builds the provider and its HTTP client; fails on a bad URL or an unsendable key.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let endpoint = Endpoint::new("OpenAI-compatible", &config.base_url, "/chat/completions")?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ModelError::Config(
                    "The OpenAI API key contains characters that cannot be sent in an HTTP header."
                        .into(),
                )
            })?;
            // Sensitive values are redacted from reqwest's and http's Debug output.
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let secret = config.api_key.clone();
        let transport = Transport::new(endpoint, headers, config.http, secret, parse_error_body)?;
        let models_url = Endpoint::new("OpenAI-compatible", &config.base_url, "/models")?.url;
        let props_url = props_url(&models_url);
        Ok(Self {
            transport,
            config,
            call_ids: AtomicU64::new(1),
            models_url,
            props_url,
            windows: Mutex::new(HashMap::new()),
        })
    }

    /// The settings this provider was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// Asks the server for `model`'s context window: `/models` first, then `/props`.
    async fn ask_context_window(&self, model: &str) -> Option<u64> {
        let ask = async {
            let listed = self.get_json(&self.models_url).await;
            if let Some(window) = listed.and_then(|list| window_in_models(&list, model)) {
                return Some(window);
            }
            let props = self.get_json(self.props_url.as_ref()?).await?;
            window_in_props(&props)
        };
        let window = tokio::time::timeout(INFO_TIMEOUT, ask).await.ok().flatten();
        tracing::debug!(
            url = %self.transport.shown_url(),
            model = %model,
            window = ?window,
            "asked the server for the context window"
        );
        window
    }

    /// The JSON body of a `GET` to `url`; `None` on any failure or non-2xx status.
    ///
    /// The client carries the same headers (the key among them) as chat requests. Errors
    /// are dropped unlogged: reqwest's wording would show the URL, credentials and all.
    async fn get_json(&self, url: &Url) -> Option<Value> {
        let resp = self.transport.client.get(url.clone()).send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = resp.bytes().await.ok()?;
        serde_json::from_slice(&body).ok()
    }
}

/// `{server root}/props` for `{base_url}/models`: a trailing `/v1` is dropped, since
/// llama.cpp serves `/props` beside `/v1`, not under it. `None` if the URL has no path.
fn props_url(models_url: &Url) -> Option<Url> {
    let mut url = models_url.clone();
    let under_v1 = url.path_segments()?.rev().nth(1) == Some("v1");
    {
        let mut segments = url.path_segments_mut().ok()?;
        segments.pop();
        if under_v1 {
            segments.pop();
        }
        segments.push("props");
    }
    Some(url)
}

/// A positive whole number of tokens.
fn tokens(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| *n > 0)
}

/// The context window of `model` in a `/models` list: the entry with that id, else the
/// only entry (local servers often serve one model under another name).
fn window_in_models(list: &Value, model: &str) -> Option<u64> {
    let data = list.get("data")?.as_array()?;
    let entry = data
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or(match data.as_slice() {
            [only] => Some(only),
            _ => None,
        })?;
    ["max_model_len", "context_length", "max_context_length"]
        .iter()
        .find_map(|field| entry.get(field).and_then(tokens))
}

/// The context window in llama.cpp's `/props`.
fn window_in_props(props: &Value) -> Option<u64> {
    props
        .pointer("/default_generation_settings/n_ctx")
        .and_then(tokens)
        .or_else(|| props.get("n_ctx").and_then(tokens))
}

#[async_trait]
impl Model for OpenAiModel {
    fn provider(&self) -> &str {
        "openai"
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        let body = chat_body(&request, &self.config);
        let model = request.model.as_str();
        let decoder = || Chat {
            assembler: ChunkAssembler::new(model),
            ids: &self.call_ids,
            events,
        };
        self.transport
            .send(
                "Chat Completions",
                model,
                &reqwest::header::HeaderMap::new(),
                &body,
                events,
                decoder,
            )
            .await
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        let cell = {
            // A poisoned lock only means another caller panicked; the map is still whole.
            let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(windows.entry(model.to_owned()).or_default())
        };
        // Concurrent callers for one id wait on one request; a cancelled ask is asked again.
        *cell.get_or_init(|| self.ask_context_window(model)).await
    }
}

/// Reads one Chat Completions answer, streamed or whole.
struct Chat<'a> {
    assembler: ChunkAssembler,
    ids: &'a AtomicU64,
    events: EventSink<'a>,
}

impl Decoder for Chat<'_> {
    fn event(&mut self, event: &Event) -> Result<bool, ModelError> {
        self.assembler.push(&event.data, self.ids, self.events)?;
        Ok(self.assembler.done)
    }

    fn finish(self) -> Result<Response, ModelError> {
        self.assembler.finish(self.ids, self.events)
    }

    fn body(self, body: &[u8]) -> Result<Response, ModelError> {
        decode_completion(body, &self.assembler.completion.model, self.ids)
    }
}

// ---------------------------------------------------------------------------------------
// Request translation.

/// The Chat Completions body for `request`.
fn chat_body(request: &Request, config: &OpenAiConfig) -> Value {
    let mut messages = Vec::new();
    let system = join_nonempty(request.system.iter().map(|b| b.text.as_str()));
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        match message.role {
            Role::User => push_user(&mut messages, message),
            Role::Assistant => push_assistant(&mut messages, message),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let cap = if config.max_completion_tokens {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    body.insert(cap.into(), Value::from(request.max_tokens));
    if let Some(t) = request.temperature {
        // Through its shortest decimal form, so 0.7 is sent as 0.7, not 0.699999988….
        let t = t.to_string().parse::<f64>().unwrap_or(f64::from(t));
        body.insert("temperature".into(), Value::from(t));
    }
    if !request.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(request.stop_sequences));
    }
    body.insert("stream".into(), Value::Bool(config.http.stream));
    if config.http.stream && config.stream_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// The non-empty texts joined by blank lines.
fn join_nonempty<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    texts
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A user message: one `tool` message per tool result, in order, then the rest as a user message.
fn push_user(out: &mut Vec<Value>, message: &Message) {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(r) => out.push(json!({
                "role": "tool",
                "tool_call_id": r.tool_use_id,
                "content": tool_result_text(r),
            })),
            ContentBlock::Text(t) => parts.push(json!({"type": "text", "text": t.text})),
            ContentBlock::Image(i) => {
                if let Some(url) = image_data_url(i) {
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        return;
    }
    let only_text = parts.iter().all(|p| p["type"] == "text");
    let content = if only_text {
        Value::String(join_nonempty(
            parts.iter().filter_map(|p| p["text"].as_str()),
        ))
    } else {
        Value::Array(parts)
    };
    out.push(json!({"role": "user", "content": content}));
}

/// An assistant message: its text as `content`, its tool uses as `tool_calls`.
fn push_assistant(out: &mut Vec<Value>, message: &Message) {
    let text = join_nonempty(message.content.iter().filter_map(|b| match b {
        ContentBlock::Text(t) => Some(t.text.as_str()),
        _ => None,
    }));
    let calls: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse(t) => Some(json!({
                "id": t.id,
                "type": "function",
                "function": {"name": t.name, "arguments": t.input.to_string()},
            })),
            _ => None,
        })
        .collect();
    if text.is_empty() && calls.is_empty() {
        // Only thinking or unknown blocks: nothing these servers understand.
        return;
    }
    let mut m = Map::new();
    m.insert("role".into(), Value::String("assistant".into()));
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    m.insert("content".into(), content);
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    out.push(Value::Object(m));
}

fn tool_result_text(r: &ToolResultBlock) -> String {
    join_nonempty(r.content.iter().filter_map(|b| match b {
        ContentBlock::Text(t) => Some(t.text.as_str()),
        _ => None,
    }))
}

/// A `data:` URL for a base64 image; `None` for any other source.
fn image_data_url(image: &ImageBlock) -> Option<String> {
    let source = &image.source;
    if source.get("type").and_then(Value::as_str) != Some("base64") {
        return None;
    }
    let media = source.get("media_type").and_then(Value::as_str)?;
    let data = source.get("data").and_then(Value::as_str)?;
    Some(format!("data:{media};base64,{data}"))
}

// ---------------------------------------------------------------------------------------
// Response translation.

/// A tool call being assembled.
#[derive(Debug, Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
    announced: bool,
}

impl PendingCall {
    /// Takes one `tool_calls` entry (a whole call or a stream fragment).
    fn merge(&mut self, fragment: &Value) {
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
    fn announce(&mut self, ids: &AtomicU64, sink: EventSink<'_>) {
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

    fn ensure_id(&mut self, ids: &AtomicU64) {
        if self.id.is_empty() {
            self.id = format!("call_{}", ids.fetch_add(1, Ordering::Relaxed));
        }
    }

    fn into_block(mut self, ids: &AtomicU64) -> ContentBlock {
        self.ensure_id(ids);
        let raw = self.arguments;
        let input = if raw.trim().is_empty() {
            Ok(Value::Object(Map::new()))
        } else {
            serde_json::from_str::<Value>(&raw)
        };
        // Bad JSON from the model is the model's mistake, not the stream's: keep the raw
        // text so the agent can answer with an `is_error` result instead of retrying.
        let input = input.unwrap_or_else(|e| {
            tracing::warn!(tool = %self.name, id = %self.id, "tool arguments are not valid JSON: {e}");
            let mut bad = Map::new();
            bad.insert(
                crate::INVALID_TOOL_INPUT_KEY.into(),
                Value::String(format!("{e}; the text was: {raw}")),
            );
            Value::Object(bad)
        });
        ContentBlock::tool_use(self.id, self.name, input)
    }
}

/// Everything a completion says, streamed or not.
#[derive(Debug, Default)]
struct Completion {
    id: String,
    model: String,
    text: String,
    calls: BTreeMap<u64, PendingCall>,
    finish_reason: Option<String>,
    refused: bool,
    usage: Usage,
}

impl Completion {
    fn into_response(self, ids: &AtomicU64) -> Response {
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
fn map_finish_reason(reason: Option<&str>, has_calls: bool, refused: bool) -> Option<StopReason> {
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
        Some(other) => StopReason::Other(other.to_owned()),
    })
}

/// Token counts from a Chat Completions `usage` object; cached tokens are moved out of
/// `input_tokens` so that [`Usage::total_input`] equals `prompt_tokens`.
fn parse_usage(v: &Value) -> Usage {
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
fn stream_error(err: &Value) -> ModelError {
    let (kind, message) = error_fields(err);
    ModelError::StreamError {
        kind: kind.unwrap_or_else(|| "api_error".into()),
        message: message.unwrap_or_else(|| "the server reported an error without a message".into()),
    }
}

/// The type (or code) and message of an `error` value (an object or a bare string).
fn error_fields(err: &Value) -> (Option<String>, Option<String>) {
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
struct ChunkAssembler {
    completion: Completion,
    done: bool,
}

impl ChunkAssembler {
    fn new(model: &str) -> Self {
        Self {
            completion: Completion {
                model: model.to_owned(),
                ..Completion::default()
            },
            done: false,
        }
    }

    /// Takes the data of one event, reporting progress to `sink`.
    fn push(&mut self, data: &str, ids: &AtomicU64, sink: EventSink<'_>) -> Result<(), ModelError> {
        let data = data.trim();
        if data.is_empty() || self.done {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ModelError::Protocol(format!("a stream chunk is not valid JSON: {e}")))?;
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

    fn delta(c: &mut Completion, delta: &Value, ids: &AtomicU64, sink: EventSink<'_>) {
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
    fn finish(mut self, ids: &AtomicU64, sink: EventSink<'_>) -> Result<Response, ModelError> {
        if !self.done && self.completion.finish_reason.is_none() {
            return Err(ModelError::Protocol(
                "the stream ended before a finish_reason or [DONE]".into(),
            ));
        }
        for call in self.completion.calls.values_mut() {
            call.announce(ids, sink);
        }
        Ok(self.completion.into_response(ids))
    }
}

/// Decodes a whole (non-streamed) completion.
fn decode_completion(body: &[u8], model: &str, ids: &AtomicU64) -> Result<Response, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ModelError::Protocol(format!(
            "the response body is not a valid Chat Completions response: {e}"
        ))
    })?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(stream_error(err));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| {
            ModelError::Protocol("the Chat Completions response has no choices".into())
        })?;
    let message = choice.get("message").ok_or_else(|| {
        ModelError::Protocol("the Chat Completions response has no message".into())
    })?;
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
fn parse_error_body(status: StatusCode, body: &str) -> (String, String) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CacheControl, SystemBlock, ToolDefinition};
    use serde_json::json;
    use std::sync::Mutex;

    const KEY: &str = "sk-openai-test-SECRET-456";

    fn assemble(chunks: &[Value], done: bool) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
        let seen = Mutex::new(Vec::new());
        let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
        let ids = AtomicU64::new(1);
        let mut a = ChunkAssembler::new("m");
        for c in chunks {
            a.push(&c.to_string(), &ids, &sink).unwrap();
        }
        if done {
            a.push("[DONE]", &ids, &sink).unwrap();
        }
        let out = a.finish(&ids, &sink);
        (out, seen.into_inner().unwrap())
    }

    fn delta(d: Value) -> Value {
        json!({"id": "chatcmpl-1", "model": "llama3", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
    }

    fn finish(reason: &str) -> Value {
        json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    }

    #[test]
    fn info_urls() {
        let urls = |base: &str| {
            let m = OpenAiModel::new(OpenAiConfig::new().with_base_url(base)).unwrap();
            (m.models_url.to_string(), m.props_url.map(|u| u.to_string()))
        };
        for (base, models, props) in [
            (
                "http://h:8080/v1",
                "http://h:8080/v1/models",
                "http://h:8080/props",
            ),
            (
                "http://h:8080/v1/",
                "http://h:8080/v1/models",
                "http://h:8080/props",
            ),
            (
                "http://h:8080",
                "http://h:8080/models",
                "http://h:8080/props",
            ),
            (
                "http://u:p@h/llm/v1",
                "http://u:p@h/llm/v1/models",
                "http://u:p@h/llm/props",
            ),
            ("http://v1", "http://v1/models", "http://v1/props"),
        ] {
            assert_eq!(
                urls(base),
                (models.to_owned(), Some(props.to_owned())),
                "{base}"
            );
        }
    }

    #[test]
    fn windows_in_models_and_props() {
        let list = |entries: Value| json!({"object": "list", "data": entries});
        let vllm = list(json!([
            {"id": "a", "max_model_len": 1000},
            {"id": "b", "max_model_len": 2000}
        ]));
        assert_eq!(window_in_models(&vllm, "b"), Some(2000));
        assert_eq!(window_in_models(&vllm, "c"), None);
        let one = list(json!([{"id": "x", "context_length": 3000}]));
        assert_eq!(window_in_models(&one, "other"), Some(3000));
        let lm = list(json!([{"id": "x", "max_context_length": 4000}]));
        assert_eq!(window_in_models(&lm, "x"), Some(4000));
        for none in [
            list(json!([{"id": "x"}])),
            list(json!([{"id": "x", "max_model_len": 0}])),
            list(json!([{"id": "x", "max_model_len": "big"}])),
            list(json!([{"id": "x", "max_model_len": -1}])),
            list(json!([])),
            json!({"data": "nope"}),
            json!([1, 2]),
        ] {
            assert_eq!(window_in_models(&none, "x"), None, "{none}");
        }
        let props = json!({"default_generation_settings": {"n_ctx": 8192}, "n_ctx": 1});
        assert_eq!(window_in_props(&props), Some(8192));
        assert_eq!(window_in_props(&json!({"n_ctx": 4096})), Some(4096));
        assert_eq!(
            window_in_props(&json!({"default_generation_settings": {}})),
            None
        );
        assert_eq!(window_in_props(&json!("n_ctx")), None);
    }

    #[test]
    fn defaults_and_debug_redaction() {
        let c = OpenAiConfig::new();
        assert_eq!(c.base_url, "https://api.openai.com/v1");
        assert!(c.http.stream && c.stream_usage && !c.max_completion_tokens);
        assert!(!c.has_api_key());
        assert!(format!("{c:?}").contains("api_key: None"));
        let c = c
            .with_api_key(KEY)
            .with_base_url("http://localhost:11434/v1");
        let shown = format!("{c:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("api_key: Some(<redacted>)"), "{shown}");
        let m = OpenAiModel::new(c).unwrap();
        let shown = format!("{m:?} {:#?}", m.transport.client);
        assert!(!shown.contains(KEY), "{shown}");
        assert_eq!(
            m.transport.endpoint.url.as_str(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert!(!OpenAiConfig::new().with_api_key("  ").has_api_key());
    }

    #[test]
    fn bad_setup_is_a_config_error() {
        let err = OpenAiModel::new(OpenAiConfig::new().with_base_url("nope")).unwrap_err();
        assert!(matches!(err, ModelError::Config(_)));
        let err =
            OpenAiModel::new(OpenAiConfig::new().with_api_key("bad\nkey-12345678")).unwrap_err();
        assert!(!err.to_string().contains("key-12345678"));
    }

    #[test]
    fn translates_a_conversation() {
        let mut req = Request::new(
            "gpt-x",
            100,
            vec![
                Message::user_text("hi"),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::Thinking(crate::ThinkingBlock {
                            thinking: "hmm".into(),
                            signature: "s".into(),
                            extra: Map::new(),
                        }),
                        ContentBlock::text("Looking."),
                        ContentBlock::tool_use("a", "bash", json!({"command": "ls"})),
                        ContentBlock::tool_use("b", "grep", json!({})),
                    ],
                ),
                Message::new(
                    Role::User,
                    vec![
                        ContentBlock::tool_result("a", "out", false),
                        ContentBlock::tool_result("b", "bad", true),
                        ContentBlock::text("continue"),
                        ContentBlock::Image(ImageBlock {
                            source: json!({"type": "base64", "media_type": "image/png", "data": "QUJD"}),
                            cache_control: None,
                            extra: Map::new(),
                        }),
                        ContentBlock::Image(ImageBlock {
                            source: json!({"type": "url", "url": "https://x/y.png"}),
                            cache_control: None,
                            extra: Map::new(),
                        }),
                    ],
                ),
                Message::new(
                    Role::Assistant,
                    vec![ContentBlock::Unknown(json!({"type": "x"}))],
                ),
            ],
        );
        req.system = vec![SystemBlock::text("one"), SystemBlock::text("two")];
        req.tools = vec![ToolDefinition {
            name: "bash".into(),
            description: "runs".into(),
            input_schema: json!({"type": "object"}),
            cache_control: Some(CacheControl::ephemeral()),
        }];
        req.temperature = Some(0.5);
        req.stop_sequences = vec!["END".into()];
        req.apply_prompt_caching();
        let body = chat_body(&req, &OpenAiConfig::new().with_max_completion_tokens(true));
        assert_eq!(
            body,
            json!({
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "one\n\ntwo"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "Looking.", "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                        {"id": "b", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "a", "content": "out"},
                    {"role": "tool", "tool_call_id": "b", "content": "bad"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "continue"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}
                    ]}
                ],
                "tools": [{"type": "function", "function": {"name": "bash", "description": "runs", "parameters": {"type": "object"}}}],
                "max_completion_tokens": 100,
                "temperature": 0.5,
                "stop": ["END"],
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        let body = chat_body(&req, &OpenAiConfig::new().with_stream(false));
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn streamed_tool_calls_and_usage() {
        let (out, events) = assemble(
            &[
                delta(json!({"role": "assistant", "content": ""})),
                delta(json!({"reasoning_content": "think"})),
                delta(json!({"content": "Hi"})),
                delta(
                    json!({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"name": "bash", "arguments": ""}}]}),
                ),
                delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"com"}}]})),
                delta(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "mand\": 1}"}}]}),
                ),
                delta(
                    json!({"tool_calls": [{"index": 1, "id": "x", "function": {"name": "grep", "arguments": "{bad"}}]}),
                ),
                finish("stop"),
                json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 7,
                       "prompt_tokens_details": {"cached_tokens": 60}}}),
            ],
            true,
        );
        let r = out.unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(r.text(), "Hi");
        assert_eq!(r.model, "llama3");
        let uses: Vec<_> = r.tool_uses().collect();
        assert_eq!(uses[0].id, "call_1");
        assert_eq!(uses[0].input, json!({"command": 1}));
        let why = uses[1].input[crate::INVALID_TOOL_INPUT_KEY]
            .as_str()
            .unwrap();
        assert!(why.contains("the text was: {bad"), "{why}");
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 40,
                output_tokens: 7,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 60,
                ..Default::default()
            }
        );
        assert_eq!(r.usage.total_input(), 100);
        assert_eq!(
            events,
            vec![
                ModelEvent::ThinkingDelta("think".into()),
                ModelEvent::TextDelta("Hi".into()),
                ModelEvent::ToolUseStart {
                    id: "call_1".into(),
                    name: "bash".into()
                },
                ModelEvent::ToolUseStart {
                    id: "x".into(),
                    name: "grep".into()
                },
            ]
        );
    }

    #[test]
    fn stream_endings() {
        let (out, _) = assemble(&[delta(json!({"content": "cut"}))], false);
        assert!(matches!(out, Err(ModelError::Protocol(_))));
        // A finish_reason without [DONE] is a complete answer.
        let (out, _) = assemble(&[delta(json!({"content": "a"})), finish("length")], false);
        assert_eq!(out.unwrap().stop_reason, Some(StopReason::MaxTokens));
        // [DONE] without a finish_reason: nothing to say.
        let (out, _) = assemble(&[delta(json!({"content": "a"}))], true);
        assert_eq!(out.unwrap().stop_reason, None);
        let ids = AtomicU64::new(1);
        let mut a = ChunkAssembler::new("m");
        let err = a
            .push(
                r#"{"error": {"message": "boom", "type": "server_error"}}"#,
                &ids,
                &crate::ignore_events,
            )
            .unwrap_err();
        assert!(matches!(err, ModelError::StreamError { .. }) && err.is_transient());
        let err = a.push("{nope", &ids, &crate::ignore_events).unwrap_err();
        assert!(matches!(err, ModelError::Protocol(_)));
    }

    #[test]
    fn finish_reasons() {
        for (reason, calls, expected) in [
            ("stop", false, StopReason::EndTurn),
            ("stop", true, StopReason::ToolUse),
            ("tool_calls", true, StopReason::ToolUse),
            ("function_call", true, StopReason::ToolUse),
            ("length", false, StopReason::MaxTokens),
            ("content_filter", false, StopReason::Refusal),
            ("eos", false, StopReason::Other("eos".into())),
        ] {
            assert_eq!(
                map_finish_reason(Some(reason), calls, false),
                Some(expected)
            );
        }
        assert_eq!(map_finish_reason(None, false, false), None);
    }

    #[test]
    fn non_streamed_completion() {
        let body = json!({
            "id": "chatcmpl-9", "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                    {"id": "", "type": "function", "function": {"name": "ls", "arguments": {"x": 1}}}
                ]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
        });
        let ids = AtomicU64::new(7);
        let r = decode_completion(body.to_string().as_bytes(), "m", &ids).unwrap();
        assert_eq!(r.id, "chatcmpl-9");
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        let uses: Vec<_> = r.tool_uses().collect();
        assert_eq!(uses[0].input, json!({"path": "a"}));
        assert_eq!(uses[1].id, "call_7");
        assert_eq!(uses[1].input, json!({"x": 1}));
        assert_eq!(r.usage.input_tokens, 5);
        assert_eq!(r.usage.output_tokens, 6);
        let err = decode_completion(b"{\"choices\": []}", "m", &ids).unwrap_err();
        assert!(matches!(err, ModelError::Protocol(_)));
    }

    #[test]
    fn error_bodies() {
        let (kind, msg) = parse_error_body(
            StatusCode::BAD_REQUEST,
            r#"{"error": {"message": "bad model", "type": "invalid_request_error", "code": null}}"#,
        );
        assert_eq!(
            (kind.as_str(), msg.as_str()),
            ("invalid_request_error", "bad model")
        );
        let (kind, msg) = parse_error_body(
            StatusCode::NOT_FOUND,
            r#"{"error": {"message": "model not found", "code": 404}}"#,
        );
        assert_eq!((kind.as_str(), msg.as_str()), ("404", "model not found"));
        let (kind, msg) = parse_error_body(StatusCode::BAD_REQUEST, r#"{"error": "plain"}"#);
        assert_eq!((kind.as_str(), msg.as_str()), ("Bad Request", "plain"));
        let (kind, msg) = parse_error_body(
            StatusCode::BAD_REQUEST,
            r#"{"object": "error", "message": "vllm says", "type": "BadRequestError", "code": 400}"#,
        );
        assert_eq!(
            (kind.as_str(), msg.as_str()),
            ("BadRequestError", "vllm says")
        );
        let (kind, msg) = parse_error_body(StatusCode::BAD_GATEWAY, "");
        assert_eq!(
            (kind.as_str(), msg.as_str()),
            ("Bad Gateway", "Bad Gateway")
        );
    }
}

/// Randomised input tests (proptest) of the stream assembler, the non-streamed decoder and
/// the error-body parser: `Ok` or a clear error, never a panic. Each property runs
/// `PROPTEST_CASES` cases (256 when unset) and prints how many ran.
#[cfg(test)]
mod fuzz {
    use super::*;
    use bytes::Bytes;
    use eventsource_stream::{EventStreamError, Eventsource};
    use futures::StreamExt;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    use std::convert::Infallible;
    use std::sync::atomic::AtomicU32;
    use std::sync::Mutex;

    fn check<S: Strategy>(
        name: &str,
        strategy: S,
        test: impl Fn(S::Value) -> Result<(), TestCaseError>,
    ) {
        let mut runner = TestRunner::new(Config {
            failure_persistence: None,
            ..Config::default()
        });
        let ran = AtomicU32::new(0);
        let result = runner.run(&strategy, |v| {
            ran.fetch_add(1, Ordering::Relaxed);
            test(v)
        });
        eprintln!("fuzz::{name}: {} cases", ran.load(Ordering::Relaxed));
        if let Err(e) = result {
            panic!("fuzz::{name} failed: {e}");
        }
    }

    fn clear(err: &ModelError) -> Result<(), TestCaseError> {
        let detail = match err {
            ModelError::Protocol(m) => m.clone(),
            ModelError::StreamError { kind, message } => {
                prop_assert!(!kind.trim().is_empty(), "{err:?}");
                message.clone()
            }
            other => other.to_string(),
        };
        prop_assert!(
            !detail.trim().is_empty(),
            "an error with a blank detail: {err:?}"
        );
        Ok(())
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![3 => "(?s).{0,10}", 1 => "[a-z_]{0,8}"]
    }

    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => (0u64..3).prop_map(Value::from),
            1 => any::<i64>().prop_map(Value::from),
            1 => Just(json!(u64::MAX)),
            1 => Just(json!(-1)),
            1 => Just(json!(0.5)),
        ]
    }

    const WORDS: &[&str] = &[
        "id",
        "model",
        "choices",
        "index",
        "delta",
        "content",
        "refusal",
        "reasoning_content",
        "reasoning",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "error",
        "message",
        "type",
        "code",
        "stop",
        "length",
        "tool_calls",
        "",
    ];

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number(),
            text().prop_map(Value::String),
            prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_owned())),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            let key = prop_oneof![
                3 => prop::sample::select(WORDS).prop_map(str::to_owned),
                1 => text(),
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key, inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `Some(v)` four times in five.
    fn maybe(s: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Option<Value>> {
        prop::option::weighted(0.8, s).boxed()
    }

    fn object(fields: Vec<(&'static str, BoxedStrategy<Option<Value>>)>) -> BoxedStrategy<Value> {
        fields
            .into_iter()
            .map(|(k, s)| s.prop_map(move |v| (k, v)))
            .collect::<Vec<_>>()
            .prop_map(|parts| {
                Value::Object(
                    parts
                        .into_iter()
                        .filter_map(|(k, v)| Some((k.to_owned(), v?)))
                        .collect(),
                )
            })
            .boxed()
    }

    fn stringish() -> BoxedStrategy<Value> {
        prop_oneof![4 => text().prop_map(Value::String), 1 => arb_json()].boxed()
    }

    /// A chunk shaped like a Chat Completions stream chunk, with random holes and indices.
    fn shaped_chunk() -> BoxedStrategy<Value> {
        let call = object(vec![
            ("index", maybe(number())),
            ("id", maybe(stringish())),
            (
                "function",
                maybe(object(vec![
                    ("name", maybe(stringish())),
                    (
                        "arguments",
                        maybe(prop_oneof![
                            3 => prop::sample::select(&["{", "}", "\"a\"", ":", "1", ""][..])
                                .prop_map(|s| Value::String(s.to_owned())),
                            1 => arb_json(),
                        ]),
                    ),
                ])),
            ),
        ]);
        let delta = object(vec![
            ("content", maybe(stringish())),
            ("refusal", maybe(stringish())),
            ("reasoning_content", maybe(stringish())),
            (
                "tool_calls",
                maybe(prop::collection::vec(call, 0..3).prop_map(Value::Array)),
            ),
        ]);
        let choice = object(vec![
            ("index", maybe(number())),
            ("delta", maybe(delta)),
            (
                "finish_reason",
                maybe(prop_oneof![
                    Just(Value::Null),
                    prop::sample::select(&["stop", "length", "tool_calls", "content_filter"][..])
                        .prop_map(|s| Value::String(s.to_owned())),
                    stringish(),
                ]),
            ),
        ]);
        let usage = object(vec![
            ("prompt_tokens", maybe(number())),
            ("completion_tokens", maybe(number())),
            (
                "prompt_tokens_details",
                maybe(object(vec![("cached_tokens", maybe(number()))])),
            ),
        ]);
        object(vec![
            ("id", maybe(stringish())),
            ("model", maybe(stringish())),
            (
                "choices",
                maybe(prop::collection::vec(choice, 0..3).prop_map(Value::Array)),
            ),
            ("usage", maybe(usage)),
            (
                "error",
                prop::option::weighted(
                    0.05,
                    object(vec![
                        ("message", maybe(stringish())),
                        ("type", maybe(stringish())),
                        ("code", maybe(number())),
                    ]),
                )
                .boxed(),
            ),
        ])
    }

    fn chunk_data() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => shaped_chunk().prop_map(|v| v.to_string()),
            1 => Just("[DONE]".to_owned()),
            1 => prop::sample::select(&["", " ", "\n", " [DONE] "][..]).prop_map(str::to_owned),
            1 => arb_json().prop_map(|v| v.to_string()),
            1 => text(),
        ]
    }

    #[test]
    fn chunk_assembler_random_chunks() {
        check(
            "chunk_assembler_random_chunks",
            prop::collection::vec(chunk_data(), 0..16),
            |chunks| {
                let ids = AtomicU64::new(1);
                let mut a = ChunkAssembler::new("m");
                for data in &chunks {
                    // Keep going after an error: the assembler must stay usable.
                    if let Err(e) = a.push(data, &ids, &crate::ignore_events) {
                        clear(&e)?;
                    }
                }
                match a.finish(&ids, &crate::ignore_events) {
                    Ok(r) => {
                        let text = serde_json::to_string(&r).unwrap();
                        prop_assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), r);
                    }
                    Err(e) => clear(&e)?,
                }
                Ok(())
            },
        );
    }

    #[test]
    fn completion_and_error_bodies() {
        let body = prop_oneof![
            3 => (shaped_chunk(), prop_oneof![Just("delta"), Just("message")]).prop_map(|(mut v, field)| {
                // A non-streamed completion says `message` where a chunk says `delta`.
                if let Some(Value::Array(choices)) = v.get_mut("choices") {
                    for c in choices.iter_mut().filter_map(Value::as_object_mut) {
                        if let Some(d) = c.remove("delta") {
                            c.insert(field.to_owned(), d);
                        }
                    }
                }
                v.to_string().into_bytes()
            }),
            1 => arb_json().prop_map(|v| v.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ];
        check(
            "completion_and_error_bodies",
            (body, 100u16..600),
            |(body, status)| {
                let ids = AtomicU64::new(1);
                if let Err(e) = decode_completion(&body, "m", &ids) {
                    clear(&e)?;
                }
                let status = StatusCode::from_u16(status).unwrap();
                let (kind, message) = parse_error_body(status, &String::from_utf8_lossy(&body));
                prop_assert!(!kind.trim().is_empty() && !message.trim().is_empty());
                Ok(())
            },
        );
    }

    /// A valid streamed completion and how it is framed.
    #[derive(Debug, Clone)]
    struct Spec {
        text: Vec<String>,
        reasoning: Vec<String>,
        /// id, name, arguments (an object), where the arguments are cut.
        calls: Vec<(String, String, Value, Vec<usize>)>,
        finish: &'static str,
        usage: Option<(u64, u64, u64)>,
        done: bool,
        crlf: bool,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        let call = (
            "[a-z0-9_]{1,8}",
            "[a-z_]{1,8}",
            prop::collection::btree_map("[a-z]{0,4}", arb_json(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            prop::collection::vec(any::<usize>(), 0..4),
        );
        (
            prop::collection::vec(text(), 0..5),
            prop::collection::vec(text(), 0..3),
            prop::collection::vec(call, 0..3),
            prop::sample::select(&["stop", "length", "tool_calls", "content_filter", "eos"][..]),
            prop::option::of((0u64..1 << 40, 0u64..1 << 40, 0u64..1 << 40)),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(text, reasoning, calls, finish, usage, done, crlf)| Spec {
                text,
                reasoning,
                calls,
                finish,
                usage,
                done,
                crlf,
            })
    }

    fn cut_text(s: &str, cuts: &[usize]) -> Vec<String> {
        let mut at: Vec<usize> = cuts
            .iter()
            .map(|c| {
                let mut i = c % (s.len() + 1);
                while !s.is_char_boundary(i) {
                    i -= 1;
                }
                i
            })
            .chain([0, s.len()])
            .collect();
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| s[w[0]..w[1]].to_owned()).collect()
    }

    fn cut_bytes(b: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut at: Vec<usize> = cuts
            .iter()
            .map(|c| c % (b.len() + 1))
            .chain([0, b.len()])
            .collect();
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| b[w[0]..w[1]].to_vec()).collect()
    }

    impl Spec {
        /// The SSE text, and the byte offset where the chunk with the finish_reason ends.
        fn sse(&self) -> (String, usize) {
            let eol = if self.crlf { "\r\n" } else { "\n" };
            let mut out = String::new();
            let push = |data: String, out: &mut String| {
                out.push_str(&format!("data: {data}{eol}{eol}"));
            };
            let chunk = |delta: Value, finish: Option<&str>| {
                json!({"id": "chatcmpl-f", "model": "gpt-fuzz",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                .to_string()
            };
            push(
                chunk(json!({"role": "assistant", "content": ""}), None),
                &mut out,
            );
            for r in &self.reasoning {
                push(chunk(json!({"reasoning_content": r}), None), &mut out);
            }
            for t in &self.text {
                push(chunk(json!({"content": t}), None), &mut out);
            }
            for (i, (id, name, args, cuts)) in self.calls.iter().enumerate() {
                push(
                    chunk(
                        json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                               "function": {"name": name, "arguments": ""}}]}),
                        None,
                    ),
                    &mut out,
                );
                for part in cut_text(&args.to_string(), cuts) {
                    push(
                        chunk(
                            json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                            None,
                        ),
                        &mut out,
                    );
                }
            }
            push(chunk(json!({}), Some(self.finish)), &mut out);
            let finished = out.len();
            if let Some((p, c, cached)) = self.usage {
                let u = json!({"id": "chatcmpl-f", "choices": [], "usage": {
                    "prompt_tokens": p + cached, "completion_tokens": c,
                    "prompt_tokens_details": {"cached_tokens": cached}}});
                push(u.to_string(), &mut out);
            }
            if self.done {
                push("[DONE]".into(), &mut out);
            }
            (out, finished)
        }

        fn expected(&self) -> Response {
            let mut content = Vec::new();
            let text = self.text.concat();
            if !text.is_empty() {
                content.push(ContentBlock::text(text));
            }
            for (id, name, args, _) in &self.calls {
                content.push(ContentBlock::tool_use(
                    id.clone(),
                    name.clone(),
                    args.clone(),
                ));
            }
            Response {
                id: "chatcmpl-f".into(),
                model: "gpt-fuzz".into(),
                role: Role::Assistant,
                content,
                stop_reason: map_finish_reason(Some(self.finish), !self.calls.is_empty(), false),
                stop_sequence: None,
                usage: self.usage.map_or(Usage::default(), |(p, c, cached)| Usage {
                    input_tokens: p,
                    output_tokens: c,
                    cache_creation_input_tokens: 0,
                    cache_read_input_tokens: cached,
                    ..Default::default()
                }),
            }
        }
    }

    /// Assembles chunks of SSE bytes as `Transport::read_events` does with a `Chat` decoder.
    fn assemble(chunks: Vec<Vec<u8>>) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
        let seen = Mutex::new(Vec::new());
        let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
        let out = futures::executor::block_on(async {
            let ids = AtomicU64::new(1);
            let bytes = chunks
                .into_iter()
                .map(|c| Ok::<_, Infallible>(Bytes::from(c)));
            let mut stream = futures::stream::iter(bytes).eventsource();
            let mut a = ChunkAssembler::new("asked-for");
            while let Some(next) = stream.next().await {
                match next {
                    Ok(event) => {
                        a.push(&event.data, &ids, &sink)?;
                        if a.done {
                            break;
                        }
                    }
                    Err(EventStreamError::Transport(never)) => match never {},
                    Err(e) => {
                        return Err(ModelError::Protocol(format!(
                            "the event stream could not be parsed: {e}"
                        )))
                    }
                }
            }
            a.finish(&ids, &sink)
        });
        (out, seen.into_inner().unwrap())
    }

    #[test]
    fn chunk_assembler_chunked_and_truncated() {
        check(
            "chunk_assembler_chunked_and_truncated",
            (
                spec(),
                prop::collection::vec(any::<usize>(), 0..16),
                any::<usize>(),
            ),
            |(spec, cuts, cut_at)| {
                let (sse, finished) = spec.sse();
                let whole = sse.into_bytes();
                let (full, full_events) = assemble(vec![whole.clone()]);
                let full =
                    full.map_err(|e| TestCaseError::fail(format!("a valid stream failed: {e}")))?;
                prop_assert_eq!(&full, &spec.expected());

                let (split, split_events) = assemble(cut_bytes(&whole, &cuts));
                prop_assert_eq!(split.as_ref().ok(), Some(&full));
                prop_assert_eq!(&split_events, &full_events);

                // Cut before the finish_reason chunk is whole, a stream never completes.
                let end = cut_at % whole.len();
                match assemble(cut_bytes(&whole[..end], &cuts)).0 {
                    Ok(r) => prop_assert!(end >= finished, "cut at {end} < {finished}: {r:?}"),
                    Err(e) => clear(&e)?,
                }
                Ok(())
            },
        );
    }
}
