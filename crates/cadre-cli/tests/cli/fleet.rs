use super::*;

#[tokio::test]
async fn a_run_with_subagents_logs_each_one_and_tables_usage_per_agent() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "pub fn alpha() {}\n").unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tasks([("t1", "explore", "Find alpha"), ("t2", "plan", "Plan beta")]),
            Reply::text("Survey complete."),
        ],
    );
    server.route(
        Match::FirstUserContains("Find alpha".into()),
        vec![
            Reply::tool_use("g1", "grep", json!({"pattern": "alpha"})),
            Reply::text("alpha is in lib.rs:1").usage(2000, 50, 0, 1500),
        ],
    );
    server.route(
        Match::FirstUserContains("Plan beta".into()),
        vec![Reply::text("1. add beta")],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--max-parallel", "1", "Survey the code"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Survey complete."));
    assert!(
        !out.stdout.contains("alpha is in lib.rs"),
        "a subagent's text leaked to stdout"
    );
    for want in [
        "main/explore#1 started: job t1",
        "main/explore#1 grep alpha",
        "main/plan#1 completed",
        "explore#1",
        "plan#1",
        "total",
        "transcripts: .cadre/runs/",
    ] {
        assert!(
            out.stderr.contains(want),
            "stderr lacks {want:?}:\n{}",
            out.stderr
        );
    }
    assert_eq!(server.max_in_flight(), 1);

    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--agent", "explore", "x"],
    )
    .await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("subagent type"), "{}", out.stderr);
}

fn tool_calls_of(stream_json: &str) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = stream_json
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "tool_call")
        .map(|e| {
            (
                e["agent"].as_str().unwrap().to_owned(),
                e["name"].as_str().unwrap().to_owned(),
                e["input"].to_string(),
            )
        })
        .collect();
    calls.sort();
    calls
}

#[tokio::test]
async fn the_openai_provider_runs_a_whole_fleet() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "pub fn alpha() {}\n").unwrap();
    let server = MockServer::start().await;
    fleet_routes(&server);
    let url = format!("{}/v1", server.uri());
    let out = cadre_env(
        dir.path(),
        &[("OPENAI_BASE_URL", &url)],
        &[
            "run",
            "--provider",
            "openai",
            "--model",
            "qwen3:8b",
            "--output-format",
            "stream-json",
            "Survey the code",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        answer_of(&out.stdout),
        "Survey complete: alpha, beta, gamma."
    );
    assert_eq!(tool_calls_of(&out.stdout).len(), 6);
    let requests = server.requests();
    assert_eq!(requests.len(), 8);
    for r in &requests {
        assert_eq!(r.body["model"], "qwen3:8b");
        assert!(
            r.header("authorization").is_none(),
            "no key was given, none may be sent"
        );
        assert_eq!(r.messages()[0]["role"], "system");
    }
    // The parent's second request carries the three results as `tool` messages, in order.
    let parent = requests
        .iter()
        .rfind(|r| r.first_user_text() == "Survey the code")
        .unwrap();
    let tools: Vec<&Value> = parent
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    let ids: Vec<&str> = tools
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["t1", "t2", "t3"]);
    assert_eq!(tools[2]["content"], "1. add gamma");
}

#[tokio::test]
async fn a_recorded_run_replays_the_same_in_any_order_and_refuses_a_changed_prompt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "pub fn alpha() {}\n").unwrap();
    // Outside the workspace: a cassette the agents' grep could find would change what they see.
    let tapes = tempfile::tempdir().unwrap();
    let cassette = tapes.path().join("run.jsonl");
    let cassette = cassette.to_str().unwrap();

    let server = MockServer::start().await;
    fleet_routes(&server);
    let recorded = cadre_env(
        dir.path(),
        &[
            ("ANTHROPIC_API_KEY", "sk-test-recording"),
            ("ANTHROPIC_BASE_URL", &server.uri()),
        ],
        &[
            "run",
            "--record",
            cassette,
            "--output-format",
            "stream-json",
            "Survey the code",
        ],
    )
    .await;
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let cassette_text = std::fs::read_to_string(cassette).unwrap();
    assert!(
        !cassette_text.contains("sk-test-recording"),
        "the key leaked into the cassette"
    );
    assert_eq!(cassette_text.lines().count(), 1 + 8);

    // No server, no key: replay under both limits gives the same answer and tool calls.
    for parallel in ["1", "16"] {
        let replayed = cadre_env(
            dir.path(),
            &[],
            &[
                "run",
                "--replay",
                cassette,
                "--max-parallel",
                parallel,
                "--output-format",
                "stream-json",
                "Survey the code",
            ],
        )
        .await;
        assert_eq!(
            replayed.code, 0,
            "--max-parallel {parallel}: {}",
            replayed.stderr
        );
        assert_eq!(answer_of(&replayed.stdout), answer_of(&recorded.stdout));
        assert_eq!(
            tool_calls_of(&replayed.stdout),
            tool_calls_of(&recorded.stdout)
        );
    }
    assert_eq!(server.requests().len(), 8, "replay reached the server");

    // An explorer with another prompt no longer matches its recording.
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agents/explore.yaml"),
    )
    .unwrap();
    assert!(shipped.contains("You are an explorer"));
    let changed = shipped.replace("You are an explorer", "You are a DIFFERENT explorer");
    std::fs::write(agents.join("explore.yaml"), changed).unwrap();
    let changed = cadre_env(
        dir.path(),
        &[],
        &["run", "--replay", cassette, "Survey the code"],
    )
    .await;
    assert_eq!(changed.code, 3, "{}", changed.stderr);
    assert!(
        changed.stderr.contains("main/explore#"),
        "{}",
        changed.stderr
    );
    assert!(
        changed.stderr.contains("DIFFERENT explorer"),
        "the diff is not shown: {}",
        changed.stderr
    );
}
