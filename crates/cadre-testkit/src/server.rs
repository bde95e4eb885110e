//! The mock Messages API server: routes, request capture, the in-flight barrier.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::sync::{oneshot, watch};

use crate::protocol::check_request;
use crate::reply::{error_body, Fault, Rendered, Reply};

/// How long a stalled stream stays open when the client never gives up.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// Which requests a route answers.
#[derive(Clone)]
pub enum Match {
    /// Every request.
    Any,
    /// The text of the first user message contains this.
    FirstUserContains(String),
    /// The text (tool_result text included) of the last user message contains this.
    LastUserContains(String),
    /// The system prompt text (string or blocks) contains this.
    SystemContains(String),
    /// The request offers a tool with this name.
    ToolOffered(String),
    /// This predicate on the request body holds.
    Custom(Arc<dyn Fn(&Value) -> bool + Send + Sync>),
}

impl fmt::Debug for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Any => f.write_str("Any"),
            Match::FirstUserContains(s) => f.debug_tuple("FirstUserContains").field(s).finish(),
            Match::LastUserContains(s) => f.debug_tuple("LastUserContains").field(s).finish(),
            Match::SystemContains(s) => f.debug_tuple("SystemContains").field(s).finish(),
            Match::ToolOffered(s) => f.debug_tuple("ToolOffered").field(s).finish(),
            Match::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl Match {
    /// Whether a request with this body matches.
    pub fn matches(&self, body: &Value) -> bool {
        match self {
            Match::Any => true,
            Match::FirstUserContains(s) => first_user_text(body).contains(s.as_str()),
            Match::LastUserContains(s) => last_user_text(body).contains(s.as_str()),
            Match::SystemContains(s) => system_text(body).contains(s.as_str()),
            Match::ToolOffered(s) => tool_names(body).iter().any(|n| n == s),
            Match::Custom(f) => f(body),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    /// The JSON body (`Null` if it was not JSON).
    pub body: Value,
    /// The headers, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
}

/// One `GET` the server received on an information endpoint (`/v1/models`, `/props`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// The path asked for (`/v1/models` or `/props`).
    pub path: String,
    /// The headers, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
}

impl InfoRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

impl Captured {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// The `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        messages(&self.body)
    }

    /// The system prompt text; blocks joined with newlines.
    pub fn system_text(&self) -> String {
        system_text(&self.body)
    }

    /// The names of the offered tools.
    pub fn tool_names(&self) -> Vec<String> {
        tool_names(&self.body)
    }

    /// The text of the first user message.
    pub fn first_user_text(&self) -> String {
        first_user_text(&self.body)
    }

    /// The text of the last user message, tool_result text included.
    pub fn last_user_text(&self) -> String {
        last_user_text(&self.body)
    }

    /// Whether the request asked for a streamed response.
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }
}

fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn is_user(m: &&Value) -> bool {
    m.get("role").and_then(Value::as_str) == Some("user")
}

/// A user message, or (in Chat Completions) a `tool` message carrying a tool result.
fn is_user_or_tool(m: &&Value) -> bool {
    matches!(m.get("role").and_then(Value::as_str), Some("user" | "tool"))
}

/// The text of the first user message; for a conversation that opens with a compaction
/// block (which stands in for it), that block's summary.
pub(crate) fn first_user_text(body: &Value) -> String {
    let messages = messages(body);
    if let Some(first) = messages
        .first()
        .filter(|m| crate::compaction::opens_with_compaction(m))
    {
        return first
            .pointer("/content/0/content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
    }
    messages
        .iter()
        .find(is_user)
        .map(|m| content_text(m.get("content")))
        .unwrap_or_default()
}

fn last_user_text(body: &Value) -> String {
    messages(body)
        .iter()
        .rfind(is_user_or_tool)
        .map(|m| content_text(m.get("content")))
        .unwrap_or_default()
}

/// The text of a content value: a string, or its text blocks and tool_result contents.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("tool_result") => Some(content_text(b.get("content"))),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn system_text(body: &Value) -> String {
    match body.get("system") {
        Some(system) => content_text(Some(system)),
        // Chat Completions: the system prompt is a message.
        None => messages(body)
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .map(|m| content_text(m.get("content")))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn tool_names(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t.get("name")
                        .or_else(|| t.pointer("/function/name"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

struct Route {
    matcher: Match,
    replies: VecDeque<Reply>,
}

struct Barrier {
    n: usize,
    timeout: Duration,
    open: bool,
    tx: watch::Sender<bool>,
    /// Only requests that match are held and counted (all requests when `None`).
    only: Option<Match>,
    /// Matching requests waiting at the barrier now (used when `only` is set).
    waiting: usize,
}

#[derive(Default)]
struct Inner {
    routes: Vec<Route>,
    captured: Vec<Captured>,
    violations: Vec<String>,
    in_flight: usize,
    max_in_flight: usize,
    barrier: Option<Barrier>,
    /// What `GET /v1/models` answers (404 when unset).
    models: Option<Value>,
    /// What `GET /props` answers (404 when unset).
    props: Option<Value>,
    info_requests: Vec<InfoRequest>,
    /// Messages requests whose estimated input exceeds this are refused as too long.
    context_window: Option<u64>,
    /// Whether scripted replies may be left unused when the server is dropped.
    allow_unused: bool,
}

/// State shared between the handle and the server thread.
#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not hide what the server recorded.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn violate(&self, problem: String) {
        self.lock().violations.push(problem);
    }

    /// Takes the next reply of the first matching route that has one left.
    fn take_reply(&self, body: &Value) -> Option<(usize, Reply)> {
        let mut inner = self.lock();
        inner
            .routes
            .iter_mut()
            .enumerate()
            .filter(|(_, r)| !r.replies.is_empty() && r.matcher.matches(body))
            .find_map(|(i, r)| r.replies.pop_front().map(|reply| (i, reply)))
    }

    /// Gives an unused reply back to the front of its route.
    fn put_back(&self, route: usize, reply: Reply) {
        if let Some(r) = self.lock().routes.get_mut(route) {
            r.replies.push_front(reply);
        }
    }

    /// Waits at the barrier, if one is set, still closed, and holds this request;
    /// `Err((count, n))` on timeout.
    async fn barrier_wait(&self, body: &Value) -> Result<(), (usize, usize)> {
        let (mut rx, timeout, n) = {
            let mut guard = self.lock();
            let inner = &mut *guard;
            let in_flight = inner.in_flight;
            let Some(b) = inner.barrier.as_mut() else {
                return Ok(());
            };
            if b.open || b.only.as_ref().is_some_and(|m| !m.matches(body)) {
                return Ok(());
            }
            let count = match b.only {
                Some(_) => {
                    b.waiting += 1;
                    b.waiting
                }
                None => in_flight,
            };
            if count >= b.n {
                b.open = true;
                b.tx.send_replace(true);
                return Ok(());
            }
            (b.tx.subscribe(), b.timeout, b.n)
        };
        // An error means the barrier was replaced by a new one; let this request through.
        if tokio::time::timeout(timeout, rx.wait_for(|open| *open))
            .await
            .is_ok()
        {
            return Ok(());
        }
        let mut guard = self.lock();
        let inner = &mut *guard;
        let in_flight = inner.in_flight;
        match inner.barrier.as_mut() {
            Some(b) if !b.open => {
                let count = match b.only {
                    Some(_) => {
                        let c = b.waiting;
                        b.waiting = b.waiting.saturating_sub(1);
                        c
                    }
                    None => in_flight,
                };
                Err((count, n))
            }
            _ => Ok(()),
        }
    }
}

/// Counts a request as in flight until dropped (for streams: until the body ends or is dropped).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>) -> InFlight {
        let mut inner = shared.lock();
        inner.in_flight += 1;
        inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
        InFlight(Arc::clone(shared))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.in_flight = inner.in_flight.saturating_sub(1);
    }
}

/// Stops the server thread when the last handle is dropped.
struct Handle {
    shared: Arc<Shared>,
    uri: String,
    _shutdown: oneshot::Sender<()>,
}

impl Drop for Handle {
    /// The server checks itself when the test lets go of it: every protocol violation it
    /// saw, and every scripted reply nobody asked for, fails the test — no test can forget
    /// to look. (Not while the test is already failing: that would hide its own panic.)
    #[allow(clippy::panic)] // Test helper: failing the test is its whole purpose.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let inner = self.shared.lock();
        let mut problems: Vec<String> = inner.violations.clone();
        if !inner.allow_unused {
            for route in inner.routes.iter().filter(|r| !r.replies.is_empty()) {
                problems.push(format!(
                    "{} scripted repl{} for {:?} never requested",
                    route.replies.len(),
                    if route.replies.len() == 1 { "y" } else { "ies" },
                    route.matcher
                ));
            }
        }
        if !problems.is_empty() {
            panic!(
                "mock server at {} found {} problem(s):\n  {}",
                self.uri,
                problems.len(),
                problems.join("\n  ")
            );
        }
    }
}

/// A local mock of the Messages API (`POST /v1/messages`); clones share one server.
///
/// The server runs on its own thread and runtime, so it keeps answering even while a test
/// blocks its own thread (e.g. waiting for a child process) on a `current_thread` runtime.
#[derive(Clone)]
pub struct MockServer {
    handle: Arc<Handle>,
}

impl fmt::Debug for MockServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockServer")
            .field("uri", &self.handle.uri)
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Binds 127.0.0.1 on a free port and starts serving.
    ///
    /// Panics if the port or the server thread cannot be set up (a test helper).
    #[allow(clippy::panic)] // Test helper: a test cannot go on without its server.
    pub async fn start() -> MockServer {
        match MockServer::try_start().await {
            Ok(server) => server,
            Err(e) => panic!("mock server failed to start: {e}"),
        }
    }

    /// Like [`MockServer::start`], returning the error instead of panicking.
    pub async fn try_start() -> io::Result<MockServer> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let uri = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/messages", post(handle_messages))
            .route("/v1/chat/completions", post(handle_chat))
            .route("/v1/models", get(handle_models))
            .route("/props", get(handle_props))
            .fallback(handle_other)
            // Long conversations exceed axum's 2 MB default.
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let (ready_tx, ready_rx) = oneshot::channel::<io::Result<()>>();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("cadre-mock-server".into())
            .spawn(move || serve(listener, app, ready_tx, shutdown_rx))?;
        ready_rx
            .await
            .map_err(|_| io::Error::other("mock server thread exited before starting"))??;
        Ok(MockServer {
            handle: Arc::new(Handle {
                shared,
                uri,
                _shutdown: shutdown_tx,
            }),
        })
    }

    /// The base URI, `http://127.0.0.1:PORT` (the client POSTs `{uri}/v1/messages`).
    pub fn uri(&self) -> String {
        self.handle.uri.clone()
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// Adds a route: matching requests take its replies in order while it has any left.
    ///
    /// A request takes the next reply of the first route (in the order added) that matches
    /// and still has replies.
    pub fn route(&self, matcher: Match, replies: Vec<Reply>) {
        self.shared().lock().routes.push(Route {
            matcher,
            replies: replies.into(),
        });
    }

    /// Every request received on `/v1/messages`, in arrival order.
    pub fn requests(&self) -> Vec<Captured> {
        self.shared().lock().captured.clone()
    }

    /// Makes `GET /v1/models` answer 200 with `body` (as vLLM or OpenRouter list their models).
    pub fn set_models(&self, body: Value) {
        self.shared().lock().models = Some(body);
    }

    /// Makes `GET /props` answer 200 with `body` (as llama.cpp's server reports its settings).
    pub fn set_props(&self, body: Value) {
        self.shared().lock().props = Some(body);
    }

    /// Refuses every Messages request whose input (estimated as [`crate::compaction`] does)
    /// exceeds `tokens`, as the API does: 400 `prompt is too long`.
    pub fn set_context_window(&self, tokens: u64) {
        self.shared().lock().context_window = Some(tokens);
    }

    /// Every `GET` received on `/v1/models` and `/props`, in arrival order.
    pub fn info_requests(&self) -> Vec<InfoRequest> {
        self.shared().lock().info_requests.clone()
    }

    /// Protocol violations found so far, each naming its request index.
    pub fn violations(&self) -> Vec<String> {
        self.shared().lock().violations.clone()
    }

    /// The violations recorded so far, cleared: for a test that provokes them on purpose
    /// (the server would otherwise fail it when dropped).
    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.shared().lock().violations)
    }

    /// Lets scripted replies go unused (a test that stops a run midway): by default a
    /// reply never requested fails the test when the server is dropped.
    pub fn allow_unused_replies(&self) {
        self.shared().lock().allow_unused = true;
    }

    /// How many scripted replies have not been used yet.
    pub fn pending_replies(&self) -> usize {
        self.shared()
            .lock()
            .routes
            .iter()
            .map(|r| r.replies.len())
            .sum()
    }

    /// Panics listing the violations, if any.
    #[allow(clippy::panic)] // Test helper: failing the test is its whole purpose.
    pub fn assert_clean(&self) {
        let violations = self.violations();
        if !violations.is_empty() {
            panic!(
                "mock server recorded {} protocol violation(s):\n  {}",
                violations.len(),
                violations.join("\n  ")
            );
        }
    }

    /// From now on, holds each request until `n` are in flight at once (or `timeout` passes,
    /// which answers 500 and records a violation). Once open, the barrier stays open.
    pub fn hold_until_in_flight(&self, n: usize, timeout: Duration) {
        self.set_barrier(n, timeout, None);
    }

    /// Like [`hold_until_in_flight`](Self::hold_until_in_flight), but holds and counts only
    /// requests that match `only`: the barrier opens once `n` of them wait at once, so a test
    /// proves that `n` conversations overlap while other traffic passes freely.
    pub fn hold_until_waiting(&self, only: Match, n: usize, timeout: Duration) {
        self.set_barrier(n, timeout, Some(only));
    }

    fn set_barrier(&self, n: usize, timeout: Duration, only: Option<Match>) {
        let (tx, _) = watch::channel(false);
        self.shared().lock().barrier = Some(Barrier {
            n,
            timeout,
            open: false,
            tx,
            only,
            waiting: 0,
        });
    }

    /// How many requests are in flight right now (streams count until their body ends).
    pub fn in_flight(&self) -> usize {
        self.shared().lock().in_flight
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared().lock().max_in_flight
    }
}

/// The server thread: its own runtime, so it runs whatever the test's runtime is doing.
fn serve(
    listener: std::net::TcpListener,
    app: Router,
    ready: oneshot::Sender<io::Result<()>>,
    shutdown: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        tokio::select! {
            _ = axum::serve(listener, app) => {}
            // Fires when the last handle drops; dropping the runtime then ends every connection.
            _ = shutdown => {}
        }
    });
}

fn json_response(status: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(status: u16, kind: &str, message: &str) -> Response {
    json_response(status, &error_body(kind, message))
}

/// Anything but `POST /v1/messages`: a client bug worth failing the test over.
async fn handle_other(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let message = format!("mock: no route for {} {}", request.method(), request.uri());
    shared.violate(message.clone());
    error_response(404, "not_found_error", &message)
}

async fn handle_models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    info(&shared, "/v1/models", &headers, |inner| {
        inner.models.clone()
    })
}

async fn handle_props(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    info(&shared, "/props", &headers, |inner| inner.props.clone())
}

/// Records an information `GET` and answers what the test set, else 404.
///
/// An unset endpoint is no violation: clients probe these and many real servers lack them.
fn info(
    shared: &Shared,
    path: &str,
    headers: &HeaderMap,
    body: impl Fn(&Inner) -> Option<Value>,
) -> Response {
    let mut inner = shared.lock();
    inner.info_requests.push(InfoRequest {
        path: path.to_owned(),
        headers: header_pairs(headers),
    });
    match body(&inner) {
        Some(body) => json_response(200, &body),
        None => json_response(
            404,
            &crate::openai::error_body("not_found_error", &format!("mock: {path} is not set")),
        ),
    }
}

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// Anthropic Messages.
    Messages,
    /// OpenAI Chat Completions.
    Chat,
}

impl Dialect {
    fn error(self, status: u16, kind: &str, message: &str) -> Response {
        match self {
            Dialect::Messages => error_response(status, kind, message),
            Dialect::Chat => json_response(status, &crate::openai::error_body(kind, message)),
        }
    }
}

async fn handle_messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(shared, headers, body, Dialect::Messages).await
}

async fn handle_chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(shared, headers, body, Dialect::Chat).await
}

async fn handle(
    shared: Arc<Shared>,
    headers: HeaderMap,
    body: Bytes,
    dialect: Dialect,
) -> Response {
    let guard = InFlight::enter(&shared);
    let headers = header_pairs(&headers);
    let (body, parse_error) = match serde_json::from_slice::<Value>(&body) {
        Ok(v) => (v, None),
        Err(e) => (Value::Null, Some(e)),
    };
    let index = {
        let mut inner = shared.lock();
        inner.captured.push(Captured {
            body: body.clone(),
            headers: headers.clone(),
        });
        inner.captured.len() - 1
    };

    let problems = match parse_error {
        Some(e) => vec![format!("body is not valid JSON: {e}")],
        None if dialect == Dialect::Chat => crate::openai::check_chat_request(&body, &headers),
        None => check_request(&body, &headers),
    };
    if !problems.is_empty() {
        {
            let mut inner = shared.lock();
            for p in &problems {
                inner.violations.push(format!("request {index}: {p}"));
            }
        }
        return dialect.error(400, "invalid_request_error", &problems.join("; "));
    }

    let window = shared.lock().context_window;
    if let (Some(window), Dialect::Messages) = (window, dialect) {
        let tokens = crate::compaction::estimate_tokens(&body);
        // Compacting is how a conversation that no longer fits is mended: always served.
        let summarize = body.get("compaction").is_some_and(|c| !c.is_null());
        if tokens > window && !summarize {
            return dialect.error(
                400,
                "invalid_request_error",
                &format!("prompt is too long: {tokens} tokens > {window} maximum"),
            );
        }
    }
    // The server compacts by itself: an on-demand compaction takes no scripted reply.
    let ask = match dialect {
        Dialect::Messages => crate::compaction::ask(&body),
        Dialect::Chat => crate::compaction::Ask::Nothing,
    };
    let block = || crate::compaction::block_for(&body);
    let taken = match ask {
        crate::compaction::Ask::Summarize { tokens } => {
            Some((None, Reply::compaction_only(block(), tokens)))
        }
        _ => shared.take_reply(&body).map(|(r, reply)| (Some(r), reply)),
    };
    let taken = match (ask, taken) {
        (
            crate::compaction::Ask::Threshold {
                tokens,
                pause: true,
            },
            Some((Some(r), reply)),
        ) => {
            // The block alone; the scripted answer waits for the request that continues.
            shared.put_back(r, reply);
            Some((None, Reply::compaction_only(block(), tokens)))
        }
        (crate::compaction::Ask::Threshold { tokens, .. }, Some((r, reply))) => {
            Some((r, reply.after_compaction(block(), tokens)))
        }
        (_, taken) => taken,
    };
    let Some((route, reply)) = taken else {
        let first: String = first_user_text(&body).chars().take(200).collect();
        let message =
            format!("mock: no scripted reply for request {index} (first user message: {first:?})");
        shared.violate(format!("request {index}: {message}"));
        return dialect.error(500, "api_error", &message);
    };

    if let Err((k, n)) = shared.barrier_wait(&body).await {
        if let Some(route) = route {
            shared.put_back(route, reply);
        }
        let message = format!("barrier timed out: only {k} of {n} requests in flight");
        shared.violate(format!("request {index}: {message}"));
        return dialect.error(500, "api_error", &message);
    }

    if let Some(d) = reply.delay_time() {
        tokio::time::sleep(d).await;
    }

    let id = format!(
        "msg_mock_{:04}",
        shared.next_id.fetch_add(1, Ordering::Relaxed) + 1
    );
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-mock");
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let rendered = match dialect {
        Dialect::Messages => reply.render(&id, model, stream),
        Dialect::Chat => reply.render_openai(&id, model, stream),
    };
    let mut resp = match rendered {
        Rendered::Json { status, body } if status == 200 && reply.fault().is_some() => {
            // No events to count in a JSON body: whatever the count, send its first half.
            let text = body.to_string();
            let mid = (1..=text.len() / 2)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            let fault = reply.fault().map(|f| match f {
                Fault::Truncate(_) => Fault::Truncate(1),
                Fault::Drop(_) => Fault::Drop(1),
                Fault::Stall(_) => Fault::Stall(1),
            });
            let mut resp = stream_response(vec![text[..mid].to_owned()], fault, guard);
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Rendered::Json { status, body } => json_response(status, &body),
        Rendered::Sse(events) => stream_response(events, reply.fault(), guard),
    };
    let headers = resp.headers_mut();
    if let Some(secs) = reply.retry_after_secs() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Ok(v) = HeaderValue::from_str(&format!("req_mock_{index}")) {
        headers.insert("request-id", v);
    }
    resp
}

/// How a streamed body ends after its events.
enum End {
    Clean,
    Abort,
    Stall,
}

struct StreamState {
    events: VecDeque<String>,
    end: End,
    guard: Option<InFlight>,
}

/// A real streamed `text/event-stream` body, so faults hit mid-body.
fn stream_response(events: Vec<String>, fault: Option<Fault>, guard: InFlight) -> Response {
    let (keep, end) = match fault {
        None => (events.len(), End::Clean),
        Some(Fault::Truncate(n)) => (n, End::Clean),
        Some(Fault::Drop(n)) => (n, End::Abort),
        Some(Fault::Stall(n)) => (n, End::Stall),
    };
    let state = StreamState {
        events: events.into_iter().take(keep).collect(),
        end,
        guard: Some(guard),
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if let Some(event) = st.events.pop_front() {
            if st.events.is_empty() && matches!(st.end, End::Clean) {
                // Leave the in-flight count before the last bytes go out: a client that has
                // read the whole reply must never see its next request overlap this one.
                st.guard = None;
            }
            return Some((Ok::<Bytes, io::Error>(Bytes::from(event)), st));
        }
        match std::mem::replace(&mut st.end, End::Clean) {
            End::Clean => None,
            End::Abort => {
                // Hyper flushes what it holds when the body is pending: answer pending once
                // (woken at once), so the status line and events are on the wire before
                // the abort discards the connection.
                tokio::task::yield_now().await;
                Some((
                    Err(io::Error::other("mock: connection dropped mid-stream")),
                    st,
                ))
            }
            End::Stall => {
                // The client disconnecting drops this future; otherwise give up eventually.
                tokio::time::sleep(STALL_LIMIT).await;
                None
            }
        }
    });
    let mut resp = Body::from_stream(stream).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
