//! Hooks through the real binary, with real hook scripts written as Claude Code users write
//! them (`.claude/settings.json`, `jq` reading the JSON on stdin, exit 2 to block).

use super::*;
use cadre_testkit::hooks::{gone, require_jq, script};
use std::time::Duration;

/// Writes `dir/.claude/settings.json` as Claude Code reads it.
fn settings(dir: &Path, value: &Value) {
    write_file(
        &dir.join(".claude/settings.json"),
        &serde_json::to_string_pretty(value).unwrap(),
    );
}

/// One Claude Code hooks entry: `{matcher, hooks: [{type: command, command, timeout?}]}`.
fn entry(matcher: &str, command: &str, timeout: Option<u64>) -> Value {
    let mut hook = json!({"type": "command", "command": command});
    if let Some(t) = timeout {
        hook["timeout"] = json!(t);
    }
    json!({"matcher": matcher, "hooks": [hook]})
}

/// `cadre ARGS` in `dir` against `server`, with `home` as HOME (and XDG_CONFIG_HOME below
/// it), so the trust file and the user's settings are the test's own.
async fn cadre_home(dir: &Path, home: &Path, server: &str, args: &[&str]) -> Output {
    let config = home.join(".config");
    cadre_env(
        dir,
        &[
            ("HOME", home.to_str().unwrap()),
            ("XDG_CONFIG_HOME", config.to_str().unwrap()),
            ("ANTHROPIC_BASE_URL", server),
            ("ANTHROPIC_API_KEY", "k"),
        ],
        args,
    )
    .await
}

/// The JSON objects of a file of one object per line.
fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `hook` events of a stream-json output.
fn hook_events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "hook")
        .collect()
}

/// The pids a hook wrote to `file`, once both are there.
async fn pids_in(file: &Path) -> (i32, i32) {
    wait_for("the hook's pids", || {
        std::fs::read_to_string(file).is_ok_and(|t| t.lines().count() >= 2)
    })
    .await;
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines = text.lines().map(|l| l.trim().parse::<i32>().unwrap());
    (lines.next().unwrap(), lines.next().unwrap())
}

/// A hook that writes its own pid and its child's to `pids`, then waits for the child, a
/// `sleep` far longer than any test.
fn hanging_hook(dir: &Path) -> String {
    script(
        dir,
        "hang.sh",
        "echo $$ > \"$CLAUDE_PROJECT_DIR/pids.tmp\"\nsleep 600 &\necho $! >> \"$CLAUDE_PROJECT_DIR/pids.tmp\"\nmv \"$CLAUDE_PROJECT_DIR/pids.tmp\" \"$CLAUDE_PROJECT_DIR/pids\"\nwait\n",
    )
}

#[tokio::test]
async fn a_claude_code_formatter_formats_what_the_model_wrote_and_a_guard_blocks_rm_rf() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // A formatter that strips trailing blanks, as `prettier --write "$f"` would format.
    let format = script(
        dir.path(),
        "format.sh",
        "f=$(jq -r '.tool_input.file_path')\nsed -i 's/[[:space:]]*$//' \"$f\"\n",
    );
    let guard = script(
        dir.path(),
        "guard.sh",
        "cmd=$(jq -r '.tool_input.command')\ncase \"$cmd\" in\n  *'rm -rf'*) echo \"guard: refusing '$cmd'\" >&2; exit 2;;\nesac\nexit 0\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {
            "PostToolUse": [entry("Edit|Write", &format, None)],
            "PreToolUse": [entry("Bash", &guard, None)],
        }}),
    );
    std::fs::create_dir(dir.path().join("keep")).unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use(
                "w1",
                "write_file",
                json!({"path": "notes.txt", "content": "hello   \nworld\t \n"}),
            ),
            bash("b1", "rm -rf keep"),
            bash("b2", "echo fine > ok.txt"),
            Reply::text("DONE"),
        ],
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &[
            "run",
            "--trust-project",
            "--output-format",
            "stream-json",
            "tidy up",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "hello\nworld\n",
        "the formatter did not run on the written file"
    );
    assert!(dir.path().join("keep").is_dir(), "rm -rf ran");
    assert!(
        dir.path().join("ok.txt").exists(),
        "a harmless command was blocked"
    );
    let requests = server.requests();
    let (is_error, text) = result_of(&requests, "b1");
    assert!(is_error, "{text}");
    assert!(text.contains("guard: refusing 'rm -rf keep'"), "{text}");
    assert!(!result_of(&requests, "b2").0);
    assert!(!result_of(&requests, "w1").0);
    // Each hook run is an event, with its duration and outcome.
    let events = hook_events(&out.stdout);
    let blocked = events
        .iter()
        .find(|e| e["hook_event"] == "PreToolUse" && e["outcome"]["kind"] == "blocked")
        .unwrap_or_else(|| panic!("no blocked PreToolUse event in {events:?}"));
    assert_eq!(blocked["agent"], "main");
    assert!(blocked["duration_ms"].is_u64(), "{blocked}");
    assert!(
        blocked["source"]
            .as_str()
            .unwrap()
            .ends_with(".claude/settings.json"),
        "{blocked}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["hook_event"] == "PostToolUse" && e["outcome"]["kind"] == "ok"),
        "{events:?}"
    );
}

#[tokio::test]
async fn subagent_hooks_know_which_subagent_they_serve() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let log = script(
        dir.path(),
        "log.sh",
        "jq -c '{event: .hook_event_name, id: .agent_id, type: .agent_type, transcript: (.agent_transcript_path // .transcript_path), tool: .tool_name}' >> \"$CLAUDE_PROJECT_DIR/hooks.log\"\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {
            "SubagentStart": [entry("", &log, None)],
            "SubagentStop": [entry("", &log, None)],
            "PreToolUse": [entry("Grep", &log, None)],
        }}),
    );
    std::fs::write(dir.path().join("lib.rs"), "// alpha\n").unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tasks([("t1", "explore", "Find alpha")]),
            Reply::text("Survey complete."),
        ],
    );
    server.route(
        Match::FirstUserContains("Find alpha".into()),
        vec![
            Reply::tool_use("g1", "grep", json!({"pattern": "alpha"})),
            Reply::text("alpha is in lib.rs:1"),
        ],
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &["run", "--trust-project", "Survey the code"],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let lines = json_lines(&dir.path().join("hooks.log"));
    let of =
        |event: &str| -> Vec<&Value> { lines.iter().filter(|l| l["event"] == event).collect() };
    let (start, stop, pre) = (of("SubagentStart"), of("SubagentStop"), of("PreToolUse"));
    assert_eq!((start.len(), stop.len(), pre.len()), (1, 1, 1), "{lines:?}");
    let id = start[0]["id"].as_str().unwrap_or_default();
    assert!(!id.is_empty(), "SubagentStart had no agent_id: {lines:?}");
    for line in [start[0], stop[0], pre[0]] {
        assert_eq!(line["id"], id, "{lines:?}");
        assert_eq!(line["type"], "explore", "{lines:?}");
    }
    // The subagent's transcript is where the hook was told.
    let transcript = stop[0]["transcript"].as_str().unwrap_or_default();
    assert!(
        Path::new(transcript).is_file(),
        "SubagentStop's transcript path {transcript:?} is not a file: {lines:?}"
    );
}

#[tokio::test]
async fn a_stop_hook_keeps_the_agent_working_until_a_file_exists() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let check = script(
        dir.path(),
        "check.sh",
        "cat > /dev/null\n[ -f \"$CLAUDE_PROJECT_DIR/done.txt\" ] && exit 0\necho 'done.txt is missing: write it before you stop' >&2\nexit 2\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": check}]}]}}),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text("I think I am finished."),
            Reply::tool_use(
                "w1",
                "write_file",
                json!({"path": "done.txt", "content": "yes\n"}),
            ),
            Reply::text("FINISHED"),
        ],
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &["run", "--trust-project", "finish the job"],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(dir.path().join("done.txt").exists());
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{}", out.stderr);
    // The hook's reason is the agent's next instruction.
    assert!(
        requests[1].last_user_text().contains("done.txt is missing"),
        "{:?}",
        requests[1].messages()
    );
    assert!(out.stdout.contains("FINISHED"), "{}", out.stdout);
}

#[tokio::test]
async fn a_stop_hook_that_never_lets_go_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let never = script(
        dir.path(),
        "never.sh",
        "cat > /dev/null\necho 'not yet' >&2\nexit 2\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": never}]}]}}),
    );
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::Any,
        (0..40)
            .map(|i| Reply::text(&format!("stopping {i}")))
            .collect(),
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &["run", "--trust-project", "loop forever"],
    )
    .await;
    let asked = server.requests().len();
    assert!(
        (2..40).contains(&asked),
        "the Stop hook was not bounded: {asked} requests\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("Stop") && out.stderr.contains("hook"),
        "no clear message about the bound: {}",
        out.stderr
    );
}

#[tokio::test]
async fn json_output_denies_and_rewrites_and_a_hook_allow_does_not_beat_a_deny_rule() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let decide = script(
        dir.path(),
        "decide.sh",
        r#"cmd=$(jq -r '.tool_input.command')
case "$cmd" in
  *forbidden*) echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "forbidden by policy"}}';;
  *rewrite-me*) echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"command": "echo rewritten > out.txt"}}}';;
  *) echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}';;
esac
"#,
    );
    settings(
        dir.path(),
        &json!({
            "permissions": {"deny": ["Bash(touch denied-by-rule:*)"]},
            "hooks": {"PreToolUse": [entry("Bash", &decide, None)]},
        }),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            bash("b1", "touch forbidden"),
            bash("b2", "echo rewrite-me > out.txt"),
            bash("b3", "touch denied-by-rule"),
            Reply::text("DONE"),
        ],
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &["run", "--trust-project", "do things"],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let requests = server.requests();
    let (is_error, text) = result_of(&requests, "b1");
    assert!(is_error && text.contains("forbidden by policy"), "{text}");
    assert!(!dir.path().join("forbidden").exists());
    assert!(!result_of(&requests, "b2").0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "rewritten\n"
    );
    // The hook allowed it; the deny rule of the same settings file still refuses it.
    let (is_error, text) = result_of(&requests, "b3");
    assert!(is_error, "{text}");
    assert!(!dir.path().join("denied-by-rule").exists());
}

#[tokio::test]
async fn a_hanging_hook_is_killed_at_its_timeout_with_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let hang = hanging_hook(dir.path());
    settings(
        dir.path(),
        &json!({"hooks": {"PreToolUse": [entry("Bash", &hang, Some(2))]}}),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![bash("b1", "echo ran > ran.txt"), Reply::text("DONE")],
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &[
            "run",
            "--trust-project",
            "--output-format",
            "stream-json",
            "go",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let (hook, child) = pids_in(&dir.path().join("pids")).await;
    wait_for("the hook and its child to be killed", || {
        gone(hook) && gone(child)
    })
    .await;
    // A timed-out hook is a warning: the call goes on.
    assert!(dir.path().join("ran.txt").exists(), "{}", out.stderr);
    let events = hook_events(&out.stdout);
    assert!(
        events.iter().any(|e| e["outcome"]["kind"] == "timed_out"),
        "{events:?}"
    );
}

#[tokio::test]
async fn ctrl_c_during_a_hook_leaves_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let hang = hanging_hook(dir.path());
    settings(
        dir.path(),
        &json!({"hooks": {"PreToolUse": [entry("Bash", &hang, Some(600))]}}),
    );
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::Any,
        vec![bash("b1", "echo ran > ran.txt"), Reply::text("DONE")],
    );
    let mut cadre = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .current_dir(dir.path())
        .args(["run", "--trust-project", "go"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (hook, child) = pids_in(&dir.path().join("pids")).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(cadre.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = cadre.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = cadre.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
    .expect("cadre did not exit after Ctrl-C");
    assert_eq!(status.code(), Some(130), "{status:?}");
    wait_for("the hook and its child to be gone after Ctrl-C", || {
        gone(hook) && gone(child)
    })
    .await;
    assert!(
        !dir.path().join("ran.txt").exists(),
        "the call ran after Ctrl-C"
    );
}

#[tokio::test]
async fn an_untrusted_projects_hooks_run_only_once_trusted_and_the_users_always_run() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mark = script(
        dir.path(),
        "mark.sh",
        "cat > /dev/null\necho project >> \"$CLAUDE_PROJECT_DIR/marks\"\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": mark}]}]}}),
    );
    // The user's own hook, in their Claude Code settings: it always runs.
    write_file(
        &home.path().join(".claude/settings.json"),
        &json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
            "command": "cat > /dev/null; echo user >> \"$CLAUDE_PROJECT_DIR/marks\""}]}]}})
        .to_string(),
    );
    let server = MockServer::start().await;
    server.route(Match::Any, (0..3).map(|_| Reply::text("ok")).collect());
    // The hooks of one moment run at once: their marks are counted, not ordered.
    let marks = || {
        let text = std::fs::read_to_string(dir.path().join("marks")).unwrap_or_default();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        lines.join(" ")
    };
    let uri = server.uri();
    let run = || cadre_home(dir.path(), home.path(), &uri, &["run", "hello"]);

    // No terminal: the project's hook does not run, and one message says so, names it
    // and how to trust it.
    let out = run().await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(marks(), "user");
    assert_eq!(
        out.stderr.matches("left out of this run").count(),
        1,
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("cadre trust"), "{}", out.stderr);
    assert!(
        out.stderr.contains("hook UserPromptSubmit")
            && out.stderr.contains(".claude/settings.json"),
        "{}",
        out.stderr
    );

    // `cadre trust` names the hook and remembers it.
    let out = cadre_home(dir.path(), home.path(), &server.uri(), &["trust"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("UserPromptSubmit"), "{}", out.stdout);
    assert!(out.stdout.contains("mark.sh"), "{}", out.stdout);
    assert!(home.path().join(".config/cadre/trusted.json").is_file());
    let out = run().await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(marks(), "project user user");
    assert!(!out.stderr.contains("left out"), "{}", out.stderr);

    // Changed hooks are not covered by the old answer: with no terminal to ask, the run is
    // refused rather than run without the project's guards.
    let changed = format!("{mark} --again");
    settings(
        dir.path(),
        &json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": changed}]}]}}),
    );
    let out = run().await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("changed since you trusted it"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("cadre trust"), "{}", out.stderr);
    assert_eq!(marks(), "project user user");
    let out = cadre_home(dir.path(), home.path(), &server.uri(), &["trust", "--list"]).await;
    assert!(out.stdout.contains("changed since"), "{}", out.stdout);

    // Forgotten: not run again.
    let out = cadre_home(
        dir.path(),
        home.path(),
        &server.uri(),
        &["trust", "--revoke"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = run().await;
    assert!(
        out.stderr.contains("left out of this run"),
        "{}",
        out.stderr
    );
    assert_eq!(marks(), "project user user user");
}

#[tokio::test]
async fn a_terminal_is_asked_once_and_the_answer_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mark = script(
        dir.path(),
        "mark.sh",
        "cat > /dev/null\necho ran >> \"$CLAUDE_PROJECT_DIR/marks\"\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": mark}]}]}}),
    );
    // And an MCP server: one question covers all the project supplies.
    write_file(
        &dir.path().join(".mcp.json"),
        &json!({"mcpServers": {"asked": {"command": "sh", "args": ["-c", "touch started; exit 1"]}}})
            .to_string(),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("FIRST"), Reply::text("SECOND")],
    );
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
    cmd.current_dir(dir.path())
        .args(["run", "hello"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("TERM", "dumb")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG");
    tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        p.exp_string("UserPromptSubmit").unwrap();
        p.exp_string("mark.sh").unwrap();
        p.exp_string("MCP server asked: sh -c touch started")
            .unwrap();
        p.exp_string("[y/N]").unwrap();
        p.send_line("y").unwrap();
        p.exp_string("FIRST").unwrap();
        p.exp_eof().unwrap();
    })
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("marks")).unwrap(),
        "ran\n"
    );
    assert!(
        dir.path().join("started").exists(),
        "the trusted server did not start"
    );
    // Remembered: a run without a terminal runs them, unasked.
    let out = cadre_home(dir.path(), home.path(), &server.uri(), &["run", "again"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("left out"), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("marks")).unwrap(),
        "ran\nran\n"
    );
}

#[tokio::test]
async fn config_show_and_doctor_list_every_hook_with_its_origin_and_whether_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    settings(
        dir.path(),
        &json!({"hooks": {"PreToolUse": [entry("Bash", "guard.sh", None)]},
                "permissions": {"ask": ["Bash(git push:*)"], "defaultMode": "dontAsk"}}),
    );
    // cadre's own file, in the same shape.
    std::fs::write(
        dir.path().join("cadre.toml"),
        "[[hooks.PostToolUse]]\nmatcher = \"Edit|Write\"\nhooks = [{ type = \"command\", command = \"fmt.sh\", timeout = 5 }]\n",
    )
    .unwrap();
    write_file(
        &home.path().join(".config/cadre/config.toml"),
        "[[hooks.Stop]]\nhooks = [{ type = \"command\", command = \"notify.sh\" }]\n",
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        "http://127.0.0.1:9",
        &["config", "show"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line_of = |text: &str, command: &str| -> String {
        text.lines()
            .find(|l| l.contains(command))
            .unwrap_or_else(|| panic!("{command} not listed:\n{text}"))
            .to_owned()
    };
    let guard = line_of(&out.stdout, "guard.sh");
    for part in [
        "PreToolUse",
        "Bash",
        ".claude/settings.json",
        "not run until trusted",
    ] {
        assert!(guard.contains(part), "{part}: {guard}");
    }
    let fmt = line_of(&out.stdout, "fmt.sh");
    for part in [
        "PostToolUse",
        "Edit|Write",
        "cadre.toml",
        "not run until trusted",
    ] {
        assert!(fmt.contains(part), "{part}: {fmt}");
    }
    let notify = line_of(&out.stdout, "notify.sh");
    for part in ["Stop", "~/.config/cadre/config.toml", "runs (yours)"] {
        assert!(notify.contains(part), "{part}: {notify}");
    }
    // The ask rule is honoured as a deny rule, and the warning says so.
    assert!(
        out.stderr
            .contains("permissions.ask rule \"Bash(git push:*)\" is applied as a deny rule"),
        "{}",
        out.stderr
    );
    let deny = line_of(&out.stdout, "Bash(git push:*)");
    assert!(deny.starts_with("permissions.deny"), "{deny}");
    // Claude Code's dontAsk is cadre's deny-writes, from that file and line.
    let mode = line_of(&out.stdout, "permissions.mode");
    assert!(
        mode.contains("deny-writes") && mode.contains(".claude/settings.json:"),
        "{mode}"
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        "http://127.0.0.1:9",
        &["config", "show", "--trust-project"],
    )
    .await;
    assert!(
        line_of(&out.stdout, "guard.sh").contains("--trust-project"),
        "{}",
        out.stdout
    );
    // Trusted: doctor says they run.
    let out = cadre_home(dir.path(), home.path(), "http://127.0.0.1:9", &["trust"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = cadre_home(dir.path(), home.path(), "http://127.0.0.1:9", &["doctor"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    for command in ["guard.sh", "fmt.sh"] {
        assert!(
            line_of(&out.stdout, command).contains("runs (project trusted)"),
            "{}",
            out.stdout
        );
    }
    assert!(line_of(&out.stdout, "notify.sh").contains("Stop"));
}

#[tokio::test]
async fn the_engine_refuses_a_run_with_hooks_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    settings(
        dir.path(),
        &json!({"hooks": {"PreToolUse": [entry("Bash", "guard.sh", None)]}}),
    );
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // Nothing listens there: the refusal comes before any connection.
    let args = [
        "run",
        "--engine",
        "restate",
        "--restate-url",
        "http://127.0.0.1:9",
        "say hello",
    ];
    let out = cadre_home(dir.path(), home.path(), &server.uri(), &args).await;
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("the engine cannot honour")
            && out.stderr.contains(".claude/settings.json (PreToolUse)")
            && out.stderr.contains("the workers run no hooks"),
        "{}",
        out.stderr
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn an_agent_files_own_hooks_run_for_its_agents_once_the_project_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // A Claude Code agent file of the project, with hooks in its front matter.
    write_file(
        &dir.path().join(".claude/agents/checker.md"),
        "---\nname: checker\ndescription: Checks things. Use it to check.\ntools: Bash\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - type: command\n          command: cat > /dev/null; echo checker >> \"$CLAUDE_PROJECT_DIR/marks\"\n---\nYou check things.\n",
    );
    let server = MockServer::start().await;
    for _ in 0..2 {
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "checker", "CHILD check")]),
                Reply::text("PARENT-DONE"),
            ],
        );
        server.route(
            Match::FirstUserContains("CHILD check".into()),
            vec![bash("b1", "true"), Reply::text("checked")],
        );
    }
    let marks = || std::fs::read_to_string(dir.path().join("marks")).unwrap_or_default();
    let uri = server.uri();
    let out = cadre_home(dir.path(), home.path(), &uri, &["config", "show"]).await;
    let listed = out
        .stdout
        .lines()
        .find(|l| l.contains("echo checker"))
        .unwrap_or_else(|| panic!("the agent file's hook is not listed:\n{}", out.stdout));
    assert!(listed.contains("checker.md"), "{listed}");
    assert!(listed.contains("not run until trusted"), "{listed}");

    let out = cadre_home(dir.path(), home.path(), &uri, &["run", "PARENT task"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(marks(), "", "an untrusted agent file's hook ran");
    assert!(
        out.stderr.contains("left out of this run") && out.stderr.contains("checker.md"),
        "{}",
        out.stderr
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &uri,
        &["run", "--trust-project", "PARENT task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(marks(), "checker\n");
}

#[tokio::test]
async fn hook_runs_show_on_stderr_a_blocking_one_always_and_every_one_with_verbose() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    settings(
        dir.path(),
        &json!({"hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "cat > /dev/null"}]}],
            "PreToolUse": [entry("Bash", "cat > /dev/null; echo 'no, not that' >&2; exit 2", None)],
        }}),
    );
    let server = MockServer::start().await;
    for _ in 0..2 {
        server.route(Match::Any, vec![bash("b1", "echo hi"), Reply::text("DONE")]);
    }
    let uri = server.uri();
    let hook_lines = |stderr: &str| -> Vec<String> {
        stderr
            .lines()
            .filter(|l| l.starts_with("· main hook "))
            .map(str::to_owned)
            .collect()
    };
    let out = cadre_home(
        dir.path(),
        home.path(),
        &uri,
        &["run", "--trust-project", "go"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = hook_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(
        lines[0].starts_with("· main hook PreToolUse [Bash] cat > /dev/null")
            && lines[0].contains("blocked: no, not that (")
            && lines[0].ends_with(" ms)"),
        "{}",
        lines[0]
    );
    let out = cadre_home(
        dir.path(),
        home.path(),
        &uri,
        &["-v", "run", "--trust-project", "go"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = hook_lines(&out.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("· main hook UserPromptSubmit cat > /dev/null: ok (")),
        "{}",
        out.stderr
    );
    assert_eq!(lines.len(), 2, "{}", out.stderr);
}

/// The requests of the agent whose first message holds `who` and whose last message holds
/// `last`.
fn asked(who: &str, last: &str) -> Match {
    let (who, last) = (who.to_owned(), last.to_owned());
    Match::Custom(std::sync::Arc::new(move |b: &Value| {
        let msgs = b["messages"].as_array().cloned().unwrap_or_default();
        msgs.first().is_some_and(|m| m.to_string().contains(&who))
            && msgs.last().is_some_and(|m| m.to_string().contains(&last))
    }))
}

fn named(id: &str, name: &str) -> (String, Value) {
    (
        id.to_owned(),
        json!({"description": format!("Job {name}"), "prompt": format!("Job {name}"),
               "subagent_type": "code", "name": name}),
    )
}

#[tokio::test]
async fn every_subagent_start_has_one_stop_whatever_ends_it_ctrl_c_included() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let log = script(
        dir.path(),
        "log.sh",
        "jq -c '{event: .hook_event_name, id: .agent_id}' >> \"$CLAUDE_PROJECT_DIR/hooks.log\"\n",
    );
    settings(
        dir.path(),
        &json!({"hooks": {
            "SubagentStart": [entry("", &log, None)],
            "SubagentStop": [entry("", &log, None)],
        }}),
    );
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // The lead starts three members: alpha answers, beta fails, gamma answers. It wakes
    // gamma on long work and closes it mid-request (cancelled), closes alpha as it waits,
    // then starts delta, whose request is still in flight at Ctrl-C.
    let calls = [
        named("t1", "alpha"),
        named("t2", "beta"),
        named("t3", "gamma"),
    ];
    server.route(
        asked("LEAD", "LEAD"),
        vec![Reply::tool_uses(
            calls
                .iter()
                .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                .collect(),
        )],
    );
    server.route(
        asked("LEAD", "gamma ready"),
        vec![Reply::tool_use(
            "s1",
            "SendMessage",
            json!({"to": "gamma", "message": "work long"}),
        )],
    );
    server.route(
        asked("LEAD", "Sent to gamma"),
        vec![Reply::tool_use(
            "c1",
            "CloseMember",
            json!({"name": "gamma"}),
        )],
    );
    server.route(
        asked("LEAD", "Closed: gamma"),
        vec![Reply::tool_use(
            "c2",
            "CloseMember",
            json!({"name": "alpha"}),
        )],
    );
    server.route(
        asked("LEAD", "Closed: alpha"),
        vec![Reply::tasks([("t4", "code", "Job delta")])],
    );
    server.route(asked("LEAD", ""), vec![Reply::text("lead waits"); 10]);
    server.route(
        asked("Job alpha", "Job alpha"),
        vec![Reply::text("alpha ready")],
    );
    server.route(
        asked("Job beta", "Job beta"),
        vec![Reply::error_status(
            400,
            "invalid_request_error",
            "beta breaks",
        )],
    );
    server.route(
        asked("Job gamma", "Job gamma"),
        vec![Reply::text("gamma ready")],
    );
    let gamma_working = server.gate(asked("Job gamma", "work long"));
    server.route(asked("Job gamma", "work long"), vec![Reply::text("never")]);
    let delta_working = server.gate(asked("Job delta", "Job delta"));
    server.route(asked("Job delta", "Job delta"), vec![Reply::text("never")]);

    let mut cadre = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .current_dir(dir.path())
        .args(["run", "--team", "--trust-project", "LEAD task"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Delta's request is held until Ctrl-C, so waiting for it cannot miss it; it comes
    // after gamma's close. (Whether gamma's woken request got out before its close is a
    // race the test does not settle: a held one is dropped by the close.)
    assert!(
        delta_working.wait_for(1, Duration::from_secs(60)).await,
        "delta never asked"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(cadre.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = cadre.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = cadre.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
    .expect("cadre did not exit after Ctrl-C");
    assert_eq!(status.code(), Some(130), "{status:?}");
    gamma_working.open();
    delta_working.open();

    let lines = json_lines(&dir.path().join("hooks.log"));
    let mut pairs: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
    for line in &lines {
        let id = line["id"].as_str().unwrap_or_default().to_owned();
        let pair = pairs.entry(id).or_default();
        match line["event"].as_str() {
            Some("SubagentStart") => pair.0 += 1,
            Some("SubagentStop") => pair.1 += 1,
            other => panic!("{other:?} in {lines:?}"),
        }
    }
    let ids: Vec<&String> = pairs.keys().collect();
    assert_eq!(ids.len(), 4, "alpha, beta, gamma and delta: {lines:?}");
    for (id, pair) in &pairs {
        assert_eq!(*pair, (1, 1), "{id}: {lines:?}");
    }
}
