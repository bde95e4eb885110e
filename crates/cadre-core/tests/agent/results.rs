use super::*;
use cadre_core::internal::read_steps;
use cadre_core::internal::AgentState;
use cadre_core::internal::CONTINUE_PROMPT;
use cadre_core::vocab::Step;
use cadre_core::{AgentSpec, Outcome, Registry};

/// A report of `lines` lines of exactly 50 bytes each, every line numbered.
fn long_report(lines: usize) -> String {
    (1..=lines)
        .map(|i| {
            format!(
                "{:<49}\n",
                format!("finding {i:05}: the code at this place says so")
            )
        })
        .collect()
}

/// The text of the tool_result answering `id` in any request the parent (first user message
/// `parent`) sent, with whether it is an error.
fn result_of(server: &MockServer, parent: &str, id: &str) -> (String, bool) {
    for r in server.requests() {
        if r.first_user_text() != parent {
            continue;
        }
        for m in r.messages() {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_result" && b["tool_use_id"] == id {
                    let text = b["content"][0]["text"].as_str().unwrap_or_default();
                    return (text.to_owned(), b["is_error"] == true);
                }
            }
        }
    }
    panic!("no tool_result for {id}");
}

/// `read_file`'s numbered output back to the file's text.
fn unnumbered(shown: &str) -> String {
    shown
        .lines()
        .filter(|l| !l.starts_with('['))
        .map(|l| format!("{}\n", l.split_once('\t').unwrap().1))
        .collect()
}

/// A read-only primary type that may delegate: the reader of long results in these tests.
fn reviewer() -> AgentSpec {
    let (spec, problems) = AgentSpec::parse_yaml(
        std::path::Path::new("reviewer.yaml"),
        "name: reviewer\ndescription: Reviews.\nmode: primary\nread_only: true\ntools: [read_file, Task]\nprompt: You review.\n",
    );
    assert!(problems.is_empty(), "{problems:?}");
    spec.unwrap()
}

fn with_events(
    builder: cadre_core::OrchestratorBuilder,
) -> (cadre_core::OrchestratorBuilder, Arc<Mutex<Vec<Event>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    (
        builder.on_event(move |e| sink.lock().unwrap().push(e)),
        seen,
    )
}

fn finished(events: &Mutex<Vec<Event>>, agent: &str) -> (Outcome, StopKind) {
    events
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            Event::Finished {
                agent: a,
                outcome,
                stop,
                ..
            } if a == agent => Some((*outcome, stop.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Finished event for {agent}"))
}

#[tokio::test]
async fn a_long_report_reaches_a_read_only_parent_as_head_size_and_path_and_read_file_gets_the_rest(
) {
    let dir = tempfile::tempdir().unwrap();
    // The run folder is outside the workspace: read_file may still read the report there.
    let runs = tempfile::tempdir().unwrap();
    let report = long_report(2_000);
    assert_eq!(report.len(), 100_000);
    let file = runs
        .path()
        .canonicalize()
        .unwrap()
        .join("r1/results/reviewer.explore-1.md");
    let path = file.to_str().unwrap();
    // 30 000 bytes a tool result, 2 000 of them kept for the note: 560 whole lines.
    let reads: Vec<(String, String, Value)> = (0..4)
        .map(|i| {
            let offset = 561 + i * 400;
            (
                format!("r{i}"),
                "read_file".to_owned(),
                json!({"path": path, "offset": offset, "limit": 400}),
            )
        })
        .collect();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job A: report everything")]),
            Reply::tool_uses(
                reads
                    .iter()
                    .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
                    .collect(),
            ),
            Reply::text("read it all"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job A".into()),
        vec![Reply::text(&report)],
    );
    let mut registry = Registry::shipped();
    registry.insert(reviewer());
    let o = mock_builder(&server, dir.path())
        .registry(registry)
        .runs_dir(runs.path())
        .run_id("r1")
        .build()
        .unwrap();
    let (outcome, summary) = o.run("reviewer", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());

    let (head, is_error) = result_of(&server, "PARENT task", "t1");
    assert!(!is_error, "{head}");
    assert!(head.len() <= 30_000, "{}", head.len());
    assert!(head.contains("100000 bytes (2000 lines)"), "{head}");
    assert!(head.contains(path) && head.contains("offset 561"), "{head}");
    assert!(head.contains(&report[..28_000]));
    assert!(!head.contains("finding 00561"));
    // The parent read the rest, and the head and the rest are the report, whole.
    let mut whole = report[..28_000].to_owned();
    for i in 0..4 {
        let (shown, is_error) = result_of(&server, "PARENT task", &format!("r{i}"));
        assert!(!is_error, "{shown}");
        whole.push_str(&unnumbered(&shown));
    }
    assert_eq!(whole, report);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), report);

    // Nothing lost in summary.json: the record names the file that keeps the report.
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(runs.path().join("r1/summary.json")).unwrap(),
    )
    .unwrap();
    let sub = saved["usage"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == "reviewer/explore#1")
        .unwrap();
    assert_eq!(sub["result_file"], "results/reviewer.explore-1.md");
    assert_eq!(sub["outcome"], "completed");
    assert_eq!(saved["outcome"], "completed");
    let kept = runs
        .path()
        .join("r1")
        .join(sub["result_file"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(kept).unwrap(), report);
    assert_eq!(
        summary.usage.agents[1].result_file.as_deref(),
        sub["result_file"].as_str()
    );
}

#[tokio::test]
async fn without_a_run_folder_a_long_background_report_is_kept_in_a_temporary_folder_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let report = long_report(1_000);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "Job B", "prompt": "Job B: report", "subagent_type": "explore",
                       "run_in_background": true}),
            ),
            Reply::tool_use("o1", "TaskOutput", json!({"task_id": "task_1", "wait": true})),
            Reply::text("got the head"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job B".into()),
        vec![Reply::text(&report)],
    );
    let o = mock_builder(&server, dir.path()).build().unwrap();
    let (outcome, _) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let (head, is_error) = result_of(&server, "PARENT task", "o1");
    assert!(
        !is_error && head.contains("50000 bytes (1000 lines)"),
        "{head}"
    );
    // The path in the note is a file in the system's temporary folder, holding the report.
    let path = head
        .split("read_file (path \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let file = std::path::PathBuf::from(path);
    assert!(
        file.starts_with(std::env::temp_dir().canonicalize().unwrap()),
        "{path}"
    );
    assert!(!file.starts_with(dir.path()), "{path}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), report);
    // It belongs to the run: gone with the orchestrator.
    drop(o);
    assert!(!file.exists() && !file.parent().unwrap().exists(), "{path}");
}

/// The requests of the subagent whose prompt holds `job`.
fn requests_of(server: &MockServer, job: &str) -> Vec<cadre_testkit::Captured> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text().contains(job))
        .collect()
}

#[tokio::test]
async fn an_answer_cut_at_max_tokens_is_continued_and_arrives_whole_also_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job C: explain")]),
            Reply::text("thanks"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job C".into()),
        vec![
            Reply::text("The loader reads the fi").stop_reason("max_tokens"),
            Reply::text("le, then che").stop_reason("max_tokens"),
            Reply::text("cks it."),
        ],
    );
    let (builder, events) = with_events(
        mock_builder(&server, dir.path())
            .runs_dir(dir.path().join(".cadre/runs"))
            .run_id("c1"),
    );
    let o = builder.build().unwrap();
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let whole = "The loader reads the file, then checks it.";
    assert_eq!(
        result_of(&server, "PARENT task", "t1"),
        (whole.into(), false)
    );
    // Each continuation was asked for in a user turn after the cut piece (no prefill).
    let sub = requests_of(&server, "Job C");
    assert_eq!(sub.len(), 3);
    for (n, r) in sub.iter().enumerate().skip(1) {
        let messages = r.messages();
        assert_eq!(messages.len(), 1 + 2 * n);
        assert_eq!(messages.last().unwrap()["role"], "user");
        assert_eq!(r.last_user_text(), CONTINUE_PROMPT);
    }
    assert_eq!(
        finished(&events, "main/explore#1"),
        (Outcome::Completed, StopKind::Done)
    );
    assert_eq!(summary.usage.agents[1].outcome, Outcome::Completed);
    assert_eq!(summary.usage.agents[1].turns, 3);
    // The continuations are steps: the journal folds back to the same whole answer.
    let (steps, _, _) = read_steps(&dir.path().join(".cadre/runs/c1/journal.jsonl")).unwrap();
    let mine = steps
        .into_iter()
        .filter(|s| s.agent() == Some("main/explore#1"));
    let rebuilt = AgentState::from_steps(mine).unwrap();
    assert_eq!(rebuilt.finished, Some((StopKind::Done, whole.to_owned())));
    let cut_off: Vec<Step> = read_steps(&dir.path().join(".cadre/runs/c1/journal.jsonl"))
        .unwrap()
        .0
        .into_iter()
        .filter(|s| s.agent() == Some("main/explore#1"))
        .take_while(|s| !matches!(s, Step::UserMessage { .. }))
        .collect();
    // Killed right after the first cut piece, the rebuilt agent still owes the rest.
    let rebuilt = AgentState::from_steps(cut_off).unwrap();
    assert_eq!(
        rebuilt.finished,
        Some((StopKind::MaxTokens, "The loader reads the fi".to_owned()))
    );
}

#[tokio::test]
async fn with_its_continuations_used_up_a_cut_answer_is_reported_cut_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Job D: explain")]),
            Reply::text("it was cut"),
        ],
    );
    let pieces = ["one ", "two ", "three ", "four "];
    server.route(
        Match::FirstUserContains("Job D".into()),
        pieces
            .iter()
            .map(|p| Reply::text(p).stop_reason("max_tokens"))
            .collect(),
    );
    let (builder, events) =
        with_events(mock_builder(&server, dir.path()).runs_dir(dir.path().join(".cadre/runs")));
    let o = builder.build().unwrap();
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    // One answer and three continuations: four requests, no fifth.
    assert_eq!(requests_of(&server, "Job D").len(), 4);
    let (text, is_error) = result_of(&server, "PARENT task", "t1");
    assert!(is_error, "{text}");
    assert!(text.contains("outcome: cut"), "{text}");
    assert!(text.contains("one two three four"), "{text}");
    assert_eq!(
        finished(&events, "main/explore#1"),
        (Outcome::Cut, StopKind::MaxTokens)
    );
    let record = &summary.usage.agents[1];
    assert_eq!((record.outcome, record.turns), (Outcome::Cut, 4));
    let saved = std::fs::read_to_string(o.run_dir().unwrap().summary_file()).unwrap();
    let saved: Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["usage"]["agents"][1]["outcome"], "cut");
    assert_eq!(saved["usage"]["agents"][1]["stop"]["kind"], "max_tokens");
}

#[tokio::test]
async fn a_subagent_stopped_mid_task_is_reported_cancelled_everywhere_never_completed() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "Slow job", "prompt": "Slow job: wait", "subagent_type": "code",
                       "run_in_background": true}),
            ),
            // Waits in the parent's own bash until the subagent's command runs.
            Reply::tool_use(
                "b1",
                "bash",
                json!({"command": "for i in $(seq 600); do [ -s slow.pid ] && break; sleep 0.1; done; cat slow.pid"}),
            ),
            Reply::tool_use("s1", "TaskStop", json!({"task_id": "task_1"})),
            Reply::tool_use("o1", "TaskOutput", json!({"task_id": "task_1"})),
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
            Reply::text("finished after all"),
        ],
    );
    let (builder, events) =
        with_events(mock_builder(&server, dir.path()).runs_dir(dir.path().join(".cadre/runs")));
    let o = builder.build().unwrap();
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let (text, is_error) = result_of(&server, "PARENT task", "o1");
    assert!(is_error, "{text}");
    assert!(text.contains("outcome: cancelled"), "{text}");
    assert!(!text.contains("completed"), "{text}");
    assert_eq!(
        finished(&events, "main/code#1"),
        (Outcome::Cancelled, StopKind::Cancelled)
    );
    let record = summary
        .usage
        .agents
        .iter()
        .find(|a| a.path == "main/code#1")
        .unwrap();
    assert_eq!(record.outcome, Outcome::Cancelled);
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(o.run_dir().unwrap().summary_file()).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["usage"]["agents"][1]["path"], "main/code#1");
    assert_eq!(saved["usage"]["agents"][1]["outcome"], "cancelled");
}

#[tokio::test]
async fn a_run_given_up_mid_task_records_its_unended_agents_as_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks([("t1", "code", "Slow job: wait")])],
    );
    server.route(
        Match::FirstUserContains("Slow job".into()),
        vec![Reply::tool_use(
            "x1",
            "bash",
            json!({"command": "echo $$ > slow.pid; sleep 300", "timeout_ms": 600000}),
        )],
    );
    let (builder, events) =
        with_events(mock_builder(&server, dir.path()).runs_dir(dir.path().join(".cadre/runs")));
    let o = builder.build().unwrap();
    let running = o.clone();
    let run = tokio::spawn(async move { running.run("main", "PARENT task").await });
    // Given up (a second Ctrl-C) once the subagent's command runs.
    let pid = dir.path().join("slow.pid");
    for _ in 0..600 {
        if std::fs::read_to_string(&pid).is_ok_and(|p| !p.trim().is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let summary = o.abandon("PARENT task", 0);
    run.abort();
    let outcomes: Vec<(String, Outcome)> = summary
        .usage
        .agents
        .iter()
        .map(|a| (a.path.to_string(), a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("main".to_owned(), Outcome::Cancelled),
            ("main/code#1".to_owned(), Outcome::Cancelled)
        ]
    );
    assert_eq!(summary.outcome, Outcome::Cancelled);
    assert_eq!(finished(&events, "main/code#1").0, Outcome::Cancelled);
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(o.run_dir().unwrap().summary_file()).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["usage"]["agents"][1]["outcome"], "cancelled");
}

#[tokio::test]
async fn a_cut_answer_with_no_turn_left_to_go_on_ends_at_the_turn_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "brief", "Job E: explain")]),
            Reply::text("noted"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job E".into()),
        vec![Reply::text("Only the sta").stop_reason("max_tokens")],
    );
    let (spec, problems) = AgentSpec::parse_yaml(
        std::path::Path::new("brief.yaml"),
        "name: brief\ndescription: Answers in one turn.\nmode: subagent\nmax_turns: 1\ntools: [read_file]\nprompt: Be brief.\n",
    );
    assert!(problems.is_empty(), "{problems:?}");
    let mut registry = Registry::shipped();
    registry.insert(spec.unwrap());
    let o = mock_builder(&server, dir.path())
        .registry(registry)
        .build()
        .unwrap();
    let (_, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(requests_of(&server, "Job E").len(), 1);
    let (text, is_error) = result_of(&server, "PARENT task", "t1");
    assert!(is_error && text.contains("outcome: turn limit"), "{text}");
    assert!(text.contains("Only the sta"), "{text}");
    assert_eq!(summary.usage.agents[1].outcome, Outcome::TurnLimit);
}

/// A delegate whose subagent brings back `text` after putting a file where the worker's
/// `results/` folder would be made (in `run`), so the answer cannot be kept whole.
struct BlockingResults {
    run: std::path::PathBuf,
    text: String,
}

#[async_trait::async_trait]
impl cadre_core::Delegate for BlockingResults {
    async fn run(&self, _call: cadre_core::DelegatedCall) -> cadre_core::Delegated {
        std::fs::write(self.run.join("results"), "in the way").unwrap();
        cadre_core::Delegated {
            text: self.text.clone(),
            ..cadre_core::Delegated::stopped(StopKind::Done)
        }
    }
}

/// On a worker, a subagent's long answer that cannot be kept stops the agent, and its
/// outcome says why rather than reading as a plain cancel.
#[tokio::test]
async fn a_delegated_agent_stopped_by_an_answer_it_could_not_keep_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let runs = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks([("t1", "explore", "Job A")])],
    );
    let mut registry = Registry::shipped();
    registry.insert(reviewer());
    let o = mock_builder(&server, dir.path())
        .registry(registry)
        .runs_dir(runs.path())
        .run_id("w1")
        .delegate(Arc::new(BlockingResults {
            run: runs.path().join("w1"),
            text: long_report(2000),
        }))
        .build()
        .unwrap();
    let call = cadre_core::DelegatedCall {
        path: "reviewer".into(),
        depth: 0,
        spec: reviewer(),
        model: "claude-sonnet-5-5".into(),
        description: "review".into(),
        prompt: "PARENT task".into(),
        trace: None,
        output_schema: None,
    };
    let (outcome, _) = o.run_delegated(&call).await;
    match &outcome.stop {
        StopKind::Other(why) => assert!(
            why.contains("could not keep the whole answer of reviewer/explore#1"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}
