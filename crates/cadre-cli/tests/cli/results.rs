use super::sessions::{journal, kill, run_with_a_sleeper, spawn_cadre};
use super::*;
use cadre_core::internal::CONTINUE_PROMPT;
use std::time::Duration;

/// The one run folder of the project at `dir`.
fn the_run(dir: &Path) -> PathBuf {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir.join(".cadre/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.pop().unwrap()
}

fn summary(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap()
}

/// The outcome of `path` in `summary.json`.
fn outcome_of(summary: &Value, path: &str) -> String {
    summary["usage"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == path)
        .unwrap_or_else(|| panic!("no {path} in {summary}"))["outcome"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The row of the closing usage table (or of `cadre runs show`) for `name`.
fn table_row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{text}"))
}

/// The text of the last tool_result the parent (first user message `parent`) was sent.
fn last_task_result(server: &MockServer, parent: &str) -> String {
    let request = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text() == parent)
        .unwrap();
    let last = request.messages().last().unwrap().clone();
    last["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_report_still_cut_after_its_continuations_shows_as_cut_in_the_table_summary_and_runs_show(
) {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job D: explain")]),
            Reply::text("parent done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job D".into()),
        ["one ", "two ", "three ", "four "]
            .iter()
            .map(|p| Reply::text(p).stop_reason("max_tokens"))
            .collect(),
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "PARENT task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        last_task_result(&server, "PARENT task").contains("outcome: cut"),
        "{:?}",
        server.requests().last()
    );
    assert!(
        table_row(&out.stderr, "explore#1").ends_with("  cut"),
        "{}",
        out.stderr
    );
    assert!(
        table_row(&out.stderr, "main").ends_with("  completed"),
        "{}",
        out.stderr
    );
    let run = the_run(dir.path());
    let saved = summary(&run);
    assert_eq!(outcome_of(&saved, "main/explore#1"), "cut");
    assert_eq!(saved["outcome"], "completed");
    let show = cadre_env(dir.path(), &[], &["runs", "show", "latest"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    let cols: Vec<&str> = table_row(&show.stdout, "explore#1")
        .split_whitespace()
        .collect();
    assert_eq!(&cols[1..4], ["explore", "cut", "4"], "{}", show.stdout);
    assert!(
        show.stdout
            .contains("main/explore#1: the answer was cut off at the output token limit"),
        "{}",
        show.stdout
    );
}

#[tokio::test]
async fn a_killed_subagent_is_never_reported_completed_and_its_cut_answer_goes_on_when_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job K: explain")]),
            Reply::text("parent done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job K".into()),
        vec![
            Reply::text("First half, ").stop_reason("max_tokens"),
            // The continuation is in flight when the run is killed.
            Reply::text("lost").delay(Duration::from_secs(120)),
        ],
    );
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "PARENT task"],
    );
    let continuation = |s: &MockServer| {
        s.requests()
            .iter()
            .any(|r| r.first_user_text().contains("Job K") && r.last_user_text() == CONTINUE_PROMPT)
    };
    wait_for("the subagent to be asked to go on", || {
        continuation(&server)
    })
    .await;
    kill(&mut child);
    assert!(journal(dir.path()).contains("First half, "));

    // Killed: no summary, and nothing says the subagent (or the run) completed.
    let run = the_run(dir.path());
    assert!(!run.join("summary.json").exists());
    let show = cadre_env(dir.path(), &[], &["runs", "show", "latest"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(!show.stdout.contains("completed"), "{}", show.stdout);
    let cols: Vec<&str> = table_row(&show.stdout, "explore#1")
        .split_whitespace()
        .collect();
    assert_eq!(&cols[1..3], ["explore", "unfinished"], "{}", show.stdout);
    let list = cadre_env(dir.path(), &[], &["runs", "list", "--json"]).await;
    let listed: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(listed[0]["outcome"], "unfinished", "{listed}");
    assert_eq!(listed[0]["unfinished_agents"], 2, "{listed}");

    // Resumed, it is asked to go on again and the parent gets the whole answer.
    server.route(
        Match::FirstUserContains("Job K".into()),
        vec![Reply::text("second half.")],
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
    assert_eq!(
        last_task_result(&server, "PARENT task"),
        "First half, second half."
    );
    let resent = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text().contains("Job K"))
        .unwrap();
    assert_eq!(resent.messages().len(), 3);
    assert_eq!(resent.last_user_text(), CONTINUE_PROMPT);
    let saved = summary(&run);
    assert_eq!(outcome_of(&saved, "main/explore#1"), "completed");
    assert!(
        table_row(&out.stderr, "explore#1").ends_with("  completed"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn ctrl_c_reports_a_subagent_at_work_as_cancelled_in_its_task_result_the_table_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let (mut child, stderr) = run_with_a_sleeper(&server, dir.path(), home.path(), &[]).await;
    let cadre = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let _ = nix::sys::signal::kill(cadre, nix::sys::signal::Signal::SIGINT);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(130));
    // The reader thread may still be taking the last lines.
    // (Its row, not an earlier log line naming it.)
    wait_for("the usage table", || {
        stderr
            .lock()
            .unwrap()
            .lines()
            .any(|l| l.trim_start().starts_with("code#1 "))
    })
    .await;
    let text = stderr.lock().unwrap().clone();
    assert!(
        table_row(&text, "code#1").ends_with("  cancelled"),
        "{text}"
    );
    assert!(!text.contains("completed"), "{text}");
    let run = the_run(dir.path());
    let saved = summary(&run);
    assert_eq!(outcome_of(&saved, "main/code#1"), "cancelled");
    assert_eq!(outcome_of(&saved, "main"), "cancelled");
    assert_eq!(saved["outcome"], "cancelled");
    // The parent's Task call was answered with the outcome, in its journal.
    assert!(
        journal(dir.path()).contains("outcome: cancelled"),
        "{}",
        journal(dir.path())
    );
}

#[tokio::test]
async fn a_long_report_is_kept_whole_in_the_run_folder_and_runs_show_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let report: String = (1..=2_000)
        .map(|i| format!("{:<49}\n", format!("finding {i:05}")))
        .collect();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job L: report")]),
            Reply::text("parent done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job L".into()),
        vec![Reply::text(&report)],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "PARENT task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = the_run(dir.path());
    let file = run
        .canonicalize()
        .unwrap()
        .join("results/main.explore-1.md");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), report);
    let head = last_task_result(&server, "PARENT task");
    assert!(head.len() < 30_000, "{}", head.len());
    assert!(head.contains("100000 bytes (2000 lines)"), "{head}");
    assert!(head.contains(file.to_str().unwrap()), "{head}");
    let saved = summary(&run);
    assert_eq!(
        saved["usage"]["agents"][1]["result_file"],
        "results/main.explore-1.md"
    );
    let show = cadre_env(dir.path(), &[], &["runs", "show", "latest"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout
            .contains("main/explore#1: its whole answer is in ")
            && show.stdout.contains("results/main.explore-1.md"),
        "{}",
        show.stdout
    );
}
