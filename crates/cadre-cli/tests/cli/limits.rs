use super::*;

/// An agent type `capped` whose YAML limits allow 2 turns (its `max_turns` 30), and a
/// Claude Code agent `short` whose `maxTurns` allows 1.
fn write_limited_types(dir: &Path) {
    write_file(
        &dir.join(".cadre/agents/capped.yaml"),
        "name: capped\ndescription: Works under limits.\nmode: subagent\ntools: [read_file]\nmax_turns: 30\nlimits: {turns: \"2\", tokens: 50_000, time: 5m}\nprompt: You work under limits.\n",
    );
    write_file(
        &dir.join(".claude/agents/short.md"),
        "---\nname: short\ndescription: Works briefly.\ntools: Read\nmaxTurns: 1\n---\nYou work briefly.\n",
    );
}

/// Requests whose first user message is `prompt`.
fn requests_of(server: &MockServer, prompt: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.first_user_text() == prompt)
        .count()
}

#[tokio::test]
async fn limits_from_an_agent_types_yaml_and_a_claude_files_max_turns_hold() {
    let dir = tempfile::tempdir().unwrap();
    write_limited_types(dir.path());
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tasks([("t1", "capped", "Capped job"), ("t2", "short", "Short job")]),
            Reply::text("both stopped"),
        ],
    );
    for job in ["Capped job", "Short job"] {
        let reading = (0..6)
            .map(|i| {
                Reply::tool_use(
                    &format!("r{i}"),
                    "read_file",
                    json!({"path": "missing.txt"}),
                )
            })
            .collect();
        server.route(Match::FirstUserContains(job.into()), reading);
    }
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "Survey the code"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        requests_of(&server, "Capped job"),
        2,
        "its YAML limits allow 2 turns"
    );
    assert_eq!(
        requests_of(&server, "Short job"),
        1,
        "its maxTurns allows 1"
    );
    let show = cadre_env(dir.path(), &[], &["runs", "show", "latest"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    for agent in ["capped#1", "short#1"] {
        let row = show
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(agent))
            .unwrap_or_else(|| panic!("no {agent} in:\n{}", show.stdout));
        assert!(row.contains("turn limit"), "{row}");
    }
}

#[tokio::test]
async fn a_time_limit_stops_the_agent_and_the_run_exits_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join(".cadre/agents/timed.yaml"),
        "name: timed\ndescription: Has little time.\nmode: primary\ntools: [read_file]\nlimits: {time: 4}\nprompt: You are quick.\n",
    );
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(Match::Any, vec![Reply::text("too late")]);
    // Its request is held until the run has ended, so only its time limit can end it —
    // whether it runs out before the request is sent or while it is held.
    let _held = server.gate(Match::Any);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--agent", "timed", "Wait"],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("time limit"), "{}", out.stderr);
    let list = cadre_env(dir.path(), &[], &["runs", "list"]).await;
    assert!(list.stdout.contains("time limit"), "{}", list.stdout);
}

#[tokio::test]
async fn agents_check_reports_bad_limits() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, limits: &str| {
        write_file(
            &dir.path().join(format!(".cadre/agents/{name}.yaml")),
            &format!("name: {name}\ndescription: Has limits.\nlimits: {limits}\nprompt: Work.\n"),
        );
    };
    write("words", "{tokens: lots}");
    write("zero", "{turns: 0}");
    write("typo", "{tokns: 5}");
    write("fine", "{tokens: \"50_000\", turns: 10, time: 90s}");
    let out = cadre_offline(dir.path(), &["agents", "check", "--strict"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let line = |file: &str| {
        out.stdout
            .lines()
            .find(|l| l.contains(file))
            .unwrap_or_else(|| panic!("no problem of {file} in:\n{}", out.stdout))
            .to_owned()
    };
    assert!(
        line("words.yaml").contains("a whole number"),
        "{}",
        out.stdout
    );
    assert!(
        line("zero.yaml").contains("limits.turns must be above 0"),
        "{}",
        out.stdout
    );
    assert!(line("typo.yaml").contains("tokns"), "{}", out.stdout);
    assert!(!out.stdout.contains("fine.yaml"), "{}", out.stdout);
}
