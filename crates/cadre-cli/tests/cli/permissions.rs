use super::*;

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
        p.send("x").unwrap();
        p.flush().unwrap();
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
    // Only what the mode allows is offered: no tool it would refuse whatever the call.
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["write_file", "edit_file"] {
        assert!(!offered.contains(&tool), "{tool} offered: {offered:?}");
    }
    for tool in ["read_file", "list_files", "grep"] {
        assert!(offered.contains(&tool), "{tool} not offered: {offered:?}");
    }
    // A model that calls them anyway is refused.
    for id in ["w1", "e1"] {
        let (is_error, text) = result_of(&requests, id);
        assert!(is_error, "{id}: {text}");
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
