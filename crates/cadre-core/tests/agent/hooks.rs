use super::*;
use cadre_core::JournaledRun;
use cadre_core::{AgentSpec, HookEvent, HookOutcome, Hooks, Mode, PermissionMode, Permissions};
use cadre_testkit::hooks::{gone, require_jq, script};
use std::path::Path;

/// The run's hooks, from Claude Code's `hooks` object.
fn hooks(value: Value) -> Hooks {
    let (hooks, warnings) = Hooks::from_json(&value, ".claude/settings.json");
    assert!(warnings.is_empty(), "{warnings:?}");
    hooks
}

/// An orchestrator on the mock in `dir` with `hooks`, collecting its events.
fn with_hooks(
    server: &MockServer,
    dir: &Path,
    hooks: Hooks,
) -> (cadre_core::OrchestratorBuilder, Arc<Mutex<Vec<Event>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let builder = mock_builder(server, dir)
        .hooks(hooks)
        .on_event(move |e| sink.lock().unwrap().push(e));
    (builder, seen)
}

/// The hook events among `events`: (event, outcome).
fn hook_runs(events: &[Event]) -> Vec<(HookEvent, HookOutcome)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Hook {
                hook_event,
                outcome,
                ..
            } => Some((*hook_event, outcome.clone())),
            _ => None,
        })
        .collect()
}

/// The text of tool_result `i` of request `n`, and whether it is an error.
fn result_of(server: &MockServer, n: usize, i: usize) -> (String, bool) {
    let r = &tool_results(server, n)[i];
    (
        cadre_testkit::content_text(r.get("content")),
        r["is_error"].as_bool().unwrap_or(false),
    )
}

#[tokio::test]
async fn a_formatter_and_a_guard_written_for_claude_code_work_unchanged() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let format = script(
        dir.path(),
        "format.sh",
        r#"f=$(jq -r '.tool_input.file_path'); printf '// formatted\n' >> "$f""#,
    );
    let guard = script(
        dir.path(),
        "guard.sh",
        r#"cmd=$(jq -r '.tool_input.command')
case "$cmd" in *"rm -rf"*) echo "refused: rm -rf is not allowed here" >&2; exit 2;; esac
exit 0"#,
    );
    let hooks = hooks(json!({
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": format}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": guard, "timeout": 30}]}]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_use(
                "w1",
                "write_file",
                json!({"path": "src/a.rs", "content": "fn a() {}\n"}),
            ),
            Reply::tool_use(
                "b1",
                "bash",
                json!({"command": "rm -rf src && touch wiped"}),
            ),
            Reply::tool_use("b2", "bash", json!({"command": "touch fine"})),
            Reply::text("done"),
        ],
    );
    let (builder, seen) = with_hooks(&server, dir.path(), hooks);
    let o = builder.build().unwrap();
    let (outcome, _) = o.run("main", "write a and clean up").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    // The formatter ran on the file the model wrote, found by Claude Code's field name.
    let written = std::fs::read_to_string(dir.path().join("src/a.rs")).unwrap();
    assert_eq!(written, "fn a() {}\n// formatted\n");
    // The guard blocked the command: it did not run, and its stderr reached the model.
    assert!(!dir.path().join("wiped").exists());
    assert!(dir.path().join("src").exists());
    let (text, is_error) = result_of(&server, 2, 0);
    assert!(is_error, "{text}");
    assert!(
        text.contains("refused: rm -rf is not allowed here"),
        "{text}"
    );
    // A harmless command passes the guard.
    assert!(dir.path().join("fine").exists());
    let runs = hook_runs(&seen.lock().unwrap());
    assert!(runs.contains(&(
        HookEvent::PreToolUse,
        HookOutcome::Blocked {
            reason: "refused: rm -rf is not allowed here".into()
        }
    )));
    // The guard ran for the two bash calls only, the formatter for the write only.
    let count = |e| runs.iter().filter(|(h, _)| *h == e).count();
    assert_eq!(count(HookEvent::PreToolUse), 2, "{runs:?}");
    assert_eq!(count(HookEvent::PostToolUse), 1, "{runs:?}");
    server.assert_clean();
}

#[tokio::test]
async fn json_output_denies_a_call_and_changes_another_s_input() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let rewrite = script(
        dir.path(),
        "rewrite.sh",
        r#"cat > /dev/null
echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"content": "rewritten by the hook"}, "additionalContext": "the hook rewrote the content"}}'"#,
    );
    let deny = script(
        dir.path(),
        "deny.sh",
        r#"cat > /dev/null
echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no shell today"}}'"#,
    );
    let hooks = hooks(json!({
        "PreToolUse": [
            {"matcher": "Write", "hooks": [{"type": "command", "command": rewrite}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": deny}]}
        ]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                (
                    "w1",
                    "write_file",
                    json!({"path": "note.txt", "content": "the model's text\n"}),
                ),
                ("b1", "bash", json!({"command": "touch ran"})),
            ]),
            Reply::text("done"),
        ],
    );
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder
        .build()
        .unwrap()
        .run("main", "note it")
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    let note = std::fs::read_to_string(dir.path().join("note.txt")).unwrap();
    assert_eq!(note, "rewritten by the hook");
    let (text, is_error) = result_of(&server, 1, 0);
    assert!(!is_error, "{text}");
    assert!(text.contains("the hook rewrote the content"), "{text}");
    let (text, is_error) = result_of(&server, 1, 1);
    assert!(is_error);
    assert!(text.contains("no shell today"), "{text}");
    assert!(!dir.path().join("ran").exists());
}

#[tokio::test]
async fn a_hook_s_allow_skips_the_question_but_not_a_deny_rule() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let allow = script(
        dir.path(),
        "allow.sh",
        r#"cat > /dev/null
echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}'"#,
    );
    let hooks = hooks(json!({
        "PreToolUse": [{"hooks": [{"type": "command", "command": allow}]}]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                ("b1", "bash", json!({"command": "touch allowed"})),
                ("b2", "bash", json!({"command": "rm -f allowed-too"})),
            ]),
            Reply::text("done"),
        ],
    );
    // Headless `ask`: without the hook, both calls would be refused (no one to ask).
    let mut permissions = Permissions::new(PermissionMode::Ask);
    permissions.deny("Bash(rm:*)", "test").unwrap();
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder
        .permissions(permissions)
        .build()
        .unwrap()
        .run("main", "go")
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert!(
        dir.path().join("allowed").exists(),
        "the hook's allow skips the question"
    );
    let (text, is_error) = result_of(&server, 1, 1);
    assert!(is_error, "{text}");
    assert!(text.contains("denied by rule Bash(rm:*)"), "{text}");
}

#[tokio::test]
async fn a_stop_hook_keeps_the_agent_working_until_a_file_exists() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let check = script(
        dir.path(),
        "tests-pass.sh",
        r#"jq -r '.stop_hook_active' >> "$CLAUDE_PROJECT_DIR/stop.log"
test -f "$CLAUDE_PROJECT_DIR/done.txt" && exit 0
echo "done.txt is missing: write it before you stop" >&2
exit 2"#,
    );
    let hooks = hooks(json!({"Stop": [{"hooks": [{"type": "command", "command": check}]}]}));
    server.route(
        Match::Any,
        vec![
            Reply::text("all finished"),
            Reply::tool_use(
                "w1",
                "write_file",
                json!({"path": "done.txt", "content": "ok"}),
            ),
            Reply::text("now really finished"),
        ],
    );
    let (builder, seen) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder.build().unwrap().run("main", "work").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(outcome.text, "now really finished");
    // The hook's reason was the agent's next message.
    let second = server.requests()[1].messages().last().unwrap().to_string();
    assert!(second.contains("done.txt is missing"), "{second}");
    let log = std::fs::read_to_string(dir.path().join("stop.log")).unwrap();
    assert_eq!(log, "false\ntrue\n");
    let runs = hook_runs(&seen.lock().unwrap());
    let stops: Vec<_> = runs.iter().filter(|(e, _)| *e == HookEvent::Stop).collect();
    assert_eq!(stops.len(), 2, "{runs:?}");
    server.assert_clean();
}

#[tokio::test]
async fn a_stop_hook_that_always_blocks_is_stopped_by_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let never = script(dir.path(), "never.sh", "echo 'not yet' >&2; exit 2");
    let hooks = hooks(json!({"Stop": [{"hooks": [{"type": "command", "command": never}]}]}));
    let n = cadre_core::MAX_STOP_BLOCKS as usize + 1;
    server.route(Match::Any, vec![Reply::text("finished"); n]);
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder.build().unwrap().run("main", "work").await.unwrap();
    match &outcome.stop {
        StopKind::Hook(why) => {
            assert!(why.contains("5 times in a row"), "{why}");
            assert!(why.contains("not yet"), "{why}");
        }
        other => panic!("expected a hook stop, got {other:?}"),
    }
    assert_eq!(server.requests().len(), n);
    server.assert_clean();
}

#[tokio::test]
async fn subagent_hooks_know_which_agent_they_serve() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let log = script(
        dir.path(),
        "log.sh",
        r#"jq -c '{e: .hook_event_name, id: .agent_id, t: .agent_type, p: .parent_agent_id, tool: .tool_name, tp: .agent_transcript_path}' >> "$CLAUDE_PROJECT_DIR/agents.log""#,
    );
    let own = script(
        dir.path(),
        "own.sh",
        r#"jq -c '{own: .hook_event_name, id: .agent_id}' >> "$CLAUDE_PROJECT_DIR/agents.log""#,
    );
    let entry = |matcher: Option<&str>| {
        let mut e = json!({"hooks": [{"type": "command", "command": log.clone()}]});
        if let Some(m) = matcher {
            e["matcher"] = m.into();
        }
        e
    };
    let hooks = hooks(json!({
        "SubagentStart": [entry(Some("checker"))],
        "SubagentStop": [entry(None)],
        "PreToolUse": [entry(Some("Glob|Task"))]
    }));
    // A type of its own, whose `Stop` hook runs when its subagent stops.
    let (own_hooks, _) = Hooks::from_json(
        &json!({"Stop": [{"hooks": [{"command": own}]}]}),
        "agent checker",
    );
    let checker = AgentSpec::builder("checker")
        .description("Checks things.")
        .mode(Mode::Subagent)
        .tools(["list_files"])
        .prompt("You check.")
        .hooks(own_hooks)
        .build();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "checker", "Check the code")]),
            Reply::text("checked"),
        ],
    );
    server.route(
        Match::FirstUserContains("Check the code".into()),
        vec![
            Reply::tool_use("g1", "list_files", json!({})),
            Reply::text("all good"),
        ],
    );
    let runs = dir.path().join("runs");
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let o = builder.agent(checker).runs_dir(&runs).build().unwrap();
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    let lines: Vec<Value> = std::fs::read_to_string(dir.path().join("agents.log"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let sub = "main/checker#1";
    let of = |event: &str| -> Vec<&Value> { lines.iter().filter(|l| l["e"] == event).collect() };
    let start = of("SubagentStart");
    assert_eq!(start.len(), 1, "{lines:?}");
    assert_eq!(start[0]["id"], sub);
    assert_eq!(start[0]["t"], "checker");
    assert_eq!(start[0]["p"], "main");
    let stop = of("SubagentStop");
    assert_eq!(stop.len(), 1, "{lines:?}");
    assert_eq!(stop[0]["id"], sub);
    let transcript = stop[0]["tp"].as_str().unwrap();
    let run_dir = runs.join(summary.run_id.unwrap());
    assert!(Path::new(transcript).starts_with(&run_dir), "{transcript}");
    assert!(Path::new(transcript).is_file(), "{transcript}");
    // Each hook run is a line of the transcript of the agent it ran for.
    let lines_of = |file: &str| -> Vec<cadre_core::TranscriptLine<'static>> {
        std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter_map(cadre_core::TranscriptLine::parse)
            .collect()
    };
    let hook_lines: Vec<cadre_core::HookRecord> = lines_of(transcript)
        .into_iter()
        .filter_map(|l| match l.record {
            cadre_core::TranscriptRecord::Hook(h) => Some(h),
            _ => None,
        })
        .collect();
    let kinds: Vec<_> = hook_lines.iter().map(|h| h.hook_event.clone()).collect();
    use cadre_core::Recorded::Known;
    assert!(
        kinds.contains(&Known(HookEvent::SubagentStart)),
        "{kinds:?}"
    );
    assert!(kinds.contains(&Known(HookEvent::PreToolUse)), "{kinds:?}");
    // The subagent's tool call is told the subagent; the parent's Task call is told no id.
    let pre = of("PreToolUse");
    assert_eq!(pre.len(), 2, "{lines:?}");
    let glob = pre.iter().find(|l| l["tool"] == "Glob").unwrap();
    assert_eq!(glob["id"], sub);
    assert_eq!(glob["t"], "checker");
    let task = pre.iter().find(|l| l["tool"] == "Task").unwrap();
    assert!(task["id"].is_null(), "{task}");
    assert_eq!(task["t"], "main");
    // The type's own Stop hook ran as its subagent's SubagentStop, for it alone.
    let own: Vec<&Value> = lines.iter().filter(|l| l.get("own").is_some()).collect();
    assert_eq!(own.len(), 1, "{lines:?}");
    assert_eq!(own[0]["own"], "SubagentStop");
    assert_eq!(own[0]["id"], sub);
}

/// Fails unless the process whose pid the hook wrote to `file` is gone within 10 s (given a
/// moment to be reaped); `after` says after what.
async fn assert_gone(file: &Path, after: &str) {
    let pid: i32 = std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gone(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone(pid), "the hook's child {pid} outlived {after}");
}

#[tokio::test]
async fn a_hanging_hook_is_killed_at_its_timeout_with_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let hang = script(
        dir.path(),
        "hang.sh",
        r#"sleep 300 &
echo $! > "$CLAUDE_PROJECT_DIR/child.pid"
wait"#,
    );
    let hooks = hooks(json!({
        "PreToolUse": [{"hooks": [{"type": "command", "command": hang, "timeout": 1}]}]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("b1", "bash", json!({"command": "touch after"})),
            Reply::text("done"),
        ],
    );
    let (builder, seen) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder.build().unwrap().run("main", "go").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    // A hook that times out is a warning: the call still ran.
    assert!(dir.path().join("after").exists());
    let runs = hook_runs(&seen.lock().unwrap());
    assert_eq!(
        runs,
        [(HookEvent::PreToolUse, HookOutcome::TimedOut { secs: 1 })]
    );
    // The child it started went with it.
    assert_gone(&dir.path().join("child.pid"), "it").await;
}

#[tokio::test]
async fn cancelling_the_run_kills_a_running_hook_and_its_children() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let hang = script(
        dir.path(),
        "hang.sh",
        // Written whole, then moved: the watcher below must never read a half-written pid.
        r#"sleep 300 &
echo $! > "$CLAUDE_PROJECT_DIR/child.tmp"
mv "$CLAUDE_PROJECT_DIR/child.tmp" "$CLAUDE_PROJECT_DIR/child.pid"
wait"#,
    );
    let end = script(
        dir.path(),
        "end.sh",
        r#"jq -r '.reason' > "$CLAUDE_PROJECT_DIR/ended""#,
    );
    let hooks = hooks(json!({
        "PreToolUse": [{"hooks": [{"command": hang}]}],
        "SessionEnd": [{"hooks": [{"command": end}]}]
    }));
    server.route(
        Match::Any,
        vec![Reply::tool_use(
            "b1",
            "bash",
            json!({"command": "touch after"}),
        )],
    );
    let (builder, seen) = with_hooks(&server, dir.path(), hooks);
    let o = builder.build().unwrap();
    let cancel = o.cancel_token();
    let pid_file = dir.path().join("child.pid");
    let watcher = tokio::spawn(async move {
        while !pid_file.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    });
    let (outcome, _) = o.run("main", "go").await.unwrap();
    watcher.await.unwrap();
    assert_eq!(outcome.stop, StopKind::Cancelled);
    assert!(!dir.path().join("after").exists());
    let runs = hook_runs(&seen.lock().unwrap());
    assert_eq!(runs[0], (HookEvent::PreToolUse, HookOutcome::Cancelled));
    // The session's end is still told, after the cancel.
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1].0, HookEvent::SessionEnd);
    let ended = std::fs::read_to_string(dir.path().join("ended")).unwrap();
    assert_eq!(ended, "prompt_input_exit\n");
    assert_gone(&dir.path().join("child.pid"), "the cancel").await;
}

#[tokio::test]
async fn a_resumed_run_does_not_run_a_journaled_hook_decision_again() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let rewrite = script(
        dir.path(),
        "rewrite.sh",
        r#"echo run >> "$CLAUDE_PROJECT_DIR/hook.log"
jq -c '{hookSpecificOutput: {hookEventName: "PreToolUse", updatedInput: {content: ("hooked " + .tool_input.content)}}}'"#,
    );
    let hooks = hooks(json!({
        "PreToolUse": [{"matcher": "Write", "hooks": [{"command": rewrite}]}]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_use(
                "w1",
                "write_file",
                json!({"path": "out.txt", "content": "one"}),
            ),
            Reply::text("done"),
            Reply::text("done again"),
        ],
    );
    let runs = dir.path().join("runs");
    let (builder, _) = with_hooks(&server, dir.path(), hooks.clone());
    let o = builder.runs_dir(&runs).build().unwrap();
    let (_, summary) = o.run("main", "write it").await.unwrap();
    let run_dir = runs.join(summary.run_id.unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "hooked one"
    );
    // As if cadre were killed right after journaling the hook's decision.
    let journal = run_dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let cut = text
        .lines()
        .position(|l| l.contains("\"step\":\"hooked\""))
        .expect("the hook's decision is journaled");
    let kept: Vec<&str> = text.lines().take(cut + 1).collect();
    std::fs::write(&journal, kept.join("\n") + "\n").unwrap();
    std::fs::remove_file(dir.path().join("out.txt")).unwrap();
    // The hook would now give another input: a resume must not ask it again.
    std::fs::write(dir.path().join("hook.log"), "").unwrap();

    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let o = builder.runs_dir(&runs).build().unwrap();
    let run = JournaledRun::open(&run_dir).unwrap().unwrap();
    let (outcome, _) = o.resume(run, None).await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(outcome.text, "done again");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "hooked one",
        "the call ran with the journaled input"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hook.log")).unwrap(),
        "",
        "the hook ran again"
    );
}

#[tokio::test]
async fn prompt_hooks_add_context_and_can_refuse_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let context = script(
        dir.path(),
        "context.sh",
        "cat > /dev/null; echo 'the build is green'",
    );
    let hooks_ok = hooks(json!({
        "SessionStart": [{"matcher": "startup", "hooks": [{"command": context}]}]
    }));
    server.route(Match::Any, vec![Reply::text("hello")]);
    let (builder, _) = with_hooks(&server, dir.path(), hooks_ok);
    let (outcome, _) = builder.build().unwrap().run("main", "hi").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    let first = server.requests()[0].messages()[0].to_string();
    assert!(first.contains("the build is green"), "{first}");

    let refuse = script(
        dir.path(),
        "refuse.sh",
        "cat > /dev/null; echo 'no secrets in prompts' >&2; exit 2",
    );
    let hooks_no = hooks(json!({"UserPromptSubmit": [{"hooks": [{"command": refuse}]}]}));
    let (builder, _) = with_hooks(&server, dir.path(), hooks_no);
    let (outcome, _) = builder
        .build()
        .unwrap()
        .run("main", "my password is")
        .await
        .unwrap();
    match &outcome.stop {
        StopKind::Hook(why) => assert!(why.contains("no secrets in prompts"), "{why}"),
        other => panic!("expected the prompt refused, got {other:?}"),
    }
    // The refused prompt was never sent.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_follow_up_prompt_goes_through_its_hooks_and_a_refused_one_is_dropped() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let check = script(
        dir.path(),
        "prompt.sh",
        r#"p=$(jq -r '.prompt')
case "$p" in *password*) echo "no passwords in prompts" >&2; exit 2;; esac
echo "context for: $p""#,
    );
    let hooks = hooks(json!({"UserPromptSubmit": [{"hooks": [{"command": check}]}]}));
    server.route(
        Match::Any,
        vec![Reply::text("first answer"), Reply::text("third answer")],
    );
    let runs = dir.path().join("runs");
    let (builder, _) = with_hooks(&server, dir.path(), hooks.clone());
    let o = builder.runs_dir(&runs).build().unwrap();
    let (_, summary) = o.run("main", "first question").await.unwrap();
    let run_dir = runs.join(summary.run_id.unwrap());
    let first = server.requests()[0].messages()[0].to_string();
    assert!(first.contains("context for: first question"), "{first}");

    let again = |text: &'static str| {
        let (builder, _) = with_hooks(&server, dir.path(), hooks.clone());
        let o = builder.runs_dir(&runs).build().unwrap();
        let run = JournaledRun::open(&run_dir).unwrap().unwrap();
        async move { o.resume(run, Some(text)).await.unwrap().0 }
    };
    let refused = again("my password is hunter2").await;
    match &refused.stop {
        StopKind::Hook(why) => assert!(why.contains("no passwords in prompts"), "{why}"),
        other => panic!("expected the follow-up refused, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1, "the refused prompt was sent");
    let third = again("third question").await;
    assert_eq!(third.stop, StopKind::Done);
    let sent = server.requests()[1].body["messages"].to_string();
    assert!(sent.contains("context for: third question"), "{sent}");
    assert!(!sent.contains("hunter2"), "{sent}");
}

#[tokio::test]
async fn team_task_hooks_can_refuse_a_task() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let created = script(
        dir.path(),
        "created.sh",
        r#"s=$(jq -r '.task_subject')
case "$s" in *friday*) echo "no deploys on friday" >&2; exit 2;; esac
exit 0"#,
    );
    let completed = script(
        dir.path(),
        "completed.sh",
        r#"jq -r '.task_id' >> "$CLAUDE_PROJECT_DIR/completed.log"; echo "run the tests first" >&2; exit 2"#,
    );
    let hooks = hooks(json!({
        "TaskCreated": [{"hooks": [{"command": created}]}],
        "TaskCompleted": [{"hooks": [{"command": completed}]}]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                ("c1", "TaskCreate", json!({"subject": "deploy on friday"})),
                ("c2", "TaskCreate", json!({"subject": "write tests"})),
            ]),
            Reply::tool_use(
                "u1",
                "TaskUpdate",
                json!({"task_id": 1, "status": "completed"}),
            ),
            Reply::text("lead done"),
        ],
    );
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let o = builder
        .team(cadre_core::TeamLimits::default())
        .build()
        .unwrap();
    let (outcome, _) = o.run("main", "plan the week").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    let (text, is_error) = result_of(&server, 1, 0);
    assert!(is_error, "{text}");
    assert!(text.contains("no deploys on friday"), "{text}");
    let (text, is_error) = result_of(&server, 1, 1);
    assert!(!is_error, "{text}");
    let (text, is_error) = result_of(&server, 2, 0);
    assert!(is_error, "{text}");
    assert!(text.contains("run the tests first"), "{text}");
    let log = std::fs::read_to_string(dir.path().join("completed.log")).unwrap();
    assert_eq!(log, "1\n");
}

#[tokio::test]
async fn a_hook_s_ask_is_refused_where_no_one_can_be_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let ask = script(
        dir.path(),
        "ask.sh",
        r#"cat > /dev/null
echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "touches the disk"}}'"#,
    );
    let hooks = hooks(json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": ask}]}]}));
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("b1", "bash", json!({"command": "touch asked"})),
            Reply::text("done"),
        ],
    );
    // Mode auto, no rules: without the hook the call would simply run.
    let (builder, seen) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder.build().unwrap().run("main", "go").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert!(!dir.path().join("asked").exists());
    let (text, is_error) = result_of(&server, 1, 0);
    assert!(is_error, "{text}");
    assert!(text.contains("no terminal to ask"), "{text}");
    let runs = hook_runs(&seen.lock().unwrap());
    assert_eq!(
        runs,
        [(
            HookEvent::PreToolUse,
            HookOutcome::Asked {
                reason: Some("touches the disk".into())
            }
        )]
    );
}

#[tokio::test]
async fn a_pre_compact_hook_runs_before_a_compaction_a_person_asked_for() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let log = script(
        dir.path(),
        "compact.sh",
        r#"jq -c '{e: .hook_event_name, trigger: .trigger}' >> "$CLAUDE_PROJECT_DIR/compact.log""#,
    );
    let hooks = hooks(json!({
        "PreCompact": [{"matcher": "manual", "hooks": [{"command": log}]}]
    }));
    server.route(Match::Any, vec![Reply::text("hello")]);
    let runs = dir.path().join("runs");
    let (builder, _) = with_hooks(&server, dir.path(), hooks.clone());
    let (_, summary) = builder
        .runs_dir(&runs)
        .build()
        .unwrap()
        .run("main", "hi")
        .await
        .unwrap();
    assert!(!dir.path().join("compact.log").exists());
    let run_dir = runs.join(summary.run_id.unwrap());
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let o = builder.runs_dir(&runs).build().unwrap();
    o.compact(JournaledRun::open(&run_dir).unwrap().unwrap())
        .await
        .unwrap();
    let log = std::fs::read_to_string(dir.path().join("compact.log")).unwrap();
    assert_eq!(log, "{\"e\":\"PreCompact\",\"trigger\":\"manual\"}\n");
}

#[test]
fn a_yaml_agent_type_s_hooks_load_and_what_cannot_run_refuses_the_file_at_its_place() {
    let valid = "name: tester\ndescription: Tests.\nprompt: You test.\nhooks:\n  PostToolUse:\n    - matcher: Edit|Write\n      hooks:\n        - type: command\n          command: cargo fmt\n          timeout: 30\n";
    let file = Path::new("agents/tester.yaml");
    let (spec, problems) = AgentSpec::parse_yaml(file, valid);
    assert!(problems.is_empty(), "{problems:?}");
    let spec = spec.unwrap();
    let hooks = spec.hooks.all();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].event, HookEvent::PostToolUse);
    assert_eq!(hooks[0].matcher.as_deref(), Some("Edit|Write"));
    assert_eq!(hooks[0].timeout_secs, 30);
    assert_eq!(hooks[0].source, "agents/tester.yaml");
    // A guard that cannot load fails closed: an error (the file is refused), at the event.
    let (_, problems) = AgentSpec::parse_yaml(file, &format!("{valid}  Whenever: []\n"));
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(
        shown[0].starts_with(
            "agents/tester.yaml:11:3: error: a hook entry cannot load: unknown hook event `Whenever`"
        ),
        "{shown:?}"
    );
}

#[tokio::test]
async fn task_hooks_get_the_real_task_id_and_only_for_changes_the_list_makes() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let log = script(
        dir.path(),
        "log.sh",
        r#"jq -c '[.hook_event_name, .task_id]' >> "$CLAUDE_PROJECT_DIR/tasks.log""#,
    );
    let hooks = hooks(json!({
        "TaskCreated": [{"hooks": [{"command": log}]}],
        "TaskCompleted": [{"hooks": [{"command": log}]}]
    }));
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("c1", "TaskCreate", json!({"subject": "first"})),
            Reply::tool_use(
                "c2",
                "TaskCreate",
                json!({"subject": "second", "blocked_by": [1]}),
            ),
            // Refused: #2 is blocked by #1, so no TaskCompleted for it.
            Reply::tool_use(
                "u1",
                "TaskUpdate",
                json!({"task_id": 2, "status": "completed"}),
            ),
            Reply::tool_use(
                "u2",
                "TaskUpdate",
                json!({"task_id": "1", "status": "completed"}),
            ),
            Reply::text("lead done"),
        ],
    );
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let o = builder
        .team(cadre_core::TeamLimits::default())
        .build()
        .unwrap();
    let (outcome, _) = o.run("main", "plan").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    let (text, is_error) = result_of(&server, 3, 0);
    assert!(is_error && text.contains("blocked"), "{text}");
    let log = std::fs::read_to_string(dir.path().join("tasks.log")).unwrap();
    assert_eq!(
        log,
        "[\"TaskCreated\",\"1\"]\n[\"TaskCreated\",\"2\"]\n[\"TaskCompleted\",\"1\"]\n"
    );
}

#[tokio::test]
async fn an_accepted_answer_does_not_outlive_a_stop_hook_that_keeps_the_agent_going() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let flag = dir.path().join("checked");
    let once = script(
        dir.path(),
        "once.sh",
        &format!(
            "test -f '{0}' && exit 0; touch '{0}'; echo 'check it again' >&2; exit 2",
            flag.display()
        ),
    );
    let hooks = hooks(json!({"SubagentStop": [{"hooks": [{"command": once}]}]}));
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "count", "prompt": "Count it", "subagent_type": "explore",
                       "output_schema": {"type": "object", "properties": {"count": {"type": "integer"}},
                                         "required": ["count"]}}),
            ),
            Reply::text("parent done"),
        ],
    );
    // A valid answer, kept going by the hook, and then a refusal: the answer given up on
    // is not the subagent's result.
    server.route(
        Match::FirstUserContains("Count it".into()),
        vec![
            Reply::text("{\"count\": 7}"),
            Reply::text("on second thought, no").stop_reason("refusal"),
        ],
    );
    let (builder, _) = with_hooks(&server, dir.path(), hooks);
    let (outcome, _) = builder
        .build()
        .unwrap()
        .run("main", "PARENT")
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    let last = server.requests().len() - 1;
    let (text, is_error) = result_of(&server, last, 0);
    assert!(is_error, "{text}");
    assert!(text.contains("on second thought"), "{text}");
    assert!(!text.contains("\"count\": 7"), "{text}");
}

#[tokio::test]
async fn a_task_created_hook_run_again_on_resume_is_told_the_id_the_task_got() {
    require_jq();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let log = script(
        dir.path(),
        "log.sh",
        r#"jq -c '[.hook_event_name, .task_id]' >> "$CLAUDE_PROJECT_DIR/tasks.log""#,
    );
    let hooks = hooks(json!({"TaskCreated": [{"hooks": [{"command": log}]}]}));
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("c1", "TaskCreate", json!({"subject": "first"})),
            Reply::text("lead done"),
            Reply::text("lead done again"),
        ],
    );
    let runs = dir.path().join("runs");
    let build = || {
        let (builder, _) = with_hooks(&server, dir.path(), hooks.clone());
        builder
            .runs_dir(&runs)
            .team(cadre_core::TeamLimits::default())
            .build()
            .unwrap()
    };
    let (_, summary) = build().run("main", "plan").await.unwrap();
    let run_dir = runs.join(summary.run_id.unwrap());
    // Killed once the task was made, before the call's result was journaled: the resumed
    // run makes the call again, which finds the task it made.
    let journal = run_dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let made = lines
        .iter()
        .position(|l| l.contains("\"step\":\"team\"") && l.contains("\"subject\":\"first\""))
        .expect("the task's creation is journaled");
    std::fs::write(&journal, lines[..=made].join("\n") + "\n").unwrap();
    std::fs::remove_file(run_dir.join("summary.json")).ok();
    let run = JournaledRun::open(&run_dir).unwrap().unwrap();
    let (outcome, _) = build().resume(run, None).await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    let log = std::fs::read_to_string(dir.path().join("tasks.log")).unwrap();
    assert_eq!(
        log, "[\"TaskCreated\",\"1\"]\n[\"TaskCreated\",\"1\"]\n",
        "{lines:#?}"
    );
}
