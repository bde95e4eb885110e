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

/// The real Anthropic client pointed at the mock, with `retries` quick retries.
fn mock_model(server: &MockServer, retries: u32) -> Arc<AnthropicModel> {
    let mut config = AnthropicConfig::new("test-key");
    config.base_url = server.uri();
    config.http.retry = RetryPolicy {
        max_retries: retries,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    Arc::new(AnthropicModel::new(config).unwrap())
}

/// A run in `dir` through the mock (no retries, default limits, no transcripts).
fn run_config(server: &MockServer, dir: &std::path::Path) -> cadre_core::RunConfig {
    let workspace = Arc::new(Workspace::new(dir).unwrap());
    cadre_core::RunConfig::new(workspace, mock_model(server, 0), "claude-sonnet-5-5")
}

fn agent(
    server: &MockServer,
    dir: &std::path::Path,
    max_turns: u32,
    budget: Option<u64>,
) -> (Agent, Arc<Mutex<Vec<Event>>>) {
    let model = mock_model(server, 2);
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
            context_tokens: 200_000,
            compact_at: None,
        },
        model,
        tools: ToolSet::new(builtin_tools()),
        ctx: ToolContext::new(Arc::new(Workspace::new(dir).unwrap())),
        budget: Budget::new(budget),
        events: Arc::new(move |e| sink.lock().unwrap().push(e)),
        limiter: None,
        transcript: None,
        journal: None,
        inbox: None,
        permissions: None,
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

// ---------------------------------------------------------------------------------------
// The orchestrator: typed subagents through the `Task` tool.

mod fleet {
    use super::*;
    use cadre_core::{AgentSpec, Limits, Mode, Orchestrator, Registry, RunSummary};

    const SUBAGENT: &str = "You are a subagent";

    fn orchestrator(
        server: &MockServer,
        dir: &std::path::Path,
        registry: Registry,
        limits: Limits,
        budget: Option<u64>,
    ) -> (Arc<Orchestrator>, Arc<Mutex<Vec<Event>>>) {
        let mut run = run_config(server, dir);
        run.limits = limits;
        run.budget_tokens = budget;
        run.runs_dir = Some(dir.join(".cadre/runs"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        (
            Orchestrator::new(
                registry,
                run,
                Arc::new(move |e| sink.lock().unwrap().push(e)),
            ),
            seen,
        )
    }

    async fn run(o: &Arc<Orchestrator>, prompt: &str) -> (AgentOutcome, RunSummary) {
        o.run("main", prompt).await.unwrap()
    }

    fn subagent_requests(server: &MockServer) -> Vec<cadre_testkit::Captured> {
        server
            .requests()
            .into_iter()
            .filter(|r| r.system_text().contains(SUBAGENT))
            .collect()
    }

    #[tokio::test]
    async fn four_subagents_overlap_stay_isolated_and_report_only_their_final_text() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        let calls = [
            ("t1", "explore", "Find alpha"),
            ("t2", "explore", "Find beta"),
            ("t3", "plan", "Plan gamma"),
            ("t4", "explore", "Find delta"),
        ];
        server.route(
            Match::FirstUserContains("PARENT TASK".into()),
            vec![Reply::tasks(calls), Reply::text("all four reported")],
        );
        server.route(
            Match::FirstUserContains("Find alpha".into()),
            vec![
                Reply::tool_use("a1", "list_files", json!({})),
                Reply::text("alpha lives in a.rs"),
            ],
        );
        server.route(
            Match::FirstUserContains("Find beta".into()),
            vec![Reply::text("beta lives in b.rs")],
        );
        server.route(
            Match::FirstUserContains("Plan gamma".into()),
            vec![Reply::text("1. do gamma")],
        );
        server.route(
            Match::FirstUserContains("Find delta".into()),
            vec![Reply::error_status(
                400,
                "invalid_request_error",
                "delta exploded",
            )],
        );
        // Each subagent's first request is held until all four wait at once: the test can
        // only pass if the four conversations really overlap, however slow the machine.
        server.hold_until_waiting(
            Match::SystemContains(SUBAGENT.into()),
            4,
            Duration::from_secs(60),
        );
        let (o, _) = orchestrator(
            &server,
            dir.path(),
            Registry::shipped(),
            Limits::default(),
            None,
        );
        let (outcome, summary) = run(&o, "PARENT TASK: survey the code").await;
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(outcome.text, "all four reported");

        // No subagent saw the parent's conversation: each starts from its own prompt alone.
        let subs = subagent_requests(&server);
        assert_eq!(subs.len(), 5);
        for r in &subs {
            assert!(!serde_json::to_string(&r.body["messages"])
                .unwrap()
                .contains("PARENT TASK"));
            let first = &r.messages()[0];
            assert_eq!(first["role"], "user");
            assert!(["Find alpha", "Find beta", "Plan gamma", "Find delta"]
                .contains(&r.first_user_text().as_str()));
        }
        // Read-only types are offered no writing tools, and no Task.
        for r in subs.iter().filter(|r| r.first_user_text() != "Plan gamma") {
            let tools = r.tool_names();
            assert!(tools.contains(&"read_file".to_string()), "{tools:?}");
            for banned in ["write_file", "edit_file", "Task"] {
                assert!(
                    !tools.contains(&banned.to_string()),
                    "explore offered {banned}: {tools:?}"
                );
            }
        }
        // The parent's tool results are exactly the subagents' final texts, in call order;
        // the failed one is an error that says why, and the others are intact.
        let parent_last = server
            .requests()
            .into_iter()
            .rfind(|r| r.first_user_text().contains("PARENT TASK"))
            .unwrap();
        let results = parent_last.messages().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .clone();
        let texts: Vec<String> = results
            .iter()
            .map(|r| r["content"][0]["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            texts[..3],
            ["alpha lives in a.rs", "beta lives in b.rs", "1. do gamma"]
        );
        for r in &results[..3] {
            assert!(r.get("is_error").is_none_or(|v| v == false));
        }
        assert_eq!(results[3]["is_error"], true);
        assert!(
            texts[3].contains("delta exploded") && texts[3].contains("main/explore#3"),
            "{}",
            texts[3]
        );

        // Usage rolls up per agent and per type; transcripts exist for every agent.
        assert_eq!(summary.usage.agents.len(), 5);
        assert_eq!(summary.usage.by_type["explore"].agents, 3);
        assert_eq!(summary.usage.by_type["plan"].agents, 1);
        let run_dir = dir.path().join(".cadre/runs").join(summary.run_id.unwrap());
        for name in [
            "main",
            "main.explore-1",
            "main.explore-2",
            "main.plan-1",
            "main.explore-3",
        ] {
            let text = std::fs::read_to_string(run_dir.join(format!("{name}.jsonl"))).unwrap();
            for line in text.lines() {
                serde_json::from_str::<Value>(line).unwrap();
            }
            assert!(
                text.lines()
                    .last()
                    .unwrap()
                    .contains("\"type\":\"outcome\""),
                "{name}"
            );
        }
        assert!(run_dir.join("summary.json").exists());
    }

    fn delegator() -> AgentSpec {
        AgentSpec {
            name: "delegator".into(),
            description: "Delegates further.".into(),
            mode: Mode::Subagent,
            model: "haiku".into(),
            tools: vec!["*".into()],
            disallowed_tools: vec![],
            read_only: false,
            network: true,
            max_turns: 5,
            skills: vec![],
            prompt: "Delegate.".into(),
            source: None,
            ..AgentSpec::default()
        }
    }

    #[tokio::test]
    async fn the_depth_limit_takes_task_away_and_unknown_types_are_errors() {
        for (max_depth, offered) in [(1u32, false), (2, true)] {
            let dir = tempfile::tempdir().unwrap();
            let server = MockServer::start().await;
            server.route(
                Match::FirstUserContains("PARENT".into()),
                vec![
                    Reply::tasks([("t1", "delegator", "Go deeper"), ("t2", "wizard", "Cast")]),
                    Reply::text("done"),
                ],
            );
            server.route(
                Match::FirstUserContains("Go deeper".into()),
                vec![Reply::text("deep enough")],
            );
            let mut registry = Registry::shipped();
            registry.insert(delegator());
            let limits = Limits {
                max_depth,
                ..Limits::default()
            };
            let (o, _) = orchestrator(&server, dir.path(), registry, limits, None);
            let (outcome, _) = run(&o, "PARENT").await;
            assert_eq!(outcome.stop, StopKind::Done);
            let sub = subagent_requests(&server).pop().unwrap();
            assert_eq!(
                sub.tool_names().contains(&"Task".to_string()),
                offered,
                "max_depth {max_depth}"
            );
            assert_eq!(sub.body["model"], "claude-haiku-5-5");
            let parent_last = server
                .requests()
                .into_iter()
                .rfind(|r| r.first_user_text() == "PARENT")
                .unwrap();
            let results = parent_last.messages().last().unwrap()["content"].clone();
            assert_eq!(results[0]["content"][0]["text"], "deep enough");
            assert_eq!(results[1]["is_error"], true);
            let why = results[1]["content"][0]["text"].as_str().unwrap();
            assert!(
                why.contains("unknown subagent_type \"wizard\"") && why.contains("explore"),
                "{why}"
            );
        }
    }

    #[tokio::test]
    async fn max_parallel_one_serialises_every_request() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        let calls: Vec<_> = (1..=4)
            .map(|i| (format!("t{i}"), "explore".to_owned(), format!("Job {i}")))
            .collect();
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![Reply::tasks(calls), Reply::text("done")],
        );
        for i in 1..=4 {
            server.route(
                Match::FirstUserContains(format!("Job {i}")),
                vec![
                    Reply::tool_use(&format!("l{i}"), "list_files", json!({})),
                    Reply::text(&format!("job {i} done")),
                ],
            );
        }
        let limits = Limits {
            max_parallel: 1,
            ..Limits::default()
        };
        let (o, _) = orchestrator(&server, dir.path(), Registry::shipped(), limits, None);
        let (outcome, summary) = run(&o, "PARENT").await;
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(summary.usage.agents.len(), 5);
        assert_eq!(server.requests().len(), 2 + 4 * 2);
        assert_eq!(server.max_in_flight(), 1);
    }

    #[tokio::test]
    async fn the_shared_budget_stops_the_whole_tree() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.allow_unused_replies();
        let calls: Vec<_> = (1..=2)
            .map(|i| (format!("t{i}"), "explore".to_owned(), format!("Job {i}")))
            .collect();
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks(calls).usage(100, 10, 0, 0),
                Reply::text("done"),
            ],
        );
        for i in 1..=2 {
            let replies = (0..10)
                .map(|k| {
                    Reply::tool_use(&format!("l{i}{k}"), "list_files", json!({}))
                        .usage(300, 10, 0, 0)
                })
                .collect();
            server.route(Match::FirstUserContains(format!("Job {i}")), replies);
        }
        let (o, _) = orchestrator(
            &server,
            dir.path(),
            Registry::shipped(),
            Limits::default(),
            Some(1000),
        );
        let (outcome, summary) = run(&o, "PARENT").await;
        // The subagents stop on the budget, and so does the parent before its next request.
        assert_eq!(outcome.stop, StopKind::Budget);
        for a in summary
            .usage
            .agents
            .iter()
            .filter(|a| a.agent_type == "explore")
        {
            assert_eq!(a.stop, StopKind::Budget, "{}", a.path);
        }
        let used = summary.usage.total.usage.total();
        assert!((1000..1000 + 2 * 310 + 110).contains(&used), "used {used}");
    }

    #[tokio::test]
    async fn cancelling_stops_every_agent_and_its_commands() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.allow_unused_replies();
        let calls: Vec<_> = (1..=3)
            .map(|i| (format!("t{i}"), "code".to_owned(), format!("Job {i}")))
            .collect();
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![Reply::tasks(calls), Reply::text("never")],
        );
        for i in 1..=3 {
            server.route(
                Match::FirstUserContains(format!("Job {i}")),
                vec![
                    Reply::tool_use(
                        &format!("b{i}"),
                        "bash",
                        json!({"command": format!("echo $$ > pid{i}; sleep 60")}),
                    ),
                    Reply::text("never"),
                ],
            );
        }
        let (o, _) = orchestrator(
            &server,
            dir.path(),
            Registry::shipped(),
            Limits::default(),
            None,
        );
        let cancel = o.cancel_token();
        let root = dir.path().to_path_buf();
        let watcher = tokio::spawn(async move {
            for _ in 0..3000 {
                if (1..=3).all(|i| {
                    std::fs::read_to_string(root.join(format!("pid{i}")))
                        .is_ok_and(|s| s.ends_with('\n'))
                }) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
        });
        let (outcome, summary) = run(&o, "PARENT").await;
        watcher.await.unwrap();
        assert_eq!(outcome.stop, StopKind::Cancelled);
        assert_eq!(summary.usage.agents.len(), 4);
        for a in &summary.usage.agents {
            assert_eq!(a.stop, StopKind::Cancelled, "{}", a.path);
        }
        for i in 1..=3 {
            let pid: i32 = std::fs::read_to_string(dir.path().join(format!("pid{i}")))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(
                !std::path::Path::new(&format!("/proc/{pid}")).exists(),
                "command {i} survived"
            );
        }
    }

    #[tokio::test]
    async fn two_code_subagents_editing_one_file_lose_no_update() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("shared.txt"), "start\n").unwrap();
        let server = MockServer::start().await;
        let calls: Vec<_> = (1..=2)
            .map(|i| (format!("t{i}"), "code".to_owned(), format!("Writer {i}")))
            .collect();
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![Reply::tasks(calls), Reply::text("done")],
        );
        for i in 1..=2 {
            // Each writer reads, inserts its line after "start", then reads and tries again.
            let edit = |id: &str| {
                let new = format!("start\nline {i}\n");
                Reply::tool_use(
                    id,
                    "edit_file",
                    json!({"path": "shared.txt", "old_string": "start\n", "new_string": new}),
                )
            };
            server.route(
                Match::FirstUserContains(format!("Writer {i}")),
                vec![
                    Reply::tool_use(
                        &format!("r{i}a"),
                        "read_file",
                        json!({"path": "shared.txt"}),
                    ),
                    edit(&format!("e{i}a")),
                    Reply::tool_use(
                        &format!("r{i}b"),
                        "read_file",
                        json!({"path": "shared.txt"}),
                    ),
                    edit(&format!("e{i}b")),
                    Reply::text(&format!("writer {i} done")),
                ],
            );
        }
        // Both writers' edits are held until both have read the file, so their edits race.
        server.hold_until_waiting(
            Match::LastUserContains("start".into()),
            2,
            Duration::from_secs(60),
        );
        let (o, _) = orchestrator(
            &server,
            dir.path(),
            Registry::shipped(),
            Limits::default(),
            None,
        );
        let (outcome, _) = run(&o, "PARENT").await;
        assert_eq!(outcome.stop, StopKind::Done);

        // Every edit reported as done is in the file; every other one was refused as stale.
        let text = std::fs::read_to_string(dir.path().join("shared.txt")).unwrap();
        let results: Vec<Value> = server
            .requests()
            .iter()
            .flat_map(|r| {
                r.messages().last().unwrap()["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|b| {
                b["tool_use_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with('e'))
            })
            .collect();
        assert_eq!(results.len(), 4);
        let mut stale = 0;
        for i in 1..=2 {
            let ok = results
                .iter()
                .filter(|b| {
                    b["tool_use_id"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("e{i}"))
                })
                .filter(|b| b.get("is_error").is_none_or(|v| v == false))
                .count();
            assert_eq!(
                text.matches(&format!("line {i}\n")).count(),
                ok,
                "writer {i}: {text:?}"
            );
        }
        for b in &results {
            if b["is_error"] == true {
                assert!(
                    b["content"]
                        .to_string()
                        .contains("changed since you last read it"),
                    "{b}"
                );
                stale += 1;
            }
        }
        assert!(
            stale >= 1,
            "the racing edits were never detected as stale: {text:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Skills (Agent Skills format, loaded on demand) and Claude Code agent files.

mod skills_and_claude_code {
    use super::*;
    use cadre_core::{AgentSpec, Mode, Orchestrator, Registry, SkillSet};
    use std::path::{Path, PathBuf};

    const SUBAGENT: &str = "You are a subagent";

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn orchestrator(
        server: &MockServer,
        dir: &Path,
        registry: Registry,
        skills: SkillSet,
    ) -> Arc<Orchestrator> {
        let mut run = run_config(server, dir);
        run.skills = Arc::new(skills);
        Orchestrator::new(registry, run, Arc::new(|_| {}))
    }

    /// The tool results sent in `request`'s last message.
    fn results_of(request: &cadre_testkit::Captured) -> Vec<Value> {
        request.messages().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// A skills folder in the published format: a folded and a quoted description,
    /// license, metadata, allowed-tools, and scripts/, references/ and assets/ beside it.
    fn published_skills(root: &Path) -> PathBuf {
        let skills = root.join("skills");
        write(
            &skills.join("lint-guide/SKILL.md"),
            "---\nname: lint-guide\ndescription: >\n  Use when fixing lint warnings:\n  the house rules.\nlicense: Apache-2.0\nmetadata:\n  author: qa-team\n  version: \"2.1\"\nallowed-tools: Read Bash(cargo clippy:*)\n---\n\n# Lint guide\n\nBODY-MARKER: read references/rules.md, then run scripts/check.sh.\n",
        );
        write(
            &skills.join("lint-guide/references/rules.md"),
            "RULE-CONTENT: no unwrap outside tests\n",
        );
        write(
            &skills.join("lint-guide/scripts/check.sh"),
            "#!/bin/sh\necho ok\n",
        );
        write(&skills.join("lint-guide/assets/template.txt"), "T\n");
        write(
            &skills.join("release-notes/SKILL.md"),
            "---\nname: release-notes\ndescription: \"Use when writing release notes: group by feat/fix.\"\ncompatibility: Needs git\n---\nWrite notes.\n",
        );
        skills
    }

    #[test]
    fn skills_in_the_published_format_load_and_bad_ones_are_skipped_with_positions() {
        let root = tempfile::tempdir().unwrap();
        let skills = published_skills(root.path());
        write(
            &skills.join("broken/SKILL.md"),
            "---\nname: broken\ndescription: [unclosed\n---\nx\n",
        );
        write(
            &skills.join("noname/SKILL.md"),
            "---\ndescription: d\n---\nx\n",
        );
        write(
            &skills.join("wordy/SKILL.md"),
            &format!(
                "---\nname: wordy\ndescription: {}\n---\nx\n",
                "w".repeat(1025)
            ),
        );
        write(
            &skills.join("folder-a/SKILL.md"),
            "---\nname: folder-b\ndescription: d\n---\nx\n",
        );
        write(&skills.join("plain/SKILL.md"), "# no front matter\n");
        write(
            &skills.join("extra/SKILL.md"),
            "---\nname: extra\ndescription: d\nauthor: me\n---\nx\n",
        );
        let set = SkillSet::load(std::slice::from_ref(&skills));
        let names: Vec<&str> = set.all().map(|s| s.name.as_str()).collect();
        // An overlong description loads (Claude Code loads it too) with a warning.
        assert_eq!(names, ["extra", "lint-guide", "release-notes", "wordy"]);

        let lint = set.get("lint-guide").unwrap();
        assert_eq!(
            lint.description,
            "Use when fixing lint warnings: the house rules."
        );
        assert_eq!(lint.license.as_deref(), Some("Apache-2.0"));
        assert_eq!(lint.metadata["author"], "qa-team");
        assert_eq!(lint.metadata["version"], "2.1");
        assert_eq!(lint.allowed_tools, ["Read", "Bash(cargo clippy:*)"]);
        assert_eq!(lint.dir, skills.join("lint-guide"));
        let files: Vec<String> = lint
            .files()
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        assert_eq!(
            files,
            [
                "assets/template.txt",
                "references/rules.md",
                "scripts/check.sh"
            ]
        );
        let notes = set.get("release-notes").unwrap();
        assert_eq!(
            notes.description,
            "Use when writing release notes: group by feat/fix."
        );
        assert_eq!(notes.compatibility.as_deref(), Some("Needs git"));
        let body = set.body("lint-guide").unwrap();
        assert!(body.starts_with("# Lint guide") && body.contains("BODY-MARKER"));
        assert!(!body.contains("name:"), "{body}");

        let report: Vec<String> = set.problems().iter().map(ToString::to_string).collect();
        let has = |tail: &str| {
            assert!(
                report.iter().any(|p| p.contains(tail)),
                "no {tail:?} in {report:#?}"
            );
        };
        has("broken/SKILL.md:4:1: error: broken YAML");
        has("noname/SKILL.md:1:1: error: missing name");
        has("wordy/SKILL.md:3:1: warning: description too long: 1025 characters");
        has("folder-a/SKILL.md:2:7: error: name \"folder-b\" differs from its folder \"folder-a\"");
        has("plain/SKILL.md:1:1: error: missing front matter");
        has("extra/SKILL.md:4:1: warning: unknown key \"author\"");
        assert_eq!(report.len(), 6, "{report:#?}");
    }

    #[test]
    fn claude_code_agent_files_load_with_mapped_tools_and_dropped_ones_warned() {
        let root = tempfile::tempdir().unwrap();
        let claude = root.path().join(".claude/agents");
        write(
            &claude.join("reviewer.md"),
            "---\nname: reviewer\ndescription: Reviews diffs for bugs. Use after code changes.\ntools: Read, Grep, Glob, Bash\nmodel: sonnet\ncolor: red\n---\n\nYou are a meticulous reviewer.\n",
        );
        write(
            &claude.join("helper.md"),
            "---\nname: helper\ndescription: Helps.\ntools: Read, WebFetch\nmodel: inherit\npermissionMode: default\n---\nHelp out.\n",
        );
        write(
            &claude.join("broken.md"),
            "---\nname: broken\ndescription: Broken.\ntools: Read, Teleport\n---\nNo.\n",
        );
        write(&claude.join("README.md"), "# Our agents\n");
        write(
            &claude.join("shadow.md"),
            "---\nname: shadow\ndescription: from claude\n---\np\n",
        );
        write(
            &root.path().join("agents/shadow.yaml"),
            "name: shadow\ndescription: from cadre\nprompt: p\n",
        );
        let registry = Registry::load(&Registry::standard_dirs(root.path(), None));

        let reviewer = registry.get("reviewer").unwrap();
        assert_eq!(reviewer.mode, Mode::Subagent);
        assert_eq!(reviewer.model, "sonnet");
        assert_eq!(reviewer.tools, ["read_file", "grep", "list_files", "bash"]);
        assert_eq!(reviewer.prompt, "You are a meticulous reviewer.");
        let helper = registry.get("helper").unwrap();
        assert_eq!(helper.model, "inherit");
        assert_eq!(helper.tools, ["read_file"]);
        // A name that is no tool is dropped; the agent loads with the rest.
        assert_eq!(registry.get("broken").unwrap().tools, ["read_file"]);
        assert_eq!(
            registry.get("reviewer").unwrap().color.as_deref(),
            Some("red")
        );
        assert_eq!(registry.get("shadow").unwrap().description, "from cadre");

        let report: Vec<String> = registry
            .problems()
            .iter()
            .map(ToString::to_string)
            .collect();
        let has = |tail: &str| {
            assert!(
                report.iter().any(|p| p.contains(tail)),
                "no {tail:?} in {report:#?}"
            );
        };
        has("helper.md:4:14: warning: tool \"WebFetch\" dropped");
        has("broken.md:4:14: warning: unknown tool \"Teleport\" dropped from tools");
        has("README.md:1:1: warning: skipped: no front matter");
        assert_eq!(report.len(), 3, "{report:#?}");
    }

    #[tokio::test]
    async fn a_claude_code_agent_runs_as_a_subagent_with_its_mapped_tools_and_model() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join(".claude/agents/reviewer.md"),
            "---\nname: reviewer\ndescription: Reviews diffs.\ntools: Read, Grep, WebSearch\nmodel: haiku\n---\nReview carefully.\n",
        );
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "reviewer", "Review the diff")]),
                Reply::text("reviewed"),
            ],
        );
        server.route(
            Match::FirstUserContains("Review the diff".into()),
            vec![Reply::text("looks fine")],
        );
        let registry = Registry::load(&Registry::standard_dirs(dir.path(), None));
        let o = orchestrator(&server, dir.path(), registry, SkillSet::default());
        let (outcome, _) = o.run("main", "PARENT").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done);
        let sub = server
            .requests()
            .into_iter()
            .find(|r| r.first_user_text() == "Review the diff")
            .unwrap();
        assert_eq!(sub.tool_names(), ["read_file", "grep"]);
        assert_eq!(sub.body["model"], "claude-haiku-5-5");
        assert!(sub.system_text().starts_with("Review carefully."));
    }

    fn no_skills_agent() -> AgentSpec {
        AgentSpec {
            name: "no-skills".into(),
            description: "Has every tool but no skills.".into(),
            mode: Mode::Subagent,
            model: "inherit".into(),
            tools: vec!["*".into()],
            disallowed_tools: vec![],
            read_only: false,
            network: true,
            max_turns: 5,
            skills: vec![],
            prompt: "Work without skills.".into(),
            source: None,
            ..AgentSpec::default()
        }
    }

    #[tokio::test]
    async fn a_subagent_loads_a_skill_then_reads_its_reference_and_the_prompt_never_changes() {
        let dir = tempfile::tempdir().unwrap();
        let skills = SkillSet::load(&[published_skills(dir.path())]);
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([
                    ("t1", "code", "Fix the lint warnings"),
                    ("t2", "explore", "Look around"),
                    ("t3", "no-skills", "Work plainly"),
                ]),
                Reply::text("all done"),
            ],
        );
        server.route(
            Match::FirstUserContains("Fix the lint warnings".into()),
            vec![
                Reply::tool_uses(vec![
                    ("s1", "Skill", json!({"name": "lint-guide"})),
                    ("s2", "Skill", json!({"name": "no-such-skill"})),
                ]),
                Reply::tool_use(
                    "r1",
                    "read_file",
                    json!({"path": "skills/lint-guide/references/rules.md"}),
                ),
                Reply::text("fixed per the rules"),
            ],
        );
        server.route(
            Match::FirstUserContains("Look around".into()),
            vec![Reply::text("looked")],
        );
        server.route(
            Match::FirstUserContains("Work plainly".into()),
            vec![Reply::text("worked")],
        );
        let mut registry = Registry::shipped();
        registry.insert(no_skills_agent());
        let o = orchestrator(&server, dir.path(), registry, skills);
        let (outcome, _) = o.run("main", "PARENT").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done);

        let requests = server.requests();
        let of = |first: &str| -> Vec<cadre_testkit::Captured> {
            requests
                .iter()
                .filter(|r| r.first_user_text() == first)
                .cloned()
                .collect()
        };
        let coder = of("Fix the lint warnings");
        assert_eq!(coder.len(), 3);
        // The prompt lists the skills by name and description only.
        let system = coder[0].system_text();
        assert!(system.contains(SUBAGENT));
        assert!(
            system.contains("- lint-guide: Use when fixing lint warnings: the house rules.\n"),
            "{system}"
        );
        assert!(
            system.contains("- release-notes: Use when writing release notes: group by feat/fix.")
        );
        assert!(!system.contains("BODY-MARKER") && !system.contains("RULE-CONTENT"));
        assert!(coder[0].tool_names().contains(&"Skill".to_string()));
        // The cached prefix (system prompt and tools) is byte-identical before and after.
        for later in &coder[1..] {
            assert_eq!(later.body["system"], coder[0].body["system"]);
            assert_eq!(later.body["tools"], coder[0].body["tools"]);
        }

        // Skill gave the body, the folder inside the workspace and its files.
        let results = results_of(&coder[1]);
        let loaded = results[0]["content"].to_string();
        assert!(results[0].get("is_error").is_none_or(|v| v == false));
        for want in [
            "BODY-MARKER",
            "Folder: skills/lint-guide",
            "references/rules.md",
            "scripts/check.sh",
            "assets/template.txt",
        ] {
            assert!(loaded.contains(want), "no {want:?} in {loaded}");
        }
        assert!(!loaded.contains("name: lint-guide"), "{loaded}");
        assert_eq!(results[1]["is_error"], true);
        let unknown = results[1]["content"].to_string();
        assert!(
            unknown.contains("unknown skill \\\"no-such-skill\\\"")
                && unknown.contains("lint-guide, release-notes"),
            "{unknown}"
        );
        // read_file reached the skill's reference file through the workspace.
        let read = results_of(&coder[2])[0]["content"].to_string();
        assert!(read.contains("RULE-CONTENT"), "{read}");

        // explore (read-only) may load skills too; no-skills allows none, so it is neither
        // offered Skill nor shown the list.
        let explorer = &of("Look around")[0];
        assert!(explorer.tool_names().contains(&"Skill".to_string()));
        assert!(explorer.system_text().contains("Available skills"));
        let plain = &of("Work plainly")[0];
        assert!(!plain.tool_names().contains(&"Skill".to_string()));
        assert!(!plain.system_text().contains("Available skills"));
        assert!(of("Work plainly")[0]
            .tool_names()
            .contains(&"Task".to_string()));
        // The primary agent (every tool, every skill) sees them too.
        let main = of("PARENT");
        assert!(main[0].tool_names().contains(&"Skill".to_string()));
        assert!(main[0].system_text().contains("- lint-guide:"));
    }

    #[test]
    fn load_thousands_of_skills_and_agent_files() {
        let root = tempfile::tempdir().unwrap();
        let skills = root.path().join("skills");
        let agents = root.path().join("agents");
        std::fs::create_dir_all(&agents).unwrap();
        let body = "Step by step instructions.\n".repeat(150);
        for i in 0..1000 {
            write(
                &skills.join(format!("skill-{i:04}/SKILL.md")),
                &format!(
                    "---\nname: skill-{i:04}\ndescription: Use when doing task number {i} of many.\nlicense: MIT\nmetadata:\n  index: \"{i}\"\n---\n{body}"
                ),
            );
            write(
                &agents.join(format!("agent-{i:04}.md")),
                &format!(
                    "---\nname: agent-{i:04}\ndescription: Agent {i}.\ntools: Read, Grep, Glob\nmodel: haiku\n---\nYou are agent {i}.\n"
                ),
            );
        }
        let started = std::time::Instant::now();
        let set = SkillSet::load(&[skills]);
        let skills_took = started.elapsed();
        let started = std::time::Instant::now();
        let registry = Registry::load(&[agents]);
        let agents_took = started.elapsed();
        assert_eq!(set.len(), 1000);
        assert!(set.problems().is_empty());
        assert_eq!(registry.all().count(), 1004);
        assert!(registry.problems().is_empty());
        eprintln!(
            "load_thousands: 1,000 skills (front matter only) in {skills_took:?}; 1,000 Claude Code agent files in {agents_took:?}; total {:?}",
            skills_took + agents_took
        );
    }
}

// ---------------------------------------------------------------------------------------
// Faults: nothing a tool or the model does takes the run down, and limits hold.

mod faults {
    use super::*;
    use async_trait::async_trait;
    use cadre_core::{Limits, Orchestrator, Registry};
    use cadre_tools::{Tool, ToolError, ToolOutput};

    struct Panics;

    #[async_trait]
    impl Tool for Panics {
        fn name(&self) -> &str {
            "explode"
        }
        fn description(&self) -> String {
            "Always panics.".into()
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {}})
        }
        fn is_read_only(&self) -> bool {
            true
        }
        async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            panic!("the tool blew up")
        }
    }

    #[tokio::test]
    async fn a_panicking_tool_becomes_an_error_result_and_its_siblings_finish() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "fine\n").unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_uses(vec![
                    ("t1", "explode", json!({})),
                    ("t2", "read_file", json!({"path": "a.txt"})),
                ]),
                Reply::text("carried on"),
            ],
        );
        let (mut agent, _) = agent(&server, dir.path(), 5, None);
        agent.tools.insert(Arc::new(Panics));
        let outcome = agent.run(vec![Message::user_text("go")]).await;
        assert_eq!(outcome.stop, StopKind::Done);
        let results = tool_results(&server, 1);
        assert_eq!(results[0]["is_error"], true);
        assert!(results[0]["content"]
            .to_string()
            .contains("the tool blew up"));
        assert!(results[1]["content"].to_string().contains("fine"));
    }

    struct IgnoresCancel(Arc<tokio::sync::Notify>);

    #[async_trait]
    impl Tool for IgnoresCancel {
        fn name(&self) -> &str {
            "stubborn"
        }
        fn description(&self) -> String {
            "Never returns.".into()
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {}})
        }
        fn is_read_only(&self) -> bool {
            true
        }
        async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            self.0.notify_one();
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_tool_that_ignores_cancellation_cannot_keep_the_agent_running() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.route(
            Match::Any,
            vec![
                Reply::tool_use("t1", "stubborn", json!({})),
                Reply::text("never"),
            ],
        );
        let (mut agent, _) = agent(&server, dir.path(), 5, None);
        let started = Arc::new(tokio::sync::Notify::new());
        agent.tools.insert(Arc::new(IgnoresCancel(started.clone())));
        let cancel = agent.ctx.cancel.clone();
        tokio::spawn(async move {
            started.notified().await;
            cancel.cancel();
        });
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            agent.run(vec![Message::user_text("go")]),
        )
        .await
        .expect("the agent never stopped");
        assert_eq!(outcome.stop, StopKind::Cancelled);
    }

    #[tokio::test]
    async fn endless_and_enormous_output_is_capped_and_the_command_killed() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_uses(vec![
                    // Never ends: killed at its timeout.
                    ("t1", "bash", json!({"command": "yes", "timeout_ms": 2000})),
                    // A gigabyte, then exits.
                    ("t2", "bash", json!({"command": "head -c 1000000000 /dev/zero | tr '\\0' a; echo; echo END"})),
                ]),
                Reply::text("survived"),
            ],
        );
        let (agent, _) = agent(&server, dir.path(), 5, None);
        let cap = agent.ctx.limits.max_output_bytes;
        let outcome = agent.run(vec![Message::user_text("go")]).await;
        assert_eq!(outcome.stop, StopKind::Done);
        let results = tool_results(&server, 1);
        for r in &results {
            let text = r["content"][0]["text"].as_str().unwrap();
            assert!(text.len() <= cap + 200, "{} bytes came back", text.len());
        }
        let endless = results[0]["content"][0]["text"].as_str().unwrap();
        assert_eq!(results[0]["is_error"], true);
        assert!(
            endless.contains("timed out"),
            "{}",
            &endless[endless.len() - 200..]
        );
        let huge = results[1]["content"][0]["text"].as_str().unwrap();
        assert!(huge.starts_with("aaaa") && huge.trim_end().ends_with("END"));
        assert!(huge.contains("cut from the middle"));
    }

    fn orchestrator(server: &MockServer, dir: &std::path::Path) -> Arc<Orchestrator> {
        let mut run = run_config(server, dir);
        run.limits = Limits {
            max_parallel: 64,
            ..Limits::default()
        };
        Orchestrator::new(Registry::shipped(), run, cadre_core::no_events())
    }

    #[tokio::test]
    async fn five_hundred_task_calls_in_one_turn_meet_the_fan_out_cap() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        let calls = (0..500).map(|i| (format!("t{i}"), "explore".to_owned(), format!("Job {i}.")));
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![Reply::tasks(calls), Reply::text("done")],
        );
        // Each admitted subagent waits until all 64 are running, so the refusals happen while
        // the cap is full, whatever the machine's speed.
        server.route(
            Match::SystemContains("You are a subagent".into()),
            (0..64).map(|_| Reply::text("ok")).collect(),
        );
        server.hold_until_waiting(
            Match::SystemContains("You are a subagent".into()),
            64,
            Duration::from_secs(60),
        );
        let o = orchestrator(&server, dir.path());
        let (outcome, summary) = o.run("main", "PARENT").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(summary.usage.by_type["explore"].agents, 64);
        let last = server
            .requests()
            .into_iter()
            .rfind(|r| r.first_user_text() == "PARENT")
            .unwrap();
        let results = last.messages().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(results.len(), 500);
        let refused: Vec<&Value> = results.iter().filter(|r| r["is_error"] == true).collect();
        assert_eq!(refused.len(), 436);
        assert!(
            refused[0]["content"]
                .to_string()
                .contains("the limit is 64"),
            "{}",
            refused[0]
        );
    }

    #[tokio::test]
    async fn a_read_only_subagent_cannot_write_through_bash_but_a_code_subagent_can_inside_only() {
        let status = cadre_tools::landlock_status();
        if status.abi < cadre_tools::sandbox::MIN_READ_ONLY_ABI {
            // CI sets CADRE_REQUIRE_LANDLOCK: there a missing sandbox fails instead of skipping.
            assert!(
                std::env::var_os("CADRE_REQUIRE_LANDLOCK").is_none(),
                "CADRE_REQUIRE_LANDLOCK is set but {}",
                status.summary
            );
            eprintln!(
                "skipped: this kernel has no usable Landlock ({})",
                status.summary
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "original\n").unwrap();
        std::fs::write(outside.path().join("target.txt"), "outside\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let o = outside.path().display().to_string();
        let attempts = [
            "echo x > keep.txt".to_owned(),
            "echo x >> keep.txt".to_owned(),
            "touch new.txt".to_owned(),
            "rm keep.txt".to_owned(),
            "mkdir made".to_owned(),
            "sed -i s/original/changed/ keep.txt".to_owned(),
            "echo x > out/target.txt".to_owned(),
            format!("echo x > {o}/target.txt"),
            "echo x > /proc/self/cwd/keep.txt".to_owned(),
            "echo x > /tmp/cadre-redteam-escape.txt".to_owned(),
        ];
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tool_uses(vec![
                    ("t1", "Task", json!({"description": "try writes", "prompt": "Red team.", "subagent_type": "explore"})),
                    ("t2", "Task", json!({"description": "write inside", "prompt": "Code team.", "subagent_type": "code"})),
                ]),
                Reply::text("done"),
            ],
        );
        let red: Vec<(String, &str, Value)> = attempts
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("r{i}"), "bash", json!({"command": c})))
            .collect();
        server.route(
            Match::FirstUserContains("Red team.".into()),
            vec![
                Reply::tool_uses(
                    red.iter()
                        .map(|(i, n, v)| (i.as_str(), *n, v.clone()))
                        .collect(),
                ),
                Reply::text("nothing written"),
            ],
        );
        server.route(
            Match::FirstUserContains("Code team.".into()),
            vec![
                Reply::tool_use(
                    "c1",
                    "bash",
                    json!({"command": format!("echo made > inside.txt; echo x > {o}/escape.txt")}),
                ),
                Reply::text("tried"),
            ],
        );
        let (outcome, _) = orchestrator(&server, dir.path())
            .run("main", "PARENT")
            .await
            .unwrap();
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
            "original\n"
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("target.txt")).unwrap(),
            "outside\n"
        );
        for gone in ["new.txt", "made"] {
            assert!(!dir.path().join(gone).exists(), "{gone} was created");
        }
        assert!(!std::path::Path::new("/tmp/cadre-redteam-escape.txt").exists());
        // The writer wrote inside the workspace, and not outside it.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
            "made\n"
        );
        assert!(!outside.path().join("escape.txt").exists());
    }
}

// ---------------------------------------------------------------------------------------
// Randomised input: the loaders never panic and always say what is wrong.

mod fuzz {
    use cadre_core::definitions::spec::AgentSpec;
    use cadre_core::definitions::{claude_agents, frontmatter, skills::Skill};
    use cadre_core::{Registry, SkillSet};
    use proptest::prelude::*;
    use std::path::Path;

    /// PROPTEST_CASES raises the count for a longer run.
    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(256),
            ..ProptestConfig::default()
        }
    }

    /// Text that looks like YAML front matter more often than random text would.
    fn yamlish() -> impl Strategy<Value = String> {
        let line = prop_oneof![
            "[a-z_-]{1,12}: [ -~]{0,30}",
            "  - [ -~]{0,20}",
            "[a-z]{1,8}: [|>]",
            "  [ -~]{0,40}",
            "---",
            "[\\PC]{0,40}",
            Just("name: explore".to_owned()),
            Just("description: \"quoted: yes\"".to_owned()),
            Just("tools: Read, Grep, WebFetch, mcp__x__y".to_owned()),
            Just("tools: [read_file, \"*\"]".to_owned()),
            Just("metadata: {a: 1, b: [2]}".to_owned()),
        ];
        prop::collection::vec(line, 0..14).prop_map(|lines| lines.join("\n"))
    }

    fn known(t: &str) -> bool {
        cadre_core::definitions::registry::resolve_tool_name(t).is_some()
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn agent_yaml_never_panics(text in yamlish()) {
            let file = Path::new("agents/x.yaml");
            let (spec, problems) = AgentSpec::parse_yaml(file, &text);
            prop_assert!(spec.is_some() || !problems.is_empty(), "rejected without saying why");
            for p in &problems {
                prop_assert!(!p.message.is_empty());
            }
            if let Some(spec) = spec {
                let _ = spec.validate(file, &text, &known);
            }
        }

        #[test]
        fn front_matter_and_claude_agents_never_panic(yaml in yamlish(), body in "[\\PC\n]{0,200}", fence in any::<bool>()) {
            let text = if fence { format!("---\n{yaml}\n---\n{body}") } else { format!("{yaml}\n{body}") };
            let _ = frontmatter::split(&text);
            let _ = frontmatter::read_front_matter(&mut std::io::Cursor::new(text.as_bytes()));
            let (spec, problems) = claude_agents::parse(Path::new(".claude/agents/x.md"), &text);
            prop_assert!(spec.is_some() || !problems.is_empty(), "rejected without saying why");
            for p in problems {
                prop_assert!(!p.message.is_empty());
            }
        }

        #[test]
        fn skill_front_matter_never_panics(yaml in yamlish()) {
            let (skill, problems) = Skill::parse(Path::new("skills/x/SKILL.md"), "x", &yaml);
            prop_assert!(skill.is_some() || !problems.is_empty(), "rejected without saying why");
        }
    }

    #[test]
    fn folders_of_random_files_load_with_problems_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::new(config());
        let strategy = (yamlish(), "[\\PC\n]{0,100}");
        for i in 0..64 {
            let (yaml, body) = strategy.new_tree(&mut runner).unwrap().current();
            std::fs::write(dir.path().join(format!("a{i}.yaml")), &yaml).unwrap();
            std::fs::write(
                dir.path().join(format!("c{i}.md")),
                format!("---\n{yaml}\n---\n{body}"),
            )
            .unwrap();
            let skill = dir.path().join(format!("skills/s{i}"));
            std::fs::create_dir_all(&skill).unwrap();
            std::fs::write(skill.join("SKILL.md"), format!("---\n{yaml}\n---\n{body}")).unwrap();
        }
        let registry = Registry::load(&[dir.path().to_path_buf()]);
        assert!(
            registry.get("main").is_some(),
            "the shipped types survive bad neighbours"
        );
        let skills = SkillSet::load(&[dir.path().join("skills")]);
        assert!(skills.problems().len() + skills.len() >= 64);
    }
}

// ---------------------------------------------------------------------------------------
// The corpus: files as users bring them (Claude Code agent files, published skills, loose
// cadre YAML) load, each repair a warning at its place.

mod corpus {
    use super::*;
    use cadre_core::{McpServerRef, Mode, Orchestrator, Registry, SkillSet};
    use std::path::{Path, PathBuf};

    fn corpus() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
    }

    /// Every problem as `file:line:column: kind: message`, the path relative to the corpus.
    fn report(problems: &[cadre_core::Problem]) -> Vec<String> {
        let root = corpus();
        problems
            .iter()
            .map(|p| {
                let rel = p.file.strip_prefix(&root).unwrap_or(&p.file);
                let kind = if p.warning { "warning" } else { "error" };
                format!(
                    "{}:{}:{}: {kind}: {}",
                    rel.display(),
                    p.line,
                    p.column,
                    p.message
                )
            })
            .collect()
    }

    /// Asserts that `report` holds exactly the problems `want` (prefixes), in any order.
    fn assert_exactly(report: &[String], want: &[&str]) {
        for w in want {
            assert!(
                report.iter().any(|p| p.starts_with(w)),
                "no {w:?} in {report:#?}"
            );
        }
        for p in report {
            assert!(want.iter().any(|w| p.starts_with(w)), "unexpected {p:?}");
        }
    }

    #[test]
    fn every_agent_file_of_the_corpus_loads_with_each_repair_warned_at_its_place() {
        let registry = Registry::load(&[corpus().join("agents")]);
        let names: Vec<&str> = registry.all().map(|s| s.name.as_str()).collect();
        for name in [
            "stats-analyst",
            "powershell-5.1-expert",
            "CodeReviewer",
            "everything",
            "all-dropped",
            "lenient",
            "no-tools",
        ] {
            assert!(names.contains(&name), "{name} did not load: {names:?}");
        }
        let got = report(registry.problems());
        assert_exactly(
            &got,
            &[
                "agents/CodeReviewer.md:2:7: warning: name \"CodeReviewer\" is used as written",
                "agents/all-dropped.md:4:8: warning: tool \"WebFetch\" dropped from tools: cadre does not provide it",
                "agents/all-dropped.md:4:18: warning: unknown tool \"airis-mcp-gateway\" dropped from tools",
                "agents/all-dropped.md:4:1: warning: no tool is left: every entry of tools was dropped (WebFetch, airis-mcp-gateway)",
                "agents/everything.md:15:1: warning: `hooks` ignored: cadre does not run Claude Code hooks",
                "agents/everything.md:21:1: warning: `memory` ignored",
                "agents/everything.md:23:1: warning: `effort` ignored",
                "agents/everything.md:26:1: warning: `initialPrompt` ignored",
                "agents/lenient.yaml:2:14: warning: not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
                "agents/lenient.yaml:7:1: warning: unknown key `colour` ignored",
                "agents/no-tools.yaml:4:9: warning: unknown tool \"teleport\" dropped from tools",
                "agents/no-tools.yaml:4:19: warning: tool \"WebSearch\" dropped from tools",
                "agents/no-tools.yaml:4:1: warning: no tool is left",
                "agents/powershell-5.1-expert.md:2:7: warning: name \"powershell-5.1-expert\" is used as written",
                "agents/stats-analyst.md:3:14: warning: not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
                "agents/stats-analyst.md:5:20: warning: unknown tool \"airis-mcp-gateway\" dropped from tools",
                "agents/stats-analyst.md:5:39: warning: unknown tool \"context-manager\" dropped from tools",
            ],
        );

        let stats = registry.get("stats-analyst").unwrap();
        assert_eq!(
            stats.description,
            "Use when analysing experiment results. Triggers on: 'p-value', 'regression' and 'confidence interval' questions."
        );
        assert_eq!(
            stats.tools,
            ["read_file", "grep", "mcp__github__search_issues"]
        );
        assert_eq!(
            stats.dropped_tools,
            ["airis-mcp-gateway", "context-manager"]
        );
        assert_eq!(stats.model, "sonnet");
        assert!(stats.unusable().is_none());

        let ps = registry.get("powershell-5.1-expert").unwrap();
        assert_eq!(ps.tools, ["read_file", "write_file", "bash"]);

        let every = registry.get("everything").unwrap();
        assert_eq!(every.mode, Mode::Subagent);
        assert_eq!(every.tools, ["read_file", "grep", "Task", "mcp__github"]);
        assert_eq!(every.subagent_types, ["explore"]);
        assert_eq!(every.disallowed_tools, ["write_file"]);
        assert_eq!(every.model, "haiku");
        assert_eq!(every.permission_mode.as_deref(), Some("plan"));
        assert!(every.read_only, "permissionMode: plan is read-only");
        assert_eq!(every.max_turns, 12);
        assert_eq!(every.skills, ["*"]);
        assert_eq!(every.preload_skills, ["stats-helper", "missing-skill"]);
        let inline = json!({"local-db": {"command": "db-mcp", "args": ["--read-only"]}});
        assert_eq!(
            every.mcp_servers,
            [
                McpServerRef::Name("github".into()),
                McpServerRef::Inline(serde_json::from_value(inline).unwrap()),
            ]
        );
        assert!(every.background);
        assert_eq!(every.isolation.as_deref(), Some("worktree"));
        assert_eq!(every.color.as_deref(), Some("blue"));
        assert_eq!(every.prompt, "You use everything.");

        let dropped = registry.get("all-dropped").unwrap();
        assert!(dropped.tools.is_empty());
        let why = dropped.unusable().unwrap();
        assert!(why.contains("WebFetch, airis-mcp-gateway"), "{why}");

        let lenient = registry.get("lenient").unwrap();
        assert_eq!(
            lenient.description,
            "Use when checking: this value is not strict YAML"
        );
        assert_eq!(
            lenient.tools,
            ["read_file", "grep", "mcp__github__search_issues", "Task"]
        );
        assert_eq!(lenient.subagent_types, ["plan"]);
        assert_eq!(lenient.preload_skills, ["stats-helper"]);
        assert!(lenient.read_only);
        assert_eq!(lenient.prompt, "You are lenient.\n");
    }

    #[test]
    fn every_skill_of_the_corpus_loads_with_each_repair_warned_at_its_place() {
        let set = SkillSet::load(&[corpus().join("skills")]);
        let names: Vec<&str> = set.all().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["claude-api", "stats-helper"]);
        assert_exactly(
            &report(set.problems()),
            &[
                "skills/claude-api/SKILL.md:3:1: warning: description too long: 1068 characters",
                "skills/stats-helper/SKILL.md:3:14: warning: not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
            ],
        );
        let api = set.get("claude-api").unwrap();
        assert_eq!(api.description.chars().count(), 1068);
        assert_eq!(
            set.get("stats-helper").unwrap().description,
            "Use for statistics. Triggers on: 'p-value', 'regression'"
        );
        // Listed, the long description is cut to 1,024 characters.
        let section = cadre_core::run::prompt::skills_section(&[api], 100_000).unwrap();
        let line = section
            .lines()
            .find(|l| l.starts_with("- claude-api:"))
            .unwrap();
        let listed = line.trim_start_matches("- claude-api: ");
        assert!(listed.ends_with('…'), "{listed}");
        assert!(listed.chars().count() <= 1024 && listed.chars().count() > 1000);
    }

    fn orchestrator(server: &MockServer, dir: &Path) -> Arc<Orchestrator> {
        let mut run = run_config(server, dir);
        run.skills = Arc::new(SkillSet::load(&[corpus().join("skills")]));
        let registry = Registry::load(&[corpus().join("agents")]);
        Orchestrator::new(registry, run, Arc::new(|_| {}))
    }

    /// The `Task` tool definition offered in `request`.
    fn task_tool(request: &cadre_testkit::Captured) -> Value {
        request.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "Task")
            .cloned()
            .unwrap_or_else(|| panic!("no Task in {:?}", request.tool_names()))
    }

    #[tokio::test]
    async fn an_agent_whose_every_tool_was_dropped_fails_to_start_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "all-dropped", "Fetch the page")]),
                Reply::text("done"),
            ],
        );
        let o = orchestrator(&server, dir.path());
        let (outcome, _) = o.run("main", "PARENT").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done);
        let last = server.requests().pop().unwrap();
        let results = last.messages().last().unwrap()["content"].clone();
        assert_eq!(results[0]["is_error"], true);
        let why = results[0]["content"][0]["text"].as_str().unwrap();
        assert!(
            why.contains("\"all-dropped\" cannot start")
                && why.contains("WebFetch, airis-mcp-gateway"),
            "{why}"
        );
        // It never reached the model.
        assert!(server
            .requests()
            .iter()
            .all(|r| r.first_user_text() != "Fetch the page"));

        // As the primary agent, the run does not start, and says why.
        let o = orchestrator(&server, dir.path());
        let err = o.run("no-tools", "anything").await.unwrap_err().to_string();
        assert!(err.contains("teleport, WebSearch"), "{err}");
    }

    #[tokio::test]
    async fn preloaded_skills_are_in_the_prompt_and_task_types_limit_what_it_may_start() {
        let dir = tempfile::tempdir().unwrap();
        // The file says `isolation: worktree`: its subagent needs a repository with a commit.
        cadre_testkit::git::init_repo(dir.path());
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "everything", "Use every field")]),
                Reply::text("done"),
                // Its type says `background: true`: the result comes after the turn ends.
                Reply::text("got its result"),
            ],
        );
        server.route(
            Match::FirstUserContains("Use every field".into()),
            vec![
                Reply::tasks([("e1", "plan", "Plan it"), ("e2", "explore", "Explore it")]),
                Reply::text("used"),
            ],
        );
        server.route(
            Match::FirstUserContains("Explore it".into()),
            vec![Reply::text("explored")],
        );
        let o = orchestrator(&server, dir.path());
        let (outcome, _) = o.run("main", "PARENT").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(outcome.text, "got its result");
        let requests = server.requests();
        let delivered = requests
            .iter()
            .rfind(|r| r.first_user_text() == "PARENT")
            .unwrap()
            .last_user_text();
        assert!(
            delivered.contains("task_1") && delivered.contains("used"),
            "{delivered}"
        );
        let first = |text: &str| {
            requests
                .iter()
                .find(|r| r.first_user_text() == text)
                .cloned()
                .unwrap()
        };

        let every = first("Use every field");
        let system = every.system_text();
        assert!(system.starts_with("You use everything."), "{system}");
        assert!(
            system.contains("## Preloaded skills")
                && system.contains("### Skill: stats-helper\n\n# Statistics\n\nSTATS-BODY-MARKER"),
            "{system}"
        );
        // A preloaded name that matches no skill is skipped.
        assert!(!system.contains("missing-skill"), "{system}");
        assert!(!system.contains("CLAUDE-API-BODY"), "{system}");
        // Its Task offers only the types its file allows.
        let task = task_tool(&every);
        assert_eq!(
            task["input_schema"]["properties"]["subagent_type"]["enum"],
            json!(["explore"])
        );
        let description = task["description"].as_str().unwrap();
        assert!(description.contains("- explore:") && !description.contains("- plan:"));
        // The primary agent may start any type.
        let main_enum = task_tool(&first("PARENT"))["input_schema"]["properties"]["subagent_type"]
            ["enum"]
            .clone();
        assert!(main_enum.as_array().unwrap().len() > 3, "{main_enum}");

        // A call naming another type is an error result; the allowed one runs.
        let after = requests
            .iter()
            .filter(|r| r.first_user_text() == "Use every field")
            .nth(1)
            .unwrap();
        let results = after.messages().last().unwrap()["content"].clone();
        assert_eq!(results[0]["is_error"], true);
        let why = results[0]["content"][0]["text"].as_str().unwrap();
        assert!(
            why.contains("\"plan\" is not one this agent may start"),
            "{why}"
        );
        assert_eq!(results[1]["content"][0]["text"], "explored");
        assert!(requests.iter().all(|r| r.first_user_text() != "Plan it"));
    }
}

/// MCP servers end to end: the real `cadre-test-mcp` server (rmcp) over stdio and streamable
/// HTTP, its tools offered to the agents their types allow, results reaching the model.
mod mcp {
    use super::*;
    use cadre_core::{AgentSpec, Orchestrator, Registry};
    use cadre_mcp::{McpConfig, McpServers, Timeouts};
    use cadre_testkit::{mcp_server_binary, McpHttpServer};
    use std::path::Path;

    fn servers(dir: &Path, json: Value, call_timeout: Duration) -> Arc<McpServers> {
        let mut config = McpConfig::default();
        config.add_text(Path::new(".mcp.json"), &json.to_string());
        assert!(config.problems.is_empty(), "{:?}", config.problems);
        let timeouts = Timeouts {
            start: Duration::from_secs(30),
            call: call_timeout,
        };
        Arc::new(McpServers::new(config, dir.to_path_buf(), timeouts))
    }

    fn stdio(log: &Path) -> Value {
        json!({"command": mcp_server_binary(), "args": ["--log", log]})
    }

    fn spec(yaml: &str) -> AgentSpec {
        let (spec, problems) = AgentSpec::parse_yaml(Path::new("t.yaml"), yaml);
        spec.unwrap_or_else(|| panic!("{problems:?}"))
    }

    /// The pids a `--log` file says were started.
    fn starts(log: &Path) -> Vec<i32> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("start ")?.trim().parse().ok())
            .collect()
    }

    fn alive(pid: i32) -> bool {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
    }

    async fn run(
        server: &MockServer,
        dir: &Path,
        registry: Registry,
        mcp: Arc<McpServers>,
        task: &str,
    ) -> AgentOutcome {
        let mut config = run_config(server, dir);
        config.mcp = mcp;
        let o = Orchestrator::new(registry, config, cadre_core::no_events());
        o.run("main", task).await.unwrap().0
    }

    fn results_of(r: &cadre_testkit::Captured) -> Vec<Value> {
        r.messages().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .clone()
    }

    #[tokio::test]
    async fn stdio_and_http_tools_reach_the_model_and_only_the_types_allowed_them() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("local.log");
        let http = McpHttpServer::spawn(&[]);
        let mcp = servers(
            dir.path(),
            json!({"local": stdio(&log), "remote": {"type": "http", "url": http.url()}}),
            Duration::from_secs(30),
        );
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tool_uses(vec![
                    ("m1", "mcp__local__echo", json!({"text": "hi"})),
                    ("m2", "mcp__local__add", json!({"a": 2, "b": 3})),
                    ("m3", "mcp__remote__image", json!({})),
                ]),
                Reply::tasks([
                    ("t1", "explore", "Look around"),
                    ("t2", "reader", "Echo once"),
                    ("t3", "sealed", "Try nothing"),
                ]),
                Reply::text("done"),
            ],
        );
        server.route(
            Match::FirstUserContains("Look around".into()),
            vec![Reply::text("explored")],
        );
        server.route(
            Match::FirstUserContains("Echo once".into()),
            vec![
                Reply::tool_use("r1", "mcp__local__echo", json!({"text": "again"})),
                Reply::text("echoed"),
            ],
        );
        server.route(
            Match::FirstUserContains("Try nothing".into()),
            vec![Reply::text("nothing")],
        );
        let mut registry = Registry::shipped();
        // Read-only: MCP tools only by explicit name, and here only one of them.
        registry.insert(spec(
            "name: reader\ndescription: d\nread_only: true\ntools: [read_file, mcp__local__echo]\nprompt: p\n",
        ));
        // Every tool, but read-only: no MCP tool at all.
        registry.insert(spec(
            "name: sealed\ndescription: d\nread_only: true\ntools: [\"*\"]\nprompt: p\n",
        ));
        let outcome = run(&server, dir.path(), registry, mcp.clone(), "PARENT task").await;
        assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);

        let requests = server.requests();
        let first = &requests[0];
        let tools = first.body["tools"].as_array().unwrap();
        let add = tools
            .iter()
            .find(|t| t["name"] == "mcp__local__add")
            .unwrap();
        assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer");
        let required: Vec<&str> = add["input_schema"]["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(required.contains(&"a") && required.contains(&"b"), "{add}");
        for name in [
            "mcp__local__echo",
            "mcp__remote__image",
            "mcp__remote__hang",
        ] {
            assert!(first.tool_names().contains(&name.to_owned()), "{name}");
        }

        // The results: text, the sum, and a text plus an image block.
        let second = requests
            .iter()
            .find(|r| r.first_user_text().contains("PARENT") && r.messages().len() == 3)
            .unwrap();
        let results = results_of(second);
        assert_eq!(results[0]["content"][0]["text"], "echo: hi");
        assert_eq!(results[1]["content"][0]["text"], "5");
        assert_eq!(results[2]["content"][0]["text"], "a red pixel");
        assert_eq!(results[2]["content"][1]["type"], "image");
        assert_eq!(
            results[2]["content"][1]["source"]["media_type"],
            "image/png"
        );
        assert!(results.iter().all(|r| r.get("is_error").is_none()));

        // Filtering per type.
        let offered = |prompt: &str| {
            requests
                .iter()
                .find(|r| r.first_user_text() == prompt)
                .unwrap()
                .tool_names()
                .into_iter()
                .filter(|t| t.starts_with("mcp__"))
                .collect::<Vec<_>>()
        };
        assert!(offered("Look around").is_empty());
        assert!(offered("Try nothing").is_empty());
        assert_eq!(offered("Echo once"), ["mcp__local__echo"]);

        // One stdio server for the whole run, shared by main and reader, stopped at its end.
        let pids = starts(&log);
        assert_eq!(pids.len(), 1, "{pids:?}");
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(calls.matches("call echo").count(), 2, "{calls}");
        for _ in 0..50 {
            if !alive(pids[0]) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!alive(pids[0]), "the stdio server outlived the run");
    }

    #[tokio::test]
    async fn a_crash_and_a_hang_are_errors_naming_the_server_and_the_run_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("local.log");
        let http = McpHttpServer::spawn(&[]);
        let mcp = servers(
            dir.path(),
            json!({"local": stdio(&log), "slow": {"type": "http", "url": http.url()}}),
            Duration::from_secs(2),
        );
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_use("c1", "mcp__local__crash", json!({})),
                Reply::tool_use("h1", "mcp__slow__hang", json!({})),
                Reply::tool_use("f1", "mcp__slow__fail", json!({"message": "no such row"})),
                Reply::text("survived"),
            ],
        );
        let outcome = run(&server, dir.path(), Registry::shipped(), mcp, "go").await;
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(outcome.text, "survived");
        let requests = server.requests();
        let result = |n: usize| results_of(&requests[n])[0].clone();
        let crash = result(1);
        assert_eq!(crash["is_error"], true);
        let text = crash["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("\"local\"") && text.contains("crashing on purpose"),
            "{text}"
        );
        let hang = result(2);
        assert_eq!(hang["is_error"], true);
        let text = hang["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("\"slow\"") && text.contains("did not answer"),
            "{text}"
        );
        let fail = result(3);
        assert_eq!(fail["is_error"], true);
        assert_eq!(fail["content"][0]["text"], "no such row");
    }

    #[tokio::test]
    async fn an_inline_server_lives_and_dies_with_its_subagent() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("own.log");
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "owner", "Use your server")]),
                Reply::text("ok"),
            ],
        );
        server.route(
            Match::FirstUserContains("Use your server".into()),
            vec![
                Reply::tool_use("o1", "mcp__own__echo", json!({"text": "mine"})),
                Reply::text("used"),
            ],
        );
        let mut registry = Registry::shipped();
        let mut owner = spec("name: owner\ndescription: d\ntools: [read_file]\nprompt: p\n");
        owner.mcp_servers = vec![cadre_core::definitions::spec::McpServerRef::Inline(
            [("own".to_owned(), stdio(&log))].into_iter().collect(),
        )];
        registry.insert(owner);
        // The parent sees no server of the run, so it gets no MCP tool.
        let mcp = servers(dir.path(), json!({}), Duration::from_secs(30));
        let outcome = run(&server, dir.path(), registry, mcp, "PARENT task").await;
        assert_eq!(outcome.stop, StopKind::Done);
        let requests = server.requests();
        let sub = requests
            .iter()
            .rfind(|r| r.first_user_text() == "Use your server")
            .unwrap();
        assert_eq!(results_of(sub)[0]["content"][0]["text"], "echo: mine");
        assert!(!requests[0]
            .tool_names()
            .iter()
            .any(|t| t.starts_with("mcp__")));
        let pids = starts(&log);
        assert_eq!(pids.len(), 1);
        // Stopped when the subagent ended, before the run did.
        assert!(!alive(pids[0]));
    }
}

/// Long runs: server-side compaction past the threshold, on demand, and cadre's own summary
/// for servers without it.
mod compaction {
    use super::*;
    use cadre_core::{AgentSpec, Limits, Mode, Orchestrator, Registry};
    use cadre_model::{OpenAiConfig, OpenAiModel, COMPACT_BETA};
    use cadre_testkit::compaction as mock;

    /// A file of about 5,500 tokens: thirty reads of it cross 150,000.
    fn big_file(dir: &std::path::Path) {
        let line = "The quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet.\n";
        std::fs::write(dir.join("big.txt"), line.repeat(300)).unwrap();
    }

    fn reads(prefix: &str, n: usize) -> Vec<Reply> {
        (0..n)
            .map(|i| {
                Reply::tool_use(
                    &format!("toolu_{prefix}{i}"),
                    "read_file",
                    json!({"path": "big.txt"}),
                )
            })
            .collect()
    }

    /// The compaction blocks a request sends, as JSON.
    fn blocks_sent(r: &cadre_testkit::Captured) -> Vec<Value> {
        r.messages()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "compaction")
            .collect()
    }

    fn size(r: &cadre_testkit::Captured) -> usize {
        serde_json::to_string(&r.body).unwrap().len()
    }

    #[tokio::test]
    async fn a_long_loop_compacts_on_the_server_and_sends_the_block_back_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        big_file(dir.path());
        let server = MockServer::start().await;
        let mut replies = reads("r", 32);
        replies.push(Reply::text("read it all"));
        server.route(Match::Any, replies);
        let (mut a, events) = agent(&server, dir.path(), 50, None);
        a.config.compact_at = Some(150_000);
        let outcome = a.run(vec![Message::user_text("read big.txt often")]).await;
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        assert_eq!(outcome.text, "read it all");

        let requests = server.requests();
        for r in &requests {
            assert!(
                r.header("anthropic-beta")
                    .is_some_and(|b| b.split(',').any(|b| b.trim() == COMPACT_BETA)),
                "{:?}",
                r.headers
            );
            assert_eq!(
                r.body["context_management"],
                json!({"edits": [{"type": "compact_20260112",
                                  "trigger": {"type": "input_tokens", "value": 150000}}]})
            );
        }
        // The request that crossed the threshold got the block; every later one sends it back.
        let first = requests
            .iter()
            .position(|r| !blocks_sent(r).is_empty())
            .expect("no request sent a compaction block back");
        let crossing = &requests[first - 1];
        assert!(mock::estimate_tokens(&crossing.body) >= 150_000);
        assert!(mock::estimate_tokens(&requests[first - 2].body) < 150_000);
        let issued = mock::block_for(&crossing.body);
        for r in &requests[first..] {
            assert_eq!(blocks_sent(r), vec![issued.clone()]);
        }
        // What came before it no longer travels: the next request is a fraction of the size.
        assert!(
            size(&requests[first]) * 5 < size(crossing),
            "{} then {}",
            size(crossing),
            size(&requests[first])
        );
        assert_eq!(requests[first].messages()[0]["role"], "assistant");
        // The history keeps everything: the block sits after the earlier turns.
        assert!(outcome.history.len() > requests[first].messages().len());
        let c = outcome.usage.compaction;
        assert_eq!(c.count, 1);
        assert_eq!(c.output_tokens, mock::SUMMARY_TOKENS);
        assert!(c.input_tokens >= 150_000);
        let events = events.lock().unwrap();
        assert!(events.iter().any(|e| matches!(e, Event::Compacting { .. })));
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::Compacted { by, .. } if by == "server")));
    }

    #[tokio::test]
    async fn a_pause_after_compaction_continues_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        let paused = Reply::blocks(vec![Block::Compaction(mock::block("earlier: go"))])
            .stop_reason("compaction");
        server.route(
            Match::Any,
            vec![
                Reply::tool_use("toolu_1", "list_files", json!({})),
                paused,
                Reply::text("carried on"),
            ],
        );
        let (mut a, _) = agent(&server, dir.path(), 10, None);
        a.config.compact_at = Some(150_000);
        let outcome = a.run(vec![Message::user_text("go")]).await;
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(outcome.text, "carried on");
        let last = server.requests().pop().unwrap();
        // The continuation sends the block alone, as the last (assistant) message.
        assert_eq!(last.messages().len(), 1);
        assert_eq!(last.messages()[0]["content"][0], mock::block("earlier: go"));
    }

    #[tokio::test]
    async fn subagents_compact_on_their_own_while_their_parent_does_not() {
        let dir = tempfile::tempdir().unwrap();
        big_file(dir.path());
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([
                    ("t1", "reader", "First reader"),
                    ("t2", "reader", "Second reader"),
                ]),
                Reply::text("both read"),
            ],
        );
        for job in ["First reader", "Second reader"] {
            let mut replies = reads(&job[..1], 12);
            replies.push(Reply::text(&format!("{job} done")));
            server.route(Match::FirstUserContains(job.into()), replies);
        }
        let mut registry = Registry::shipped();
        let (spec, problems) = AgentSpec::parse_yaml(
            std::path::Path::new("reader.yaml"),
            "name: reader\ndescription: Reads files.\nmode: subagent\ntools: [read_file]\ncompact_at: 50000\nprompt: You read files.\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let spec = spec.unwrap();
        assert_eq!(spec.mode, Mode::Subagent);
        registry.insert(spec);
        let mut run = run_config(&server, dir.path());
        run.limits = Limits::default();
        run.runs_dir = Some(dir.path().join(".cadre/runs"));
        let o = Orchestrator::new(registry, run, Arc::new(|_| {}));
        let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        let by_path = |p: &str| {
            summary
                .usage
                .agents
                .iter()
                .find(|a| a.path == p)
                .unwrap()
                .usage
                .compaction
        };
        assert_eq!(by_path("main").count, 0);
        assert_eq!(by_path("main/reader#1").count, 1);
        assert_eq!(by_path("main/reader#2").count, 1);
        assert_eq!(summary.usage.total.usage.compaction.count, 2);
        for r in server.requests() {
            let reader =
                r.first_user_text().contains("reader") || r.messages()[0]["role"] == "assistant";
            if !reader {
                assert!(
                    blocks_sent(&r).is_empty(),
                    "the parent sent a compaction block"
                );
            }
        }
        // summary.json says it too.
        let run_dir = std::fs::read_dir(dir.path().join(".cadre/runs"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(written["usage"]["total"]["usage"]["compaction"]["count"], 2);
    }

    #[tokio::test]
    async fn a_request_refused_as_too_long_is_compacted_on_demand_and_sent_again() {
        let dir = tempfile::tempdir().unwrap();
        big_file(dir.path());
        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.set_context_window(40_000);
        let mut replies = reads("r", 8);
        replies.push(Reply::text("fitted"));
        server.route(Match::Any, replies);
        let (mut a, _) = agent(&server, dir.path(), 30, None);
        // Well above the window: only the refusal can trigger it.
        a.config.compact_at = Some(500_000);
        let outcome = a.run(vec![Message::user_text("read")]).await;
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        assert_eq!(outcome.text, "fitted");
        let requests = server.requests();
        let summarize = requests
            .iter()
            .position(|r| r.body["compaction"] == json!({"type": "summarize"}))
            .expect("no on-demand compaction");
        let r = &requests[summarize];
        assert!(r.body.get("context_management").is_none());
        assert!(r
            .header("anthropic-beta")
            .is_some_and(|b| b.contains(cadre_model::SUMMARIZE_BETA)));
        // The refused request came just before; the one after starts from the block.
        assert!(mock::estimate_tokens(&requests[summarize - 1].body) > 40_000);
        let next = &requests[summarize + 1];
        assert_eq!(next.messages()[0]["content"][0]["type"], "compaction");
        assert_eq!(outcome.usage.compaction.count, 1);

        // With compaction off, the same run stops cleanly and says why.
        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.set_context_window(40_000);
        let mut replies = reads("r", 8);
        replies.push(Reply::text("fitted"));
        server.route(Match::Any, replies);
        let (a, _) = agent(&server, dir.path(), 30, None);
        let outcome = a.run(vec![Message::user_text("read")]).await;
        assert_eq!(outcome.stop, StopKind::ContextWindowExceeded);
        assert!(server
            .requests()
            .iter()
            .all(|r| r.body.get("compaction").is_none()));
    }

    /// An OpenAI-compatible run whose server says its window is `n_ctx` (or says nothing):
    /// whether cadre asked for a summary.
    async fn summarised_with_window(n_ctx: Option<u64>) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.allow_unused_replies();
        if let Some(n) = n_ctx {
            server.set_props(json!({"default_generation_settings": {"n_ctx": n}}));
        }
        server.route(
            Match::LastUserContains("Context is running out".into()),
            vec![Reply::text("SUMMARY of the task so far")],
        );
        server.route(
            Match::FirstUserContains("task".into()),
            vec![
                Reply::tool_use("c1", "list_files", json!({})),
                Reply::tool_use("c2", "list_files", json!({})),
                // 6,000 tokens: past 70% of an 8,192-token window, far from 200,000.
                Reply::tool_use("c3", "list_files", json!({})).usage(6_000, 10, 0, 0),
                Reply::text("done"),
            ],
        );
        let config = OpenAiConfig::new()
            .with_base_url(format!("{}/v1", server.uri()))
            .with_retry(RetryPolicy::none());
        let workspace = Arc::new(Workspace::new(dir.path()).unwrap());
        let run = cadre_core::RunConfig::new(
            workspace,
            Arc::new(OpenAiModel::new(config).unwrap()),
            "local-model",
        );
        let o = Orchestrator::new(Registry::shipped(), run, Arc::new(|_| {}));
        let (outcome, _) = o.run("main", "the task").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        server
            .requests()
            .iter()
            .any(|r| r.last_user_text().contains("Context is running out"))
    }

    #[tokio::test]
    async fn the_window_an_openai_compatible_server_reports_is_the_one_used() {
        assert!(summarised_with_window(Some(8_192)).await);
        assert!(!summarised_with_window(None).await);
    }

    #[tokio::test]
    async fn without_server_compaction_cadre_summarises_old_turns_itself() {
        let dir = tempfile::tempdir().unwrap();
        big_file(dir.path());
        let server = MockServer::start().await;
        let mut replies = reads("c", 4);
        // The fourth request reports a context near the window.
        replies[3] = replies[3].clone().usage(45_000, 10, 0, 0);
        replies.push(Reply::text("done after the summary"));
        server.route(
            Match::LastUserContains("Context is running out".into()),
            vec![Reply::text(
                "SUMMARY of the task: read big.txt four times; it is fox text.",
            )],
        );
        server.route(Match::FirstUserContains("task".into()), replies);
        let config = OpenAiConfig::new()
            .with_base_url(format!("{}/v1", server.uri()))
            .with_retry(RetryPolicy::none());
        let (mut a, events) = agent(&server, dir.path(), 20, None);
        a.model = Arc::new(OpenAiModel::new(config).unwrap());
        a.config.model = "gpt-test".into();
        a.config.context_tokens = 60_000;
        a.config.compact_at = Some(150_000);
        let outcome = a.run(vec![Message::user_text("the task ORIGINAL")]).await;
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        assert_eq!(outcome.text, "done after the summary");
        let requests = server.requests();
        let ask = requests
            .iter()
            .position(|r| r.last_user_text().contains("Context is running out"))
            .expect("no summary request");
        let after = &requests[ask + 1];
        assert!(size(after) < size(&requests[ask - 1]));
        // The summary replaced the older turns: one user message, then the kept turns.
        let msgs = after.messages();
        let first_user = msgs.iter().find(|m| m["role"] == "user").unwrap();
        assert!(first_user["content"]
            .to_string()
            .contains("SUMMARY of the task: read big.txt"));
        assert!(!after.body.to_string().contains("ORIGINAL"));
        assert_eq!(outcome.usage.compaction.count, 1);
        assert!(events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Compacted { by, .. } if by == "cadre")));
        // The mock's checker found no tool message without its call.
    }
}

/// Background subagents: `Task` with `run_in_background`, `TaskOutput`, `TaskStop`, and the
/// results a parent had not collected when it ended its turn.
mod background {
    use super::*;
    use cadre_core::{Orchestrator, Registry};

    fn task(id: &str, kind: &str, job: &str) -> (String, String, Value) {
        (
            id.to_owned(),
            "Task".to_owned(),
            json!({"description": job, "prompt": format!("{job}: do it"), "subagent_type": kind,
                   "run_in_background": true}),
        )
    }

    fn turn(calls: Vec<(String, String, Value)>) -> Reply {
        Reply::tool_uses(
            calls
                .iter()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
                .collect(),
        )
    }

    fn orchestrator(server: &MockServer, dir: &std::path::Path) -> Arc<Orchestrator> {
        let mut run = run_config(server, dir);
        run.runs_dir = Some(dir.join(".cadre/runs"));
        Orchestrator::new(Registry::shipped(), run, Arc::new(|_| {}))
    }

    fn parent_requests(server: &MockServer) -> Vec<cadre_testkit::Captured> {
        server
            .requests()
            .into_iter()
            .filter(|r| r.first_user_text() == "PARENT task")
            .collect()
    }

    #[tokio::test]
    async fn results_arrive_through_task_output_and_when_the_parent_stops_first() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                turn(vec![
                    task("t1", "explore", "Job A"),
                    task("t2", "explore", "Job B"),
                ]),
                turn(vec![(
                    "o1".into(),
                    "TaskOutput".into(),
                    json!({"task_id": "task_1", "wait": true}),
                )]),
                Reply::text("A is in; ending my turn"),
                Reply::text("all done"),
            ],
        );
        server.route(
            Match::FirstUserContains("Job A".into()),
            vec![Reply::text("A result")],
        );
        server.route(
            Match::FirstUserContains("Job B".into()),
            vec![Reply::text("B result")],
        );
        let o = orchestrator(&server, dir.path());
        let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        assert_eq!(outcome.text, "all done");
        let parent = parent_requests(&server);
        assert_eq!(parent.len(), 4);
        // Task returned at once with the task ids.
        let started = parent[1].messages().last().unwrap()["content"].clone();
        assert!(started[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("task_1"));
        assert!(started[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("task_2"));
        // TaskOutput waited for A and gave its final text.
        let output = &parent[2].messages().last().unwrap()["content"][0];
        assert_eq!(output["content"][0]["text"], "A result");
        // Ending the turn with B uncollected: B's result came as the next user message, and
        // only B's (A was collected already).
        let delivered = parent[3].last_user_text();
        assert!(
            delivered.contains("task_2") && delivered.contains("B result"),
            "{delivered}"
        );
        assert!(!delivered.contains("A result"), "{delivered}");
        assert_eq!(summary.usage.agents.len(), 3);
    }

    #[tokio::test]
    async fn task_stop_cancels_a_background_subagent_and_kills_its_commands() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                turn(vec![task("t1", "code", "Slow job")]),
                // Waits, in the parent's own bash, until the subagent's command is running.
                Reply::tool_use(
                    "b1",
                    "bash",
                    json!({"command": "for i in $(seq 600); do [ -s slow.pid ] && break; sleep 0.1; done; cat slow.pid"}),
                ),
                Reply::tool_use("s1", "TaskStop", json!({"task_id": "task_1"})),
                Reply::text("stopped it"),
            ],
        );
        server.route(
            Match::FirstUserContains("Slow job".into()),
            vec![
                Reply::tool_use(
                    "x1",
                    "bash",
                    json!({"command": "echo $$ > slow.pid; sleep 300", "timeout_ms": 600000}),
                ),
                Reply::text("never"),
            ],
        );
        let o = orchestrator(&server, dir.path());
        let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        assert_eq!(outcome.text, "stopped it");
        let parent = parent_requests(&server);
        let stop = &parent[3].messages().last().unwrap()["content"][0];
        assert_ne!(stop["is_error"], true, "{stop}");
        assert!(stop["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("stopped"));
        let child = summary
            .usage
            .agents
            .iter()
            .find(|a| a.path == "main/code#1")
            .unwrap();
        assert_eq!(child.stop, StopKind::Cancelled);
        // Its command was killed with it.
        let pid: i32 = std::fs::read_to_string(dir.path().join("slow.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        assert!(!alive, "the subagent's bash (pid {pid}) still runs");
        // A stopped task is not delivered again when the parent ends its turn.
        assert_eq!(parent.len(), 4);
    }
}

/// Parallel writers: subagents of an `isolation: worktree` type, each in its own git
/// worktree and branch, on a real repository.
mod worktrees {
    use super::*;
    use cadre_core::{AgentSpec, Orchestrator, Registry};
    use cadre_testkit::git::{git, init_repo};
    use std::path::Path;

    /// A repository with one commit: `shared.txt` and a `.gitignore` for cadre's folder.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("shared.txt"), "original\n").unwrap();
        std::fs::write(dir.path().join(".gitignore"), ".cadre/\n").unwrap();
        init_repo(dir.path());
        dir
    }

    fn registry() -> Registry {
        let mut registry = Registry::shipped();
        for yaml in [
            "name: coder\ndescription: Writes code.\nmode: subagent\ntools: [bash, read_file, write_file]\nisolation: worktree\nprompt: You write code.\n",
            "name: checker\ndescription: Checks.\nmode: subagent\ntools: [bash]\nread_only: true\nisolation: worktree\nprompt: You check.\n",
        ] {
            let (spec, problems) = AgentSpec::parse_yaml(Path::new("t.yaml"), yaml);
            assert!(problems.is_empty(), "{problems:?}");
            let spec = spec.unwrap();
            assert!(spec.is_isolated());
            registry.insert(spec);
        }
        registry
    }

    fn results(server: &MockServer) -> Vec<(String, bool)> {
        let parent = server
            .requests()
            .into_iter()
            .filter(|r| r.first_user_text() == "PARENT task")
            .nth(1)
            .unwrap();
        parent.messages().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["content"][0]["text"].as_str().unwrap().to_owned(),
                    r["is_error"] == true,
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn isolated_writers_change_one_file_at_once_each_on_its_own_branch() {
        let dir = repo();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([
                    ("t1", "coder", "Writer one"),
                    ("t2", "coder", "Writer two"),
                    ("t3", "coder", "Idle one"),
                    ("t4", "checker", "Try to write"),
                ]),
                Reply::text("review the branches"),
            ],
        );
        for (job, text) in [("Writer one", "from one"), ("Writer two", "from two")] {
            server.route(
                Match::FirstUserContains(job.into()),
                vec![
                    Reply::tool_use(
                        "w",
                        "bash",
                        json!({"command": format!("printf '{text}\\n' > shared.txt")}),
                    ),
                    Reply::text(&format!("{job} done")),
                ],
            );
        }
        server.route(
            Match::FirstUserContains("Idle one".into()),
            vec![Reply::text("nothing to change")],
        );
        server.route(
            Match::FirstUserContains("Try to write".into()),
            vec![
                Reply::tool_use("p", "bash", json!({"command": "echo x > probe.txt"})),
                Reply::text("could not write"),
            ],
        );
        // Both writers' first requests must be with the model at once.
        server.hold_until_waiting(
            Match::FirstUserContains("Writer".into()),
            2,
            Duration::from_secs(60),
        );
        let mut run = run_config(&server, dir.path());
        run.runs_dir = Some(dir.path().join(".cadre/runs"));
        let o = Orchestrator::new(registry(), run, Arc::new(|_| {}));
        let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
        let id = summary.run_id.clone().unwrap();
        let results = results(&server);
        assert_eq!(results.len(), 4);
        for (i, job) in ["Writer one", "Writer two"].iter().enumerate() {
            let (text, is_error) = &results[i];
            assert!(!is_error, "{text}");
            assert!(text.starts_with(&format!("{job} done")), "{text:?}");
            let branch = format!("cadre/{id}/coder-{}", i + 1);
            assert!(
                text.contains(&branch) && text.contains("shared.txt"),
                "{text}"
            );
        }
        assert!(results[2].0.contains("changed no file"), "{}", results[2].0);
        assert!(results[3].0.contains("changed no file"), "{}", results[3].0);
        // The read-only checker's bash was refused its write inside its worktree too.
        let checker = server
            .requests()
            .into_iter()
            .rfind(|r| r.first_user_text() == "Try to write")
            .unwrap();
        let refused = &checker.messages().last().unwrap()["content"][0];
        assert_eq!(refused["is_error"], true, "{refused}");
        // Each branch holds its own version; the main checkout is as it was.
        let show = |branch: &str| git(dir.path(), &["show", &format!("{branch}:shared.txt")]);
        assert_eq!(show(&format!("cadre/{id}/coder-1")), "from one\n");
        assert_eq!(show(&format!("cadre/{id}/coder-2")), "from two\n");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("shared.txt")).unwrap(),
            "original\n"
        );
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        // Only the two writers left a branch (the idle coder and the read-only checker none).
        let branches = git(dir.path(), &["branch", "--list", "cadre/*"]);
        assert_eq!(branches.lines().count(), 2, "{branches}");
        assert_eq!(
            git(dir.path(), &["worktree", "list"]).lines().count(),
            1,
            "a worktree was left behind"
        );
        // The commit names the agent and its task.
        let log = git(
            dir.path(),
            &["log", "-1", "--format=%s", &format!("cadre/{id}/coder-1")],
        );
        assert!(
            log.contains("main/coder#1") && log.contains("job t1"),
            "{log}"
        );
    }

    #[tokio::test]
    async fn outside_a_git_repository_an_isolated_subagent_fails_clearly_and_the_run_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "coder", "Writer one"), ("t2", "explore", "Look")]),
                Reply::text("went on"),
            ],
        );
        server.route(
            Match::FirstUserContains("Look".into()),
            vec![Reply::text("looked")],
        );
        let o = Orchestrator::new(
            registry(),
            run_config(&server, dir.path()),
            Arc::new(|_| {}),
        );
        let (outcome, _) = o.run("main", "PARENT task").await.unwrap();
        assert_eq!(outcome.stop, StopKind::Done);
        assert_eq!(outcome.text, "went on");
        let results = results(&server);
        assert!(results[0].1, "not an error: {}", results[0].0);
        assert!(
            results[0].0.contains("not inside a git work tree"),
            "{}",
            results[0].0
        );
        assert_eq!(results[1], ("looked".to_owned(), false));
    }
}

mod schemas {
    use super::*;
    use cadre_core::{Orchestrator, Registry, SkillSet};
    use std::path::Path;

    /// The tool definitions the model is offered must not change by accident: recorded
    /// cassettes key their requests by them, so a drifted schema stops every replay.
    #[tokio::test]
    async fn the_tool_schemas_offered_to_the_model_match_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("skills/demo/SKILL.md");
        std::fs::create_dir_all(skill.parent().unwrap()).unwrap();
        std::fs::write(
            &skill,
            "---\nname: demo\ndescription: A demonstration skill.\n---\nDo the demo.\n",
        )
        .unwrap();
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("done")]);
        let mut run = run_config(&server, dir.path());
        run.skills = Arc::new(SkillSet::load(&[dir.path().join("skills")]));
        let o = Orchestrator::new(Registry::shipped(), run, Arc::new(|_| {}));
        o.run("main", "hello").await.unwrap();
        let tools = server.requests()[0].body["tools"].clone();
        // The body is parsed as it arrived, so key order is compared too wherever the JSON
        // maps keep it.
        let got = serde_json::to_string_pretty(&tools).unwrap() + "\n";
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tool_schemas.json");
        if std::env::var_os("CADRE_UPDATE_SNAPSHOTS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap();
        let names: Vec<String> = server.requests()[0].tool_names();
        assert!(
            cadre_tools::BUILTIN_TOOL_NAMES
                .iter()
                .chain(&["Task", "TaskOutput", "TaskStop", "Skill"])
                .all(|n| names.iter().any(|m| m == n)),
            "{names:?}"
        );
        assert!(
            got == want,
            "the tool definitions offered to the model changed (recorded cassettes will no longer replay); if that is intended, run with CADRE_UPDATE_SNAPSHOTS=1\n{}",
            similar::TextDiff::from_lines(&want, &got).unified_diff()
        );
    }
}

mod builder {
    use super::*;
    use cadre_core::{AgentSpec, Mode, Orchestrator, RunError};
    use cadre_tools::{Json, ToolError, TypedTool};
    use futures::StreamExt;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A custom tool: a struct, a derive and one async fn.
    struct WordCount;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Count {
        /// The text whose words to count.
        text: String,
    }

    #[derive(Serialize)]
    struct Counted {
        words: usize,
    }

    #[async_trait::async_trait]
    impl TypedTool for WordCount {
        type Input = Count;
        type Output = Json<Counted>;
        fn name(&self) -> &str {
            "word_count"
        }
        fn description(&self) -> String {
            "Count the words of a text.".into()
        }
        fn is_read_only(&self) -> bool {
            true
        }
        async fn run(&self, input: Count, _ctx: &ToolContext) -> Result<Json<Counted>, ToolError> {
            Ok(Json(Counted {
                words: input.text.split_whitespace().count(),
            }))
        }
    }

    /// A custom tool that changes things, which read-only types must not get.
    struct Stamp;

    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}

    #[async_trait::async_trait]
    impl TypedTool for Stamp {
        type Input = Nothing;
        type Output = String;
        fn name(&self) -> &str {
            "stamp"
        }
        fn description(&self) -> String {
            "Stamp the ledger.".into()
        }
        fn is_read_only(&self) -> bool {
            false
        }
        async fn run(&self, _: Nothing, _ctx: &ToolContext) -> Result<String, ToolError> {
            Ok("stamped".into())
        }
    }

    fn counter() -> AgentSpec {
        AgentSpec {
            name: "counter".into(),
            description: "Counts words.".into(),
            mode: Mode::Primary,
            tools: vec!["word_count".into(), "Task".into()],
            prompt: "You count words.".into(),
            ..AgentSpec::default()
        }
    }

    fn reader() -> AgentSpec {
        AgentSpec {
            name: "reader".into(),
            description: "Reads only.".into(),
            mode: Mode::Subagent,
            read_only: true,
            prompt: "You are a reader subagent.".into(),
            ..AgentSpec::default()
        }
    }

    #[tokio::test]
    async fn a_typed_tool_and_a_code_defined_type_run_and_events_stream_until_the_run_ends() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("Count".into()),
            vec![
                Reply::tool_uses(vec![
                    ("toolu_1", "word_count", json!({"text": "one two three"})),
                    ("toolu_2", "Task", json!({"description": "look", "prompt": "Look around", "subagent_type": "reader"})),
                ]),
                Reply::text("Three words."),
            ],
        );
        server.route(
            Match::FirstUserContains("Look around".into()),
            vec![Reply::text("looked")],
        );
        let o = Orchestrator::builder()
            .model(mock_model(&server, 0))
            .workspace(dir.path())
            .agent(counter())
            .agent(reader())
            .tool(WordCount)
            .tool(Stamp)
            .build()
            .unwrap();
        let events = o.events();
        let collected = tokio::spawn(events.collect::<Vec<Event>>());
        let (outcome, _) = o.run("counter", "Count the words").await.unwrap();
        assert_eq!(outcome.text, "Three words.");
        // The stream ends with the run, though the orchestrator lives on.
        let events = tokio::time::timeout(Duration::from_secs(30), collected)
            .await
            .unwrap()
            .unwrap();
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::Finished { agent, .. } if agent == "counter")));
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::ToolCall { name, .. } if name == "word_count")));

        let first = &server.requests()[0];
        assert_eq!(
            first.tool_names(),
            ["word_count", "Task", "TaskOutput", "TaskStop"]
        );
        let schema = &first.body["tools"][0]["input_schema"];
        assert_eq!(
            schema,
            &json!({"type": "object", "properties": {"text": {"type": "string", "description": "The text whose words to count."}}, "required": ["text"], "additionalProperties": false})
        );
        let results = tool_results(&server, 2);
        assert_eq!(results[0]["content"][0]["text"], r#"{"words":3}"#);
        // The read-only subagent was offered every built-in and the read-only extra tool,
        // never the one that changes things.
        let sub = server
            .requests()
            .into_iter()
            .find(|r| r.first_user_text() == "Look around")
            .unwrap();
        let names = sub.tool_names();
        assert!(names.iter().any(|n| n == "word_count"), "{names:?}");
        assert!(names.iter().all(|n| n != "stamp"), "{names:?}");
    }

    #[tokio::test]
    async fn the_builder_says_what_is_missing() {
        let err = Orchestrator::builder().build().map(|_| ()).unwrap_err();
        assert!(matches!(err, RunError::NoModel), "{err}");
        let err = Orchestrator::builder()
            .openai(cadre_model::OpenAiConfig::new())
            .build()
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, RunError::NoModelId), "{err}");
        let server = MockServer::start().await;
        let err = Orchestrator::builder()
            .model(mock_model(&server, 0))
            .workspace("/nonexistent/cadre-builder-test")
            .build()
            .map(|_| ())
            .unwrap_err();
        assert!(
            err.to_string().starts_with("cannot work in /nonexistent"),
            "{err}"
        );
        let o = Orchestrator::builder()
            .model(mock_model(&server, 0))
            .build()
            .unwrap();
        let err = o.run("explore", "x").await.unwrap_err();
        assert!(matches!(err, RunError::NotPrimary(_)), "{err}");
        let err = o.run("nope", "x").await.unwrap_err().to_string();
        assert!(err.contains("primary types: main"), "{err}");
    }
}
