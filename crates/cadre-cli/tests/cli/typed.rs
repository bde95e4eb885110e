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
