use super::*;

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
    next.messages.make_mut().push(resp.to_message());
    next.messages.make_mut().push(Message::user_text("thanks"));
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
