//! The real `cadre` binary against the shared mock Messages API server on 127.0.0.1.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;
use cadre_testkit::{Match, MockServer, Reply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `cadre` with `args` in `dir`, pointed at `base_url`, with a test key (or none).
async fn cadre(dir: &Path, base_url: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut env = vec![("ANTHROPIC_BASE_URL", base_url)];
    env.extend(key.map(|k| ("ANTHROPIC_API_KEY", k)));
    cadre_env(dir, &env, args).await
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
async fn agents_check_reports_every_bad_definition_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    let write = |name: &str, text: &str| std::fs::write(agents.join(name), text).unwrap();
    write(
        "broken.yaml",
        "name: broken\ndescription: [unclosed\nprompt: hi\n",
    );
    write(
        "tools.yaml",
        "name: tooly\ndescription: d\ntools: [read_file, teleport]\nprompt: p\n",
    );
    write(
        "badname.yaml",
        "name: Bad Name\ndescription: d\nprompt: p\n",
    );
    write("nodesc.yaml", "name: nodesc\nprompt: p\n");
    write("noprompt.yaml", "name: noprompt\ndescription: d\n");
    write(
        "model.yaml",
        "name: modelly\ndescription: d\nmodel: sonet\nprompt: p\n",
    );
    write("dup1.yaml", "name: twin\ndescription: d\nprompt: p\n");
    write("dup2.yaml", "name: twin\ndescription: d\nprompt: p\n");
    write(
        "typo.yaml",
        "name: typo\ndescription: d\nprompt: p\nmax_turn: 3\n",
    );
    write(
        "good.yaml",
        "name: good\ndescription: A fine agent.\ntools: [Read, Grep]\nprompt: Be good.\n",
    );
    let out = cadre(dir.path(), "http://127.0.0.1:9", None, &["agents", "check"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let report = out.stdout;
    let has = |file: &str, pos: &str, words: &str| {
        let line = report
            .lines()
            .find(|l| l.contains(file) && l.contains(words));
        let line =
            line.unwrap_or_else(|| panic!("no {file} problem mentioning {words:?} in:\n{report}"));
        assert!(
            line.contains(&format!("{file}:{pos}")),
            "{file} should be at {pos}: {line}"
        );
    };
    has("broken.yaml", "3:7", "flow sequence");
    has("tools.yaml", "3:20", "teleport");
    has("badname.yaml", "1:7", "bad name");
    has("nodesc.yaml", "", "missing description");
    has("noprompt.yaml", "", "missing prompt");
    has("model.yaml", "3:8", "unknown model");
    has("dup2.yaml", "1:7", "duplicate agent name");
    has("typo.yaml", "4:", "max_turn");
    assert!(!report.contains("good.yaml"), "{report}");

    let list = cadre(dir.path(), "http://127.0.0.1:9", None, &["agents", "list"]).await;
    assert_eq!(list.code, 0);
    for name in ["main", "explore", "plan", "code", "good"] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{}",
            list.stdout
        );
    }
    let show = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        None,
        &["agents", "show", "explore"],
    )
    .await;
    assert_eq!(show.code, 0);
    assert!(show.stdout.contains("read_only: true"), "{}", show.stdout);
    let missing = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        None,
        &["agents", "show", "nobody"],
    )
    .await;
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("explore"), "{}", missing.stderr);
}

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
        "main/plan#1 done",
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

/// Runs `cadre` offline in `dir` with HOME pointed at `dir`, so the user's own skills and
/// agents cannot leak into the result.
async fn cadre_offline(dir: &Path, args: &[&str]) -> Output {
    cadre_env(dir, &[("HOME", dir.to_str().unwrap())], args).await
}

fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn skills_check_reports_each_bad_skill_with_its_position_and_good_ones_still_list() {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    write_file(
        &skills.join("good/SKILL.md"),
        "---\nname: good\ndescription: >\n  Use when testing\n  the CLI.\nlicense: MIT\n---\n# Good\n\nGOOD BODY\n",
    );
    write_file(&skills.join("good/references/notes.md"), "notes\n");
    write_file(
        &skills.join("broken/SKILL.md"),
        "---\nname: broken\ndescription: [oops\n---\nx\n",
    );
    write_file(
        &skills.join("noname/SKILL.md"),
        "---\ndescription: d\n---\nx\n",
    );
    write_file(
        &skills.join("long/SKILL.md"),
        &format!(
            "---\nname: long\ndescription: {}\n---\nx\n",
            "y".repeat(1100)
        ),
    );
    write_file(
        &skills.join("mismatch/SKILL.md"),
        "---\nname: other-name\ndescription: d\n---\nx\n",
    );
    let out = cadre_offline(dir.path(), &["skills", "check"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    for want in [
        "skills/broken/SKILL.md:4:1: error: broken YAML",
        "skills/noname/SKILL.md:1:1: error: missing name",
        "skills/long/SKILL.md:3:1: warning: description too long: 1100 characters, more than the 1024",
        "skills/mismatch/SKILL.md:2:7: error: name \"other-name\" differs from its folder \"mismatch\"",
        "3 error(s)",
    ] {
        assert!(out.stdout.contains(want), "no {want:?} in:\n{}", out.stdout);
    }
    assert!(!out.stdout.contains("good/SKILL.md"), "{}", out.stdout);

    let list = cadre_offline(dir.path(), &["skills", "list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with("good "))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(line.contains("skills/good") && line.contains("Use when testing the CLI."));
    // The overlong description loads too, shortened in the listing.
    assert_eq!(list.stdout.lines().count(), 3, "{}", list.stdout);
    assert!(
        list.stderr.contains("cadre skills check"),
        "{}",
        list.stderr
    );

    let show = cadre_offline(dir.path(), &["skills", "show", "good"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    for want in [
        "name: good",
        "license: MIT",
        "GOOD BODY",
        "references/notes.md (6 bytes)",
    ] {
        assert!(
            show.stdout.contains(want),
            "no {want:?} in:\n{}",
            show.stdout
        );
    }
    let missing = cadre_offline(dir.path(), &["skills", "show", "nobody"]).await;
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("good"), "{}", missing.stderr);

    // An extra folder adds its skills; with only good skills, check passes.
    let extra = tempfile::tempdir().unwrap();
    write_file(
        &extra.path().join("more/SKILL.md"),
        "---\nname: more\ndescription: Use for more.\n---\nMore.\n",
    );
    std::fs::remove_dir_all(skills.join("broken")).unwrap();
    std::fs::remove_dir_all(skills.join("noname")).unwrap();
    std::fs::remove_dir_all(skills.join("long")).unwrap();
    std::fs::remove_dir_all(skills.join("mismatch")).unwrap();
    let extra_dir = extra.path().display().to_string();
    let ok = cadre_offline(dir.path(), &["skills", "check", "--skills-dir", &extra_dir]).await;
    assert_eq!(ok.code, 0, "{}", ok.stdout);
    assert!(ok.stdout.contains("2 skills OK"), "{}", ok.stdout);
}

#[tokio::test]
async fn the_shipped_skills_pass_the_check() {
    let home = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = repo.canonicalize().unwrap().display().to_string();
    let out = cadre_offline(home.path(), &["-C", &repo, "skills", "check"]).await;
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("3 skills OK"), "{}", out.stdout);
    let list = cadre_offline(home.path(), &["-C", &repo, "skills", "list"]).await;
    for name in ["code-review", "commit-message", "writing-tests"] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{}",
            list.stdout
        );
    }
}

#[tokio::test]
async fn agents_check_shows_a_claude_code_files_dropped_tools_as_warnings_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join(".claude/agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews diffs.\ntools: Read, WebFetch, mcp__github__get_pr\nmodel: sonnet\ncolor: purple\n---\nReview.\n",
    );
    let out = cadre_offline(dir.path(), &["agents", "check"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for want in [
        ".claude/agents/reviewer.md:4:14: warning: tool \"WebFetch\" dropped from tools: cadre does not provide it",
        "5 agent types OK, 1 warning(s)",
    ] {
        assert!(out.stdout.contains(want), "no {want:?} in:\n{}", out.stdout);
    }
    let list = cadre_offline(dir.path(), &["agents", "list"]).await;
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with("reviewer"))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(
        line.contains("subagent") && line.contains("read_file"),
        "{line}"
    );

    // MCP tools are kept for the agent to be given later; they are no problem.
    assert!(line.contains("mcp__github__get_pr"), "{line}");

    // An unknown tool is dropped with a warning; --strict makes it an error.
    write_file(
        &dir.path().join(".claude/agents/wizard.md"),
        "---\nname: wizard\ndescription: Casts.\ntools: Read, Teleport\n---\nCast.\n",
    );
    let out = cadre_offline(dir.path(), &["agents", "check"]).await;
    assert_eq!(out.code, 0, "{}", out.stdout);
    let want =
        ".claude/agents/wizard.md:4:14: warning: unknown tool \"Teleport\" dropped from tools";
    assert!(out.stdout.contains(want), "{}", out.stdout);
}

#[tokio::test]
async fn run_lists_skills_from_skills_dir_in_the_prompt_and_offers_skill() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join("my-skills/demo/SKILL.md"),
        "---\nname: demo\ndescription: Use when demonstrating skills.\n---\nDEMO BODY\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("s1", "Skill", json!({"name": "demo"})),
            Reply::text("demonstrated"),
        ],
    );
    let mut cmd = Command::cargo_bin("cadre").unwrap();
    cmd.current_dir(dir.path())
        .env("HOME", dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .args(["run", "--skills-dir", "my-skills", "Show a skill"])
        .timeout(std::time::Duration::from_secs(120));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert!(requests[0].tool_names().contains(&"Skill".to_string()));
    let system = requests[0].system_text();
    assert!(
        system.contains("- demo: Use when demonstrating skills."),
        "{system}"
    );
    assert!(!system.contains("DEMO BODY"));
    assert_eq!(requests[1].system_text(), system);
    assert!(requests[1].last_user_text().contains("DEMO BODY"));
}

/// Runs `cadre` like [`cadre`] with extra environment variables.
async fn cadre_env(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    // An empty home: the developer's own agent and skill folders must not leak into tests.
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::cargo_bin("cadre").unwrap();
    cmd.current_dir(dir)
        .env("HOME", home.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .args(args)
        .timeout(std::time::Duration::from_secs(120));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    drop(home);
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A parent that sends two explorers and a planner at once, each doing one tool call.
fn fleet_routes(server: &MockServer) {
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tasks([
                ("t1", "explore", "Find alpha"),
                ("t2", "explore", "Find beta"),
                ("t3", "plan", "Plan gamma"),
            ]),
            Reply::text("Survey complete: alpha, beta, gamma."),
        ],
    );
    for (phrase, tool, input, answer) in [
        (
            "Find alpha",
            "grep",
            json!({"pattern": "alpha"}),
            "alpha is in lib.rs:1",
        ),
        (
            "Find beta",
            "read_file",
            json!({"path": "lib.rs"}),
            "beta is missing",
        ),
        ("Plan gamma", "list_files", json!({}), "1. add gamma"),
    ] {
        server.route(
            Match::FirstUserContains(phrase.into()),
            vec![
                Reply::tool_use(&format!("x-{tool}"), tool, input),
                Reply::text(answer),
            ],
        );
    }
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

fn answer_of(stream_json: &str) -> String {
    let last: Value = serde_json::from_str(stream_json.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "result");
    last["answer"].as_str().unwrap().to_owned()
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

/// Splits a command line on spaces, honouring double quotes (enough for the README).
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
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
    let mut transcripts = 0;
    for file in std::fs::read_dir(&runs[0])
        .unwrap()
        .map(|e| e.unwrap().path())
    {
        let text = std::fs::read_to_string(&file).unwrap();
        if file.extension().is_some_and(|x| x == "jsonl") && !file.ends_with("journal.jsonl") {
            transcripts += 1;
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let last = lines.last().unwrap();
            assert_eq!(last["type"], "outcome", "{}", file.display());
            assert_eq!(last["stop"]["kind"], "cancelled", "{}", file.display());
        }
    }
    assert_eq!(transcripts, 4);
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

#[tokio::test]
async fn skills_install_puts_the_shipped_skills_where_every_project_sees_them() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_str = home.path().to_str().unwrap();
    let before = cadre_env(project.path(), &[("HOME", home_str)], &["skills", "list"]).await;
    assert!(
        before.stderr.contains("no skills found"),
        "{}",
        before.stderr
    );

    let out = cadre_env(
        project.path(),
        &[("HOME", home_str)],
        &["skills", "install"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let script = home
        .path()
        .join(".config/cadre/skills/code-review/scripts/changed-files.sh");
    assert!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&script).unwrap().permissions())
            & 0o111
            != 0
    );
    let list = cadre_env(project.path(), &[("HOME", home_str)], &["skills", "list"]).await;
    for name in ["code-review", "commit-message", "writing-tests"] {
        assert!(
            list.stdout.contains(name),
            "{name} missing:\n{}",
            list.stdout
        );
    }
    let check = cadre_env(project.path(), &[("HOME", home_str)], &["skills", "check"]).await;
    assert_eq!(check.code, 0, "{}", check.stdout);
    // Every file of the repository's skills/ is installed, byte for byte.
    fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((
                        p.strip_prefix(root).unwrap().to_path_buf(),
                        std::fs::read(&p).unwrap(),
                    ));
                }
            }
        }
        out.sort();
        out
    }
    let shipped = files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills"));
    assert_eq!(files(&home.path().join(".config/cadre/skills")), shipped);

    // A second install keeps the user's edits unless told otherwise.
    let skill = home
        .path()
        .join(".config/cadre/skills/commit-message/SKILL.md");
    let edited = std::fs::read_to_string(&skill).unwrap() + "\nMy own rule.\n";
    std::fs::write(&skill, &edited).unwrap();
    let again = cadre_env(
        project.path(),
        &[("HOME", home_str)],
        &["skills", "install"],
    )
    .await;
    assert!(again.stdout.contains("kept"), "{}", again.stdout);
    assert_eq!(std::fs::read_to_string(&skill).unwrap(), edited);
    cadre_env(
        project.path(),
        &[("HOME", home_str)],
        &["skills", "install", "--force"],
    )
    .await;
    assert_ne!(std::fs::read_to_string(&skill).unwrap(), edited);
}

/// The corpus of files as users bring them, kept beside cadre-core's tests.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cadre-core/tests/corpus")
        .canonicalize()
        .unwrap()
}

#[tokio::test]
async fn check_loads_the_corpus_with_warnings_and_strict_makes_them_errors() {
    let dir = tempfile::tempdir().unwrap();
    let agents = corpus().join("agents").display().to_string();
    let skills = corpus().join("skills").display().to_string();
    let agent_lines = [
        "agents/stats-analyst.md:3:14: {} not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
        "agents/stats-analyst.md:5:20: {} unknown tool \"airis-mcp-gateway\" dropped from tools",
        "agents/stats-analyst.md:5:39: {} unknown tool \"context-manager\" dropped from tools",
        "agents/powershell-5.1-expert.md:2:7: {} name \"powershell-5.1-expert\" is used as written",
        "agents/CodeReviewer.md:2:7: {} name \"CodeReviewer\" is used as written",
        "agents/everything.md:15:1: {} `hooks` ignored: cadre does not run Claude Code hooks",
        "agents/lenient.yaml:7:1: {} unknown key `colour` ignored",
        "agents/all-dropped.md:4:1: {} no tool is left",
    ];
    let skill_lines = [
        "skills/claude-api/SKILL.md:3:1: {} description too long: 1068 characters",
        "skills/stats-helper/SKILL.md:3:14: {} not strict YAML",
    ];
    for (what, flag, lines) in [
        ("agents", "--agents-dir", &agent_lines[..]),
        ("skills", "--skills-dir", &skill_lines[..]),
    ] {
        let folder = if what == "agents" { &agents } else { &skills };
        let out = cadre_offline(dir.path(), &[what, "check", flag, folder]).await;
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        for line in lines {
            let want = line.replace("{}", "warning:");
            assert!(
                out.stdout.contains(&want),
                "no {want:?} in:\n{}",
                out.stdout
            );
        }
        assert!(!out.stdout.contains("error:"), "{}", out.stdout);
        let count = out
            .stdout
            .lines()
            .filter(|l| l.contains(": warning: "))
            .count();
        assert!(
            out.stdout.contains(&format!("OK, {count} warning(s)")),
            "{}",
            out.stdout
        );

        let strict = cadre_offline(dir.path(), &[what, "check", "--strict", flag, folder]).await;
        assert_eq!(strict.code, 1, "{}{}", strict.stdout, strict.stderr);
        for line in lines {
            let want = line.replace("{}", "error:");
            assert!(
                strict.stdout.contains(&want),
                "no {want:?} in:\n{}",
                strict.stdout
            );
        }
        assert!(!strict.stdout.contains("warning:"), "{}", strict.stdout);
        assert!(
            strict.stdout.contains(&format!("{count} error(s)")),
            "{}",
            strict.stdout
        );
    }

    // Listing loads the same files forgivingly and prints each warning once on stderr.
    let list = cadre_offline(dir.path(), &["agents", "list", "--agents-dir", &agents]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    for name in [
        "stats-analyst",
        "powershell-5.1-expert",
        "CodeReviewer",
        "everything",
    ] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{}",
            list.stdout
        );
    }
    let hooks = "everything.md:15:1: warning: `hooks` ignored";
    assert_eq!(list.stderr.matches(hooks).count(), 1, "{}", list.stderr);
}

/// MCP through the real binary: `.mcp.json` in the project, a real rmcp server over stdio.
mod mcp {
    use super::*;
    use cadre_testkit::mcp_server_binary;

    fn write_config(dir: &Path, servers: Value) {
        let config = json!({ "mcpServers": servers });
        std::fs::write(dir.join(".mcp.json"), config.to_string()).unwrap();
    }

    #[tokio::test]
    async fn a_run_calls_mcp_tools_and_the_server_never_sees_the_api_key() {
        let dir = tempfile::tempdir().unwrap();
        write_config(
            dir.path(),
            json!({"local": {"command": mcp_server_binary(), "env": {"GIVEN": "given-value"}}}),
        );
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_uses(vec![
                    ("e1", "mcp__local__env_names", json!({})),
                    (
                        "e2",
                        "mcp__local__env",
                        json!({"name": "ANTHROPIC_API_KEY"}),
                    ),
                    ("e3", "mcp__local__env", json!({"name": "GIVEN"})),
                ]),
                Reply::text("checked"),
            ],
        );
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("sk-secret-for-mcp"),
            &[
                "run",
                "--output-format",
                "stream-json",
                "Check the environment",
            ],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let last = server.requests().pop().unwrap();
        let results = last.messages().last().unwrap()["content"].clone();
        let names = results[0]["content"][0]["text"].as_str().unwrap();
        assert!(names.lines().any(|l| l == "GIVEN"), "{names}");
        assert!(names.lines().any(|l| l == "PATH"), "{names}");
        assert!(!names.contains("ANTHROPIC"), "the server saw: {names}");
        assert_eq!(results[1]["content"][0]["text"], "(unset)");
        assert_eq!(results[2]["content"][0]["text"], "given-value");
        // stream-json and the transcript carry MCP calls like any other tool call.
        assert!(
            out.stdout.contains("\"mcp__local__env_names\""),
            "{}",
            out.stdout
        );
        let runs = dir.path().join(".cadre/runs");
        let run = std::fs::read_dir(&runs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let transcript = std::fs::read_to_string(run.join("main.jsonl")).unwrap();
        assert!(transcript.contains("given-value"));
        assert!(!transcript.contains("sk-secret-for-mcp"));
    }

    #[tokio::test]
    async fn mcp_list_shows_tools_and_check_reports_a_server_that_fails_with_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let bin = mcp_server_binary();
        write_config(
            dir.path(),
            json!({
                "good": {"command": bin},
                "bad": {"command": bin, "args": ["--fail-start", "missing DATABASE_URL"]}
            }),
        );
        let out = cadre_env(dir.path(), &[], &["mcp", "list"]).await;
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(out.stdout.contains("mcp__good__echo"), "{}", out.stdout);
        assert!(out.stdout.contains("mcp__good__add"), "{}", out.stdout);
        assert!(out.stdout.contains("bad") && out.stdout.contains("FAILED"));
        let out = cadre_env(dir.path(), &[], &["mcp", "check"]).await;
        assert_eq!(out.code, 1);
        assert!(
            out.stdout.contains("missing DATABASE_URL"),
            "{}",
            out.stdout
        );
        // A missing --mcp-config file is a usage error, not a silent no-op.
        let out = cadre_env(
            dir.path(),
            &[],
            &["mcp", "list", "--mcp-config", "nope.json"],
        )
        .await;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains("nope.json"));
        // Only the good one, named by a file of its own: exit 0.
        std::fs::remove_file(dir.path().join(".mcp.json")).unwrap();
        let own = dir.path().join("servers.json");
        std::fs::write(
            &own,
            json!({"mcpServers": {"good": {"command": bin}}}).to_string(),
        )
        .unwrap();
        let out = cadre_env(
            dir.path(),
            &[],
            &["mcp", "check", "--mcp-config", own.to_str().unwrap()],
        )
        .await;
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    }

    /// The published filesystem server from npm, as a user would install it (`.ci/run`
    /// installs it; elsewhere the test says how and passes unless CI requires it).
    #[tokio::test]
    async fn mcp_list_works_with_a_published_server_from_npm() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let bin = root.join("target/npm-mcp/node_modules/.bin/mcp-server-filesystem");
        if !bin.exists() {
            assert!(
                std::env::var_os("CADRE_REQUIRE_NPM_MCP").is_none(),
                "{} is missing; .ci/run installs it",
                bin.display()
            );
            eprintln!("note: install it with `npm install --prefix target/npm-mcp @modelcontextprotocol/server-filesystem` to run this test");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hello.txt"), "hello\n").unwrap();
        write_config(
            dir.path(),
            json!({"files": {"command": bin, "args": ["."]}}),
        );
        let out = cadre_env(dir.path(), &[], &["mcp", "list"]).await;
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        for tool in ["mcp__files__read_text_file", "mcp__files__list_directory"] {
            assert!(out.stdout.contains(tool), "{}", out.stdout);
        }
    }
}

/// Sessions: a run killed with SIGKILL and resumed from its journal, and follow-ups.
mod sessions {
    use super::*;
    use std::time::{Duration, Instant};

    /// `cadre` started in the background, to be killed.
    fn spawn_cadre(dir: &Path, base_url: &str, home: &Path, args: &[&str]) -> std::process::Child {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
            .current_dir(dir)
            .env("HOME", home)
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", base_url)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    async fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn journal(dir: &Path) -> String {
        let runs = dir.join(".cadre/runs");
        let Ok(mut entries) = std::fs::read_dir(&runs) else {
            return String::new();
        };
        let Some(Ok(run)) = entries.next() else {
            return String::new();
        };
        std::fs::read_to_string(run.path().join("journal.jsonl")).unwrap_or_default()
    }

    fn key(r: &cadre_testkit::Captured) -> String {
        format!(
            "{}|{}",
            r.system_text(),
            serde_json::to_string(&r.body["messages"]).unwrap()
        )
    }

    fn kill(child: &mut std::process::Child) {
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[tokio::test]
    async fn a_killed_fan_out_resumes_without_repeating_requests_or_writes() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([
                    ("t1", "code", "Writer job"),
                    ("t2", "explore", "Reader job"),
                    ("t3", "explore", "Quick job"),
                ]),
                Reply::text("all three done"),
            ],
        );
        server.route(
            Match::FirstUserContains("Writer job".into()),
            vec![
                Reply::tool_use(
                    "w1",
                    "write_file",
                    json!({"path": "written.txt", "content": "once\n"}),
                ),
                Reply::tool_use(
                    "w2",
                    "bash",
                    json!({"command": "echo $$ > bash.pid; sleep 300; echo late >> written.txt"}),
                ),
                Reply::text("writer done"),
            ],
        );
        server.route(
            Match::FirstUserContains("Reader job".into()),
            vec![
                Reply::tool_use("r1", "list_files", json!({})),
                // In flight when the run is killed.
                Reply::text("never seen").delay(Duration::from_secs(120)),
            ],
        );
        server.route(
            Match::FirstUserContains("Quick job".into()),
            vec![Reply::text("quick done")],
        );
        let mut child = spawn_cadre(
            dir.path(),
            &server.uri(),
            home.path(),
            &["run", "PARENT task"],
        );
        let reader_requests = |s: &MockServer| {
            s.requests()
                .iter()
                .filter(|r| r.first_user_text() == "Reader job")
                .count()
        };
        wait_for(
            "the bash write to start, the reader to wait and quick to finish",
            || {
                dir.path().join("bash.pid").exists()
                    && reader_requests(&server) == 2
                    && journal(dir.path()).contains("quick done")
            },
        )
        .await;
        kill(&mut child);
        // The orphaned command would still write: end it as a crash of the machine would.
        let pid: i32 = std::fs::read_to_string(dir.path().join("bash.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let before = server.requests();
        // The one request that never completed: the reader's second.
        let unfinished = before
            .iter()
            .filter(|r| r.first_user_text() == "Reader job")
            .nth(1)
            .map(key)
            .unwrap();
        let completed: std::collections::HashSet<String> = before
            .iter()
            .map(key)
            .filter(|k| *k != unfinished)
            .collect();
        server.route(
            Match::FirstUserContains("Reader job".into()),
            vec![Reply::text("reader done")],
        );

        let out = cadre_env(
            dir.path(),
            &[
                ("ANTHROPIC_BASE_URL", &server.uri()),
                ("ANTHROPIC_API_KEY", "k"),
            ],
            &["resume"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("all three done"), "{}", out.stdout);
        let after = server.requests();
        for r in &after[before.len()..] {
            assert!(
                !completed.contains(&key(r)),
                "sent again: {}",
                r.first_user_text()
            );
        }
        // write_file ran once; the interrupted bash write was reported, not rerun.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("written.txt")).unwrap(),
            "once\n"
        );
        let writer = after
            .iter()
            .rfind(|r| r.first_user_text() == "Writer job")
            .unwrap();
        let result = &writer.messages().last().unwrap()["content"][0];
        assert_eq!(result["is_error"], true);
        assert!(result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("interrupted"));
        let parent = after
            .iter()
            .rfind(|r| r.first_user_text() == "PARENT task")
            .unwrap();
        let texts: Vec<String> = parent.messages().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(texts, ["writer done", "reader done", "quick done"]);
        // The summary covers both parts of the run: all four agents.
        let runs: Vec<_> = std::fs::read_dir(dir.path().join(".cadre/runs"))
            .unwrap()
            .collect();
        assert_eq!(runs.len(), 1);
        let run = runs[0].as_ref().unwrap().path();
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(
            summary["usage"]["agents"].as_array().unwrap().len(),
            4,
            "{summary}"
        );
        // Resuming a finished run says so.
        let again = cadre_env(
            dir.path(),
            &[
                ("ANTHROPIC_BASE_URL", &server.uri()),
                ("ANTHROPIC_API_KEY", "k"),
            ],
            &["resume", run.file_name().unwrap().to_str().unwrap()],
        )
        .await;
        assert_eq!(again.code, 2);
        assert!(
            again.stderr.contains("already finished"),
            "{}",
            again.stderr
        );
    }

    #[tokio::test]
    async fn a_second_ctrl_c_quits_at_once_yet_kills_commands_and_writes_the_summary() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        // cadre's own temp folder, to see that no sandbox folder is left in it.
        let tmp = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![Reply::tasks([("t1", "code", "Sleeper")])],
        );
        server.route(
            Match::FirstUserContains("Sleeper".into()),
            vec![Reply::tool_use(
                "s1",
                "bash",
                json!({"command": "echo $$ > sleeper.pid; sleep 300"}),
            )],
        );
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
            .current_dir(dir.path())
            .env("HOME", home.path())
            .env("TMPDIR", tmp.path())
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", server.uri())
            .env_remove("CADRE_MODEL")
            .env_remove("RUST_LOG")
            .args(["run", "PARENT task"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid_file = dir.path().join("sleeper.pid");
        wait_for("the subagent's command to start", || pid_file.exists()).await;
        let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(status.code(), Some(130));
        let sleeper: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let alive = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(sleeper), None).is_ok();
        assert!(
            !alive,
            "the subagent's command (group {sleeper}) was orphaned"
        );
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with("cadre-sandbox-"))
            .collect();
        assert!(left.is_empty(), "sandbox folders left: {left:?}");
        let runs: Vec<_> = std::fs::read_dir(dir.path().join(".cadre/runs"))
            .unwrap()
            .collect();
        let run = runs[0].as_ref().unwrap().path();
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["stop"]["kind"], "cancelled", "{summary}");
    }

    /// The defect: a second Ctrl-C called `process::exit`, so whatever the first one was
    /// still waiting for was left behind. Here that is an MCP server that ignores both the
    /// end of its input and SIGTERM, whose polite shutdown takes seconds: the second Ctrl-C
    /// comes while cadre waits for it, and must still kill it and write the summary.
    #[tokio::test]
    async fn a_second_ctrl_c_during_a_slow_shutdown_kills_the_mcp_server_and_writes_the_summary() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![Reply::tool_use(
                "b1",
                "bash",
                json!({"command": "echo $$ > main.pid; sleep 300"}),
            )],
        );
        let stubborn = format!(
            "trap '' TERM; echo $$ > {pid}; {bin}; sleep 300",
            pid = dir.path().join("mcp.pid").display(),
            bin = cadre_testkit::mcp_server_binary().display()
        );
        std::fs::write(
            dir.path().join(".mcp.json"),
            json!({"mcpServers": {"stubborn": {"command": "bash", "args": ["-c", stubborn]}}})
                .to_string(),
        )
        .unwrap();
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
            .current_dir(dir.path())
            .env("HOME", home.path())
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", server.uri())
            .env_remove("CADRE_MODEL")
            .env_remove("RUST_LOG")
            .args(["run", "PARENT task"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let main_pid = dir.path().join("main.pid");
        wait_for("the command to start", || main_pid.exists()).await;
        let mcp_pid: i32 = std::fs::read_to_string(dir.path().join("mcp.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
        // The server's shutdown has begun: its input is closed, SIGTERM is coming.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(status.code(), Some(130));
        // Dead, or a zombie nobody has reaped yet.
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            })
        };
        wait_for("the MCP server to be killed", || gone(mcp_pid)).await;
        let runs: Vec<_> = std::fs::read_dir(dir.path().join(".cadre/runs"))
            .unwrap()
            .collect();
        let run = runs[0].as_ref().unwrap().path();
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["stop"]["kind"], "cancelled", "{summary}");
    }

    #[tokio::test]
    async fn continue_sends_the_conversation_with_the_follow_up_and_a_continued_run_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("FIRST".into()),
            vec![
                Reply::tool_use("l1", "list_files", json!({})),
                Reply::text("first answer"),
            ],
        );
        let env = [
            ("ANTHROPIC_BASE_URL", server.uri()),
            ("ANTHROPIC_API_KEY", "k".into()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = cadre_env(dir.path(), &env, &["run", "FIRST question"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        // A follow-up that is killed while the model answers it…
        server.route(
            Match::LastUserContains("SECOND".into()),
            vec![Reply::text("lost").delay(Duration::from_secs(120))],
        );
        let mut child = spawn_cadre(
            dir.path(),
            &server.uri(),
            home.path(),
            &["run", "--continue", "SECOND question"],
        );
        wait_for("the follow-up request", || {
            server
                .requests()
                .iter()
                .any(|r| r.last_user_text().contains("SECOND"))
        })
        .await;
        kill(&mut child);
        // …sent the whole conversation plus the new message.
        let sent = server.requests().pop().unwrap();
        let messages = sent.messages();
        assert_eq!(messages.len(), 5, "{messages:?}");
        assert_eq!(messages[0]["content"][0]["text"], "FIRST question");
        assert_eq!(messages[3]["content"][0]["text"], "first answer");
        assert_eq!(messages[4]["content"][0]["text"], "SECOND question");
        // …and resumes like any run.
        server.route(
            Match::LastUserContains("SECOND".into()),
            vec![Reply::text("second answer")],
        );
        let out = cadre_env(dir.path(), &env, &["resume"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("second answer"), "{}", out.stdout);
        let last = server.requests().pop().unwrap();
        assert_eq!(last.messages().len(), 5);
        // A second follow-up by id; still one run folder.
        server.route(
            Match::LastUserContains("THIRD".into()),
            vec![Reply::text("third answer")],
        );
        let runs: Vec<_> = std::fs::read_dir(dir.path().join(".cadre/runs"))
            .unwrap()
            .collect();
        assert_eq!(runs.len(), 1);
        let id = runs[0].as_ref().unwrap().file_name().into_string().unwrap();
        let out = cadre_env(
            dir.path(),
            &env,
            &["run", "--resume", &id[..12], "THIRD question"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(server.requests().pop().unwrap().messages().len(), 7);
        // Nothing to continue elsewhere: a clear usage error.
        let empty = tempfile::tempdir().unwrap();
        let out = cadre_env(empty.path(), &env, &["run", "-c", "more"]).await;
        assert_eq!(out.code, 2);
        assert!(out.stderr.contains("no finished run"), "{}", out.stderr);
    }
}

/// The interactive session, driven through a pseudo-terminal as a person would.
mod interactive {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_session_takes_follow_ups_survives_a_cancelled_turn_and_shows_usage() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::LastUserContains("hello there".into()),
            vec![Reply::text("FIRST-REPLY").usage(100, 10, 0, 0)],
        );
        server.route(
            Match::LastUserContains("second message".into()),
            vec![Reply::text("SECOND-REPLY").usage(200, 20, 0, 0)],
        );
        server.route(
            Match::LastUserContains("delegate now".into()),
            vec![Reply::tasks([("t1", "explore", "Slow job")])],
        );
        server.route(
            Match::FirstUserContains("Slow job".into()),
            vec![Reply::text("too late").delay(Duration::from_secs(120))],
        );
        server.route(
            Match::LastUserContains("after cancel".into()),
            vec![Reply::text("STILL-HERE")],
        );
        server.route(
            Match::LastUserContains("after compacting".into()),
            vec![Reply::text("FROM-THE-SUMMARY")],
        );
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
        cmd.current_dir(dir.path())
            .env("HOME", home.path())
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", server.uri())
            .env("TERM", "dumb")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG");
        let requests = {
            let server = server.clone();
            move || server.requests()
        };
        let session = tokio::task::spawn_blocking(move || {
            let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
            p.exp_string("/help").unwrap();
            p.send_line("hello there").unwrap();
            p.exp_string("FIRST-REPLY").unwrap();
            p.send_line("second message").unwrap();
            p.exp_string("SECOND-REPLY").unwrap();
            p.send_line("delegate now").unwrap();
            // Wait until the subagent's request is with the model, then cancel the turn.
            let start = std::time::Instant::now();
            while !requests().iter().any(|r| r.first_user_text() == "Slow job") {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the subagent never started"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            p.send_control('c').unwrap();
            p.exp_string("cancelling this turn").unwrap();
            p.send_line("after cancel").unwrap();
            p.exp_string("STILL-HERE").unwrap();
            p.send_line("/compact").unwrap();
            p.exp_string("compacted:").unwrap();
            p.send_line("after compacting").unwrap();
            p.exp_string("FROM-THE-SUMMARY").unwrap();
            p.send_line("/usage").unwrap();
            p.exp_string("total").unwrap();
            p.send_control('d').unwrap();
            p.exp_string("session saved as run").unwrap();
            p.exp_eof().unwrap();
        });
        session.await.unwrap();
        let all = server.requests();
        // The follow-up carried the first exchange.
        let second = all
            .iter()
            .find(|r| r.last_user_text().contains("second message"))
            .unwrap();
        assert_eq!(second.messages().len(), 3);
        assert_eq!(second.messages()[1]["content"][0]["text"], "FIRST-REPLY");
        // After the cancel, the conversation went on from a valid history: the cancelled
        // Task call answered as an error, then the new message.
        let after = all
            .iter()
            .find(|r| r.last_user_text().contains("after cancel"))
            .unwrap();
        let last = after.messages().last().unwrap();
        assert_eq!(last["content"][0]["type"], "tool_result");
        assert_eq!(last["content"][0]["is_error"], true);
        // /compact asked for a summary of it all; the next message went after the block.
        let summarize = all
            .iter()
            .find(|r| r.body["compaction"]["type"] == "summarize")
            .unwrap();
        assert!(summarize.messages().len() > 4);
        let compacted = all
            .iter()
            .find(|r| r.last_user_text().contains("after compacting"))
            .unwrap();
        assert_eq!(compacted.messages().len(), 2);
        assert_eq!(compacted.messages()[0]["content"][0]["type"], "compaction");
        // One run folder for the whole session.
        assert_eq!(
            std::fs::read_dir(dir.path().join(".cadre/runs"))
                .unwrap()
                .count(),
            1
        );
    }
}

/// `cadre runs list|show` over runs the real binary wrote.
mod runs {
    use super::*;

    /// The task of the older run: it must come back escaped in every view.
    const TASK: &str = "Survey the code <img src=x onerror=alert(1)>";

    struct Runs {
        dir: tempfile::TempDir,
        /// The fleet run (4 agents, done).
        fleet: String,
        /// The newer run, stopped at its turn limit (1 agent).
        stopped: String,
    }

    /// Two real runs in one workspace: a fleet that finishes, then one that hits max turns.
    async fn two_runs() -> Runs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lib.rs"), "pub fn alpha() {}\n").unwrap();
        let server = MockServer::start().await;
        fleet_routes(&server);
        server.route(
            Match::FirstUserContains("Count".into()),
            vec![Reply::tool_use("l1", "list_files", json!({}))],
        );
        let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", TASK]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "--max-turns", "1", "Count the files"],
        )
        .await;
        assert_eq!(out.code, 1, "{}", out.stderr);
        let mut fleet = None;
        let mut stopped = None;
        for entry in std::fs::read_dir(dir.path().join(".cadre/runs")).unwrap() {
            let entry = entry.unwrap();
            let summary: Value = serde_json::from_str(
                &std::fs::read_to_string(entry.path().join("summary.json")).unwrap(),
            )
            .unwrap();
            let id = entry.file_name().to_str().unwrap().to_owned();
            if summary["task"] == TASK {
                fleet = Some(id);
            } else {
                stopped = Some(id);
            }
        }
        Runs {
            dir,
            fleet: fleet.unwrap(),
            stopped: stopped.unwrap(),
        }
    }

    /// The line of `text` that starts (after indentation) with `name` followed by a space.
    fn row<'a>(text: &'a str, name: &str) -> &'a str {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row {name:?} in:\n{text}"))
    }

    /// Copies the run folder `id` of `from` into a fresh workspace, where it can be altered.
    fn copy_run(from: &Path, id: &str) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        let dest = to.path().join(".cadre/runs").join(id);
        std::fs::create_dir_all(&dest).unwrap();
        for entry in std::fs::read_dir(from.join(".cadre/runs").join(id)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dest.join(entry.file_name())).unwrap();
        }
        to
    }

    #[tokio::test]
    async fn list_and_show_read_back_finished_and_unfinished_runs() {
        let runs = two_runs().await;
        let ws = runs.dir.path();
        let ws_arg = ws.to_str().unwrap();

        // Newest first, each with its outcome and agent count; -C works from anywhere.
        let elsewhere = tempfile::tempdir().unwrap();
        let list = cadre_env(elsewhere.path(), &[], &["-C", ws_arg, "runs", "list"]).await;
        assert_eq!(list.code, 0, "{}", list.stderr);
        let lines: Vec<&str> = list.stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{}", list.stdout);
        assert!(lines[1].starts_with(&runs.stopped), "{}", list.stdout);
        assert!(lines[1].contains("max turns"), "{}", lines[1]);
        assert!(lines[1].contains("Count the files"), "{}", lines[1]);
        assert!(lines[2].starts_with(&runs.fleet), "{}", list.stdout);
        assert!(lines[2].contains(" done "), "{}", lines[2]);
        let agents = |line: &str| -> String {
            let after = line.split_whitespace().collect::<Vec<_>>();
            // id, date, time, outcome (one or two words), agents…
            let at = if after[3] == "max" { 5 } else { 4 };
            after[at].to_owned()
        };
        assert_eq!(agents(lines[1]), "1", "{}", lines[1]);
        assert_eq!(agents(lines[2]), "4", "{}", lines[2]);
        let date = runs.fleet.get(0..4).unwrap();
        assert!(lines[2].contains(&format!("{date}-")), "{}", lines[2]);

        let limited = cadre_env(ws, &[], &["runs", "list", "--limit", "1"]).await;
        assert_eq!(limited.stdout.lines().count(), 3, "{}", limited.stdout);
        assert!(limited.stdout.contains("1 older run(s) not shown"));

        let json = cadre_env(ws, &[], &["runs", "list", "--json"]).await;
        assert_eq!(json.code, 0, "{}", json.stderr);
        let items: Value = serde_json::from_str(&json.stdout).unwrap();
        let items = items.as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["id"], runs.stopped.as_str());
        assert_eq!(items[0]["outcome"], "max turns");
        assert_eq!(items[0]["agents"], 1);
        assert_eq!(items[1]["id"], runs.fleet.as_str());
        assert_eq!(items[1]["outcome"], "done");
        assert_eq!(items[1]["finished"], true);
        assert_eq!(items[1]["agents"], 4);
        assert_eq!(items[1]["task"], TASK);
        assert!(items[1]["tokens"].as_u64().unwrap() > 0);
        assert!(items[1]["started"].as_str().unwrap().ends_with('Z'));

        // The tree, each agent with its outcome, turns and tool calls; then task and answer.
        let show = cadre_env(ws, &[], &["runs", "show", &runs.fleet]).await;
        assert_eq!(show.code, 0, "{}", show.stderr);
        let text = &show.stdout;
        assert!(text.contains(&format!("run {}", runs.fleet)), "{text}");
        assert!(row(text, "main").starts_with("main "), "{text}");
        for (name, kind, tools) in [
            ("explore#1", "explore", "1"),
            ("explore#2", "explore", "1"),
            ("plan#1", "plan", "1"),
        ] {
            let line = row(text, name);
            assert!(line.starts_with(&format!("  {name}")), "{line}");
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(&cols[1..5], [kind, "done", "2", tools], "{line}");
        }
        let main: Vec<&str> = row(text, "main").split_whitespace().collect();
        assert_eq!(&main[1..5], ["main", "done", "2", "3"], "{text}");
        assert!(text.contains(TASK), "{text}");
        assert!(
            text.contains("Survey complete: alpha, beta, gamma."),
            "{text}"
        );

        let latest = cadre_env(ws, &[], &["runs", "show", "latest"]).await;
        assert_eq!(latest.code, 0, "{}", latest.stderr);
        assert!(latest.stdout.contains(&format!("run {}", runs.stopped)));
        assert!(row(&latest.stdout, "main").contains("max turns"));

        // Unknown or ambiguous ids are usage errors that say which ids exist.
        let unknown = cadre_env(ws, &[], &["runs", "show", "19990101"]).await;
        assert_eq!(unknown.code, 2, "{}", unknown.stderr);
        assert!(
            unknown.stderr.contains("no run \"19990101\""),
            "{}",
            unknown.stderr
        );
        assert!(unknown.stderr.contains(&runs.fleet), "{}", unknown.stderr);
        assert!(unknown.stderr.contains(&runs.stopped), "{}", unknown.stderr);
        let ambiguous = cadre_env(ws, &[], &["runs", "show", "2"]).await;
        assert_eq!(ambiguous.code, 2);
        assert!(
            ambiguous.stderr.contains("matches 2 runs"),
            "{}",
            ambiguous.stderr
        );
        let empty = tempfile::tempdir().unwrap();
        let none = cadre_env(empty.path(), &[], &["runs", "list"]).await;
        assert_eq!(none.code, 0);
        assert!(none.stdout.contains("no runs yet"), "{}", none.stdout);
        assert_eq!(none.stdout.lines().count(), 1);
        let none = cadre_env(empty.path(), &[], &["runs", "show", "latest"]).await;
        assert_eq!(none.code, 2);

        // A run killed mid-way: no summary, and one explorer without its outcome line. A
        // journal another version might write beside the transcripts is left alone.
        let copy = copy_run(ws, &runs.fleet);
        let folder = copy.path().join(".cadre/runs").join(&runs.fleet);
        std::fs::remove_file(folder.join("summary.json")).unwrap();
        std::fs::write(folder.join("journal.jsonl"), "{\"step\":1}\n").unwrap();
        let explorer = folder.join("main.explore-2.jsonl");
        let kept: Vec<String> = std::fs::read_to_string(&explorer)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("{\"") || !l.contains("\"type\":\"outcome\""))
            .map(str::to_owned)
            .collect();
        std::fs::write(&explorer, kept.join("\n") + "\n").unwrap();
        let list = cadre_env(copy.path(), &[], &["runs", "list", "--json"]).await;
        let items: Value = serde_json::from_str(&list.stdout).unwrap();
        assert_eq!(items[0]["outcome"], "unfinished", "{}", list.stdout);
        assert_eq!(items[0]["finished"], false);
        assert_eq!(items[0]["agents"], 4);
        assert_eq!(items[0]["unfinished_agents"], 1);
        assert_eq!(items[0]["task"], TASK);
        // Alone in its workspace, a run is found by any prefix of its id.
        let show = cadre_env(copy.path(), &[], &["runs", "show", &runs.fleet[..8]]).await;
        assert_eq!(show.code, 0, "{}", show.stderr);
        let text = &show.stdout;
        assert!(text.contains("unfinished"), "{text}");
        assert!(text.contains("no summary.json"), "{text}");
        assert!(row(text, "explore#1").contains(" done "), "{text}");
        let cols: Vec<String> = row(text, "explore#2")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(&cols[1..5], ["explore", "unfinished", "2", "1"], "{text}");
        assert!(text.contains("answer: (none"), "{text}");
    }

    /// How many times `needle` occurs in `text`.
    fn count(text: &str, needle: &str) -> usize {
        text.matches(needle).count()
    }

    /// The page of run `id` in `ws`, written by `cadre runs show ID --html`.
    async fn html_of(ws: &Path, id: &str, out: &Path) -> String {
        let file = out.join(format!("{id}.html"));
        let res = cadre_env(
            ws,
            &[],
            &["runs", "show", id, "--html", file.to_str().unwrap()],
        )
        .await;
        assert_eq!(res.code, 0, "{}", res.stderr);
        std::fs::read_to_string(&file).unwrap()
    }

    fn assert_self_contained_and_escaped(html: &str) {
        for bad in ["<script src", "<link", "@import", "url("] {
            assert!(!html.contains(bad), "the page references {bad:?}");
        }
        assert!(
            !html.to_ascii_lowercase().contains("http"),
            "the page names a URL"
        );
        assert!(!html.contains("<img"), "the task went in as HTML");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    }

    #[tokio::test]
    async fn the_html_timeline_has_a_lane_per_agent_and_renders_in_a_browser() {
        let runs = two_runs().await;
        let ws = runs.dir.path();
        let out = tempfile::tempdir().unwrap();
        let html = html_of(ws, &runs.fleet, out.path()).await;
        assert_eq!(count(&html, "data-agent=\""), 4);
        for path in ["main", "main/explore#1", "main/explore#2", "main/plan#1"] {
            assert!(html.contains(&format!("data-agent=\"{path}\"")), "{path}");
        }
        // Every agent made 2 turns; the parent's 3 Task calls and one call per subagent.
        assert_eq!(count(&html, "class=\"bar turn\""), 8);
        assert_eq!(count(&html, "class=\"bar tool\""), 6);
        assert!(
            html.contains("data-mode=\"time\""),
            "transcripts carry times"
        );
        assert_self_contained_and_escaped(&html);

        // Transcripts of an older cadre, without times: the same lanes, evenly spaced.
        let old = copy_run(ws, &runs.fleet);
        let folder = old.path().join(".cadre/runs").join(&runs.fleet);
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            // The journal is no transcript: it has no times to remove.
            if path.extension().is_some_and(|x| x == "jsonl")
                && path.file_name().is_some_and(|n| n != "journal.jsonl")
            {
                let text: Vec<String> = std::fs::read_to_string(&path)
                    .unwrap()
                    .lines()
                    .map(|l| {
                        let mut v: Value = serde_json::from_str(l).unwrap();
                        v.as_object_mut().unwrap().remove("t").unwrap();
                        v.to_string()
                    })
                    .collect();
                std::fs::write(&path, text.join("\n") + "\n").unwrap();
            }
        }
        let untimed = html_of(old.path(), &runs.fleet, out.path()).await;
        assert!(untimed.contains("data-mode=\"steps\""));
        assert!(untimed.contains("evenly spaced"));
        assert_eq!(count(&untimed, "data-agent=\""), 4);
        assert_eq!(count(&untimed, "class=\"bar turn\""), 8);

        // Run the page's script in a real browser: it must finish without an error.
        let Some(chromium) = chromium() else { return };
        for (name, page) in [("timed", &html), ("untimed", &untimed)] {
            let file = out.path().join(format!("{name}.html"));
            std::fs::write(&file, page).unwrap();
            let dom = dump_dom(&chromium, &file).await;
            assert!(dom.contains("data-ready=\"ok\""), "{name}: {dom}");
            assert_eq!(count(&dom, "data-agent=\""), 4, "{name}: {dom}");
            assert!(count(&dom, "class=\"tick\"") >= 2, "{name}: no time axis");
            assert!(!dom.contains("<img"), "{name}: the task became an element");
        }
    }

    #[tokio::test]
    async fn runs_help_says_what_each_command_shows() {
        let dir = tempfile::tempdir().unwrap();
        let help = cadre_env(dir.path(), &[], &["runs", "--help"]).await;
        assert_eq!(help.code, 0);
        for want in ["list", "show", ".cadre/runs"] {
            assert!(help.stdout.contains(want), "{want}: {}", help.stdout);
        }
        let help = cadre_env(dir.path(), &[], &["runs", "show", "--help"]).await;
        for want in ["latest", "prefix", "--html", "unfinished", "self-contained"] {
            assert!(help.stdout.contains(want), "{want}: {}", help.stdout);
        }
        let help = cadre_env(dir.path(), &[], &["runs", "list", "--help"]).await;
        for want in ["--limit", "--json", "newest first", "unfinished"] {
            assert!(help.stdout.contains(want), "{want}: {}", help.stdout);
        }
    }

    /// Debian's chromium, or `None` (with a note) where it is missing and CI does not
    /// require it (`.ci/run` installs it and sets CADRE_REQUIRE_CHROMIUM=1).
    fn chromium() -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|n| dir.join(n)))
            .find(|p| p.is_file());
        if found.is_none() {
            assert!(
                std::env::var_os("CADRE_REQUIRE_CHROMIUM").is_none_or(|v| v != "1"),
                "CADRE_REQUIRE_CHROMIUM=1 but chromium is not on PATH; .ci/run installs it"
            );
            eprintln!("note: the browser check of the HTML page is skipped: install chromium (apt-get install chromium) to run it");
        }
        found
    }

    /// The page's DOM after its script ran, as headless chromium serialises it.
    async fn dump_dom(chromium: &Path, page: &Path) -> String {
        let profile = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .env("HOME", profile.path())
        .timeout(std::time::Duration::from_secs(120));
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let dom = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && !dom.is_empty(),
            "chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(profile);
        dom
    }
}

/// Long runs: compaction seen from the command line.
mod compaction {
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
}

/// Isolated subagents seen from the command line: their branches listed and removed.
mod worktrees {
    use super::*;
    use cadre_testkit::git::{git, init_repo};

    #[tokio::test]
    async fn runs_show_lists_a_runs_branches_and_runs_branches_delete_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("agents")).unwrap();
        std::fs::write(
            root.join("agents/coder.yaml"),
            "name: coder\ndescription: Writes code.\nmode: subagent\ntools: [write_file]\nisolation: worktree\nprompt: You write code.\n",
        )
        .unwrap();
        std::fs::write(root.join(".gitignore"), ".cadre/\n").unwrap();
        init_repo(root);
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "coder", "Add a note")]),
                Reply::text("one branch to review"),
            ],
        );
        server.route(
            Match::FirstUserContains("Add a note".into()),
            vec![
                Reply::tool_use(
                    "w",
                    "write_file",
                    json!({"path": "NOTE.md", "content": "a note\n"}),
                ),
                Reply::text("note added"),
            ],
        );
        let tapes = tempfile::tempdir().unwrap();
        let cassette = tapes.path().join("isolated.jsonl");
        let cassette = cassette.to_str().unwrap();
        let out = cadre(
            root,
            &server.uri(),
            Some("k"),
            &["run", "--record", cassette, "PARENT task"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            !root.join("NOTE.md").exists(),
            "the main checkout was touched"
        );
        let show = cadre(root, &server.uri(), None, &["runs", "show", "latest"]).await;
        assert_eq!(show.code, 0, "{}", show.stderr);
        let branch = show
            .stdout
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("cadre/") && l.ends_with("/coder-1"))
            .unwrap_or_else(|| panic!("no branch listed: {}", show.stdout))
            .to_owned();
        assert_eq!(
            git(root, &["show", &format!("{branch}:NOTE.md")]),
            "a note\n"
        );
        let listed = cadre(root, &server.uri(), None, &["runs", "branches", "latest"]).await;
        assert_eq!(listed.stdout.trim(), branch);
        let deleted = cadre(
            root,
            &server.uri(),
            None,
            &["runs", "branches", "latest", "--delete"],
        )
        .await;
        assert_eq!(deleted.code, 0, "{}", deleted.stderr);
        assert!(deleted.stdout.contains(&branch), "{}", deleted.stdout);
        assert_eq!(git(root, &["branch", "--list", "cadre/*"]), "");
        assert_eq!(git(root, &["status", "--porcelain"]), "");
        // A replay runs the tools for real: the worktree and its branch are made again,
        // named as in the recording (the cassette holds the run id).
        let replayed = cadre(
            root,
            "http://127.0.0.1:9",
            None,
            &["run", "--replay", cassette, "PARENT task"],
        )
        .await;
        assert_eq!(replayed.code, 0, "{}", replayed.stderr);
        let again = git(root, &["branch", "--list", "cadre/*"]);
        let again = again.trim().trim_start_matches("* ");
        assert_eq!(again, branch);
        assert_eq!(
            git(root, &["show", &format!("{again}:NOTE.md")]),
            "a note\n"
        );
    }
}

/// Everyday use: where the task comes from, checked options, completions, and the rough
/// edges of output (closed pipes, paths, widths, messages).
mod everyday {
    use super::*;
    use std::io::Read as _;
    use std::time::Duration;

    /// Runs `cadre` like [`cadre_env`], with `stdin` as its standard input.
    async fn cadre_stdin(dir: &Path, env: &[(&str, &str)], args: &[&str], stdin: &str) -> Output {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = Command::cargo_bin("cadre").unwrap();
        cmd.current_dir(dir)
            .env("HOME", home.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .args(args)
            .write_stdin(stdin.to_owned())
            .timeout(Duration::from_secs(120));
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        drop(home);
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The README's quick-start task.
    fn quickstart_task() -> String {
        let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
        let command = readme
            .lines()
            .find(|l| l.starts_with("cargo run") && l.contains("--replay"))
            .unwrap();
        shell_words(command).last().unwrap().clone()
    }

    /// A copy of the sample project (the quick start's workspace) in a temp folder.
    fn sample_project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&repo().join("examples/sample-project"), dir.path());
        dir
    }

    fn run_dirs(root: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(root.join(".cadre/runs"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn the_task_comes_from_stdin_a_dash_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("ok")]);
        server.route(Match::Any, vec![Reply::text("ok")]);
        server.route(Match::Any, vec![Reply::text("ok")]);
        let env = [
            ("ANTHROPIC_BASE_URL", server.uri()),
            ("ANTHROPIC_API_KEY", "k".to_owned()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let piped = cadre_stdin(dir.path(), &env, &["run"], "task from a pipe\n").await;
        assert_eq!(piped.code, 0, "{}", piped.stderr);
        let dash = cadre_stdin(dir.path(), &env, &["run", "-"], "task after a dash\n").await;
        assert_eq!(dash.code, 0, "{}", dash.stderr);
        std::fs::write(dir.path().join("task.md"), "task from a file\nline two\n").unwrap();
        let file = cadre_stdin(dir.path(), &env, &["run", "--task-file", "task.md"], "").await;
        assert_eq!(file.code, 0, "{}", file.stderr);
        let firsts: Vec<String> = server
            .requests()
            .iter()
            .map(|r| r.first_user_text())
            .collect();
        assert_eq!(
            firsts,
            [
                "task from a pipe",
                "task after a dash",
                "task from a file\nline two"
            ]
        );
        // A task given twice is a usage error.
        let both = cadre_stdin(
            dir.path(),
            &env,
            &["run", "--task-file", "task.md", "q"],
            "",
        )
        .await;
        assert_eq!(both.code, 2, "{}", both.stderr);
    }

    #[tokio::test]
    async fn an_empty_or_blank_task_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("blank.md"), " \n\t\n").unwrap();
        let env = [
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        for (args, stdin) in [
            (vec!["run", ""], ""),
            (vec!["run", "   "], ""),
            (vec!["run"], ""),
            (vec!["run", "-"], "  \n"),
            (vec!["run", "--task-file", "blank.md"], ""),
        ] {
            let out = cadre_stdin(dir.path(), &env, &args, stdin).await;
            assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
            assert!(
                out.stderr.contains("the task is empty"),
                "{args:?}: {}",
                out.stderr
            );
        }
        let missing = cadre_stdin(dir.path(), &env, &["run", "--task-file", "nope.md"], "").await;
        assert_eq!(missing.code, 2, "{}", missing.stderr);
        assert!(missing.stderr.contains("nope.md"), "{}", missing.stderr);
    }

    #[tokio::test]
    async fn numeric_options_out_of_range_are_usage_errors_naming_the_range() {
        let dir = tempfile::tempdir().unwrap();
        for (args, range) in [
            (vec!["run", "--max-parallel", "0", "q"], "1.."),
            (vec!["run", "--max-tokens", "0", "q"], "1.."),
            (vec!["run", "--context-tokens", "0", "q"], "1.."),
            (vec!["run", "--max-turns", "0", "q"], "1.."),
            (vec!["run", "--budget-tokens", "0", "q"], "1.."),
            (vec!["run", "--bash-timeout", "0", "q"], "1.."),
            (vec!["run", "--mcp-timeout", "0", "q"], "1.."),
            (vec!["run", "--request-timeout", "0", "q"], "1.."),
            (vec!["run", "--max-retries", "1000", "q"], "0..=100"),
            (vec!["run", "--max-depth", "1000", "q"], "0..=100"),
            (vec!["run", "--max-parallel", "-3", "q"], "1.."),
            (vec!["mcp", "list", "--mcp-timeout", "0"], "1.."),
            (vec!["runs", "list", "--limit", "0"], "1.."),
        ] {
            let out = cadre(dir.path(), "http://127.0.0.1:9", Some("k"), &args).await;
            assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
            let flag = args.iter().find(|a| a.starts_with("--")).unwrap();
            assert!(
                out.stderr.contains(flag),
                "{args:?} does not name the option: {}",
                out.stderr
            );
            assert!(
                out.stderr.contains(range),
                "{args:?} does not name {range}: {}",
                out.stderr
            );
        }
    }

    #[tokio::test]
    async fn request_timeout_fails_a_silent_model_for_both_providers() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.route(Match::Any, vec![Reply::text("late").stall(1)]);
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "--request-timeout", "1", "--max-retries", "0", "q"],
        )
        .await;
        assert_eq!(out.code, 3, "{}", out.stderr);
        assert!(out.stderr.contains("sent nothing for 1s"), "{}", out.stderr);

        let server = MockServer::start().await;
        server.allow_unused_replies();
        server.route(Match::Any, vec![Reply::text("late").stall(1)]);
        let url = format!("{}/v1", server.uri());
        let out = cadre_env(
            dir.path(),
            &[("OPENAI_BASE_URL", &url)],
            &[
                "run",
                "--provider",
                "openai",
                "--model",
                "m",
                "--request-timeout",
                "1",
                "--max-retries",
                "0",
                "q",
            ],
        )
        .await;
        assert_eq!(out.code, 3, "{}", out.stderr);
        assert!(out.stderr.contains("sent nothing for 1s"), "{}", out.stderr);
    }

    #[tokio::test]
    async fn completions_are_printed_for_each_shell() {
        let dir = tempfile::tempdir().unwrap();
        for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
            let out = cadre_env(dir.path(), &[], &["completions", shell]).await;
            assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
            assert!(out.stdout.contains("cadre"), "{shell}: {}", out.stdout);
            assert!(out.stdout.contains("task-file"), "{shell}: {}", out.stdout);
        }
        let bad = cadre_env(dir.path(), &[], &["completions", "tcsh"]).await;
        assert_eq!(bad.code, 2, "{}", bad.stderr);
    }

    /// `cadre … 2>&1 | head -2`: the reader goes away; the run still ends well and writes
    /// its summary.
    #[tokio::test]
    async fn a_closed_stderr_or_stdout_does_not_crash_the_run() {
        let task = quickstart_task();
        let cassette = repo().join("examples/cassettes/quickstart.jsonl");
        for closed in ["stderr", "stdout", "both"] {
            let project = sample_project();
            let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
            cmd.current_dir(project.path())
                .env_remove("RUST_LOG")
                .args(["run", "--replay"])
                .arg(&cassette)
                .arg(&task)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
            if closed != "stdout" {
                drop(err.take());
            }
            if closed != "stderr" {
                drop(out.take());
            }
            let status = tokio::task::spawn_blocking(move || {
                let mut text = String::new();
                if let Some(mut o) = out {
                    o.read_to_string(&mut text).unwrap();
                }
                if let Some(mut e) = err {
                    e.read_to_string(&mut text).unwrap();
                }
                (child.wait().unwrap(), text)
            })
            .await
            .unwrap();
            assert_eq!(status.0.code(), Some(0), "{closed} closed: {}", status.1);
            let runs = run_dirs(project.path());
            assert_eq!(runs.len(), 1, "{closed} closed");
            assert!(
                runs[0].join("summary.json").is_file(),
                "{closed} closed: no summary.json"
            );
        }
    }

    /// Agents and skills in the home folder must not make a recording unreplayable.
    #[tokio::test]
    async fn a_run_recorded_with_home_agents_and_skills_replays() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        write_file(
            &home.path().join(".claude/agents/helper.md"),
            "---\nname: helper\ndescription: A helper from the home folder.\n---\nHelp.\n",
        );
        write_file(
            &home.path().join(".config/cadre/skills/home-skill/SKILL.md"),
            "---\nname: home-skill\ndescription: A skill from the home folder.\n---\nDo it.\n",
        );
        let cassette_dir = tempfile::tempdir().unwrap();
        let cassette = cassette_dir.path().join("run.jsonl");
        let cassette = cassette.to_str().unwrap();
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("recorded answer")]);
        let home_str = home.path().to_str().unwrap();
        let uri = server.uri();
        let recorded = cadre_env(
            dir.path(),
            &[
                ("HOME", home_str),
                ("ANTHROPIC_BASE_URL", &uri),
                ("ANTHROPIC_API_KEY", "k"),
            ],
            &["run", "--record", cassette, "q"],
        )
        .await;
        assert_eq!(recorded.code, 0, "{}", recorded.stderr);
        assert!(
            recorded
                .stderr
                .contains("not read while recording or replaying, so the cassette replays the same everywhere: ~/.claude/agents, ~/.config/cadre/skills"),
            "{}",
            recorded.stderr
        );
        // The same machine, and one with an empty home (CI).
        for replay_home in [home_str, ""] {
            let empty = tempfile::tempdir().unwrap();
            let replay_home = if replay_home.is_empty() {
                empty.path().to_str().unwrap()
            } else {
                replay_home
            };
            let replayed = cadre_env(
                dir.path(),
                &[("HOME", replay_home)],
                &["run", "--replay", cassette, "q"],
            )
            .await;
            assert_eq!(replayed.code, 0, "{}", replayed.stderr);
            assert!(
                replayed.stdout.contains("recorded answer"),
                "{}",
                replayed.stdout
            );
        }
        // A plain run still sees the home folder's agents.
        let listed = cadre_env(dir.path(), &[("HOME", home_str)], &["agents", "list"]).await;
        assert!(listed.stdout.contains("helper"), "{}", listed.stdout);
    }

    #[tokio::test]
    async fn the_stop_reason_has_one_shape_in_json_stream_json_and_summary() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![Reply::tool_use("t1", "list_files", json!({}))],
        );
        server.route(
            Match::Any,
            vec![Reply::tool_use("t1", "list_files", json!({}))],
        );
        let json_out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "--max-turns", "1", "--output-format", "json", "q"],
        )
        .await;
        assert_eq!(json_out.code, 1, "{}", json_out.stderr);
        let result: Value = serde_json::from_str(json_out.stdout.trim()).unwrap();
        assert_eq!(result["stop"], json!({"kind": "max_turns"}), "{result}");
        let stream = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &[
                "run",
                "--max-turns",
                "1",
                "--output-format",
                "stream-json",
                "q",
            ],
        )
        .await;
        let events: Vec<Value> = stream
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let finished = events.iter().find(|e| e["event"] == "finished").unwrap();
        let last = events.last().unwrap();
        assert_eq!(finished["stop"], result["stop"]);
        assert_eq!(last["stop"], result["stop"]);
        for run in run_dirs(dir.path()) {
            let summary: Value =
                serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                    .unwrap();
            assert_eq!(summary["stop"], result["stop"], "{summary}");
        }
    }

    #[tokio::test]
    async fn the_transcripts_line_is_relative_to_where_cadre_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proj")).unwrap();
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("ok")]);
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["-C", "proj", "run", "q"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let id = run_dirs(&dir.path().join("proj"))[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            out.stderr
                .contains(&format!("transcripts: proj/.cadre/runs/{id}/")),
            "{}",
            out.stderr
        );
    }

    #[tokio::test]
    async fn quiet_prints_nothing_to_stdout_when_the_run_fails() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![Reply::error_status(
                400,
                "invalid_request_error",
                "bad request",
            )],
        );
        let out = cadre(dir.path(), &server.uri(), Some("k"), &["-q", "run", "q"]).await;
        assert_eq!(out.code, 3, "{}", out.stderr);
        assert_eq!(out.stdout, "", "stdout must stay empty");
        assert!(out.stderr.contains("bad request"), "{}", out.stderr);
    }

    #[tokio::test]
    async fn a_truncated_cassette_is_told_once_in_plain_words() {
        let project = sample_project();
        let cassettes = tempfile::tempdir().unwrap();
        let cassette = cassettes.path().join("cut.jsonl");
        let mut text =
            std::fs::read_to_string(repo().join("examples/cassettes/quickstart.jsonl")).unwrap();
        text.push_str("{\"key\":\"abc\",\"agent\":\"ma");
        std::fs::write(&cassette, text).unwrap();
        let out = cadre_env(
            project.path(),
            &[],
            &[
                "run",
                "--no-transcripts",
                "--replay",
                cassette.to_str().unwrap(),
                &quickstart_task(),
            ],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stderr.contains("was cut short"), "{}", out.stderr);
        assert!(
            !out.stderr.contains("WARN"),
            "a raw log line: {}",
            out.stderr
        );
        assert_eq!(out.stderr.matches("cut short").count(), 1, "{}", out.stderr);
    }

    #[tokio::test]
    async fn an_empty_cassette_says_it_holds_no_requests() {
        let dir = tempfile::tempdir().unwrap();
        let cassettes = tempfile::tempdir().unwrap();
        let cassette = cassettes.path().join("empty.jsonl");
        std::fs::write(
            &cassette,
            "{\"cadre_cassette\":1,\"created_by\":\"cadre 0.1.0\"}\n",
        )
        .unwrap();
        let out = cadre_env(
            dir.path(),
            &[],
            &["run", "--replay", cassette.to_str().unwrap(), "q"],
        )
        .await;
        assert_eq!(out.code, 3, "{}", out.stderr);
        assert!(!out.stderr.contains("types: none"), "{}", out.stderr);
        assert!(
            out.stderr.contains("holds no recorded requests"),
            "{}",
            out.stderr
        );
    }

    #[tokio::test]
    async fn a_failed_tool_is_named_once() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_use("t1", "read_file", json!({"path": "missing.txt"})),
                Reply::text("it is missing"),
            ],
        );
        let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", "q"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr.contains("main read_file failed: "),
            "{}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("failed: read_file failed"),
            "{}",
            out.stderr
        );
    }

    #[tokio::test]
    async fn agents_show_names_the_shipped_copy_as_shipped() {
        let dir = tempfile::tempdir().unwrap();
        let out = cadre_env(dir.path(), &[], &["agents", "show", "explore"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stdout.starts_with("# from (shipped with cadre)"),
            "{}",
            out.stdout
        );
        assert!(
            !out.stdout.contains("agents/explore.yaml"),
            "{}",
            out.stdout
        );
    }

    #[tokio::test]
    async fn agents_check_warns_when_skills_are_listed_without_the_skill_tool() {
        let dir = tempfile::tempdir().unwrap();
        write_file(
            &dir.path().join(".cadre/agents/reviewer.yaml"),
            "name: reviewer\ndescription: Reviews.\nmode: subagent\ntools: [read_file, grep]\nskills: [\"*\"]\nprompt: Review.\n",
        );
        write_file(
            &dir.path().join(".cadre/agents/quiet.yaml"),
            "name: quiet\ndescription: Reads.\nmode: subagent\ntools: [read_file]\nprompt: Read.\n",
        );
        let out = cadre_env(dir.path(), &[], &["agents", "check"]).await;
        assert_eq!(out.code, 0, "{}", out.stdout);
        let warnings: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.contains(": warning:"))
            .collect();
        assert_eq!(warnings.len(), 1, "{}", out.stdout);
        assert!(warnings[0].contains("reviewer.yaml:5:"), "{}", out.stdout);
        assert!(warnings[0].contains("`Skill`"), "{}", out.stdout);
        let strict = cadre_env(dir.path(), &[], &["agents", "check", "--strict"]).await;
        assert_eq!(strict.code, 1, "{}", strict.stdout);
    }

    #[tokio::test]
    async fn agents_and_skills_listings_keep_their_columns_and_fit_the_width() {
        let dir = tempfile::tempdir().unwrap();
        write_file(
            &dir.path().join(".cadre/agents/wide.yaml"),
            &format!(
                "name: wide\ndescription: Wide agent {}\nmode: subagent\ntools: [bash, read_file, list_files, grep, write_file, edit_file, Skill, Task]\nprompt: p\n",
                "with words ".repeat(20)
            ),
        );
        let skill = "a-skill-with-a-rather-long-name-for-its-folder";
        write_file(
            &dir.path().join(format!(".cadre/skills/{skill}/SKILL.md")),
            &format!(
                "---\nname: {skill}\ndescription: Long skill {}\n---\nDo.\n",
                "and more ".repeat(20)
            ),
        );
        for (args, row, text) in [
            (["agents", "list"], "wide", "Wide agent"),
            (["skills", "list"], skill, "Long skill"),
        ] {
            let out = cadre_env(dir.path(), &[], &args).await;
            assert_eq!(out.code, 0, "{}", out.stderr);
            let header = out.stdout.lines().next().unwrap();
            let column = header.find("description").unwrap();
            let line = out.stdout.lines().find(|l| l.starts_with(row)).unwrap();
            let at = line.char_indices().nth(column).unwrap().0;
            assert!(
                line[at..].starts_with(text),
                "{args:?}: columns slipped:\n{}",
                out.stdout
            );
            let narrow = cadre_env(dir.path(), &[("COLUMNS", "70")], &args).await;
            for l in narrow.stdout.lines() {
                assert!(l.chars().count() <= 70, "{args:?}: too wide: {l:?}");
            }
            assert!(narrow.stdout.contains(row), "{}", narrow.stdout);
        }
    }

    /// Strips ANSI escape sequences.
    fn plain(text: &str) -> String {
        let mut out = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// On a narrow terminal the live block's rows are cut to its width, not wrapped.
    #[tokio::test]
    async fn live_rows_are_cut_to_a_narrow_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([(
                    "t1",
                    "explore",
                    "Look at every file in the project carefully",
                )]),
                Reply::text("ALL-DONE"),
            ],
        );
        server.route(
            Match::FirstUserContains("Look at every".into()),
            vec![Reply::text("found it").delay(Duration::from_millis(1500))],
        );
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg("stty cols 50 rows 40; exec \"$0\" run PARENT")
            .arg(assert_cmd::cargo::cargo_bin("cadre"))
            .current_dir(dir.path())
            .env("HOME", home.path())
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", server.uri())
            .env("TERM", "xterm")
            .env_remove("COLUMNS")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG");
        let output = tokio::task::spawn_blocking(move || {
            let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
            let before = p.exp_string("ALL-DONE").unwrap();
            before + &p.exp_eof().unwrap()
        })
        .await
        .unwrap();
        // The session hands back each byte as a char: decode the UTF-8 again.
        let bytes: Vec<u8> = output
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
            .collect();
        let shown = plain(&String::from_utf8_lossy(&bytes));
        // The live block pads each of its rows to the terminal's width and lets the terminal
        // move on to the next row, so a draw is cut into rows of 50 characters here, as the
        // terminal does; every row must then begin as a row of the block does (the spinner,
        // the indent of a subagent's line, or blank filler), not in the middle of a wrap.
        let draws: Vec<&str> = shown
            .split(['\r', '\n'])
            .filter(|l| l.contains("cadre · main ·"))
            .collect();
        assert!(!draws.is_empty(), "no live block:\n{shown}");
        let mut subagent_rows = 0;
        for draw in draws {
            let chars: Vec<char> = draw.chars().collect();
            for row in chars.chunks(50) {
                let row: String = row.iter().collect();
                let spinner = row.starts_with(|c| ('\u{2800}'..='\u{28ff}').contains(&c));
                subagent_rows += usize::from(row.starts_with("  explore"));
                assert!(
                    spinner || row.starts_with("  ") || row.trim().is_empty(),
                    "a row wrapped on a 50-column terminal: {row:?} in {draw:?}"
                );
            }
        }
        assert!(subagent_rows > 0, "no subagent row:\n{shown}");
    }
}

/// Project instructions, the project root found from a subfolder, `.cadre/.gitignore`, and
/// the settings files.
mod project {
    use super::*;

    /// Runs `cadre` in `cwd` with `home` as the home folder.
    async fn cadre_home(cwd: &Path, home: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut cmd = Command::cargo_bin("cadre").unwrap();
        cmd.current_dir(cwd)
            .env("HOME", home)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .args(args)
            .timeout(std::time::Duration::from_secs(120));
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A project folder `proj` and a home folder with `~/.config/cadre`.
    fn layout() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::create_dir_all(home.join(".config/cadre")).unwrap();
        (dir, proj, home)
    }

    #[tokio::test]
    async fn instructions_reach_the_primary_and_every_subagent_in_order() {
        let (dir, proj, home) = layout();
        write_file(
            &proj.join("AGENTS.md"),
            "Use tabs.\nSee @docs/style.md and @../secret.md.\n",
        );
        write_file(
            &proj.join("docs/style.md"),
            "Name things plainly. @../AGENTS.md\n",
        );
        write_file(
            &proj.join("CLAUDE.md"),
            "Run cargo test before you finish.\n",
        );
        write_file(&proj.join(".claude/CLAUDE.md"), "Answer in English.\n");
        write_file(
            &dir.path().join("secret.md"),
            "the secret word is swordfish",
        );
        write_file(
            &home.join(".config/cadre/AGENTS.md"),
            "I like short answers.\n",
        );
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("Survey".into()),
            vec![
                Reply::tasks([
                    ("t1", "explore", "Find alpha"),
                    ("t2", "explore", "Find beta"),
                ]),
                Reply::text("Survey complete."),
            ],
        );
        for phrase in ["Find alpha", "Find beta"] {
            server.route(
                Match::FirstUserContains(phrase.into()),
                vec![Reply::text("found")],
            );
        }
        let url = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", url.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let out = cadre_home(&proj, &home, &env, &["run", "Survey the code"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr.contains(
                "AGENTS.md:2:0: warning: import @../secret.md refused: it leaves the workspace"
            ),
            "{}",
            out.stderr
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 4);
        let section = |system: &str| {
            let at = system
                .find("## Project instructions")
                .expect("no instructions section");
            system[at..]
                .split("## Available skills")
                .next()
                .unwrap()
                .trim_end()
                .to_owned()
        };
        let main = section(&requests[0].system_text());
        let order = [
            "### ~/.config/cadre/AGENTS.md (the user's own instructions, for every project)\n\nI like short answers.",
            "### AGENTS.md\n\nUse tabs.",
            "### docs/style.md (imported)\n\nName things plainly.",
            "### CLAUDE.md\n\nRun cargo test before you finish.",
            "### .claude/CLAUDE.md\n\nAnswer in English.",
        ];
        let mut at = 0;
        for part in order {
            let found = main[at..]
                .find(part)
                .unwrap_or_else(|| panic!("{part:?} not in order in {main}"));
            at += found + part.len();
        }
        assert!(!main.contains("swordfish"), "{main}");
        // Every subagent carries the very same section, and both explorers the same prompt.
        let sub: Vec<String> = requests
            .iter()
            .filter(|r| r.first_user_text().starts_with("Find"))
            .map(|r| r.system_text())
            .collect();
        assert_eq!(sub.len(), 2);
        assert_eq!(sub[0], sub[1]);
        assert_eq!(section(&sub[0]), main);
        assert!(sub[0].contains("You are a subagent"));
    }

    #[tokio::test]
    async fn doctor_lists_the_root_instructions_and_settings() {
        let (_dir, proj, home) = layout();
        std::fs::create_dir_all(proj.join(".git")).unwrap();
        std::fs::create_dir_all(proj.join("src/deep")).unwrap();
        write_file(&proj.join("AGENTS.md"), "@docs/a.md\n");
        write_file(&proj.join("docs/a.md"), &"x".repeat(2048));
        write_file(&proj.join("cadre.toml"), "model = \"haiku\"\n");
        write_file(&home.join(".config/cadre/AGENTS.md"), "mine");
        let out = cadre_home(&proj.join("src/deep"), &home, &[], &["doctor"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let root = proj.canonicalize().unwrap();
        assert!(
            out.stdout.contains(&format!(
                "project root      {}  (the nearest folder with .git; tools cannot leave it)",
                root.display()
            )),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains(
                "instructions      ~/.config/cadre/AGENTS.md  4 B  (yours, every project)"
            ),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("AGENTS.md  11 B\n"), "{}", out.stdout);
        assert!(
            out.stdout.contains("docs/a.md  2.0 KiB  (imported)"),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("cadre.toml  (read)"), "{}", out.stdout);
        assert!(
            out.stdout
                .contains("~/.config/cadre/config.toml  (not found)"),
            "{}",
            out.stdout
        );
    }

    #[tokio::test]
    async fn a_subfolder_runs_at_the_project_root_and_c_still_wins() {
        let (_dir, proj, home) = layout();
        cadre_testkit::git::init_repo(&proj);
        write_file(&proj.join("README.md"), "# Root readme\n");
        write_file(&proj.join("src/lib/code.rs"), "fn main() {}\n");
        write_file(
            &proj.join("agents/helper.yaml"),
            "name: helper\ndescription: Helps with things.\nmode: subagent\ntools: [read_file]\nprompt: You help.\n",
        );
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_use("toolu_1", "read_file", json!({"path": "README.md"})),
                Reply::text("read it"),
                Reply::text("second"),
            ],
        );
        let url = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", url.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let out = cadre_home(
            &proj.join("src/lib"),
            &home,
            &env,
            &["run", "Read the readme"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let requests = server.requests();
        // The tools work at the root, the project's agent types are there, and so is the run folder.
        let result = requests[1].messages().last().unwrap().to_string();
        assert!(result.contains("Root readme"), "{result}");
        assert!(
            requests[0].body.to_string().contains("Helps with things"),
            "the project's agent type is missing"
        );
        assert!(proj.join(".cadre/runs").read_dir().unwrap().count() == 1);
        assert_eq!(
            std::fs::read_to_string(proj.join(".cadre/.gitignore")).unwrap(),
            "# Written by cadre: run transcripts and agents' worktrees stay out of git.\nruns/\nworktrees/\n"
        );
        assert!(!proj.join("src/lib/.cadre").exists());
        let status =
            cadre_testkit::git::git(&proj, &["status", "--porcelain", "--untracked-files=all"]);
        assert!(!status.contains("runs/"), "{status}");

        // -C names the folder to work in as it is; the user's .gitignore is kept.
        write_file(&proj.join(".cadre/.gitignore"), "mine\n");
        let out = cadre_home(
            &proj,
            &home,
            &env,
            &["-C", "src", "run", "--no-transcripts", "again"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let last = server.requests().last().unwrap().body.to_string();
        assert!(!last.contains("Helps with things"), "{last}");
        assert_eq!(
            std::fs::read_to_string(proj.join(".cadre/.gitignore")).unwrap(),
            "mine\n"
        );
    }

    #[tokio::test]
    async fn outside_git_no_gitignore_is_written() {
        let (_dir, proj, home) = layout();
        std::fs::create_dir_all(proj.join(".cadre")).unwrap();
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("ok")]);
        let url = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", url.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(!proj.join(".cadre/.gitignore").exists());
    }

    #[tokio::test]
    async fn settings_follow_flags_env_project_user_defaults() {
        let (_dir, proj, home) = layout();
        std::fs::create_dir_all(proj.join(".cadre")).unwrap();
        write_file(
            &proj.join("cadre.toml"),
            "# the project's\nmodel = \"haiku\"\n\n[limits]\nmax_tokens = 1234\n\n[permissions]\nmode = \"ask\"\nallow = [\"Bash(git diff:*)\"]\n",
        );
        write_file(
            &home.join(".config/cadre/config.toml"),
            "model = \"opus\"\nbudget_tokens = 500000\n[limits]\nmax-tokens = 999\n[compaction]\ncompact_at = \"off\"\n[permissions]\ndeny = [\"Read(./secrets/**)\"]\n",
        );
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("ok"), Reply::text("ok")]);
        let url = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", url.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let body = &server.requests()[0].body;
        // The project beats the user; the user's file beats clap's defaults.
        assert_eq!(body["model"], "claude-haiku-5-5");
        assert_eq!(body["max_tokens"], 1234);
        assert!(
            body.get("context_management").is_none(),
            "compaction is off: {body}"
        );

        let with_env: Vec<(&str, &str)> = env
            .iter()
            .copied()
            .chain([("CADRE_MODEL", "sonnet")])
            .collect();
        let out = cadre_home(
            &proj,
            &home,
            &with_env,
            &["run", "--max-tokens", "2000", "hi"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let body = &server.requests()[1].body;
        assert_eq!(body["model"], "claude-sonnet-5-5");
        assert_eq!(body["max_tokens"], 2000);

        let out = cadre_home(
            &proj,
            &home,
            &with_env,
            &["config", "show", "--max-parallel", "3"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let line = |key: &str| -> String {
            out.stdout
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(key))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let project = proj.join("cadre.toml").canonicalize().unwrap();
        let p = project.display();
        assert_eq!(
            line("model"),
            "model claude-sonnet-5-5 env CADRE_MODEL",
            "{}",
            out.stdout
        );
        assert_eq!(line("limits.max_parallel"), "limits.max_parallel 3 flag");
        assert_eq!(
            line("limits.max_tokens"),
            format!("limits.max_tokens 1234 {p}:5")
        );
        assert_eq!(
            line("limits.budget_tokens"),
            "limits.budget_tokens 500000 ~/.config/cadre/config.toml:2"
        );
        assert_eq!(
            line("compaction.compact_at"),
            "compaction.compact_at off ~/.config/cadre/config.toml:6"
        );
        assert_eq!(line("limits.max_depth"), "limits.max_depth 2 default");
        assert_eq!(
            line("base_url"),
            format!("base_url {url} env ANTHROPIC_BASE_URL")
        );
        assert_eq!(
            line("permissions.mode"),
            format!("permissions.mode ask {p}:8")
        );
        assert_eq!(
            line("permissions.allow"),
            format!("permissions.allow Bash(git diff:*) {p}:9")
        );
        assert_eq!(
            line("permissions.deny"),
            "permissions.deny Read(./secrets/**) ~/.config/cadre/config.toml:8"
        );
    }

    #[tokio::test]
    async fn bad_settings_are_errors_with_file_and_line_and_unknown_keys_warn() {
        let (_dir, proj, home) = layout();
        std::fs::create_dir_all(proj.join(".cadre")).unwrap();
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("ok")]);
        let url = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", url.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let file = proj.join("cadre.toml");

        write_file(&file, "model = \"haiku\"\n[limits]\nmax_parallel = 0\n");
        let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("cadre.toml:3: limits.max_parallel must be a whole number from 1 to"),
            "{}",
            out.stderr
        );
        write_file(&file, "provider = \"azure\"\n");
        let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr.contains(
                "cadre.toml:1: provider must be \"anthropic\" or \"openai\", not \"azure\""
            ),
            "{}",
            out.stderr
        );
        write_file(&file, "model = \"haiku\"\nmodel = \"opus\"\n");
        let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr.contains("cadre.toml:2: not valid TOML"),
            "{}",
            out.stderr
        );
        write_file(&file, "[compaction]\ncompact_at = 10\n");
        let out = cadre_home(&proj, &home, &env, &["config", "show"]).await;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("cadre.toml:2: compaction.compact_at 10 is below the API's minimum"),
            "{}",
            out.stderr
        );

        // Liberal in what it reads: an unknown key warns and the run goes on.
        write_file(
            &file,
            "model = \"haiku\"\ncolour = \"blue\"\n[limits]\nmax_turns = 3\n",
        );
        let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("cadre.toml:2: unknown setting `colour` ignored"),
            "{}",
            out.stderr
        );
        assert_eq!(server.requests()[0].body["model"], "claude-haiku-5-5");
        // (Compaction is on by default: the other test's `off` is seen.)
        assert!(server.requests()[0]
            .body
            .get("context_management")
            .is_some());
        // ... and `config check` is strict about it.
        let out = cadre_home(&proj, &home, &env, &["config", "check"]).await;
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("unknown setting `colour`"),
            "{}",
            out.stderr
        );
        write_file(&file, "model = \"haiku\"\n");
        let out = cadre_home(&proj, &home, &env, &["config", "check"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
    }

    #[tokio::test]
    async fn a_recording_replays_without_the_users_own_files() {
        let (dir, proj, home) = layout();
        std::fs::create_dir_all(proj.join(".cadre")).unwrap();
        write_file(&proj.join("AGENTS.md"), "Project rule.\n");
        write_file(&home.join(".config/cadre/AGENTS.md"), "My private rule.\n");
        write_file(
            &home.join(".config/cadre/config.toml"),
            "model = \"opus\"\n",
        );
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("recorded answer")]);
        let url = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", url.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let cassette = dir.path().join("run.jsonl");
        let cas = cassette.to_str().unwrap();
        let out = cadre_home(&proj, &home, &env, &["run", "--record", cas, "hi"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stderr.contains("not read while recording or replaying, so the cassette replays the same everywhere: ~/.config/cadre/config.toml, ~/.config/cadre/AGENTS.md"), "{}", out.stderr);
        let first = &server.requests()[0];
        assert_eq!(first.body["model"], "claude-sonnet-5-5");
        assert!(first.system_text().contains("Project rule."));
        assert!(!first.system_text().contains("My private rule."));
        // Another machine: another home, no key, no server.
        let other = dir.path().join("other-home");
        std::fs::create_dir_all(&other).unwrap();
        let out = cadre_home(&proj, &other, &[], &["run", "--replay", cas, "hi"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("recorded answer"), "{}", out.stdout);
    }

    #[tokio::test]
    async fn base_url_and_mcp_config_come_from_the_files() {
        let (_dir, proj, home) = layout();
        std::fs::create_dir_all(proj.join(".cadre")).unwrap();
        let config =
            json!({"mcpServers": {"local": {"command": cadre_testkit::mcp_server_binary()}}});
        write_file(&proj.join("tools/mcp.json"), &config.to_string());
        write_file(
            &proj.join("cadre.toml"),
            "mcp_config = \"tools/mcp.json\"\n",
        );
        let server = MockServer::start().await;
        server.route(Match::Any, vec![Reply::text("ok")]);
        write_file(
            &home.join(".config/cadre/config.toml"),
            &format!("base_url = \"{}\"\n", server.uri()),
        );
        // No ANTHROPIC_BASE_URL: the request reaches the mock only through the user's file.
        let out = cadre_home(&proj, &home, &[("ANTHROPIC_API_KEY", "k")], &["run", "hi"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let tools = server.requests()[0].tool_names();
        assert!(
            tools.iter().any(|t| t.starts_with("mcp__local__")),
            "{tools:?}"
        );
        let out = cadre_home(&proj, &home, &[], &["mcp", "list"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("mcp__local__"), "{}", out.stdout);

        write_file(
            &proj.join("cadre.toml"),
            "mcp_config = \"tools/none.json\"\n",
        );
        let out = cadre_home(&proj, &home, &[], &["config", "show"]).await;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr.contains("cadre.toml:1: mcp_config names "),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("none.json: no such file"),
            "{}",
            out.stderr
        );
    }
}

/// Permission modes and rules: what is asked, allowed or denied, and what the model is told.
mod permissions {
    use super::*;
    use cadre_testkit::Captured;

    /// The tool_result the model received for the call `id`: (is_error, text).
    fn result_of(requests: &[Captured], id: &str) -> (bool, String) {
        for r in requests {
            for m in r.messages() {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" && b["tool_use_id"] == id {
                        let text = match &b["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(blocks) => blocks
                                .iter()
                                .filter_map(|b| b["text"].as_str())
                                .collect::<Vec<_>>()
                                .join("\n"),
                            _ => String::new(),
                        };
                        return (b["is_error"] == true, text);
                    }
                }
            }
        }
        panic!("no tool_result for {id}")
    }

    fn bash(id: &str, command: &str) -> Reply {
        Reply::tool_use(id, "bash", json!({ "command": command }))
    }

    /// `cadre ARGS` in `dir` on a pseudo-terminal, against `server`.
    fn on_terminal(
        dir: &Path,
        home: &Path,
        server: &MockServer,
        args: &[&str],
    ) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
        cmd.current_dir(dir)
            .args(args)
            .env("HOME", home)
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", server.uri())
            .env("TERM", "dumb")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG");
        cmd
    }

    #[tokio::test]
    async fn ask_on_a_terminal_allows_once_always_and_denies() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                bash("b1", "touch first"),
                bash("b2", "touch second"),
                bash("b3", "touch second"),
                bash("b4", "touch third"),
                Reply::tool_use("r1", "read_file", json!({"path": "first"})),
                Reply::text("ALL-DONE"),
            ],
        );
        let cmd = on_terminal(
            dir.path(),
            home.path(),
            &server,
            &["run", "--permission-mode", "ask", "make files"],
        );
        tokio::task::spawn_blocking(move || {
            let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
            p.exp_string("main (main) asks to run bash: touch first")
                .unwrap();
            p.exp_string("allow?").unwrap();
            p.send_line("y").unwrap();
            p.exp_string("asks to run bash: touch second").unwrap();
            p.exp_string("always allow Bash(touch second) this session")
                .unwrap();
            p.exp_string("allow?").unwrap();
            p.send_line("a").unwrap();
            // The identical call after "always" is not asked: the next question is the third.
            let between = p.exp_string("asks to run bash: touch third").unwrap();
            assert!(!between.contains("asks to run"), "asked again:\n{between}");
            p.exp_string("allow?").unwrap();
            p.send_line("n").unwrap();
            let rest = p.exp_string("ALL-DONE").unwrap();
            // Reading needs no approval.
            assert!(!rest.contains("asks to run"), "{rest}");
            p.exp_eof().unwrap();
        })
        .await
        .unwrap();
        assert!(dir.path().join("first").exists());
        assert!(dir.path().join("second").exists());
        assert!(!dir.path().join("third").exists());
        let requests = server.requests();
        for id in ["b1", "b2", "b3", "r1"] {
            let (is_error, text) = result_of(&requests, id);
            assert!(!is_error, "{id}: {text}");
        }
        let (is_error, text) = result_of(&requests, "b4");
        assert!(is_error);
        assert!(text.contains("denied by the person"), "{text}");
    }

    #[tokio::test]
    async fn two_subagents_asking_at_once_are_asked_one_after_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "code", "CHILD one"), ("t2", "code", "CHILD two")]),
                Reply::text("PARENT-DONE"),
            ],
        );
        for name in ["one", "two"] {
            server.route(
                Match::FirstUserContains(format!("CHILD {name}")),
                vec![
                    Reply::tool_use(
                        &format!("w-{name}"),
                        "write_file",
                        json!({"path": format!("{name}.txt"), "content": "x"}),
                    ),
                    Reply::text("child done"),
                ],
            );
        }
        // Both children ask at the same moment.
        server.hold_until_waiting(
            Match::FirstUserContains("CHILD".into()),
            2,
            std::time::Duration::from_secs(60),
        );
        let cmd = on_terminal(
            dir.path(),
            home.path(),
            &server,
            // Quiet: no live block, whose drawing lock would order the questions anyway.
            &["-q", "run", "--permission-mode", "ask", "PARENT task"],
        );
        tokio::task::spawn_blocking(move || {
            let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
            let before = p.exp_string("allow? [y/a/n] ").unwrap();
            assert_eq!(before.matches("asks to run").count(), 1, "{before}");
            // While the first question is open, the second is not put: an answer that is
            // none is asked again, and nothing else was printed meanwhile.
            p.send_line("maybe").unwrap();
            let meanwhile = p.exp_string("allow? [y/a/n] ").unwrap();
            assert!(meanwhile.contains("answer y (allow once)"), "{meanwhile}");
            assert!(!meanwhile.contains("asks to run"), "{meanwhile}");
            p.send_line("y").unwrap();
            // The second question comes once the first is answered.
            let between = p.exp_string("allow? [y/a/n] ").unwrap();
            assert_eq!(between.matches("asks to run").count(), 1, "{between}");
            let asked = format!("{before}{between}");
            for path in ["main/code#1 (code)", "main/code#2 (code)"] {
                assert!(asked.contains(path), "{asked}");
            }
            p.send_line("n").unwrap();
            p.exp_string("PARENT-DONE").unwrap();
            p.exp_eof().unwrap();
        })
        .await
        .unwrap();
        let made = ["one.txt", "two.txt"].map(|f| dir.path().join(f).exists());
        assert_eq!(made.iter().filter(|m| **m).count(), 1, "{made:?}");
    }

    #[tokio::test]
    async fn a_subagents_question_shows_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "code", "CHILD job")]),
                Reply::text("PARENT-DONE"),
                // The next turn ("write it again"): a file is read before it is overwritten.
                Reply::tool_use("r2", "read_file", json!({"path": "child.txt"})),
                Reply::tool_use(
                    "w2",
                    "write_file",
                    json!({"path": "child.txt", "content": "again\n"}),
                ),
                Reply::text("AGAIN-DONE"),
            ],
        );
        server.route(
            Match::FirstUserContains("CHILD job".into()),
            vec![
                Reply::tool_use(
                    "w1",
                    "write_file",
                    json!({"path": "child.txt", "content": "hi\n"}),
                ),
                Reply::text("child done"),
            ],
        );
        let cmd = on_terminal(
            dir.path(),
            home.path(),
            &server,
            &["chat", "--permission-mode", "ask"],
        );
        tokio::task::spawn_blocking(move || {
            let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
            p.exp_string("/help").unwrap();
            p.send_line("PARENT task").unwrap();
            p.exp_string("main/code#1 (code) asks to run write_file: child.txt")
                .unwrap();
            p.exp_string("always allow Write(child.txt)").unwrap();
            p.exp_string("allow?").unwrap();
            p.send_line("a").unwrap();
            p.exp_string("PARENT-DONE").unwrap();
            // "Always" holds for the rest of the session: the next turn is not asked.
            p.send_line("write it again").unwrap();
            let rest = p.exp_string("AGAIN-DONE").unwrap();
            assert!(!rest.contains("asks to run"), "{rest}");
            p.send_control('d').unwrap();
            p.exp_eof().unwrap();
        })
        .await
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("child.txt")).unwrap(),
            "again\n"
        );
        assert!(!result_of(&server.requests(), "w1").0);
        let (is_error, text) = result_of(&server.requests(), "w2");
        assert!(!is_error, "{text}");
    }

    #[tokio::test]
    async fn ask_without_a_terminal_denies_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                bash("b1", "touch made"),
                Reply::tool_use("r1", "list_files", json!({})),
                Reply::text("finished anyway"),
            ],
        );
        // No terminal: stdin and stdout are pipes. The run must end, not wait.
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "--permission-mode", "ask", "q"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("finished anyway"), "{}", out.stdout);
        assert!(!dir.path().join("made").exists());
        let requests = server.requests();
        let (is_error, text) = result_of(&requests, "b1");
        assert!(is_error);
        assert!(
            text.contains("denied") && text.contains("no terminal to ask"),
            "{text}"
        );
        assert!(text.contains("Bash(touch made)"), "{text}");
        assert!(!result_of(&requests, "r1").0);
    }

    #[tokio::test]
    async fn the_settings_files_permissions_reach_the_run_and_flags_add_to_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "x").unwrap();
        std::fs::write(
            dir.path().join("cadre.toml"),
            "[permissions]\nmode = \"deny-writes\"\nallow = [\"Bash(ls:*)\"]\ndeny = [\"Bash(rm:*)\"]\n",
        )
        .unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                bash("b1", "rm -f keep.txt"),
                bash("b2", "ls"),
                bash("b3", "touch new.txt"),
                bash("b4", "mkdir made"),
                Reply::text("done"),
            ],
        );
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "--allow", "Bash(touch:*)", "q"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(dir.path().join("keep.txt").exists());
        let requests = server.requests();
        let (is_error, text) = result_of(&requests, "b1");
        assert!(
            is_error && text.contains("denied by rule Bash(rm:*) (from settings)"),
            "{text}"
        );
        // The file's allow rule and the flag's both let their commands through.
        assert!(!result_of(&requests, "b2").0);
        assert!(!result_of(&requests, "b3").0);
        assert!(dir.path().join("new.txt").exists());
        // The file's mode holds: what no rule allows is denied.
        let (is_error, text) = result_of(&requests, "b4");
        assert!(is_error && text.contains("deny-writes"), "{text}");
        assert!(!dir.path().join("made").exists());
    }

    #[tokio::test]
    async fn deny_rules_from_flags_and_agent_types_name_the_rule() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "x").unwrap();
        write_file(&dir.path().join("secrets/key"), "s3cret");
        write_file(
            &dir.path().join("agents/careful.yaml"),
            "name: careful\ndescription: Careful.\nmode: primary\ntools: [bash, read_file, write_file]\npermissions:\n  allow: [\"Bash(ls:*)\"]\n  deny: [\"Write(*.lock)\"]\nprompt: Be careful.\n",
        );
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                bash("b1", "ls && rm -f keep.txt"),
                Reply::tool_use("r1", "read_file", json!({"path": "./secrets/key"})),
                Reply::tool_use(
                    "w1",
                    "write_file",
                    json!({"path": "deps/Cargo.lock", "content": "x"}),
                ),
                bash("b2", "ls"),
                Reply::text("done"),
            ],
        );
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &[
                "run",
                "--agent",
                "careful",
                "--deny",
                "Bash(rm:*)",
                "--deny",
                "Read(./secrets/**)",
                "q",
            ],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(dir.path().join("keep.txt").exists());
        assert!(!dir.path().join("deps/Cargo.lock").exists());
        let requests = server.requests();
        for (id, want) in [
            ("b1", "denied by rule Bash(rm:*) (from --deny)"),
            ("r1", "denied by rule Read(./secrets/**) (from --deny)"),
            (
                "w1",
                "denied by rule Write(*.lock) (from agent type careful)",
            ),
        ] {
            let (is_error, text) = result_of(&requests, id);
            assert!(is_error, "{id}: {text}");
            assert!(text.contains(want), "{id}: {text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
        assert!(!result_of(&requests, "b2").0);
        // The display says so too.
        assert!(
            out.stderr.contains("denied by rule Bash(rm:*)"),
            "{}",
            out.stderr
        );
    }

    #[tokio::test]
    async fn deny_writes_denies_writing_tools_and_bash_outside_the_allow_rules() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                bash("b1", "touch nope"),
                bash("b2", "echo hi | head -1"),
                Reply::tool_use("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
                Reply::tool_use(
                    "w2",
                    "write_file",
                    json!({"path": "notes/n.md", "content": "note\n"}),
                ),
                Reply::text("done"),
            ],
        );
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &[
                "run",
                "--permission-mode",
                "deny-writes",
                "--allow",
                "Bash(echo:*)",
                "--allow",
                "Bash(head:*)",
                "--allow",
                "Write(notes/**)",
                "q",
            ],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let requests = server.requests();
        for id in ["b1", "w1"] {
            let (is_error, text) = result_of(&requests, id);
            assert!(is_error, "{id}: {text}");
            assert!(
                text.contains("denied by permission mode deny-writes"),
                "{text}"
            );
        }
        let (is_error, text) = result_of(&requests, "b2");
        assert!(!is_error && text.contains("hi"), "{text}");
        assert!(!result_of(&requests, "w2").0);
        assert!(!dir.path().join("nope").exists() && !dir.path().join("a.txt").exists());
        assert!(dir.path().join("notes/n.md").exists());
    }

    #[tokio::test]
    async fn plan_mode_is_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::Any,
            vec![
                Reply::tool_use("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
                Reply::tool_use(
                    "e1",
                    "edit_file",
                    json!({"path": "a.txt", "old_string": "x", "new_string": "y"}),
                ),
                bash("b1", "touch by-bash"),
                Reply::tool_use("l1", "list_files", json!({})),
                Reply::text("planned"),
            ],
        );
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "--permission-mode", "plan", "q"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let requests = server.requests();
        for id in ["w1", "e1"] {
            let (is_error, text) = result_of(&requests, id);
            assert!(is_error, "{id}: {text}");
            assert!(text.contains("denied by permission mode plan"), "{text}");
        }
        // bash runs read-only in the kernel sandbox (or not at all without one).
        assert!(!dir.path().join("by-bash").exists() && !dir.path().join("a.txt").exists());
        assert!(!result_of(&requests, "l1").0);
        // The agent is told it is read-only.
        assert!(requests[0].system_text().contains("You are read-only"));
    }

    #[tokio::test]
    async fn a_claude_code_agent_files_patterns_are_honoured() {
        let dir = tempfile::tempdir().unwrap();
        write_file(
            &dir.path().join(".claude/agents/reviewer.md"),
            "---\nname: reviewer\ndescription: Reviews.\ntools: Read, Bash(echo:*)\ndisallowedTools: Bash(echo secret:*)\n---\nReview.\n",
        );
        let check = cadre_offline(dir.path(), &["agents", "check"]).await;
        assert_eq!(check.code, 0, "{}", check.stdout);
        assert!(!check.stdout.contains("dropped"), "{}", check.stdout);
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "reviewer", "CHILD review")]),
                Reply::text("reviewed"),
            ],
        );
        server.route(
            Match::FirstUserContains("CHILD review".into()),
            vec![
                bash("b1", "echo looks good"),
                bash("b2", "touch changed"),
                bash("b3", "echo secret stuff"),
                Reply::text("child done"),
            ],
        );
        let out = cadre(
            dir.path(),
            &server.uri(),
            Some("k"),
            &["run", "PARENT task"],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let requests = server.requests();
        let child = requests
            .iter()
            .find(|r| r.first_user_text() == "CHILD review")
            .unwrap();
        assert!(child.tool_names().contains(&"bash".to_string()));
        let (is_error, text) = result_of(&requests, "b1");
        assert!(!is_error && text.contains("looks good"), "{text}");
        let (is_error, text) = result_of(&requests, "b2");
        assert!(is_error);
        assert!(
            text.contains("agent type reviewer may use bash only as its tools say (Bash(echo:*))"),
            "{text}"
        );
        assert!(!dir.path().join("changed").exists());
        let (is_error, text) = result_of(&requests, "b3");
        assert!(is_error);
        assert!(
            text.contains("denied by rule Bash(echo secret:*) (from agent type reviewer)"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn bad_modes_and_rules_are_usage_errors() {
        let dir = tempfile::tempdir().unwrap();
        for (args, want) in [
            (&["run", "--deny", "Bash(rm", "q"][..], "must be closed"),
            (
                &["run", "--allow", "WebFetch", "q"][..],
                "cadre has no WebFetch tool",
            ),
            (
                &["run", "--permission-mode", "yolo", "q"][..],
                "unknown permission mode",
            ),
        ] {
            let out = cadre(dir.path(), "http://127.0.0.1:9", Some("k"), args).await;
            assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
            assert!(out.stderr.contains(want), "{args:?}: {}", out.stderr);
        }
    }
}

#[path = "cli/engine.rs"]
mod engine;

#[path = "cli/exit_codes.rs"]
mod exit_codes;
