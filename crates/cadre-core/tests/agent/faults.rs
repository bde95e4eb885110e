use super::*;
use async_trait::async_trait;
use cadre_core::{Limits, Orchestrator};
use cadre_tools::{Tool, ToolError, ToolOutput};

struct Panics;

#[async_trait]
impl Tool for Panics {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> String {
        "Always panics.".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn is_read_only(&self) -> bool {
        true
    }
    async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        panic!("the tool blew up")
    }
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result_and_its_siblings_finish() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "fine\n").unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                ("t1", "explode", json!({})),
                ("t2", "read_file", json!({"path": "a.txt"})),
            ]),
            Reply::text("carried on"),
        ],
    );
    let (mut agent, _) = agent(&server, dir.path(), 5, None);
    agent.tools.insert(Arc::new(Panics));
    let outcome = agent.run(vec![Message::user_text("go")]).await;
    assert_eq!(outcome.stop, StopKind::Done);
    let results = tool_results(&server, 1);
    assert_eq!(results[0]["is_error"], true);
    assert!(results[0]["content"]
        .to_string()
        .contains("the tool blew up"));
    assert!(results[1]["content"].to_string().contains("fine"));
}

struct IgnoresCancel(Arc<tokio::sync::Notify>);

#[async_trait]
impl Tool for IgnoresCancel {
    fn name(&self) -> &str {
        "stubborn"
    }
    fn description(&self) -> String {
        "Never returns.".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn is_read_only(&self) -> bool {
        true
    }
    async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.0.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_tool_that_ignores_cancellation_cannot_keep_the_agent_running() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("t1", "stubborn", json!({})),
            Reply::text("never"),
        ],
    );
    let (mut agent, _) = agent(&server, dir.path(), 5, None);
    let started = Arc::new(tokio::sync::Notify::new());
    agent.tools.insert(Arc::new(IgnoresCancel(started.clone())));
    let cancel = agent.ctx.cancel.clone();
    tokio::spawn(async move {
        started.notified().await;
        cancel.cancel();
    });
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        agent.run(vec![Message::user_text("go")]),
    )
    .await
    .expect("the agent never stopped");
    assert_eq!(outcome.stop, StopKind::Cancelled);
}

#[tokio::test]
async fn endless_and_enormous_output_is_capped_and_the_command_killed() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_uses(vec![
                // Never ends: killed at its timeout.
                ("t1", "bash", json!({"command": "yes", "timeout_ms": 2000})),
                // A gigabyte, then exits.
                (
                    "t2",
                    "bash",
                    json!({"command": "head -c 1000000000 /dev/zero | tr '\\0' a; echo; echo END"}),
                ),
            ]),
            Reply::text("survived"),
        ],
    );
    let (agent, _) = agent(&server, dir.path(), 5, None);
    let cap = agent.ctx.limits.max_output_bytes;
    let outcome = agent.run(vec![Message::user_text("go")]).await;
    assert_eq!(outcome.stop, StopKind::Done);
    let results = tool_results(&server, 1);
    for r in &results {
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.len() <= cap + 200, "{} bytes came back", text.len());
    }
    let endless = results[0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(results[0]["is_error"], true);
    assert!(
        endless.contains("timed out"),
        "{}",
        &endless[endless.len() - 200..]
    );
    let huge = results[1]["content"][0]["text"].as_str().unwrap();
    assert!(huge.starts_with("aaaa") && huge.trim_end().ends_with("END"));
    assert!(huge.contains("cut from the middle"));
}

fn orchestrator(server: &MockServer, dir: &std::path::Path) -> Arc<Orchestrator> {
    mock_builder(server, dir)
        .limits(Limits::default().max_parallel(64))
        .build()
        .unwrap()
}

#[tokio::test]
async fn five_hundred_task_calls_in_one_turn_meet_the_fan_out_cap() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let calls = (0..500).map(|i| (format!("t{i}"), "explore".to_owned(), format!("Job {i}.")));
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks(calls), Reply::text("done")],
    );
    // Each admitted subagent waits until all 64 are running, so the refusals happen while
    // the cap is full, whatever the machine's speed.
    server.route(
        Match::SystemContains("You are a subagent".into()),
        (0..64).map(|_| Reply::text("ok")).collect(),
    );
    server.hold_until_waiting(
        Match::SystemContains("You are a subagent".into()),
        64,
        Duration::from_secs(60),
    );
    let o = orchestrator(&server, dir.path());
    let (outcome, summary) = o.run("main", "PARENT").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(summary.usage.by_type["explore"].agents, 64);
    let last = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text() == "PARENT")
        .unwrap();
    let results = last.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(results.len(), 500);
    let refused: Vec<&Value> = results.iter().filter(|r| r["is_error"] == true).collect();
    assert_eq!(refused.len(), 436);
    assert!(
        refused[0]["content"]
            .to_string()
            .contains("the limit is 64"),
        "{}",
        refused[0]
    );
}

#[tokio::test]
#[cfg_attr(
    not(has_landlock),
    ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
)]
async fn a_read_only_subagent_cannot_write_through_bash_but_a_code_subagent_can_inside_only() {
    let status = cadre_tools::landlock_status();
    if status.abi < cadre_tools::sandbox::MIN_READ_ONLY_ABI {
        // CI sets CADRE_REQUIRE_LANDLOCK: there a missing sandbox fails instead of skipping.
        assert!(
            std::env::var_os("CADRE_REQUIRE_LANDLOCK").is_none(),
            "CADRE_REQUIRE_LANDLOCK is set but {}",
            status.summary
        );
        eprintln!(
            "skipped: this kernel has no usable Landlock ({})",
            status.summary
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "original\n").unwrap();
    std::fs::write(outside.path().join("target.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
    let o = outside.path().display().to_string();
    let attempts = [
        "echo x > keep.txt".to_owned(),
        "echo x >> keep.txt".to_owned(),
        "touch new.txt".to_owned(),
        "rm keep.txt".to_owned(),
        "mkdir made".to_owned(),
        "sed -i s/original/changed/ keep.txt".to_owned(),
        "echo x > out/target.txt".to_owned(),
        format!("echo x > {o}/target.txt"),
        "echo x > /proc/self/cwd/keep.txt".to_owned(),
        "echo x > /tmp/cadre-redteam-escape.txt".to_owned(),
    ];
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_uses(vec![
                ("t1", "Task", json!({"description": "try writes", "prompt": "Red team.", "subagent_type": "explore"})),
                ("t2", "Task", json!({"description": "write inside", "prompt": "Code team.", "subagent_type": "code"})),
            ]),
            Reply::text("done"),
        ],
    );
    let red: Vec<(String, &str, Value)> = attempts
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("r{i}"), "bash", json!({"command": c})))
        .collect();
    server.route(
        Match::FirstUserContains("Red team.".into()),
        vec![
            Reply::tool_uses(
                red.iter()
                    .map(|(i, n, v)| (i.as_str(), *n, v.clone()))
                    .collect(),
            ),
            Reply::text("nothing written"),
        ],
    );
    server.route(
        Match::FirstUserContains("Code team.".into()),
        vec![
            Reply::tool_use(
                "c1",
                "bash",
                json!({"command": format!("echo made > inside.txt; echo x > {o}/escape.txt")}),
            ),
            Reply::text("tried"),
        ],
    );
    let (outcome, _) = orchestrator(&server, dir.path())
        .run("main", "PARENT")
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("target.txt")).unwrap(),
        "outside\n"
    );
    for gone in ["new.txt", "made"] {
        assert!(!dir.path().join(gone).exists(), "{gone} was created");
    }
    assert!(!std::path::Path::new("/tmp/cadre-redteam-escape.txt").exists());
    // The writer wrote inside the workspace, and not outside it.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
        "made\n"
    );
    assert!(!outside.path().join("escape.txt").exists());
}
