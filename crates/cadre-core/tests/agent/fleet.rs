use super::*;
use cadre_core::{AgentSpec, Limits, Mode, Orchestrator, Registry, RunSummary};

const SUBAGENT: &str = "You are a subagent";

fn orchestrator(
    server: &MockServer,
    dir: &std::path::Path,
    registry: Registry,
    limits: Limits,
    budget: Option<u64>,
) -> (Arc<Orchestrator>, Arc<Mutex<Vec<Event>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let mut builder = mock_builder(server, dir)
        .registry(registry)
        .limits(limits)
        .runs_dir(dir.join(".cadre/runs"))
        .on_event(move |e| sink.lock().unwrap().push(e));
    if let Some(tokens) = budget {
        builder = builder.budget_tokens(tokens);
    }
    (builder.build().unwrap(), seen)
}

async fn run(o: &Arc<Orchestrator>, prompt: &str) -> (AgentOutcome, RunSummary) {
    o.run("main", prompt).await.unwrap()
}

fn subagent_requests(server: &MockServer) -> Vec<cadre_testkit::Captured> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.system_text().contains(SUBAGENT))
        .collect()
}

#[tokio::test]
async fn four_subagents_overlap_stay_isolated_and_report_only_their_final_text() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let calls = [
        ("t1", "explore", "Find alpha"),
        ("t2", "explore", "Find beta"),
        ("t3", "plan", "Plan gamma"),
        ("t4", "explore", "Find delta"),
    ];
    server.route(
        Match::FirstUserContains("PARENT TASK".into()),
        vec![Reply::tasks(calls), Reply::text("all four reported")],
    );
    server.route(
        Match::FirstUserContains("Find alpha".into()),
        vec![
            Reply::tool_use("a1", "list_files", json!({})),
            Reply::text("alpha lives in a.rs"),
        ],
    );
    server.route(
        Match::FirstUserContains("Find beta".into()),
        vec![Reply::text("beta lives in b.rs")],
    );
    server.route(
        Match::FirstUserContains("Plan gamma".into()),
        vec![Reply::text("1. do gamma")],
    );
    server.route(
        Match::FirstUserContains("Find delta".into()),
        vec![Reply::error_status(
            400,
            "invalid_request_error",
            "delta exploded",
        )],
    );
    // Each subagent's first request is held until all four wait at once: the test can
    // only pass if the four conversations really overlap, however slow the machine.
    server.hold_until_waiting(
        Match::SystemContains(SUBAGENT.into()),
        4,
        Duration::from_secs(60),
    );
    let (o, _) = orchestrator(
        &server,
        dir.path(),
        Registry::shipped(),
        Limits::default(),
        None,
    );
    let (outcome, summary) = run(&o, "PARENT TASK: survey the code").await;
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(outcome.text, "all four reported");

    // No subagent saw the parent's conversation: each starts from its own prompt alone.
    let subs = subagent_requests(&server);
    assert_eq!(subs.len(), 5);
    for r in &subs {
        assert!(!serde_json::to_string(&r.body["messages"])
            .unwrap()
            .contains("PARENT TASK"));
        let first = &r.messages()[0];
        assert_eq!(first["role"], "user");
        assert!(["Find alpha", "Find beta", "Plan gamma", "Find delta"]
            .contains(&r.first_user_text().as_str()));
    }
    // Read-only types are offered no writing tools, and no Task.
    for r in subs.iter().filter(|r| r.first_user_text() != "Plan gamma") {
        let tools = r.tool_names();
        assert!(tools.contains(&"read_file".to_string()), "{tools:?}");
        for banned in ["write_file", "edit_file", "Task"] {
            assert!(
                !tools.contains(&banned.to_string()),
                "explore offered {banned}: {tools:?}"
            );
        }
    }
    // The parent's tool results are exactly the subagents' final texts, in call order;
    // the failed one is an error that says why, and the others are intact.
    let parent_last = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text().contains("PARENT TASK"))
        .unwrap();
    let results = parent_last.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone();
    let texts: Vec<String> = results
        .iter()
        .map(|r| r["content"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        texts[..3],
        ["alpha lives in a.rs", "beta lives in b.rs", "1. do gamma"]
    );
    for r in &results[..3] {
        assert!(r.get("is_error").is_none_or(|v| v == false));
    }
    assert_eq!(results[3]["is_error"], true);
    assert!(
        texts[3].contains("delta exploded") && texts[3].contains("main/explore#3"),
        "{}",
        texts[3]
    );

    // Usage rolls up per agent and per type; transcripts exist for every agent.
    assert_eq!(summary.usage.agents.len(), 5);
    assert_eq!(summary.usage.by_type["explore"].agents, 3);
    assert_eq!(summary.usage.by_type["plan"].agents, 1);
    let run_dir = dir.path().join(".cadre/runs").join(summary.run_id.unwrap());
    for name in [
        "main",
        "main/explore#1",
        "main/explore#2",
        "main/plan#1",
        "main/explore#3",
    ] {
        let text = cadre_testkit::transcript::text_of(&run_dir, name);
        assert!(text.starts_with("{\"t\""), "{name}: {text}");
        for line in text.lines() {
            serde_json::from_str::<Value>(line).unwrap();
        }
        assert!(
            text.lines()
                .last()
                .unwrap()
                .contains("\"type\":\"outcome\""),
            "{name}"
        );
    }
    assert!(run_dir.join("summary.json").exists());
}

fn delegator() -> AgentSpec {
    AgentSpec::builder("delegator")
        .description("Delegates further.")
        .mode(Mode::Subagent)
        .model("haiku")
        .tools(["*"])
        .disallowed_tools(Vec::<String>::new())
        .read_only(false)
        .network(true)
        .max_turns(5)
        .skills(Vec::<String>::new())
        .prompt("Delegate.")
        .build()
}

#[tokio::test]
async fn the_depth_limit_takes_task_away_and_unknown_types_are_errors() {
    for (max_depth, offered) in [(1u32, false), (2, true)] {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        server.route(
            Match::FirstUserContains("PARENT".into()),
            vec![
                Reply::tasks([("t1", "delegator", "Go deeper"), ("t2", "wizard", "Cast")]),
                Reply::text("done"),
            ],
        );
        server.route(
            Match::FirstUserContains("Go deeper".into()),
            vec![Reply::text("deep enough")],
        );
        let mut registry = Registry::shipped();
        registry.insert(delegator());
        let limits = Limits::default().max_depth(max_depth);
        let (o, _) = orchestrator(&server, dir.path(), registry, limits, None);
        let (outcome, _) = run(&o, "PARENT").await;
        assert_eq!(outcome.stop, StopKind::Done);
        let sub = subagent_requests(&server).pop().unwrap();
        assert_eq!(
            sub.tool_names().contains(&"Task".to_string()),
            offered,
            "max_depth {max_depth}"
        );
        assert_eq!(sub.body["model"], "claude-haiku-5-5");
        let parent_last = server
            .requests()
            .into_iter()
            .rfind(|r| r.first_user_text() == "PARENT")
            .unwrap();
        let results = parent_last.messages().last().unwrap()["content"].clone();
        assert_eq!(results[0]["content"][0]["text"], "deep enough");
        assert_eq!(results[1]["is_error"], true);
        let why = results[1]["content"][0]["text"].as_str().unwrap();
        assert!(
            why.contains("unknown subagent_type \"wizard\"") && why.contains("explore"),
            "{why}"
        );
    }
}

#[tokio::test]
async fn max_parallel_one_serialises_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let calls: Vec<_> = (1..=4)
        .map(|i| (format!("t{i}"), "explore".to_owned(), format!("Job {i}")))
        .collect();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks(calls), Reply::text("done")],
    );
    for i in 1..=4 {
        server.route(
            Match::FirstUserContains(format!("Job {i}")),
            vec![
                Reply::tool_use(&format!("l{i}"), "list_files", json!({})),
                Reply::text(&format!("job {i} done")),
            ],
        );
    }
    let limits = Limits::default().max_parallel(1);
    let (o, _) = orchestrator(&server, dir.path(), Registry::shipped(), limits, None);
    let (outcome, summary) = run(&o, "PARENT").await;
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(summary.usage.agents.len(), 5);
    assert_eq!(server.requests().len(), 2 + 4 * 2);
    assert_eq!(server.max_in_flight(), 1);
}

#[tokio::test]
async fn the_shared_budget_stops_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let calls: Vec<_> = (1..=2)
        .map(|i| (format!("t{i}"), "explore".to_owned(), format!("Job {i}")))
        .collect();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks(calls).usage(100, 10, 0, 0),
            Reply::text("done"),
        ],
    );
    for i in 1..=2 {
        let replies = (0..10)
            .map(|k| {
                Reply::tool_use(&format!("l{i}{k}"), "list_files", json!({})).usage(300, 10, 0, 0)
            })
            .collect();
        server.route(Match::FirstUserContains(format!("Job {i}")), replies);
    }
    let (o, _) = orchestrator(
        &server,
        dir.path(),
        Registry::shipped(),
        Limits::default(),
        Some(1000),
    );
    let (outcome, summary) = run(&o, "PARENT").await;
    // The subagents stop on the budget, and so does the parent before its next request.
    assert_eq!(outcome.stop, StopKind::Budget);
    for a in summary
        .usage
        .agents
        .iter()
        .filter(|a| a.agent_type == "explore")
    {
        assert_eq!(a.stop, StopKind::Budget, "{}", a.path);
    }
    let used = summary.usage.total.usage.total();
    assert!((1000..1000 + 2 * 310 + 110).contains(&used), "used {used}");
}

#[tokio::test]
async fn cancelling_stops_every_agent_and_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let calls: Vec<_> = (1..=3)
        .map(|i| (format!("t{i}"), "code".to_owned(), format!("Job {i}")))
        .collect();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks(calls), Reply::text("never")],
    );
    for i in 1..=3 {
        server.route(
            Match::FirstUserContains(format!("Job {i}")),
            vec![
                Reply::tool_use(
                    &format!("b{i}"),
                    "bash",
                    json!({"command": format!("echo $$ > pid{i}; sleep 60")}),
                ),
                Reply::text("never"),
            ],
        );
    }
    let (o, _) = orchestrator(
        &server,
        dir.path(),
        Registry::shipped(),
        Limits::default(),
        None,
    );
    let cancel = o.cancel_token();
    let root = dir.path().to_path_buf();
    let watcher = tokio::spawn(async move {
        for _ in 0..3000 {
            if (1..=3).all(|i| {
                std::fs::read_to_string(root.join(format!("pid{i}")))
                    .is_ok_and(|s| s.ends_with('\n'))
            }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    });
    let (outcome, summary) = run(&o, "PARENT").await;
    watcher.await.unwrap();
    assert_eq!(outcome.stop, StopKind::Cancelled);
    assert_eq!(summary.usage.agents.len(), 4);
    for a in &summary.usage.agents {
        assert_eq!(a.stop, StopKind::Cancelled, "{}", a.path);
    }
    for i in 1..=3 {
        let pid: i32 = std::fs::read_to_string(dir.path().join(format!("pid{i}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "command {i} survived"
        );
    }
}

#[tokio::test]
async fn two_code_subagents_editing_one_file_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shared.txt"), "start\n").unwrap();
    let server = MockServer::start().await;
    let calls: Vec<_> = (1..=2)
        .map(|i| (format!("t{i}"), "code".to_owned(), format!("Writer {i}")))
        .collect();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks(calls), Reply::text("done")],
    );
    for i in 1..=2 {
        // Each writer reads, inserts its line after "start", then reads and tries again.
        let edit = |id: &str| {
            let new = format!("start\nline {i}\n");
            Reply::tool_use(
                id,
                "edit_file",
                json!({"path": "shared.txt", "old_string": "start\n", "new_string": new}),
            )
        };
        server.route(
            Match::FirstUserContains(format!("Writer {i}")),
            vec![
                Reply::tool_use(
                    &format!("r{i}a"),
                    "read_file",
                    json!({"path": "shared.txt"}),
                ),
                edit(&format!("e{i}a")),
                Reply::tool_use(
                    &format!("r{i}b"),
                    "read_file",
                    json!({"path": "shared.txt"}),
                ),
                edit(&format!("e{i}b")),
                Reply::text(&format!("writer {i} done")),
            ],
        );
    }
    // Both writers' edits are held until both have read the file, so their edits race.
    server.hold_until_waiting(
        Match::LastUserContains("start".into()),
        2,
        Duration::from_secs(60),
    );
    let (o, _) = orchestrator(
        &server,
        dir.path(),
        Registry::shipped(),
        Limits::default(),
        None,
    );
    let (outcome, _) = run(&o, "PARENT").await;
    assert_eq!(outcome.stop, StopKind::Done);

    // Every edit reported as done is in the file; every other one was refused as stale.
    let text = std::fs::read_to_string(dir.path().join("shared.txt")).unwrap();
    let results: Vec<Value> = server
        .requests()
        .iter()
        .flat_map(|r| {
            r.messages().last().unwrap()["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|b| {
            b["tool_use_id"]
                .as_str()
                .is_some_and(|id| id.starts_with('e'))
        })
        .collect();
    assert_eq!(results.len(), 4);
    let mut stale = 0;
    for i in 1..=2 {
        let ok = results
            .iter()
            .filter(|b| {
                b["tool_use_id"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("e{i}"))
            })
            .filter(|b| b.get("is_error").is_none_or(|v| v == false))
            .count();
        assert_eq!(
            text.matches(&format!("line {i}\n")).count(),
            ok,
            "writer {i}: {text:?}"
        );
    }
    for b in &results {
        if b["is_error"] == true {
            assert!(
                b["content"]
                    .to_string()
                    .contains("changed since you last read it"),
                "{b}"
            );
            stale += 1;
        }
    }
    assert!(
        stale >= 1,
        "the racing edits were never detected as stale: {text:?}"
    );
}
