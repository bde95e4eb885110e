use super::sessions::{journal, kill, run_with_a_sleeper, spawn_cadre};
use super::*;
use cadre_testkit::prereq;

/// The run folder of the one run in `dir`.
fn only_run(dir: &Path) -> PathBuf {
    let runs: Vec<_> = std::fs::read_dir(dir.join(".cadre/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}
/// With `.cadre/runs` on a file system that fills up mid-run, the run stops at once with
/// exit 4 naming the journal, which ends on its last whole step; once there is room again,
/// `cadre resume` carries the run on to its end and the long answer is kept whole.
#[tokio::test]
#[cfg_attr(
    not(has_tmpfs_mount),
    ignore = "needs a mount namespace to fill a small disk in: `unshare` (util-linux) with user namespaces allowed, or root"
)]
async fn a_full_run_folder_stops_the_run_with_exit_4_and_resume_finishes_it_once_there_is_room() {
    let Some(_) = prereq::find_or_skip(
        &prereq::TMPFS_MOUNT,
        "install util-linux and allow user namespaces, or run as root",
    ) else {
        return;
    };
    let namespace = prereq::mount_namespace().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".cadre/runs");
    std::fs::create_dir_all(&runs).unwrap();
    // More than the file system holds, and more than a tool result: kept in results/.
    let report: String = (0..4000)
        .map(|i| format!("finding {i:04}: {}\n", "x".repeat(90)))
        .collect();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Big job")]),
            Reply::text("parent done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Big job".into()),
        vec![Reply::text(&report), Reply::text(&report)],
    );
    // The run on a 256 KiB file system, what it left copied out, then the resume on 16 MiB:
    // the mounts live as long as the namespace, this one script.
    let script = r#"
        mount -t tmpfs -o size=256k tmpfs "$RUNS" || exit 90
        "$CADRE" run "PARENT task" > "$OUT/run.out" 2> "$OUT/run.err"
        echo $? > "$OUT/run.code"
        mkdir "$OUT/after-run" && cp -r "$RUNS/." "$OUT/after-run/"
        mount -o remount,size=16m "$RUNS" || exit 91
        "$CADRE" resume > "$OUT/resume.out" 2> "$OUT/resume.err"
        echo $? > "$OUT/resume.code"
        mkdir "$OUT/after-resume" && cp -r "$RUNS/." "$OUT/after-resume/"
    "#;
    let mut command = std::process::Command::new(&namespace[0]);
    command
        .args(&namespace[1..])
        .args(["sh", "-c", script])
        .current_dir(dir.path())
        .env("RUNS", &runs)
        .env("OUT", out.path())
        .env("CADRE", assert_cmd::cargo::cargo_bin("cadre"))
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null());
    let status = tokio::task::spawn_blocking(move || command.status().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "the script failed: {status}");
    let read = |name: &str| std::fs::read_to_string(out.path().join(name)).unwrap();

    assert_eq!(read("run.code").trim(), "4", "{}", read("run.err"));
    let err = read("run.err");
    assert!(
        err.contains("journal.jsonl") && err.contains("No space left on device"),
        "{err}"
    );
    assert!(err.contains("cadre resume"), "{err}");
    let after_run: Vec<_> = std::fs::read_dir(out.path().join("after-run"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(after_run.len(), 1, "{after_run:?}");
    let journal = std::fs::read_to_string(after_run[0].join("journal.jsonl")).unwrap();
    // Every line a whole step, up to the one that did not fit: the explorer's answer.
    assert!(journal.ends_with('\n'));
    let steps: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "started" && s["agent"] == "main/explore#1"),
        "{journal}"
    );
    assert!(
        !journal.contains("finding 0000"),
        "the answer was journaled"
    );
    // What was kept is whole: no summary cut short.
    if let Ok(summary) = std::fs::read_to_string(after_run[0].join("summary.json")) {
        serde_json::from_str::<Value>(&summary).unwrap();
    }

    assert_eq!(read("resume.code").trim(), "0", "{}", read("resume.err"));
    assert!(
        read("resume.out").contains("parent done"),
        "{}",
        read("resume.out")
    );
    let run = out
        .path()
        .join("after-resume")
        .join(after_run[0].file_name().unwrap());
    let results: Vec<_> = std::fs::read_dir(run.join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(std::fs::read_to_string(&results[0]).unwrap(), report);
}

/// Closing the terminal (SIGHUP) stops the run as Ctrl-C does: the agents' commands are
/// killed, not left running with no one to end them, and the summary is written.
#[tokio::test]
async fn sighup_kills_the_agents_commands_writes_the_summary_and_exits_129() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let (mut child, stderr) = run_with_a_sleeper(&server, dir.path(), home.path(), &[]).await;
    let pid_file = dir.path().join("sleeper.pid");
    wait_for("the command's pid", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;
    let sleeper: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(sleeper);
    assert!(nix::sys::signal::killpg(group, None).is_ok());
    let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGHUP).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let said = stderr.whole().await;
    assert_eq!(status.code(), Some(129), "{said}");
    assert!(said.contains("SIGHUP"), "{said}");
    // A killed process lingers a moment (a zombie until reaped): wait for the group to go.
    wait_for(
        &format!("the subagent's command (group {sleeper}) to end"),
        || nix::sys::signal::killpg(group, None).is_err(),
    )
    .await;
    let run = only_run(dir.path());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stop"]["kind"], "cancelled", "{summary}");
}
/// A read-only agent may hold an MCP server's tools, which run outside the sandbox: a call
/// of one that does not say it only reads, cut by a crash, is reported to the model as
/// interrupted on resume — never sent to the server a second time.
#[tokio::test]
async fn a_read_only_agents_changing_mcp_call_cut_by_a_crash_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let log = outside.path().join("mcp.log");
    let config = outside.path().join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"t": {
            "command": cadre_testkit::mcp_server_binary(),
            "args": ["--log", log],
        }}})
        .to_string(),
    )
    .unwrap();
    write_file(
        &dir.path().join(".cadre/agents/looker.yaml"),
        "name: looker\ndescription: Looks things up.\nmode: subagent\nread_only: true\ntools: [read_file, mcp__t__hang]\nprompt: Look.\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "looker", "Look job")]),
            Reply::text("parent done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Look job".into()),
        // `hang` says nothing of only reading: a call of it may change the world.
        vec![
            Reply::tool_use("h1", "mcp__t__hang", json!({})),
            Reply::text("looker done"),
        ],
    );
    let config_arg = config.to_str().unwrap();
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--mcp-config", config_arg, "PARENT task"],
    );
    let calls = |log: &Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("call hang"))
            .count()
    };
    wait_for("the MCP server to receive the call", || calls(&log) == 1).await;
    kill(&mut child);
    // The server would end once its drain times out; end it now, as the crash would.
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        if let Some(pid) = line.strip_prefix("start ") {
            let pid = nix::unistd::Pid::from_raw(pid.trim().parse().unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    assert!(journal(dir.path()).contains("\"tool_started\""));

    let out = cadre_env(
        dir.path(),
        &[
            ("ANTHROPIC_BASE_URL", &server.uri()),
            ("ANTHROPIC_API_KEY", "k"),
        ],
        // Should the call be sent again, it fails soon instead of hanging the test.
        &["resume", "--mcp-config", config_arg, "--mcp-timeout", "5"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("parent done"), "{}", out.stdout);
    assert_eq!(calls(&log), 1, "the call was sent again");
    let (is_error, text) = result_of(&server.requests(), "h1");
    assert!(is_error && text.contains("interrupted"), "{text}");
}

/// A subagent's long answer that cannot be kept in the run folder's `results/` stops the
/// run as a journal that cannot be written does (exit 4, naming the file), rather than reach
/// its parent cut; once the folder can be written, `cadre resume` hands the answer on whole.
#[tokio::test]
async fn a_long_answer_that_cannot_be_kept_stops_the_run_and_resume_hands_it_on_whole() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // More than a tool result holds.
    let report: String = (0..600)
        .map(|i| format!("finding {i:04}: {}\n", "y".repeat(90)))
        .collect();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Long job")]),
            Reply::text("parent done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Long job".into()),
        vec![Reply::text(&report)],
    );
    let gate = server.gate(Match::FirstUserContains("Long job".into()));
    let mut command = super::sessions::cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "PARENT task"],
    );
    command.stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stderr = super::sessions::collect_stderr(&mut child);
    wait_for("the explorer's request", || gate.waiting() == 1).await;
    // Where results/ would be made, a file: the answer cannot be kept.
    let run = only_run(dir.path());
    std::fs::write(run.join("results"), "in the way").unwrap();
    gate.open();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let said = stderr.whole().await;
    assert_eq!(status.code(), Some(4), "{said}");
    assert!(
        said.contains("could not keep the whole answer of main/explore#1")
            && said.contains("results")
            && said.contains("cadre resume"),
        "{said}"
    );
    // The parent never journaled a cut answer: the resume hands the whole one on.
    assert!(!journal(dir.path()).contains("\"parent done\""));
    std::fs::remove_file(run.join("results")).unwrap();
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
    assert!(out.stdout.contains("parent done"), "{}", out.stdout);
    let kept: Vec<_> = std::fs::read_dir(run.join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&kept[0]).unwrap(), report);
    // The model asked once for the answer: the resume took it from the journal.
    let asked = server
        .requests()
        .iter()
        .filter(|r| r.first_user_text() == "Long job")
        .count();
    assert_eq!(asked, 1);
}
