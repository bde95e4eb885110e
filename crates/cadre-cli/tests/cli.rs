//! The real `cadre` binary against the shared mock Messages API server on 127.0.0.1.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;
use cadre_testkit::{Match, MockServer, Reply};
use serde_json::{json, Value};
use std::path::Path;

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `cadre` with `args` in `dir`, pointed at `base_url`, with a test key (or none).
async fn cadre(dir: &Path, base_url: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::cargo_bin("cadre").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("CADRE_MODEL")
        .env_remove("RUST_LOG")
        .env("ANTHROPIC_BASE_URL", base_url)
        .args(args)
        .timeout(std::time::Duration::from_secs(120));
    if let Some(key) = key {
        cmd.env("ANTHROPIC_API_KEY", key);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

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
        out.stderr.contains("outcome") && out.stderr.contains("done"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("sk-test-secret") && !out.stderr.contains("sk-test-secret"));
    let first = &server.requests()[0];
    assert_eq!(first.header("x-api-key"), Some("sk-test-secret"));
    assert_eq!(first.body["model"], "claude-sonnet-5-5");
    assert!(first.tool_names().contains(&"bash".to_string()));
    server.assert_clean();
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
    assert_eq!(v["stop"], "done");
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
    assert_eq!(v["stop"], "budget");
    assert_eq!(server.requests().len(), 1);
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
