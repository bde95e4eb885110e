use super::sessions::{journal, key, kill, spawn_cadre};
use super::*;
use std::time::Duration;

/// Matches the requests of the agent whose first message holds `who` and whose last user
/// message holds `last`.
fn when(who: &str, last: &str) -> Match {
    let (who, last) = (who.to_owned(), last.to_owned());
    Match::Custom(std::sync::Arc::new(move |b: &Value| {
        let msgs = b["messages"].as_array().cloned().unwrap_or_default();
        msgs.first().is_some_and(|m| m.to_string().contains(&who))
            && msgs.last().is_some_and(|m| m.to_string().contains(&last))
    }))
}

/// Matches beta's requests by which of alpha's messages they hold anywhere (whether any,
/// and, when `third`, the third too), so a route does not depend on how the messages were
/// grouped into deliveries, which load can change.
fn beta_holding(any_from_alpha: bool, third: bool) -> Match {
    Match::Custom(std::sync::Arc::new(move |b: &Value| {
        let msgs = b["messages"].as_array().cloned().unwrap_or_default();
        let text = serde_json::to_string(&msgs).unwrap();
        msgs.first()
            .is_some_and(|m| m.to_string().contains("Job beta"))
            && text.contains("team-message from=\\\"alpha\\\"") == any_from_alpha
            && (!third || text.contains("seq=\\\"3\\\""))
    }))
}

fn send(id: &str, text: &str) -> (&'static str, &'static str, Value) {
    let id: &'static str = Box::leak(id.to_owned().into_boxed_str());
    (id, "SendMessage", json!({"to": "beta", "message": text}))
}

/// Every `<team-message from="alpha" seq="N">` of a history, in order.
fn seqs_from_alpha(history: &[Value]) -> Vec<u64> {
    let text = serde_json::to_string(history).unwrap();
    text.split("team-message from=\\\"alpha\\\" seq=\\\"")
        .skip(1)
        .map(|s| s.split('\\').next().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_killed_team_run_resumes_with_every_message_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("LEAD".into()),
        std::iter::once(Reply::tool_uses(vec![
            ("c1", "TaskCreate", json!({"subject": "answer three messages"})),
            (
                "t1",
                "Task",
                json!({"description": "Job alpha", "prompt": "Job alpha", "subagent_type": "code", "name": "alpha"}),
            ),
            (
                "t2",
                "Task",
                json!({"description": "Job beta", "prompt": "Job beta", "subagent_type": "code", "name": "beta"}),
            ),
        ]))
        .chain(vec![Reply::text("lead done"); 10])
        .collect(),
    );
    // alpha sends two messages, then a third, then waits.
    server.route(when("Job alpha", "m3"), vec![Reply::text("alpha waits")]);
    server.route(
        when("Job alpha", "Sent to beta as message #2"),
        vec![Reply::tool_uses(vec![send("a3", "m3")])],
    );
    server.route(
        when("Job alpha", "Job alpha"),
        vec![Reply::tool_uses(vec![send("a1", "m1"), send("a2", "m2")])],
    );
    server.route(
        when("Job alpha", "Sent to"),
        vec![Reply::text("alpha waits"); 4],
    );
    // beta is given alpha's first messages (one or two, at its start or after it, as the
    // interleaving falls), and that request is in flight when the run is killed.
    server.route(
        beta_holding(true, false),
        vec![Reply::text("never seen").delay(Duration::from_secs(120))],
    );
    server.route(beta_holding(false, false), vec![Reply::text("beta ready")]);

    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--team", "LEAD task"],
    );
    let holding = |r: &cadre_testkit::Captured| {
        r.first_user_text() == "Job beta" && !seqs_from_alpha(r.messages()).is_empty()
    };
    let ready = || {
        let j = journal(dir.path());
        [
            server.requests().iter().any(holding),
            j.contains("\"text\":\"m3\""),
            j.contains("alpha waits"),
            j.contains("lead done"),
        ]
    };
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !ready().iter().all(|r| *r) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // On a timeout, say which of the four never came and what the model was asked.
    if waited.is_err() {
        let asked: Vec<String> = server
            .requests()
            .iter()
            .map(|r| {
                format!(
                    "{:?} ({} messages)",
                    r.first_user_text(),
                    r.messages().len()
                )
            })
            .collect();
        panic!(
            "timed out: [beta holds alpha's messages, m3 sent, alpha waits, lead done] = {:?}; requests: {asked:#?}\n{}",
            ready(),
            journal(dir.path())
        );
    }
    kill(&mut child);
    let before = server.requests();
    let unfinished = before.iter().rfind(|r| holding(r)).map(key).unwrap();
    let completed: std::collections::HashSet<String> = before
        .iter()
        .map(key)
        .filter(|k| *k != unfinished)
        .collect();
    server.route(
        when("Job beta", "completed"),
        vec![Reply::text("beta got three")],
    );
    server.route(
        beta_holding(true, true),
        vec![Reply::tool_use(
            "b2",
            "TaskUpdate",
            json!({"task_id": 1, "status": "completed"}),
        )],
    );
    server.route(beta_holding(true, false), vec![Reply::text("beta got two")]);

    let out = cadre_env(
        dir.path(),
        &[
            ("ANTHROPIC_BASE_URL", &server.uri()),
            ("ANTHROPIC_API_KEY", "k"),
        ],
        &["resume"],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("lead done"), "{}", out.stdout);
    let after = server.requests();
    for r in &after[before.len()..] {
        assert!(
            !completed.contains(&key(r)),
            "sent again: {}",
            r.first_user_text()
        );
    }
    // beta got each of alpha's messages once, in order, across the kill.
    let last_beta = after
        .iter()
        .rfind(|r| r.first_user_text() == "Job beta")
        .unwrap();
    assert_eq!(seqs_from_alpha(last_beta.messages()), vec![1, 2, 3]);
    // No member started twice; the task list came back and was completed once.
    let j = journal(dir.path());
    assert_eq!(j.matches("\"change\":\"joined\"").count(), 3, "{j}");
    assert_eq!(j.matches("\"step\":\"started\"").count(), 3, "{j}");
    assert_eq!(j.matches("\"change\":\"task_created\"").count(), 1, "{j}");
    assert_eq!(
        j.matches("\"status\":\"completed\",\"owner\":\"beta\"")
            .count(),
        1,
        "{j}"
    );
}

#[tokio::test]
async fn a_team_run_is_refused_on_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let out = cadre_offline(
        dir.path(),
        &["run", "--engine", "restate", "--team", "anything"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--team"), "{}", out.stderr);
    assert!(out.stderr.contains("--engine local"), "{}", out.stderr);
    let out = cadre_offline(
        dir.path(),
        &["run", "--engine", "restate", "--agent", "lead", "anything"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("lead"), "{}", out.stderr);
}

#[tokio::test]
async fn a_recorded_team_run_replays() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("LEAD".into()),
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "Job alpha", "prompt": "Job alpha", "subagent_type": "explore", "name": "alpha"}),
            ),
            Reply::text("lead done: alpha said hello"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job alpha".into()),
        vec![
            Reply::tool_use(
                "a1",
                "SendMessage",
                json!({"to": "main", "message": "hello from alpha"}),
            ),
            Reply::text("alpha done"),
        ],
    );
    let cassette = dir.path().join("team.jsonl");
    let cassette_arg = cassette.to_str().unwrap();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--team", "--record", cassette_arg, "LEAD task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("lead done"), "{}", out.stdout);
    // The lead was given alpha's message with its Task result, in one user turn.
    let lead_last = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text() == "LEAD task")
        .unwrap();
    let last = lead_last.messages().last().unwrap().to_string();
    assert!(
        last.contains("tool_result") && last.contains("hello from alpha"),
        "{last}"
    );
    let out = cadre_offline(
        dir.path(),
        &["run", "--team", "--replay", cassette_arg, "LEAD task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("lead done: alpha said hello"),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn a_member_refused_mid_exchange_returns_the_message_in_flight_and_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        when("LEAD", "LEAD"),
        vec![Reply::tool_use(
            "t1",
            "Task",
            json!({"description": "Job bob", "prompt": "Job bob", "subagent_type": "code", "name": "bob"}),
        )],
    );
    server.route(
        when("LEAD", "bob ready"),
        vec![Reply::tool_use(
            "s1",
            "SendMessage",
            json!({"to": "bob", "message": "first ask"}),
        )],
    );
    // The lead's next request waits until bob's is in flight: then it sends the second.
    let lead_second = server.gate(when("LEAD", "Sent to bob as message #1"));
    server.route(
        when("LEAD", "Sent to bob as message #1"),
        vec![Reply::tool_use(
            "s2",
            "SendMessage",
            json!({"to": "bob", "message": "second ask"}),
        )],
    );
    server.route(when("LEAD", ""), vec![Reply::text("LEAD-DONE"); 10]);
    server.route(when("Job bob", "Job bob"), vec![Reply::text("bob ready")]);
    let bob_asked = server.gate(when("Job bob", "first ask"));
    server.route(
        when("Job bob", "first ask"),
        vec![Reply::text("I cannot help with that.").stop_reason("refusal")],
    );

    let run = {
        let (dir, uri) = (dir.path().to_owned(), server.uri());
        tokio::spawn(
            async move { cadre(&dir, &uri, Some("k"), &["run", "--team", "LEAD task"]).await },
        )
    };
    assert!(bob_asked.wait_for(1, Duration::from_secs(60)).await);
    lead_second.open();
    wait_for("the second message to be sent", || {
        journal(dir.path()).contains("second ask")
    })
    .await;
    bob_asked.open();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run ends")
        .unwrap();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("LEAD-DONE"), "{}", out.stdout);
    // The second message went back to the lead, which read it.
    let lead_heard = server.requests().iter().any(|r| {
        r.first_user_text() == "LEAD task"
            && serde_json::to_string(r.messages())
                .unwrap()
                .contains("bob ended before reading your message #2: second ask")
    });
    assert!(
        lead_heard,
        "the lead was never told: {}",
        journal(dir.path())
    );
}

#[tokio::test]
async fn two_starts_of_one_name_in_one_turn_make_one_member_also_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let start = |id: &str| {
        (
            id.to_owned(),
            json!({"description": "Job x", "prompt": "Job x", "subagent_type": "code", "name": "x"}),
        )
    };
    let calls = [start("t1"), start("t2")];
    server.route(
        when("LEAD", "LEAD"),
        vec![Reply::tool_uses(
            calls
                .iter()
                .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                .collect(),
        )],
    );
    server.route(when("LEAD", ""), vec![Reply::text("LEAD-DONE"); 10]);
    // x's first request is in flight when cadre is killed.
    let x_asked = server.gate(when("Job x", "Job x"));
    // (Two: the one held when cadre is killed may still be taken as its client goes.)
    server.route(when("Job x", "Job x"), vec![Reply::text("x ready"); 2]);
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--team", "LEAD task"],
    );
    assert!(x_asked.wait_for(1, Duration::from_secs(60)).await);
    wait_for("the refused start to be journaled", || {
        journal(dir.path()).contains("already exists")
    })
    .await;
    kill(&mut child);
    x_asked.open();
    let out = cadre_env(
        dir.path(),
        &[
            ("ANTHROPIC_BASE_URL", &server.uri()),
            ("ANTHROPIC_API_KEY", "k"),
            ("HOME", home.path().to_str().unwrap()),
        ],
        &["resume"],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let j = journal(dir.path());
    assert_eq!(j.matches("\"change\":\"joined\"").count(), 2, "{j}");
    assert_eq!(j.matches("\"step\":\"spawned\"").count(), 1, "{j}");
    // The lead got one member's answer and one refusal.
    let last = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text() == "LEAD task")
        .unwrap();
    let results: Vec<(bool, String)> = last.messages()[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["is_error"].as_bool().unwrap_or(false),
                cadre_testkit::content_text(b.get("content")),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results.iter().filter(|(e, _)| *e).count(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .any(|(e, t)| *e && t.contains("already exists")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|(e, t)| !*e && t.contains("x ready")),
        "{results:?}"
    );
}

#[tokio::test]
async fn text_mode_prints_the_lead_s_answer_once_however_often_its_team_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // The lead answers, is woken by alpha's notice, and answers again; then once more
    // with a different final word.
    let routes = |server: &MockServer, last: &str| {
        server.route(
            when("LEAD", "LEAD"),
            vec![Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "Job alpha", "prompt": "Job alpha", "subagent_type": "code", "name": "alpha"}),
            )],
        );
        server.route(
            when("LEAD", "alpha ready"),
            vec![Reply::tool_use(
                "s1",
                "SendMessage",
                json!({"to": "alpha", "message": "go on"}),
            )],
        );
        server.route(
            when("LEAD", "Sent to alpha"),
            vec![Reply::text("LEAD-DONE")],
        );
        server.route(when("LEAD", ""), vec![Reply::text(last); 4]);
        server.route(
            when("Job alpha", "Job alpha"),
            vec![Reply::text("alpha ready")],
        );
        server.route(
            when("Job alpha", ""),
            vec![Reply::text("alpha finished"); 4],
        );
    };
    routes(&server, "LEAD-DONE");
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--team", "LEAD task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The lead was woken: its answer went out twice, and is printed once.
    let woken = server
        .requests()
        .iter()
        .filter(|r| {
            r.first_user_text() == "LEAD task" && r.last_user_text().contains("alpha finished")
        })
        .count();
    assert!(woken >= 1, "the lead was never woken");
    assert_eq!(out.stdout.matches("LEAD-DONE").count(), 1, "{}", out.stdout);

    // A final answer other than the one streamed is printed after it, once.
    let server = MockServer::start().await;
    server.allow_unused_replies();
    routes(&server, "ALL-DONE");
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--team", "LEAD task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.matches("LEAD-DONE").count(), 1, "{}", out.stdout);
    assert_eq!(out.stdout.matches("ALL-DONE").count(), 1, "{}", out.stdout);
    assert!(
        out.stdout.trim_end().ends_with("ALL-DONE"),
        "{}",
        out.stdout
    );
}
