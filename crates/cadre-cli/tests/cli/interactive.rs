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

/// The row of `agent` in the closing table within `text`: its columns.
fn table_row(text: &str, agent: &str) -> Vec<String> {
    text.lines()
        .rev()
        .find(|l| l.split_whitespace().next() == Some(agent))
        .unwrap_or_else(|| panic!("no {agent} row in:\n{text}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A chat session whose turn was cancelled: leaving at once is a normal exit, and the
/// session continued later counts the cancelled subagent's turns and time as they were.
/// `/skills` with no skill says where it looked.
#[tokio::test]
async fn a_chat_in_parts_keeps_its_counts_and_leaves_cleanly_after_a_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::LastUserContains("delegate now".into()),
        vec![Reply::tasks([("t1", "explore", "Slow job")])],
    );
    server.route(
        Match::FirstUserContains("Slow job".into()),
        vec![
            Reply::tool_use("l1", "list_files", json!({})).delay(Duration::from_millis(1100)),
            Reply::text("too late").delay(Duration::from_secs(120)),
        ],
    );
    server.route(
        Match::LastUserContains("after cancel".into()),
        vec![Reply::text("STILL-HERE")],
    );
    let chat = |args: &[&str]| {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
        cmd.current_dir(dir.path())
            .env("HOME", home.path())
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", server.uri())
            .env("TERM", "dumb")
            .env_remove("CADRE_MODEL")
            .env_remove("CADRE_PROVIDER")
            .env_remove("RUST_LOG")
            .args(args);
        cmd
    };
    let requests = {
        let server = server.clone();
        move || server.requests()
    };
    let first = chat(&["chat"]);
    let (cancelled, status) = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(first, Some(30_000)).unwrap();
        p.exp_string("/help").unwrap();
        p.send_line("delegate now").unwrap();
        // The subagent's second request is with the model: it made one turn and a call.
        let start = std::time::Instant::now();
        while requests()
            .iter()
            .filter(|r| r.first_user_text() == "Slow job")
            .count()
            < 2
        {
            assert!(start.elapsed() < Duration::from_secs(30), "no second turn");
            std::thread::sleep(Duration::from_millis(50));
        }
        p.send_control('c').unwrap();
        p.exp_string("cancelling this turn").unwrap();
        let table = p.exp_string("transcripts:").unwrap();
        p.send_control('d').unwrap();
        p.exp_string("session saved as run").unwrap();
        p.exp_eof().unwrap();
        (table, p.process().wait().unwrap())
    })
    .await
    .unwrap();
    assert!(
        matches!(status, rexpect::process::WaitStatus::Exited(_, 0)),
        "leaving after a cancelled turn: {status:?}"
    );
    let before = table_row(&cancelled, "explore#1");
    let second = chat(&["chat", "--continue"]);
    let (skills, after) = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(second, Some(30_000)).unwrap();
        p.exp_string("/help").unwrap();
        p.send_line("/skills").unwrap();
        let skills = p.exp_string("\n").map(|_| ()).and_then(|()| {
            p.send_line("after cancel")?;
            p.exp_string("STILL-HERE")
        });
        let skills = skills.unwrap();
        let table = p.exp_string("transcripts:").unwrap();
        p.send_control('d').unwrap();
        p.exp_eof().unwrap();
        (skills, table)
    })
    .await
    .unwrap();
    assert!(skills.contains("no skills found; searched:"), "{skills}");
    let now = table_row(&after, "explore#1");
    // agent, type, turns, tools, input, (cached), output, time, outcome.
    assert_eq!(
        now[2..4],
        before[2..4],
        "turns and tools:\n{cancelled}\n{after}"
    );
    assert_eq!(now[4], before[4], "tokens:\n{cancelled}\n{after}");
    assert_ne!(now[7], "0:00", "time:\n{after}");
    assert_eq!(now[7], before[7], "time:\n{cancelled}\n{after}");
}

/// Closing the terminal during a turn (SIGHUP) stops the turn's agents as Ctrl-C would,
/// kills their commands, and ends the session with 129.
#[tokio::test]
async fn a_closed_terminal_stops_the_turn_kills_its_commands_and_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::LastUserContains("sleep now".into()),
        vec![bash("b1", "echo $$ > sleeper.pid; sleep 300")],
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
    let pid_file = dir.path().join("sleeper.pid");
    let status = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        p.exp_string("/help").unwrap();
        p.send_line("sleep now").unwrap();
        let start = std::time::Instant::now();
        while std::fs::read_to_string(&pid_file).map_or(true, |t| !t.ends_with('\n')) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the command never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p.process_mut()
            .signal(nix::sys::signal::Signal::SIGHUP)
            .unwrap();
        p.exp_string("SIGHUP").unwrap();
        p.exp_eof().unwrap();
        p.process().wait().unwrap()
    })
    .await
    .unwrap();
    let nix::sys::wait::WaitStatus::Exited(_, code) = status else {
        panic!("{status:?}");
    };
    assert_eq!(code, 129);
    let sleeper: i32 = std::fs::read_to_string(dir.path().join("sleeper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // A killed process lingers a moment (a zombie until reaped): wait for the group to go.
    wait_for(&format!("the command (group {sleeper}) to end"), || {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(sleeper), None).is_err()
    })
    .await;
}

/// SIGTERM while `/compact` waits for the model lets the compaction finish, then ends the
/// session as it would between turns, with the history saved and the run named.
#[tokio::test]
async fn sigterm_during_a_compaction_lets_it_finish_and_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::LastUserContains("hello there".into()),
        vec![Reply::text("FIRST-REPLY")],
    );
    let compaction = server.gate(Match::Custom(std::sync::Arc::new(|body| {
        body["compaction"]["type"] == "summarize"
    })));
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
    cmd.current_dir(dir.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("TERM", "dumb")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG");
    let held = compaction.clone();
    let handle = tokio::runtime::Handle::current();
    let status = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        p.exp_string("/help").unwrap();
        p.send_line("hello there").unwrap();
        p.exp_string("FIRST-REPLY").unwrap();
        p.send_line("/compact").unwrap();
        assert!(
            handle.block_on(held.wait_for(1, Duration::from_secs(30))),
            "the compaction never reached the model"
        );
        p.process_mut()
            .signal(nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        p.exp_string("leaving once the compaction is done").unwrap();
        held.open();
        p.exp_string("compacted:").unwrap();
        p.exp_string("session saved as run").unwrap();
        p.exp_eof().unwrap();
        p.process().wait().unwrap()
    })
    .await
    .unwrap();
    let nix::sys::wait::WaitStatus::Exited(_, code) = status else {
        panic!("{status:?}");
    };
    assert_eq!(code, 130);
    assert!(home.path().join(".config/cadre/history").exists());
}
