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
    AgentSpec::builder("counter")
        .description("Counts words.")
        .mode(Mode::Primary)
        .tools(["word_count", "Task"])
        .prompt("You count words.")
        .build()
}

fn reader() -> AgentSpec {
    AgentSpec::builder("reader")
        .description("Reads only.")
        .mode(Mode::Subagent)
        .read_only(true)
        .prompt("You are a reader subagent.")
        .build()
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
    assert!(matches!(err, RunError::NotPrimary { .. }), "{err}");
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
    // A delegated agent is a run too: the used orchestrator refuses it.
    let call = cadre_core::DelegatedCall {
        path: "main".into(),
        depth: 0,
        spec: o.registry().get("main").unwrap().clone(),
        model: "claude-sonnet-5-5".into(),
        description: "again".into(),
        prompt: "Say hi".into(),
        trace: None,
        output_schema: None,
    };
    let (outcome, records) = o.run_delegated(&call).await;
    assert!(records.is_empty());
    match &outcome.stop {
        StopKind::Other(why) => assert!(why.contains("already ran"), "{why}"),
        other => panic!("{other:?}"),
    }

    let err = Orchestrator::builder()
        .model(mock_model(&server, 0))
        .workspace(dir.path())
        .agent(
            AgentSpec::builder("counter")
                .description("Counts.")
                .mode(Mode::Subagent)
                .tools(["word_cuont"])
                .build(),
        )
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

/// A tool that changes things and counts its runs; whether a call of it that a crash cut
/// short may run again is set by the test (`repeat`).
struct Post {
    repeat: bool,
    runs: Arc<std::sync::atomic::AtomicUsize>,
}

impl TypedTool for Post {
    type Input = Nothing;
    type Output = String;
    fn name(&self) -> &str {
        "post"
    }
    fn description(&self) -> String {
        "Post the form.".into()
    }
    fn is_read_only(&self) -> bool {
        false
    }
    fn rerun(&self) -> cadre_tools::Rerun {
        if self.repeat {
            cadre_tools::Rerun::Repeat
        } else {
            cadre_tools::Rerun::Never
        }
    }
    async fn run(&self, _: Nothing, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok("posted".into())
    }
}

/// A call journaled as started (its run said it must never run twice) and cut short by a
/// crash is reported as interrupted on resume, even where the resumed run's tool would now
/// let it run again.
#[tokio::test]
async fn a_started_call_is_interrupted_on_resume_whatever_the_tool_says_now() {
    use cadre_core::JournaledRun;
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("p1", "post", json!({})),
            Reply::text("done"),
            Reply::text("done again"),
        ],
    );
    let poster = AgentSpec::builder("poster")
        .description("Posts.")
        .mode(Mode::Primary)
        .tools(["post"])
        .prompt("You post.")
        .build();
    let runs = dir.path().join("runs");
    let posted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let build = |repeat: bool| {
        Orchestrator::builder()
            .model(mock_model(&server, 0))
            .workspace(dir.path())
            .agent(poster.clone())
            .tool(Post {
                repeat,
                runs: posted.clone(),
            })
            .runs_dir(&runs)
            .build()
            .unwrap()
    };
    let (_, summary) = build(false).run("poster", "post it").await.unwrap();
    let run_dir = runs.join(summary.run_id.unwrap());
    // As if cadre were killed while the call ran: the journal ends on its start.
    let journal = run_dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let cut = text
        .lines()
        .position(|l| l.contains("\"step\":\"tool_started\""))
        .expect("the call's start is journaled");
    let kept: Vec<&str> = text.lines().take(cut + 1).collect();
    std::fs::write(&journal, kept.join("\n") + "\n").unwrap();

    let run = JournaledRun::open(&run_dir).unwrap().unwrap();
    let (outcome, _) = build(true).resume(run, None).await.unwrap();
    assert_eq!(outcome.text, "done again");
    assert_eq!(
        posted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the call ran again"
    );
    let last = server.requests().last().unwrap().clone();
    let result = &last.messages().last().unwrap()["content"][0];
    assert_eq!(result["tool_use_id"], "p1");
    assert_eq!(result["is_error"], true, "{result}");
}
