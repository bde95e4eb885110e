//! Answering requests: the server thread, the routes of each API, faults and streams.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::HttpBody;
use http_body::{Frame, SizeHint};

use super::*;

/// How long a stalled stream stays open when the client never gives up.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(120);

/// The server thread: its own runtime, so it runs whatever the test's runtime is doing.
pub(super) fn serve(
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

pub(super) fn json_response(status: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(super) fn error_response(status: u16, kind: &str, message: &str) -> Response {
    json_response(status, &error_body(kind, message))
}

/// Anything but `POST /v1/messages`: a client bug worth failing the test over.
pub(super) async fn handle_other(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let message = format!("mock: no route for {} {}", request.method(), request.uri());
    shared.violate(message.clone());
    error_response(404, "not_found_error", &message)
}

pub(super) async fn handle_models(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    info(&shared, "/v1/models", &headers, |inner| {
        inner.models.clone()
    })
}

pub(super) async fn handle_props(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    info(&shared, "/props", &headers, |inner| inner.props.clone())
}

/// Records an information `GET` and answers what the test set, else 404.
///
/// An unset endpoint is no violation: clients probe these and many real servers lack them.
pub(super) fn info(
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
pub(super) enum Dialect {
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

pub(super) async fn handle_messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(shared, headers, body, Dialect::Messages).await
}

pub(super) async fn handle_chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(shared, headers, body, Dialect::Chat).await
}

pub(super) async fn handle(
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
            completed: false,
            cache: None,
        });
        inner.captured.len() - 1
    };
    let resp = respond(&shared, index, body, &headers, parse_error, dialect, guard).await;
    watch_completion(resp, shared, index)
}

/// The answer to captured request `index`.
async fn respond(
    shared: &Arc<Shared>,
    index: usize,
    body: Value,
    headers: &[(String, String)],
    parse_error: Option<serde_json::Error>,
    dialect: Dialect,
    guard: InFlight,
) -> Response {
    let problems = match parse_error {
        Some(e) => vec![format!("body is not valid JSON: {e}")],
        None if dialect == Dialect::Chat => crate::openai::check_chat_request(&body, headers),
        None => check_request(&body, headers),
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
    // Held before it takes a reply, so a request whose client gives up uses none.
    shared.gate_wait(&body).await;

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

    // The prompt cache counts the request's input, when the test asked for it.
    let reply = match dialect {
        Dialect::Messages => {
            let mut inner = shared.lock();
            let used = inner.cache.as_mut().map(|c| c.account(&body));
            if let (Some(used), Some(c)) = (used, inner.captured.get_mut(index)) {
                c.cache = Some(used);
            }
            match used {
                Some(used) => reply.with_cache_use(used),
                None => reply,
            }
        }
        Dialect::Chat => reply,
    };

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
pub(super) enum End {
    Clean,
    Abort,
    Stall,
}

pub(super) struct StreamState {
    events: VecDeque<String>,
    end: End,
    guard: Option<InFlight>,
}

/// A real streamed `text/event-stream` body, so faults hit mid-body.
pub(super) fn stream_response(
    events: Vec<String>,
    fault: Option<Fault>,
    guard: InFlight,
) -> Response {
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

/// Marks captured request `index` completed once its whole body has been handed to the
/// connection; a client that leaves first drops the body before that.
fn watch_completion(resp: Response, shared: Arc<Shared>, index: usize) -> Response {
    let (parts, body) = resp.into_parts();
    let mut watched = Completion {
        inner: body,
        shared,
        index,
        done: false,
    };
    if watched.inner.is_end_stream() {
        watched.finish();
    }
    Response::from_parts(parts, Body::new(watched))
}

struct Completion {
    inner: Body,
    shared: Arc<Shared>,
    index: usize,
    done: bool,
}

impl Completion {
    fn finish(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if let Some(c) = self.shared.lock().captured.get_mut(self.index) {
            c.completed = true;
        }
    }
}

impl HttpBody for Completion {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            // A sized body (JSON) may never be polled for its end: its last frame is it.
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.finish(),
            Poll::Ready(None) => this.finish(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
