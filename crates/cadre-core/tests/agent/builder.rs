use super::*;
use cadre_core::{AgentSpec, Mode, Orchestrator, RunError};
use cadre_tools::{Json, ToolError, TypedTool};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A custom tool: a struct, a derive and one async fn.
struct WordCount;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Count {
    /// The text whose words to count.
    text: String,
}

#[derive(Serialize)]
struct Counted {
    words: usize,
}

#[async_trait::async_trait]
impl TypedTool for WordCount {
    type Input = Count;
    type Output = Json<Counted>;
    fn name(&self) -> &str {
        "word_count"
    }
    fn description(&self) -> String {
        "Count the words of a text.".into()
    }
    fn is_read_only(&self) -> bool {
        true
    }
    async fn run(&self, input: Count, _ctx: &ToolContext) -> Result<Json<Counted>, ToolError> {
        Ok(Json(Counted {
            words: input.text.split_whitespace().count(),
        }))
    }
}

/// A custom tool that changes things, which read-only types must not get.
struct Stamp;

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[async_trait::async_trait]
impl TypedTool for Stamp {
    type Input = Nothing;
    type Output = String;
    fn name(&self) -> &str {
        "stamp"
    }
    fn description(&self) -> String {
        "Stamp the ledger.".into()
    }
    fn is_read_only(&self) -> bool {
        false
    }
    async fn run(&self, _: Nothing, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok("stamped".into())
    }
}

fn counter() -> AgentSpec {
    AgentSpec {
        name: "counter".into(),
        description: "Counts words.".into(),
        mode: Mode::Primary,
        tools: vec!["word_count".into(), "Task".into()],
        prompt: "You count words.".into(),
        ..AgentSpec::default()
    }
}

fn reader() -> AgentSpec {
    AgentSpec {
        name: "reader".into(),
        description: "Reads only.".into(),
        mode: Mode::Subagent,
        read_only: true,
        prompt: "You are a reader subagent.".into(),
        ..AgentSpec::default()
    }
}

#[tokio::test]
async fn a_typed_tool_and_a_code_defined_type_run_and_events_stream_until_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Count".into()),
        vec![
            Reply::tool_uses(vec![
                ("toolu_1", "word_count", json!({"text": "one two three"})),
                ("toolu_2", "Task", json!({"description": "look", "prompt": "Look around", "subagent_type": "reader"})),
            ]),
            Reply::text("Three words."),
        ],
    );
    server.route(
        Match::FirstUserContains("Look around".into()),
        vec![Reply::text("looked")],
    );
    let o = Orchestrator::builder()
        .model(mock_model(&server, 0))
        .workspace(dir.path())
        .agent(counter())
        .agent(reader())
        .tool(WordCount)
        .tool(Stamp)
        .build()
        .unwrap();
    let events = o.events();
    let collected = tokio::spawn(events.collect::<Vec<Event>>());
    let (outcome, _) = o.run("counter", "Count the words").await.unwrap();
    assert_eq!(outcome.text, "Three words.");
    // The stream ends with the run, though the orchestrator lives on.
    let events = tokio::time::timeout(Duration::from_secs(30), collected)
        .await
        .unwrap()
        .unwrap();
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Finished { agent, .. } if agent == "counter")));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ToolCall { name, .. } if name == "word_count")));

    let first = &server.requests()[0];
    assert_eq!(
        first.tool_names(),
        ["word_count", "Task", "TaskOutput", "TaskStop"]
    );
    let schema = &first.body["tools"][0]["input_schema"];
    assert_eq!(
        schema,
        &json!({"type": "object", "properties": {"text": {"type": "string", "description": "The text whose words to count."}}, "required": ["text"], "additionalProperties": false})
    );
    let results = tool_results(&server, 2);
    assert_eq!(results[0]["content"][0]["text"], r#"{"words":3}"#);
    // The read-only subagent was offered every built-in and the read-only extra tool,
    // never the one that changes things.
    let sub = server
        .requests()
        .into_iter()
        .find(|r| r.first_user_text() == "Look around")
        .unwrap();
    let names = sub.tool_names();
    assert!(names.iter().any(|n| n == "word_count"), "{names:?}");
    assert!(names.iter().all(|n| n != "stamp"), "{names:?}");
}

#[tokio::test]
async fn the_builder_says_what_is_missing() {
    let err = Orchestrator::builder().build().map(|_| ()).unwrap_err();
    assert!(matches!(err, RunError::NoModel), "{err}");
    let err = Orchestrator::builder()
        .openai(cadre_model::OpenAiConfig::new())
        .build()
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, RunError::NoModelId), "{err}");
    let server = MockServer::start().await;
    let err = Orchestrator::builder()
        .model(mock_model(&server, 0))
        .workspace("/nonexistent/cadre-builder-test")
        .build()
        .map(|_| ())
        .unwrap_err();
    assert!(
        err.to_string().starts_with("cannot work in /nonexistent"),
        "{err}"
    );
    // An orchestrator runs once, refused or not: each question gets its own.
    let build = || {
        Orchestrator::builder()
            .model(mock_model(&server, 0))
            .build()
            .unwrap()
    };
    let err = build().run("explore", "x").await.unwrap_err();
    assert!(matches!(err, RunError::NotPrimary(_)), "{err}");
    let err = build().run("nope", "x").await.unwrap_err().to_string();
    assert!(err.contains("primary types: lead, main"), "{err}");
}

#[tokio::test]
async fn an_orchestrator_runs_once_and_a_type_typo_fails_at_build() {
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Say hi".into()),
        vec![Reply::text("hi")],
    );
    let dir = tempfile::tempdir().unwrap();
    let o = Orchestrator::builder()
        .model(mock_model(&server, 0))
        .workspace(dir.path())
        .build()
        .unwrap();
    let (outcome, _) = o.run("main", "Say hi").await.unwrap();
    assert_eq!(outcome.text, "hi");
    let err = o.run("main", "Say hi").await.unwrap_err();
    assert!(matches!(err, RunError::AlreadyRan), "{err}");

    let err = Orchestrator::builder()
        .model(mock_model(&server, 0))
        .workspace(dir.path())
        .agent(AgentSpec {
            name: "counter".into(),
            description: "Counts.".into(),
            mode: Mode::Subagent,
            tools: vec!["word_cuont".into()],
            ..AgentSpec::default()
        })
        .tool(WordCount)
        .build()
        .map(|_| ())
        .unwrap_err();
    assert!(
        err.to_string().contains("\"word_cuont\"")
            && err.to_string().contains("did you mean word_count"),
        "{err}"
    );
}
