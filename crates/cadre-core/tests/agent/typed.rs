use super::*;
use cadre_core::{Orchestrator, RunError, StopKind as Stop};
use std::path::Path;

const COUNT_SCHEMA: &str = r#"{"type": "object", "properties": {"count": {"type": "integer", "minimum": 0}}, "required": ["count"]}"#;

fn count_schema() -> Value {
    serde_json::from_str(COUNT_SCHEMA).unwrap()
}

fn orchestrator(server: &MockServer, dir: &Path) -> Arc<Orchestrator> {
    mock_builder(server, dir)
        .runs_dir(dir.join(".cadre/runs"))
        .build()
        .unwrap()
}

/// The parent's turn: one `Task` call for an explore subagent whose answer must match
/// `schema`.
fn typed_task(prompt: &str, schema: Value) -> Reply {
    Reply::tool_use(
        "t1",
        "Task",
        json!({"description": "count", "prompt": prompt, "subagent_type": "explore",
               "output_schema": schema}),
    )
}

/// The requests of the subagent whose task is `prompt`.
fn requests_of(server: &MockServer, prompt: &str) -> Vec<cadre_testkit::Captured> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text().contains(prompt))
        .collect()
}

#[tokio::test]
async fn an_invalid_answer_is_sent_back_with_its_error_and_the_parent_gets_the_valid_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Count the modules".into()),
        vec![
            Reply::text("There are three."),
            Reply::text(r#"{"count": 3}"#),
        ],
    );
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            typed_task("Count the modules", count_schema()),
            Reply::text("three modules"),
        ],
    );
    let o = orchestrator(&server, dir.path());
    let (outcome, summary) = o.run("main", "PARENT: how many modules?").await.unwrap();
    assert_eq!(outcome.stop, Stop::Done);

    let sub = requests_of(&server, "Count the modules");
    assert_eq!(sub.len(), 2);
    // Every request of the subagent asks for the format, in the form the API accepts:
    // closed objects, and the bound the API does not enforce moved into the description.
    for r in &sub {
        let format = &r.body["output_config"]["format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["schema"]["additionalProperties"], json!(false));
        let count = &format["schema"]["properties"]["count"];
        assert!(count.get("minimum").is_none(), "{count}");
        assert!(count["description"]
            .as_str()
            .unwrap()
            .contains("minimum: 0"));
    }
    let retry = sub[1].last_user_text();
    assert!(
        retry.contains("not accepted") && retry.contains("not JSON"),
        "{retry}"
    );
    // The parent's requests carry no format: the schema is the subagent's alone.
    let parent = requests_of(&server, "PARENT");
    assert!(parent.iter().all(|r| r.body.get("output_config").is_none()));
    let results = tool_results(&server, server.requests().len() - 1);
    assert_eq!(results[0]["content"][0]["text"], r#"{"count": 3}"#);
    assert!(results[0].get("is_error").is_none(), "{results:?}");
    let explore = summary
        .usage
        .agents
        .iter()
        .find(|a| a.agent_type == "explore")
        .unwrap();
    assert_eq!((explore.turns, &explore.stop), (2, &Stop::Done));
}

#[tokio::test]
async fn three_invalid_answers_end_in_a_failure_that_names_the_last_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Count the tests".into()),
        vec![
            Reply::text("not json"),
            Reply::text(r#"{"count": -1}"#),
            Reply::text(r#"{"count": "three"}"#),
        ],
    );
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            typed_task("Count the tests", count_schema()),
            Reply::text("gave up"),
        ],
    );
    let o = orchestrator(&server, dir.path());
    let (_, summary) = o.run("main", "PARENT: how many tests?").await.unwrap();
    assert_eq!(requests_of(&server, "Count the tests").len(), 3);
    let results = tool_results(&server, server.requests().len() - 1);
    assert_eq!(results[0]["is_error"], json!(true));
    let text = results[0]["content"][0]["text"].as_str().unwrap();
    for needle in [
        "did not match the output schema",
        "after 3 answers",
        "/count",
        "\"three\"",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    let explore = summary
        .usage
        .agents
        .iter()
        .find(|a| a.agent_type == "explore")
        .unwrap();
    assert!(
        matches!(explore.stop, Stop::InvalidAnswer(_)),
        "{explore:?}"
    );
}

#[tokio::test]
async fn a_task_with_a_schema_that_is_no_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            typed_task("never runs", json!({"type": 12})),
            Reply::text("ok"),
        ],
    );
    let o = orchestrator(&server, dir.path());
    o.run("main", "PARENT").await.unwrap();
    let results = tool_results(&server, 1);
    assert_eq!(results[0]["is_error"], json!(true));
    assert!(results[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("output_schema: it is not a valid JSON Schema"));
}

/// What the library's typed run decodes into.
#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Modules {
    /// The modules' names.
    names: Vec<String>,
    /// How many there are.
    count: u32,
}

#[tokio::test]
async fn run_typed_returns_a_value_of_the_type_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text(r#"{"names": ["core"], "count": -2}"#),
            Reply::text("```json\n{\"names\": [\"core\", \"cli\"], \"count\": 2}\n```"),
        ],
    );
    let o = orchestrator(&server, dir.path());
    let (modules, summary) = o
        .run_typed::<Modules>("main", "List the modules")
        .await
        .unwrap();
    assert_eq!(
        modules,
        Modules {
            names: vec!["core".into(), "cli".into()],
            count: 2
        }
    );
    assert_eq!(summary.stop, Stop::Done);
    let first = &server.requests()[0].body;
    let schema = &first["output_config"]["format"]["schema"];
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(schema["required"], json!(["names", "count"]));
    assert!(schema.get("$schema").is_none());
    // u32's bound is checked here (the -2 was sent back), not sent.
    assert!(server.requests()[1].last_user_text().contains("/count"));

    // A run that ends without a valid answer is an error, not a default value.
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("no").stop_reason("refusal")]);
    let o = orchestrator(&server, dir.path());
    let err = o.run_typed::<Modules>("main", "List").await.unwrap_err();
    assert!(matches!(err, RunError::Answer(_)), "{err}");
}

#[tokio::test]
async fn a_type_s_effort_and_output_schema_reach_its_requests_from_yaml_and_claude_code_files() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("counter.yaml"),
        format!(
            "name: counter\ndescription: Counts.\ntools: [read_file]\neffort: High\noutput_schema: {COUNT_SCHEMA}\nprompt: You count.\n"
        ),
    )
    .unwrap();
    std::fs::write(
        agents.join("skimmer.md"),
        "---\nname: skimmer\ndescription: Skims.\ntools: Read\neffort: low\n---\nYou skim.\n",
    )
    .unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::SystemContains("You count.".into()),
        vec![Reply::text(r#"{"count": 7}"#)],
    );
    server.route(
        Match::SystemContains("You skim.".into()),
        vec![Reply::text("skimmed")],
    );
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("c1", "counter", "count"), ("s1", "skimmer", "skim")]),
            Reply::text("done"),
        ],
    );
    let o = mock_builder(&server, dir.path())
        .agents_dir(&agents)
        .build()
        .unwrap();
    o.run("main", "PARENT").await.unwrap();
    let of = |prompt: &str| {
        server
            .requests()
            .into_iter()
            .find(|r| r.system_text().contains(prompt))
            .unwrap()
            .body
    };
    let counter = of("You count.");
    assert_eq!(counter["output_config"]["effort"], "high");
    assert_eq!(
        counter["output_config"]["format"]["schema"]["additionalProperties"],
        json!(false)
    );
    let skimmer = of("You skim.");
    assert_eq!(skimmer["output_config"], json!({"effort": "low"}));
    // The primary type sets neither: its requests carry no output_config at all.
    assert!(server.requests()[0].body.get("output_config").is_none());
    let results = tool_results(&server, server.requests().len() - 1);
    assert_eq!(results[0]["content"][0]["text"], r#"{"count": 7}"#);
}

#[test]
fn a_loose_effort_is_repaired_and_an_unknown_one_dropped_with_a_warning() {
    let file = Path::new("agents/a.yaml");
    let (spec, problems) = cadre_core::AgentSpec::parse_yaml(
        file,
        "name: a\ndescription: d\neffort: X-High\nprompt: p\n",
    );
    assert_eq!(spec.unwrap().effort(), Some(cadre_model::Effort::Xhigh));
    assert_eq!(problems.len(), 1);
    assert!(problems[0].warning && problems[0].message.contains("read as `xhigh`"));
    let (spec, problems) = cadre_core::AgentSpec::parse_yaml(
        file,
        "name: a\ndescription: d\neffort: ultra\noutput_schema: nope\nprompt: p\n",
    );
    let spec = spec.unwrap();
    assert_eq!((spec.effort(), &spec.output_schema), (None, &None));
    let said: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("agents/a.yaml:3:9: warning: unknown `effort: ultra` ignored"));
    assert!(said[1].starts_with("agents/a.yaml:4:1: warning: `output_schema` ignored"));
}

#[tokio::test]
async fn an_openai_compatible_server_is_asked_with_response_format_and_checked_alike() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::text(r#"{"names": "core", "count": 1}"#),
            Reply::text(r#"{"names": ["core"], "count": 1}"#),
        ],
    );
    let config = cadre_model::OpenAiConfig::new()
        .with_base_url(format!("{}/v1", server.uri()))
        .with_retry(RetryPolicy::none());
    let o = Orchestrator::builder()
        .model(Arc::new(cadre_model::OpenAiModel::new(config).unwrap()))
        .model_id("local-model")
        .workspace(dir.path())
        .build()
        .unwrap();
    let (modules, _) = o.run_typed::<Modules>("main", "List").await.unwrap();
    assert_eq!(modules.names, ["core"]);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let format = &requests[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(
        format["json_schema"]["schema"]["additionalProperties"],
        json!(false)
    );
    assert!(requests[0].body.get("output_config").is_none());
    assert!(requests[1].last_user_text().contains("/names"));
}
