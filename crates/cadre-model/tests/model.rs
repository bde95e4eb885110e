//! The crate's one integration test binary.
//!
//! The top level drives the real `AnthropicModel` against the `cadre-testkit` mock Messages
//! API; [`openai`] drives `OpenAiModel` against a small Chat Completions mock defined there;
//! [`record_replay`] records conversations through `RecordingModel` and replays them;
//! [`context_window`] asks `OpenAiModel` for the window servers report. The
//! helpers at the top (sending, event filters, error checks, a local axum server) serve both
//! providers' tests, so each test states only what differs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cadre_model::{
    AnthropicConfig, AnthropicModel, ContentBlock, Message, Model, ModelError, ModelEvent, Request,
    Response, RetryPolicy, Role, StopReason, Usage,
};
use cadre_testkit::{Block, Match, MockServer, Reply};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const KEY: &str = "sk-ant-integration-SECRET-0042";

// ---------------------------------------------------------------------------------------
// Shared by the Anthropic, OpenAI and fuzz tests.

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
    }
}

/// Sends one request, returning the result and every event reported.
async fn send(model: &dyn Model, req: Request) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
    let seen = Mutex::new(Vec::new());
    let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
    let out = model.send(req, &sink).await;
    (out, seen.into_inner().unwrap())
}

/// The `Retrying` events: attempt, wait and reason.
fn retries(events: &[ModelEvent]) -> Vec<(u32, Duration, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::Retrying {
                attempt,
                wait,
                reason,
            } => Some((*attempt, *wait, reason.clone())),
            _ => None,
        })
        .collect()
}

/// A tool input whose JSON, cut into small pieces, splits keys, escapes and numbers.
fn awkward_tool_input() -> Value {
    json!({
        "command": "grep -rn \"fn main\" src/ | head -n 20",
        "timeout_ms": 120000,
        "env": {"LANG": "C.UTF-8", "list": [1, 2.5, null, true, "ünïcödé"]}
    })
}

/// One retry, after the 1 s the server's 429 asked for (`start`: when the call began).
fn assert_waited_retry_after(start: Instant, events: &[ModelEvent]) -> String {
    // A lower bound is deterministic; the upper bound is not asserted.
    assert!(start.elapsed() >= Duration::from_secs(1));
    let r = retries(events);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 1);
    assert_eq!(r[0].1, Duration::from_secs(1));
    assert!(r[0].2.contains("429"), "{}", r[0].2);
    r[0].2.clone()
}

/// The text deltas, in order.
fn text_deltas(events: &[ModelEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// The `ToolUseStart` events, in order.
fn tool_starts(events: &[ModelEvent]) -> Vec<ModelEvent> {
    events
        .iter()
        .filter(|e| matches!(e, ModelEvent::ToolUseStart { .. }))
        .cloned()
        .collect()
}

fn assert_key_hidden(err: &ModelError, key: &str) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(key), "the API key leaked: {shown}");
}

/// `err` is the API's own error, passed through and shown.
fn assert_api_error(err: &ModelError, status: u16, kind: &str, message: &str) {
    match err {
        ModelError::Api {
            status: s,
            kind: k,
            message: m,
            ..
        } => assert_eq!((*s, k.as_str(), m.as_str()), (status, kind, message)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains(message), "{err}");
}

/// A 401 whose message echoed `key`: shown redacted and not retried.
fn assert_unauthorized_redacted(err: &ModelError, events: &[ModelEvent], key: &str) {
    assert!(
        matches!(err, ModelError::Api { status: 401, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("<redacted>"), "{err}");
    assert_key_hidden(err, key);
    assert!(retries(events).is_empty());
}

/// `http://127.0.0.1:<port>` where nothing listens.
fn refused_uri() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

fn assert_refused(err: &ModelError, uri: &str) {
    match err {
        ModelError::Connect { url, reason } => {
            assert_eq!(url, uri);
            assert_eq!(reason, "connection refused");
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// An axum app served on 127.0.0.1 until dropped.
struct LocalServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl LocalServer {
    async fn start(app: axum::Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, task }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// AnthropicModel against the cadre-testkit mock.

fn config(uri: &str) -> AnthropicConfig {
    AnthropicConfig::new(KEY)
        .with_base_url(uri)
        .with_retry(fast_retry())
}

fn model(server: &MockServer) -> AnthropicModel {
    AnthropicModel::new(config(&server.uri())).unwrap()
}

fn request(text: &str) -> Request {
    Request::new("claude-sonnet-5-5", 1024, vec![Message::user_text(text)])
}

fn assert_no_key(err: &ModelError) {
    assert_key_hidden(err, KEY);
}

#[tokio::test]
async fn streamed_text() {
    let server = MockServer::start().await;
    let text = "Hello from the mock server, streamed in several pieces.";
    server.route(Match::Any, vec![Reply::text(text)]);
    let (out, events) = send(&model(&server), request("hi")).await;
    let resp = out.unwrap();
    assert_eq!(resp.text(), text);
    assert_eq!(resp.role, Role::Assistant);
    assert_eq!(resp.stop_reason, Some(StopReason::EndTurn));
    assert!(resp.id.starts_with("msg_"));
    assert_eq!(resp.model, "claude-sonnet-5-5");
    let deltas = text_deltas(&events);
    assert!(deltas.len() > 1, "expected several deltas, got {deltas:?}");
    assert_eq!(deltas.concat(), text);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert!(reqs[0].is_stream());
    assert_eq!(reqs[0].first_user_text(), "hi");
}

#[tokio::test]
async fn tool_use_json_split_across_chunks() {
    let server = MockServer::start().await;
    let input = awkward_tool_input();
    server.route(
        Match::Any,
        vec![Reply::tool_uses(vec![
            ("toolu_01", "bash", input.clone()),
            ("toolu_02", "list_files", json!({})),
        ])
        .with_text_before("Let me look around.")],
    );
    let (out, events) = send(&model(&server), request("find main")).await;
    let resp = out.unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(resp.text(), "Let me look around.");
    let uses: Vec<_> = resp.tool_uses().collect();
    assert_eq!(uses.len(), 2);
    assert_eq!(
        (uses[0].id.as_str(), uses[0].name.as_str()),
        ("toolu_01", "bash")
    );
    assert_eq!(uses[0].input, input);
    assert_eq!(uses[1].input, json!({}));
    assert_eq!(
        tool_starts(&events),
        vec![
            ModelEvent::ToolUseStart {
                id: "toolu_01".into(),
                name: "bash".into()
            },
            ModelEvent::ToolUseStart {
                id: "toolu_02".into(),
                name: "list_files".into()
            }
        ]
    );
}

#[tokio::test]
async fn thinking_signature_and_unknown_blocks_round_trip() {
    let server = MockServer::start().await;
    let blocks = vec![
        Block::Thinking {
            thinking: "The user wants a search; I will use the server tool first.".into(),
            signature: "EqQBCkYIARgCIkB+sig/with+slashes==".into(),
        },
        Block::RedactedThinking("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw==".into()),
        Block::Raw(json!({
            "type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
            "input": {"query": "rust sse"}
        })),
        Block::Raw(json!({
            "type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "url": "https://example.com",
                         "title": "Example", "encrypted_content": "abc"}],
            "some_future_field": {"nested": [1, 2]}
        })),
        Block::Text("Here is what I found.".into()),
    ];
    let expected: Vec<Value> = blocks.iter().map(Block::to_json).collect();
    server.route(
        Match::FirstUserContains("search".into()),
        vec![Reply::blocks(blocks)],
    );
    server.route(Match::Any, vec![Reply::text("ok")]);
    let m = model(&server);

    let (out, events) = send(&m, request("search for rust sse")).await;
    let resp = out.unwrap();
    assert!(matches!(resp.content[0], ContentBlock::Thinking(_)));
    assert!(matches!(resp.content[2], ContentBlock::Unknown(_)));
    assert!(matches!(resp.content[3], ContentBlock::Unknown(_)));
    assert_eq!(
        serde_json::to_value(&resp.content).unwrap(),
        Value::Array(expected.clone())
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, ModelEvent::ThinkingDelta(_))));

    // Sending the blocks back must reproduce them byte for byte (the signature is checked).
    let mut next = request("search for rust sse");
    next.messages.push(resp.to_message());
    next.messages.push(Message::user_text("thanks"));
    let (out, _) = send(&m, next).await;
    assert_eq!(out.unwrap().text(), "ok");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].messages()[1]["content"], Value::Array(expected));
}

#[tokio::test]
async fn usage_reports_cache_reads_and_writes() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text("cached").usage(3, 17, 1200, 0),
            Reply::text("cached again").usage(4, 9, 0, 1200),
        ],
    );
    let m = model(&server);
    let mut req = request("hello");
    req.system = vec![cadre_model::SystemBlock::text("You are terse.")];
    req.apply_prompt_caching();
    let first = send(&m, req.clone()).await.0.unwrap();
    assert_eq!(
        first.usage,
        Usage {
            input_tokens: 3,
            output_tokens: 17,
            cache_creation_input_tokens: 1200,
            cache_read_input_tokens: 0,
            ..Default::default()
        }
    );
    let second = send(&m, req).await.0.unwrap();
    assert_eq!(second.usage.cache_read_input_tokens, 1200);
    assert_eq!(second.usage.cache_creation_input_tokens, 0);
    assert_eq!(second.usage.output_tokens, 9);
    assert_eq!(second.usage.total_input(), 1204);
    let reqs = server.requests();
    assert_eq!(reqs[0].body["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(
        reqs[0].body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test]
async fn non_streaming_call() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("toolu_9", "read_file", json!({"path": "src/lib.rs"}))
                .with_text_before("Reading.")
                .usage(11, 22, 33, 44),
        ],
    );
    let m = AnthropicModel::new(config(&server.uri()).with_stream(false)).unwrap();
    let (out, events) = send(&m, request("read it")).await;
    let resp = out.unwrap();
    assert_eq!(resp.text(), "Reading.");
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    let uses: Vec<_> = resp.tool_uses().collect();
    assert_eq!(uses[0].input, json!({"path": "src/lib.rs"}));
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 11,
            output_tokens: 22,
            cache_creation_input_tokens: 33,
            cache_read_input_tokens: 44,
            ..Default::default()
        }
    );
    assert!(events.is_empty());
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert!(!reqs[0].is_stream());
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::error_status(
                429,
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
            )
            .retry_after(1),
            Reply::text("after the wait"),
        ],
    );
    let start = Instant::now();
    let (out, events) = send(&model(&server), request("hi")).await;
    assert_eq!(out.unwrap().text(), "after the wait");
    assert_waited_retry_after(start, &events);
    assert_eq!(server.requests().len(), 2);
}

async fn recovers_after(first: Reply) -> Vec<ModelEvent> {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![first, Reply::text("recovered")]);
    let (out, events) = send(&model(&server), request("hi")).await;
    assert_eq!(out.unwrap().text(), "recovered");
    assert_eq!(server.requests().len(), 2);
    assert_eq!(retries(&events).len(), 1);
    events
}

#[tokio::test]
async fn overloaded_529_then_success() {
    recovers_after(Reply::error_status(529, "overloaded_error", "Overloaded")).await;
}

#[tokio::test]
async fn server_error_500_then_success() {
    recovers_after(Reply::error_status(
        500,
        "api_error",
        "Internal server error",
    ))
    .await;
}

#[tokio::test]
async fn stream_error_then_success() {
    let events = recovers_after(Reply::stream_error("overloaded_error", "Overloaded")).await;
    assert!(retries(&events)[0].2.contains("overloaded_error"));
}

#[tokio::test]
async fn truncated_stream_then_success() {
    let events = recovers_after(Reply::text("this will be cut short").truncated(4)).await;
    assert!(retries(&events)[0].2.contains("message_stop"));
}

#[tokio::test]
async fn dropped_connection_then_success() {
    let events = recovers_after(Reply::text("this connection dies").drop_connection(4)).await;
    assert!(retries(&events)[0].2.contains("could not reach"));
}

#[tokio::test]
async fn truncated_every_time_gives_up() {
    let server = MockServer::start().await;
    let cut = Reply::text("never finishes").truncated(3);
    server.route(Match::Any, vec![cut.clone(), cut.clone(), cut.clone(), cut]);
    let (out, events) = send(&model(&server), request("hi")).await;
    let err = out.unwrap_err();
    match &err {
        ModelError::RetriesExhausted { attempts, last } => {
            assert_eq!(*attempts, 4);
            assert!(matches!(**last, ModelError::Protocol(_)), "{last:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 4);
    assert_eq!(retries(&events).len(), 3);
    assert_no_key(&err);
}

#[tokio::test]
async fn invalid_request_fails_at_once() {
    let server = MockServer::start().await;
    let msg = "max_tokens: 999999 > 64000, which is the maximum allowed";
    server.route(
        Match::Any,
        vec![Reply::error_status(400, "invalid_request_error", msg)],
    );
    let (out, events) = send(&model(&server), request("hi")).await;
    assert_api_error(&out.unwrap_err(), 400, "invalid_request_error", msg);
    assert!(retries(&events).is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_echoed_keys_are_redacted() {
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::Any,
        vec![
            Reply::error_status(
                401,
                "authentication_error",
                &format!("invalid x-api-key: {KEY}"),
            ),
            Reply::text("must not be reached"),
        ],
    );
    let (out, events) = send(&model(&server), request("hi")).await;
    assert_unauthorized_redacted(&out.unwrap_err(), &events, KEY);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stalled_stream_hits_idle_timeout_then_retries() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("stuck").stall(4), Reply::text("moving again")],
    );
    let m =
        AnthropicModel::new(config(&server.uri()).with_idle_timeout(Duration::from_millis(300)))
            .unwrap();
    let (out, events) = send(&m, request("hi")).await;
    assert_eq!(out.unwrap().text(), "moving again");
    assert_eq!(server.requests().len(), 2);
    let r = retries(&events);
    assert_eq!(r.len(), 1);
    assert!(r[0].2.contains("sent nothing"), "{}", r[0].2);
}

#[tokio::test]
async fn unreachable_server_is_a_connect_error() {
    let uri = refused_uri();
    let m = AnthropicModel::new(config(&uri).with_retry(RetryPolicy::none())).unwrap();
    let (out, _) = send(&m, request("hi")).await;
    let err = out.unwrap_err();
    assert_refused(&err, &uri);
    assert_no_key(&err);

    let m = AnthropicModel::new(config(&uri)).unwrap();
    let (out, events) = send(&m, request("hi")).await;
    let err = out.unwrap_err();
    match &err {
        ModelError::RetriesExhausted { attempts, last } => {
            assert_eq!(*attempts, 4);
            assert!(matches!(**last, ModelError::Connect { .. }));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(retries(&events).len(), 3);
    assert_no_key(&err);
}

#[tokio::test]
async fn sends_key_and_version_headers() {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("one"), Reply::text("two")]);
    send(&model(&server), request("hi")).await.0.unwrap();
    let custom = AnthropicModel::new(config(&server.uri()).with_version("2099-01-01")).unwrap();
    send(&custom, request("hi")).await.0.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].header("x-api-key"), Some(KEY));
    assert_eq!(reqs[0].header("anthropic-version"), Some("2026-10-21"));
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    assert_eq!(reqs[1].header("anthropic-version"), Some("2099-01-01"));
    assert_eq!(reqs[0].body["model"], "claude-sonnet-5-5");
    assert_eq!(reqs[0].body["max_tokens"], 1024);
}

#[tokio::test]
async fn trailing_slash_in_base_url() {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("ok")]);
    let m = AnthropicModel::new(config(&format!("{}/", server.uri()))).unwrap();
    assert_eq!(send(&m, request("hi")).await.0.unwrap().text(), "ok");
}

#[tokio::test]
async fn key_never_shown() {
    let c = config("http://127.0.0.1:9");
    let shown = format!("{c:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("api_key: \"<redacted>\""), "{shown}");
    let m = AnthropicModel::new(c).unwrap();
    assert!(!format!("{m:?}").contains(KEY));

    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::error_status(400, "invalid_request_error", "bad"),
            Reply::stream_error("invalid_request_error", "bad stream"),
            Reply::text("x").drop_connection(2),
            Reply::raw_sse("event: message_start\ndata: {not json\n\n"),
        ],
    );
    let m = AnthropicModel::new(config(&server.uri()).with_retry(RetryPolicy::none())).unwrap();
    for _ in 0..4 {
        let err = send(&m, request("hi")).await.0.unwrap_err();
        assert_no_key(&err);
    }
    assert_eq!(server.pending_replies(), 0);
}

/// `OpenAiModel` against a local Chat Completions mock.
mod openai {
    use super::{
        assert_api_error, assert_key_hidden, assert_refused, assert_unauthorized_redacted,
        assert_waited_retry_after, awkward_tool_input, fast_retry, refused_uri, retries, send,
        text_deltas, tool_starts, LocalServer,
    };
    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{header, HeaderMap, StatusCode};
    use axum::routing::post;
    use axum::Router;
    use cadre_model::{
        CacheControl, ContentBlock, Message, ModelEvent, OpenAiConfig, OpenAiModel, Request,
        RetryPolicy, Role, StopReason, SystemBlock, ToolDefinition, Usage,
    };
    use serde_json::{json, Value};
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    const KEY: &str = "sk-openai-integration-SECRET-0077";

    /// One scripted answer of the mock.
    enum Scripted {
        /// An SSE stream: each item is sent as `data: {item}\n\n`, in 7-byte pieces.
        Sse(Vec<String>),
        /// One JSON body.
        Json(Value),
        /// An HTTP error with a JSON body and an optional `retry-after` (seconds).
        Error(u16, Value, Option<u64>),
    }

    #[derive(Default)]
    struct Shared {
        script: Mutex<VecDeque<Scripted>>,
        captured: Mutex<Vec<(HeaderMap, Value)>>,
    }

    /// A Chat Completions server on 127.0.0.1 that answers from a script.
    struct ChatMock {
        uri: String,
        shared: Arc<Shared>,
        _server: LocalServer,
    }

    impl ChatMock {
        async fn start(script: Vec<Scripted>) -> Self {
            let shared = Arc::new(Shared::default());
            *shared.script.lock().unwrap() = script.into();
            let app = Router::new()
                .route("/v1/chat/completions", post(handle))
                .with_state(shared.clone());
            let server = LocalServer::start(app).await;
            Self {
                uri: format!("http://{}/v1", server.addr),
                shared,
                _server: server,
            }
        }

        fn requests(&self) -> Vec<Value> {
            let captured = self.shared.captured.lock().unwrap();
            captured.iter().map(|(_, body)| body.clone()).collect()
        }

        fn header(&self, i: usize, name: &str) -> Option<String> {
            let captured = self.shared.captured.lock().unwrap();
            captured[i]
                .0
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        }

        fn assert_script_used(&self) {
            assert!(self.shared.script.lock().unwrap().is_empty());
        }
    }

    async fn handle(
        State(shared): State<Arc<Shared>>,
        headers: HeaderMap,
        body: Bytes,
    ) -> axum::response::Response {
        let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
        shared.captured.lock().unwrap().push((headers, json));
        let next = shared.script.lock().unwrap().pop_front();
        let builder = axum::response::Response::builder();
        match next {
            Some(Scripted::Sse(events)) => {
                let text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                let pieces: Vec<Result<Bytes, Infallible>> = text
                    .as_bytes()
                    .chunks(7)
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect();
                builder
                    .header(header::CONTENT_TYPE, "text/event-stream")
                    .body(Body::from_stream(futures::stream::iter(pieces)))
                    .unwrap()
            }
            Some(Scripted::Json(v)) => builder
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(v.to_string()))
                .unwrap(),
            Some(Scripted::Error(status, v, retry_after)) => {
                let mut b = builder
                    .status(StatusCode::from_u16(status).unwrap())
                    .header(header::CONTENT_TYPE, "application/json");
                if let Some(secs) = retry_after {
                    b = b.header("retry-after", secs.to_string());
                }
                b.body(Body::from(v.to_string())).unwrap()
            }
            None => builder
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(Body::from(
                    json!({"error": {"message": "the mock has no reply left", "type": "mock"}})
                        .to_string(),
                ))
                .unwrap(),
        }
    }

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        json!({
            "id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
        .to_string()
    }

    fn usage_chunk(prompt: u64, completion: u64, cached: u64) -> String {
        json!({
            "id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}
        })
        .to_string()
    }

    fn done() -> String {
        "[DONE]".into()
    }

    /// A streamed text answer in 5-character pieces.
    fn text_reply(text: &str, finish: &str) -> Scripted {
        let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(5) {
            let piece: String = piece.iter().collect();
            events.push(chunk(json!({"content": piece}), None));
        }
        events.push(chunk(json!({}), Some(finish)));
        events.push(usage_chunk(20, 5, 0));
        events.push(done());
        Scripted::Sse(events)
    }

    fn config(uri: &str) -> OpenAiConfig {
        OpenAiConfig::new()
            .with_base_url(uri)
            .with_retry(fast_retry())
    }

    fn model(mock: &ChatMock) -> OpenAiModel {
        OpenAiModel::new(config(&mock.uri)).unwrap()
    }

    fn request(text: &str) -> Request {
        Request::new("gpt-test", 512, vec![Message::user_text(text)])
    }

    #[tokio::test]
    async fn streamed_text_and_usage() {
        let text = "Hello from a Chat Completions stream, in many small pieces.";
        let mut events = match text_reply(text, "stop") {
            Scripted::Sse(e) => e,
            _ => unreachable!(),
        };
        // The usage chunk of this reply reports cached prompt tokens.
        let n = events.len();
        events[n - 2] = usage_chunk(1000, 42, 800);
        let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
        let (out, seen) = send(&model(&mock), request("hi")).await;
        let resp = out.unwrap();
        assert_eq!(resp.text(), text);
        assert_eq!(resp.id, "chatcmpl-7");
        assert_eq!(resp.model, "gpt-test");
        assert_eq!(resp.role, Role::Assistant);
        assert_eq!(resp.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 200,
                output_tokens: 42,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 800,
                ..Default::default()
            }
        );
        assert_eq!(resp.usage.total_input(), 1000);
        let deltas = text_deltas(&seen);
        assert!(deltas.len() > 5, "{deltas:?}");
        assert_eq!(deltas.concat(), text);
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0]["stream"], true);
        assert_eq!(reqs[0]["stream_options"], json!({"include_usage": true}));
        assert_eq!(mock.header(0, "authorization"), None);
        assert_eq!(
            mock.header(0, "content-type").as_deref(),
            Some("application/json")
        );
        mock.assert_script_used();
    }

    #[tokio::test]
    async fn streamed_tool_calls_split_across_chunks() {
        let first = awkward_tool_input();
        let second = json!({"path": "src/lib.rs"});
        let mut events = vec![
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"content": "Let me "}), None),
            chunk(json!({"content": "look."}), None),
            // id and name only in the first fragment of each call.
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                                       "function": {"name": "bash", "arguments": ""}}]}),
                None,
            ),
        ];
        // Three-character pieces split keys, strings, escapes and numbers mid-token.
        let chars: Vec<char> = first.to_string().chars().collect();
        for piece in chars.chunks(3) {
            let piece: String = piece.iter().collect();
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                None,
            ));
        }
        // The second call comes with an empty id, as some local servers send it.
        events.push(chunk(
            json!({"tool_calls": [{"index": 1, "id": "", "type": "function",
                                   "function": {"name": "read_file", "arguments": "{\"pa"}}]}),
            None,
        ));
        events.push(chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "th\": \"src/lib.rs\"}"}}]}),
            None,
        ));
        events.push(chunk(json!({}), Some("tool_calls")));
        events.push(usage_chunk(50, 30, 0));
        events.push(done());
        let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
        let (out, seen) = send(&model(&mock), request("find main")).await;
        let resp = out.unwrap();
        assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(resp.text(), "Let me look.");
        let uses: Vec<_> = resp.tool_uses().collect();
        assert_eq!(uses.len(), 2);
        assert_eq!(
            (uses[0].id.as_str(), uses[0].name.as_str()),
            ("call_abc", "bash")
        );
        assert_eq!(uses[0].input, first);
        assert!(uses[1].id.starts_with("call_"), "{}", uses[1].id);
        assert_ne!(uses[1].id, uses[0].id);
        assert_eq!(uses[1].name, "read_file");
        assert_eq!(uses[1].input, second);
        assert_eq!(
            tool_starts(&seen),
            vec![
                ModelEvent::ToolUseStart {
                    id: "call_abc".into(),
                    name: "bash".into()
                },
                ModelEvent::ToolUseStart {
                    id: uses[1].id.clone(),
                    name: "read_file".into()
                },
            ]
        );
        assert_eq!(resp.usage.input_tokens, 50);
        assert_eq!(resp.usage.output_tokens, 30);
        mock.assert_script_used();
    }

    #[tokio::test]
    async fn invalid_tool_arguments_are_kept_for_an_error_result() {
        let events = vec![
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                       "function": {"name": "edit_file", "arguments": "{\"path\": "}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            done(),
        ];
        let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
        let resp = send(&model(&mock), request("edit")).await.0.unwrap();
        let t = resp.tool_uses().next().unwrap();
        let bad = t.invalid_input.as_ref().unwrap();
        assert_eq!(bad.text, "{\"path\": ");
        assert!(bad.error.contains("EOF"), "{}", bad.error);
        assert_eq!(t.input, json!({}));
    }

    #[tokio::test]
    async fn each_finish_reason() {
        let cases = [
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::Refusal),
            ("function_call", StopReason::ToolUse),
            ("something_new", StopReason::Other("something_new".into())),
        ];
        let mock =
            ChatMock::start(cases.iter().map(|(r, _)| text_reply("answer", r)).collect()).await;
        let m = model(&mock);
        for (reason, expected) in cases {
            let resp = send(&m, request("hi")).await.0.unwrap();
            assert_eq!(resp.stop_reason, Some(expected), "{reason}");
            assert_eq!(resp.text(), "answer");
        }
        mock.assert_script_used();
    }

    #[tokio::test]
    async fn reasoning_is_shown_not_kept() {
        let events = vec![
            chunk(json!({"reasoning_content": "Thinking it over."}), None),
            chunk(json!({"reasoning": " Still."}), None),
            chunk(json!({"content": "Done."}), None),
            chunk(json!({}), Some("stop")),
            done(),
        ];
        let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
        let (out, seen) = send(&model(&mock), request("hi")).await;
        let resp = out.unwrap();
        assert_eq!(resp.content, vec![ContentBlock::text("Done.")]);
        assert_eq!(
            seen[..2],
            [
                ModelEvent::ThinkingDelta("Thinking it over.".into()),
                ModelEvent::ThinkingDelta(" Still.".into())
            ]
        );
        // No usage chunk: the counts stay zero.
        assert_eq!(resp.usage, Usage::default());
    }

    #[tokio::test]
    async fn rate_limit_honours_retry_after_then_succeeds() {
        let mock = ChatMock::start(vec![
            Scripted::Error(
                429,
                json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
                Some(1),
            ),
            text_reply("after the wait", "stop"),
        ])
        .await;
        let start = Instant::now();
        let (out, seen) = send(&model(&mock), request("hi")).await;
        assert_eq!(out.unwrap().text(), "after the wait");
        let reason = assert_waited_retry_after(start, &seen);
        assert!(reason.contains("Rate limit reached"), "{reason}");
        assert_eq!(mock.requests().len(), 2);
        mock.assert_script_used();
    }

    #[tokio::test]
    async fn server_error_and_cut_stream_are_retried() {
        let cut = vec![chunk(json!({"content": "cut sh"}), None)];
        let mock = ChatMock::start(vec![
            Scripted::Error(503, json!({"error": {"message": "busy"}}), None),
            Scripted::Sse(cut),
            text_reply("recovered", "stop"),
        ])
        .await;
        let (out, seen) = send(&model(&mock), request("hi")).await;
        assert_eq!(out.unwrap().text(), "recovered");
        let r = retries(&seen);
        assert_eq!(r.len(), 2);
        assert!(r[1].2.contains("finish_reason"), "{}", r[1].2);
        mock.assert_script_used();
    }

    #[tokio::test]
    async fn bad_request_fails_at_once_with_the_servers_message() {
        let msg = "The model `gpt-nope` does not exist or you do not have access to it.";
        let mock = ChatMock::start(vec![
            Scripted::Error(
                400,
                json!({"error": {"message": msg, "type": "invalid_request_error", "code": "model_not_found"}}),
                None,
            ),
            text_reply("must not be reached", "stop"),
        ])
        .await;
        let (out, seen) = send(&model(&mock), request("hi")).await;
        assert_api_error(&out.unwrap_err(), 400, "invalid_request_error", msg);
        assert!(retries(&seen).is_empty());
        assert_eq!(mock.requests().len(), 1);
    }

    #[tokio::test]
    async fn translated_request_field_by_field() {
        let mock = ChatMock::start(vec![text_reply("ok", "stop")]).await;
        let m = OpenAiModel::new(config(&format!("{}/", mock.uri)).with_api_key(KEY)).unwrap();
        let mut req = Request::new(
            "qwen3:8b",
            2048,
            vec![
                Message::user_text("List the files, then read the readme."),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::Thinking(
                            serde_json::from_value(json!({"thinking": "plan", "signature": "sig"}))
                                .unwrap(),
                        ),
                        ContentBlock::text("I will look."),
                        ContentBlock::tool_use("call_1", "list_files", json!({"path": "."})),
                        ContentBlock::tool_use("call_2", "read_file", json!({"path": "README.md"})),
                    ],
                ),
                Message::new(
                    Role::User,
                    vec![
                        ContentBlock::tool_result("call_1", "README.md\nsrc/", false),
                        ContentBlock::tool_result("call_2", "no such file", true),
                        ContentBlock::text("Keep going."),
                    ],
                ),
            ],
        );
        req.system = vec![
            SystemBlock::text("You are a careful engineer."),
            SystemBlock::text("Answer briefly."),
        ];
        req.tools = vec![
            ToolDefinition {
                name: "list_files".into(),
                description: "Lists files.".into(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                cache_control: None,
            },
            ToolDefinition {
                name: "read_file".into(),
                description: "Reads a file.".into(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
                cache_control: Some(CacheControl::ephemeral()),
            },
        ];
        req.temperature = Some(0.2);
        req.stop_sequences = vec!["</done>".into()];
        req.apply_prompt_caching();
        send(&m, req).await.0.unwrap();

        assert_eq!(
            mock.header(0, "authorization"),
            Some(format!("Bearer {KEY}"))
        );
        let body = &mock.requests()[0];
        assert_eq!(body["model"], "qwen3:8b");
        assert_eq!(body["max_tokens"], 2048);
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["stop"], json!(["</done>"]));
        assert_eq!(body["stream"], true);
        assert!(body.get("cache_control").is_none());
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 6);
        assert_eq!(msgs[0]["role"], "system");
        assert_eq!(
            msgs[0]["content"],
            "You are a careful engineer.\n\nAnswer briefly."
        );
        assert_eq!(msgs[1]["role"], "user");
        assert_eq!(msgs[1]["content"], "List the files, then read the readme.");
        assert_eq!(msgs[2]["role"], "assistant");
        assert_eq!(msgs[2]["content"], "I will look.");
        let calls = msgs[2]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["id"], "call_1");
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["function"]["name"], "list_files");
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"path": "."}));
        assert_eq!(calls[1]["id"], "call_2");
        assert_eq!(calls[1]["function"]["name"], "read_file");
        assert_eq!(msgs[3]["role"], "tool");
        assert_eq!(msgs[3]["tool_call_id"], "call_1");
        assert_eq!(msgs[3]["content"], "README.md\nsrc/");
        assert_eq!(msgs[4]["role"], "tool");
        assert_eq!(msgs[4]["tool_call_id"], "call_2");
        assert_eq!(msgs[4]["content"], "no such file");
        assert_eq!(msgs[5]["role"], "user");
        assert_eq!(msgs[5]["content"], "Keep going.");
        let tools = body["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0]["type"], "function");
        assert_eq!(tools[0]["function"]["name"], "list_files");
        assert_eq!(tools[0]["function"]["description"], "Lists files.");
        assert_eq!(
            tools[1]["function"]["parameters"],
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
        );
        assert!(tools[1].get("cache_control").is_none());
        assert!(!body.to_string().contains("cache_control"));
        assert!(!body.to_string().contains("signature"));
    }

    #[tokio::test]
    async fn non_streaming_completion() {
        let mock = ChatMock::start(vec![Scripted::Json(json!({
            "id": "chatcmpl-9", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Reading.",
                "tool_calls": [{"id": "call_9", "type": "function",
                                "function": {"name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}}]
            }}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33}
        }))])
        .await;
        let m = OpenAiModel::new(
            OpenAiConfig::new()
                .with_base_url(&mock.uri)
                .with_stream(false)
                .with_max_completion_tokens(true),
        )
        .unwrap();
        let (out, seen) = send(&m, request("read it")).await;
        let resp = out.unwrap();
        assert_eq!(resp.text(), "Reading.");
        assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
        let uses: Vec<_> = resp.tool_uses().collect();
        assert_eq!(uses[0].id, "call_9");
        assert_eq!(uses[0].input, json!({"path": "src/lib.rs"}));
        assert_eq!(resp.usage.input_tokens, 11);
        assert_eq!(resp.usage.output_tokens, 22);
        assert!(seen.is_empty());
        let body = &mock.requests()[0];
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_completion_tokens"], 512);
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("stream_options").is_none());
    }

    #[tokio::test]
    async fn echoed_key_is_redacted_and_unauthorized_not_retried() {
        let mock = ChatMock::start(vec![
            Scripted::Error(
                401,
                json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "invalid_request_error", "code": "invalid_api_key"}}),
                None,
            ),
            text_reply("must not be reached", "stop"),
        ])
        .await;
        let config = config(&mock.uri).with_api_key(KEY);
        assert!(!format!("{config:?}").contains(KEY));
        let m = OpenAiModel::new(config).unwrap();
        assert!(!format!("{m:?}").contains(KEY));
        let (out, seen) = send(&m, request("hi")).await;
        assert_unauthorized_redacted(&out.unwrap_err(), &seen, KEY);
        assert_eq!(mock.requests().len(), 1);
    }

    #[tokio::test]
    async fn unreachable_server_is_a_connect_error() {
        let uri = format!("{}/v1", refused_uri());
        let config = config(&uri).with_api_key(KEY);
        let m = OpenAiModel::new(config.with_retry(RetryPolicy::none())).unwrap();
        let err = send(&m, request("hi")).await.0.unwrap_err();
        assert_refused(&err, &uri);
        assert!(err.is_transient());
        assert_key_hidden(&err, KEY);
    }
}

/// `RecordingModel` and `ReplayModel` around a scripted in-test model.
mod record_replay {
    use async_trait::async_trait;
    use cadre_model::{
        ContentBlock, EventSink, Message, Model, ModelError, ModelEvent, RecordingModel,
        ReplayModel, Request, RequestOrigin, Response, Role, StopReason, SystemBlock,
        ToolDefinition, Usage,
    };
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// Answers from the request alone: a user prompt gets a `read_file` call (plus some
    /// text), a tool result gets a final answer. Counts calls; fails on the prompt "fail".
    #[derive(Default)]
    struct Scripted {
        calls: AtomicUsize,
    }

    #[async_trait]
    impl Model for Scripted {
        fn provider(&self) -> &str {
            "scripted"
        }

        async fn send(
            &self,
            request: Request,
            events: EventSink<'_>,
        ) -> Result<Response, ModelError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let agent = request.origin.clone().unwrap_or_default().agent_type;
            let last = request.messages.last().unwrap();
            // Let concurrent agents interleave.
            tokio::task::yield_now().await;
            let result = last.content.iter().find_map(|b| match b {
                ContentBlock::ToolResult(r) => Some(cadre_model::join_text(&r.content)),
                _ => None,
            });
            let (content, stop) = match result {
                Some(result) => (
                    vec![ContentBlock::text(format!("{agent} is done: {result}"))],
                    StopReason::EndTurn,
                ),
                None if last.text() == "fail" => {
                    return Err(ModelError::Api {
                        status: 400,
                        kind: "invalid_request_error".into(),
                        message: "scripted failure".into(),
                        retry_after: None,
                    })
                }
                None if last.text().starts_with("dup") => (
                    vec![ContentBlock::text(format!("answer #{n}"))],
                    StopReason::EndTurn,
                ),
                None => (
                    vec![
                        ContentBlock::text(format!("{agent} reads.")),
                        ContentBlock::tool_use(
                            format!("toolu_{agent}_{}", request.messages.len()),
                            "read_file",
                            json!({"path": last.text(), "limit": 2.5}),
                        ),
                    ],
                    StopReason::ToolUse,
                ),
            };
            for block in &content {
                match block {
                    ContentBlock::Text(t) => events(ModelEvent::TextDelta(t.text.clone())),
                    ContentBlock::ToolUse(t) => events(ModelEvent::ToolUseStart {
                        id: t.id.clone(),
                        name: t.name.clone(),
                    }),
                    _ => {}
                }
            }
            Ok(Response {
                id: format!("msg_{n}"),
                model: request.model.clone(),
                role: Role::Assistant,
                content,
                stop_reason: Some(stop),
                stop_sequence: None,
                usage: Usage {
                    input_tokens: 10 * n as u64,
                    output_tokens: n as u64,
                    ..Usage::default()
                },
            })
        }
    }

    /// How one agent of the test conversation is set up.
    #[derive(Clone)]
    struct Agent {
        path: &'static str,
        agent_type: &'static str,
        prompt: &'static str,
        system: String,
        caching: bool,
        description: &'static str,
    }

    fn agent(path: &'static str, agent_type: &'static str, prompt: &'static str) -> Agent {
        Agent {
            path,
            agent_type,
            prompt,
            system: format!("You are the {agent_type} agent.\nBe brief."),
            caching: false,
            description: "Reads a file.",
        }
    }

    fn request(a: &Agent, messages: Vec<Message>) -> Request {
        let mut r = Request::new("claude-sonnet-5-5", 1024, messages);
        r.system = vec![SystemBlock::text(&a.system)];
        r.tools = vec![ToolDefinition {
            name: "read_file".into(),
            description: a.description.into(),
            input_schema: json!({"type": "object"}),
            cache_control: None,
        }];
        if a.caching {
            r.apply_prompt_caching();
        }
        r.origin = Some(RequestOrigin {
            path: a.path.into(),
            agent_type: a.agent_type.into(),
        });
        r
    }

    /// Runs an agent loop: prompt, tool calls answered, until the model ends its turn.
    async fn run(
        model: &dyn Model,
        a: &Agent,
    ) -> Result<(Vec<Response>, Vec<ModelEvent>), ModelError> {
        let seen = Mutex::new(Vec::new());
        let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
        let mut history = vec![Message::user_text(a.prompt)];
        let mut out = Vec::new();
        loop {
            let resp = model.send(request(a, history.clone()), &sink).await?;
            history.push(resp.to_message());
            let results: Vec<ContentBlock> = resp
                .tool_uses()
                .map(|t| {
                    ContentBlock::tool_result(
                        &t.id,
                        format!("contents of {}", t.input["path"]),
                        false,
                    )
                })
                .collect();
            let stop = resp.stop_reason.clone();
            out.push(resp);
            if stop != Some(StopReason::ToolUse) {
                break;
            }
            history.push(Message::new(Role::User, results));
        }
        Ok((out, seen.into_inner().unwrap()))
    }

    fn main_agent() -> Agent {
        agent("main", "main", "src/lib.rs")
    }

    fn explore_agent() -> Agent {
        agent("main/explore#1", "explore", "Cargo.toml")
    }

    type Runs = Vec<(Vec<Response>, Vec<ModelEvent>)>;

    /// Records the two-agent conversation (concurrently) to a fresh cassette.
    async fn record(dir: &tempfile::TempDir) -> (std::path::PathBuf, Runs) {
        let path = dir.path().join("run.cassette.jsonl");
        let inner = Arc::new(Scripted::default());
        let rec = RecordingModel::create(&path, inner.clone()).unwrap();
        let (main, explore) = (main_agent(), explore_agent());
        let (m, e) = tokio::join!(run(&rec, &main), run(&rec, &explore));
        assert_eq!(rec.recorded(), 4);
        assert_eq!(inner.calls.load(Ordering::SeqCst), 4);
        (path, vec![m.unwrap(), e.unwrap()])
    }

    #[tokio::test]
    async fn replays_identically_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        let (path, live) = record(&dir).await;

        // The file: a header, then one whole exchange per line.
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0]["cadre_cassette"], 1);
        assert!(lines[0]["created_by"]
            .as_str()
            .unwrap()
            .starts_with("cadre "));
        for line in &lines[1..] {
            assert_eq!(line["key"].as_str().unwrap().len(), 64);
            assert!(["main", "main/explore#1"].contains(&line["agent"].as_str().unwrap()));
            assert_eq!(line["request"]["tool_names"], json!(["read_file"]));
            assert_eq!(line["request"]["tools"][0]["description"], "Reads a file.");
            assert!(line["request"]["system"][0]["text"].is_string());
            assert!(line["response"]["content"].is_array());
        }

        // Reversed, one after the other.
        let replay = ReplayModel::open(&path).unwrap();
        assert_eq!(replay.len(), 4);
        let e = run(&replay, &explore_agent()).await.unwrap();
        let m = run(&replay, &main_agent()).await.unwrap();
        assert_eq!(vec![m, e], live);
        assert_eq!(replay.remaining(), 0);
        assert_eq!(replay.provider(), "replay");

        // Concurrently, with prompt caching on (cache_control must not matter).
        let replay = ReplayModel::open(&path).unwrap();
        let (mut main, mut explore) = (main_agent(), explore_agent());
        main.caching = true;
        explore.caching = true;
        let (e, m) = tokio::join!(run(&replay, &explore), run(&replay, &main));
        assert_eq!(vec![m.unwrap(), e.unwrap()], live);
        assert_eq!(replay.remaining(), 0);
    }

    #[tokio::test]
    async fn a_changed_system_prompt_fails_with_a_diff() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = record(&dir).await;
        let replay = ReplayModel::open(&path).unwrap();
        let mut explore = explore_agent();
        explore.system = "You are the explore agent.\nBe thorough.".into();
        let err = run(&replay, &explore).await.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ModelError::Replay(_)), "{err:?}");
        assert!(!err.is_transient());
        assert!(msg.contains("main/explore#1"), "{msg}");
        assert!(msg.contains("system prompt"), "{msg}");
        assert!(msg.contains("\n-Be brief.\n"), "{msg}");
        assert!(msg.contains("\n+Be thorough.\n"), "{msg}");
        // A failed check serves nothing.
        assert_eq!(replay.remaining(), 4);

        let mut main = main_agent();
        main.description = "Reads a text file.";
        let err = run(&replay, &main).await.unwrap_err().to_string();
        assert!(err.contains("agent main (type \"main\")"), "{err}");
        assert!(err.contains("definition of tool \"read_file\""), "{err}");
        assert!(
            err.contains("+  \"description\": \"Reads a text file.\""),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_unknown_request_fails_naming_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = record(&dir).await;
        let replay = ReplayModel::open(&path).unwrap();
        let err = run(&replay, &agent("main/explore#2", "explore", "build.rs"))
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Replay(_)));
        let msg = err.to_string();
        assert!(msg.contains("main/explore#2"), "{msg}");
        assert!(msg.contains("type \"explore\""), "{msg}");
        assert!(msg.contains("(1 message)"), "{msg}");
        assert!(msg.contains("from agent main/explore#1"), "{msg}");
        assert!(msg.contains("\n-    Cargo.toml\n"), "{msg}");
        assert!(msg.contains("\n+    build.rs\n"), "{msg}");

        let err = run(&replay, &agent("main/plan#1", "plan", "x"))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("main/plan#1"), "{err}");
        assert!(
            err.contains("no request from an agent of type \"plan\""),
            "{err}"
        );
        assert!(err.contains("explore, main"), "{err}");
    }

    #[tokio::test]
    async fn a_truncated_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (path, live) = record(&dir).await;
        let text = std::fs::read_to_string(&path).unwrap();
        // Simulate a crash in the middle of writing the last exchange.
        std::fs::write(&path, &text[..text.len() - 30]).unwrap();
        let replay = ReplayModel::open(&path).unwrap();
        assert_eq!(replay.truncated_tail(), Some(5));
        assert_eq!(replay.len(), 3);
        // Which agent's exchange was last depends on the recording's interleaving; one of
        // the two agents still replays in full, the other fails at its lost exchange.
        let m = run(&replay, &main_agent()).await;
        let e = run(&replay, &explore_agent()).await;
        let ok = [m.is_ok(), e.is_ok()];
        assert_eq!(ok.iter().filter(|x| **x).count(), 1, "{m:?} {e:?}");
        if let Ok(m) = m {
            assert_eq!(m, live[0]);
        }
        if let Ok(e) = e {
            assert_eq!(e, live[1]);
        }

        // A broken line that is not the last one is an error naming the line.
        let mut lines: Vec<&str> = text.lines().collect();
        lines[2] = "{\"key\": ";
        std::fs::write(&path, lines.join("\n")).unwrap();
        let err = ReplayModel::open(&path).unwrap_err().to_string();
        assert!(err.contains("unreadable line 3"), "{err}");
    }

    #[tokio::test]
    async fn duplicates_are_served_in_order_and_failures_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dup.jsonl");
        let rec = RecordingModel::create(&path, Arc::new(Scripted::default())).unwrap();
        let one = agent("main/explore#1", "explore", "dup");
        let two = agent("main/explore#2", "explore", "dup");
        let first = run(&rec, &one).await.unwrap().0;
        let second = run(&rec, &two).await.unwrap().0;
        assert_eq!(first[0].text(), "answer #1");
        assert_eq!(second[0].text(), "answer #2");
        let err = run(&rec, &agent("main", "main", "fail")).await.unwrap_err();
        assert!(matches!(err, ModelError::Api { status: 400, .. }));
        assert_eq!(rec.recorded(), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);

        let replay = ReplayModel::open(&path).unwrap();
        // The second agent asks first; it still gets the first recorded answer.
        assert_eq!(run(&replay, &two).await.unwrap().0, first);
        assert_eq!(run(&replay, &one).await.unwrap().0, second);
        let err = run(&replay, &one).await.unwrap_err().to_string();
        assert!(err.contains("already served"), "{err}");
        assert!(err.contains("main/explore#1"), "{err}");
        let err = run(&replay, &agent("main", "main", "fail"))
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Replay(_)), "{err:?}");
    }
}

/// `Model::context_window` of `OpenAiModel` against the `cadre-testkit` mock's `/v1/models`
/// and `/props`.
mod context_window {
    use super::refused_uri;
    use cadre_model::{Model, OpenAiConfig, OpenAiModel, RecordingModel};
    use cadre_testkit::MockServer;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const KEY: &str = "sk-openai-window-SECRET-0099";

    fn model(server: &MockServer) -> OpenAiModel {
        let config = OpenAiConfig::new()
            .with_base_url(format!("{}/v1", server.uri()))
            .with_api_key(KEY);
        OpenAiModel::new(config).unwrap()
    }

    fn paths(server: &MockServer) -> Vec<String> {
        server.info_requests().into_iter().map(|r| r.path).collect()
    }

    #[tokio::test]
    async fn llama_cpp_props_n_ctx_is_reported() {
        let server = MockServer::start().await;
        // llama.cpp lists its model without a context length (n_ctx_train is the trained
        // maximum, not what the server was started with), so `/props` decides.
        server.set_models(json!({"object": "list", "data": [
            {"id": "qwen.gguf", "object": "model", "meta": {"n_ctx_train": 131072}}
        ]}));
        server.set_props(json!({
            "default_generation_settings": {"n_ctx": 8192, "params": {}},
            "total_slots": 1
        }));
        let m = model(&server);
        assert_eq!(m.context_window("qwen.gguf").await, Some(8192));
        assert_eq!(paths(&server), ["/v1/models", "/props"]);
        let auth = format!("Bearer {KEY}");
        for r in server.info_requests() {
            assert_eq!(r.header("authorization"), Some(auth.as_str()), "{}", r.path);
        }
    }

    #[tokio::test]
    async fn top_level_n_ctx_is_reported() {
        let server = MockServer::start().await;
        server.set_props(json!({"n_ctx": 4096}));
        assert_eq!(model(&server).context_window("m").await, Some(4096));
    }

    #[tokio::test]
    async fn vllm_max_model_len_for_the_matching_id() {
        let server = MockServer::start().await;
        server.set_models(json!({"object": "list", "data": [
            {"id": "meta-llama/Llama-3.1-8B", "object": "model", "max_model_len": 131072},
            {"id": "Qwen/Qwen3-32B", "object": "model", "max_model_len": 32768}
        ]}));
        server.set_props(json!({"n_ctx": 1}));
        let m = model(&server);
        assert_eq!(m.context_window("Qwen/Qwen3-32B").await, Some(32768));
        // Found in the list: `/props` is never asked.
        assert_eq!(paths(&server), ["/v1/models"]);
    }

    #[tokio::test]
    async fn openrouter_and_lm_studio_fields() {
        let server = MockServer::start().await;
        server.set_models(json!({"data": [
            {"id": "openai/gpt-4o", "context_length": 128000},
            {"id": "local-model", "max_context_length": 65536}
        ]}));
        let m = model(&server);
        assert_eq!(m.context_window("openai/gpt-4o").await, Some(128000));
        assert_eq!(m.context_window("local-model").await, Some(65536));
    }

    #[tokio::test]
    async fn the_only_listed_model_stands_for_any_id() {
        let server = MockServer::start().await;
        server.set_models(json!({"data": [{"id": "served-name", "max_model_len": 16384}]}));
        assert_eq!(model(&server).context_window("my-alias").await, Some(16384));
    }

    #[tokio::test]
    async fn no_window_when_both_answer_404() {
        let server = MockServer::start().await;
        let m = model(&server);
        assert_eq!(m.context_window("gpt-test").await, None);
        assert_eq!(paths(&server), ["/v1/models", "/props"]);
        // "Unknown" is an answer too: not asked again.
        assert_eq!(m.context_window("gpt-test").await, None);
        assert_eq!(paths(&server).len(), 2);
    }

    #[tokio::test]
    async fn unusable_answers_give_none() {
        let server = MockServer::start().await;
        server.set_models(json!({"data": [{"id": "a"}, {"id": "b", "max_model_len": "lots"}]}));
        server.set_props(json!({"default_generation_settings": {"n_ctx": 0}}));
        assert_eq!(model(&server).context_window("b").await, None);
    }

    #[tokio::test]
    async fn unreachable_server_gives_none() {
        let config = OpenAiConfig::new().with_base_url(format!("{}/v1", refused_uri()));
        let m = OpenAiModel::new(config).unwrap();
        assert_eq!(m.context_window("m").await, None);
    }

    #[tokio::test]
    async fn silent_server_gives_none_after_the_short_timeout() {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let holder = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let m = OpenAiModel::new(OpenAiConfig::new().with_base_url(format!("http://{addr}/v1")))
            .unwrap();
        let start = Instant::now();
        assert_eq!(m.context_window("m").await, None);
        let took = start.elapsed();
        // One 5 s limit for both endpoints, not the chat requests' ten minutes.
        assert!(took >= Duration::from_secs(5), "{took:?}");
        assert!(took < Duration::from_secs(9), "{took:?}");
        holder.abort();
    }

    #[tokio::test]
    async fn asked_twice_the_server_sees_one_request() {
        let server = MockServer::start().await;
        server.set_models(json!({"data": [
            {"id": "a", "max_model_len": 1000},
            {"id": "b", "max_model_len": 2000}
        ]}));
        let m = model(&server);
        assert_eq!(m.context_window("a").await, Some(1000));
        assert_eq!(m.context_window("a").await, Some(1000));
        assert_eq!(paths(&server), ["/v1/models"]);
        // Callers asking at once share one request too.
        let (x, y) = tokio::join!(m.context_window("b"), m.context_window("b"));
        assert_eq!((x, y), (Some(2000), Some(2000)));
        assert_eq!(paths(&server), ["/v1/models", "/v1/models"]);
    }

    #[tokio::test]
    async fn recording_model_passes_the_question_on() {
        let server = MockServer::start().await;
        server.set_props(json!({"default_generation_settings": {"n_ctx": 2048}}));
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Model> = Arc::new(model(&server));
        let rec = RecordingModel::create(dir.path().join("c.jsonl"), inner).unwrap();
        assert_eq!(rec.context_window("m").await, Some(2048));
    }
}

/// Randomised input tests (proptest): whatever arrives, every entry point returns `Ok` or an
/// error that says something, never panics and never hangs.
///
/// Each property runs proptest's default number of cases (`PROPTEST_CASES`, else 256) and
/// prints how many ran; [`http_bodies`] runs an eighth of that (each case is two HTTP round
/// trips). A longer run: `PROPTEST_CASES=5000 cargo test --release -p cadre-model fuzz`.
mod fuzz {
    use super::LocalServer;
    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{header, StatusCode};
    use axum::routing::post;
    use axum::Router;
    use cadre_model::sse::StreamAssembler;
    use cadre_model::{
        AnthropicConfig, AnthropicModel, CacheControl, Cassette, CassetteHeader, ContentBlock,
        Exchange, ImageBlock, Message, Model, ModelError, ModelEvent, OpenAiConfig, OpenAiModel,
        RedactedThinkingBlock, Request, RequestOrigin, Response, RetryPolicy, Role, StopReason,
        TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage,
    };
    use eventsource_stream::{EventStreamError, Eventsource};
    use futures::StreamExt;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    use serde_json::{json, Map, Value};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    // -----------------------------------------------------------------------------------
    // Running properties.

    /// Proptest's default case count: `PROPTEST_CASES` when set, else 256.
    fn default_cases() -> u32 {
        Config::default().cases
    }

    /// Runs `test` on `cases` inputs from `strategy`, prints how many ran and how long it
    /// took, and fails with the shrunk input if any case fails or panics.
    fn check<S: Strategy>(
        name: &str,
        cases: u32,
        strategy: S,
        test: impl Fn(S::Value) -> Result<(), TestCaseError>,
    ) {
        let config = Config {
            cases,
            // Failures print the shrunk input; no regression files in the source tree.
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        let ran = AtomicU32::new(0);
        let started = Instant::now();
        let result = runner.run(&strategy, |value| {
            ran.fetch_add(1, Ordering::Relaxed);
            test(value)
        });
        eprintln!(
            "fuzz::{name}: {} cases in {:.2?}",
            ran.load(Ordering::Relaxed),
            started.elapsed()
        );
        if let Err(e) = result {
            panic!("fuzz::{name} failed: {e}");
        }
    }

    /// An error is clear when its message, and the detail it carries, are not blank and
    /// it does not hide its cause.
    fn clear(err: &ModelError) -> Result<(), TestCaseError> {
        let shown = err.to_string();
        prop_assert!(!shown.trim().is_empty(), "blank error: {err:?}");
        let detail: Vec<&str> = match err {
            ModelError::Api { kind, message, .. } => vec![kind, message],
            ModelError::StreamError { kind, message } => vec![kind, message],
            ModelError::Connect { reason, .. } => vec![reason],
            ModelError::Protocol(m)
            | ModelError::Config(m)
            | ModelError::Replay(m)
            | ModelError::Record(m) => vec![m],
            ModelError::Idle(_) => vec![],
            ModelError::RetriesExhausted { last, .. } => return clear(last),
        };
        for d in detail {
            prop_assert!(
                !d.trim().is_empty(),
                "an error with a blank detail: {err:?}"
            );
        }
        // serde's untagged enums hide the real cause behind "did not match any variant".
        prop_assert!(
            !shown.contains("untagged enum"),
            "an error hiding its cause: {shown}"
        );
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Strategies: strings, JSON, wire types.

    /// Short strings of any characters (control characters, newlines and astral ones too).
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "(?s).{0,12}",
            1 => "[a-z_]{0,10}",
            1 => "[\\x00-\\x1f\"\\\\\u{2028}\u{feff}\u{1F600}]{0,6}",
        ]
    }

    /// Words the Messages API uses, so random objects reach past the first check.
    const WORDS: &[&str] = &[
        "type",
        "index",
        "delta",
        "content_block",
        "message",
        "usage",
        "error",
        "text",
        "thinking",
        "signature",
        "partial_json",
        "citation",
        "citations",
        "id",
        "name",
        "input",
        "data",
        "source",
        "content",
        "tool_use_id",
        "is_error",
        "cache_control",
        "role",
        "model",
        "stop_reason",
        "stop_sequence",
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "ttl",
        "ephemeral",
        "tool_use",
        "tool_result",
        "redacted_thinking",
        "image",
        "server_tool_use",
        "user",
        "assistant",
        "end_turn",
        "text_delta",
        "thinking_delta",
        "signature_delta",
        "input_json_delta",
        "citations_delta",
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "overloaded_error",
        "",
    ];

    fn word() -> impl Strategy<Value = String> {
        prop::sample::select(WORDS).prop_map(str::to_owned)
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![3 => word(), 1 => text()]
    }

    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => (0u64..4).prop_map(Value::from),
            1 => any::<i64>().prop_map(Value::from),
            1 => any::<u64>().prop_map(Value::from),
            1 => any::<f64>().prop_map(|f| {
                serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
            }),
            1 => Just(json!(-1)),
            1 => Just(json!(u64::MAX)),
            1 => Just(json!(1.5)),
        ]
    }

    /// Any JSON value, at most four levels deep, with words of the API for keys and strings.
    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            1 => Just(Value::Null),
            1 => any::<bool>().prop_map(Value::Bool),
            2 => number(),
            2 => text().prop_map(Value::String),
            2 => word().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_object() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map(key(), arb_json(), 0..4).prop_map(|m| m.into_iter().collect())
    }

    /// Fields a struct does not model; prefixed so they never shadow a modelled field.
    fn extra() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map("x_[a-z]{0,6}", arb_json(), 0..2)
            .prop_map(|m| m.into_iter().collect())
    }

    fn cache_control() -> impl Strategy<Value = Option<CacheControl>> {
        prop::option::of(
            prop::option::of(prop::sample::select(&["5m", "1h"][..])).prop_map(|ttl| {
                CacheControl {
                    kind: "ephemeral".into(),
                    ttl: ttl.map(str::to_owned),
                }
            }),
        )
    }

    /// A block of every kind but `tool_result`.
    fn simple_block() -> impl Strategy<Value = ContentBlock> {
        prop_oneof![
            (text(), cache_control(), extra()).prop_map(|(text, cache_control, extra)| {
                ContentBlock::Text(TextBlock {
                    text,
                    cache_control,
                    extra,
                })
            }),
            (text(), text(), arb_json(), cache_control(), extra()).prop_map(
                |(id, name, input, cache_control, extra)| {
                    ContentBlock::ToolUse(ToolUseBlock {
                        id,
                        name,
                        input,
                        cache_control,
                        invalid_input: None,
                        extra,
                    })
                }
            ),
            (text(), text(), extra()).prop_map(|(thinking, signature, extra)| {
                ContentBlock::Thinking(ThinkingBlock {
                    thinking,
                    signature,
                    extra,
                })
            }),
            (text(), extra()).prop_map(|(data, extra)| {
                ContentBlock::RedactedThinking(RedactedThinkingBlock { data, extra })
            }),
            (arb_json(), cache_control(), extra()).prop_map(|(source, cache_control, extra)| {
                ContentBlock::Image(ImageBlock {
                    source,
                    cache_control,
                    extra,
                })
            }),
            (
                prop_oneof![
                    Just("server_tool_use".to_owned()),
                    Just("document".to_owned()),
                    "x_[a-z]{0,8}"
                ],
                arb_object()
            )
                .prop_map(|(kind, mut obj)| {
                    obj.insert("type".into(), Value::String(kind));
                    ContentBlock::Unknown(Value::Object(obj))
                }),
        ]
    }

    /// Any block, `tool_result` (holding simple blocks) included.
    fn block() -> impl Strategy<Value = ContentBlock> {
        prop_oneof![
            4 => simple_block(),
            1 => (
                text(),
                prop::collection::vec(simple_block(), 0..3),
                any::<bool>(),
                cache_control(),
                extra()
            )
                .prop_map(|(tool_use_id, content, is_error, cache_control, extra)| {
                    ContentBlock::ToolResult(ToolResultBlock {
                        tool_use_id,
                        content,
                        is_error,
                        cache_control,
                        extra,
                    })
                }),
        ]
    }

    fn role() -> impl Strategy<Value = Role> {
        prop_oneof![Just(Role::User), Just(Role::Assistant)]
    }

    fn message() -> impl Strategy<Value = Message> {
        (role(), prop::collection::vec(block(), 0..4))
            .prop_map(|(role, content)| Message::new(role, content))
    }

    fn stop_reason() -> impl Strategy<Value = StopReason> {
        prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::ToolUse),
            Just(StopReason::MaxTokens),
            Just(StopReason::StopSequence),
            Just(StopReason::PauseTurn),
            Just(StopReason::Refusal),
            Just(StopReason::ModelContextWindowExceeded),
            // `Other` only ever holds a spelling `parse` does not know.
            text().prop_map(|s| StopReason::parse(&s)),
        ]
    }

    fn usage() -> impl Strategy<Value = Usage> {
        (any::<u64>(), any::<u64>(), 0u64..1 << 40, 0u64..1 << 40).prop_map(|(a, b, c, d)| Usage {
            input_tokens: a,
            output_tokens: b,
            cache_creation_input_tokens: c,
            cache_read_input_tokens: d,
            ..Default::default()
        })
    }

    fn response() -> impl Strategy<Value = Response> {
        (
            text(),
            text(),
            role(),
            prop::collection::vec(block(), 0..4),
            prop::option::of(stop_reason()),
            prop::option::of(text()),
            usage(),
        )
            .prop_map(
                |(id, model, role, content, stop_reason, stop_sequence, usage)| Response {
                    id,
                    model,
                    role,
                    content,
                    stop_reason,
                    stop_sequence,
                    usage,
                },
            )
    }

    /// One random edit somewhere in a JSON tree.
    #[derive(Debug, Clone)]
    enum Edit {
        /// Remove the `n`th node (a key of its object, an item of its array).
        Remove(usize),
        /// Replace the `n`th node.
        Replace(usize, Value),
        /// Give the `n`th node (if an object) one more key.
        Add(usize, String, Value),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            any::<usize>().prop_map(Edit::Remove),
            (any::<usize>(), arb_json()).prop_map(|(n, v)| Edit::Replace(n, v)),
            (any::<usize>(), key(), arb_json()).prop_map(|(n, k, v)| Edit::Add(n, k, v)),
        ]
    }

    /// The JSON pointers of every node of `v`, in pre-order.
    fn pointers(v: &Value, here: String, out: &mut Vec<String>) {
        out.push(here.clone());
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    pointers(item, format!("{here}/{i}"), out);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let k = k.replace('~', "~0").replace('/', "~1");
                    pointers(item, format!("{here}/{k}"), out);
                }
            }
            _ => {}
        }
    }

    fn apply_edit(v: &mut Value, edit: &Edit) {
        let mut all = Vec::new();
        pointers(v, String::new(), &mut all);
        let pick = |n: usize| all[n % all.len()].clone();
        match edit {
            Edit::Replace(n, new) => {
                if let Some(node) = v.pointer_mut(&pick(*n)) {
                    *node = new.clone();
                }
            }
            Edit::Add(n, k, new) => {
                if let Some(Value::Object(map)) = v.pointer_mut(&pick(*n)) {
                    map.insert(k.clone(), new.clone());
                }
            }
            Edit::Remove(n) => {
                let at = pick(*n);
                let Some(cut) = at.rfind('/') else { return };
                let last = at[cut + 1..].replace("~1", "/").replace("~0", "~");
                match v.pointer_mut(&at[..cut]) {
                    Some(Value::Object(map)) => {
                        map.remove(&last);
                    }
                    Some(Value::Array(items)) => {
                        if let Ok(i) = last.parse::<usize>() {
                            if i < items.len() {
                                items.remove(i);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// A valid value's JSON with a few random edits: mostly almost valid.
    fn mutated<T: serde::Serialize + std::fmt::Debug>(
        valid: impl Strategy<Value = T>,
    ) -> impl Strategy<Value = Value> {
        (valid, prop::collection::vec(edit(), 0..4)).prop_map(|(v, edits)| {
            let mut json = serde_json::to_value(&v).unwrap();
            for e in &edits {
                apply_edit(&mut json, e);
            }
            json
        })
    }

    // -----------------------------------------------------------------------------------
    // 2. Wire types.

    /// Anything that decodes encodes back to JSON that decodes to an equal value; anything
    /// that does not gets a clear error. Returns whether `input` decoded.
    fn round_trips<T>(input: &Value) -> Result<bool, TestCaseError>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let from_text = serde_json::from_str::<T>(&input.to_string());
        match serde_json::from_value::<T>(input.clone()) {
            Ok(v) => {
                prop_assert!(from_text.is_ok(), "from_value and from_str disagree");
                let text =
                    serde_json::to_string(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let back: T = serde_json::from_str(&text)
                    .map_err(|e| TestCaseError::fail(format!("{text} does not decode: {e}")))?;
                prop_assert_eq!(&back, &v, "round trip through {}", text);
                let again =
                    serde_json::to_string(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(again, text, "encoding is not stable");
                Ok(true)
            }
            Err(e) => {
                prop_assert!(from_text.is_err(), "from_value and from_str disagree");
                let shown = e.to_string();
                prop_assert!(!shown.trim().is_empty());
                prop_assert!(
                    !shown.contains("untagged enum"),
                    "an error hiding its cause: {shown}"
                );
                Ok(false)
            }
        }
    }

    #[test]
    fn wire_types_round_trip() {
        check(
            "wire_types_round_trip",
            default_cases(),
            (block(), message(), response()),
            |(b, m, r)| {
                prop_assert!(round_trips::<ContentBlock>(
                    &serde_json::to_value(&b).unwrap()
                )?);
                prop_assert!(round_trips::<Message>(&serde_json::to_value(&m).unwrap())?);
                prop_assert!(round_trips::<Response>(&serde_json::to_value(&r).unwrap())?);
                Ok(())
            },
        );
    }

    #[test]
    fn wire_types_from_arbitrary_json() {
        let decoded = AtomicU32::new(0);
        check(
            "wire_types_from_arbitrary_json",
            default_cases(),
            prop_oneof![
                1 => arb_json(),
                3 => mutated(block()),
                3 => mutated(message()),
                3 => mutated(response()),
            ],
            |v| {
                let mut any = false;
                any |= round_trips::<ContentBlock>(&v)?;
                any |= round_trips::<Message>(&v)?;
                any |= round_trips::<Response>(&v)?;
                any |= round_trips::<Vec<ContentBlock>>(&v)?;
                if any {
                    decoded.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            },
        );
        eprintln!(
            "fuzz::wire_types_from_arbitrary_json: {} inputs decoded as some wire type",
            decoded.load(Ordering::Relaxed)
        );
    }

    // -----------------------------------------------------------------------------------
    // 3. Cassettes.

    fn exchange() -> impl Strategy<Value = Exchange> {
        (
            "[a-z#/]{0,10}",
            "[a-z]{0,6}",
            prop::collection::vec(message(), 1..3),
            response(),
        )
            .prop_map(|(path, agent_type, messages, response)| {
                let mut request = Request::new("claude-test", 64, messages);
                request.origin = Some(RequestOrigin { path, agent_type });
                Exchange::new(&request, response)
            })
    }

    #[derive(Debug, Clone)]
    enum TextEdit {
        Truncate(usize),
        Flip(usize, u8),
        DuplicateLine(usize),
        DeleteLine(usize),
        SwapLines(usize, usize),
        InsertLine(usize, String),
    }

    fn text_edit() -> impl Strategy<Value = TextEdit> {
        prop_oneof![
            any::<usize>().prop_map(TextEdit::Truncate),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| TextEdit::Flip(i, b)),
            any::<usize>().prop_map(TextEdit::DuplicateLine),
            any::<usize>().prop_map(TextEdit::DeleteLine),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TextEdit::SwapLines(a, b)),
            (
                any::<usize>(),
                prop_oneof![text(), arb_json().prop_map(|v| v.to_string())]
            )
                .prop_map(|(i, l)| TextEdit::InsertLine(i, l)),
        ]
    }

    fn apply_text_edit(text: &str, edit: &TextEdit) -> String {
        let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
        let n = lines.len();
        match edit {
            TextEdit::Truncate(at) => {
                let bytes = text.as_bytes();
                return String::from_utf8_lossy(&bytes[..at % (bytes.len() + 1)]).into_owned();
            }
            TextEdit::Flip(at, b) => {
                let mut bytes = text.as_bytes().to_vec();
                if !bytes.is_empty() {
                    let i = at % bytes.len();
                    bytes[i] ^= b | 1;
                }
                return String::from_utf8_lossy(&bytes).into_owned();
            }
            TextEdit::DuplicateLine(i) => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
            }
            TextEdit::DeleteLine(i) => {
                lines.remove(i % n);
            }
            TextEdit::SwapLines(a, b) => lines.swap(a % n, b % n),
            TextEdit::InsertLine(i, line) => lines.insert(i % (n + 1), line.clone()),
        }
        lines.join("\n")
    }

    /// `Cassette::parse` gives `Ok` or a clear `Replay` error naming the file; whatever it
    /// accepts writes back to text it reads as the same cassette.
    fn parses_cleanly(text: &str) -> Result<Option<Cassette>, TestCaseError> {
        match Cassette::parse(text, "fuzz.jsonl") {
            Ok(c) => {
                let again = c
                    .to_jsonl()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let back = Cassette::parse(&again, "again.jsonl")
                    .map_err(|e| TestCaseError::fail(format!("re-parse failed: {e}")))?;
                prop_assert_eq!(&back.header, &c.header);
                prop_assert_eq!(&back.exchanges, &c.exchanges);
                prop_assert_eq!(back.truncated_tail, None);
                Ok(Some(c))
            }
            Err(e) => {
                clear(&e)?;
                prop_assert!(matches!(e, ModelError::Replay(_)), "{e:?}");
                prop_assert!(e.to_string().contains("fuzz.jsonl"), "{e}");
                Ok(None)
            }
        }
    }

    #[test]
    fn cassette_parse_arbitrary_text() {
        let lines = prop_oneof![
            2 => text(),
            2 => arb_json().prop_map(|v| v.to_string()),
            1 => Just(r#"{"cadre_cassette":1,"created_by":"fuzz"}"#.to_owned()),
            1 => exchange().prop_map(|e| serde_json::to_string(&e).unwrap()),
        ];
        check(
            "cassette_parse_arbitrary_text",
            default_cases(),
            prop_oneof![
                "(?s).{0,200}",
                prop::collection::vec(lines, 0..5).prop_map(|l| l.join("\n")),
            ],
            |text| parses_cleanly(&text).map(|_| ()),
        );
    }

    #[test]
    fn cassette_parse_mutated() {
        check(
            "cassette_parse_mutated",
            default_cases(),
            (
                prop::collection::vec(exchange(), 0..3),
                prop::collection::vec(text_edit(), 0..4),
            ),
            |(exchanges, edits)| {
                let cassette = Cassette {
                    header: CassetteHeader::default(),
                    exchanges,
                    truncated_tail: None,
                };
                let valid = cassette.to_jsonl().unwrap();
                let parsed = parses_cleanly(&valid)?;
                prop_assert_eq!(parsed.as_ref(), Some(&cassette));
                let mut text = valid;
                for e in &edits {
                    text = apply_text_edit(&text, e);
                }
                parses_cleanly(&text).map(|_| ())
            },
        );
    }

    // -----------------------------------------------------------------------------------
    // 1. Stream assembly.

    const EVENT_NAMES: &[&str] = &[
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
        "message",
        "",
    ];
    const DELTA_TYPES: &[&str] = &[
        "text_delta",
        "thinking_delta",
        "signature_delta",
        "input_json_delta",
        "citations_delta",
        "brand_new_delta",
    ];
    const BLOCK_TYPES: &[&str] = &[
        "text",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "server_tool_use",
        "image",
        "tool_result",
        "web_search_tool_result",
    ];

    fn index() -> impl Strategy<Value = Value> {
        prop_oneof![6 => (0u64..3).prop_map(Value::from), 1 => number(), 1 => arb_json()]
    }

    /// A JSON field that is usually a string and sometimes anything.
    fn stringish() -> impl Strategy<Value = Value> {
        prop_oneof![4 => text().prop_map(Value::String), 1 => arb_json()]
    }

    /// An object holding some of `fields` (each present with a fair chance).
    fn some_of(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
        let parts: Vec<_> = fields
            .into_iter()
            .map(|(k, s)| prop::option::weighted(0.8, s).prop_map(move |v| (k, v)))
            .collect();
        (parts, prop::option::weighted(0.2, arb_object()))
            .prop_map(|(parts, junk)| {
                let mut obj = Map::new();
                for (k, v) in parts {
                    if let Some(v) = v {
                        obj.insert(k.to_owned(), v);
                    }
                }
                obj.extend(junk.unwrap_or_default());
                Value::Object(obj)
            })
            .boxed()
    }

    fn sel(words: &'static [&'static str]) -> BoxedStrategy<Value> {
        prop_oneof![
            5 => prop::sample::select(words).prop_map(|w| Value::String(w.to_owned())),
            1 => stringish(),
        ]
        .boxed()
    }

    /// The data of a stream event: mostly shaped like the real thing, with random holes.
    fn event_data(name: &'static str) -> BoxedStrategy<Value> {
        let ty = || -> BoxedStrategy<Value> {
            prop_oneof![4 => Just(Value::String(name.to_owned())), 1 => sel(EVENT_NAMES)].boxed()
        };
        let usage = || {
            some_of(vec![
                ("input_tokens", number().boxed()),
                ("output_tokens", number().boxed()),
                ("cache_read_input_tokens", number().boxed()),
                ("cache_creation_input_tokens", number().boxed()),
            ])
        };
        match name {
            "message_start" => some_of(vec![
                ("type", ty()),
                (
                    "message",
                    some_of(vec![
                        ("id", stringish().boxed()),
                        ("model", stringish().boxed()),
                        ("usage", usage()),
                    ]),
                ),
            ]),
            "content_block_start" => some_of(vec![
                ("type", ty()),
                ("index", index().boxed()),
                (
                    "content_block",
                    some_of(vec![
                        ("type", sel(BLOCK_TYPES)),
                        ("text", stringish().boxed()),
                        ("thinking", stringish().boxed()),
                        ("signature", stringish().boxed()),
                        ("data", stringish().boxed()),
                        ("id", stringish().boxed()),
                        ("name", stringish().boxed()),
                        ("input", arb_json().boxed()),
                    ]),
                ),
            ]),
            "content_block_delta" => some_of(vec![
                ("type", ty()),
                ("index", index().boxed()),
                (
                    "delta",
                    some_of(vec![
                        ("type", sel(DELTA_TYPES)),
                        ("text", stringish().boxed()),
                        ("thinking", stringish().boxed()),
                        ("signature", stringish().boxed()),
                        (
                            "partial_json",
                            prop_oneof![
                                3 => prop::sample::select(&["{", "}", "\"a\"", ":", "1", ",", "[", "]", "", " "][..])
                                    .prop_map(|s| Value::String(s.to_owned())),
                                1 => stringish(),
                            ]
                            .boxed(),
                        ),
                        ("citation", arb_json().boxed()),
                    ]),
                ),
            ]),
            "content_block_stop" => {
                some_of(vec![("type", ty()), ("index", index().boxed())])
            }
            "message_delta" => some_of(vec![
                ("type", ty()),
                (
                    "delta",
                    some_of(vec![
                        ("stop_reason", sel(&["end_turn", "tool_use", "max_tokens"])),
                        ("stop_sequence", stringish().boxed()),
                    ]),
                ),
                ("usage", usage()),
            ]),
            "error" => some_of(vec![
                ("type", ty()),
                (
                    "error",
                    some_of(vec![
                        ("type", stringish().boxed()),
                        ("message", stringish().boxed()),
                    ]),
                ),
            ]),
            _ => some_of(vec![("type", ty())]),
        }
    }

    /// One `(event name, data)` pair: well-formed-looking, arbitrary JSON, or raw text.
    fn sse_event() -> impl Strategy<Value = (String, String)> {
        let name = prop_oneof![
            6 => prop::sample::select(EVENT_NAMES).prop_map(str::to_owned),
            1 => text(),
        ];
        let shaped = prop::sample::select(EVENT_NAMES).prop_flat_map(|n| {
            let real = n.to_owned();
            (
                prop_oneof![5 => Just(real), 1 => text()],
                event_data(n).prop_map(|v| v.to_string()),
            )
        });
        prop_oneof![
            6 => shaped,
            1 => (name.clone(), arb_json().prop_map(|v| v.to_string())),
            1 => (name, prop_oneof![text(), "(?s).{0,64}"]),
        ]
    }

    #[test]
    fn stream_assembler_random_events() {
        let (pushed, assembled) = (AtomicU32::new(0), AtomicU32::new(0));
        check(
            "stream_assembler_random_events",
            default_cases(),
            prop::collection::vec(sse_event(), 0..24),
            |events| {
                let mut asm = StreamAssembler::new();
                for (name, data) in &events {
                    // Keep pushing after an error: the assembler must stay usable.
                    match asm.push(name, data, &cadre_model::ignore_events) {
                        Ok(()) => {
                            pushed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => clear(&e)?,
                    }
                }
                match asm.finish() {
                    Ok(resp) => {
                        assembled.fetch_add(1, Ordering::Relaxed);
                        prop_assert!(round_trips::<Response>(
                            &serde_json::to_value(&resp).unwrap()
                        )?);
                    }
                    Err(e) => clear(&e)?,
                }
                Ok(())
            },
        );
        eprintln!(
            "fuzz::stream_assembler_random_events: {} events accepted, {} responses assembled",
            pushed.load(Ordering::Relaxed),
            assembled.load(Ordering::Relaxed)
        );
    }

    /// A block of a valid Messages API stream.
    #[derive(Debug, Clone)]
    enum BlockSpec {
        Text(Vec<String>),
        Thinking(Vec<String>, String),
        Redacted(String),
        ToolUse(String, String, Value, Vec<usize>),
        ServerTool(String, Value, Vec<usize>),
    }

    /// A valid streamed Messages API response and how it is framed.
    #[derive(Debug, Clone)]
    struct StreamSpec {
        id: String,
        model: String,
        blocks: Vec<BlockSpec>,
        stop: &'static str,
        stop_sequence: String,
        usage: Usage,
        crlf: bool,
        pretty: bool,
        pings: bool,
    }

    fn tool_input() -> impl Strategy<Value = Value> {
        arb_object().prop_map(Value::Object)
    }

    fn block_spec() -> impl Strategy<Value = BlockSpec> {
        let pieces = || prop::collection::vec(text(), 0..5);
        let cuts = || prop::collection::vec(any::<usize>(), 0..6);
        prop_oneof![
            3 => pieces().prop_map(BlockSpec::Text),
            1 => (pieces(), text()).prop_map(|(p, s)| BlockSpec::Thinking(p, s)),
            1 => text().prop_map(BlockSpec::Redacted),
            2 => (text(), text(), tool_input(), cuts())
                .prop_map(|(id, name, input, c)| BlockSpec::ToolUse(id, name, input, c)),
            1 => (text(), tool_input(), cuts()).prop_map(|(id, input, c)| BlockSpec::ServerTool(id, input, c)),
        ]
    }

    fn stream_spec() -> impl Strategy<Value = StreamSpec> {
        (
            (text(), text(), prop::collection::vec(block_spec(), 0..5)),
            prop::sample::select(
                &[
                    "end_turn",
                    "tool_use",
                    "max_tokens",
                    "stop_sequence",
                    "pause_turn",
                    "something_new",
                ][..],
            ),
            text(),
            (0u64..1 << 32, 0u64..1 << 32, 0u64..1 << 32, 0u64..1 << 32),
            (any::<bool>(), any::<bool>(), any::<bool>()),
        )
            .prop_map(
                |(
                    (id, model, blocks),
                    stop,
                    stop_sequence,
                    (i, o, cc, cr),
                    (crlf, pretty, pings),
                )| {
                    StreamSpec {
                        id,
                        model,
                        blocks,
                        stop,
                        stop_sequence,
                        usage: Usage {
                            input_tokens: i,
                            output_tokens: o,
                            cache_creation_input_tokens: cc,
                            cache_read_input_tokens: cr,
                            ..Default::default()
                        },
                        crlf,
                        pretty,
                        pings,
                    }
                },
            )
    }

    /// `s` cut at the char boundaries at or before `cuts` (taken modulo its length).
    fn split_text(s: &str, cuts: &[usize]) -> Vec<String> {
        let mut at: Vec<usize> = cuts
            .iter()
            .map(|c| {
                let mut i = c % (s.len() + 1);
                while !s.is_char_boundary(i) {
                    i -= 1;
                }
                i
            })
            .collect();
        at.push(0);
        at.push(s.len());
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| s[w[0]..w[1]].to_owned()).collect()
    }

    /// `bytes` cut at `cuts` (taken modulo its length).
    fn split_bytes(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
    }

    impl StreamSpec {
        /// The events of the stream, with their data.
        fn events(&self) -> Vec<(&'static str, Value)> {
            let mut out = vec![(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": 1,
                              "cache_creation_input_tokens": self.usage.cache_creation_input_tokens,
                              "cache_read_input_tokens": self.usage.cache_read_input_tokens}}}),
            )];
            for (index, block) in self.blocks.iter().enumerate() {
                let start = |b: Value| {
                    (
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index, "content_block": b}),
                    )
                };
                let delta = |d: Value| {
                    (
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": d}),
                    )
                };
                match block {
                    BlockSpec::Text(pieces) => {
                        out.push(start(json!({"type": "text", "text": ""})));
                        for p in pieces {
                            out.push(delta(json!({"type": "text_delta", "text": p})));
                        }
                    }
                    BlockSpec::Thinking(pieces, sig) => {
                        out.push(start(
                            json!({"type": "thinking", "thinking": "", "signature": ""}),
                        ));
                        for p in pieces {
                            out.push(delta(json!({"type": "thinking_delta", "thinking": p})));
                        }
                        out.push(delta(json!({"type": "signature_delta", "signature": sig})));
                    }
                    BlockSpec::Redacted(data) => {
                        out.push(start(json!({"type": "redacted_thinking", "data": data})));
                    }
                    BlockSpec::ToolUse(id, name, input, cuts) => {
                        out.push(start(
                            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                        ));
                        for p in split_text(&input.to_string(), cuts) {
                            out.push(delta(
                                json!({"type": "input_json_delta", "partial_json": p}),
                            ));
                        }
                    }
                    BlockSpec::ServerTool(id, input, cuts) => {
                        out.push(start(json!({"type": "server_tool_use", "id": id, "name": "web_search", "input": {}})));
                        for p in split_text(&input.to_string(), cuts) {
                            out.push(delta(
                                json!({"type": "input_json_delta", "partial_json": p}),
                            ));
                        }
                    }
                }
                if self.pings {
                    out.push(("ping", json!({"type": "ping"})));
                }
                out.push((
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": index}),
                ));
            }
            let seq = (self.stop == "stop_sequence").then(|| self.stop_sequence.clone());
            out.push((
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": self.stop, "stop_sequence": seq},
                       "usage": {"output_tokens": self.usage.output_tokens}}),
            ));
            out.push(("message_stop", json!({"type": "message_stop"})));
            out
        }

        /// The stream as SSE text.
        fn sse(&self) -> String {
            let eol = if self.crlf { "\r\n" } else { "\n" };
            let mut out = String::new();
            for (i, (name, data)) in self.events().into_iter().enumerate() {
                if self.pings && i % 3 == 1 {
                    out.push_str(&format!(": keep-alive{eol}"));
                }
                out.push_str(&format!("event: {name}{eol}"));
                let json = if self.pretty {
                    serde_json::to_string_pretty(&data).unwrap()
                } else {
                    data.to_string()
                };
                // Pretty JSON breaks lines only between tokens: several `data:` lines.
                for line in json.split('\n') {
                    out.push_str(&format!("data: {line}{eol}"));
                }
                out.push_str(eol);
            }
            out
        }

        /// The response the stream describes.
        fn expected(&self) -> Response {
            let content = self
                .blocks
                .iter()
                .map(|b| match b {
                    BlockSpec::Text(p) => ContentBlock::text(p.concat()),
                    BlockSpec::Thinking(p, sig) => ContentBlock::Thinking(ThinkingBlock {
                        thinking: p.concat(),
                        signature: sig.clone(),
                        extra: Map::new(),
                    }),
                    BlockSpec::Redacted(data) => {
                        ContentBlock::RedactedThinking(RedactedThinkingBlock {
                            data: data.clone(),
                            extra: Map::new(),
                        })
                    }
                    BlockSpec::ToolUse(id, name, input, _) => {
                        ContentBlock::tool_use(id.clone(), name.clone(), input.clone())
                    }
                    BlockSpec::ServerTool(id, input, _) => ContentBlock::Unknown(json!({
                        "type": "server_tool_use", "id": id, "name": "web_search", "input": input
                    })),
                })
                .collect();
            Response {
                id: self.id.clone(),
                model: self.model.clone(),
                role: Role::Assistant,
                content,
                stop_reason: Some(StopReason::parse(self.stop)),
                stop_sequence: (self.stop == "stop_sequence").then(|| self.stop_sequence.clone()),
                usage: self.usage,
            }
        }
    }

    /// Assembles chunks of SSE bytes as `AnthropicModel` does.
    fn assemble(chunks: Vec<Vec<u8>>) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
        let seen = Mutex::new(Vec::new());
        let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
        let out = futures::executor::block_on(async {
            let bytes = chunks
                .into_iter()
                .map(|c| Ok::<_, Infallible>(Bytes::from(c)));
            let mut stream = futures::stream::iter(bytes).eventsource();
            let mut asm = StreamAssembler::new();
            while let Some(next) = stream.next().await {
                match next {
                    Ok(event) => {
                        asm.push(&event.event, &event.data, &sink)?;
                        if asm.is_complete() {
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
            asm.finish()
        });
        (out, seen.into_inner().unwrap())
    }

    #[test]
    fn stream_assembler_chunked_and_truncated() {
        check(
            "stream_assembler_chunked_and_truncated",
            default_cases(),
            (
                stream_spec(),
                prop::collection::vec(any::<usize>(), 0..16),
                any::<usize>(),
            ),
            |(spec, cuts, cut_at)| {
                let whole = spec.sse().into_bytes();
                let (full, full_events) = assemble(vec![whole.clone()]);
                let full =
                    full.map_err(|e| TestCaseError::fail(format!("valid stream failed: {e}")))?;
                prop_assert_eq!(&full, &spec.expected());

                let (split, split_events) = assemble(split_bytes(&whole, &cuts));
                prop_assert_eq!(split.as_ref().ok(), Some(&full));
                prop_assert_eq!(&split_events, &full_events);

                // Cut before its last byte, a stream never completes.
                let end = cut_at % whole.len();
                let (cut, _) = assemble(split_bytes(&whole[..end], &cuts));
                match cut {
                    Ok(r) => {
                        prop_assert!(false, "a stream cut at {end} of {} gave {r:?}", whole.len())
                    }
                    Err(e) => clear(&e)?,
                }
                Ok(())
            },
        );
    }

    // -----------------------------------------------------------------------------------
    // 1c. Random bytes through the real HTTP path.

    /// What the mock answers.
    #[derive(Debug, Clone)]
    struct Served {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
        cuts: Vec<usize>,
        /// Keep the connection open, silent, after the body.
        stall: bool,
    }

    /// A tiny server that answers every POST with the current [`Served`].
    struct BytesMock {
        uri: String,
        served: Arc<Mutex<Option<Served>>>,
        _server: LocalServer,
    }

    async fn serve(State(served): State<Arc<Mutex<Option<Served>>>>) -> axum::response::Response {
        let s = served.lock().unwrap().clone().unwrap();
        let pieces: Vec<Result<Bytes, Infallible>> = split_bytes(&s.body, &s.cuts)
            .into_iter()
            .map(|c| Ok(Bytes::from(c)))
            .collect();
        let body = futures::stream::iter(pieces);
        let body = if s.stall {
            Body::from_stream(body.chain(futures::stream::pending()))
        } else {
            Body::from_stream(body)
        };
        axum::response::Response::builder()
            .status(StatusCode::from_u16(s.status).unwrap())
            .header(header::CONTENT_TYPE, s.content_type)
            .body(body)
            .unwrap()
    }

    impl BytesMock {
        async fn start() -> Self {
            let served = Arc::new(Mutex::new(None));
            let app = Router::new()
                .route("/v1/messages", post(serve))
                .route("/v1/chat/completions", post(serve))
                .with_state(served.clone());
            let server = LocalServer::start(app).await;
            Self {
                uri: format!("http://{}", server.addr),
                served,
                _server: server,
            }
        }

        /// Both providers pointed at this mock, without retries.
        fn models(&self, idle: Duration) -> (AnthropicModel, OpenAiModel) {
            let anthropic = AnthropicModel::new(
                AnthropicConfig::new("sk-ant-fuzz-00000000")
                    .with_base_url(&self.uri)
                    .with_retry(RetryPolicy::none())
                    .with_idle_timeout(idle),
            )
            .unwrap();
            let openai = OpenAiModel::new(
                OpenAiConfig::new()
                    .with_base_url(format!("{}/v1", self.uri))
                    .with_retry(RetryPolicy::none())
                    .with_idle_timeout(idle),
            )
            .unwrap();
            (anthropic, openai)
        }
    }

    /// A simple valid Chat Completions stream.
    fn openai_sse(pieces: &[String], finish: &str) -> String {
        let mut out = String::new();
        for p in pieces {
            let chunk = json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]});
            out.push_str(&format!("data: {chunk}\n\n"));
        }
        let last =
            json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]});
        out.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
        out
    }

    fn served() -> impl Strategy<Value = (Served, Option<Response>)> {
        let valid = || stream_spec().prop_map(|s| (s.sse().into_bytes(), Some(s.expected())));
        let body = prop_oneof![
            2 => prop::collection::vec(any::<u8>(), 0..600).prop_map(|b| (b, None)),
            2 => valid(),
            2 => (valid(), prop::collection::vec(text_edit(), 1..4)).prop_map(|((b, _), edits)| {
                let mut text = String::from_utf8(b).unwrap();
                for e in &edits {
                    text = apply_text_edit(&text, e);
                }
                (text.into_bytes(), None)
            }),
            1 => prop::collection::vec(sse_event(), 0..12).prop_map(|events| {
                let text: String = events
                    .iter()
                    .map(|(n, d)| format!("event: {n}\ndata: {d}\n\n"))
                    .collect();
                (text.into_bytes(), None)
            }),
            1 => (prop::collection::vec(text(), 0..4), prop::sample::select(&["stop", "length", ""][..]))
                .prop_map(|(p, f)| (openai_sse(&p, f).into_bytes(), None)),
            1 => arb_json().prop_map(|v| (v.to_string().into_bytes(), None)),
        ];
        (
            prop_oneof![
                8 => Just(200u16),
                1 => prop::sample::select(&[400u16, 401, 404, 429, 500, 503, 529][..]),
            ],
            prop_oneof![
                3 => Just("text/event-stream"),
                1 => Just("application/json"),
                1 => Just("text/plain"),
            ],
            body,
            prop::collection::vec(any::<usize>(), 0..8),
            prop::bool::weighted(1.0 / 16.0),
        )
            .prop_map(|(status, content_type, (body, expected), cuts, stall)| {
                let expected =
                    expected.filter(|_| status == 200 && content_type == "text/event-stream");
                (
                    Served {
                        status,
                        content_type,
                        body,
                        cuts,
                        stall,
                    },
                    expected,
                )
            })
    }

    /// Found by [`http_bodies`]: a streaming request answered with a plain JSON body that
    /// then goes silent used to hang forever (no idle timeout covered that body).
    #[tokio::test]
    async fn plain_body_that_stalls_hits_the_idle_timeout() {
        let mock = BytesMock::start().await;
        *mock.served.lock().unwrap() = Some(Served {
            status: 200,
            content_type: "application/json",
            body: b"{\"id\": \"msg_1\",".to_vec(),
            cuts: vec![],
            stall: true,
        });
        let idle = Duration::from_millis(100);
        let (anthropic, openai) = mock.models(idle);
        let request = Request::new("m", 8, vec![Message::user_text("hi")]);
        let limit = Duration::from_secs(5);
        let out = tokio::time::timeout(
            limit,
            anthropic.send(request.clone(), &cadre_model::ignore_events),
        )
        .await
        .expect("AnthropicModel hung");
        assert!(matches!(out, Err(ModelError::Idle(_))), "{out:?}");
        let out = tokio::time::timeout(limit, openai.send(request, &cadre_model::ignore_events))
            .await
            .expect("OpenAiModel hung");
        assert!(matches!(out, Err(ModelError::Idle(_))), "{out:?}");
    }

    #[test]
    fn http_bodies() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mock = rt.block_on(BytesMock::start());
        let idle = Duration::from_millis(200);
        let (anthropic, openai) = mock.models(idle);
        let request = Request::new("fuzz-model", 64, vec![Message::user_text("hi")]);
        check(
            "http_bodies",
            (default_cases() / 8).max(8),
            served(),
            |(served, expected)| {
                *mock.served.lock().unwrap() = Some(served);
                rt.block_on(async {
                    // The idle timeout is 200 ms and the mock answers at once.
                    let limit = Duration::from_secs(3);
                    let out = tokio::time::timeout(
                        limit,
                        anthropic.send(request.clone(), &cadre_model::ignore_events),
                    )
                    .await
                    .map_err(|_| TestCaseError::fail("AnthropicModel::send hung"))?;
                    match (&out, &expected) {
                        (Ok(r), Some(e)) => prop_assert_eq!(r, e),
                        (Err(e), Some(_)) => prop_assert!(false, "a valid stream failed: {e}"),
                        (Ok(_), None) => {}
                        (Err(e), None) => clear(e)?,
                    }
                    let out = tokio::time::timeout(
                        limit,
                        openai.send(request.clone(), &cadre_model::ignore_events),
                    )
                    .await
                    .map_err(|_| TestCaseError::fail("OpenAiModel::send hung"))?;
                    if let Err(e) = &out {
                        clear(e)?;
                    }
                    Ok(())
                })
            },
        );
    }
}
