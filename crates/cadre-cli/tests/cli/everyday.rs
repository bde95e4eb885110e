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
/// A copy of the sample project as the repository has it: without the run folders that
/// running the README's quick start leaves in it.
fn sample_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("examples/sample-project"), dir.path());
    let _ = std::fs::remove_dir_all(dir.path().join(".cadre"));
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
async fn a_cassette_that_cannot_be_read_or_written_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.jsonl");
    let missing = missing.to_str().unwrap();
    let out = cadre_env(dir.path(), &[], &["run", "--replay", missing, "q"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(out.stderr.matches(missing).count(), 1, "{}", out.stderr);
    assert_eq!(out.stderr.matches("replay").count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("could not be read"), "{}", out.stderr);
    // A cassette in a folder that does not exist cannot be recorded to.
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(Match::Any, vec![Reply::text("never")]);
    let nowhere = dir.path().join("no-such-folder/run.jsonl");
    let nowhere = nowhere.to_str().unwrap();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--record", nowhere, "q"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(out.stderr.matches(nowhere).count(), 1, "{}", out.stderr);
    assert_eq!(out.stderr.matches("record").count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("could not be created"),
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
        // Piped with a wide COLUMNS, a line is cut at that width, no sooner.
        let wide = cadre_env(dir.path(), &[("COLUMNS", "200")], &args).await;
        let line = wide.stdout.lines().find(|l| l.starts_with(row)).unwrap();
        assert_eq!(line.chars().count(), 200, "{args:?}: {line:?}");
        if args[0] == "agents" {
            assert!(
                line.contains("bash,read_file,list_files,grep,write_file,edit_file,Skill,Task"),
                "{line:?}"
            );
        }
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

/// The README names every option of `cadre run`, opens with a contents list of its
/// sections, and links the deep sections moved to docs/, which exist.
#[tokio::test]
async fn the_readme_lists_every_run_option_and_its_contents() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let help = cadre_offline(&repo(), &["run", "--help"]).await;
    assert_eq!(help.code, 0, "{}", help.stderr);
    // Global options are documented by their short forms (-C, -q, -v).
    let global = ["--help", "--directory", "--quiet", "--verbose"];
    let mut missing = Vec::new();
    for line in help.stdout.lines() {
        let Some(at) = line.find("--") else { continue };
        let flag: String = line[at..]
            .chars()
            .take_while(|c| *c == '-' || c.is_ascii_alphanumeric())
            .collect();
        let documented = readme.contains(&format!("`{flag}"));
        if line.trim_start().starts_with('-') && !global.contains(&flag.as_str()) && !documented {
            missing.push(flag);
        }
    }
    assert!(missing.is_empty(), "not in the README: {missing:?}");
    // The contents list comes before the first section and links each one.
    let first_section = readme.find("\n## ").unwrap();
    let contents = &readme[..first_section];
    for heading in readme.lines().filter_map(|l| l.strip_prefix("## ")) {
        let anchor: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == ' ' || *c == '-')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        assert!(
            contents.contains(&format!("(#{anchor})")),
            "no contents entry for {heading:?}"
        );
    }
    for doc in [
        "docs/engine.md",
        "docs/library.md",
        "docs/permissions.md",
        "docs/mcp-serve.md",
    ] {
        assert!(readme.contains(&format!("({doc})")), "no link to {doc}");
        assert!(repo().join(doc).is_file(), "{doc} is missing");
    }
    // The set-up commands stay near the top.
    let quick_start = readme
        .find("cargo run -p cadre-cli -- -C examples/sample-project")
        .unwrap();
    let tests = readme.find("cargo test --workspace").unwrap();
    assert!(readme[..quick_start.max(tests)].lines().count() < 60);
    // write_file's rule is told as edit_file's is.
    assert!(
        readme.contains("`write_file` creates a file freely but\n  overwrites an existing one only if the agent read it first"),
        "the README does not say when write_file overwrites"
    );
}
