use super::*;
use std::sync::{Arc, Mutex};
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
    let compaction = server.gate(Match::Custom(Arc::new(|body| {
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

/// The mock's answers to a conversation of four messages: a file read and a subagent in the
/// first, a subagent in the second, plain answers after.
async fn conversation_server() -> MockServer {
    let server = MockServer::start().await;
    let routes = [
        (
            Match::LastUserContains("first question".into()),
            Reply::tool_use("r1", "read_file", json!({"path": "notes.txt"})),
        ),
        (
            Match::LastUserContains("NOTES-CONTENT".into()),
            Reply::tasks([("t1", "explore", "Survey the notes")]),
        ),
        (
            Match::FirstUserContains("Survey the notes".into()),
            Reply::text("SURVEYED"),
        ),
        (
            Match::LastUserContains("SURVEYED".into()),
            Reply::text("ANSWER-ONE"),
        ),
        (
            Match::LastUserContains("second question".into()),
            Reply::tasks([("t2", "explore", "Survey again")]),
        ),
        (
            Match::FirstUserContains("Survey again".into()),
            Reply::text("AGAIN-DONE"),
        ),
        (
            Match::LastUserContains("AGAIN-DONE".into()),
            Reply::text("ANSWER-TWO"),
        ),
        (
            Match::LastUserContains("third question".into()),
            Reply::text("ANSWER-THREE"),
        ),
        (
            Match::LastUserContains("fourth question".into()),
            Reply::text("ANSWER-FOUR"),
        ),
    ];
    for (matcher, reply) in routes {
        server.route(matcher, vec![reply]);
    }
    server
}

/// `cadre` in `dir` against `server`, with `input` on its standard input.
fn cadre_with_input(dir: &Path, server: &MockServer, args: &[&str], input: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("cadre")
        .unwrap()
        .current_dir(dir)
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .args(args)
        .write_stdin(input)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "cadre {args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned() + &stderr
}

/// The `messages` of each request of the primary agent (whose first message is the first
/// question), in order; the agents the run journaled, in order; and the messages its
/// transcript holds.
fn primary_requests_and_agents(
    server: &MockServer,
    dir: &Path,
) -> (Vec<Value>, Vec<String>, Vec<Value>) {
    let requests = server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text() == "first question")
        .map(|r| r.body["messages"].clone())
        .collect();
    let runs: Vec<_> = std::fs::read_dir(dir.join(".cadre/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("journal.jsonl").is_file())
        .collect();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    let journal = std::fs::read_to_string(runs[0].join("journal.jsonl")).unwrap();
    let agents = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|s| s["step"] == "started")
        .map(|s| s["agent"].as_str().unwrap_or_default().to_owned())
        .collect();
    // Each message line of the transcript, with the agent that wrote it, in order.
    let transcript = std::fs::read_to_string(runs[0].join("transcript.jsonl")).unwrap();
    let messages = transcript
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|line| line.get("message").is_some())
        .map(|line| json!([line["agent"], line["message"]]))
        .collect();
    (requests, agents, messages)
}

/// A chat keeps its run open between messages instead of reading it back for each: what it
/// sends the model, and what it journals, are what a run read back from its journal for
/// each message sends and journals — so the conversation's next run, read back, goes on
/// from it alike.
#[tokio::test]
async fn a_chat_kept_open_sends_and_journals_what_a_run_read_back_for_each_message_does() {
    let kept = tempfile::tempdir().unwrap();
    let reread = tempfile::tempdir().unwrap();
    for dir in [&kept, &reread] {
        write_file(&dir.path().join("notes.txt"), "NOTES-CONTENT\n");
    }
    let messages = ["first question", "second question", "third question"];
    let kept_server = conversation_server().await;
    let said = cadre_with_input(
        kept.path(),
        &kept_server,
        &["-vv", "chat"],
        &(messages.join("\n") + "\n"),
    );
    for answer in ["ANSWER-ONE", "ANSWER-TWO", "ANSWER-THREE"] {
        assert!(said.contains(answer), "{answer} missing:\n{said}");
    }
    // Its second and third messages went on from memory, not from the journal.
    assert_eq!(said.matches("goes on from memory").count(), 2, "{said}");
    assert!(!said.contains("goes on from its journal"), "{said}");
    // The next message is a run read back from what the kept conversation journaled.
    cadre_with_input(
        kept.path(),
        &kept_server,
        &["run", "--continue", "fourth question"],
        "",
    );
    let reread_server = conversation_server().await;
    cadre_with_input(reread.path(), &reread_server, &["run", messages[0]], "");
    for message in messages[1..].iter().chain(["fourth question"].iter()) {
        cadre_with_input(
            reread.path(),
            &reread_server,
            &["run", "--continue", message],
            "",
        );
    }
    kept_server.assert_clean();
    reread_server.assert_clean();
    let (kept_requests, kept_agents, kept_transcript) =
        primary_requests_and_agents(&kept_server, kept.path());
    let (reread_requests, reread_agents, reread_transcript) =
        primary_requests_and_agents(&reread_server, reread.path());
    assert_eq!(kept_requests.len(), 7, "{kept_requests:#?}");
    assert_eq!(reread_requests.len(), 7, "{reread_requests:#?}");
    for (n, (kept, reread)) in kept_requests.iter().zip(&reread_requests).enumerate() {
        assert_eq!(kept, reread, "request {n} of the primary agent differs");
    }
    assert_eq!(kept_agents, ["main", "main/explore#1", "main/explore#2"]);
    assert_eq!(kept_agents, reread_agents);
    assert!(kept_transcript.len() > 10, "{kept_transcript:#?}");
    assert_eq!(kept_transcript, reread_transcript);
}

/// A chat whose run another process went on with while it waited for the next message
/// reads the run again instead of writing over what the other process journaled.
#[tokio::test]
async fn a_chat_whose_run_another_process_went_on_with_reads_it_again() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    for (asked, answer) in [
        ("first question", "ANSWER-ONE"),
        ("outside question", "ANSWER-OUTSIDE"),
        ("second question", "ANSWER-TWO"),
        ("third question", "ANSWER-THREE"),
    ] {
        server.route(
            Match::LastUserContains(asked.into()),
            vec![Reply::text(answer)],
        );
    }
    let mut chat = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .current_dir(dir.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .arg("chat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = chat.stdin.take().unwrap();
    let mut stderr = chat.stderr.take().unwrap();
    let said = Arc::new(Mutex::new(String::new()));
    let reader = {
        let said = said.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                said.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    input.write_all(b"first question\n").unwrap();
    // The first message's turn is over once its table is shown.
    let start = std::time::Instant::now();
    while !said.lock().unwrap().contains("transcripts:") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no first turn: {}",
            said.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    cadre_with_input(
        dir.path(),
        &server,
        &["run", "--continue", "outside question"],
        "",
    );
    input.write_all(b"second question\n").unwrap();
    drop(input);
    let status = tokio::task::spawn_blocking(move || chat.wait().unwrap())
        .await
        .unwrap();
    reader.join().unwrap();
    assert!(status.success(), "{}", said.lock().unwrap());
    // The next run read back from the journal goes on from all three.
    cadre_with_input(
        dir.path(),
        &server,
        &["run", "--continue", "third question"],
        "",
    );
    server.assert_clean();
    let last = server.requests().last().unwrap().body["messages"].clone();
    let texts: Vec<String> = last
        .as_array()
        .unwrap()
        .iter()
        .map(|m| content_text(Some(&m["content"])))
        .collect();
    assert_eq!(
        texts,
        [
            "first question",
            "ANSWER-ONE",
            "outside question",
            "ANSWER-OUTSIDE",
            "second question",
            "ANSWER-TWO",
            "third question"
        ]
    );
}
