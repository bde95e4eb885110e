use super::*;
use cadre_core::{AgentSpec, Mode, Orchestrator, Registry};
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
    let o = mock_builder(&server, dir.path())
        .registry(registry)
        .runs_dir(dir.path().join(".cadre/runs"))
        .build()
        .unwrap();
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
    let o = Orchestrator::builder()
        .model(Arc::new(OpenAiModel::new(config).unwrap()))
        .model_id("local-model")
        .workspace(dir.path())
        .build()
        .unwrap();
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
