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

mod handlers;
mod requests;

use handlers::*;
pub(crate) use requests::first_user_text;
use requests::*;
pub use requests::{content_text, Captured, InfoRequest, Match};

pub(super) struct Route {
    matcher: Match,
    replies: VecDeque<Reply>,
}

pub(super) struct Barrier {
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
pub(super) struct Inner {
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
    /// Gates set by [`MockServer::gate`]; opened ones are pruned when a new one is set.
    gates: Vec<Arc<GateState>>,
    /// The prompt cache, when the server simulates one.
    cache: Option<crate::cache::PromptCache>,
}

/// State shared between the handle and the server thread.
#[derive(Default)]
pub(super) struct Shared {
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

/// What a [`Gate`] and the server thread share.
pub(super) struct GateState {
    only: Match,
    open: watch::Sender<bool>,
    /// Requests held at the gate now.
    waiting: watch::Sender<usize>,
}

impl Shared {
    /// Holds the request at every closed gate it matches until each is opened. A client
    /// that leaves meanwhile drops this future, and with it its place in the count.
    async fn gate_wait(&self, body: &Value) {
        let gates: Vec<Arc<GateState>> = self
            .lock()
            .gates
            .iter()
            .filter(|g| !*g.open.borrow() && g.only.matches(body))
            .cloned()
            .collect();
        for gate in gates {
            let mut open = gate.open.subscribe();
            let _held = Held::new(&gate);
            // Err only if the sender is gone, and this request holds it.
            let _ = open.wait_for(|open| *open).await;
        }
    }
}

/// Counts a request as held at a gate until dropped (released, or its client gone).
struct Held<'a>(&'a GateState);

impl<'a> Held<'a> {
    fn new(gate: &'a GateState) -> Held<'a> {
        gate.waiting.send_modify(|w| *w += 1);
        Held(gate)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.waiting.send_modify(|w| *w = w.saturating_sub(1));
    }
}

/// Holds the requests that match it, unanswered, until [`open`](Gate::open)ed
/// (from [`MockServer::gate`]); clones share one gate.
#[derive(Clone)]
pub struct Gate {
    state: Arc<GateState>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("only", &self.state.only)
            .field("open", &self.is_open())
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl Gate {
    /// Releases every held request and lets all later ones pass.
    pub fn open(&self) {
        self.state.open.send_replace(true);
    }

    /// Whether [`open`](Self::open) was called.
    pub fn is_open(&self) -> bool {
        *self.state.open.borrow()
    }

    /// How many requests are held at the gate right now (a client that hung up while held
    /// no longer counts).
    pub fn waiting(&self) -> usize {
        *self.state.waiting.borrow()
    }

    /// Waits until at least `n` requests are held at once; `false` if `timeout` passes first.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let mut waiting = self.state.waiting.subscribe();
        let reached = tokio::time::timeout(timeout, waiting.wait_for(|w| *w >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        reached
    }
}

/// Counts a request as in flight until dropped (for streams: until the body ends or is dropped).
pub(super) struct InFlight(Arc<Shared>);

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
pub(super) struct Handle {
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

/// Connections the mock's accept queue holds (the system may cap it lower).
const LISTEN_BACKLOG: u32 = 65_535;

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
        // A long accept queue: a fleet of clients connects at once, and connections the
        // queue cannot hold wait out SYN retries long enough to time out.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(([127, 0, 0, 1], 0).into())?;
        let listener = socket.listen(LISTEN_BACKLOG)?.into_std()?;
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

    /// From now on, counts every Messages request against a prompt cache as the API does
    /// ([`crate::cache`]), caching prefixes of at least `min_tokens` (the API's minimum is
    /// 1,024 for most models): each reply's `input_tokens`, `cache_creation_input_tokens`
    /// and `cache_read_input_tokens` are the cache's count, and [`Captured::cache`] has it.
    pub fn simulate_prompt_cache(&self, min_tokens: u64) {
        self.shared().lock().cache = Some(crate::cache::PromptCache::new(min_tokens));
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

    /// From now on, holds every request that matches `only` (after it is captured and
    /// checked, before it takes a reply) until the returned gate is opened. A held request
    /// whose client hangs up takes no reply. A request that matches several closed gates
    /// waits for all of them.
    pub fn gate(&self, only: Match) -> Gate {
        let state = Arc::new(GateState {
            only,
            open: watch::Sender::new(false),
            waiting: watch::Sender::new(0),
        });
        let mut inner = self.shared().lock();
        inner.gates.retain(|g| !*g.open.borrow());
        inner.gates.push(Arc::clone(&state));
        Gate { state }
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
