//! The HTTP plumbing both providers share.
//!
//! A provider sends one JSON `POST` per attempt, wrapped in the [`RetryPolicy`], and reads
//! the answer as server-sent events or as one JSON body. The client (rustls, no redirects),
//! the timeouts, the read loops and the mapping of HTTP and transport failures to
//! [`ModelError`]s live here; a provider adds only its endpoint path, its headers, its
//! `Decoder` and how it reads an error body. The API key is handed over only to be
//! removed from text that came from elsewhere: it is never logged, printed, or put into an
//! error.

use crate::{ConfigError, EventSink, ModelError, Response, RetryPolicy};
use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::StreamExt;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::{StatusCode, Url};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// A client builder whose TLS is rustls with the ring provider and the webpki roots,
/// offering HTTP/2 and HTTP/1.1. Every HTTP client of cadre starts here. The TLS setup is
/// the client's own, not installed process-wide, so a program embedding cadre keeps its
/// choice.
pub fn http_client_builder() -> Result<reqwest::ClientBuilder, rustls::Error> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls_config()?))
}

/// The TLS setup of [`http_client_builder`], for a client made otherwise (the CLI's
/// blocking trace exporter).
pub fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // reqwest leaves a preconfigured client's protocols as given: offer both, as it would.
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tls)
}

/// How a provider talks HTTP: retries, streaming and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
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
    /// Where each request's `traceparent` header comes from (the `chat` span's context);
    /// `None`, the default: no header.
    pub traceparent: Option<crate::semconv::TraceparentSource>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            stream: true,
            idle_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Some(Duration::from_secs(600)),
            traceparent: None,
        }
    }
}

/// The builder setters for the [`HttpOptions`] a config keeps in its `http` field.
///
/// A macro rather than a trait so the setters stay inherent methods: callers need no import.
macro_rules! http_setters {
    () => {
        /// Sets the retry policy.
        pub fn with_retry(mut self, retry: $crate::RetryPolicy) -> Self {
            self.http.retry = retry;
            self
        }

        /// Turns streaming on or off.
        pub fn with_stream(mut self, stream: bool) -> Self {
            self.http.stream = stream;
            self
        }

        /// Sets the idle timeout for streams.
        pub fn with_idle_timeout(mut self, idle_timeout: ::std::time::Duration) -> Self {
            self.http.idle_timeout = idle_timeout;
            self
        }

        /// Sets the connect timeout.
        pub fn with_connect_timeout(mut self, connect_timeout: ::std::time::Duration) -> Self {
            self.http.connect_timeout = connect_timeout;
            self
        }

        /// Sets the whole-request timeout for non-streaming calls.
        pub fn with_request_timeout(
            mut self,
            request_timeout: Option<::std::time::Duration>,
        ) -> Self {
            self.http.request_timeout = request_timeout;
            self
        }

        /// Sends each request's `chat` span context as a W3C `traceparent` header, read
        /// from `source`.
        pub fn with_traceparent(mut self, source: $crate::semconv::TraceparentSource) -> Self {
            self.http.traceparent = Some(source);
            self
        }
    };
}
pub(crate) use http_setters;

/// Reads an error body as the API's error type and message.
pub(crate) type ErrorParser = fn(StatusCode, &str) -> (String, String);

/// What a provider makes of a successful answer; one per attempt.
pub(crate) trait Decoder: Send {
    /// Takes one server-sent event; `true` once the response is complete.
    fn event(&mut self, event: &Event) -> Result<bool, ModelError>;
    /// The response the events made, once they ended or completed it.
    fn finish(self) -> Result<Response, ModelError>;
    /// The response in one whole (non-streamed) body.
    fn body(self, body: &[u8]) -> Result<Response, ModelError>;
}

/// The URL a provider posts to, and its base as errors and logs show it.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// `{base_url}{path}`, credentials included.
    pub(crate) url: Url,
    /// The base URL without credentials.
    pub(crate) shown: String,
}

impl Endpoint {
    /// `{base_url}{path}`; fails unless the base is an http(s) URL. `api` names it in errors.
    pub(crate) fn new(api: &'static str, base_url: &str, path: &str) -> Result<Self, ModelError> {
        let base = base_url.trim().trim_end_matches('/');
        let parsed = Url::parse(base).map_err(|e| ModelError::BaseUrl {
            api,
            url: base.to_owned(),
            problem: "is not a valid URL",
            source: Box::new(e),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.cannot_be_a_base() {
            return Err(ConfigError::NotHttp {
                api,
                url: strip_credentials(&parsed),
            }
            .into());
        }
        let url = Url::parse(&format!("{base}{path}")).map_err(|e| ModelError::BaseUrl {
            api,
            url: base.to_owned(),
            problem: "is not usable",
            source: Box::new(e),
        })?;
        Ok(Self {
            url,
            shown: strip_credentials(&parsed),
        })
    }
}

/// A provider's HTTP client and what it needs to send and read one request.
pub(crate) struct Transport {
    /// Carries the provider's headers (the key among them, marked sensitive).
    pub(crate) client: reqwest::Client,
    /// Where requests go.
    pub(crate) endpoint: Endpoint,
    /// The key to remove from text that came from elsewhere (trimmed), if any.
    secret: Option<String>,
    options: HttpOptions,
    parse_error: ErrorParser,
    /// The provider's name as spans give it (`anthropic`, `openai`).
    provider: &'static str,
}

impl Transport {
    /// Builds the client: rustls, `headers` on every request, no redirects.
    pub(crate) fn new(
        provider: &'static str,
        endpoint: Endpoint,
        headers: HeaderMap,
        options: HttpOptions,
        secret: Option<String>,
        parse_error: ErrorParser,
    ) -> Result<Self, ModelError> {
        let client = http_client_builder()
            .map_err(ConfigError::Tls)?
            .default_headers(headers)
            // A redirect could carry the key to another host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("cadre/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ModelError::HttpClient)?;
        Ok(Self {
            client,
            endpoint,
            secret,
            options,
            parse_error,
            provider,
        })
    }

    /// The base URL without credentials.
    pub(crate) fn shown_url(&self) -> &str {
        &self.endpoint.shown
    }

    /// Sends `body` as JSON with `headers` besides the provider's own, retrying transient
    /// failures; `decoder` gives each attempt a fresh [`Decoder`]. `api` and `model` are
    /// only logged.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send<D: Decoder>(
        &self,
        api: &str,
        model: &str,
        headers: &HeaderMap,
        body: &(impl Serialize + Sync),
        events: EventSink<'_>,
        decoder: impl Fn() -> D + Sync,
    ) -> Result<Response, ModelError> {
        let body = Bytes::from(serde_json::to_vec(body).map_err(ModelError::Encode)?);
        tracing::debug!(
            url = %self.endpoint.shown,
            model = %model,
            stream = self.options.stream,
            "sending a {api} request"
        );
        // The model is called before any tool of this turn runs, so a retried request can
        // never make a tool run twice.
        // The request's `chat` span: its retries are logged inside it, as its events.
        let span = crate::semconv::chat_span(self.provider, model, &self.endpoint.url);
        let result = self
            .options
            .retry
            .run(events, |_| self.attempt(headers, body.clone(), decoder()))
            .instrument(span.clone())
            .await;
        crate::semconv::record_chat(&span, &result);
        result
    }

    /// One request/response exchange, without retries.
    async fn attempt<D: Decoder>(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        mut decoder: D,
    ) -> Result<Response, ModelError> {
        // A slot for the connection, held until its answer is read: past the descriptor
        // limit a connection would fail, so requests queue for one instead.
        let _slot = crate::descriptors::connection_slots().acquire().await.ok();
        let idle = self.options.idle_timeout;
        let mut req = self
            .client
            .post(self.endpoint.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .headers(headers.clone())
            .body(body);
        // Read inside the request's `chat` span: the provider sees that span as the parent.
        if let Some(traceparent) = self.options.traceparent.and_then(|source| (source.0)()) {
            req = req.header("traceparent", traceparent);
        }
        let resp = if self.options.stream {
            // Waiting for the headers counts as silence too.
            tokio::time::timeout(idle, req.send())
                .await
                .map_err(|_| ModelError::Idle(idle))?
        } else {
            if let Some(limit) = self.options.request_timeout {
                req = req.timeout(limit);
            }
            req.send().await
        }
        .map_err(|e| self.transport_error(&e))?;

        if !resp.status().is_success() {
            return Err(self.api_error(resp).await);
        }
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        // A proxy may answer a streaming request with one JSON body; take it either way.
        if self.options.stream && is_sse {
            self.read_events(resp, &mut decoder).await?;
            decoder.finish()
        } else {
            let idle = self.options.stream.then_some(idle);
            let bytes = read_body(resp, idle, |e| self.transport_error(e)).await?;
            decoder.body(&bytes)
        }
    }

    /// Feeds the events of `resp` to `decoder` until they end or complete the response.
    async fn read_events(
        &self,
        resp: reqwest::Response,
        decoder: &mut impl Decoder,
    ) -> Result<(), ModelError> {
        let idle = self.options.idle_timeout;
        let mut stream = resp.bytes_stream().eventsource();
        loop {
            let next = tokio::time::timeout(idle, stream.next())
                .await
                .map_err(|_| ModelError::Idle(idle))?;
            match next {
                None => return Ok(()),
                Some(Ok(event)) => {
                    // Stop at the end marker so a server that keeps the connection open
                    // after it cannot stall a finished call.
                    if decoder.event(&event)? {
                        return Ok(());
                    }
                }
                Some(Err(EventStreamError::Transport(e))) => return Err(self.transport_error(&e)),
                Some(Err(e)) => {
                    return Err(ModelError::Malformed {
                        what: "the event stream could not be parsed".into(),
                        source: Box::new(e),
                    })
                }
            }
        }
    }

    /// The [`ModelError::Api`] for a response with an error status.
    async fn api_error(&self, resp: reqwest::Response) -> ModelError {
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        // A body that never finishes must not hold up the error (or its retry).
        let body = match tokio::time::timeout(self.options.idle_timeout, resp.text()).await {
            Ok(Ok(text)) => text,
            _ => String::new(),
        };
        let (kind, message) = (self.parse_error)(status, &body);
        ModelError::Api {
            status: status.as_u16(),
            kind: self.redact(&kind),
            message: self.redact(&message),
            retry_after,
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> ModelError {
        ModelError::Connect {
            url: self.endpoint.shown.clone(),
            reason: self.redact(&transport_reason(e)),
        }
    }

    /// Removes the key from text that came from elsewhere (a proxy could echo headers back).
    pub(crate) fn redact(&self, text: &str) -> String {
        match &self.secret {
            // A key of a few characters is a placeholder (a local server's), and replacing
            // it would mangle ordinary words; real keys are long.
            Some(key) if key.len() >= 8 && text.contains(key.as_str()) => {
                text.replace(key.as_str(), "<redacted>")
            }
            _ => text.to_owned(),
        }
    }
}

/// The whole body of a response.
///
/// A streaming request carries no whole-request timeout, so when `idle` is given (the
/// request asked for a stream but the server answered with one plain body) a body that goes
/// silent for that long fails with [`ModelError::Idle`] instead of hanging the call.
async fn read_body(
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

/// The status text and the start of the body, for an error body in no known shape.
pub(crate) fn plain_error(status: StatusCode, body: &str) -> (String, String) {
    let status_text = status_text(status);
    let start: String = body.trim().chars().take(200).collect();
    let message = if start.is_empty() {
        status_text.clone()
    } else {
        start
    };
    (status_text, message)
}

/// The status's reason phrase ("Bad Gateway").
pub(crate) fn status_text(status: StatusCode) -> String {
    status
        .canonical_reason()
        .unwrap_or("unknown status")
        .to_owned()
}

/// `url` without user name or password, and without a trailing slash.
fn strip_credentials(url: &Url) -> String {
    let mut url = url.clone();
    // Both only fail for URLs that cannot carry credentials anyway.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.as_str().trim_end_matches('/').to_owned()
}

/// The wait the server asked for: `retry-after-ms` if present, else `retry-after` seconds.
///
/// A negative, NaN or unparsable value is ignored; one too large for a [`Duration`] (or for
/// the retry policy) is capped at [`MAX_RETRY_AFTER`](crate::retry::MAX_RETRY_AFTER).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            // `inf` is kept: it is a (very) long wait, capped below like any other.
            .filter(|n| *n >= 0.0)
    };
    let secs = match number("retry-after-ms") {
        Some(ms) => ms / 1000.0,
        None => number("retry-after")?,
    };
    let cap = crate::retry::MAX_RETRY_AFTER;
    // Fails only for values beyond `Duration::MAX` (NaN and negatives are filtered above).
    Some(Duration::try_from_secs_f64(secs).map_or(cap, |wait| wait.min(cap)))
}

/// A plain-words reason for a transport failure.
fn transport_reason(e: &reqwest::Error) -> String {
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
    use reqwest::header::HeaderValue;

    #[test]
    fn defaults() {
        let o = HttpOptions::default();
        assert!(o.stream);
        assert_eq!(o.idle_timeout, Duration::from_secs(120));
        assert_eq!(o.connect_timeout, Duration::from_secs(10));
        assert_eq!(o.request_timeout, Some(Duration::from_secs(600)));
        assert_eq!(o.retry, RetryPolicy::default());
    }

    #[test]
    fn endpoint_and_shown_url() {
        let e = Endpoint::new("Test", "http://user:pw@localhost:8080/proxy/", "/v1/x").unwrap();
        assert_eq!(e.url.as_str(), "http://user:pw@localhost:8080/proxy/v1/x");
        assert_eq!(e.shown, "http://localhost:8080/proxy");
        for bad in ["not a url", "ftp://x"] {
            let err = Endpoint::new("Test", bad, "/v1/x").unwrap_err();
            assert!(err.is_config(), "{err}");
            assert!(err.to_string().contains("The Test base URL"), "{err}");
        }
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
    fn retry_after_extreme_values_do_not_panic() {
        let cap = crate::retry::MAX_RETRY_AFTER;
        let parse = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            retry_after(&h)
        };
        for name in ["retry-after", "retry-after-ms"] {
            for huge in [
                "1e30",
                "inf",
                "+Infinity",
                "1.8e308",
                "99999999999999999999",
            ] {
                assert_eq!(parse(name, huge), Some(cap), "{name}: {huge}");
            }
            for ignored in ["-5", "-inf", "NaN", "-0.5", "soon"] {
                assert_eq!(parse(name, ignored), None, "{name}: {ignored}");
            }
            assert_eq!(parse(name, "0"), Some(Duration::ZERO), "{name}");
        }
        assert_eq!(parse("retry-after", "3600"), Some(cap));
        assert_eq!(
            parse("retry-after", "0.25"),
            Some(Duration::from_millis(250))
        );
        // A useless retry-after-ms falls back to retry-after.
        let mut h = HeaderMap::new();
        h.insert("retry-after-ms", HeaderValue::from_static("-1"));
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
    }

    #[test]
    fn redaction_of_echoed_keys() {
        const KEY: &str = "sk-test-SECRET-123";
        let transport = |secret: Option<&str>| {
            let endpoint = Endpoint::new("Test", "http://localhost:1", "/x").unwrap();
            let secret = secret.map(str::to_owned);
            Transport::new(
                "test",
                endpoint,
                HeaderMap::new(),
                HttpOptions::default(),
                secret,
                plain_error,
            )
            .unwrap()
        };
        let t = transport(Some(KEY));
        assert_eq!(
            t.redact(&format!("got x-api-key: {KEY}")),
            "got x-api-key: <redacted>"
        );
        // Short placeholder keys, and no key, leave the text alone.
        assert_eq!(transport(Some("abc")).redact("abcdef"), "abcdef");
        assert_eq!(transport(None).redact(KEY), KEY);
    }

    /// The client's TLS works without a process-wide provider and offers HTTP/2: a local
    /// listener reads its ClientHello (then hangs up, so the request itself fails).
    #[tokio::test]
    async fn the_client_speaks_tls_offering_http2() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut acceptor = rustls::server::Acceptor::default();
            let mut buf = vec![0; 16 * 1024];
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client hung up before its ClientHello");
                acceptor.read_tls(&mut &buf[..n]).unwrap();
                if let Some(accepted) = acceptor.accept().map_err(|(e, _)| e).unwrap() {
                    let hello = accepted.client_hello();
                    let alpn: Vec<Vec<u8>> = hello.alpn().unwrap().map(<[u8]>::to_vec).collect();
                    return (hello.server_name().map(str::to_owned), alpn);
                }
            }
        });
        let client = http_client_builder().unwrap().build().unwrap();
        let sent = client
            .get(format!("https://localhost:{port}/"))
            .send()
            .await;
        assert!(sent.is_err());
        let (name, alpn) = server.await.unwrap();
        assert_eq!(name.as_deref(), Some("localhost"));
        assert_eq!(alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    #[tokio::test]
    async fn refused_connection_in_plain_words() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let e = http_client_builder()
            .unwrap()
            .build()
            .unwrap()
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(transport_reason(&e), "connection refused");
    }
}
