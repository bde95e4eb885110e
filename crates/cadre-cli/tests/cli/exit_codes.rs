//! Exit codes of failures outside the agents: only a failing model API is 3; bad usage is
//! 2; cadre failing itself (a file it cannot read or write, a damaged run folder) is 4.

use super::*;

/// Runs `cadre args` in `ws` against the model at `model`; checks its exit code and that
/// stderr says each of `says`.
async fn expect(ws: &Path, model: &str, args: &[&str], code: i32, says: &[&str]) {
    let out = cadre(ws, model, Some("k"), args).await;
    assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
    for text in says {
        assert!(out.stderr.contains(text), "{args:?}: {}", out.stderr);
    }
}

#[tokio::test]
async fn only_the_model_api_exits_3_and_cadre_failing_itself_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("All done.")]);
    let model = server.uri();
    expect(ws, &model, &["run", "q"], 0, &[]).await;
    let list = cadre(ws, &model, None, &["runs", "list", "--json"]).await;
    let list: Value = serde_json::from_str(&list.stdout).unwrap();
    let id = list[0]["id"].as_str().unwrap().to_owned();

    let failing = MockServer::start().await;
    failing.route(
        Match::Any,
        vec![Reply::error_status(
            400,
            "invalid_request_error",
            "refused in the test",
        )],
    );
    expect(
        ws,
        &failing.uri(),
        &["run", "q"],
        3,
        &["refused in the test"],
    )
    .await;
    expect(ws, &model, &["runs", "show", "19990101"], 2, &["no run"]).await;
    // The page cannot be written where it was asked to go.
    let html = ["runs", "show", &id, "--html", "no/such/folder/run.html"];
    expect(
        ws,
        &model,
        &html,
        4,
        &["cannot write no/such/folder/run.html"],
    )
    .await;

    // A journal with a line in its middle that is no step cannot be gone on from.
    let journal = ws.join(".cadre/runs").join(&id).join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    assert!(!rest.is_empty(), "the journal has one line: {text}");
    std::fs::write(&journal, format!("{first}\nnot a step\n{rest}")).unwrap();
    let resume = ["run", "--resume", &id, "more"];
    expect(ws, &model, &resume, 4, &["damaged", &id]).await;

    // The runs folder cannot be read: here it is a file.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir(other.path().join(".cadre")).unwrap();
    std::fs::write(other.path().join(".cadre/runs"), "not a folder").unwrap();
    expect(other.path(), &model, &["runs", "list"], 4, &["cannot read"]).await;
}

#[tokio::test]
async fn help_lists_the_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let out = cadre_env(dir.path(), &[], &["--help"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    for code in ["0 ", "1 ", "2 ", "3 ", "4 ", "130 "] {
        assert!(
            out.stdout.lines().any(|l| l.trim_start().starts_with(code)),
            "no exit code {code}in:\n{}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("cadre itself failed"), "{}", out.stdout);
}
