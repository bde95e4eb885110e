use super::*;

/// Tool input that is not JSON is the model's mistake: it gets an `is_error` result naming
/// the text, the call never runs, the event shows `{}`, and the history sent back holds
/// a valid block with no note of cadre's in it.
#[tokio::test]
async fn tool_input_that_is_not_json_is_answered_with_an_error_and_never_run() {
    use cadre_testkit::sse;
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let usage = cadre_testkit::Usage::default();
    let bad = [
        sse::message_start("msg_1", "claude-sonnet-5-5", &usage),
        sse::content_block_start(
            0,
            &json!({"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}}),
        ),
        sse::input_json_delta(0, "{\"path\": \"a.txt\", \"content\": "),
        sse::content_block_stop(0),
        sse::message_delta("tool_use", 5),
        sse::message_stop(),
    ];
    server.route(
        Match::Any,
        vec![Reply::raw_sse(&bad.concat()), Reply::text("sorry")],
    );
    let run = run_with(&server, dir.path(), 5, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    assert!(!dir.path().join("a.txt").exists());
    let results = tool_results(&server, 1);
    assert_eq!(results[0]["is_error"], true);
    let why = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(
        why.starts_with("invalid input for `write_file`: the arguments were not valid JSON: ")
            && why.ends_with("the text was: {\"path\": \"a.txt\", \"content\": "),
        "{why}"
    );
    let sent = server.requests()[1].messages()[1]["content"][0].clone();
    assert_eq!(
        sent,
        json!({"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}})
    );
    let call = run
        .events
        .iter()
        .find_map(|e| match e {
            Event::ToolCall { input, .. } => Some(input.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(call, json!({}));
}

#[tokio::test]
async fn tool_round_trip_reads_a_file_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the secret is 42\n").unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("toolu_1", "read_file", json!({"path": "notes.txt"})),
            Reply::text("The secret is 42."),
        ],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    assert_eq!(run.outcome.text, "The secret is 42.");
    assert_eq!(run.outcome.turns, 2);
    assert_eq!(run.outcome.tool_calls, 1);
    let results = tool_results(&server, 1);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert!(results[0]["content"]
        .to_string()
        .contains("the secret is 42"));
    assert!(results[0].get("is_error").is_none_or(|v| v == false));
    assert!(run
        .events
        .iter()
        .any(|e| matches!(e, Event::ToolCall { name, .. } if name == "read_file")));
    assert!(matches!(
        run.events.last(),
        Some(Event::Finished {
            stop: StopKind::Done,
            ..
        })
    ));
}

#[tokio::test]
async fn two_tool_calls_in_one_turn_are_answered_in_one_message_in_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "beta\n").unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                ("toolu_a", "read_file", json!({"path": "a.txt"})),
                ("toolu_b", "grep", json!({"pattern": "beta"})),
            ])
            .with_text_before("Reading both."),
            Reply::text("alpha and beta"),
        ],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    assert_eq!(server.requests().len(), 2);
    let results = tool_results(&server, 1);
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["toolu_a", "toolu_b"]);
    assert!(results[0]["content"].to_string().contains("alpha"));
    assert!(results[1]["content"].to_string().contains("b.txt"));
    // The assistant turn went back whole: its text and both calls.
    let requests = server.requests();
    let assistant = &requests[1].messages()[1];
    assert_eq!(assistant["content"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn every_stop_reason_is_handled() {
    let cases = [
        ("end_turn", StopKind::Done),
        ("stop_sequence", StopKind::Done),
        ("max_tokens", StopKind::MaxTokens),
        ("refusal", StopKind::Refusal),
        (
            "model_context_window_exceeded",
            StopKind::ContextWindowExceeded,
        ),
        (
            "brand_new_reason",
            StopKind::Other("brand_new_reason".into()),
        ),
    ];
    for (reason, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![Reply::text("partial answer").stop_reason(reason)],
        );
        let run = run_with(&server, dir.path(), 10, None).await;
        assert_eq!(run.outcome.stop, want, "stop reason {reason}");
        assert_eq!(run.outcome.text, "partial answer", "stop reason {reason}");
        assert_eq!(server.requests().len(), 1, "stop reason {reason}");
    }
}

#[tokio::test]
async fn pause_turn_is_sent_back_and_continued_as_one_assistant_turn() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text("working on it").stop_reason("pause_turn"),
            Reply::tool_use("toolu_1", "bash", json!({"command": "true"})),
            Reply::text("finished"),
        ],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    assert_eq!(run.outcome.text, "finished");
    let requests = server.requests();
    // The paused response went back as is, as the last message.
    let last = requests[1].messages().last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][0]["text"], "working on it");
    // Its continuation joined the same assistant turn: roles still alternate.
    let third = requests[2].messages();
    assert_eq!(third.len(), 3);
    assert_eq!(third[1]["content"][0]["text"], "working on it");
    assert_eq!(third[1]["content"][1]["name"], "bash");
    // A command with no output still answers with a non-empty text block.
    assert_eq!(third[2]["content"][0]["content"][0]["text"], "(no output)");
}

#[tokio::test]
async fn old_tool_results_are_cleared_near_the_context_window() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "a large file\n").unwrap();
    let server = MockServer::start().await;
    // Every response reports 900 tokens of a 1,000-token window: past the 80% mark.
    let mut replies: Vec<Reply> = (0..4)
        .map(|i| {
            Reply::tool_use(
                &format!("toolu_{i}"),
                "read_file",
                json!({"path": "big.txt"}),
            )
            .usage(880, 20, 0, 0)
        })
        .collect();
    replies.push(Reply::text("done"));
    server.route(Match::Any, replies);
    let (mut tight, _) = agent(&server, dir.path(), 10, None);
    tight.config.context_tokens = 1000;
    let outcome = tight
        .run(vec![Message::user_text("read it four times")])
        .await;
    assert_eq!(outcome.stop, StopKind::Done);
    let last = server.requests().pop().unwrap();
    let results: Vec<String> = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "user" && m["content"][0]["type"] == "tool_result")
        .map(|m| {
            m["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(
        results[0].contains("output cleared") && results[1].contains("output cleared"),
        "{results:?}"
    );
    assert!(
        results[2].contains("a large file") && results[3].contains("a large file"),
        "{results:?}"
    );

    // Far from the window, nothing is cleared.
    let server = MockServer::start().await;
    let mut replies: Vec<Reply> = (0..4)
        .map(|i| {
            Reply::tool_use(
                &format!("toolu_{i}"),
                "read_file",
                json!({"path": "big.txt"}),
            )
        })
        .collect();
    replies.push(Reply::text("done"));
    server.route(Match::Any, replies);
    let (roomy, _) = agent(&server, dir.path(), 10, None);
    roomy
        .run(vec![Message::user_text("read it four times")])
        .await;
    let last = server.requests().pop().unwrap();
    assert!(!serde_json::to_string(&last.body)
        .unwrap()
        .contains("output cleared"));
}

#[tokio::test]
async fn max_turns_stops_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let replies = (0..5)
        .map(|i| Reply::tool_use(&format!("toolu_{i}"), "list_files", json!({})))
        .collect();
    server.route(Match::Any, replies);
    let run = run_with(&server, dir.path(), 3, None).await;
    assert_eq!(run.outcome.stop, StopKind::MaxTurns);
    assert_eq!(run.outcome.turns, 3);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn the_token_budget_stops_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let replies = (0..5)
        .map(|i| {
            Reply::tool_use(&format!("toolu_{i}"), "list_files", json!({})).usage(400, 100, 0, 0)
        })
        .collect();
    server.route(Match::Any, replies);
    // 500 tokens a turn: the budget of 1200 is crossed by the third response.
    let run = run_with(&server, dir.path(), 50, Some(1200)).await;
    assert_eq!(run.outcome.stop, StopKind::Budget);
    assert_eq!(server.requests().len(), 3);
    assert_eq!(run.outcome.usage.total(), 1500);
}

#[tokio::test]
async fn thinking_blocks_go_back_verbatim() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::blocks(vec![
                Block::Thinking {
                    thinking: "Let me list the files.".into(),
                    signature: "c2lnbmF0dXJl==".into(),
                },
                Block::RedactedThinking("b3BhcXVl".into()),
                Block::Raw(json!({"type": "future_block", "payload": {"x": 1}})),
                Block::ToolUse {
                    id: "toolu_1".into(),
                    name: "list_files".into(),
                    input: json!({}),
                },
            ]),
            Reply::text("done"),
        ],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    let requests = server.requests();
    let assistant = &requests[1].messages()[1];
    let content = assistant["content"].as_array().unwrap();
    assert_eq!(
        content[0],
        json!({"type": "thinking", "thinking": "Let me list the files.", "signature": "c2lnbmF0dXJl=="})
    );
    assert_eq!(
        content[1],
        json!({"type": "redacted_thinking", "data": "b3BhcXVl"})
    );
    assert_eq!(
        content[2],
        json!({"type": "future_block", "payload": {"x": 1}})
    );
}

#[tokio::test]
async fn bad_tool_calls_become_error_results_that_say_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inside.txt"), "ok\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "no\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        dir.path().join("link.txt"),
    )
    .unwrap();
    let abs = outside.path().join("secret.txt").display().to_string();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                ("t_unknown", "launch_rockets", json!({})),
                ("t_missing", "read_file", json!({})),
                ("t_type", "read_file", json!({"path": 7})),
                ("t_dotdot", "read_file", json!({"path": "../secret.txt"})),
                ("t_abs", "read_file", json!({"path": abs})),
                ("t_link", "read_file", json!({"path": "link.txt"})),
                (
                    "t_write_out",
                    "write_file",
                    json!({"path": "../escape.txt", "content": "x"}),
                ),
            ]),
            Reply::text("understood"),
        ],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    let results = tool_results(&server, 1);
    assert_eq!(results.len(), 7);
    for r in &results {
        assert_eq!(r["is_error"], true, "{r}");
    }
    let text = |i: usize| results[i]["content"].to_string();
    assert!(
        text(0).contains("unknown tool") && text(0).contains("read_file"),
        "{}",
        text(0)
    );
    assert!(text(1).contains("path"), "{}", text(1));
    assert!(text(2).contains("invalid"), "{}", text(2));
    for i in 3..7 {
        assert!(text(i).contains("outside the workspace"), "{}", text(i));
    }
    assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
}

#[tokio::test]
async fn a_failing_api_stops_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::error_status(
            400,
            "invalid_request_error",
            "max_tokens: must be positive",
        )],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    match &run.outcome.stop {
        StopKind::ModelError(msg) => assert!(msg.contains("max_tokens: must be positive"), "{msg}"),
        other => panic!("expected an API error, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn cancelling_stops_a_running_command() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::Any,
        vec![
            Reply::tool_use(
                "toolu_1",
                "bash",
                json!({"command": "echo $$ > pid; sleep 60"}),
            ),
            Reply::text("never reached"),
        ],
    );
    let (agent, _) = agent(&server, dir.path(), 10, None);
    let cancel = agent.ctx.cancel.clone();
    let pid_file = dir.path().join("pid");
    let watcher = tokio::spawn(async move {
        // Cancel once the command is really running; give up after 30 s so a bug fails the test.
        for _ in 0..3000 {
            if std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    });
    let outcome = agent.run(vec![Message::user_text("go")]).await;
    watcher.await.unwrap();
    assert_eq!(outcome.stop, StopKind::Cancelled);
    let pid: i32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the command survived"
    );
}
