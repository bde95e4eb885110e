//! The run's spans, read back through the OpenTelemetry SDK's in-memory exporter: names,
//! kinds, parents and attributes as the GenAI conventions give them, subagents nested under
//! the `Task` calls that started them, and no content unless it is asked for.
//!
//! A test binary of its own: the exporter is the process's subscriber, and every span of
//! the binary's tests goes through it.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cadre_core::semconv::{self, RecordContent};
use cadre_core::workflow::{ItemCall, WorkItem, Workflow};
use cadre_core::{AgentSpec, Mode, Registry, StopKind};
use cadre_testkit::{Match, MockServer, Reply};
use opentelemetry::trace::{SpanId, SpanKind, Status, TracerProvider as _};
use opentelemetry::{Array, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

#[path = "common/mock.rs"]
mod mock;
use mock::{mock_builder, mock_model};

/// The spans the scenario ended, once every one of them has ended.
struct Traced {
    spans: Vec<SpanData>,
}

impl Traced {
    fn named(&self, name: &str) -> Vec<&SpanData> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    /// The one `invoke_agent` span whose parent is `call`.
    fn child_agent(&self, call: &SpanData) -> &SpanData {
        let found: Vec<_> = self
            .spans
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent ") && is_child(s, call))
            .collect();
        assert_eq!(found.len(), 1, "{:?}", self.names());
        found[0]
    }

    fn names(&self) -> Vec<String> {
        self.spans.iter().map(|s| s.name.to_string()).collect()
    }

    /// The `invoke_agent` span of the agent at `path`.
    fn agent(&self, path: &str) -> &SpanData {
        let found: Vec<_> = self
            .spans
            .iter()
            .filter(|s| {
                s.name.starts_with("invoke_agent ") && attr(s, semconv::GEN_AI_AGENT_ID) == path
            })
            .collect();
        assert_eq!(found.len(), 1, "{path}: {:?}", self.names());
        found[0]
    }

    /// The `execute_tool` span of the call `id`.
    fn call(&self, id: &str) -> &SpanData {
        let found: Vec<_> = self
            .spans
            .iter()
            .filter(|s| attr(s, semconv::GEN_AI_TOOL_CALL_ID) == id)
            .collect();
        assert_eq!(found.len(), 1, "{id}: {:?}", self.names());
        found[0]
    }

    /// The `chat` spans whose parent is `parent`.
    fn chats_under(&self, parent: &SpanData) -> Vec<&SpanData> {
        self.spans
            .iter()
            .filter(|s| s.name.starts_with("chat ") && is_child(s, parent))
            .collect()
    }
}

/// An attribute's value as text; empty when the span has none of that name.
fn attr(span: &SpanData, key: &str) -> String {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
        .unwrap_or_default()
}

/// An integer attribute's value; `None` when the span has none of that name.
fn int(span: &SpanData, key: &str) -> Option<i64> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .and_then(|kv| match kv.value {
            OtelValue::I64(v) => Some(v),
            _ => None,
        })
}

/// A list-of-strings attribute's values; empty when the span has none of that name.
fn strings(span: &SpanData, key: &str) -> Vec<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            OtelValue::Array(Array::String(values)) => {
                values.iter().map(|v| v.as_str().to_owned()).collect()
            }
            other => panic!("{key} is not a list of strings: {other:?}"),
        })
        .unwrap_or_default()
}

fn is_child(span: &SpanData, parent: &SpanData) -> bool {
    span.parent_span_id == parent.span_context.span_id()
}

thread_local! {
    /// Whether the spans of tool calls made on this thread are left out.
    static NO_TOOL_SPANS: Cell<bool> = const { Cell::new(false) };
}

/// The exporter every span of this test binary goes to. The OpenTelemetry layer is the
/// process's subscriber, installed once: a subscriber set for one thread only can lose
/// spans whose callsites another test's thread registers at the same moment.
fn exporter() -> &'static (InMemorySpanExporter, SdkTracerProvider) {
    static EXPORTER: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        // What the `cadre` binary's exporter takes: cadre's spans, and the retries logged
        // inside a request's span.
        let wanted = tracing_subscriber::filter::Targets::new()
            .with_target(semconv::TARGET, tracing::Level::INFO)
            .with_target("cadre_model::retry", tracing::Level::WARN);
        // A test may leave the tool calls' spans out, on its own thread, as an embedder's
        // global filter may: they are then not made at all. (Dynamic: a plain filter
        // function's answer is cached per callsite.)
        let tools_wanted = tracing_subscriber::filter::dynamic_filter_fn(|meta, _| {
            meta.name() != "execute_tool" || !NO_TOOL_SPANS.with(Cell::get)
        });
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("cadre-test"))
            .with_filter(wanted);
        let subscriber = tracing_subscriber::registry()
            .with(tools_wanted)
            .with(layer);
        tracing::subscriber::set_global_default(subscriber).unwrap();
        // What the `cadre` binary installs beside its layer: lists, links and parents.
        cadre_model::trace_bridge::otel::install();
        cadre_tools::trace_context::set_traceparent_source(
            cadre_model::trace_bridge::otel::current_traceparent,
        );
        (exporter, provider)
    })
}

/// Runs `prompt` through `builder`'s orchestrator as the run `run_id` and returns the
/// spans of its trace, all ended.
async fn traced(builder: cadre_core::OrchestratorBuilder, run_id: &str, prompt: &str) -> Traced {
    let (exporter, provider) = exporter();
    let o = builder.run_id(run_id).build().unwrap();
    let (outcome, _) = o.run("main", prompt).await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    drop(o);
    provider.force_flush().unwrap();
    let all = exporter.get_finished_spans().unwrap();
    let root = all
        .iter()
        .find(|s| {
            s.parent_span_id == SpanId::INVALID
                && attr(s, semconv::GEN_AI_CONVERSATION_ID) == run_id
        })
        .expect("the run's root span");
    let trace = root.span_context.trace_id();
    Traced {
        spans: all
            .into_iter()
            .filter(|s| s.span_context.trace_id() == trace)
            .collect(),
    }
}

fn delegator() -> AgentSpec {
    AgentSpec::builder("delegator")
        .description("Delegates further.")
        .mode(Mode::Subagent)
        .model("haiku")
        .tools(["*"])
        .disallowed_tools(Vec::<String>::new())
        .read_only(false)
        .max_turns(5)
        .skills(Vec::<String>::new())
        .prompt("Delegate.")
        .build()
}

/// A fan-out two levels deep — `main` starts a delegator and an explorer, the delegator an
/// explorer of its own — where one explorer's tool call fails.
fn fan_out(server: &MockServer, dir: &std::path::Path) -> cadre_core::OrchestratorBuilder {
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([
                ("t1", "delegator", "Go deeper"),
                ("t2", "explore", "Find beta"),
            ])
            .usage(100, 20, 5, 7),
            Reply::text("done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Go deeper".into()),
        vec![
            Reply::tasks([("t3", "explore", "Find gamma")]),
            Reply::text("deep enough"),
        ],
    );
    server.route(
        Match::FirstUserContains("Find beta".into()),
        vec![
            Reply::tool_use("r1", "read_file", json!({"path": "missing.txt"})),
            Reply::text("no beta"),
        ],
    );
    server.route(
        Match::FirstUserContains("Find gamma".into()),
        vec![Reply::text("gamma found")],
    );
    let mut registry = Registry::shipped();
    registry.insert(delegator());
    mock_builder(server, dir).registry(registry)
}

#[tokio::test]
async fn a_two_level_fan_out_nests_agents_under_their_task_calls() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let t = traced(fan_out(&server, dir.path()), "traced-run", "PARENT: survey").await;

    // One trace (the run's spans are those of its root's trace), one root: the primary's
    // `invoke_agent`.
    let main = t.agent("main");
    assert_eq!(main.name, "invoke_agent main");
    assert_eq!(main.span_kind, SpanKind::Internal);
    assert_eq!(main.parent_span_id, SpanId::INVALID);
    // Each of its 4 agents, 3 Task calls, 1 read_file call and 7 requests.
    assert_eq!(t.spans.len(), 4 + 3 + 1 + 7, "{:?}", t.names());
    assert_eq!(
        t.spans
            .iter()
            .filter(|s| s.parent_span_id == SpanId::INVALID)
            .count(),
        1,
        "{:?}",
        t.names()
    );
    assert_eq!(attr(main, semconv::GEN_AI_OPERATION_NAME), "invoke_agent");
    assert_eq!(attr(main, semconv::GEN_AI_PROVIDER_NAME), "anthropic");
    assert_eq!(attr(main, semconv::GEN_AI_AGENT_NAME), "main");
    assert_eq!(attr(main, semconv::GEN_AI_CONVERSATION_ID), "traced-run");
    assert_eq!(
        attr(main, semconv::GEN_AI_REQUEST_MODEL),
        "claude-sonnet-5-5"
    );
    assert_eq!(attr(main, semconv::CADRE_AGENT_OUTCOME), "completed");

    // Each `Task` call is an `execute_tool Task` under its agent, and the parent of the
    // subagent it started.
    assert_eq!(t.named("execute_tool Task").len(), 3);
    let t1 = t.call("t1");
    let delegator = t.child_agent(t1);
    let delegator_path = attr(delegator, semconv::GEN_AI_AGENT_ID);
    assert_eq!(delegator_path, "main/delegator#1");
    assert_eq!(delegator.name, "invoke_agent delegator");
    let beta = t.child_agent(t.call("t2"));
    let t3 = t.call("t3");
    let gamma = t.child_agent(t3);
    for (call, parent, child) in [(t1, main, delegator), (t3, delegator, gamma)] {
        assert!(is_child(call, parent));
        assert!(is_child(child, call));
    }
    assert!(is_child(t.call("t2"), main));
    assert_eq!(beta.name, "invoke_agent explore");
    assert!(attr(beta, semconv::GEN_AI_AGENT_ID).starts_with("main/explore#"));
    assert!(attr(gamma, semconv::GEN_AI_AGENT_ID).starts_with("main/delegator#1/explore#"));
    for call in ["t1", "t2", "t3"] {
        let span = t.call(call);
        assert_eq!(span.span_kind, SpanKind::Internal);
        assert_eq!(attr(span, semconv::GEN_AI_TOOL_NAME), "Task");
        assert_eq!(attr(span, semconv::CADRE_TOOL_DECISION), "allow");
        assert_eq!(span.status, Status::Unset, "{call}");
    }

    // The failed call is an error, said the conventions' way.
    let failed = t.call("r1");
    assert_eq!(failed.name, "execute_tool read_file");
    assert!(is_child(failed, beta));
    // Its output is content: what went wrong is not said by default.
    assert!(
        matches!(&failed.status, Status::Error { description } if description.is_empty()),
        "{:?}",
        failed.status
    );
    assert_eq!(attr(failed, semconv::ERROR_TYPE), "tool_error");

    // Every request is a `chat` span (CLIENT) under its agent; the first carries the usage
    // the mock reported, cached input counted as input.
    let chats = t.chats_under(main);
    assert_eq!(chats.len(), 2, "{:?}", t.names());
    let first = chats
        .iter()
        .find(|c| strings(c, semconv::GEN_AI_RESPONSE_FINISH_REASONS) == ["tool_use"])
        .unwrap();
    assert_eq!(first.name, "chat claude-sonnet-5-5");
    assert_eq!(first.span_kind, SpanKind::Client);
    assert_eq!(attr(first, semconv::SERVER_ADDRESS), "127.0.0.1");
    assert!(int(first, semconv::SERVER_PORT).is_some_and(|p| p > 0));
    assert_eq!(int(first, semconv::GEN_AI_USAGE_INPUT_TOKENS), Some(112));
    assert_eq!(int(first, semconv::GEN_AI_USAGE_OUTPUT_TOKENS), Some(20));
    assert_eq!(
        int(first, semconv::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
        Some(7)
    );
    assert_eq!(
        int(first, semconv::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS),
        Some(5)
    );
    assert!(!attr(first, semconv::GEN_AI_RESPONSE_ID).is_empty());
    // Seven requests in all (two each for main, the delegator and the first explorer, one
    // for the second), each under the agent that made it.
    let all_chats: Vec<_> = t
        .spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(all_chats.len(), 7, "{:?}", t.names());
    assert_eq!(t.chats_under(delegator).len(), 2);
    assert_eq!(t.chats_under(beta).len(), 2);
    assert_eq!(t.chats_under(gamma).len(), 1);
    // The agent's own span sums its requests.
    assert!(int(main, semconv::GEN_AI_USAGE_INPUT_TOKENS).is_some_and(|n| n >= 112));

    // No content by default.
    for span in &t.spans {
        for key in [
            semconv::GEN_AI_INPUT_MESSAGES,
            semconv::GEN_AI_TOOL_CALL_ARGUMENTS,
            semconv::GEN_AI_TOOL_CALL_RESULT,
        ] {
            assert_eq!(attr(span, key), "", "{} has {key}", span.name);
        }
    }
}

#[tokio::test]
async fn content_is_recorded_when_asked_and_cut_to_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let content = RecordContent {
        prompts: true,
        tool_details: true,
        max_bytes: 12,
    };
    let builder = fan_out(&server, dir.path()).record_content(content);
    let t = traced(
        builder,
        "content-run",
        "PARENT: survey the whole of the code",
    )
    .await;
    let prompt = attr(t.agent("main"), semconv::GEN_AI_INPUT_MESSAGES);
    let messages: Value = serde_json::from_str(&prompt).unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["parts"][0]["content"], "PARENT: surv");
    let failed = t.call("r1");
    assert_eq!(
        attr(failed, semconv::GEN_AI_TOOL_CALL_ARGUMENTS),
        r#"{"path":"mis"#
    );
    assert!(!attr(failed, semconv::GEN_AI_TOOL_CALL_RESULT).is_empty());
    assert!(
        matches!(&failed.status, Status::Error { description } if !description.is_empty()),
        "{:?}",
        failed.status
    );
}

/// Matches the requests of the agent whose prompt holds `who` whose last message holds
/// `last`.
fn when(who: &str, last: &str) -> Match {
    let (who, last) = (who.to_owned(), last.to_owned());
    Match::Custom(Arc::new(move |b: &Value| {
        let last_message = b["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(Value::to_string)
            .unwrap_or_default();
        b["messages"][0].to_string().contains(&who) && last_message.contains(&last)
    }))
}

#[tokio::test]
async fn team_members_nest_under_the_task_calls_that_started_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let member = |id: &str, name: &str| {
        let job = format!("Job {name}");
        (
            id.to_owned(),
            json!({"description": job, "prompt": format!("{job}: do it"),
                   "subagent_type": "code", "name": name}),
        )
    };
    let (t1, t2) = (member("t1", "alpha"), member("t2", "beta"));
    server.route(
        when("Job beta", "ping 1"),
        vec![Reply::text("beta got it"); 3],
    );
    server.route(
        when("Job alpha", "Sent to"),
        vec![Reply::text("alpha waits"); 6],
    );
    server.route(
        when("Job alpha", "Job alpha"),
        vec![Reply::tool_use(
            "a0",
            "SendMessage",
            json!({"to": "beta", "message": "ping 1"}),
        )],
    );
    server.route(
        when("Job beta", "Job beta"),
        vec![Reply::text("beta ready")],
    );
    server.route(
        Match::FirstUserContains("LEAD".into()),
        std::iter::once(Reply::tool_uses(vec![
            (t1.0.as_str(), "Task", t1.1.clone()),
            (t2.0.as_str(), "Task", t2.1.clone()),
        ]))
        .chain(vec![Reply::text("lead done"); 12])
        .collect(),
    );
    let builder = mock_builder(&server, dir.path()).team(cadre_core::TeamLimits::default());
    let t = traced(builder, "team-run", "LEAD task").await;

    let main = t.agent("main");
    let mut members = Vec::new();
    for call in ["t1", "t2"] {
        let task = t.call(call);
        assert_eq!(task.name, "execute_tool Task");
        assert!(is_child(task, main), "{call} under main");
        let member = t.child_agent(task);
        assert_eq!(member.name, "invoke_agent code");
        members.push(member);
    }
    // alpha's message is a call of its own, under alpha; beta, woken by it, asked again.
    let send = t.call("a0");
    assert_eq!(send.name, "execute_tool SendMessage");
    assert!(is_child(send, members[0]));
    assert_eq!(send.status, Status::Unset);
    assert_eq!(t.chats_under(members[1]).len(), 2, "{:?}", t.names());
    // The message reached beta in a `deliver` span under beta, linked to alpha's call.
    let delivered: Vec<_> = t
        .spans
        .iter()
        .filter(|s| s.name == "deliver beta")
        .collect();
    assert_eq!(delivered.len(), 1, "{:?}", t.names());
    let deliver = delivered[0];
    assert!(is_child(deliver, members[1]));
    assert_eq!(attr(deliver, semconv::CADRE_TEAM_MEMBER), "beta");
    assert_eq!(int(deliver, semconv::CADRE_TEAM_MESSAGES), Some(1));
    let links: Vec<_> = deliver.links.iter().collect();
    assert_eq!(links.len(), 1, "{:?}", deliver.links);
    assert_eq!(links[0].span_context.span_id(), send.span_context.span_id());
    assert_eq!(
        links[0].span_context.trace_id(),
        send.span_context.trace_id()
    );
}

#[tokio::test]
async fn a_background_subagent_nests_under_its_task_call_though_the_call_returned_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let input = json!({"description": "Job A", "prompt": "Job A: do it",
                       "subagent_type": "explore", "run_in_background": true});
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use("bg1", "Task", input),
            Reply::text("ending my turn"),
            Reply::text("all done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Job A".into()),
        vec![Reply::text("A result")],
    );
    let t = traced(
        mock_builder(&server, dir.path()),
        "background-run",
        "PARENT task",
    )
    .await;
    let task = t.call("bg1");
    assert!(is_child(task, t.agent("main")));
    let sub = t.child_agent(task);
    assert_eq!(sub.name, "invoke_agent explore");
    // (tracing closes a span only after its children, so the call's span lasts until the
    // subagent ends, though the call itself returned at once.)
    assert!(sub.end_time <= task.end_time);
    assert_eq!(t.chats_under(sub).len(), 1);
}

#[tokio::test]
async fn a_retried_request_is_one_chat_span_with_the_retry_as_its_event() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::error_status(529, "overloaded_error", "busy"),
            Reply::text("done"),
        ],
    );
    let builder = mock_builder(&server, dir.path()).model(mock_model(&server, 2));
    let t = traced(builder, "retry-run", "PARENT task").await;
    let chats = t.chats_under(t.agent("main"));
    assert_eq!(chats.len(), 1, "{:?}", t.names());
    let chat = chats[0];
    assert_eq!(chat.status, Status::Unset);
    assert_eq!(chat.events.len(), 1, "{:?}", chat.events);
    let event = chat.events.iter().next().unwrap();
    assert!(event.name.contains("retrying"), "{}", event.name);
}

#[tokio::test]
async fn a_failed_request_marks_its_chat_span_and_its_agent_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Find delta")]),
            Reply::text("delta failed"),
        ],
    );
    server.route(
        Match::FirstUserContains("Find delta".into()),
        vec![Reply::error_status(
            400,
            "invalid_request_error",
            "delta exploded",
        )],
    );
    let t = traced(
        mock_builder(&server, dir.path()),
        "failed-run",
        "PARENT task",
    )
    .await;
    let sub = t.child_agent(t.call("t1"));
    assert!(
        matches!(sub.status, Status::Error { .. }),
        "{:?}",
        sub.status
    );
    assert_eq!(attr(sub, semconv::ERROR_TYPE), "model_error");
    assert_eq!(attr(sub, semconv::CADRE_AGENT_OUTCOME), "failed");
    let chats = t.chats_under(sub);
    assert_eq!(chats.len(), 1);
    assert!(
        matches!(&chats[0].status, Status::Error { description } if description.contains("delta exploded"))
    );
    assert_eq!(attr(chats[0], semconv::ERROR_TYPE), "400");
    // The primary itself finished.
    assert_eq!(t.agent("main").status, Status::Unset);
}

/// A subagent whose answers never match its output schema: the schema's complaint quotes
/// the answer.
fn failing_answers(server: &MockServer, dir: &std::path::Path) -> cadre_core::OrchestratorBuilder {
    let schema = json!({"type": "object", "properties": {"count": {"type": "integer"}},
                        "required": ["count"]});
    server.route(
        Match::FirstUserContains("Count the tests".into()),
        vec![Reply::text(r#"{"count": "secret-answer-7"}"#); 3],
    );
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "count", "prompt": "Count the tests",
                       "subagent_type": "explore", "output_schema": schema}),
            ),
            Reply::text("gave up"),
        ],
    );
    mock_builder(server, dir)
}

#[tokio::test]
async fn an_agent_s_failure_keeps_its_answer_out_of_the_spans_unless_content_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let t = traced(
        failing_answers(&server, dir.path()),
        "invalid-answer-run",
        "PARENT task",
    )
    .await;
    let sub = t.child_agent(t.call("t1"));
    assert_eq!(attr(sub, semconv::ERROR_TYPE), "failed");
    assert!(
        matches!(&sub.status, Status::Error { description } if description == "failed"),
        "{:?}",
        sub.status
    );
    for span in &t.spans {
        assert!(
            !format!("{span:?}").contains("secret-answer"),
            "{} carries the answer: {span:?}",
            span.name
        );
    }

    // Asked for, the status says what went wrong.
    let server = MockServer::start().await;
    let builder = failing_answers(&server, dir.path()).record_content(RecordContent {
        prompts: true,
        tool_details: false,
        max_bytes: RecordContent::DEFAULT_MAX_BYTES,
    });
    let t = traced(builder, "invalid-answer-content-run", "PARENT task").await;
    let sub = t.child_agent(t.call("t1"));
    assert!(
        matches!(&sub.status, Status::Error { description } if description.contains("secret-answer")),
        "{:?}",
        sub.status
    );
}

#[tokio::test]
async fn with_tool_spans_left_out_a_failed_call_does_not_mark_its_agent() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use("r1", "read_file", json!({"path": "missing.txt"})),
            Reply::text("done"),
        ],
    );
    // The test runs on one thread: every span of its run is made here.
    NO_TOOL_SPANS.with(|f| f.set(true));
    let t = traced(
        mock_builder(&server, dir.path()),
        "no-tool-spans-run",
        "PARENT task",
    )
    .await;
    NO_TOOL_SPANS.with(|f| f.set(false));
    assert!(
        t.named("execute_tool read_file").is_empty(),
        "{:?}",
        t.names()
    );
    let main = t.agent("main");
    assert_eq!(main.status, Status::Unset);
    assert_eq!(attr(main, semconv::ERROR_TYPE), "");
}

/// The run's hooks, from Claude Code's `hooks` object.
fn hooks(value: Value) -> cadre_core::Hooks {
    let (hooks, warnings) = cadre_core::Hooks::from_json(&value, ".claude/settings.json");
    assert!(warnings.is_empty(), "{warnings:?}");
    hooks
}

/// The spans whose parent is `parent` and whose name starts with `name`.
fn children<'a>(t: &'a Traced, parent: &SpanData, name: &str) -> Vec<&'a SpanData> {
    t.spans
        .iter()
        .filter(|s| s.name.starts_with(name) && is_child(s, parent))
        .collect()
}

/// The W3C `traceparent` of `span`.
fn traceparent(span: &SpanData) -> String {
    let cx = &span.span_context;
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    )
}

#[tokio::test]
async fn hooks_and_mcp_calls_are_spans_of_their_own_under_their_tool_calls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let (local_log, remote_log) = (dir.path().join("local.log"), dir.path().join("remote.log"));
    let remote_arg = remote_log.display().to_string();
    let http = cadre_testkit::McpHttpServer::spawn(&["--log", &remote_arg]);
    let mut config = cadre_mcp::McpConfig::default();
    let servers = json!({
        "local": {"command": cadre_testkit::mcp_server_binary(), "args": ["--log", local_log]},
        "remote": {"type": "http", "url": http.url()},
    });
    config.add_text(std::path::Path::new(".mcp.json"), &servers.to_string());
    let mcp = cadre_mcp::McpServers::new(
        config,
        dir.path().to_path_buf(),
        cadre_mcp::Timeouts::default(),
    );
    // Every call is checked by one hook and reported to one that fails; what they write
    // is content, kept out of the spans (their commands, which are not, do not spell it).
    let hooks = hooks(json!({
        "PreToolUse": [{"hooks": [{"type": "command", "command": "cat >/dev/null; printf 'HOOK-%s' SAYS >&2"}]}],
        "PostToolUse": [{"hooks": [{"type": "command", "command": "printf 'HOOK-%s' FAILS >&2; exit 7"}]}],
    }));
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_uses(vec![
                ("r1", "read_file", json!({"path": "a.txt"})),
                ("m1", "mcp__local__echo", json!({"text": "hi"})),
                ("m2", "mcp__remote__echo", json!({"text": "yo"})),
            ]),
            Reply::text("done"),
        ],
    );
    let builder = mock_builder(&server, dir.path())
        .hooks(hooks)
        .mcp(Arc::new(mcp));
    let t = traced(builder, "hooks-mcp-run", "PARENT task").await;

    for id in ["r1", "m1", "m2"] {
        let call = t.call(id);
        let pre = children(&t, call, "hook PreToolUse");
        assert_eq!(pre.len(), 1, "{id}: {:?}", t.names());
        assert_eq!(pre[0].span_kind, SpanKind::Internal);
        assert_eq!(attr(pre[0], semconv::CADRE_HOOK_EVENT), "PreToolUse");
        assert!(attr(pre[0], semconv::CADRE_HOOK_COMMAND).starts_with("cat >/dev/null"));
        assert_eq!(attr(pre[0], semconv::CADRE_HOOK_DECISION), "ok");
        assert_eq!(pre[0].status, Status::Unset);
        let post = children(&t, call, "hook PostToolUse");
        assert_eq!(post.len(), 1, "{id}: {:?}", t.names());
        assert_eq!(attr(post[0], semconv::CADRE_HOOK_DECISION), "failed");
        assert_eq!(attr(post[0], semconv::ERROR_TYPE), "failed");
        assert!(matches!(post[0].status, Status::Error { .. }));
    }
    for span in &t.spans {
        let seen = format!("{span:?}");
        assert!(
            !seen.contains("HOOK-SAYS") && !seen.contains("HOOK-FAILS"),
            "{seen}"
        );
    }

    // Each MCP call is a `tools/call {tool}` (CLIENT) under its `execute_tool`, whose
    // context the server received in the request's `_meta` (and over HTTP as a header).
    for (id, server_name, transport, log) in [
        ("m1", "local", "pipe", &local_log),
        ("m2", "remote", "tcp", &remote_log),
    ] {
        let mcp_calls = children(&t, t.call(id), "tools/call");
        assert_eq!(mcp_calls.len(), 1, "{id}: {:?}", t.names());
        let span = mcp_calls[0];
        assert_eq!(span.name, "tools/call echo");
        assert_eq!(span.span_kind, SpanKind::Client);
        assert_eq!(attr(span, semconv::MCP_METHOD_NAME), "tools/call");
        assert_eq!(attr(span, semconv::GEN_AI_OPERATION_NAME), "execute_tool");
        assert_eq!(attr(span, semconv::GEN_AI_TOOL_NAME), "echo");
        assert_eq!(attr(span, semconv::CADRE_MCP_SERVER), server_name);
        assert_eq!(attr(span, semconv::NETWORK_TRANSPORT), transport);
        assert_eq!(span.status, Status::Unset);
        let logged = std::fs::read_to_string(log).unwrap();
        let sent = format!("meta-traceparent echo {}", traceparent(span));
        assert!(logged.lines().any(|l| l == sent), "{sent} not in {logged}");
        if transport == "tcp" {
            assert_eq!(attr(span, semconv::SERVER_ADDRESS), "127.0.0.1");
            assert!(int(span, semconv::SERVER_PORT).is_some_and(|p| p > 0));
            let header = format!("header-traceparent echo {}", traceparent(span));
            assert!(
                logged.lines().any(|l| l == header),
                "{header} not in {logged}"
            );
        } else {
            assert!(!logged.contains("header-traceparent"), "{logged}");
        }
    }
}

#[tokio::test]
async fn a_compaction_is_a_span_of_its_own_under_its_agent() {
    let dir = tempfile::tempdir().unwrap();
    let line = "The quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet.\n";
    std::fs::write(dir.path().join("big.txt"), line.repeat(300)).unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    // A request refused as too long is compacted on demand.
    server.set_context_window(40_000);
    let mut replies: Vec<Reply> = (0..8)
        .map(|i| Reply::tool_use(&format!("r{i}"), "read_file", json!({"path": "big.txt"})))
        .collect();
    replies.push(Reply::text("fitted"));
    server.route(Match::Any, replies);
    let hooks = hooks(json!({
        "PreCompact": [{"hooks": [{"type": "command", "command": "cat >/dev/null"}]}],
    }));
    let builder = mock_builder(&server, dir.path())
        .compact_at(Some(500_000))
        .hooks(hooks);
    let t = traced(builder, "compaction-run", "PARENT read").await;

    let main = t.agent("main");
    let compactions = children(&t, main, "compact ");
    assert_eq!(compactions.len(), 1, "{:?}", t.names());
    let compact = compactions[0];
    assert_eq!(compact.name, "compact main");
    assert_eq!(compact.span_kind, SpanKind::Internal);
    assert_eq!(attr(compact, semconv::CADRE_COMPACTION_TRIGGER), "auto");
    assert_eq!(attr(compact, semconv::CADRE_COMPACTION_BY), "server");
    assert!(int(compact, semconv::CADRE_COMPACTION_TOKENS_BEFORE).is_some_and(|n| n > 40_000));
    assert_eq!(
        int(compact, semconv::CADRE_COMPACTION_TOKENS_AFTER),
        Some(cadre_testkit::compaction::SUMMARY_TOKENS as i64)
    );
    assert_eq!(compact.status, Status::Unset);
    // Its hook and its request sit under it.
    assert_eq!(children(&t, compact, "hook PreCompact").len(), 1);
    assert_eq!(t.chats_under(compact).len(), 1, "{:?}", t.names());
}

/// A delegate that keeps the calls it is given and answers each at once.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<cadre_core::DelegatedCall>>);

#[async_trait::async_trait]
impl cadre_core::Delegate for Kept {
    async fn run(&self, call: cadre_core::DelegatedCall) -> cadre_core::Delegated {
        self.0.lock().unwrap().push(call);
        let mut done = cadre_core::Delegated::stopped(StopKind::Done);
        done.text = "delegated part done".into();
        done
    }
}

#[tokio::test]
async fn a_delegated_subagent_s_span_is_the_child_of_its_task_call_made_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "explore", "Find delta")]),
            Reply::text("done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Find delta".into()),
        vec![Reply::text("delta found")],
    );
    // The caller's side: the `Task` call hands its span's context over with the call.
    let kept = Arc::new(Kept::default());
    let builder = mock_builder(&server, dir.path()).delegate(kept.clone());
    let caller = traced(builder, "delegating-run", "PARENT task").await;
    let task = caller.call("t1");
    let call = kept.0.lock().unwrap().pop().expect("the delegated call");
    assert_eq!(call.trace.as_deref(), Some(traceparent(task).as_str()));

    // The other side (another worker): the subagent's span is the `Task` call's child.
    let (exporter, provider) = exporter();
    let o = mock_builder(&server, dir.path())
        .run_id("delegated-run")
        .build()
        .unwrap();
    let (outcome, _) = o.run_delegated(&call).await;
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    drop(o);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let sub: Vec<_> = spans
        .iter()
        .filter(|s| attr(s, semconv::GEN_AI_CONVERSATION_ID) == "delegated-run")
        .collect();
    assert_eq!(
        sub.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_eq!(sub[0].name, "invoke_agent explore");
    assert_eq!(sub[0].parent_span_id, task.span_context.span_id());
    assert!(sub[0].parent_span_is_remote);
    assert_eq!(sub[0].span_context.trace_id(), task.span_context.trace_id());
}

#[tokio::test]
async fn a_compaction_the_server_makes_inside_a_request_is_a_span_under_its_agent() {
    let dir = tempfile::tempdir().unwrap();
    let line = "The quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet.\n";
    std::fs::write(dir.path().join("big.txt"), line.repeat(300)).unwrap();
    let server = MockServer::start().await;
    // Thirty reads of about 5,500 tokens each cross the server's threshold once.
    let mut replies: Vec<Reply> = (0..32)
        .map(|i| Reply::tool_use(&format!("r{i}"), "read_file", json!({"path": "big.txt"})))
        .collect();
    replies.push(Reply::text("read it all"));
    server.route(Match::Any, replies);
    let builder = mock_builder(&server, dir.path()).compact_at(Some(150_000));
    let t = traced(builder, "server-compaction-run", "PARENT read").await;
    let compactions = children(&t, t.agent("main"), "compact ");
    assert_eq!(compactions.len(), 1, "{:?}", t.names());
    let compact = compactions[0];
    assert_eq!(attr(compact, semconv::CADRE_COMPACTION_BY), "server");
    assert!(int(compact, semconv::CADRE_COMPACTION_TOKENS_BEFORE).is_some_and(|n| n >= 150_000));
    assert_eq!(
        int(compact, semconv::CADRE_COMPACTION_TOKENS_AFTER),
        Some(cadre_testkit::compaction::SUMMARY_TOKENS as i64)
    );
}

#[tokio::test]
async fn a_workflow_is_one_invoke_workflow_span_over_its_items_agents() {
    let (exporter, provider) = exporter();
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("labelled"); 3]);
    let o = mock_builder(&server, dir.path())
        .run_id("trace-workflow")
        .build()
        .unwrap();
    let items = (0..3).map(|i| {
        WorkItem::new(
            format!("k{i}"),
            ItemCall::new("explore", format!("Label item {i}.")),
        )
    });
    let summary = o
        .run_workflow(Workflow::from_items("labels", items))
        .await
        .unwrap();
    assert_eq!(summary.stop, StopKind::Done, "{}", summary.answer);
    drop(o);
    provider.force_flush().unwrap();
    let all = exporter.get_finished_spans().unwrap();
    let root = all
        .iter()
        .find(|s| {
            s.name.starts_with("invoke_workflow")
                && attr(s, semconv::GEN_AI_CONVERSATION_ID) == "trace-workflow"
        })
        .expect("the workflow's span");
    assert_eq!(root.name, "invoke_workflow labels");
    assert_eq!(
        root.parent_span_id,
        SpanId::INVALID,
        "it is the trace's root"
    );
    assert_eq!(
        attr(root, semconv::GEN_AI_OPERATION_NAME),
        "invoke_workflow"
    );
    assert_eq!(attr(root, semconv::CADRE_WORKFLOW_NAME), "labels");
    let agents: Vec<&SpanData> = all
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent ") && is_child(s, root))
        .collect();
    assert_eq!(
        agents.len(),
        3,
        "each item's agent under the workflow's span"
    );
}
