//! Drives the mock server with a plain HTTP client to prove it speaks the Messages API.

// Test code: helpers outside #[test] fns may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use cadre_testkit::{Block, Match, MockServer, Reply};
use serde_json::{json, Value};

fn request_body(first_user: &str, stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "system": "you are a test",
        "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": first_user}],
    })
}

async fn post(server: &MockServer, body: &Value) -> reqwest::Response {
    cadre_testkit::http_client()
        .post(format!("{}/v1/messages", server.uri()))
        .header("x-api-key", "test-key")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// (event name, data) pairs of an SSE body.
fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|chunk| !chunk.trim().is_empty())
        .map(|chunk| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in chunk.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            (name, data)
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

#[tokio::test]
async fn streamed_text_reply() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("Hello, streaming world!").usage(100, 7, 3, 40)],
    );
    let resp = post(&server, &request_body("hi", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let events = parse_sse(&resp.text().await.unwrap());
    let names = names(&events);
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-test");
    assert_eq!(start["usage"]["input_tokens"], 100);
    assert_eq!(start["usage"]["cache_read_input_tokens"], 40);
    assert_eq!(
        events[2].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let deltas: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert!(deltas.len() >= 2);
    assert_eq!(deltas.concat(), "Hello, streaming world!");
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 7);

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("X-Api-Key"), Some("test-key"));
    assert_eq!(reqs[0].first_user_text(), "hi");
    assert_eq!(reqs[0].system_text(), "you are a test");
    assert_eq!(reqs[0].tool_names(), ["read_file"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_blocks_rebuild() {
    let server = MockServer::start().await;
    let input = json!({"path": "src/main.rs", "note": "héllo"});
    server.route(
        Match::Any,
        vec![Reply::blocks(vec![
            Block::Thinking {
                thinking: "let me think about it".into(),
                signature: "sig123".into(),
            },
            Block::Raw(json!({"type": "mystery", "x": 1})),
            Block::ToolUse {
                id: "tu_1".into(),
                name: "read_file".into(),
                input: input.clone(),
            },
        ])],
    );
    let events = parse_sse(
        &post(&server, &request_body("go", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    let mut thinking = String::new();
    let mut signature = String::new();
    let mut json_text = String::new();
    let mut json_pieces = 0;
    for (name, data) in &events {
        if name != "content_block_delta" {
            continue;
        }
        let d = &data["delta"];
        match d["type"].as_str().unwrap() {
            "thinking_delta" => thinking.push_str(d["thinking"].as_str().unwrap()),
            "signature_delta" => signature.push_str(d["signature"].as_str().unwrap()),
            "input_json_delta" => {
                json_text.push_str(d["partial_json"].as_str().unwrap());
                json_pieces += 1;
            }
            other => panic!("unexpected delta {other}"),
        }
    }
    assert_eq!(thinking, "let me think about it");
    assert_eq!(signature, "sig123");
    assert!(json_pieces >= 3);
    assert_eq!(serde_json::from_str::<Value>(&json_text).unwrap(), input);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| &d["content_block"])
        .collect();
    assert_eq!(starts[1], &json!({"type": "mystery", "x": 1}));
    assert_eq!(starts[2]["input"], json!({}));
    let stop = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(stop.1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn non_streamed_reply() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::tool_use("tu_9", "read_file", json!({"path": "a"})).with_text_before("looking")],
    );
    let resp = post(&server, &request_body("hi", false)).await;
    assert_eq!(resp.status(), 200);
    let msg: Value = resp.json().await.unwrap();
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["role"], "assistant");
    assert_eq!(msg["model"], "claude-test");
    assert_eq!(msg["stop_reason"], "tool_use");
    assert_eq!(
        msg["content"][0],
        json!({"type": "text", "text": "looking"})
    );
    assert_eq!(
        msg["content"][1],
        json!({"type": "tool_use", "id": "tu_9", "name": "read_file", "input": {"path": "a"}})
    );
    assert_eq!(msg["usage"]["input_tokens"], 10);
    assert_eq!(msg["usage"]["output_tokens"], 5);
}

#[tokio::test]
async fn routes_by_first_user_message() {
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("alpha".into()),
        vec![Reply::text("A1"), Reply::text("A2")],
    );
    server.route(
        Match::FirstUserContains("beta".into()),
        vec![Reply::text("B1")],
    );
    let text = |v: Value| v["content"][0]["text"].as_str().unwrap().to_owned();
    let beta = post(&server, &request_body("task beta", false)).await;
    assert_eq!(text(beta.json().await.unwrap()), "B1");
    let a1 = post(&server, &request_body("task alpha", false)).await;
    assert_eq!(text(a1.json().await.unwrap()), "A1");
    let a2 = post(&server, &request_body("task alpha", false)).await;
    assert_eq!(text(a2.json().await.unwrap()), "A2");
    assert_eq!(server.pending_replies(), 0);

    // Out of replies: answered 500 and flagged.
    let none = post(&server, &request_body("task beta", false)).await;
    assert_eq!(none.status(), 500);
    let err: Value = none.json().await.unwrap();
    assert_eq!(err["error"]["type"], "api_error");
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no scripted reply for request 3"));
    let v = server.take_violations();
    assert_eq!(v.len(), 1);
    assert!(
        v[0].starts_with("request 3:") && v[0].contains("task beta"),
        "{v:?}"
    );
}

#[tokio::test]
async fn error_status_with_retry_after() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::error_status(429, "rate_limit_error", "slow down").retry_after(7)],
    );
    let resp = post(&server, &request_body("hi", true)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"].to_str().unwrap(), "7");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    );
}

#[tokio::test]
async fn stream_error_and_raw_sse() {
    let server = MockServer::start().await;
    let raw = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    server.route(
        Match::Any,
        vec![
            Reply::stream_error("overloaded_error", "busy"),
            Reply::raw_sse(raw),
            Reply::stream_error("overloaded_error", "busy"),
        ],
    );
    let events = parse_sse(
        &post(&server, &request_body("hi", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(names(&events), ["message_start", "ping", "error"]);
    assert_eq!(events[2].1["error"]["type"], "overloaded_error");
    let resp = post(&server, &request_body("hi", true)).await;
    assert_eq!(resp.text().await.unwrap(), raw);
    // Not streaming: the HTTP status the API uses for that error.
    let resp = post(&server, &request_body("hi", false)).await;
    assert_eq!(resp.status(), 529);
}

#[tokio::test]
async fn truncated_stream_ends_cleanly_early() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text("some long answer").truncated(4),
            Reply::text("some long answer").truncated(4),
        ],
    );
    let resp = post(&server, &request_body("hi", true)).await;
    assert_eq!(resp.status(), 200);
    let events = parse_sse(&resp.text().await.unwrap());
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta"
        ]
    );
    // Not streaming: the JSON body is cut in half.
    let resp = post(&server, &request_body("hi", false)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.starts_with('{') && text.len() > 20, "{text}");
    assert!(serde_json::from_str::<Value>(&text).is_err());
}

#[tokio::test]
async fn dropped_stream_is_a_body_error() {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("answer").drop_connection(2)]);
    let mut resp = post(&server, &request_body("hi", true)).await;
    assert_eq!(resp.status(), 200);
    let mut got = Vec::new();
    let err = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => got.extend_from_slice(&chunk),
            Ok(None) => panic!("body ended cleanly"),
            Err(e) => break e,
        }
    };
    assert!(err.is_body() || err.is_decode(), "{err:?}");
    assert_eq!(
        names(&parse_sse(&String::from_utf8_lossy(&got))),
        ["message_start", "ping"]
    );

    // Zero events: the headers still arrive, then the body breaks.
    server.route(Match::Any, vec![Reply::text("answer").drop_connection(0)]);
    let resp = post(&server, &request_body("hi", true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.is_err());
}

#[tokio::test]
async fn stalled_stream_holds_until_client_gives_up() {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("answer").stall(2)]);
    let mut resp = post(&server, &request_body("hi", true)).await;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("event: message_start"));
    let started = Instant::now();
    let mut got = Vec::new();
    let waited = tokio::time::timeout(Duration::from_millis(400), async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            got.extend_from_slice(&chunk);
        }
    })
    .await;
    assert!(waited.is_err(), "stream ended instead of stalling");
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Only the ping came after message_start.
    assert_eq!(parse_sse(&String::from_utf8_lossy(&got)).len(), 1);
    assert_eq!(server.in_flight(), 1);
    drop(resp);
    // The server notices the client leaving and stops counting the request.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.in_flight() != 0 {
        assert!(Instant::now() < deadline, "stalled request never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barrier_opens_with_three_concurrent_requests() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("one"), Reply::text("two"), Reply::text("three")],
    );
    server.hold_until_in_flight(3, Duration::from_secs(10));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let client = server.clone();
        tasks.push(tokio::spawn(async move {
            post(&client, &request_body("hi", false)).await.status()
        }));
        // The next is sent once this one waits at the barrier, so the first ones really are
        // held.
        if i < 2 {
            assert!(
                eventually(|| server.in_flight() == i + 1).await,
                "request {i} was not held"
            );
        }
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.max_in_flight(), 3);

    // Once open it stays open: a lone request now goes straight through.
    server.route(Match::Any, vec![Reply::text("four")]);
    assert_eq!(
        post(&server, &request_body("hi", false)).await.status(),
        200
    );
}

#[tokio::test]
async fn barrier_times_out_with_one_request() {
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(Match::Any, vec![Reply::text("never sent")]);
    server.hold_until_in_flight(2, Duration::from_millis(300));
    let started = Instant::now();
    let resp = post(&server, &request_body("hi", false)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(resp.status(), 500);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "api_error",
            "message": "barrier timed out: only 1 of 2 requests in flight"}})
    );
    assert_eq!(
        server.take_violations(),
        ["request 0: barrier timed out: only 1 of 2 requests in flight"]
    );
    // The reply was not used up.
    assert_eq!(server.pending_replies(), 1);
}

#[tokio::test]
async fn protocol_violation_answered_400() {
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(Match::Any, vec![Reply::text("unused")]);
    let body = json!({
        "model": "claude-test",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}]},
            {"role": "user", "content": "I forgot the tool result"}
        ]
    });
    // No anthropic-version header either.
    let resp = cadre_testkit::http_client()
        .post(format!("{}/v1/messages", server.uri()))
        .header("x-api-key", "k")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["type"], "invalid_request_error");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("anthropic-version"), "{message}");
    assert!(message.contains("t1"), "{message}");
    let v = server.take_violations();
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().all(|s| s.starts_with("request 0: ")));
    assert_eq!(server.pending_replies(), 1);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn unknown_path_is_flagged() {
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let resp = cadre_testkit::http_client()
        .post(format!("{}/v1/complete", server.uri()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(server.take_violations().len(), 1);
}

#[tokio::test]
async fn models_and_props_answer_what_was_set() {
    let server = MockServer::start().await;
    let get = |path: &str| {
        cadre_testkit::http_client()
            .get(format!("{}{path}", server.uri()))
            .bearer_auth("test-key")
            .send()
    };
    // Unset: 404, and no violation (clients may probe these).
    assert_eq!(get("/v1/models").await.unwrap().status(), 404);
    assert_eq!(get("/props").await.unwrap().status(), 404);
    let models = json!({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]});
    let props = json!({"default_generation_settings": {"n_ctx": 8192}});
    server.set_models(models.clone());
    server.set_props(props.clone());
    let resp = get("/v1/models").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap(), models);
    let resp = get("/props").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap(), props);
    let seen = server.info_requests();
    let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/v1/models", "/props", "/v1/models", "/props"]);
    assert_eq!(seen[0].header("Authorization"), Some("Bearer test-key"));
    assert!(server.requests().is_empty());
}

/// The server has its own thread, so a test blocking its current_thread runtime (as when
/// waiting on a child process) still gets answers.
#[tokio::test]
async fn serves_while_the_test_thread_blocks() {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("blocking ok")]);
    let body = request_body("hi", false).to_string();
    let addr = server.uri().trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("blocking ok"));
}

/// Waits (up to 5 s) until `cond` holds on the server; false if it never does.
async fn eventually(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_holds_matching_requests_until_opened() {
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("held".into()),
        vec![Reply::text("one"), Reply::text("two"), Reply::text("three")],
    );
    server.route(
        Match::FirstUserContains("free".into()),
        vec![Reply::text("free")],
    );
    let gate = server.gate(Match::FirstUserContains("held".into()));
    assert_eq!(gate.waiting(), 0);
    assert!(!gate.wait_for(1, Duration::from_millis(100)).await);

    let held: Vec<_> = (0..2)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move {
                let resp = post(&server, &request_body("held", false)).await;
                let body: Value = resp.json().await.unwrap();
                body["content"][0]["text"].as_str().unwrap().to_owned()
            })
        })
        .collect();
    assert!(gate.wait_for(2, Duration::from_secs(10)).await);
    assert_eq!(gate.waiting(), 2);
    // Held requests are captured, unanswered, and take no reply yet.
    assert_eq!(server.requests().len(), 2);
    assert!(server.requests().iter().all(|c| !c.completed));
    assert_eq!(server.pending_replies(), 4);
    assert!(held.iter().all(|t| !t.is_finished()));

    // Other traffic passes while the gate is closed.
    let resp = post(&server, &request_body("free", false)).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap();
    assert_eq!(gate.waiting(), 2);

    gate.open();
    assert!(gate.is_open());
    let mut texts = Vec::new();
    for t in held {
        texts.push(t.await.unwrap());
    }
    texts.sort();
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(gate.waiting(), 0);

    // Open stays open: a later matching request goes straight through.
    let resp = post(&server, &request_body("held", false)).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap();
    assert!(eventually(|| server.requests().iter().all(|c| c.completed)).await);
}

#[tokio::test]
async fn a_held_request_whose_client_leaves_is_no_longer_counted() {
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("after")]);
    let gate = server.gate(Match::Any);
    let client = tokio::spawn({
        let server = server.clone();
        async move { post(&server, &request_body("hi", false)).await }
    });
    assert!(gate.wait_for(1, Duration::from_secs(10)).await);
    client.abort();
    let _ = client.await;
    assert!(
        eventually(|| gate.waiting() == 0).await,
        "the gone client is still counted as held"
    );
    // The server is not wedged, and the gone request used no reply.
    gate.open();
    assert_eq!(server.pending_replies(), 1);
    let resp = post(&server, &request_body("hi", false)).await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], "after");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0].completed);
    assert!(eventually(|| server.requests()[1].completed).await);
}

#[tokio::test]
async fn completed_only_when_the_whole_body_went_out() {
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text("streamed"),
            Reply::text("json"),
            Reply::text("stalled").stall(2),
            Reply::text("dropped").drop_connection(2),
        ],
    );
    // A whole stream, then a whole JSON body.
    let text = post(&server, &request_body("hi", true))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.contains("message_stop"), "{text}");
    post(&server, &request_body("hi", false))
        .await
        .text()
        .await
        .unwrap();
    assert!(eventually(|| server.requests().iter().all(|c| c.completed)).await);

    // A stream whose client leaves mid-way stays incomplete.
    let mut resp = post(&server, &request_body("hi", true)).await;
    resp.chunk().await.unwrap().unwrap();
    assert!(!server.requests()[2].completed);
    drop(resp);
    assert!(eventually(|| server.in_flight() == 0).await);
    // And so does one the server broke off.
    let resp = post(&server, &request_body("hi", true)).await;
    assert!(resp.text().await.is_err());
    assert!(eventually(|| server.in_flight() == 0).await);
    let completed: Vec<bool> = server.requests().iter().map(|c| c.completed).collect();
    assert_eq!(completed, [true, true, false, false]);
}

/// The Restate server and HAProxy of the engine's tests.
#[path = "testkit/restate.rs"]
mod restate;

/// Drives the `cadre-test-mcp` server with rmcp's own client, over stdio and streamable HTTP.
mod mcp {
    use std::collections::BTreeSet;
    use std::future::Future;
    use std::path::Path;
    use std::process::Stdio;
    use std::sync::Arc;
    use std::time::Duration;

    use cadre_testkit::mcp::RED_PIXEL_PNG_BASE64;
    use cadre_testkit::{mcp_server_binary, McpHttpServer};
    use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
    use rmcp::service::RunningService;
    use rmcp::transport::common::client_side_sse::NeverRetry;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
    use rmcp::{RoleClient, ServiceExt};
    use serde_json::{json, Value};

    type Client = RunningService<RoleClient, ()>;

    /// Every step of these tests is bounded, so a broken server fails instead of hanging.
    const STEP: Duration = Duration::from_secs(30);

    async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
        tokio::time::timeout(STEP, fut)
            .await
            .unwrap_or_else(|_| panic!("{what} took longer than {STEP:?}"))
    }

    fn command(args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(mcp_server_binary());
        command.args(args).kill_on_drop(true);
        command
    }

    async fn stdio_client(command: tokio::process::Command) -> (Client, u32) {
        let transport = TokioChildProcess::new(command).unwrap();
        let pid = transport.id().unwrap();
        let client = bounded("stdio initialize", ().serve(transport))
            .await
            .unwrap();
        (client, pid)
    }

    async fn http_client(server: &McpHttpServer) -> Client {
        // rmcp's default policy reconnects a broken response stream forever, so a call
        // pending on a dead server would never fail; give up at once instead.
        let mut config = StreamableHttpClientTransportConfig::with_uri(server.url());
        config.retry_config = Arc::new(NeverRetry::default());
        // The workspace builds reqwest 0.13 with rustls but no default crypto provider
        // (cadre-mcp configures its own); rmcp's default client needs one installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let transport = StreamableHttpClientTransport::from_config(config);
        bounded("http initialize", ().serve(transport))
            .await
            .unwrap()
    }

    async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        bounded(tool, client.call_tool(params)).await.unwrap()
    }

    fn texts(result: &CallToolResult) -> Vec<&str> {
        result
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn only_text(result: &CallToolResult) -> &str {
        assert_eq!(result.content.len(), 1, "{result:?}");
        texts(result)[0]
    }

    fn log_lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Minimal standard base64 decoder, enough to check the image bytes.
    fn base64_decode(text: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let (mut buffer, mut bits) = (0u32, 0);
        for byte in text.bytes().filter(|b| *b != b'=') {
            let value = ALPHABET.iter().position(|a| *a == byte).unwrap() as u32;
            buffer = (buffer << 6) | value;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((buffer >> bits) as u8);
            }
        }
        out
    }

    /// What every transport must show: the tool list with schemas and each tool's result.
    async fn check_tools(client: &Client) {
        let tools = bounded("tools/list", client.list_all_tools())
            .await
            .unwrap();
        let names: BTreeSet<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let expected = [
            "add",
            "crash",
            "echo",
            "env",
            "env_names",
            "fail",
            "hang",
            "image",
        ];
        assert_eq!(names, expected.into_iter().collect::<BTreeSet<_>>());
        for tool in &tools {
            assert!(
                tool.description.is_some(),
                "{} has no description",
                tool.name
            );
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
        }
        let add = tools.iter().find(|t| t.name == "add").unwrap();
        let schema = Value::Object((*add.input_schema).clone());
        assert_eq!(schema["properties"]["a"]["type"], "integer", "{schema}");
        assert_eq!(schema["properties"]["b"]["type"], "integer", "{schema}");
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        required.sort();
        assert_eq!(required, ["a", "b"]);
        let echo = tools.iter().find(|t| t.name == "echo").unwrap();
        assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");

        let echoed = call(client, "echo", json!({"text": "hi there"})).await;
        assert_eq!(only_text(&echoed), "echo: hi there");
        assert_ne!(echoed.is_error, Some(true));

        let sum = call(client, "add", json!({"a": 40, "b": -2})).await;
        assert_eq!(only_text(&sum), "38");

        let image = call(client, "image", json!({})).await;
        assert_eq!(image.content.len(), 2, "{image:?}");
        assert_eq!(texts(&image), ["a red pixel"]);
        let ContentBlock::Image(picture) = &image.content[1] else {
            panic!("second block is not an image: {image:?}")
        };
        assert_eq!(picture.mime_type, "image/png");
        assert_eq!(picture.data, RED_PIXEL_PNG_BASE64);
        let png = base64_decode(&picture.data);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(&png[16..24], &[0, 0, 0, 1, 0, 0, 0, 1], "not 1x1");

        let unset = call(client, "env", json!({"name": "CADRE_TEST_MCP_NEVER_SET"})).await;
        assert_eq!(only_text(&unset), "(unset)");
        let path = call(client, "env", json!({"name": "PATH"})).await;
        assert_eq!(only_text(&path), std::env::var("PATH").unwrap());
        let names = call(client, "env_names", json!({})).await;
        let names: Vec<&str> = only_text(&names).lines().collect();
        assert!(names.contains(&"PATH"), "{names:?}");
        assert!(
            names.windows(2).all(|w| w[0] <= w[1]),
            "not sorted: {names:?}"
        );

        let failed = call(client, "fail", json!({"message": "it broke"})).await;
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(only_text(&failed), "it broke");

        // Bad arguments are refused, not answered with a sum.
        let params = CallToolRequestParams::new("add")
            .with_arguments(json!({"a": "x"}).as_object().unwrap().clone());
        let refused = bounded("add with bad args", client.call_tool(params)).await;
        assert!(
            refused.is_err() || refused.as_ref().unwrap().is_error == Some(true),
            "{refused:?}"
        );
    }

    /// Other crates' tests find the binary next to their own executable.
    #[test]
    fn binary_is_found_next_to_the_test() {
        let found = mcp_server_binary().canonicalize().unwrap();
        let built = Path::new(env!("CARGO_BIN_EXE_cadre-test-mcp"))
            .canonicalize()
            .unwrap();
        assert_eq!(found, built);
    }

    #[tokio::test]
    async fn stdio_serves_all_tools() {
        let mut command = command(&["--name", "stdio-one"]);
        command.env("CADRE_TEST_MCP_VAR", "forty two");
        let (client, _pid) = stdio_client(command).await;
        let info = client.peer_info().unwrap();
        assert_eq!(info.server_info.as_ref().unwrap().name, "stdio-one");
        assert!(info.capabilities.tools.is_some());
        check_tools(&client).await;
        let var = call(&client, "env", json!({"name": "CADRE_TEST_MCP_VAR"})).await;
        assert_eq!(only_text(&var), "forty two");
        bounded("stdio shutdown", client.cancel()).await.unwrap();
    }

    #[tokio::test]
    async fn http_serves_all_tools() {
        let server = McpHttpServer::spawn(&["--name", "http-one"]);
        assert!(server.url().starts_with("http://127.0.0.1:"));
        assert!(server.url().ends_with("/mcp"));
        let client = http_client(&server).await;
        let info = client.peer_info().unwrap();
        assert_eq!(info.server_info.as_ref().unwrap().name, "http-one");
        check_tools(&client).await;
        // A second client gets its own session on the same server.
        let other = http_client(&server).await;
        let echoed = call(&other, "echo", json!({"text": "two"})).await;
        assert_eq!(only_text(&echoed), "echo: two");
        bounded("http shutdown", client.cancel()).await.unwrap();
        bounded("http shutdown", other.cancel()).await.unwrap();
    }

    #[tokio::test]
    async fn default_name_is_cadre_test() {
        let (client, _pid) = stdio_client(command(&[])).await;
        let info = client.peer_info().unwrap();
        assert_eq!(info.server_info.as_ref().unwrap().name, "cadre-test");
        bounded("stdio shutdown", client.cancel()).await.unwrap();
    }

    #[tokio::test]
    async fn stdio_log_records_start_and_calls() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.log");
        let (client, pid) = stdio_client(command(&["--log", log.to_str().unwrap()])).await;
        call(&client, "echo", json!({"text": "logged"})).await;
        call(&client, "add", json!({"a": 1, "b": 2})).await;
        bounded("stdio shutdown", client.cancel()).await.unwrap();
        // A second server appends to the same log.
        let (client, pid2) = stdio_client(command(&["--log", log.to_str().unwrap()])).await;
        bounded("stdio shutdown", client.cancel()).await.unwrap();
        assert_eq!(
            log_lines(&log),
            [
                format!("start {pid}"),
                r#"call echo {"text":"logged"}"#.to_owned(),
                r#"call add {"a":1,"b":2}"#.to_owned(),
                format!("start {pid2}"),
            ]
        );
    }

    #[tokio::test]
    async fn http_log_records_start_and_calls() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.log");
        let server = McpHttpServer::spawn(&["--log", log.to_str().unwrap()]);
        // The start line is written before the server says it is listening.
        assert_eq!(log_lines(&log), [format!("start {}", server.pid())]);
        let client = http_client(&server).await;
        call(&client, "fail", json!({"message": "noted"})).await;
        bounded("http shutdown", client.cancel()).await.unwrap();
        assert_eq!(
            log_lines(&log),
            [
                format!("start {}", server.pid()),
                r#"call fail {"message":"noted"}"#.to_owned(),
            ]
        );
    }

    #[tokio::test]
    async fn stdio_crash_ends_the_process_and_the_call() {
        let mut child = command(&[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let client = bounded("stdio initialize", ().serve((stdout, stdin)))
            .await
            .unwrap();
        let params = CallToolRequestParams::new("crash");
        let answer = bounded("crash call", client.call_tool(params)).await;
        assert!(answer.is_err(), "crash answered: {answer:?}");
        let status = bounded("crashed server exit", child.wait()).await.unwrap();
        assert_eq!(status.code(), Some(3));
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
            .await
            .unwrap();
        assert_eq!(text, "crashing on purpose\n");
    }

    #[tokio::test]
    async fn http_crash_ends_the_process_and_the_call() {
        let mut server = McpHttpServer::spawn(&[]);
        let client = http_client(&server).await;
        let params = CallToolRequestParams::new("crash");
        let answer = bounded("crash call", client.call_tool(params)).await;
        assert!(answer.is_err(), "crash answered: {answer:?}");
        let status = server.wait_exit(STEP).expect("server still running");
        assert_eq!(status.code(), Some(3));
    }

    #[tokio::test]
    async fn hang_never_answers() {
        let (client, _pid) = stdio_client(command(&[])).await;
        let params = CallToolRequestParams::new("hang");
        let waited =
            tokio::time::timeout(Duration::from_millis(500), client.call_tool(params)).await;
        assert!(waited.is_err(), "hang answered: {waited:?}");
        // The server still serves other calls meanwhile.
        let echoed = call(&client, "echo", json!({"text": "still here"})).await;
        assert_eq!(only_text(&echoed), "echo: still here");
        // Dropping kills the server; a graceful close would wait for rmcp's drain of the
        // pending call (seconds).
        drop(client);
    }

    #[test]
    fn fail_start_exits_1_with_the_message() {
        let output = std::process::Command::new(mcp_server_binary())
            .args(["--fail-start", "no config for you"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            "no config for you\n"
        );
        assert!(output.stdout.is_empty());
    }

    #[tokio::test]
    async fn fail_start_fails_stdio_initialize() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.log");
        let command = command(&["--fail-start", "bad", "--log", log.to_str().unwrap()]);
        let (transport, _stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let client = bounded("initialize of a failed server", ().serve(transport)).await;
        assert!(client.is_err());
        // It never got as far as starting.
        assert!(log_lines(&log).is_empty());
    }

    #[test]
    fn fail_start_fails_http_spawn() {
        let err = McpHttpServer::try_spawn(&["--fail-start", "no port for you"]).unwrap_err();
        assert!(err.contains("no listening line"), "{err}");
        assert!(err.contains("exit status: 1"), "{err}");
    }
}

#[test]
fn a_server_dropped_with_unused_replies_or_violations_fails_the_test() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(MockServer::start());
    server.route(Match::Any, vec![Reply::text("never asked for")]);
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(server)));
    let message = failed.expect_err("an unused reply must fail the test");
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("never requested"), "{text}");

    // Opted out, the same leftover passes.
    let server = rt.block_on(MockServer::start());
    server.route(Match::Any, vec![Reply::text("never asked for")]);
    server.allow_unused_replies();
    drop(server);
}
