use super::*;
use cadre_core::Orchestrator;

fn task(id: &str, kind: &str, job: &str) -> (String, String, Value) {
    (
        id.to_owned(),
        "Task".to_owned(),
        json!({"description": job, "prompt": format!("{job}: do it"), "subagent_type": kind,
               "run_in_background": true}),
    )
}

fn turn(calls: Vec<(String, String, Value)>) -> Reply {
    Reply::tool_uses(
        calls
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
            .collect(),
    )
}

fn orchestrator(server: &MockServer, dir: &std::path::Path) -> Arc<Orchestrator> {
    mock_builder(server, dir)
        .runs_dir(dir.join(".cadre/runs"))
        .build()
        .unwrap()
}

fn parent_requests(server: &MockServer) -> Vec<cadre_testkit::Captured> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text() == "PARENT task")
        .collect()
}

#[tokio::test]
async fn results_arrive_through_task_output_and_when_the_parent_stops_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![
                task("t1", "explore", "Job A"),
                task("t2", "explore", "Job B"),
            ]),
            turn(vec![(
                "o1".into(),
                "TaskOutput".into(),
                json!({"task_id": "task_1", "wait": true}),
            )]),
            Reply::text("A is in; ending my turn"),
            Reply::text("all done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job A".into()),
        vec![Reply::text("A result")],
    );
    server.route(
        Match::FirstUserContains("Job B".into()),
        vec![Reply::text("B result")],
    );
    let o = orchestrator(&server, dir.path());
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    assert_eq!(outcome.text, "all done");
    let parent = parent_requests(&server);
    assert_eq!(parent.len(), 4);
    // Task returned at once with the task ids.
    let started = parent[1].messages().last().unwrap()["content"].clone();
    assert!(started[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("task_1"));
    assert!(started[1]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("task_2"));
    // TaskOutput waited for A and gave its final text.
    let output = &parent[2].messages().last().unwrap()["content"][0];
    assert_eq!(output["content"][0]["text"], "A result");
    // Ending the turn with B uncollected: B's result came as the next user message, and
    // only B's (A was collected already).
    let delivered = parent[3].last_user_text();
    assert!(
        delivered.contains("task_2") && delivered.contains("B result"),
        "{delivered}"
    );
    assert!(!delivered.contains("A result"), "{delivered}");
    assert_eq!(summary.usage.agents.len(), 3);
}

#[tokio::test]
async fn task_stop_cancels_a_background_subagent_and_kills_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("t1", "code", "Slow job")]),
            // Waits, in the parent's own bash, until the subagent's command is running.
            Reply::tool_use(
                "b1",
                "bash",
                json!({"command": "for i in $(seq 600); do [ -s slow.pid ] && break; sleep 0.1; done; cat slow.pid"}),
            ),
            Reply::tool_use("s1", "TaskStop", json!({"task_id": "task_1"})),
            Reply::text("stopped it"),
        ],
    );
    server.route(
        Match::FirstUserContains("Slow job".into()),
        vec![
            Reply::tool_use(
                "x1",
                "bash",
                json!({"command": "echo $$ > slow.pid; sleep 300", "timeout_ms": 600000}),
            ),
            Reply::text("never"),
        ],
    );
    let o = orchestrator(&server, dir.path());
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    assert_eq!(outcome.text, "stopped it");
    let parent = parent_requests(&server);
    let stop = &parent[3].messages().last().unwrap()["content"][0];
    assert_ne!(stop["is_error"], true, "{stop}");
    assert!(stop["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("stopped"));
    let child = summary
        .usage
        .agents
        .iter()
        .find(|a| a.path == "main/code#1")
        .unwrap();
    assert_eq!(child.stop, StopKind::Cancelled);
    // Its command was killed with it.
    let pid: i32 = std::fs::read_to_string(dir.path().join("slow.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    assert!(!alive, "the subagent's bash (pid {pid}) still runs");
    // A stopped task is not delivered again when the parent ends its turn.
    assert_eq!(parent.len(), 4);
}

#[tokio::test]
async fn a_stopped_background_subagent_and_a_fork_each_finish_once_and_stop_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let log = dir.path().join("hooks.log");
    let script = cadre_testkit::hooks::script(
        dir.path(),
        "log.sh",
        &format!("printf '%s\\n' \"$(cat)\" >> '{}'", log.display()),
    );
    let entry = json!([{"hooks": [{"type": "command", "command": script}]}]);
    let (hooks, warnings) = cadre_core::Hooks::from_json(
        &json!({"SubagentStart": entry, "SubagentStop": entry}),
        "settings",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    // The fork starts from the parent's conversation: its request is told by its prompt.
    server.route(
        Match::LastUserContains("Fork job".into()),
        vec![Reply::text("fork done")],
    );
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![
                task("t1", "code", "Slow job"),
                (
                    "f1".into(),
                    "Task".into(),
                    json!({"description": "Fork job", "prompt": "Fork job", "subagent_type": "fork"}),
                ),
            ]),
            Reply::tool_use(
                "b1",
                "bash",
                json!({"command": "for i in $(seq 600); do [ -s slow.pid ] && break; sleep 0.1; done; cat slow.pid"}),
            ),
            Reply::tool_use("s1", "TaskStop", json!({"task_id": "task_1"})),
            Reply::text("stopped it"),
        ],
    );
    server.route(
        Match::FirstUserContains("Slow job".into()),
        vec![Reply::tool_use(
            "x1",
            "bash",
            json!({"command": "echo $$ > slow.pid; sleep 300", "timeout_ms": 600000}),
        )],
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let o = mock_builder(&server, dir.path())
        .runs_dir(dir.path().join(".cadre/runs"))
        .hooks(hooks)
        .on_event(move |e| sink.lock().unwrap().push(e))
        .build()
        .unwrap();
    let (outcome, _) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.text, "stopped it");
    let mut open: std::collections::HashMap<String, i32> = Default::default();
    for e in events.lock().unwrap().iter() {
        match e {
            Event::Started { agent, .. } => *open.entry(agent.to_string()).or_default() += 1,
            Event::Finished { agent, .. } => *open.entry(agent.to_string()).or_default() -= 1,
            _ => {}
        }
    }
    assert_eq!(open.len(), 3, "{open:?}");
    assert!(open.values().all(|n| *n == 0), "{open:?}");
    let mut pairs: std::collections::HashMap<String, (u32, u32)> = Default::default();
    // (Each hook writes its line in one write, so lines of hooks at once never mix.)
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let pair = pairs
            .entry(v["agent_id"].as_str().unwrap_or_default().to_owned())
            .or_default();
        match v["hook_event_name"].as_str() {
            Some("SubagentStart") => pair.0 += 1,
            Some("SubagentStop") => pair.1 += 1,
            _ => {}
        }
    }
    assert_eq!(
        pairs.len(),
        2,
        "the background subagent and the fork: {pairs:?}"
    );
    assert!(pairs.values().all(|p| *p == (1, 1)), "{pairs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_subagent_of_a_run_given_up_still_runs_its_subagent_stop() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let log = dir.path().join("hooks.log");
    let script = cadre_testkit::hooks::script(
        dir.path(),
        "log.sh",
        &format!("printf '%s\\n' \"$(cat)\" >> '{}'", log.display()),
    );
    let entry = json!([{"hooks": [{"type": "command", "command": script}]}]);
    let (hooks, warnings) = cadre_core::Hooks::from_json(
        &json!({"SubagentStart": entry, "SubagentStop": entry}),
        "settings",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("t1", "code", "Slow job")]),
            Reply::text("waiting"),
        ],
    );
    server.route(
        Match::FirstUserContains("Slow job".into()),
        vec![Reply::text("slow done")],
    );
    let slow_asked = server.gate(Match::FirstUserContains("Slow job".into()));
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let o = mock_builder(&server, dir.path())
        .runs_dir(dir.path().join(".cadre/runs"))
        .hooks(hooks)
        .on_event(move |e| sink.lock().unwrap().push(e))
        .build()
        .unwrap();
    let runner = tokio::spawn({
        let o = o.clone();
        async move { o.run("main", "PARENT task").await }
    });
    assert!(
        slow_asked.wait_for(1, Duration::from_secs(60)).await,
        "the background subagent never asked"
    );
    // A second Ctrl-C: the run is given up and its future dropped, the parent's list of
    // background work with it. Its subagent is cancelled, not cut off: it ends as a
    // cancelled agent does, its SubagentStop included.
    o.abandon("PARENT task", 0);
    runner.abort();
    let stopped = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("\"SubagentStop\"")
    };
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !stopped() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "the background subagent never ran its SubagentStop"
    );
    slow_asked.open();
}
