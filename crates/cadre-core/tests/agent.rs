//! The agent loop end to end: the real Anthropic client and real tools against the shared

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! mock Messages API server on 127.0.0.1.

use cadre_core::{Agent, AgentConfig, AgentOutcome, Budget, Event, StopKind, ToolSet};
use cadre_model::{AnthropicConfig, AnthropicModel, Message, RetryPolicy};
use cadre_testkit::{Block, Match, MockServer, Reply};
use cadre_tools::{builtin_tools, ToolContext, Workspace};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Run {
    outcome: AgentOutcome,
    events: Vec<Event>,
}

fn agent(
    server: &MockServer,
    dir: &std::path::Path,
    max_turns: u32,
    budget: Option<u64>,
) -> (Agent, Arc<Mutex<Vec<Event>>>) {
    let mut config = AnthropicConfig::new("test-key");
    config.base_url = server.uri();
    config.retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    let model = AnthropicModel::new(config).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let agent = Agent {
        config: AgentConfig {
            path: "main".into(),
            agent_type: "main".into(),
            model: "claude-sonnet-5-5".into(),
            system: "You are a test agent.".into(),
            max_tokens: 1024,
            max_turns,
        },
        model: Arc::new(model),
        tools: ToolSet::new(builtin_tools()),
        ctx: ToolContext::new(Arc::new(Workspace::new(dir).unwrap())),
        budget: Budget::new(budget),
        events: Arc::new(move |e| sink.lock().unwrap().push(e)),
        limiter: None,
        transcript: None,
    };
    (agent, seen)
}

async fn run_with(
    server: &MockServer,
    dir: &std::path::Path,
    max_turns: u32,
    budget: Option<u64>,
) -> Run {
    let (agent, seen) = agent(server, dir, max_turns, budget);
    let outcome = agent.run(vec![Message::user_text("do the task")]).await;
    let events = seen.lock().unwrap().clone();
    Run { outcome, events }
}

/// The tool_result blocks of the user message of request `n`'s last message.
fn tool_results(server: &MockServer, n: usize) -> Vec<Value> {
    let req = &server.requests()[n];
    let last = req.messages().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    last["content"].as_array().unwrap().clone()
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
    server.assert_clean();
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
    server.assert_clean();
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
        server.assert_clean();
    }
}

#[tokio::test]
async fn pause_turn_is_sent_back_and_continued() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text("working on it").stop_reason("pause_turn"),
            Reply::text("finished"),
        ],
    );
    let run = run_with(&server, dir.path(), 10, None).await;
    assert_eq!(run.outcome.stop, StopKind::Done);
    assert_eq!(run.outcome.text, "finished");
    let second = &server.requests()[1];
    let last = second.messages().last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][0]["text"], "working on it");
    server.assert_clean();
}

#[tokio::test]
async fn max_turns_stops_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let replies = (0..5)
        .map(|i| Reply::tool_use(&format!("toolu_{i}"), "list_files", json!({})))
        .collect();
    server.route(Match::Any, replies);
    let run = run_with(&server, dir.path(), 3, None).await;
    assert_eq!(run.outcome.stop, StopKind::MaxTurns);
    assert_eq!(run.outcome.turns, 3);
    assert_eq!(server.requests().len(), 3);
    server.assert_clean();
}

#[tokio::test]
async fn the_token_budget_stops_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
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
    server.assert_clean();
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
    server.assert_clean();
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
    server.assert_clean();
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
