use super::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `cadre` started in the background, to be killed.
pub(crate) fn spawn_cadre(
    dir: &Path,
    base_url: &str,
    home: &Path,
    args: &[&str],
) -> std::process::Child {
    cadre_command(dir, base_url, home, args).spawn().unwrap()
}

/// The command [`spawn_cadre`] starts, to add to before starting it.
pub(crate) fn cadre_command(
    dir: &Path,
    base_url: &str,
    home: &Path,
    args: &[&str],
) -> std::process::Command {
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
    command
        .current_dir(dir)
        .env("HOME", home)
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", base_url)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("CADRE_MCP_TOKEN")
        .env_remove("CADRE_MCP_SERVED")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// Everything `child` writes to stderr, gathered as it comes by a thread of its own.
pub(crate) fn collect_stderr(child: &mut std::process::Child) -> Stderr {
    let text = Arc::new(Mutex::new(String::new()));
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pipe = std::io::BufReader::new(child.stderr.take().unwrap());
    let (sink, end) = (text.clone(), ended.clone());
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(pipe).map_while(Result::ok) {
            let mut text = sink.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
        end.store(true, std::sync::atomic::Ordering::Release);
    });
    Stderr { text, ended }
}

/// A child's stderr as it comes (`lock()` reads what has come so far), and whether it has
/// ended.
pub(crate) struct Stderr {
    text: Arc<Mutex<String>>,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl std::ops::Deref for Stderr {
    type Target = Mutex<String>;

    fn deref(&self) -> &Mutex<String> {
        &self.text
    }
}

impl Stderr {
    /// All of it: waits for the pipe to end, since the reader may still be behind when the
    /// child has exited.
    pub(crate) async fn whole(&self) -> String {
        wait_for("stderr to end", || {
            self.ended.load(std::sync::atomic::Ordering::Acquire)
        })
        .await;
        self.text.lock().unwrap().clone()
    }
}

/// `cadre run "PARENT task"` in `dir` against `server`, started once its one `code`
/// subagent's `bash` command (a `sleep`, its pid in `sleeper.pid`) is running; `env` adds to
/// its environment. Returns the child and its stderr as it comes.
pub(crate) async fn run_with_a_sleeper(
    server: &MockServer,
    dir: &Path,
    home: &Path,
    env: &[(&str, &Path)],
) -> (std::process::Child, Stderr) {
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
    let mut command = cadre_command(dir, &server.uri(), home, &["run", "PARENT task"]);
    command.stderr(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let stderr = collect_stderr(&mut child);
    let pid_file = dir.join("sleeper.pid");
    wait_for("the subagent's command to start", || {
        written_pid(&pid_file).is_some()
    })
    .await;
    (child, stderr)
}

/// The pid a test command wrote with `echo $$ > FILE`, once the whole line is there: the
/// shell makes the file before it writes, so the file can be there and still empty.
pub(crate) fn written_pid(file: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(file).ok()?;
    text.ends_with('\n').then(|| text.trim().parse().ok())?
}

pub(crate) fn journal(dir: &Path) -> String {
    let runs = dir.join(".cadre/runs");
    let Ok(mut entries) = std::fs::read_dir(&runs) else {
        return String::new();
    };
    let Some(Ok(run)) = entries.next() else {
        return String::new();
    };
    std::fs::read_to_string(run.path().join("journal.jsonl")).unwrap_or_default()
}

pub(crate) fn key(r: &cadre_testkit::Captured) -> String {
    format!(
        "{}|{}",
        r.system_text(),
        serde_json::to_string(&r.body["messages"]).unwrap()
    )
}

pub(crate) fn kill(child: &mut std::process::Child) {
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
            written_pid(&dir.path().join("bash.pid")).is_some()
                && reader_requests(&server) == 2
                && journal(dir.path()).contains("quick done")
        },
    )
    .await;
    kill(&mut child);
    // The orphaned command would still write: end it as a crash of the machine would.
    let pid = written_pid(&dir.path().join("bash.pid")).unwrap();
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
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
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
    // ... and says so without a key too: the run's state is read before a key is needed.
    let keyless = cadre_env(
        dir.path(),
        &[],
        &["resume", run.file_name().unwrap().to_str().unwrap()],
    )
    .await;
    assert_eq!(keyless.code, 2, "{}", keyless.stderr);
    assert!(
        keyless.stderr.contains("already finished")
            && !keyless.stderr.contains("ANTHROPIC_API_KEY"),
        "{}",
        keyless.stderr
    );
}

#[tokio::test]
async fn a_second_ctrl_c_quits_at_once_yet_kills_commands_and_writes_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // cadre's own temp folder, to see that no sandbox folder is left in it.
    let tmp = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let (mut child, stderr) =
        run_with_a_sleeper(&server, dir.path(), home.path(), &[("TMPDIR", tmp.path())]).await;
    let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
    wait_for("cadre to take the first Ctrl-C", || {
        stderr
            .lock()
            .unwrap()
            .contains("cadre: stopping every agent")
    })
    .await;
    let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let sleeper = written_pid(&dir.path().join("sleeper.pid")).unwrap();
    // A killed process lingers a moment (a zombie until reaped): wait for the group to go.
    wait_for(
        &format!("the subagent's command (group {sleeper}) to end, not be orphaned"),
        || nix::sys::signal::killpg(nix::unistd::Pid::from_raw(sleeper), None).is_err(),
    )
    .await;
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
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stop"]["kind"], "cancelled", "{summary}");
    // The agents it gave up at work are there, cancelled, not left out.
    let outcomes: Vec<(&str, &str)> = summary["usage"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["path"].as_str().unwrap(), a["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [("main", "cancelled"), ("main/code#1", "cancelled")],
        "{summary}"
    );
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
    let input_closed = dir.path().join("mcp-input-closed");
    let stubborn = format!(
        "trap '' TERM; echo $$ > {pid}; {bin}; touch {closed}; sleep 300",
        pid = dir.path().join("mcp.pid").display(),
        bin = cadre_testkit::mcp_server_binary().display(),
        closed = input_closed.display()
    );
    std::fs::write(
        dir.path().join(".mcp.json"),
        json!({"mcpServers": {"stubborn": {"command": "bash", "args": ["-c", stubborn]}}})
            .to_string(),
    )
    .unwrap();
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--trust-project", "PARENT task"],
    );
    let main_pid = dir.path().join("main.pid");
    wait_for("the command to start", || written_pid(&main_pid).is_some()).await;
    let mcp_pid = written_pid(&dir.path().join("mcp.pid")).unwrap();
    let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
    // The server's shutdown has begun: its input is closed, SIGTERM is coming.
    wait_for("the MCP server's input to close", || input_closed.exists()).await;
    let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(130));
    // Dead, or a zombie nobody has reaped yet.
    wait_for("the MCP server to be killed", || {
        cadre_testkit::hooks::gone(mcp_pid)
    })
    .await;
    let runs: Vec<_> = std::fs::read_dir(dir.path().join(".cadre/runs"))
        .unwrap()
        .collect();
    let run = runs[0].as_ref().unwrap().path();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
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

/// The times of `transcript`'s records, in order.
fn record_times(transcript: &str) -> Vec<String> {
    transcript
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["t"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// How many message records of `transcript` hold `text`.
fn messages_with(transcript: &str, text: &str) -> usize {
    transcript
        .lines()
        .filter(|l| l.contains(r#""type":"message""#) && l.contains(text))
        .count()
}

/// A run in several parts (a follow-up, a kill and a resume) keeps one record per step with
/// the time it happened, and its times, turns and tokens add up over the parts.
#[tokio::test]
async fn a_run_in_parts_appends_its_transcripts_and_adds_up_its_times() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let slow = Duration::from_millis(1200);
    server.route(
        Match::FirstUserContains("FIRST".into()),
        vec![
            Reply::tasks([("t1", "explore", "Slow look")]),
            Reply::text("first answer"),
        ],
    );
    server.route(
        Match::FirstUserContains("Slow look".into()),
        vec![Reply::text("looked").usage(100, 10, 0, 0).delay(slow)],
    );
    let env = [
        ("ANTHROPIC_BASE_URL", server.uri()),
        ("ANTHROPIC_API_KEY", "k".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = cadre_env(dir.path(), &env, &["run", "FIRST question"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = std::fs::read_dir(dir.path().join(".cadre/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // The primary agent's lines of the run's transcript.
    let main = || cadre_testkit::transcript::text_of(&run, "main");
    let first_part = main();
    assert!(first_part.contains("FIRST question"), "{first_part}");
    let summary = |run: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap()
    };
    let explorer = |s: &Value| -> Value {
        s["usage"]["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["path"] == "main/explore#1")
            .cloned()
            .unwrap()
    };
    let before = explorer(&summary(&run));
    assert!(before["elapsed_ms"].as_u64().unwrap() >= 1200, "{before}");

    // A follow-up that takes as long again.
    server.route(
        Match::LastUserContains("SECOND".into()),
        vec![Reply::text("second answer").delay(slow)],
    );
    let out = cadre_env(dir.path(), &env, &["run", "--continue", "SECOND question"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The answer is the first thing on stdout: no empty line before it.
    assert!(out.stdout.starts_with("second answer"), "{:?}", out.stdout);
    let both_parts = main();
    // The first part's records are kept as written, with their own times; the follow-up's
    // are added after them.
    assert!(
        both_parts.starts_with(&first_part),
        "main's lines were rewritten:\n{first_part}\n---\n{both_parts}"
    );
    let times = record_times(&both_parts);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(
        messages_with(&both_parts, "SECOND question"),
        1,
        "{both_parts}"
    );
    assert_eq!(
        messages_with(&both_parts, "first answer"),
        1,
        "{both_parts}"
    );
    // The subagent of the first part keeps its time, turns and tokens.
    let s = summary(&run);
    let after = explorer(&s);
    for key in ["elapsed_ms", "turns", "usage"] {
        assert_eq!(after[key], before[key], "{key}: {before} then {after}");
    }
    // The run's time covers both parts, in the summary, the closing table and the list.
    assert!(s["elapsed_ms"].as_u64().unwrap() >= 2400, "{s}");
    let table_time = |stderr: &str, agent: &str| -> String {
        let row = stderr
            .lines()
            .find(|l| l.split_whitespace().next() == Some(agent))
            .unwrap_or_else(|| panic!("no {agent} row:\n{stderr}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        cols.iter()
            .rev()
            .find(|c| c.contains(':'))
            .unwrap()
            .to_string()
    };
    assert_ne!(
        table_time(&out.stderr, "explore#1"),
        "0:00",
        "{}",
        out.stderr
    );
    assert!(
        table_time(&out.stderr, "total").as_str() >= "0:02",
        "{}",
        out.stderr
    );
    let list = cadre_env(dir.path(), &env, &["runs", "list"]).await;
    let row = list.stdout.lines().nth(1).unwrap();
    // The second column with a colon: the first is the hour it started (`00:07`).
    let time = row
        .split_whitespace()
        .filter(|c| c.contains(':'))
        .nth(1)
        .unwrap();
    assert!(time >= "0:02", "{}", list.stdout);

    // A third part killed while the model answers, then resumed: still appended, and the
    // total covers every part.
    server.route(
        Match::LastUserContains("THIRD".into()),
        vec![Reply::text("lost").delay(Duration::from_secs(120))],
    );
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--continue", "THIRD question"],
    );
    wait_for("the third request", || {
        server
            .requests()
            .iter()
            .any(|r| r.last_user_text().contains("THIRD"))
    })
    .await;
    kill(&mut child);
    let three_parts = main();
    assert!(three_parts.starts_with(&both_parts), "{three_parts}");
    server.route(
        Match::LastUserContains("THIRD".into()),
        vec![Reply::text("third answer")],
    );
    let out = cadre_env(dir.path(), &env, &["resume"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("third answer"), "{:?}", out.stdout);
    let all = main();
    assert!(all.starts_with(&three_parts), "{all}");
    assert_eq!(messages_with(&all, "THIRD question"), 1, "{all}");
    assert_eq!(messages_with(&all, "first answer"), 1, "{all}");
    let s = summary(&run);
    assert!(s["elapsed_ms"].as_u64().unwrap() >= 2400, "{s}");
    assert_eq!(explorer(&s)["elapsed_ms"], before["elapsed_ms"], "{s}");
    assert!(
        table_time(&out.stderr, "total").as_str() >= "0:02",
        "{}",
        out.stderr
    );
}

/// `cadre -c`, as in Claude Code: the newest run of the project goes on — without a
/// terminal, with the follow-up read from stdin. It goes with no other command than `run`
/// and `chat`.
#[tokio::test]
async fn c_alone_continues_the_newest_run_with_the_follow_up_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::LastUserContains("FIRST".into()),
        vec![Reply::text("first answer")],
    );
    server.route(
        Match::LastUserContains("NEXT".into()),
        vec![Reply::text("next answer")],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "FIRST question"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let continued = tokio::task::spawn_blocking({
        let mut cmd = cadre_command(dir.path(), &server.uri(), home.path(), &["-c"]);
        move || {
            let mut child = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"NEXT question\n")
                .unwrap();
            child.wait_with_output().unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&continued.stderr);
    assert_eq!(continued.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&continued.stdout).contains("next answer"),
        "{stderr}"
    );
    // The same conversation went on, in the same run folder.
    let sent = server.requests().pop().unwrap();
    let messages = sent.messages();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[0]["content"][0]["text"], "FIRST question");
    assert_eq!(messages[2]["content"][0]["text"], "NEXT question");
    let runs = std::fs::read_dir(dir.path().join(".cadre/runs")).unwrap();
    assert_eq!(runs.count(), 1);

    let out = cadre_offline(dir.path(), &["-c", "agents", "list"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("-c/--continue"), "{}", out.stderr);
}

/// A run the model API failed (a 400 here) is carried on by `cadre resume`: the request is
/// sent again, not the run called finished.
#[tokio::test]
async fn resume_retries_a_run_that_stopped_on_a_model_api_failure() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("l1", "list_files", json!({})),
            Reply::error_status(400, "invalid_request_error", "the server refused it"),
            Reply::text("recovered"),
        ],
    );
    let env = [
        ("ANTHROPIC_BASE_URL", server.uri()),
        ("ANTHROPIC_API_KEY", "k".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = cadre_env(dir.path(), &env, &["run", "A task"]).await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr.contains("the server refused it"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("`cadre resume "), "{}", out.stderr);
    let failed = server.requests().pop().unwrap();
    let out = cadre_env(dir.path(), &env, &["resume"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("recovered"), "{}", out.stdout);
    // The same request again: the tool call is not run a second time.
    let again = server.requests().pop().unwrap();
    assert_eq!(again.messages(), failed.messages());
    assert_eq!(server.requests().len(), 3);
    // Now it has finished: there is nothing left to resume.
    let out = cadre_env(dir.path(), &env, &["resume"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
}

/// A run killed near its budget and resumed with it counts what its journal shows was spent
/// before: the resume spends only what is left (one request here), then stops for its
/// budget, where it once started counting from nothing and spent the budget again.
#[tokio::test]
async fn a_resumed_run_spends_only_what_is_left_of_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    // The parent's last answer is for a resume that spends the budget again.
    server.allow_unused_replies();
    // Every answer costs 15 tokens but the spender's, 1,200.
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Spender job")]).usage(10, 5, 0, 0),
            Reply::tasks([("t2", "code", "Sleeper job")]).usage(10, 5, 0, 0),
            Reply::text("parent done").usage(10, 5, 0, 0),
        ],
    );
    server.route(
        Match::FirstUserContains("Spender job".into()),
        vec![Reply::text("spent").usage(1000, 200, 0, 0)],
    );
    server.route(
        Match::FirstUserContains("Sleeper job".into()),
        vec![
            Reply::tool_use(
                "s1",
                "bash",
                json!({"command": "echo $$ > sleeper.pid; sleep 300"}),
            )
            .usage(10, 5, 0, 0),
            Reply::text("sleeper done").usage(10, 5, 0, 0),
        ],
    );
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--budget-tokens", "100000", "PARENT task"],
    );
    let pid_file = dir.path().join("sleeper.pid");
    wait_for("the sleeper's command to start", || {
        written_pid(&pid_file).is_some()
    })
    .await;
    kill(&mut child);
    let pid = written_pid(&pid_file).unwrap();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let sent = server.requests().len();
    assert_eq!(sent, 4, "parent, spender, parent, sleeper");

    // 1,245 tokens spent before: a budget of 1,250 leaves room for one request, the
    // sleeper's after its interrupted command, and none for the parent's after it.
    let out = cadre_env(
        dir.path(),
        &[
            ("ANTHROPIC_BASE_URL", &server.uri()),
            ("ANTHROPIC_API_KEY", "k"),
        ],
        &[
            "resume",
            "--budget-tokens",
            "1250",
            "--output-format",
            "json",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["stop"], json!({"kind": "budget"}), "{v}");
    let after: Vec<String> = server.requests()[sent..]
        .iter()
        .map(|r| r.first_user_text())
        .collect();
    assert_eq!(after, ["Sleeper job"], "the resume spent the budget again");
}
