use super::*;

#[tokio::test]
async fn run_prints_the_answer_the_tools_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# Demo project\n").unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("toolu_1", "read_file", json!({"path": "README.md"})),
            Reply::text("This is the Demo project.").usage(1200, 80, 0, 900),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("sk-test-secret"),
        &["run", "What is this?"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("This is the Demo project."),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("read_file README.md"), "{}", out.stderr);
    assert!(
        out.stderr.contains("outcome") && out.stderr.contains("completed"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("sk-test-secret") && !out.stderr.contains("sk-test-secret"));
    let first = &server.requests()[0];
    assert_eq!(first.header("x-api-key"), Some("sk-test-secret"));
    assert_eq!(first.body["model"], "claude-sonnet-5-5");
    assert!(first.tool_names().contains(&"bash".to_string()));
}

#[tokio::test]
async fn json_output_is_one_result_object() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("42").usage(10, 3, 0, 0)]);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--model", "haiku", "--output-format", "json", "q"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["answer"], "42");
    assert_eq!(v["stop"], json!({"kind": "done"}));
    assert_eq!(v["turns"], 1);
    assert_eq!(v["usage"]["output_tokens"], 3);
    assert_eq!(server.requests()[0].body["model"], "claude-haiku-5-5");
}

#[tokio::test]
async fn stream_json_prints_one_event_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("toolu_1", "list_files", json!({})),
            Reply::text("done"),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--output-format", "stream-json", "q"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for want in [
        "started",
        "turn",
        "tool_call",
        "tool_result",
        "usage",
        "text",
        "finished",
        "result",
    ] {
        assert!(kinds.contains(&want), "no {want} in {kinds:?}");
    }
    assert_eq!(kinds.last(), Some(&"result"));
}

#[tokio::test]
async fn retries_429_with_retry_after_and_529_then_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::error_status(429, "rate_limit_error", "slow down").retry_after(1),
            Reply::error_status(529, "overloaded_error", "Overloaded"),
            Reply::stream_error("overloaded_error", "Overloaded"),
            Reply::text("made it"),
        ],
    );
    let started = std::time::Instant::now();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", "q"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("made it"));
    assert_eq!(server.requests().len(), 4);
    // retry-after: 1 was honoured (a lower bound, so no flakiness on a slow machine).
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
}

#[tokio::test]
async fn an_api_400_prints_its_message_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::error_status(
            400,
            "invalid_request_error",
            "messages: text content blocks must be non-empty",
        )],
    );
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", "q"]).await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("messages: text content blocks must be non-empty"),
        "{}",
        out.stderr
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stopping_early_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("t1", "list_files", json!({})),
            Reply::tool_use("t2", "list_files", json!({})),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--max-turns", "2", "q"],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("turn limit"), "{}", out.stderr);

    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("I can't help with that.").stop_reason("refusal")],
    );
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", "q"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("refusal"), "{}", out.stderr);
}

#[tokio::test]
async fn the_budget_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("t1", "list_files", json!({})).usage(900, 200, 0, 0),
            Reply::text("too late"),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &[
            "run",
            "--budget-tokens",
            "1000",
            "--output-format",
            "json",
            "q",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["stop"], json!({"kind": "budget"}));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_key_and_base_url_pasted_with_spaces_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("reached")]);
    let url = format!(" {}\n", server.uri());
    let out = cadre(dir.path(), &url, Some(" k-with-spaces \n"), &["run", "q"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("reached"));
    assert_eq!(
        server.requests()[0].header("x-api-key"),
        Some("k-with-spaces")
    );
}

#[tokio::test]
async fn configuration_problems_get_one_plain_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;

    let out = cadre(dir.path(), &server.uri(), None, &["run", "q"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("export ANTHROPIC_API_KEY"),
        "{}",
        out.stderr
    );

    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["-C", "/no/such/folder", "run", "q"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no such folder"), "{}", out.stderr);
    assert!(server.requests().is_empty());

    // A port that nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = cadre(
        dir.path(),
        &url,
        Some("k"),
        &["run", "--max-retries", "0", "q"],
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr.contains("could not reach the model API"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(&url), "{}", out.stderr);
}

#[tokio::test]
async fn help_explains_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = cadre(dir.path(), "http://127.0.0.1:9", None, &["run", "--help"]).await;
    assert_eq!(out.code, 0);
    for flag in [
        "--model",
        "--max-turns",
        "--budget-tokens",
        "--output-format",
        "CADRE_MODEL",
        "ANTHROPIC_BASE_URL",
    ] {
        assert!(out.stdout.contains(flag), "--help lacks {flag}");
    }
}

#[tokio::test]
async fn the_readme_quick_start_runs_offline() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let command = readme
        .lines()
        .find(|l| l.starts_with("cargo run") && l.contains("--replay"))
        .expect("the README's main-job command");
    // Run the same arguments through the built binary.
    let args: Vec<String> = shell_words(command.split(" -- ").nth(1).unwrap());
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.insert(
        args.iter().position(|a| *a == "run").unwrap() + 1,
        "--no-transcripts",
    );
    let out = cadre_env(&repo, &[], &args).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("How todo stores items"),
        "{}",
        out.stdout
    );
    for agent in ["main/explore#1", "main/explore#2", "main/plan#1", "total"] {
        assert!(
            out.stderr.contains(agent),
            "{agent} missing from:\n{}",
            out.stderr
        );
    }
}

#[tokio::test]
async fn sigterm_stops_every_agent_kills_their_commands_and_leaves_valid_transcripts() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let calls = (1..=3).map(|i| (format!("t{i}"), "code".to_owned(), format!("Job {i}.")));
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks(calls), Reply::text("never")],
    );
    for i in 1..=3 {
        server.route(
            Match::FirstUserContains(format!("Job {i}.")),
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
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env("ANTHROPIC_API_KEY", "sk-test-signal")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .args(["run", "PARENT"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (up to a minute) until all three commands are running.
    let pid_of = |i: u32| -> Option<i32> {
        std::fs::read_to_string(dir.path().join(format!("pid{i}")))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    for _ in 0..6000 {
        if (1..=3).all(|i| pid_of(i).is_some()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let pids: Vec<i32> = (1..=3)
        .map(|i| pid_of(i).expect("the commands never started"))
        .collect();
    let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    // SIGTERM is not Ctrl-C: the message says which signal came.
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    assert!(!stderr.contains("Ctrl-C again"), "{stderr}");
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "command {pid} survived"
        );
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join(".cadre/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    // Every line of the run's transcript is whole JSON, and each agent's last is its
    // outcome: cancelled.
    let text = std::fs::read_to_string(runs[0].join("transcript.jsonl")).unwrap();
    let mut last: std::collections::BTreeMap<String, Value> = Default::default();
    for line in text.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        last.insert(line["agent"].as_str().unwrap().to_owned(), line);
    }
    assert_eq!(last.len(), 4, "{text}");
    for (agent, line) in &last {
        assert_eq!(line["type"], "outcome", "{agent}");
        assert_eq!(line["stop"]["kind"], "cancelled", "{agent}");
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(runs[0].join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["stop"]["kind"], "cancelled");
}

#[tokio::test]
async fn a_retried_stream_marks_the_repeated_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    // The first attempt streams some text, then the stream breaks; the retry succeeds.
    server.route(
        Match::Any,
        vec![
            Reply::text("Hello partial answer").truncated(5),
            Reply::text("Hello world."),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--no-transcripts", "q"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(server.requests().len(), 2);
    let marker = out
        .stdout
        .find("the answer starts again")
        .expect("no retry marker");
    assert!(
        out.stdout[marker..].contains("Hello world."),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn a_closed_pipe_does_not_crash_cadre() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("t1", "list_files", json!({})),
            Reply::text("done"),
        ],
    );
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .args([
            "run",
            "--no-transcripts",
            "--output-format",
            "stream-json",
            "q",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Like `| head -1`: read one line, then close the pipe.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(first.contains("\"event\""), "{first}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn more_configuration_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        Some("k"),
        &["-C", file.to_str().unwrap(), "run", "q"],
    )
    .await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("is a file, not a folder"),
        "{}",
        out.stderr
    );

    let out = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        Some("k"),
        &["run", "--agents-dir", "no-such-dir", "q"],
    )
    .await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("--agents-dir no-such-dir: no such folder"),
        "{}",
        out.stderr
    );
    let out = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        None,
        &["skills", "list", "--skills-dir", "nope"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);

    let out = cadre_env(dir.path(), &[], &["run", "--provider", "openai", "q"]).await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--model"), "{}", out.stderr);
    let out = cadre_env(
        dir.path(),
        &[],
        &["run", "--provider", "openai", "--model", "gpt-5", "q"],
    )
    .await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("OPENAI_API_KEY is not set"),
        "{}",
        out.stderr
    );

    let out = cadre_env(dir.path(), &[], &["run", "q"]).await;
    assert!(out.stderr.contains("--replay FILE"), "{}", out.stderr);
}
