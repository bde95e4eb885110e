use super::*;
use cadre_core::Orchestrator;
use cadre_core::TeamLimits;

/// The text of a request body's last user message (text and tool results).
fn last_user(body: &Value) -> String {
    let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else {
        return String::new();
    };
    last.to_string()
}

fn first_user(body: &Value) -> String {
    body["messages"][0].to_string()
}

/// Matches the requests of the agent whose prompt holds `who` whose last user message holds
/// `last`.
fn when(who: &str, last: &str) -> Match {
    let (who, last) = (who.to_owned(), last.to_owned());
    Match::Custom(Arc::new(move |b: &Value| {
        first_user(b).contains(&who) && last_user(b).contains(&last)
    }))
}

fn send(id: &str, to: &str, text: &str) -> Reply {
    Reply::tool_use(id, "SendMessage", json!({"to": to, "message": text}))
}

fn member(id: &str, name: &str, job: &str) -> (String, String, Value) {
    (
        id.to_owned(),
        "Task".to_owned(),
        json!({"description": job, "prompt": format!("{job}: do it"), "subagent_type": "code",
               "name": name}),
    )
}

fn team(server: &MockServer, dir: &std::path::Path, limits: TeamLimits) -> Arc<Orchestrator> {
    mock_builder(server, dir)
        .runs_dir(dir.join(".cadre/runs"))
        .team(limits)
        .build()
        .unwrap()
}

/// The requests whose first message holds `who`.
fn requests_of(server: &MockServer, who: &str) -> Vec<cadre_testkit::Captured> {
    server
        .requests()
        .into_iter()
        .filter(|r| first_user(&r.body).contains(who))
        .collect()
}

/// Every user message of `history` that carries team messages: the messages' (from, seq)
/// in order, checking each comes after any tool results of its message.
fn deliveries(history: &[Value]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (i, m) in history.iter().enumerate() {
        if m["role"] != "user" {
            continue;
        }
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let mut seen_text = false;
        for b in &blocks {
            if b["type"] == "tool_result" {
                assert!(!seen_text, "a tool result after a message in {m}");
                continue;
            }
            let text = b["text"].as_str().unwrap_or_default();
            for part in text.split("<team-message from=\"").skip(1) {
                seen_text = true;
                let from = part.split('"').next().unwrap().to_owned();
                let seq: u64 = part
                    .split("seq=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .and_then(|s| s.parse().ok())
                    .unwrap();
                // Between turns: the message before is the model's.
                assert_eq!(history[i - 1]["role"], "assistant");
                out.push((from, seq));
            }
        }
    }
    out
}

#[tokio::test]
async fn members_exchange_messages_exactly_once_in_order_between_turns() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // alpha pings beta three times, each after beta's pong; beta answers each ping.
    server.route(
        when("Job alpha", "pong 3"),
        vec![Reply::text("alpha finished")],
    );
    for k in [2, 1] {
        server.route(
            when("Job alpha", &format!("pong {k}")),
            vec![send(&format!("a{k}"), "beta", &format!("ping {}", k + 1))],
        );
    }
    for k in [3, 2, 1] {
        server.route(
            when("Job beta", &format!("ping {k}")),
            vec![send(&format!("b{k}"), "alpha", &format!("pong {k}"))],
        );
    }
    server.route(
        when("Job alpha", "Sent to"),
        vec![Reply::text("alpha waits"); 6],
    );
    server.route(
        when("Job beta", "Sent to"),
        vec![Reply::text("beta waits"); 6],
    );
    server.route(
        when("Job alpha", "Job alpha"),
        vec![send("a0", "beta", "ping 1")],
    );
    server.route(
        when("Job beta", "Job beta"),
        vec![Reply::text("beta ready")],
    );
    server.route(
        when("Job gamma", "Job gamma"),
        vec![Reply::text("gamma ready")],
    );
    server.route(
        Match::FirstUserContains("LEAD".into()),
        std::iter::once(Reply::tool_uses(
            [
                member("t1", "alpha", "Job alpha"),
                member("t2", "beta", "Job beta"),
                member("t3", "gamma", "Job gamma"),
            ]
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
            .collect(),
        ))
        .chain(vec![Reply::text("lead done"); 12])
        .collect(),
    );
    let o = team(&server, dir.path(), TeamLimits::default());
    let (outcome, summary) = o.run("main", "LEAD task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    assert_eq!(outcome.text, "lead done");

    let beta = requests_of(&server, "Job beta");
    let alpha = requests_of(&server, "Job alpha");
    // Each message reached its recipient once, in order, between turns.
    let got = deliveries(beta.last().unwrap().messages());
    assert_eq!(
        got,
        vec![
            ("alpha".into(), 1),
            ("alpha".into(), 2),
            ("alpha".into(), 3)
        ]
    );
    let got = deliveries(alpha.last().unwrap().messages());
    assert_eq!(
        got,
        vec![("beta".into(), 1), ("beta".into(), 2), ("beta".into(), 3)]
    );
    // A woken member's request carries its earlier conversation.
    let woken = beta
        .iter()
        .find(|r| last_user(&r.body).contains("ping 1"))
        .unwrap();
    assert!(woken.body.to_string().contains("beta ready"));
    assert!(woken.body["messages"][0].to_string().contains("Job beta"));
    // Three members and the lead each counted once in the usage.
    let paths: Vec<&str> = summary
        .usage
        .agents
        .iter()
        .map(|a| a.path.as_str())
        .collect();
    assert_eq!(paths.len(), 4, "{paths:?}");
    // The lead was told when a member ended a turn a message started.
    let lead = requests_of(&server, "LEAD");
    assert!(
        lead.iter()
            .any(|r| last_user(&r.body).contains("team-notice from=\\\"alpha\\\"")),
        "no notice reached the lead"
    );
    // Every member ended closed: the journal says so.
    let journal = std::fs::read_to_string(
        summary_dir(dir.path(), summary.run_id.as_deref().unwrap()).join("journal.jsonl"),
    )
    .unwrap();
    let closed = journal.matches("\"change\":\"closed\"").count();
    assert_eq!(closed, 3, "{journal}");
}

fn summary_dir(dir: &std::path::Path, id: &str) -> std::path::PathBuf {
    dir.join(".cadre/runs").join(id)
}

#[tokio::test]
async fn eight_members_race_for_twenty_tasks_and_each_is_owned_once_after_its_blockers() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // Twenty tasks: task k (k > 4) is blocked by task k - 4, so there are five layers.
    let creates: Vec<(String, String, Value)> = (1..=20)
        .map(|k| {
            let blocked: Vec<u32> = if k > 4 { vec![k - 4] } else { vec![] };
            (
                format!("c{k}"),
                "TaskCreate".to_owned(),
                json!({"subject": format!("task {k}"), "blocked_by": blocked}),
            )
        })
        .collect();
    let members: Vec<(String, String, Value)> = (1..=8)
        .map(|m| member(&format!("m{m}"), &format!("w{m}"), &format!("Worker {m}")))
        .collect();
    let as_reply = |calls: &[(String, String, Value)]| {
        Reply::tool_uses(
            calls
                .iter()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
                .collect(),
        )
    };
    server.route(
        Match::FirstUserContains("LEAD".into()),
        vec![as_reply(&creates), as_reply(&members)]
            .into_iter()
            .chain(vec![Reply::text("lead done"); 20])
            .collect(),
    );
    // Every worker, six rounds: try to claim every task, then complete every task; only
    // what it owns, unblocked, goes through.
    for m in 1..=8 {
        let round = |r: usize, what: &str, status: &str| -> Reply {
            let calls: Vec<(String, String, Value)> = (1..=20)
                .map(|k| {
                    (
                        format!("w{m}{what}{r}_{k}"),
                        "TaskUpdate".to_owned(),
                        json!({"taskId": k.to_string(), "status": status}),
                    )
                })
                .collect();
            as_reply(&calls)
        };
        let mut replies = Vec::new();
        for r in 0..6 {
            replies.push(round(r, "c", "in_progress"));
            replies.push(round(r, "d", "completed"));
        }
        replies.push(Reply::text("worker done"));
        server.route(Match::FirstUserContains(format!("Worker {m}:")), replies);
    }
    let o = team(&server, dir.path(), TeamLimits::default());
    let (outcome, summary) = o.run("main", "LEAD task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());

    for agent in &summary.usage.agents {
        assert_eq!(
            agent.stop,
            StopKind::Done,
            "{} stopped: {}",
            agent.path,
            agent.stop
        );
    }
    // The journal's task changes, in order.
    let journal = std::fs::read_to_string(
        summary_dir(dir.path(), summary.run_id.as_deref().unwrap()).join("journal.jsonl"),
    )
    .unwrap();
    let mut status: std::collections::HashMap<u64, (String, Option<String>)> = Default::default();
    let mut owners: std::collections::HashMap<u64, std::collections::HashSet<String>> =
        Default::default();
    for line in journal.lines() {
        let step: Value = serde_json::from_str(line).unwrap();
        if step["step"] != "team" || step["change"]["change"] != "task_updated" {
            continue;
        }
        let id = step["change"]["id"].as_u64().unwrap();
        let s = step["change"]["status"].as_str().unwrap().to_owned();
        let owner = step["change"]["owner"].as_str().map(str::to_owned);
        if s == "in_progress" {
            // Started only once every blocker is completed.
            if id > 4 {
                let blocker = &status[&(id - 4)].0;
                assert_eq!(blocker, "completed", "task {id} started before {}", id - 4);
            }
        }
        if let Some(o) = &owner {
            owners.entry(id).or_default().insert(o.clone());
        }
        status.insert(id, (s, owner));
    }
    for id in 1..=20u64 {
        assert_eq!(
            status[&id].0,
            "completed",
            "task {id}: {:?}",
            status.get(&id)
        );
        assert_eq!(owners[&id].len(), 1, "task {id} owned by {:?}", owners[&id]);
    }
}

#[tokio::test]
async fn a_runaway_exchange_stops_at_the_cap_and_a_full_inbox_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // Three messages to a member still in its first (slow) turn: the third finds its inbox
    // full.
    server.route(
        when("Job slow", "Job slow"),
        vec![Reply::text("slow ready").delay(Duration::from_millis(800))],
    );
    server.route(
        when("Job fast", "Job fast"),
        vec![Reply::tool_uses(vec![
            ("f1", "SendMessage", json!({"to": "slow", "message": "one"})),
            ("f2", "SendMessage", json!({"to": "slow", "message": "two"})),
            (
                "f3",
                "SendMessage",
                json!({"to": "slow", "message": "three"}),
            ),
        ])],
    );
    // Then they ping-pong for ever; the run's cap stops them.
    server.route(
        when("Job fast", "cap of"),
        vec![Reply::text("fast stops"); 4],
    );
    server.route(
        when("Job slow", "cap of"),
        vec![Reply::text("slow stops"); 4],
    );
    server.route(
        when("Job fast", "team-message"),
        (0..20)
            .map(|i| send(&format!("fp{i}"), "slow", "ping"))
            .collect(),
    );
    server.route(
        when("Job slow", "team-message"),
        (0..20)
            .map(|i| send(&format!("sp{i}"), "fast", "pong"))
            .collect(),
    );
    server.route(
        when("Job fast", "Sent to"),
        vec![Reply::text("fast waits"); 20],
    );
    server.route(
        when("Job slow", "Sent to"),
        vec![Reply::text("slow waits"); 20],
    );
    server.route(
        Match::FirstUserContains("LEAD".into()),
        std::iter::once(Reply::tool_uses(vec![
            (
                "t1",
                "Task",
                json!({"description": "Job slow", "prompt": "Job slow", "subagent_type": "code", "name": "slow"}),
            ),
            (
                "t2",
                "Task",
                json!({"description": "Job fast", "prompt": "Job fast", "subagent_type": "code", "name": "fast"}),
            ),
        ]))
        .chain(vec![Reply::text("lead done"); 30])
        .collect(),
    );
    let limits = TeamLimits::default().max_unread(2).max_messages(8);
    let o = team(&server, dir.path(), limits);
    let (outcome, _) = o.run("main", "LEAD task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let fast = requests_of(&server, "Job fast");
    let after_sends = fast
        .iter()
        .find(|r| last_user(&r.body).contains("\"f3\""))
        .unwrap();
    let results = after_sends.messages().last().unwrap()["content"].clone();
    assert_eq!(results[0]["is_error"], Value::Null, "{results}");
    assert_eq!(results[2]["is_error"], true, "{results}");
    assert!(
        results[2].to_string().contains("inbox is full"),
        "{results}"
    );
    // The cap stopped the exchange with a message saying so.
    let all = server.requests();
    let capped = all
        .iter()
        .filter(|r| last_user(&r.body).contains("reached its cap of 8 messages"))
        .count();
    assert!(capped >= 1, "no member was told of the cap");
    let sent: usize = all
        .iter()
        .map(|r| {
            r.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "assistant")
                .map(|m| m.to_string().matches("\"SendMessage\"").count())
                .sum::<usize>()
        })
        .max()
        .unwrap();
    assert!(sent <= 20, "the exchange ran on: {sent}");
}

#[tokio::test]
async fn a_claude_code_agent_file_listing_the_team_tools_gets_them() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews a change; tells the coder what to fix.\ntools: Read, Grep, SendMessage, TaskList, TaskUpdate\n---\nYou review code and message the coder.\n",
    )
    .unwrap();
    let mut registry = cadre_core::Registry::shipped();
    registry.load_dirs(&[agents]);
    let problems: Vec<String> = registry.problems().iter().map(|p| p.to_string()).collect();
    assert!(
        problems
            .iter()
            .all(|p| !p.contains("SendMessage") && !p.contains("Task")),
        "{problems:?}"
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("LEAD".into()),
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "review", "prompt": "Review it", "subagent_type": "reviewer", "name": "rev"}),
            ),
            Reply::text("lead done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Review it".into()),
        vec![Reply::text("looks fine")],
    );
    let o = mock_builder(&server, dir.path())
        .registry(registry)
        .team(TeamLimits::default())
        .build()
        .unwrap();
    let (outcome, _) = o.run("main", "LEAD task").await.unwrap();
    assert_eq!(outcome.text, "lead done");
    let reviewer = requests_of(&server, "Review it");
    let tools = reviewer[0].tool_names();
    for t in ["read_file", "grep", "SendMessage", "TaskList", "TaskUpdate"] {
        assert!(tools.iter().any(|n| n == t), "{t} missing from {tools:?}");
    }
    assert!(!tools.iter().any(|n| n == "bash"), "{tools:?}");
    // The lead's Task takes a name in a team run.
    let lead = requests_of(&server, "LEAD");
    let task = lead[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Task")
        .unwrap()
        .clone();
    assert!(
        task["input_schema"]["properties"]["name"].is_object(),
        "{task}"
    );
}
