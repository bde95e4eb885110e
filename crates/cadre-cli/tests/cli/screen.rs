use super::*;
use std::time::Duration;

/// `cadre ARGS` on a pseudo-terminal `cols` wide, in `dir`, talking to `server`.
pub(super) fn on_terminal(
    dir: &Path,
    home: &Path,
    server: &MockServer,
    cols: u16,
    args: &[&str],
) -> std::process::Command {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("stty cols {cols} rows 30; exec \"$0\" \"$@\""))
        .arg(assert_cmd::cargo::cargo_bin("cadre"))
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("TERM", "xterm")
        .env_remove("COLUMNS")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG");
    cmd
}

/// What a terminal `cols` wide shows after `output` (as a pseudo-terminal session hands it
/// back, one char per byte): its rows, trailing blanks cut.
pub(super) fn screen(output: &str, cols: u16) -> Vec<String> {
    let bytes: Vec<u8> = output
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect();
    // Tall enough that nothing scrolls away.
    let mut term = vt100::Parser::new(500, cols, 0);
    term.process(&bytes);
    term.screen()
        .rows(0, cols)
        .map(|r| r.trim_end().to_owned())
        .collect()
}

/// Waits until the mock holds a request whose first user message is `text`.
fn wait_for_request(server: &MockServer, text: &str) {
    let start = std::time::Instant::now();
    while !server
        .requests()
        .iter()
        .any(|r| r.first_user_text() == text)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no request for {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A mock for `task`: `FLEET` starts two subagents that never answer; anything else is
/// never answered either.
async fn slow_server(task: &str) -> MockServer {
    let server = MockServer::start().await;
    if task != "FLEET" {
        server.route(
            Match::LastUserContains(task.into()),
            vec![Reply::text("late").delay(Duration::from_secs(120))],
        );
        return server;
    }
    server.route(
        Match::FirstUserContains("FLEET".into()),
        vec![Reply::tasks([
            ("t1", "explore", "Slow one"),
            ("t2", "explore", "Slow two"),
        ])],
    );
    for job in ["Slow one", "Slow two"] {
        server.route(
            Match::FirstUserContains(job.into()),
            vec![Reply::text("late").delay(Duration::from_secs(120))],
        );
    }
    server
}

/// Ctrl-C clears the live block whole: nothing of it stays above what follows, with
/// subagents running or the primary agent alone, in `run` and in `chat`.
#[tokio::test]
async fn ctrl_c_leaves_no_trace_of_the_live_block() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    for (args, waits_for) in [
        (vec!["run", "FLEET"], "Slow two"),
        (vec!["run", "ALONE"], "ALONE"),
        (vec!["chat"], "Slow two"),
    ] {
        let server = slow_server(if waits_for == "ALONE" {
            "ALONE"
        } else {
            "FLEET"
        })
        .await;
        let cmd = on_terminal(dir.path(), home.path(), &server, 100, &args);
        let chat = args[0] == "chat";
        let shown = tokio::task::spawn_blocking(move || {
            let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
            let mut out = String::new();
            if chat {
                out += &p.exp_string("/help").unwrap();
                out += "/help";
                p.send_line("FLEET").unwrap();
            }
            wait_for_request(&server, waits_for);
            // Let the live block draw its rows.
            std::thread::sleep(Duration::from_millis(400));
            p.send_control('c').unwrap();
            if chat {
                out += &p.exp_string("transcripts:").unwrap();
                out += "transcripts:";
                p.send_control('d').unwrap();
            }
            out + &p.exp_eof().unwrap()
        })
        .await
        .unwrap();
        let rows = screen(&shown, 100);
        let text = rows.join("\n");
        for row in &rows {
            let of_the_block = row.contains("cadre · main ·") && row.contains("running")
                || row.starts_with("  explore")
                || row.starts_with("  turn ");
            assert!(
                !of_the_block,
                "{args:?}: a row of the live block stayed: {row:?}\n{text}"
            );
        }
        assert!(text.contains("cancel"), "{args:?}:\n{text}");
    }
}

/// Everything the session printed so far and for `time` more.
pub(super) fn read_for(p: &mut rexpect::session::PtySession, time: Duration) -> String {
    let start = std::time::Instant::now();
    let mut out = String::new();
    while start.elapsed() < time {
        match p.try_read() {
            Some(c) => out.push(c),
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    out
}

/// On a narrow terminal a subagent's row shortens its description, keeping its turn, its
/// tool and its tokens.
#[tokio::test]
async fn a_narrow_terminal_shortens_the_description_not_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("NARROW".into()),
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
        vec![
            Reply::tool_use("l1", "list_files", json!({})),
            Reply::text("found").delay(Duration::from_secs(3)),
        ],
    );
    let cmd = on_terminal(dir.path(), home.path(), &server, 60, &["run", "NARROW"]);
    let watched = server.clone();
    let shown = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        let start = std::time::Instant::now();
        while watched
            .requests()
            .iter()
            .filter(|r| r.first_user_text().starts_with("Look at every"))
            .count()
            < 2
        {
            assert!(start.elapsed() < Duration::from_secs(30), "no second turn");
            std::thread::sleep(Duration::from_millis(50));
        }
        let shown = read_for(&mut p, Duration::from_millis(800));
        p.exp_string("ALL-DONE").unwrap();
        p.exp_eof().unwrap();
        shown
    })
    .await
    .unwrap();
    let rows = screen(&shown, 60);
    let row = rows
        .iter()
        .rev()
        .find(|r| r.starts_with("  explore#1"))
        .unwrap_or_else(|| panic!("no row for the subagent:\n{}", rows.join("\n")));
    assert!(row.chars().count() <= 60, "{row:?}");
    assert!(row.contains("turn 2"), "{row:?}");
    assert!(row.contains("thinking"), "{row:?}");
    assert!(row.ends_with(" tok"), "{row:?}");
    assert!(row.contains("job"), "{row:?}");
}

/// `--permission-mode ask`: the model's text before the call shows before the question,
/// and one key answers it.
#[tokio::test]
async fn a_question_follows_the_text_before_it_and_takes_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use(
                "w1",
                "write_file",
                json!({"path": "note.txt", "content": "hi"}),
            )
            .with_text_before("I will write the note now."),
            Reply::text("ALL-DONE"),
        ],
    );
    let cmd = on_terminal(
        dir.path(),
        home.path(),
        &server,
        100,
        &["run", "--permission-mode", "ask", "write a note"],
    );
    let asked = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(15_000)).unwrap();
        let mut asked = p.exp_string("allow?").unwrap();
        asked += "allow?";
        // Let anything that would come late arrive.
        asked += &read_for(&mut p, Duration::from_millis(300));
        p.send("y").unwrap();
        p.flush().unwrap();
        p.exp_string("ALL-DONE").unwrap();
        p.exp_eof().unwrap();
        asked
    })
    .await
    .unwrap();
    let rows = screen(&asked, 100);
    let at = |text: &str| {
        rows.iter()
            .position(|r| r.contains(text))
            .unwrap_or_else(|| panic!("no {text:?} on the screen:\n{}", rows.join("\n")))
    };
    assert!(
        at("I will write the note now.") < at("asks to run write_file"),
        "{}",
        rows.join("\n")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "hi"
    );
}
