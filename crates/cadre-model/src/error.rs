//! The errors a model call can end in.

use std::time::Duration;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The API answered with an HTTP error; `message` is the API's own.
    #[error("the model API answered {status} ({kind}): {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The API's error type (`invalid_request_error`, `overloaded_error`, …).
        kind: String,
        /// The API's error message.
        message: String,
        /// The `retry-after` the server asked for, if any.
        retry_after: Option<Duration>,
    },
    /// The stream carried an `error` event.
    #[error("the model API reported an error mid-stream ({kind}): {message}")]
    StreamError {
        /// The API's error type.
        kind: String,
        /// The API's error message.
        message: String,
    },
    /// The server could not be reached or the connection broke.
    #[error("could not reach the model API at {url}: {reason}")]
    Connect {
        /// The base URL (never with credentials).
        url: String,
        /// What the transport said.
        reason: String,
    },
    /// The stream broke the protocol it speaks: it ended early, or an event came out of
    /// place or without a field it must carry.
    #[error("the model API's response stream was malformed: {0}")]
    Protocol(#[source] ProtocolError),
    /// No bytes arrived for too long.
    #[error("the model API sent nothing for {0:?}")]
    Idle(Duration),
    /// What the server sent could not be parsed; `what` says which part.
    #[error("the model API's response stream was malformed: {what}: {source}")]
    Malformed {
        /// The part that could not be parsed.
        what: String,
        /// The parser's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The provider was set up wrongly (no key, a key or header that cannot be sent, …).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The provider's base URL is not a URL it can use.
    #[error("The {api} base URL {url:?} {problem} ({source}).")]
    BaseUrl {
        /// The API it is for (`Anthropic`, `OpenAI-compatible`).
        api: &'static str,
        /// The base URL as given.
        url: String,
        /// What is wrong with it.
        problem: &'static str,
        /// The URL parser's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The HTTP client could not be set up.
    #[error("Could not set up the HTTP client: {}", crate::transport::innermost(.0))]
    HttpClient(#[source] reqwest::Error),
    /// The request could not be encoded as JSON.
    #[error("The request could not be encoded as JSON: {0}")]
    Encode(#[source] serde_json::Error),
    /// A cassette could not be read, parsed or written; `what` says which and what for.
    #[error("{what}: {source}")]
    Cassette {
        /// The cassette and what was being done with it.
        what: String,
        /// The file's or the JSON's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Replaying a cassette failed: no recorded response matches, or the request differs
    /// from the recorded one; the error names the agent and shows a diff.
    #[error("replay: {0}")]
    Replay(#[source] ReplayError),
    /// A model of the embedder's own (scripted, wrapped) failed in a way of its own.
    #[error("{provider}: {source}")]
    Custom {
        /// Its provider name, as [`crate::Model::provider`] gives it.
        provider: String,
        /// What went wrong.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A transient failure that kept happening until the retry policy gave up.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// How many requests were sent.
        attempts: u32,
        /// The last failure.
        last: Box<ModelError>,
    },
}

/// How a response stream broke the protocol it speaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The stream ended before the event that completes a response.
    #[error("the stream ended before {expected}")]
    EndedEarly {
        /// What should have come (`message_stop`, `a finish_reason or [DONE]`).
        expected: &'static str,
    },
    /// An event lacks a field it must carry.
    #[error("a `{event}` event has no `{field}`")]
    MissingField {
        /// The event's type.
        event: String,
        /// The field (`index`, `delta.type`, …).
        field: &'static str,
    },
    /// A delta lacks the string its type carries.
    #[error("a `{delta}` has no string `{field}`")]
    DeltaField {
        /// The delta's type.
        delta: String,
        /// The field it should carry.
        field: String,
    },
    /// A content block was started twice.
    #[error("block {index} started twice")]
    StartedTwice {
        /// The block's index.
        index: u64,
    },
    /// A delta or a stop came for a block that never started.
    #[error("a `{event}` arrived for block {index}, which never started")]
    NotStarted {
        /// The delta's or event's type.
        event: String,
        /// The block's index.
        index: u64,
    },
    /// A delta came for a block that had stopped.
    #[error("a `{delta}` arrived for block {index} after it stopped")]
    AfterStop {
        /// The delta's type.
        delta: String,
        /// The block's index.
        index: u64,
    },
    /// A delta came for a block of another type.
    #[error("a `{delta}` arrived for block {index}, a `{block}` block")]
    WrongBlock {
        /// The delta's type.
        delta: String,
        /// The block's index.
        index: u64,
        /// The block's type.
        block: String,
    },
    /// A whole (non-streamed) response lacks a part it must have.
    #[error("the Chat Completions response has no {part}")]
    Incomplete {
        /// The part (`choices`, `message`).
        part: &'static str,
    },
}

/// How a provider was set up wrongly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `ANTHROPIC_API_KEY` is not set.
    #[error("ANTHROPIC_API_KEY is not set; export your Anthropic API key to use the anthropic provider.")]
    AnthropicKeyUnset,
    /// The Anthropic API key given is empty.
    #[error("The Anthropic API key is empty; set ANTHROPIC_API_KEY or pass a key.")]
    AnthropicKeyEmpty,
    /// The API key has characters an HTTP header cannot carry.
    #[error("The {api} API key contains characters that cannot be sent in an HTTP header.")]
    KeyUnsendable {
        /// The API it is for (`Anthropic`, `OpenAI`).
        api: &'static str,
    },
    /// The `anthropic-version` has characters an HTTP header cannot carry.
    #[error("The anthropic-version {version:?} cannot be sent in an HTTP header.")]
    VersionUnsendable {
        /// The version as given.
        version: String,
    },
    /// A beta name has characters an HTTP header cannot carry.
    #[error("The beta names {betas:?} cannot be sent in an HTTP header.")]
    BetasUnsendable {
        /// The beta names as given.
        betas: Vec<String>,
    },
    /// The base URL is not an http(s) URL.
    #[error("The {api} base URL {url:?} must start with http:// or https://.")]
    NotHttp {
        /// The API it is for (`Anthropic`, `OpenAI-compatible`).
        api: &'static str,
        /// The base URL, without credentials.
        url: String,
    },
    /// The HTTP client's TLS could not be set up.
    #[error("Could not set up the HTTP client: {0}")]
    Tls(#[source] rustls::Error),
}

/// Why a replayed request has no recorded response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The cassette has no header line.
    #[error("the cassette {cassette} is empty (no header line)")]
    Empty {
        /// The cassette (usually its path).
        cassette: String,
    },
    /// The cassette is of a format version this cadre does not read.
    #[error("the cassette {cassette} has format version {found}, but this cadre reads version {expected} (it was written by {created_by})")]
    Version {
        /// The cassette.
        cassette: String,
        /// Its version.
        found: u32,
        /// The version this cadre reads.
        expected: u32,
        /// What wrote it.
        created_by: String,
    },
    /// No recording matches the request.
    #[error("agent {agent} sent a request ({}) that {cassette} has no recording of{closest}", plural_messages(*messages))]
    NoMatch {
        /// The agent that asked: its path and type.
        agent: String,
        /// How many messages the request holds.
        messages: usize,
        /// The cassette.
        cassette: String,
        /// What the cassette holds closest to it, and its diff (empty when nothing is).
        closest: String,
    },
    /// Every recorded response to the request was already served.
    #[error("agent {agent} sent a request ({}) that {cassette} recorded {times} time(s), and every recorded response to it was already served; the run asks more often than the recording did", plural_messages(*messages))]
    Exhausted {
        /// The agent that asked: its path and type.
        agent: String,
        /// How many messages the request holds.
        messages: usize,
        /// The cassette.
        cassette: String,
        /// How many times the cassette recorded it.
        times: usize,
    },
    /// An exchange the cassette's index names is not there.
    #[error("the cassette {cassette} lost an exchange")]
    LostExchange {
        /// The cassette.
        cassette: String,
    },
    /// The request matches a recording but one of its parts differs.
    #[error("agent {agent}: the {part} differs from the recording in {cassette} (re-record the cassette, or undo the change):\n{diff}")]
    Differs {
        /// The agent that asked: its path and type.
        agent: String,
        /// The part that differs (`system prompt`, `tool names`, `model`, …).
        part: String,
        /// The cassette.
        cassette: String,
        /// The recorded and the sent part, as a short diff.
        diff: String,
    },
}

/// `1 message`, `3 messages`.
pub(crate) fn plural_messages(n: usize) -> String {
    if n == 1 {
        "1 message".into()
    } else {
        format!("{n} messages")
    }
}

/// The error kinds that say the provider refuses every request from now on.
const TERMINAL_KINDS: [&str; 6] = [
    "authentication_error",
    "permission_error",
    "permission_denied",
    "billing_error",
    "insufficient_quota",
    "insufficient_credits",
];

/// Whether an error's message says the account's credit or quota is spent.
fn says_no_credit(message: &str) -> bool {
    let message = message.to_lowercase();
    message.contains("credit balance is too low") || message.contains("exceeded your current quota")
}

impl ModelError {
    /// Whether sending the same request again may succeed: 429, 529, 5xx, a broken or
    /// stalled connection, a malformed stream and an `error` event mid-stream.
    pub fn is_transient(&self) -> bool {
        // A spent quota answers 429 too, and waiting does not refill it.
        if self.is_terminal() {
            return false;
        }
        match self {
            Self::Api { status, .. } => *status == 429 || *status >= 500,
            Self::StreamError { kind, .. } => kind != "invalid_request_error",
            Self::Connect { .. } | Self::Protocol(_) | Self::Malformed { .. } | Self::Idle(_) => {
                true
            }
            Self::Config(_)
            | Self::BaseUrl { .. }
            | Self::HttpClient(_)
            | Self::Encode(_)
            | Self::Cassette { .. }
            | Self::Replay(_)
            | Self::Custom { .. }
            | Self::RetriesExhausted { .. } => false,
        }
    }

    /// Whether the provider refuses every request from now on, not this one alone: the key
    /// is refused (401), the account has no credit (402), or the error's kind or message
    /// says the key is not allowed or the account's credit or quota is spent. No other
    /// agent's request can fare better, so a run stops scheduling new work on it.
    ///
    /// A 403 alone is not enough: OpenAI-compatible routers answer 403 when moderation
    /// flags one input, which fails that request only. OpenAI's `invalid_api_key` is its
    /// `code`, which the parsers read only when there is no `type`, so it is not listed: it
    /// comes with a 401, which the status catches.
    pub fn is_terminal(&self) -> bool {
        let said = |kind: &str, message: &str| {
            TERMINAL_KINDS.contains(&kind.to_lowercase().as_str()) || says_no_credit(message)
        };
        match self {
            Self::Api {
                status,
                kind,
                message,
                ..
            } => matches!(status, 401 | 402) || said(kind, message),
            Self::StreamError { kind, message } => said(kind, message),
            Self::RetriesExhausted { last, .. } => last.is_terminal(),
            _ => false,
        }
    }

    /// Whether `text`, an error as its `Display` wrote it, says what
    /// [`is_terminal`](Self::is_terminal) tells from the error itself: a durable engine's
    /// worker hands its caller only the text of the error that stopped an agent.
    pub fn text_is_terminal(text: &str) -> bool {
        let lower = text.to_lowercase();
        lower.contains("api answered 401 (")
            || lower.contains("api answered 402 (")
            || TERMINAL_KINDS
                .iter()
                .any(|kind| lower.contains(&format!("({kind})")))
            || says_no_credit(&lower)
    }

    /// Whether the server refused the request as too long for the model's context window
    /// (Anthropic: "prompt is too long"; OpenAI-compatible servers: "maximum context length",
    /// `context_length_exceeded`), which compacting the conversation can mend.
    pub fn is_context_too_long(&self) -> bool {
        let Self::Api {
            status: 400 | 413,
            kind,
            message,
            ..
        } = self
        else {
            return false;
        };
        let text = format!("{kind} {message}").to_lowercase();
        [
            "prompt is too long",
            "context limit",
            "maximum context length",
            "context_length_exceeded",
            "context window",
            "exceed_context_size",
            "exceeds the available context",
            "too many tokens",
        ]
        .iter()
        .any(|p| text.contains(p))
    }

    /// Whether the provider was set up wrongly (no key, a bad URL, an HTTP client that
    /// cannot be made): a matter of configuration, not of the API.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Self::Config(_) | Self::BaseUrl { .. } | Self::HttpClient(_)
        )
    }

    /// The wait the server asked for, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, kind: &str, message: &str) -> ModelError {
        ModelError::Api {
            status,
            kind: kind.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    #[test]
    fn refusals_of_the_account_are_terminal_and_never_retried() {
        for e in [
            api(401, "authentication_error", "invalid x-api-key"),
            api(403, "permission_error", "not allowed"),
            api(403, "PERMISSION_DENIED", "the key may not call this model"),
            api(401, "invalid_request_error", "Incorrect API key provided"),
            api(402, "billing_error", "no credit"),
            api(429, "insufficient_quota", "You exceeded your current quota"),
            api(
                400,
                "invalid_request_error",
                "Your credit balance is too low",
            ),
        ] {
            assert!(e.is_terminal(), "{e}");
            assert!(!e.is_transient(), "{e}");
            // A worker hands back only the text: it says the same.
            assert!(ModelError::text_is_terminal(&e.to_string()), "{e}");
        }
        for e in [
            api(429, "rate_limit_error", "slow down"),
            api(529, "overloaded_error", "busy"),
            api(400, "invalid_request_error", "bad field"),
            // A router's moderation refusal of one input (OpenRouter sends its code as kind).
            api(403, "403", "Your input was flagged by moderation"),
            api(403, "Forbidden", "blocked"),
        ] {
            assert!(!e.is_terminal(), "{e}");
            assert!(!ModelError::text_is_terminal(&e.to_string()), "{e}");
        }
        let exhausted = ModelError::RetriesExhausted {
            attempts: 3,
            last: Box::new(api(401, "authentication_error", "bad key")),
        };
        assert!(exhausted.is_terminal());
    }

    #[test]
    fn refusals_for_length_are_told_from_other_errors() {
        for (kind, message) in [
            (
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
            (
                "invalid_request_error",
                "input length and `max_tokens` exceed context limit: 199000 + 8192 > 200000",
            ),
            (
                "invalid_request_error",
                "This model's maximum context length is 8192 tokens.",
            ),
            (
                "exceed_context_size_error",
                "the request exceeds the available context size",
            ),
        ] {
            assert!(api(400, kind, message).is_context_too_long(), "{message}");
        }
        assert!(!api(
            400,
            "invalid_request_error",
            "messages: roles must alternate"
        )
        .is_context_too_long());
        assert!(!api(529, "overloaded_error", "prompt is too long").is_context_too_long());
        assert!(!ModelError::Protocol(ProtocolError::Incomplete {
            part: "prompt is too long"
        })
        .is_context_too_long());
    }
}
