//! Talks to models.
//!
//! Wire types that mirror the Anthropic Messages API ([`types`]), the [`Model`] trait every
//! provider implements, the Anthropic provider with streaming and retries, and the events a
//! model reports while it streams. Nothing here knows about tools, agents or terminals.

pub mod anthropic;
pub mod cassette;
pub mod content;
pub mod conversation;
pub mod descriptors;
pub mod error;
pub mod openai;
pub mod output;
pub mod record;
pub mod replay;
pub mod retry;
pub mod semconv;
pub mod sse;
pub mod trace_bridge;
pub mod transport;
pub mod types;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use cassette::{request_key, Cassette, CassetteHeader, Exchange, RecordedRequest};
pub use content::*;
pub use descriptors::{connection_limit, raise_open_file_limit};
pub use error::{ConfigError, ModelError, ProtocolError, ReplayError};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use output::{strict_schema, Effort, OutputConfig, OutputFormat};
pub use record::RecordingModel;
pub use replay::ReplayModel;
pub use retry::RetryPolicy;
pub use semconv::RecordContent;
pub use transport::{http_client_builder, tls_config, HttpOptions};
pub use types::*;

use async_trait::async_trait;
use std::time::Duration;

/// The default model id.
pub const DEFAULT_MODEL: &str = "claude-sonnet-5-5";

/// Resolves the aliases `opus`, `sonnet` and `haiku` to full model ids; other names pass through.
pub fn resolve_model_alias(name: &str) -> &str {
    match name {
        "opus" => "claude-opus-5-5",
        "sonnet" => "claude-sonnet-5-5",
        "haiku" => "claude-haiku-5-5",
        other => other,
    }
}

/// What a model reports while a response streams in.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelEvent {
    /// A piece of answer text.
    TextDelta(String),
    /// A piece of visible reasoning.
    ThinkingDelta(String),
    /// The model started a tool call (its input is still streaming).
    ToolUseStart {
        /// The tool_use id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// The server began compacting the conversation (a `compaction` block started).
    Compacting,
    /// A transient failure; the request will be sent again after `wait`.
    Retrying {
        /// Which retry this is (1 for the first).
        attempt: u32,
        /// How long cadre waits before it.
        wait: Duration,
        /// What went wrong, in one line.
        reason: String,
    },
}

/// Receives [`ModelEvent`]s while a response streams.
pub type EventSink<'a> = &'a (dyn Fn(ModelEvent) + Send + Sync);

/// A model provider: takes a request, returns the whole response.
///
/// Implementations stream when they can and report progress through `events`; the future
/// may be dropped at any time to cancel the call.
#[async_trait]
pub trait Model: Send + Sync {
    /// A short name for logs ("anthropic", "replay", …).
    fn provider(&self) -> &str;

    /// Sends one request and returns the complete response.
    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError>;

    /// Whether the server compacts a long conversation itself (the Messages API's
    /// `context_management` edits and `compaction` requests); when not, the agent loop
    /// summarises old turns on the client.
    fn server_compaction(&self) -> bool {
        false
    }

    /// The context window of `model` in tokens, as the server reports it, when it does
    /// (llama.cpp, vLLM, …); `None` when it does not say.
    async fn context_window(&self, _model: &str) -> Option<u64> {
        None
    }
}

/// The context window of a model cadre knows, by id: `None` for an unknown id.
pub fn known_context_window(model: &str) -> Option<u64> {
    // Current Claude models read a million tokens; older generations 200,000.
    const CURRENT: [&str; 3] = ["claude-opus-5", "claude-sonnet-5", "claude-haiku-5"];
    const OLDER: [&str; 9] = [
        "claude-opus-4",
        "claude-sonnet-4",
        "claude-haiku-4",
        "claude-3-7",
        "claude-3-5",
        "claude-3-opus",
        "claude-3-sonnet",
        "claude-3-haiku",
        "claude-2",
    ];
    let model = resolve_model_alias(model);
    if CURRENT.iter().any(|p| model.starts_with(p)) {
        Some(1_000_000)
    } else if OLDER.iter().any(|p| model.starts_with(p)) {
        Some(200_000)
    } else {
        None
    }
}

/// An event sink that drops everything.
pub fn ignore_events(_: ModelEvent) {}
