//! The crate's one integration test binary.
//!
//! [`anthropic`] drives the real `AnthropicModel` against the `cadre-testkit` mock Messages
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

/// `OpenAiModel` against a local Chat Completions mock.
#[path = "model/openai.rs"]
mod openai;

/// `RecordingModel` and `ReplayModel` around a scripted in-test model.
#[path = "model/record_replay.rs"]
mod record_replay;

/// `Model::context_window` of `OpenAiModel` against the `cadre-testkit` mock's `/v1/models`
/// and `/props`.
#[path = "model/context_window.rs"]
mod context_window;

/// Randomised input tests (proptest): whatever arrives, every entry point returns `Ok` or an
/// error that says something, never panics and never hangs.
///
/// Each property runs proptest's default number of cases (`PROPTEST_CASES`, else 256) and
/// prints how many ran; [`http_bodies`] runs an eighth of that (each case is two HTTP round
/// trips). A longer run: `PROPTEST_CASES=5000 cargo test --release -p cadre-model fuzz`.
#[path = "model/fuzz.rs"]
mod fuzz;

#[path = "model/anthropic.rs"]
mod anthropic;
