use super::*;

fn big_file(dir: &Path) {
    let line = "The quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet.\n";
    std::fs::write(dir.join("big.txt"), line.repeat(300)).unwrap();
}

/// Twelve reads of big.txt (they cross 50,000 input tokens), then an answer.
fn route_reads(server: &MockServer) {
    let mut replies: Vec<Reply> = (0..12)
        .map(|i| {
            Reply::tool_use(
                &format!("toolu_{i}"),
                "read_file",
                json!({"path": "big.txt"}),
            )
        })
        .collect();
    replies.push(Reply::text("read it all"));
    server.route(Match::FirstUserContains("READ".into()), replies);
}

fn env(server: &MockServer) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", server.uri()),
        ("ANTHROPIC_API_KEY", "k".into()),
    ]
}

async fn run(dir: &Path, env: &[(&str, String)], args: &[&str]) -> Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    cadre_env(dir, &env, args).await
}

fn summary(dir: &Path) -> Value {
    let run = std::fs::read_dir(dir.join(".cadre/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap()
}

#[tokio::test]
async fn the_table_summary_and_stream_json_show_compactions_and_a_recording_replays() {
    let dir = tempfile::tempdir().unwrap();
    big_file(dir.path());
    let tapes = tempfile::tempdir().unwrap();
    let cassette = tapes.path().join("long.jsonl");
    let cassette = cassette.to_str().unwrap();
    let server = MockServer::start().await;
    route_reads(&server);
    let out = run(
        dir.path(),
        &env(&server),
        &[
            "run",
            "--compact-at",
            "50000",
            "--record",
            cassette,
            "READ big.txt",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("read it all"), "{}", out.stdout);
    let header = out
        .stderr
        .lines()
        .find(|l| l.starts_with("agent "))
        .unwrap_or_else(|| panic!("no table: {}", out.stderr));
    assert!(header.contains("compacted"), "{header}");
    let main_row = out.stderr.lines().find(|l| l.starts_with("main ")).unwrap();
    assert!(main_row.contains("1 · "), "{main_row}");
    let s = summary(dir.path());
    let c = &s["usage"]["agents"][0]["usage"]["compaction"];
    assert_eq!(c["count"], 1, "{s}");
    assert!(c["input_tokens"].as_u64().unwrap() >= 50_000);
    assert!(server
        .requests()
        .iter()
        .any(|r| r.body["messages"][0]["role"] == "assistant"));

    // The recording replays offline, compaction and all, the same answer and events.
    let replayed = run(
        dir.path(),
        &[],
        &[
            "run",
            "--replay",
            cassette,
            "--output-format",
            "stream-json",
            "READ big.txt",
        ],
    )
    .await;
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(answer_of(&replayed.stdout), "read it all");
    let compacted: Vec<Value> = replayed
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "compacted")
        .collect();
    assert_eq!(compacted.len(), 1, "{}", replayed.stdout);
    assert_eq!(compacted[0]["agent"], "main");
    assert_eq!(compacted[0]["by"], "server");
    assert!(compacted[0]["usage"]["input_tokens"].as_u64().unwrap() >= 50_000);
}

#[tokio::test]
async fn compact_at_is_checked_and_off_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["49999", "lots"] {
        let out = run(dir.path(), &[], &["run", "--compact-at", bad, "x"]).await;
        assert_eq!(out.code, 2, "{bad}: {}", out.stderr);
        assert!(out.stderr.contains("50000"), "{}", out.stderr);
    }
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("hi"), Reply::text("hi")]);
    let out = run(
        dir.path(),
        &env(&server),
        &["run", "--compact-at", "off", "x"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = &server.requests()[0];
    assert!(r.body.get("context_management").is_none());
    assert!(r.header("anthropic-beta").is_none());
    // By default the edit and its beta go with every request.
    let out = run(dir.path(), &env(&server), &["run", "x"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = server.requests().pop().unwrap();
    assert_eq!(
        r.body["context_management"]["edits"][0]["trigger"]["value"],
        150_000
    );
    assert!(r
        .header("anthropic-beta")
        .unwrap()
        .contains("compact-2026-01-12"));
}

#[tokio::test]
async fn past_the_window_a_run_compacts_or_without_compaction_stops_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    big_file(dir.path());
    // Compaction off: the refusal ends the run cleanly, saying why.
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.set_context_window(40_000);
    route_reads(&server);
    let out = run(
        dir.path(),
        &env(&server),
        &["run", "--compact-at", "off", "READ it"],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("context window"), "{}", out.stderr);
    // On (the default): the same run compacts on demand and finishes.
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.set_context_window(40_000);
    route_reads(&server);
    let out = run(dir.path(), &env(&server), &["run", "READ it"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("read it all"));
}

#[tokio::test]
async fn a_follow_up_to_a_conversation_past_the_threshold_compacts_it_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("FIRST".into()),
        // The answer reports a context already past the threshold.
        vec![Reply::text("first answer").usage(160_000, 10, 0, 0)],
    );
    let out = run(dir.path(), &env(&server), &["run", "FIRST question"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    server.route(
        Match::LastUserContains("SECOND".into()),
        vec![Reply::text("second answer")],
    );
    let out = run(
        dir.path(),
        &env(&server),
        &["run", "--continue", "SECOND question"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("second answer"), "{}", out.stdout);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    // The compaction request carries the conversation so far, and the follow-up goes
    // after the block that replaced it.
    assert_eq!(requests[1].body["compaction"]["type"], "summarize");
    assert_eq!(requests[1].messages().len(), 2);
    let last = &requests[2];
    assert_eq!(last.messages().len(), 2);
    assert_eq!(last.messages()[0]["content"][0]["type"], "compaction");
    assert!(last.last_user_text().contains("SECOND question"));
    assert_eq!(
        summary(dir.path())["usage"]["total"]["usage"]["compaction"]["count"],
        1
    );
}
