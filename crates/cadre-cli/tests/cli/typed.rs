use super::*;

/// A primary type with an effort and an answer schema, in the project's `agents/`.
const COUNTER: &str = "name: counter\ndescription: Counts.\nmode: primary\ntools: [read_file]\neffort: medium\noutput_schema: {type: object, properties: {count: {type: integer}}, required: [count]}\nprompt: You count.\n";

#[tokio::test]
async fn a_type_s_effort_and_answer_schema_reach_the_request_and_its_answer_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/counter.yaml"), COUNTER);
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("seven"), Reply::text(r#"{"count": 7}"#)],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &[
            "run",
            "--agent",
            "counter",
            "--output-format",
            "json",
            "count",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["answer"], r#"{"count": 7}"#);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let config = &requests[0].body["output_config"];
    assert_eq!(config["effort"], "medium");
    assert_eq!(config["format"]["type"], "json_schema");
    assert_eq!(
        config["format"]["schema"]["additionalProperties"],
        json!(false)
    );
    assert!(requests[1].last_user_text().contains("not accepted"));
}

#[tokio::test]
async fn a_loose_effort_is_a_warning_and_strict_check_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join("agents/slow.yaml"),
        "name: slow\ndescription: d\neffort: extreme\nprompt: p\n",
    );
    write_file(
        &dir.path().join(".claude/agents/quick.md"),
        "---\nname: quick\ndescription: d\neffort: Low\n---\nBe quick.\n",
    );
    let out = cadre_offline(dir.path(), &["agents", "check"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let report = out.stdout + &out.stderr;
    assert!(
        report.contains("slow.yaml:3:9: warning: unknown `effort: extreme` ignored"),
        "{report}"
    );
    assert!(
        report.contains("quick.md:4:9: warning: `effort: Low` read as `low`"),
        "{report}"
    );
    assert!(!report.contains("`effort` ignored"), "{report}");
    let strict = cadre_offline(dir.path(), &["agents", "check", "--strict"]).await;
    assert_eq!(strict.code, 1, "{}{}", strict.stdout, strict.stderr);
    assert!(strict
        .stdout
        .contains("slow.yaml:3:9: error: unknown `effort: extreme`"));
}

/// Whether a request's messages hold `text` anywhere.
fn holds(text: &'static str) -> Match {
    Match::Custom(std::sync::Arc::new(move |body: &Value| {
        body["messages"].to_string().contains(text)
    }))
}

#[tokio::test]
async fn a_killed_typed_fork_resumes_with_its_rejected_answer_counted_and_nothing_sent_twice() {
    use super::sessions::{journal, key, kill, spawn_cadre};
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    const DIRECTIVE: &str = "Your task: Count the modules";
    let directive = DIRECTIVE;
    server.route(
        holds(directive),
        vec![
            Reply::text("two, I think"),
            // In flight when the run is killed.
            Reply::text("never seen").delay(std::time::Duration::from_secs(120)),
        ],
    );
    // The parent's requests: a fork's start with the parent's messages too.
    let parent = Match::Custom(std::sync::Arc::new(move |body: &Value| {
        !body["messages"].to_string().contains(directive)
    }));
    server.route(
        parent,
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "count", "prompt": "Count the modules",
                       "subagent_type": "fork",
                       "output_schema": {"type": "object", "properties": {"count": {"type": "integer"}},
                                         "required": ["count"]}}),
            ),
            Reply::text("the fork counted"),
        ],
    );
    let mut child = spawn_cadre(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "PARENT task"],
    );
    let fork_requests = |s: &MockServer| {
        s.requests()
            .iter()
            .filter(|r| r.body["messages"].to_string().contains(directive))
            .count()
    };
    wait_for(
        "the fork's answer to be rejected and its retry sent",
        || journal(dir.path()).contains("\"step\":\"rejected\"") && fork_requests(&server) == 2,
    )
    .await;
    kill(&mut child);
    let before = server.requests();
    let unfinished = key(before.last().unwrap());
    let completed: std::collections::HashSet<String> = before
        .iter()
        .map(key)
        .filter(|k| *k != unfinished)
        .collect();
    server.route(holds(directive), vec![Reply::text(r#"{"count": 2}"#)]);
    let out = cadre_env(
        dir.path(),
        &[
            ("ANTHROPIC_BASE_URL", &server.uri()),
            ("ANTHROPIC_API_KEY", "k"),
        ],
        &["resume"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("the fork counted"), "{}", out.stdout);
    let after = server.requests();
    for r in &after[before.len()..] {
        assert!(
            !completed.contains(&key(r)),
            "sent again: {}",
            r.last_user_text()
        );
    }
    // The resumed fork asks again with the rejection in its history, as before the kill.
    let resumed = after[before.len()..]
        .iter()
        .find(|r| r.body["messages"].to_string().contains(directive))
        .unwrap();
    assert_eq!(key(resumed), unfinished);
    assert!(resumed.last_user_text().contains("not accepted"));
    let parent = after.last().unwrap();
    let result = &parent.messages().last().unwrap()["content"][0];
    assert_eq!(result["content"][0]["text"], r#"{"count": 2}"#);
}
