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
    ConfigError, ContentBlock, EventSink, ImageBlock, Message, Model, ModelError, ModelEvent,
    ProtocolError, Request, Response, Role, StopReason, ToolResultBlock, Usage,
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

#[cfg(test)]
mod fuzz;
mod request;
mod stream;
#[cfg(test)]
mod tests;

use request::*;
use stream::*;

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
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| ModelError::from(ConfigError::KeyUnsendable { api: "OpenAI" }))?;
            // Sensitive values are redacted from reqwest's and http's Debug output.
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let secret = config.api_key.clone();
        let transport = Transport::new(
            "openai",
            endpoint,
            headers,
            config.http,
            secret,
            parse_error_body,
        )?;
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
