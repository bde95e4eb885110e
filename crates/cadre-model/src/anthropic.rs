//! The Anthropic Messages API provider.
//!
//! One `POST /v1/messages` per attempt, streamed as server-sent events (or one JSON body),
//! wrapped in the [`RetryPolicy`]. The API key lives only in a sensitive default header of
//! the HTTP client: it is never logged, printed, or put into an error.

use crate::sse::StreamAssembler;
use crate::{EventSink, Model, ModelError, Request, Response, RetryPolicy};
use async_trait::async_trait;
use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{StatusCode, Url};
use serde_json::Value;
use std::fmt;
use std::time::Duration;

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
    /// How transient failures are retried.
    pub retry: RetryPolicy,
    /// Whether to ask for a streamed response.
    pub stream: bool,
    /// How long a stream may stay silent before the attempt fails with [`ModelError::Idle`].
    pub idle_timeout: Duration,
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// The whole-request limit for non-streaming calls (`None`: no limit).
    pub request_timeout: Option<Duration>,
}

impl AnthropicConfig {
    /// A config with the given API key and every default.
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            api_key: api_key.into(),
            version: DEFAULT_API_VERSION.into(),
            retry: RetryPolicy::default(),
            stream: true,
            idle_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Some(Duration::from_secs(600)),
        }
    }

    /// A config from `ANTHROPIC_API_KEY` and, if set, `ANTHROPIC_BASE_URL`.
    pub fn from_env() -> Result<Self, ModelError> {
        let key = std::env::var("ANTHROPIC_API_KEY").unwrap_or_default();
        if key.trim().is_empty() {
            return Err(ModelError::Config(
                "ANTHROPIC_API_KEY is not set; export your Anthropic API key to use the anthropic provider.".into(),
            ));
        }
        let mut config = Self::new(key);
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

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Turns streaming on or off.
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Sets the idle timeout for streams.
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Sets the whole-request timeout for non-streaming calls.
    pub fn with_request_timeout(mut self, request_timeout: Option<Duration>) -> Self {
        self.request_timeout = request_timeout;
        self
    }
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("version", &self.version)
            .field("retry", &self.retry)
            .field("stream", &self.stream)
            .field("idle_timeout", &self.idle_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// A [`Model`] backed by the Anthropic Messages API.
pub struct AnthropicModel {
    client: reqwest::Client,
    endpoint: Url,
    /// The base URL without credentials, for errors and logs.
    shown_url: String,
    config: AnthropicConfig,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("url", &self.shown_url)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// Builds the provider and its HTTP client; fails on an empty key or a bad URL.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        if config.api_key.trim().is_empty() {
            return Err(ModelError::Config(
                "The Anthropic API key is empty; set ANTHROPIC_API_KEY or pass a key.".into(),
            ));
        }
        let base = config.base_url.trim().trim_end_matches('/');
        let parsed = Url::parse(base).map_err(|e| {
            ModelError::Config(format!(
                "The Anthropic base URL {base:?} is not a valid URL ({e})."
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.cannot_be_a_base() {
            return Err(ModelError::Config(format!(
                "The Anthropic base URL {:?} must start with http:// or https://.",
                strip_credentials(&parsed)
            )));
        }
        let endpoint = Url::parse(&format!("{base}/v1/messages")).map_err(|e| {
            ModelError::Config(format!(
                "The Anthropic base URL {base:?} is not usable ({e})."
            ))
        })?;
        let shown_url = strip_credentials(&parsed);

        let mut key = HeaderValue::from_str(config.api_key.trim()).map_err(|_| {
            ModelError::Config(
                "The Anthropic API key contains characters that cannot be sent in an HTTP header."
                    .into(),
            )
        })?;
        // Sensitive values are redacted from reqwest's and http's Debug output.
        key.set_sensitive(true);
        let version = HeaderValue::from_str(&config.version).map_err(|_| {
            ModelError::Config(format!(
                "The anthropic-version {:?} cannot be sent in an HTTP header.",
                config.version
            ))
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("x-api-key"), key);
        headers.insert(HeaderName::from_static("anthropic-version"), version);

        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .default_headers(headers)
            // A redirect could carry the key to another host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("cadre/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                ModelError::Config(format!(
                    "Could not set up the HTTP client: {}",
                    innermost(&e)
                ))
            })?;
        Ok(Self {
            client,
            endpoint,
            shown_url,
            config,
        })
    }

    /// The settings this provider was built with.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// One request/response exchange, without retries.
    async fn attempt(&self, body: Bytes, events: EventSink<'_>) -> Result<Response, ModelError> {
        let idle = self.config.idle_timeout;
        let mut req = self
            .client
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        let resp = if self.config.stream {
            // Waiting for the headers counts as silence too.
            tokio::time::timeout(idle, req.send())
                .await
                .map_err(|_| ModelError::Idle(idle))?
        } else {
            if let Some(limit) = self.config.request_timeout {
                req = req.timeout(limit);
            }
            req.send().await
        }
        .map_err(|e| self.transport_error(&e))?;

        let status = resp.status();
        if !status.is_success() {
            return Err(self.api_error(resp).await);
        }
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        // A proxy may answer a streaming request with one JSON body; take it either way.
        if self.config.stream && is_sse {
            self.read_stream(resp, events).await
        } else {
            self.read_json(resp).await
        }
    }

    async fn read_stream(
        &self,
        resp: reqwest::Response,
        events: EventSink<'_>,
    ) -> Result<Response, ModelError> {
        let idle = self.config.idle_timeout;
        let mut stream = resp.bytes_stream().eventsource();
        let mut assembler = StreamAssembler::new();
        loop {
            let next = tokio::time::timeout(idle, stream.next())
                .await
                .map_err(|_| ModelError::Idle(idle))?;
            match next {
                None => break,
                Some(Ok(event)) => {
                    assembler.push(&event.event, &event.data, events)?;
                    // Stop reading here so a server that keeps the connection open after
                    // `message_stop` cannot stall a finished call.
                    if assembler.is_complete() {
                        break;
                    }
                }
                Some(Err(EventStreamError::Transport(e))) => return Err(self.transport_error(&e)),
                Some(Err(e)) => {
                    return Err(ModelError::Protocol(format!(
                        "the event stream could not be parsed: {e}"
                    )))
                }
            }
        }
        assembler.finish()
    }

    async fn read_json(&self, resp: reqwest::Response) -> Result<Response, ModelError> {
        let idle = self.config.stream.then_some(self.config.idle_timeout);
        let bytes = read_body(resp, idle, |e| self.transport_error(e)).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ModelError::Protocol(format!(
                "the response body is not a valid Messages API response: {e}"
            ))
        })
    }

    async fn api_error(&self, resp: reqwest::Response) -> ModelError {
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        // A body that never finishes must not hold up the error (or its retry).
        let body = match tokio::time::timeout(self.config.idle_timeout, resp.text()).await {
            Ok(Ok(text)) => text,
            _ => String::new(),
        };
        let (kind, message) = parse_error_body(status, &body);
        ModelError::Api {
            status: status.as_u16(),
            kind: self.redact(&kind),
            message: self.redact(&message),
            retry_after,
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> ModelError {
        ModelError::Connect {
            url: self.shown_url.clone(),
            reason: self.redact(&transport_reason(e)),
        }
    }

    /// Removes the key from text that came from elsewhere (a proxy could echo headers back).
    fn redact(&self, text: &str) -> String {
        let key = self.config.api_key.trim();
        // A key of a few characters is a placeholder (a local server's), and replacing it
        // would mangle ordinary words; real keys are long.
        if key.len() < 8 || !text.contains(key) {
            return text.to_owned();
        }
        text.replace(key, "<redacted>")
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn provider(&self) -> &str {
        "anthropic"
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        let mut request = request;
        request.stream = self.config.stream;
        let body = Bytes::from(serde_json::to_vec(&request).map_err(|e| {
            ModelError::Config(format!("The request could not be encoded as JSON: {e}"))
        })?);
        tracing::debug!(
            url = %self.shown_url,
            model = %request.model,
            stream = request.stream,
            "sending a Messages API request"
        );
        // The model is called before any tool of this turn runs, so a retried request can
        // never make a tool run twice.
        self.config
            .retry
            .run(events, |_| self.attempt(body.clone(), events))
            .await
    }
}

/// The whole body of a response.
///
/// A streaming request carries no whole-request timeout, so when `idle` is given (the
/// request asked for a stream but the server answered with one plain body) a body that goes
/// silent for that long fails with [`ModelError::Idle`] instead of hanging the call.
pub(crate) async fn read_body(
    mut resp: reqwest::Response,
    idle: Option<Duration>,
    transport: impl Fn(&reqwest::Error) -> ModelError,
) -> Result<Vec<u8>, ModelError> {
    let Some(idle) = idle else {
        let bytes = resp.bytes().await.map_err(|e| transport(&e))?;
        return Ok(bytes.to_vec());
    };
    let mut body = Vec::new();
    loop {
        let chunk = tokio::time::timeout(idle, resp.chunk())
            .await
            .map_err(|_| ModelError::Idle(idle))?
            .map_err(|e| transport(&e))?;
        match chunk {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => return Ok(body),
        }
    }
}

/// `url` without user name or password, and without a trailing slash.
pub(crate) fn strip_credentials(url: &Url) -> String {
    let mut url = url.clone();
    // Both only fail for URLs that cannot carry credentials anyway.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.as_str().trim_end_matches('/').to_owned()
}

/// The wait the server asked for: `retry-after-ms` if present, else `retry-after` seconds.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number("retry-after").map(Duration::from_secs_f64)
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
    let status_text = status
        .canonical_reason()
        .unwrap_or("unknown status")
        .to_owned();
    let start: String = body.trim().chars().take(200).collect();
    let message = if start.is_empty() {
        status_text.clone()
    } else {
        start
    };
    (status_text, message)
}

/// A plain-words reason for a transport failure.
pub(crate) fn transport_reason(e: &reqwest::Error) -> String {
    use std::io::ErrorKind;
    if e.is_timeout() {
        return "the request timed out".into();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            let plain = match io.kind() {
                ErrorKind::ConnectionRefused => Some("connection refused"),
                ErrorKind::ConnectionReset => Some("the connection was reset"),
                ErrorKind::ConnectionAborted => Some("the connection was aborted"),
                ErrorKind::UnexpectedEof => Some("the connection closed early"),
                ErrorKind::TimedOut => Some("timed out"),
                _ => None,
            };
            if let Some(plain) = plain {
                return plain.into();
            }
        }
        source = err.source();
    }
    let detail = innermost(e);
    if e.is_connect() {
        format!("could not connect ({detail})")
    } else if e.is_body() || e.is_decode() {
        format!("the connection broke while the response was streaming ({detail})")
    } else {
        detail
    }
}

/// The deepest cause's message: reqwest's own wording adds the URL and little else.
pub(crate) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
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
        assert!(c.stream);
        assert_eq!(c.idle_timeout, Duration::from_secs(120));
        assert_eq!(c.connect_timeout, Duration::from_secs(10));
        assert_eq!(c.request_timeout, Some(Duration::from_secs(600)));
        assert_eq!(c.retry, RetryPolicy::default());
    }

    #[test]
    fn debug_redacts_the_key() {
        let c = AnthropicConfig::new(KEY).with_base_url("http://localhost:1");
        let shown = format!("{c:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("api_key: \"<redacted>\""), "{shown}");
        let m = AnthropicModel::new(c).unwrap();
        let shown = format!("{m:?} {:#?}", m.client);
        assert!(!shown.contains(KEY), "{shown}");
    }

    #[test]
    fn bad_setup_is_a_config_error() {
        let err = AnthropicModel::new(AnthropicConfig::new("  ")).unwrap_err();
        assert!(matches!(err, ModelError::Config(_)), "{err}");
        let err =
            AnthropicModel::new(AnthropicConfig::new(KEY).with_base_url("not a url")).unwrap_err();
        assert!(matches!(err, ModelError::Config(_)), "{err}");
        let err =
            AnthropicModel::new(AnthropicConfig::new(KEY).with_base_url("ftp://x")).unwrap_err();
        assert!(matches!(err, ModelError::Config(_)), "{err}");
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
            m.endpoint.as_str(),
            "http://user:pw@localhost:8080/proxy/v1/messages"
        );
        assert_eq!(m.shown_url, "http://localhost:8080/proxy");
        let m = AnthropicModel::new(AnthropicConfig::new(KEY)).unwrap();
        assert_eq!(m.endpoint.as_str(), "https://api.anthropic.com/v1/messages");
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
    fn retry_after_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn redaction_of_echoed_keys() {
        let m = AnthropicModel::new(AnthropicConfig::new(KEY)).unwrap();
        assert_eq!(
            m.redact(&format!("got x-api-key: {KEY}")),
            "got x-api-key: <redacted>"
        );
    }

    #[tokio::test]
    async fn refused_connection_in_plain_words() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let e = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(transport_reason(&e), "connection refused");
    }
}
