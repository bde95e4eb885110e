use super::mock::mock_builder;
use cadre_core::workflow::{ItemCall, ItemResult, WorkItem, Workflow};
use cadre_core::{AgentSpec, JournaledRun, Mode, StopKind};
use cadre_testkit::{Match, MockServer, Reply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema every item's answer is checked against.
fn schema() -> Value {
    json!({"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"], "additionalProperties": false})
}

/// `n` items, each asking for its own label; `edited` items get another prompt.
fn items(n: usize, edited: usize) -> Vec<WorkItem> {
    (0..n)
        .map(|i| {
            let words = if i < edited { "Relabel" } else { "Label" };
            let call = ItemCall::new("explore", format!("{words} item-{i:03}.")).schema(schema());
            WorkItem::new(format!("k{i}"), call)
        })
        .collect()
}

/// A mock that answers each item's request with its label.
fn routes(server: &MockServer, n: usize) {
    for i in 0..n {
        let answer = json!({"label": format!("label-{i}")}).to_string();
        server.route(
            Match::FirstUserContains(format!("item-{i:03}.")),
            vec![Reply::text(&answer); 3],
        );
    }
    server.allow_unused_replies();
}

/// The results file of the only run in `runs`, by item key.
fn results(runs: &Path) -> (PathBuf, Vec<ItemResult>) {
    let dir = std::fs::read_dir(runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let mut lines: Vec<ItemResult> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines.sort_by(|a, b| a.key.cmp(&b.key));
    (dir, lines)
}

/// Requests the mock received for items (every request is one item's here).
fn requests(server: &MockServer) -> usize {
    server.requests().len()
}

#[tokio::test]
async fn a_workflow_runs_each_item_once_and_a_resume_runs_only_changed_calls() {
    let server = MockServer::start().await;
    routes(&server, 20);
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".cadre/runs");
    let build = || {
        mock_builder(&server, dir.path())
            .runs_dir(&runs)
            .build()
            .unwrap()
    };
    let mut workflow = Workflow::from_items("labels", items(20, 0).into_iter()).concurrency(4);
    let mut stream = workflow.results();
    let summary = build().run_workflow(workflow).await.unwrap();
    assert_eq!(summary.stop, StopKind::Done, "{}", summary.answer);
    let mut streamed = 0;
    while stream.try_recv().is_ok() {
        streamed += 1;
    }
    assert_eq!(streamed, 20, "the stream told every item");
    let (run_dir, first) = results(&runs);
    assert_eq!(first.len(), 20);
    for r in &first {
        assert!(r.is_completed(), "{r:?}");
        assert!(r.output["label"].as_str().unwrap().starts_with("label-"));
    }
    assert_eq!(requests(&server), 20, "one request per item");
    assert_eq!(
        summary.usage.by_type.len(),
        1,
        "every item is an explore agent"
    );

    // Resumed with the same items: nothing is sent again, the results are the same.
    let opened = JournaledRun::open(&run_dir).unwrap().unwrap();
    let again = Workflow::from_items("labels", items(20, 0).into_iter());
    build().resume_workflow(opened, again).await.unwrap();
    assert_eq!(requests(&server), 20, "a finished call is never made again");
    let (_, second) = results(&runs);
    assert_eq!(second, first, "the results file is written again whole");

    // Three prompts edited: only their calls run.
    let opened = JournaledRun::open(&run_dir).unwrap().unwrap();
    let edited = Workflow::from_items("labels", items(20, 3).into_iter());
    build().resume_workflow(opened, edited).await.unwrap();
    assert_eq!(requests(&server), 23, "only the changed calls ran");
    let (_, third) = results(&runs);
    assert_eq!(third.len(), 20);
    let changed = third.iter().zip(&first).filter(|(a, b)| a.call != b.call);
    assert_eq!(changed.count(), 3);
}

#[tokio::test]
async fn a_refused_key_stops_scheduling_and_bad_input_is_its_own_outcome() {
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("item-005.".into()),
        vec![Reply::error_status(
            401,
            "authentication_error",
            "invalid x-api-key",
        )],
    );
    routes(&server, 12);
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".cadre/runs");
    let orchestrator = mock_builder(&server, dir.path())
        .runs_dir(&runs)
        .build()
        .unwrap();
    let mut all = items(12, 0);
    all.insert(2, WorkItem::bad("broken", Some(3), "not JSON"));
    let workflow = Workflow::from_items("labels", all.into_iter()).concurrency(1);
    let summary = orchestrator.run_workflow(workflow).await.unwrap();
    assert!(
        matches!(&summary.stop, StopKind::ModelError(e) if e.contains("401")),
        "{:?}",
        summary.stop
    );
    assert!(orchestrator.provider_refused().is_some());
    // Items 0–4 ran, 5 was refused, nothing started after it.
    assert_eq!(requests(&server), 6);
    let (_, lines) = results(&runs);
    assert_eq!(lines.len(), 13, "one line per item, whatever happened");
    let bad = lines.iter().find(|r| r.key == "broken").unwrap();
    assert_eq!(bad.outcome, "failed: bad input");
    assert_eq!(bad.line, Some(3));
    let not_started = lines.iter().filter(|r| r.outcome == "cancelled").count();
    assert_eq!(not_started, 6, "{lines:?}");
}

#[tokio::test]
async fn a_failed_item_is_tried_again_as_a_fresh_call_and_the_reduce_reads_the_results() {
    let server = MockServer::start().await;
    // Item 1's first agent answers three times with no JSON: its answer is invalid.
    server.route(
        Match::FirstUserContains("item-001.".into()),
        vec![Reply::text("no json"); 3],
    );
    routes(&server, 3);
    server.route(
        Match::FirstUserContains("Summarise".into()),
        vec![Reply::text("three labels")],
    );
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".cadre/runs");
    let orchestrator = mock_builder(&server, dir.path())
        .runs_dir(&runs)
        .build()
        .unwrap();
    let workflow = Workflow::from_items("labels", items(3, 0).into_iter())
        .retries(1)
        .reduce("plan", |results| format!("Summarise {}", results.display()));
    let summary = orchestrator.run_workflow(workflow).await.unwrap();
    assert!(
        summary.answer.ends_with("three labels"),
        "{}",
        summary.answer
    );
    let (_, lines) = results(&runs);
    let retried = lines.iter().find(|r| r.key == "k1").unwrap();
    assert!(retried.is_completed(), "{retried:?}");
    assert_eq!(retried.attempts, 2);
    assert!(
        retried.call.as_deref().unwrap().ends_with("~1"),
        "{retried:?}"
    );
    let reduce = server
        .requests()
        .into_iter()
        .find(|r| r.body.to_string().contains("Summarise"))
        .unwrap();
    assert!(
        reduce.body.to_string().contains("results.jsonl"),
        "the reduce is told where the results are"
    );
}

/// A subagent type that may start subagents of its own.
fn delegator() -> AgentSpec {
    AgentSpec::builder("delegator")
        .description("Delegates further.")
        .mode(Mode::Subagent)
        .tools(["*"])
        .disallowed_tools(Vec::<String>::new())
        .max_turns(5)
        .skills(Vec::<String>::new())
        .prompt("Delegate.")
        .build()
}

/// Waits (up to a minute) until `ready`, polling.
async fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn after_a_refused_key_no_request_is_sent_and_no_subagent_starts() {
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job A."), ("t2", "delegator", "Job C.")]),
            Reply::text("done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job A.".into()),
        vec![Reply::error_status(403, "permission_error", "not allowed")],
    );
    // Job C's answer starts Job B, and comes only after Job A was refused.
    server.route(
        Match::FirstUserContains("Job C.".into()),
        vec![
            Reply::tasks([("t3", "explore", "Job B.")]),
            Reply::text("c done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job B.".into()),
        vec![Reply::text("b done")],
    );
    server.allow_unused_replies();
    let job_a = server.gate(Match::FirstUserContains("Job A.".into()));
    let job_c = server.gate(Match::FirstUserContains("Job C.".into()));
    let dir = tempfile::tempdir().unwrap();
    let orchestrator = mock_builder(&server, dir.path())
        .agent(delegator())
        .build()
        .unwrap();
    let running = orchestrator.clone();
    let run = tokio::spawn(async move { running.run("main", "PARENT").await });
    assert!(job_a.wait_for(1, Duration::from_secs(60)).await);
    assert!(job_c.wait_for(1, Duration::from_secs(60)).await);
    job_a.open();
    wait_until("the 403", || orchestrator.provider_refused().is_some()).await;
    job_c.open();
    let (outcome, summary) = run.await.unwrap().unwrap();
    // Job B's Task call came after the refusal: no subagent started for it, and the
    // primary's next request was never sent.
    assert_eq!(requests(&server), 3);
    assert!(
        matches!(&outcome.stop, StopKind::ModelError(e) if e.contains("not sent") && e.contains("403")),
        "{:?}",
        outcome.stop
    );
    assert!(orchestrator.provider_refused().unwrap().contains("403"));
    assert_eq!(summary.usage.by_type["explore"].agents, 1, "Job B started");
}

#[tokio::test]
async fn a_spent_budget_stops_scheduling_and_the_items_left_are_budget() {
    let server = MockServer::start().await;
    routes(&server, 5);
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".cadre/runs");
    let orchestrator = mock_builder(&server, dir.path())
        .runs_dir(&runs)
        .budget_tokens(1)
        .build()
        .unwrap();
    let workflow = Workflow::from_items("labels", items(5, 0).into_iter()).concurrency(1);
    let summary = orchestrator.run_workflow(workflow).await.unwrap();
    assert_eq!(summary.stop, StopKind::Budget, "{}", summary.answer);
    assert_eq!(requests(&server), 1, "the first item spent the budget");
    let (_, lines) = results(&runs);
    let left = lines.iter().filter(|r| r.outcome == "budget").count();
    assert_eq!(left, 4, "{lines:?}");
}

#[tokio::test]
async fn two_items_of_the_same_content_are_two_calls_each_remembered() {
    let server = MockServer::start().await;
    routes(&server, 1);
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".cadre/runs");
    let build = || {
        mock_builder(&server, dir.path())
            .runs_dir(&runs)
            .build()
            .unwrap()
    };
    let twins = || {
        let call = ItemCall::new("explore", "Label item-000.").schema(schema());
        vec![WorkItem::new("a", call.clone()), WorkItem::new("b", call)].into_iter()
    };
    build()
        .run_workflow(Workflow::from_items("twins", twins()))
        .await
        .unwrap();
    assert_eq!(requests(&server), 2, "each item its own call");
    let (dir_of_run, lines) = results(&runs);
    let (a, b) = (
        lines[0].call.clone().unwrap(),
        lines[1].call.clone().unwrap(),
    );
    assert_eq!(b, format!("{a}.1"), "the second carries its occurrence");
    let opened = JournaledRun::open(&dir_of_run).unwrap().unwrap();
    build()
        .resume_workflow(opened, Workflow::from_items("twins", twins()))
        .await
        .unwrap();
    assert_eq!(requests(&server), 2, "neither runs again");
}

#[tokio::test]
async fn each_item_is_told_as_it_starts_before_its_result() {
    let server = MockServer::start().await;
    routes(&server, 6);
    let dir = tempfile::tempdir().unwrap();
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (starts, ends) = (told.clone(), told.clone());
    let workflow = Workflow::from_items("labels", items(6, 0).into_iter())
        .concurrency(2)
        .on_start(move |s| {
            starts
                .lock()
                .unwrap()
                .push(format!("start {} {}", s.key, s.attempt))
        })
        .on_result(move |r| ends.lock().unwrap().push(format!("end {}", r.key)));
    let summary = mock_builder(&server, dir.path())
        .build()
        .unwrap()
        .run_workflow(workflow)
        .await
        .unwrap();
    assert_eq!(summary.stop, StopKind::Done, "{}", summary.answer);
    let told = told.lock().unwrap().clone();
    for i in 0..6 {
        let start = told.iter().position(|t| *t == format!("start k{i} 1"));
        let end = told.iter().position(|t| *t == format!("end k{i}"));
        assert!(start.is_some() && start < end, "{told:?}");
    }
    assert_eq!(told.len(), 12, "{told:?}");
}
