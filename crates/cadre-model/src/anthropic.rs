//! The Anthropic Messages API provider.
//!
//! One `POST /v1/messages` per attempt, streamed as server-sent events (or one JSON body),
//! wrapped in the [`RetryPolicy`](crate::RetryPolicy). The API key lives only in a sensitive
//! default header of the HTTP client: it is never logged, printed, or put into an error. The
//! HTTP side is shared with the other providers ([`crate::transport`]).

use crate::sse::StreamAssembler;
use crate::transport::{http_setters, plain_error, Decoder, Endpoint, HttpOptions, Transport};
use crate::{ConfigError, EventSink, Model, ModelError, Request, Response};
use async_trait::async_trait;
use eventsource_stream::Event;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::StatusCode;
use serde_json::Value;
use std::fmt;

/// The public Anthropic API.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` today's official SDKs send.
pub const DEFAULT_API_VERSION: &str = "2026-10-21";

/// How to reach the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// Where the API lives (no trailing `/v1`).
    pub base_url: String,
    /// Kept private so it can only be handed to the HTTP client.
    api_key: String,
    /// The `anthropic-version` header.
    pub version: String,
    /// Retries, streaming and timeouts.
    pub http: HttpOptions,
}

impl AnthropicConfig {
    /// A config with the given API key and every default.
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            api_key: api_key.into(),
            version: DEFAULT_API_VERSION.into(),
            http: HttpOptions::default(),
        }
    }

    /// A config from `ANTHROPIC_API_KEY` and, if set, `ANTHROPIC_BASE_URL`.
    pub fn from_env() -> Result<Self, ModelError> {
        let key = std::env::var("ANTHROPIC_API_KEY").unwrap_or_default();
        if key.trim().is_empty() {
            return Err(ConfigError::AnthropicKeyUnset.into());
        }
        let mut config = Self::new(key.trim());
        if let Ok(url) = std::env::var("ANTHROPIC_BASE_URL") {
            if !url.trim().is_empty() {
                config.base_url = url.trim().to_owned();
            }
        }
        Ok(config)
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sets the `anthropic-version` header.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    http_setters!();
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("version", &self.version)
            .field("http", &self.http)
            .finish()
    }
}

/// A [`Model`] backed by the Anthropic Messages API.
pub struct AnthropicModel {
    transport: Transport,
    config: AnthropicConfig,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("url", &self.transport.shown_url())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// Builds the provider and its HTTP client; fails on an empty key or a bad URL.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        let key = config.api_key.trim();
        if key.is_empty() {
            return Err(ConfigError::AnthropicKeyEmpty.into());
        }
        let endpoint = Endpoint::new("Anthropic", &config.base_url, "/v1/messages")?;

        let mut key_value = HeaderValue::from_str(key)
            .map_err(|_| ModelError::from(ConfigError::KeyUnsendable { api: "Anthropic" }))?;
        // Sensitive values are redacted from reqwest's and http's Debug output.
        key_value.set_sensitive(true);
        let version = HeaderValue::from_str(&config.version).map_err(|_| {
            ModelError::from(ConfigError::VersionUnsendable {
                version: config.version.clone(),
            })
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("x-api-key"), key_value);
        headers.insert(HeaderName::from_static("anthropic-version"), version);

        let secret = Some(key.to_owned());
        let transport = Transport::new(
            "anthropic",
            endpoint,
            headers,
            config.http,
            secret,
            parse_error_body,
        )?;
        Ok(Self { transport, config })
    }

    /// The settings this provider was built with.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn provider(&self) -> &str {
        "anthropic"
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        let mut request = request;
        request.stream = self.config.http.stream;
        let decoder = || Messages {
            assembler: StreamAssembler::new(),
            events,
        };
        let mut headers = HeaderMap::new();
        if !request.betas.is_empty() {
            let betas = HeaderValue::from_str(&request.betas.join(",")).map_err(|_| {
                ModelError::from(ConfigError::BetasUnsendable {
                    betas: request.betas.clone(),
                })
            })?;
            headers.insert(HeaderName::from_static("anthropic-beta"), betas);
        }
        self.transport
            .send(
                "Messages API",
                &request.model,
                &headers,
                &request,
                events,
                decoder,
            )
            .await
    }

    fn server_compaction(&self) -> bool {
        true
    }
}

/// Reads one Messages API answer, streamed or whole.
struct Messages<'a> {
    assembler: StreamAssembler,
    events: EventSink<'a>,
}

impl Decoder for Messages<'_> {
    fn event(&mut self, event: &Event) -> Result<bool, ModelError> {
        self.assembler
            .push(&event.event, &event.data, self.events)?;
        Ok(self.assembler.is_complete())
    }

    fn finish(self) -> Result<Response, ModelError> {
        self.assembler.finish()
    }

    fn body(self, body: &[u8]) -> Result<Response, ModelError> {
        serde_json::from_slice(body).map_err(|e| ModelError::Malformed {
            what: "the response body is not a valid Messages API response".into(),
            source: Box::new(e),
        })
    }
}

/// The API's error type and message, or the status text and the start of a non-JSON body.
fn parse_error_body(status: StatusCode, body: &str) -> (String, String) {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let err = v.get("error");
        let field = |name: &str| {
            err.and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
        };
        if let (Some(kind), Some(message)) = (field("type"), field("message")) {
            return (kind.to_owned(), message.to_owned());
        }
    }
    plain_error(status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-ant-test-SECRET-123";

    #[test]
    fn defaults() {
        let c = AnthropicConfig::new(KEY);
        assert_eq!(c.base_url, "https://api.anthropic.com");
        assert_eq!(c.version, "2026-10-21");
        assert_eq!(c.http, HttpOptions::default());
    }

    #[test]
    fn debug_redacts_the_key() {
        let c = AnthropicConfig::new(KEY).with_base_url("http://localhost:1");
        let shown = format!("{c:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("api_key: \"<redacted>\""), "{shown}");
        let m = AnthropicModel::new(c).unwrap();
        let shown = format!("{m:?} {:#?}", m.transport.client);
        assert!(!shown.contains(KEY), "{shown}");
    }

    #[test]
    fn bad_setup_is_a_config_error() {
        let err = AnthropicModel::new(AnthropicConfig::new("  ")).unwrap_err();
        assert!(err.is_config(), "{err}");
        let err =
            AnthropicModel::new(AnthropicConfig::new(KEY).with_base_url("not a url")).unwrap_err();
        assert!(err.is_config(), "{err}");
        let err =
            AnthropicModel::new(AnthropicConfig::new(KEY).with_base_url("ftp://x")).unwrap_err();
        assert!(err.is_config(), "{err}");
        let err = AnthropicModel::new(AnthropicConfig::new("bad\nkey")).unwrap_err();
        assert!(!err.to_string().contains("bad\nkey"));
    }

    #[test]
    fn endpoint_and_shown_url() {
        let m = AnthropicModel::new(
            AnthropicConfig::new(KEY).with_base_url("http://user:pw@localhost:8080/proxy/"),
        )
        .unwrap();
        assert_eq!(
            m.transport.endpoint.url.as_str(),
            "http://user:pw@localhost:8080/proxy/v1/messages"
        );
        assert_eq!(m.transport.shown_url(), "http://localhost:8080/proxy");
        let m = AnthropicModel::new(AnthropicConfig::new(KEY)).unwrap();
        assert_eq!(
            m.transport.endpoint.url.as_str(),
            "https://api.anthropic.com/v1/messages"
        );
    }

    #[test]
    fn error_bodies() {
        let (kind, msg) = parse_error_body(
            StatusCode::BAD_REQUEST,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"}}"#,
        );
        assert_eq!(kind, "invalid_request_error");
        assert_eq!(msg, "max_tokens: too big");
        let long = format!("<html>{}</html>", "x".repeat(500));
        let (kind, msg) = parse_error_body(StatusCode::BAD_GATEWAY, &long);
        assert_eq!(kind, "Bad Gateway");
        assert_eq!(msg.chars().count(), 200);
        assert!(msg.starts_with("<html>"));
        let (_, msg) = parse_error_body(StatusCode::SERVICE_UNAVAILABLE, "");
        assert_eq!(msg, "Service Unavailable");
    }

    #[test]
    fn redaction_of_echoed_keys() {
        let m = AnthropicModel::new(AnthropicConfig::new(format!(" {KEY} "))).unwrap();
        assert_eq!(
            m.transport.redact(&format!("got x-api-key: {KEY}")),
            "got x-api-key: <redacted>"
        );
    }
}
