use super::*;
use cadre_testkit::{mcp_server_binary, prereq};

/// A home folder whose trust file trusts the project at `dir` (its `.mcp.json` as it is):
/// `cadre mcp` starts a project's servers only then.
async fn trusting_home(dir: &Path) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let out = cadre_env(dir, &[("HOME", home.path().to_str().unwrap())], &["trust"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    home
}

fn write_config(dir: &Path, servers: Value) {
    let config = json!({ "mcpServers": servers });
    std::fs::write(dir.join(".mcp.json"), config.to_string()).unwrap();
}

#[tokio::test]
async fn a_run_calls_mcp_tools_and_the_server_never_sees_the_api_key() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        json!({"local": {"command": mcp_server_binary(), "env": {"GIVEN": "given-value"}}}),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                ("e1", "mcp__local__env_names", json!({})),
                (
                    "e2",
                    "mcp__local__env",
                    json!({"name": "ANTHROPIC_API_KEY"}),
                ),
                ("e3", "mcp__local__env", json!({"name": "GIVEN"})),
            ]),
            Reply::text("checked"),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("sk-secret-for-mcp"),
        &[
            "run",
            // The project's .mcp.json starts only in a project the user trusts.
            "--trust-project",
            "--output-format",
            "stream-json",
            "Check the environment",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let last = server.requests().pop().unwrap();
    let results = last.messages().last().unwrap()["content"].clone();
    let names = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(names.lines().any(|l| l == "GIVEN"), "{names}");
    assert!(names.lines().any(|l| l == "PATH"), "{names}");
    assert!(!names.contains("ANTHROPIC"), "the server saw: {names}");
    assert_eq!(results[1]["content"][0]["text"], "(unset)");
    assert_eq!(results[2]["content"][0]["text"], "given-value");
    // stream-json and the transcript carry MCP calls like any other tool call.
    assert!(
        out.stdout.contains("\"mcp__local__env_names\""),
        "{}",
        out.stdout
    );
    let runs = dir.path().join(".cadre/runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let transcript = std::fs::read_to_string(run.join("transcript.jsonl")).unwrap();
    assert!(transcript.contains("given-value"));
    assert!(!transcript.contains("sk-secret-for-mcp"));
}

#[tokio::test]
async fn mcp_list_shows_tools_and_check_reports_a_server_that_fails_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let bin = mcp_server_binary();
    write_config(
        dir.path(),
        json!({
            "good": {"command": bin},
            "bad": {"command": bin, "args": ["--fail-start", "missing DATABASE_URL"]}
        }),
    );
    let home = trusting_home(dir.path()).await;
    let home = [("HOME", home.path().to_str().unwrap())];
    let out = cadre_env(dir.path(), &home, &["mcp", "list"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stdout.contains("mcp__good__echo"), "{}", out.stdout);
    assert!(out.stdout.contains("mcp__good__add"), "{}", out.stdout);
    assert!(out.stdout.contains("bad") && out.stdout.contains("FAILED"));
    let out = cadre_env(dir.path(), &home, &["mcp", "check"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("missing DATABASE_URL"),
        "{}",
        out.stdout
    );
    // A missing --mcp-config file is a usage error, not a silent no-op.
    let out = cadre_env(
        dir.path(),
        &[],
        &["mcp", "list", "--mcp-config", "nope.json"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("nope.json"));
    // Only the good one, named by a file of its own: exit 0.
    std::fs::remove_file(dir.path().join(".mcp.json")).unwrap();
    let own = dir.path().join("servers.json");
    std::fs::write(
        &own,
        json!({"mcpServers": {"good": {"command": bin}}}).to_string(),
    )
    .unwrap();
    let out = cadre_env(
        dir.path(),
        &[],
        &["mcp", "check", "--mcp-config", own.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

#[tokio::test]
async fn a_server_that_fails_in_a_run_is_told_as_a_cadre_warning() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        json!({"bad": {"command": mcp_server_binary(), "args": ["--fail-start", "missing DATABASE_URL"]}}),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("done without it"), Reply::text("again")],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--trust-project", "q"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let told: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("MCP server"))
        .collect();
    assert_eq!(told.len(), 1, "{}", out.stderr);
    assert!(
        told[0].starts_with("cadre: warning: main: MCP server \"bad\" is not available: "),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains(" WARN "),
        "a raw log line: {}",
        out.stderr
    );
    // With -v it is a log line again, with its time and level.
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["-v", "run", "--trust-project", "q"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains(" WARN ") && l.contains("MCP server \"bad\"")),
        "{}",
        out.stderr
    );
}

/// The published filesystem server from npm, as a user would install it (`.ci/run`
/// installs it; elsewhere the test is ignored, with the reason).
#[tokio::test]
#[cfg_attr(
    not(has_npm_mcp),
    ignore = "needs the npm MCP server: npm install --prefix target/npm-mcp @modelcontextprotocol/server-filesystem (as .ci/run does)"
)]
async fn mcp_list_works_with_a_published_server_from_npm() {
    let Some(bin) = prereq::find_or_skip(
        &prereq::NPM_MCP_FILESYSTEM,
        "npm install --prefix target/npm-mcp @modelcontextprotocol/server-filesystem",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello\n").unwrap();
    write_config(
        dir.path(),
        json!({"files": {"command": bin, "args": ["."]}}),
    );
    let home = trusting_home(dir.path()).await;
    let home = [("HOME", home.path().to_str().unwrap())];
    let out = cadre_env(dir.path(), &home, &["mcp", "list"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for tool in ["mcp__files__read_text_file", "mcp__files__list_directory"] {
        assert!(out.stdout.contains(tool), "{}", out.stdout);
    }
}
