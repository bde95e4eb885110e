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
    /// The stream was malformed or ended early.
    #[error("the model API's response stream was malformed: {0}")]
    Protocol(String),
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
    /// The provider was set up wrongly (no key, bad URL, …).
    #[error("{0}")]
    Config(String),
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
    /// from the recorded one; the message names the agent and shows a diff.
    #[error("replay: {0}")]
    Replay(String),
    /// A transient failure that kept happening until the retry policy gave up.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// How many requests were sent.
        attempts: u32,
        /// The last failure.
        last: Box<ModelError>,
    },
}

impl ModelError {
    /// Whether sending the same request again may succeed: 429, 529, 5xx, a broken or
    /// stalled connection, a malformed stream and an `error` event mid-stream.
    pub fn is_transient(&self) -> bool {
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
            | Self::RetriesExhausted { .. } => false,
        }
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
        assert!(!ModelError::Protocol("prompt is too long".into()).is_context_too_long());
    }
}
