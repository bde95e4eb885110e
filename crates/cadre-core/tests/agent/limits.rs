use super::*;
use cadre_core::{AgentLimits, AgentSpec, Mode, Orchestrator, Outcome, RunSummary};
use cadre_testkit::Gate;

/// A subagent type `name` with `limits`, that may start `worker`s.
fn limited(name: &str, limits: AgentLimits, max_turns: u32) -> AgentSpec {
    AgentSpec::builder(name)
        .description("Works under limits.")
        .mode(Mode::Subagent)
        .tools(["Task", "read_file"])
        .max_turns(max_turns)
        .limits(limits)
        .prompt("You work under limits.")
        .build()
}

/// A plain subagent type without limits.
fn worker() -> AgentSpec {
    AgentSpec::builder("worker")
        .description("Does one job.")
        .mode(Mode::Subagent)
        .tools(["read_file"])
        .prompt("You do one job.")
        .build()
}

fn orchestrator(
    server: &MockServer,
    dir: &std::path::Path,
    types: Vec<AgentSpec>,
) -> Arc<Orchestrator> {
    types
        .into_iter()
        .fold(mock_builder(server, dir).agent(worker()), |b, t| b.agent(t))
        .runs_dir(dir.join(".cadre/runs"))
        .build()
        .unwrap()
}

/// A `Task` call for a `kind` subagent on `job`, with `extra` fields.
fn task(id: &str, kind: &str, job: &str, extra: Value) -> (String, String, Value) {
    let mut input =
        json!({"description": job, "prompt": format!("{job}: do it"), "subagent_type": kind});
    if let (Some(input), Value::Object(extra)) = (input.as_object_mut(), extra) {
        input.extend(extra);
    }
    (id.to_owned(), "Task".to_owned(), input)
}

fn turn(calls: Vec<(String, String, Value)>) -> Reply {
    Reply::tool_uses(
        calls
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
            .collect(),
    )
}

/// The record of the one agent whose description is `job`.
fn record<'a>(summary: &'a RunSummary, job: &str) -> &'a cadre_core::AgentRecord {
    let found: Vec<_> = summary
        .usage
        .agents
        .iter()
        .filter(|a| a.description == job)
        .collect();
    assert_eq!(found.len(), 1, "{job}: {:?}", summary.usage.agents);
    found[0]
}

/// The end of the run `run`, failing the test if it never comes (an agent that was not
/// stopped would wait for its held request for ever).
async fn ended(
    run: tokio::task::JoinHandle<Result<(AgentOutcome, RunSummary), cadre_core::RunError>>,
) -> (AgentOutcome, RunSummary) {
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run never ended")
        .unwrap()
        .unwrap()
}

/// Waits until `gate` holds a request, failing the test after a minute.
async fn held(gate: &Gate, what: &str) {
    assert!(
        gate.wait_for(1, Duration::from_secs(60)).await,
        "{what} never reached the mock"
    );
}

#[tokio::test]
async fn a_subagent_over_its_token_limit_stops_for_budget_and_its_children_are_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("p1", "capped", "Capped job", json!({}))]),
            Reply::text("the capped one stopped"),
        ],
    );
    // It starts one worker in the background and one it waits for, in one turn.
    server.route(
        Match::FirstUserContains("Capped job".into()),
        vec![turn(vec![
            task(
                "c1",
                "worker",
                "Background job",
                json!({"run_in_background": true}),
            ),
            task("c2", "worker", "Foreground job", json!({})),
        ])],
    );
    // The background worker's answer costs more than its parent's limit; it comes only
    // once the foreground worker waits on its own request, which is never answered.
    server.route(
        Match::FirstUserContains("Background job".into()),
        vec![Reply::text("expensive").usage(2_000, 100, 0, 0)],
    );
    server.route(
        Match::FirstUserContains("Foreground job".into()),
        vec![Reply::text("never sent")],
    );
    let background = server.gate(Match::FirstUserContains("Background job".into()));
    let foreground = server.gate(Match::FirstUserContains("Foreground job".into()));
    let capped = limited("capped", AgentLimits::new(Some(1_000), None, None), 30);
    let o = orchestrator(&server, dir.path(), vec![capped]);
    let run = tokio::spawn({
        let o = o.clone();
        async move { o.run("main", "PARENT task").await }
    });
    held(&foreground, "the foreground worker's request").await;
    held(&background, "the background worker's request").await;
    background.open();
    let (outcome, summary) = ended(run).await;
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());

    let capped = record(&summary, "Capped job");
    assert_eq!(capped.outcome, Outcome::Budget, "{capped:?}");
    assert_eq!(capped.stop, StopKind::TokenLimit);
    for job in ["Background job", "Foreground job"] {
        let child = record(&summary, job);
        assert_eq!(child.outcome, Outcome::Cancelled, "{child:?}");
    }
    // The parent's call was told why its subagent stopped.
    let told = server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text() == "PARENT task")
        .nth(1)
        .unwrap()
        .messages()
        .last()
        .unwrap()["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(told.contains("token limit"), "{told}");
}

/// The requests the capped subagent (first user message `job: do it`) made.
fn requests_of(server: &MockServer, job: &str) -> usize {
    let first = format!("{job}: do it");
    server
        .requests()
        .iter()
        .filter(|r| r.first_user_text() == first)
        .count()
}

#[tokio::test]
async fn a_task_call_may_tighten_a_types_turn_limit_but_not_loosen_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![
                task("p1", "capped", "Tight job", json!({"limits": {"turns": 2}})),
                task(
                    "p2",
                    "capped",
                    "Loose job",
                    json!({"limits": {"turns": "9"}}),
                ),
            ]),
            Reply::text("both stopped"),
        ],
    );
    // Each would go on reading for ever.
    let reading = |n: usize| {
        (0..n)
            .map(|i| {
                Reply::tool_use(
                    &format!("r{i}"),
                    "read_file",
                    json!({"path": "missing.txt"}),
                )
            })
            .collect::<Vec<_>>()
    };
    server.route(Match::FirstUserContains("Tight job".into()), reading(12));
    server.route(Match::FirstUserContains("Loose job".into()), reading(12));
    // The type allows 5 turns by its limits (and 30 by its max_turns).
    let capped = limited("capped", AgentLimits::new(None, Some(5), None), 30);
    let o = orchestrator(&server, dir.path(), vec![capped]);
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    assert_eq!(requests_of(&server, "Tight job"), 2);
    assert_eq!(requests_of(&server, "Loose job"), 5);
    for job in ["Tight job", "Loose job"] {
        assert_eq!(record(&summary, job).outcome, Outcome::TurnLimit);
    }
    // The looser call was told its limit was ignored.
    let results = server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text() == "PARENT task")
        .nth(1)
        .unwrap()
        .messages()
        .last()
        .unwrap()["content"]
        .clone();
    let loose = results[1]["content"][0]["text"].as_str().unwrap();
    assert!(
        loose.contains("Limits ignored") && loose.contains("turns 9 (5 hold)"),
        "{loose}"
    );
    let tight = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(!tight.contains("Limits ignored"), "{tight}");
}

#[tokio::test]
async fn max_turns_is_a_turn_limit_and_the_tighter_of_the_two_holds() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("p1", "capped", "Short job", json!({}))]),
            Reply::text("stopped"),
        ],
    );
    let reading = (0..8)
        .map(|i| {
            Reply::tool_use(
                &format!("r{i}"),
                "read_file",
                json!({"path": "missing.txt"}),
            )
        })
        .collect();
    server.route(Match::FirstUserContains("Short job".into()), reading);
    let capped = limited("capped", AgentLimits::new(None, Some(6), None), 3);
    let o = orchestrator(&server, dir.path(), vec![capped]);
    let (_, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(requests_of(&server, "Short job"), 3);
    assert_eq!(record(&summary, "Short job").stop, StopKind::MaxTurns);
}

#[tokio::test]
async fn a_time_limit_stops_an_agent_whose_work_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task(
                "p1",
                "timed",
                "Slow job",
                json!({"limits": {"time": "3s"}}),
            )]),
            Reply::text("it ran out of time"),
        ],
    );
    server.route(
        Match::FirstUserContains("Slow job".into()),
        vec![turn(vec![task("s1", "worker", "Inner job", json!({}))])],
    );
    server.route(
        Match::FirstUserContains("Inner job".into()),
        vec![Reply::text("never sent")],
    );
    // Its worker's request is held until the test ends, so only the time limit can end
    // it — whether it runs out before the worker starts, or while its request is held.
    let _inner = server.gate(Match::FirstUserContains("Inner job".into()));
    let timed = limited(
        "timed",
        AgentLimits::new(None, None, Some(Duration::from_secs(600))),
        30,
    );
    let o = orchestrator(&server, dir.path(), vec![timed]);
    let run = tokio::spawn({
        let o = o.clone();
        async move { o.run("main", "PARENT task").await }
    });
    let (outcome, summary) = ended(run).await;
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let slow = record(&summary, "Slow job");
    assert_eq!(slow.outcome, Outcome::TimeLimit, "{slow:?}");
    assert_eq!(slow.stop, StopKind::TimeLimit);
    assert_eq!(slow.outcome.label(), "time limit");
    // A worker it started by then was cancelled with it.
    for inner in summary
        .usage
        .agents
        .iter()
        .filter(|a| a.description == "Inner job")
    {
        assert_eq!(inner.outcome, Outcome::Cancelled, "{inner:?}");
    }
}

/// Runs a `capped` subagent under `limits` until they stop it after three requests, cuts
/// the journal after its second response (as if cadre were killed there), resumes the run,
/// and returns how many requests it made after the resume and its record then.
async fn resumed_after_two_requests(limits: AgentLimits) -> (usize, cadre_core::AgentRecord) {
    resumed_after_two(limits, json!({}), false).await
}

/// As [`resumed_after_two_requests`], the type's limits `limits`, the `Task` call's extra
/// fields `call` (a name makes it a team member, in a team run when `team`).
async fn resumed_after_two(
    limits: AgentLimits,
    call: Value,
    team: bool,
) -> (usize, cadre_core::AgentRecord) {
    resumed_with_helper(limits, call, team, Vec::new(), 0, 2).await
}

#[tokio::test]
async fn a_resumed_run_counts_the_turns_and_tokens_used_before_it() {
    let (after, capped) = resumed_after_two_requests(AgentLimits::new(None, Some(3), None)).await;
    assert_eq!(
        after, 1,
        "two of its three turns were used before the resume"
    );
    assert_eq!(capped.outcome, Outcome::TurnLimit, "{capped:?}");

    let (after, capped) = resumed_after_two_requests(AgentLimits::new(Some(40), None, None)).await;
    assert_eq!(after, 1, "30 of its 40 tokens were used before the resume");
    assert_eq!(capped.outcome, Outcome::Budget, "{capped:?}");
    assert_eq!(capped.stop, StopKind::TokenLimit);
}

#[tokio::test]
async fn a_restarted_team_member_keeps_the_limits_its_call_gave() {
    let call = json!({"name": "capper", "limits": {"turns": 3}});
    let (after, capped) = resumed_after_two(AgentLimits::default(), call, true).await;
    assert_eq!(
        after, 1,
        "two of the three turns its call allowed were used before the resume"
    );
    assert_eq!(capped.outcome, Outcome::TurnLimit, "{capped:?}");
}

/// Runs a `capped` subagent (of a type with `limits`, started by the lead's `Task` call
/// with the extra fields `call`, in a team run when `team`) whose first turns are `first`
/// and that then reads until its limits stop it; its helper (`Helper job`) answers for
/// `helper_tokens`. Cuts the journal after its `cut`th response, resumes the run, and
/// returns how many requests it made after the resume and its record then.
async fn resumed_with_helper(
    limits: AgentLimits,
    call: Value,
    team: bool,
    first: Vec<Reply>,
    helper_tokens: u64,
    cut: usize,
) -> (usize, cadre_core::AgentRecord) {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("p1", "capped", "Capped job", call)]),
            Reply::text("done"),
            Reply::text("done again"),
        ],
    );
    // Each reading costs 15 tokens (the mock's default usage), and it would go on for ever.
    let reading = (0..12).map(|i| {
        Reply::tool_use(
            &format!("r{i}"),
            "read_file",
            json!({"path": "missing.txt"}),
        )
    });
    let capped: Vec<Reply> = first.into_iter().chain(reading).collect();
    server.route(Match::FirstUserContains("Capped job".into()), capped);
    server.route(
        Match::FirstUserContains("Helper job".into()),
        vec![Reply::text("helped").usage(helper_tokens, 0, 0, 0)],
    );
    let runs = dir.path().join(".cadre/runs");
    let build = || {
        let o = mock_builder(&server, dir.path())
            .agent(worker())
            .agent(limited("capped", limits, 30))
            .runs_dir(runs.clone());
        match team {
            true => o.team(cadre_core::TeamLimits::default()),
            false => o,
        }
        .build()
        .unwrap()
    };
    let (_, summary) = build().run("main", "PARENT task").await.unwrap();
    let before = requests_of(&server, "Capped job");
    let run_dir = runs.join(summary.run_id.unwrap());
    let journal = run_dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let last = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("\"step\":\"response\"") && l.contains("\"main/capped#1\""))
        .nth(cut - 1)
        .expect("the response to cut after is journaled")
        .0;
    let kept: Vec<&str> = text.lines().take(last + 1).collect();
    std::fs::write(&journal, kept.join("\n") + "\n").unwrap();

    let run = cadre_core::JournaledRun::open(&run_dir).unwrap().unwrap();
    let (outcome, summary) = build().resume(run, None).await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let after = requests_of(&server, "Capped job") - before;
    (after, record(&summary, "Capped job").clone())
}

#[tokio::test]
async fn a_resumed_agent_counts_its_subagents_earlier_tokens_but_not_its_members() {
    // A plain worker's 50 tokens count against its parent's 100: 15 + 50 + 15 + 15 were
    // used before the resume, so one more request takes it over.
    let helper = turn(vec![task("c1", "worker", "Helper job", json!({}))]);
    let limits = AgentLimits::new(Some(100), None, None);
    let (after, capped) = resumed_with_helper(limits, json!({}), false, vec![helper], 50, 3).await;
    assert_eq!(after, 1, "{capped:?}");
    assert_eq!(capped.stop, StopKind::TokenLimit);

    // A member it started (and closed) charged the run's budget, not its starter's: its
    // 2000 tokens do not count, so 45 of 100 were used before the resume and four more
    // requests of 15 take it over.
    let member = turn(vec![task(
        "c1",
        "worker",
        "Helper job",
        json!({"name": "helper"}),
    )]);
    let close = Reply::tool_use("c2", "CloseMember", json!({"name": "helper"}));
    let call = json!({"name": "capper", "limits": {"tokens": 100}});
    let first = vec![member, close];
    let (after, capped) =
        resumed_with_helper(AgentLimits::default(), call, true, first, 2_000, 3).await;
    assert_eq!(after, 4, "{capped:?}");
    assert_eq!(capped.stop, StopKind::TokenLimit);
}

#[tokio::test]
async fn a_member_started_by_a_limited_agent_gets_no_more_tokens_than_its_starter_has_left() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let capper = json!({"name": "capper", "limits": {"tokens": 100}});
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("p1", "capped", "Capped job", capper)]),
            Reply::text("done"),
        ],
    );
    // Its one request costs 15 of its 100 tokens before it starts the member.
    server.route(
        Match::FirstUserContains("Capped job".into()),
        vec![
            turn(vec![task(
                "c1",
                "worker",
                "Helper job",
                json!({"name": "helper"}),
            )]),
            Reply::text("capped done"),
        ],
    );
    // The member would read for ever, 15 tokens a request.
    let reading = (0..12)
        .map(|i| {
            Reply::tool_use(
                &format!("r{i}"),
                "read_file",
                json!({"path": "missing.txt"}),
            )
        })
        .collect();
    server.route(Match::FirstUserContains("Helper job".into()), reading);
    let o = mock_builder(&server, dir.path())
        .agent(worker())
        .agent(limited("capped", AgentLimits::default(), 30))
        .runs_dir(dir.path().join(".cadre/runs"))
        .team(cadre_core::TeamLimits::default())
        .build()
        .unwrap();
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    // 85 tokens were left to its starter: six requests of 15 reach them.
    assert_eq!(requests_of(&server, "Helper job"), 6);
    let helper = record(&summary, "Helper job");
    assert_eq!(helper.stop, StopKind::TokenLimit, "{helper:?}");
}

#[tokio::test]
async fn a_task_call_with_a_zero_limit_is_refused_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![
                task(
                    "p1",
                    "worker",
                    "Tokens job",
                    json!({"limits": {"tokens": 0}}),
                ),
                task(
                    "p2",
                    "worker",
                    "Turns job",
                    json!({"limits": {"turns": "0"}}),
                ),
                task(
                    "p3",
                    "worker",
                    "Time job",
                    json!({"limits": {"time": "0s"}}),
                ),
            ]),
            Reply::text("refused"),
        ],
    );
    server.route(Match::FirstUserContains("job: do it".into()), vec![]);
    let o = orchestrator(&server, dir.path(), vec![]);
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    assert_eq!(summary.usage.agents.len(), 1, "{:?}", summary.usage.agents);
    let results = server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text() == "PARENT task")
        .nth(1)
        .unwrap()
        .messages()
        .last()
        .unwrap()["content"]
        .clone();
    for (i, limit) in ["tokens", "turns", "time"].iter().enumerate() {
        let result = &results[i];
        assert_eq!(result["is_error"], true, "{result}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains(&format!("limits: {limit} must be above 0")),
            "{text}"
        );
    }
    // The schema the model is offered says so too.
    let tools = server.requests()[0].body["tools"].clone();
    let task = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Task")
        .unwrap()
        .to_string();
    assert!(task.contains("\"minimum\":1"), "{task}");
}

/// A delegate standing in for an engine's workers: `Pricey job` comes back at once having
/// used 200 tokens; any other job never comes back. It keeps the calls it was given.
#[derive(Default)]
struct Workers {
    calls: std::sync::Mutex<Vec<cadre_core::DelegatedCall>>,
}

#[async_trait::async_trait]
impl cadre_core::Delegate for Workers {
    async fn run(&self, call: cadre_core::DelegatedCall) -> cadre_core::Delegated {
        let pricey = call.description == "Pricey job";
        let record = json!({
            "path": call.path, "agent_type": call.spec.name, "description": call.description,
            "model": call.model, "turns": 1, "tool_calls": 0,
            "usage": {"input_tokens": 200}, "elapsed_ms": 1,
            "outcome": "completed", "stop": {"kind": "done"},
        });
        self.calls.lock().unwrap().push(call);
        if !pricey {
            std::future::pending::<()>().await;
        }
        cadre_core::Delegated {
            text: "priced".into(),
            records: vec![serde_json::from_value(record).unwrap()],
            ..cadre_core::Delegated::stopped(StopKind::Done)
        }
    }
}

#[tokio::test]
async fn subagents_run_on_workers_are_held_to_their_callers_limits() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // Its first request costs 15 of its 100 tokens; the pricey worker's 200 take it over.
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![
                task("p1", "worker", "Pricey job", json!({})),
                task("p2", "worker", "Other job", json!({})),
            ]),
            Reply::text("never sent"),
        ],
    );
    let main = AgentSpec::builder("main")
        .description("Leads under limits.")
        .mode(Mode::Primary)
        .tools(["Task"])
        .limits(AgentLimits::new(Some(100), None, None))
        .prompt("You lead.")
        .build();
    let workers = Arc::new(Workers::default());
    let o = mock_builder(&server, dir.path())
        .agent(main)
        .agent(worker())
        .runs_dir(dir.path().join(".cadre/runs"))
        .delegate(workers.clone())
        .build()
        .unwrap();
    let run = tokio::spawn(async move { o.run("main", "PARENT task").await });
    let (outcome, _) = ended(run).await;
    assert_eq!(
        outcome.stop,
        StopKind::TokenLimit,
        "{:?}",
        server.violations()
    );
    assert_eq!(
        server.requests().len(),
        1,
        "it sent nothing after its limit"
    );
    // It was sent what its caller's limit left: 85 tokens; its caller stopped before the
    // other call (delegated calls run in order).
    let calls = workers.calls.lock().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].spec.limits.tokens, Some(85));
}

#[tokio::test]
async fn a_call_waiting_on_the_workers_ends_when_its_caller_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            turn(vec![task("p1", "worker", "Endless job", json!({}))]),
            Reply::text("never sent"),
        ],
    );
    let workers = Arc::new(Workers::default());
    let o = mock_builder(&server, dir.path())
        .agent(worker())
        .runs_dir(dir.path().join(".cadre/runs"))
        .delegate(workers.clone())
        .build()
        .unwrap();
    let cancel = o.cancel_token();
    let run = tokio::spawn(async move { o.run("main", "PARENT task").await });
    // Cancelled once the workers have the call, which never comes back by itself.
    tokio::time::timeout(Duration::from_secs(60), async {
        while workers.calls.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the call never reached the workers");
    cancel.cancel();
    let (outcome, _) = ended(run).await;
    assert_eq!(
        outcome.stop,
        StopKind::Cancelled,
        "{:?}",
        server.violations()
    );
}
