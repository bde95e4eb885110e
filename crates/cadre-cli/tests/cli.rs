//! The real `cadre` binary against the shared mock Messages API server on 127.0.0.1.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;
use cadre_testkit::{content_text, Match, MockServer, Reply};
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

/// Runs `cadre` offline in `dir` with HOME pointed at `dir`, so the user's own skills and
/// agents cannot leak into the result.
async fn cadre_offline(dir: &Path, args: &[&str]) -> Output {
    cadre_env(dir, &[("HOME", dir.to_str().unwrap())], args).await
}

fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs `cadre` like [`cadre`] with extra environment variables.
async fn cadre_env(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    // An empty home: the developer's own agent and skill folders must not leak into tests.
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::cargo_bin("cadre").unwrap();
    // Only a test's own collector may receive its run's traces, and only a test's own
    // caller trace may be joined.
    for (name, _) in std::env::vars_os().filter(|(n, _)| n.to_string_lossy().starts_with("OTEL_")) {
        cmd.env_remove(name);
    }
    cmd.current_dir(dir)
        .env_remove("TRACEPARENT")
        .env_remove("TRACESTATE")
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

/// The tool_result the model received for the call `id`: (is_error, text).
fn result_of(requests: &[cadre_testkit::Captured], id: &str) -> (bool, String) {
    for r in requests {
        for m in r.messages() {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_result" && b["tool_use_id"] == id {
                    return (b["is_error"] == true, content_text(b.get("content")));
                }
            }
        }
    }
    panic!("no tool_result for {id}")
}

/// A model turn that runs `command` with the `bash` tool, as call `id`.
fn bash(id: &str, command: &str) -> Reply {
    Reply::tool_use(id, "bash", json!({ "command": command }))
}

/// Waits (up to a minute) until `ready`, polling; fails the test naming `what` if never.
async fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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

fn answer_of(stream_json: &str) -> String {
    let last: Value = serde_json::from_str(stream_json.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "result");
    last["answer"].as_str().unwrap().to_owned()
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

/// MCP through the real binary: `.mcp.json` in the project, a real rmcp server over stdio.
#[path = "cli/mcp.rs"]
mod mcp;

/// Sessions: a run killed with SIGKILL and resumed from its journal, and follow-ups.
#[path = "cli/sessions.rs"]
mod sessions;

/// Nothing lost when the terminal or the disk goes (SIGHUP, a full run folder), and nothing
/// that may have changed the world sent again after a crash.
#[path = "cli/durability.rs"]
mod durability;

/// The interactive session, driven through a pseudo-terminal as a person would.
#[path = "cli/interactive.rs"]
mod interactive;

/// `cadre runs list|show` over runs the real binary wrote.
#[path = "cli/runs.rs"]
mod runs;

/// Per-agent limits from agent types' YAML and Claude Code's `maxTurns`, a time limit's
/// outcome and exit code, and `agents check` on bad limits.
#[path = "cli/limits.rs"]
mod limits;

/// Long runs: compaction seen from the command line.
#[path = "cli/compaction.rs"]
mod compaction;

/// Isolated subagents seen from the command line: their branches listed and removed.
#[path = "cli/worktrees.rs"]
mod worktrees;

/// Everyday use: where the task comes from, checked options, completions, and the rough
/// edges of output (closed pipes, paths, widths, messages).
#[path = "cli/everyday.rs"]
mod everyday;

/// Project instructions, the project root found from a subfolder, `.cadre/.gitignore`, and
/// the settings files.
#[path = "cli/project.rs"]
mod project;

/// Permission modes and rules: what is asked, allowed or denied, and what the model is told.
#[path = "cli/permissions.rs"]
mod permissions;

#[path = "cli/engine.rs"]
mod engine;
#[path = "cli/engine_fleet.rs"]
mod engine_fleet;
#[path = "cli/engine_workflow.rs"]
mod engine_workflow;

#[path = "cli/definitions.rs"]
mod definitions;
#[path = "cli/exit_codes.rs"]
mod exit_codes;
#[path = "cli/fleet.rs"]
mod fleet;
#[path = "cli/run_command.rs"]
mod run_command;
/// Teams through the binary: a killed team run resumes with every message delivered once,
/// no member started twice and the task list intact; team runs are refused on the engine.
#[path = "cli/team.rs"]
mod team;
#[path = "cli/typed.rs"]
mod typed;
#[path = "cli/workflow.rs"]
mod workflow;
/// `cadre workflow run`, resume and retry: 200 items, a kill at half, an edit, a 401.
#[path = "cli/workflow_run.rs"]
mod workflow_run;
/// The `Workflow` tool: a model starts a saved workflow; its caller killed and resumed.
#[path = "cli/workflow_tool.rs"]
mod workflow_tool;

/// What a person sees on a terminal: the live block, questions and widths.
#[path = "cli/screen.rs"]
mod screen;

/// Teams seen from the command line: the live block, stream-json, `runs show` and the
/// timeline page.
#[path = "cli/team_view.rs"]
mod team_view;

/// Hooks: Claude Code's settings files and cadre's `[hooks]`, real hook scripts blocking,
/// formatting and keeping agents going, each subagent's identity, timeouts and Ctrl-C, and
/// trust.
#[path = "cli/hooks.rs"]
mod hooks;

/// Results that arrive whole and outcomes told as they happened: a cut report, a killed
/// subagent, a cancelled one, in the table, `summary.json` and `cadre runs`.
#[path = "cli/results.rs"]
mod results;
/// One trust boundary: an untrusted clone runs none of its commands and reaches none of its
/// hosts; the user's guards hold; a guard that cannot load refuses the run.
#[path = "cli/trust.rs"]
mod trust;

/// `cadre mcp serve` through an rmcp client over stdio: each agent type a tool, each call
/// a run; bad input, concurrency under one limit, progress and cancellation.
#[path = "cli/mcp_serve.rs"]
mod mcp_serve;

// ---------------------------------------------------------------------------------------
// Traces exported over OTLP to a collector on 127.0.0.1.

#[cfg(feature = "otel")]
#[path = "cli/traces.rs"]
mod traces;
