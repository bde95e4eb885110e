//! `cadre run` exporting its spans over OTLP/HTTP to a collector on 127.0.0.1 that decodes
//! the protobuf: one trace, subagents under their `Task` calls, usage on the requests, no
//! content unless asked, and a collector that is down is one warning.

use super::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::sync::{Arc, Mutex};

/// What the collector received: each request's body as sent, and decoded.
#[derive(Default)]
struct Received {
    bodies: Vec<Vec<u8>>,
    requests: Vec<ExportTraceServiceRequest>,
    /// How many bodies were JSON.
    json: usize,
}

/// A loopback OTLP/HTTP collector: `POST /v1/traces` with protobuf bodies (decoded) or
/// JSON ones (kept as sent).
pub(super) struct Collector {
    pub(super) endpoint: String,
    received: Arc<Mutex<Received>>,
}

impl Collector {
    pub(super) async fn start() -> Self {
        Self::start_held(tokio::sync::watch::channel(true).1).await
    }

    /// A collector that answers no export until `open` turns true.
    async fn start_held(open: tokio::sync::watch::Receiver<bool>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Received::default()));
        let kept = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let kept = kept.clone();
                    let mut open = open.clone();
                    async move {
                        open.wait_for(|o| *o).await.unwrap();
                        let json = headers
                            .get("content-type")
                            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
                        let mut r = kept.lock().unwrap();
                        r.bodies.push(body.to_vec());
                        if json {
                            r.json += 1;
                        } else {
                            r.requests
                                .push(ExportTraceServiceRequest::decode(body).unwrap());
                        }
                        ""
                    }
                },
            ),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, received }
    }

    pub(super) fn spans(&self) -> Vec<Span> {
        let r = self.received.lock().unwrap();
        r.requests
            .iter()
            .flat_map(|req| &req.resource_spans)
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| ss.spans.clone())
            .collect()
    }

    /// Whether `text` is anywhere in what was sent, attributes, names or resource.
    fn saw(&self, text: &str) -> bool {
        let r = self.received.lock().unwrap();
        r.bodies
            .iter()
            .any(|b| b.windows(text.len()).any(|w| w == text.as_bytes()))
    }

    fn service_names(&self) -> Vec<String> {
        let r = self.received.lock().unwrap();
        r.requests
            .iter()
            .flat_map(|req| &req.resource_spans)
            .filter_map(|rs| rs.resource.as_ref())
            .flat_map(|res| &res.attributes)
            .filter(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .collect()
    }
}

fn text(value: Option<&Any>) -> String {
    match value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn attr(span: &Span, key: &str) -> String {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
        .unwrap_or_default()
}

/// A list-of-strings attribute's values; empty when the span has none of that name.
fn strings(span: &Span, key: &str) -> Vec<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref());
    match value {
        Some(Any::ArrayValue(list)) => list.values.iter().map(|v| text(v.value.as_ref())).collect(),
        None => Vec::new(),
        Some(other) => panic!("{key} is not a list: {other:?}"),
    }
}

fn children<'a>(spans: &'a [Span], parent: &Span, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id && s.name.starts_with(name))
        .collect()
}

const PROMPT: &str = "Survey the code, TRACE-MARKER-7f3a";

/// A fan-out of two subagents, one of which reports usage with cached input.
async fn fan_out(server: &MockServer) {
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tasks([("t1", "explore", "Find alpha"), ("t2", "plan", "Plan beta")]),
            Reply::text("Survey complete."),
        ],
    );
    server.route(
        Match::FirstUserContains("Find alpha".into()),
        vec![Reply::text("alpha is in lib.rs:1").usage(2000, 50, 0, 1500)],
    );
    server.route(
        Match::FirstUserContains("Plan beta".into()),
        vec![Reply::text("1. add beta")],
    );
}

/// Runs the fan-out with traces going to `collector`, and `extra` variables.
async fn traced_run(collector: &Collector, extra: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    fan_out(&server).await;
    let uri = server.uri();
    let mut env = vec![
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        // A loaded machine may take longer than the usual second to send the last batch.
        ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
    ];
    env.extend_from_slice(extra);
    let out = cadre_env(dir.path(), &env, &["run", PROMPT]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Survey complete."));
    out
}

#[tokio::test]
async fn a_run_is_one_trace_with_subagents_under_their_task_calls() {
    let collector = Collector::start().await;
    let out = traced_run(&collector, &[]).await;
    assert!(!out.stderr.contains("traces"), "{}", out.stderr);
    let spans = collector.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();

    // One trace, one root: the primary's `invoke_agent`.
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|s| &s.trace_id == trace), "{names:?}");
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "{names:?}");
    let root = roots[0];
    assert_eq!(root.name, "invoke_agent main");
    assert_eq!(root.kind, SpanKind::Internal as i32);
    assert_eq!(attr(root, "gen_ai.agent.id"), "main");
    assert_eq!(attr(root, "gen_ai.provider.name"), "anthropic");
    assert!(!attr(root, "gen_ai.conversation.id").is_empty());
    let services = collector.service_names();
    assert!(
        !services.is_empty() && services.iter().all(|s| s == "cadre"),
        "{services:?}"
    );

    // Under it one `execute_tool Task` per subagent, each the parent of that subagent's
    // `invoke_agent`.
    let tasks = children(&spans, root, "execute_tool Task");
    assert_eq!(tasks.len(), 2, "{names:?}");
    let mut types = Vec::new();
    for task in tasks {
        let agents = children(&spans, task, "invoke_agent ");
        assert_eq!(agents.len(), 1, "{names:?}");
        types.push(attr(agents[0], "gen_ai.agent.name"));
        assert!(attr(agents[0], "gen_ai.agent.id").starts_with("main/"));
        assert!(!children(&spans, agents[0], "chat ").is_empty());
    }
    types.sort();
    assert_eq!(types, ["explore", "plan"]);

    // The `chat` spans (CLIENT) carry the usage the mock reported.
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 4, "{names:?}");
    assert!(chats.iter().all(|c| c.kind == SpanKind::Client as i32));
    let alpha = chats
        .iter()
        .find(|c| attr(c, "gen_ai.usage.output_tokens") == "50")
        .expect("the explorer's request");
    assert_eq!(attr(alpha, "gen_ai.usage.input_tokens"), "3500");
    assert_eq!(attr(alpha, "gen_ai.usage.cache_read.input_tokens"), "1500");
    assert_eq!(
        strings(alpha, "gen_ai.response.finish_reasons"),
        ["end_turn"]
    );
    assert_eq!(attr(alpha, "server.address"), "127.0.0.1");

    // No prompt, and no subagent's prompt (a Task call's input), anywhere.
    assert!(!collector.saw("TRACE-MARKER-7f3a"));
    assert!(!collector.saw("Find alpha"));
}

#[tokio::test]
async fn the_prompt_is_exported_when_asked() {
    let collector = Collector::start().await;
    traced_run(&collector, &[("OTEL_LOG_USER_PROMPTS", "1")]).await;
    let spans = collector.spans();
    let root = spans.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert!(attr(root, "gen_ai.input.messages").contains(PROMPT));
    // Tool details stay out: they have a variable of their own.
    assert!(spans
        .iter()
        .all(|s| attr(s, "gen_ai.tool.call.arguments").is_empty()));
}

#[tokio::test]
async fn a_collector_that_is_down_is_one_warning() {
    // A port held bound for the whole test but never listened on: connecting is refused,
    // and no other test can take the port meanwhile (a listener, even one never accepted
    // from, would complete the connection instead).
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = held.local_addr().unwrap().as_socket().unwrap().port();
    let closed = format!("http://127.0.0.1:{port}");
    // The exit waits for the refused export, however loaded the machine: its warning is
    // then certain to be out.
    run_exporting_to(&closed, &[("CADRE_OTEL_EXIT_WAIT_MS", "60000")]).await;
    drop(held);
}

/// The fan-out run with its traces exported to `endpoint` (and `extra` settings): it
/// completes, and says once that its traces could not be exported.
async fn run_exporting_to(endpoint: &str, extra: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    fan_out(&server).await;
    let uri = server.uri();
    let mut env = vec![
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
    ];
    env.extend_from_slice(extra);
    let out = cadre_env(dir.path(), &env, &["run", PROMPT]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Survey complete."));
    assert_eq!(
        out.stderr.matches("could not export traces").count(),
        1,
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_callers_traceparent_is_the_runs_parent_and_bash_and_hooks_see_their_own() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A hook before each bash call writes what it was given.
    let hook = "echo \"HOOK=$TRACEPARENT OTEL=$(env | grep -c ^OTEL_)\" >> \"$CLAUDE_PROJECT_DIR/hook.log\"";
    write_file(
        &dir.path().join(".claude/settings.json"),
        &json!({"hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}
        ]}})
        .to_string(),
    );
    let server = MockServer::start().await;
    let command = "echo TP=$TRACEPARENT OTEL=$(env | grep -c ^OTEL_)";
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tool_use("b1", "bash", json!({"command": command})),
            Reply::text("Survey complete."),
        ],
    );
    let uri = server.uri();
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{caller_trace}-{caller_span}-01");
    let env = [
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
        ("TRACEPARENT", traceparent.as_str()),
    ];
    let out = cadre_env(dir.path(), &env, &["run", "--trust-project", PROMPT]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let spans = collector.spans();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    // The run joined the caller's trace: its root is a child of the caller's span.
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_agent main")
        .unwrap();
    assert_eq!(hex(&root.trace_id), caller_trace);
    assert_eq!(hex(&root.parent_span_id), caller_span);
    assert!(spans.iter().all(|s| hex(&s.trace_id) == caller_trace));
    // `bash` saw the context of its own call's span.
    let call = spans
        .iter()
        .find(|s| s.name == "execute_tool bash")
        .unwrap();
    let seen = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .find(|b| b.contains("TP="))
        .unwrap();
    let context = format!("00-{caller_trace}-{}-01", hex(&call.span_id));
    // And none of cadre's OTEL_* settings.
    let want = format!("TP={context} OTEL=0");
    assert!(seen.contains(&want), "{want} not in {seen}");
    // The hook that ran before it saw its own span's, a child of the call's.
    let hook = spans.iter().find(|s| s.name == "hook PreToolUse").unwrap();
    assert_eq!(hook.parent_span_id, call.span_id);
    let hooked = std::fs::read_to_string(dir.path().join("hook.log")).unwrap();
    let context = format!("00-{caller_trace}-{}-01", hex(&hook.span_id));
    assert_eq!(hooked.trim(), format!("HOOK={context} OTEL=0"));
}

#[tokio::test]
async fn a_collector_that_never_answers_is_one_warning_and_the_run_does_not_wait_for_it() {
    // It takes connections (the kernel completes them) but never reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    // Settings that allow each export minutes: the exit still waits its second, well inside
    // the test's two-minute limit on the command.
    let slow = [
        ("OTEL_BSP_EXPORT_TIMEOUT", "300000"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "300000"),
    ];
    run_exporting_to(&endpoint, &slow).await;
    drop(silent);
}

#[tokio::test]
async fn http_json_is_spoken_when_asked() {
    let collector = Collector::start().await;
    traced_run(&collector, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).await;
    let r = collector.received.lock().unwrap();
    assert!(
        r.json > 0 && r.requests.is_empty(),
        "{} JSON, {} protobuf",
        r.json,
        r.requests.len()
    );
    drop(r);
    assert!(collector.saw("\"invoke_agent main\""));
    assert!(collector.saw("\"gen_ai.usage.cache_read.input_tokens\""));
    assert!(!collector.saw("TRACE-MARKER-7f3a"));
}

#[tokio::test]
async fn a_stdio_mcp_server_gets_the_traceparent_of_the_agent_that_started_it() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"mcpServers": {"local": {"command": cadre_testkit::mcp_server_binary()}}});
    std::fs::write(dir.path().join(".mcp.json"), config.to_string()).unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tool_uses(vec![
                ("e1", "mcp__local__env", json!({"name": "TRACEPARENT"})),
                ("e2", "mcp__local__env_names", json!({})),
            ]),
            Reply::text("Survey complete."),
        ],
    );
    let uri = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
    ];
    let out = cadre_env(dir.path(), &env, &["run", "--trust-project", PROMPT]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let spans = collector.spans();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let main = spans
        .iter()
        .find(|s| s.name == "invoke_agent main")
        .unwrap();
    let last = server.requests().pop().unwrap();
    let results = last.messages().last().unwrap()["content"].clone();
    let traceparent = results[0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        traceparent,
        format!("00-{}-{}-01", hex(&main.trace_id), hex(&main.span_id))
    );
    let names = results[1]["content"][0]["text"].as_str().unwrap();
    assert!(!names.lines().any(|l| l.starts_with("OTEL_")), "{names}");
}

#[tokio::test]
async fn the_verbose_log_shows_no_genai_spans_nor_the_prompts_they_record() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    fan_out(&server).await;
    let uri = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("OTEL_LOG_USER_PROMPTS", "1"),
    ];
    let out = cadre_env(dir.path(), &env, &["-vv", "run", PROMPT]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Survey complete."));
    // The log did say things (so spans, were they on, would have prefixed its lines).
    assert!(out.stderr.lines().count() > 1, "{}", out.stderr);
    for needle in [
        "invoke_agent{",
        "execute_tool{",
        "gen_ai.",
        "TRACE-MARKER-7f3a",
    ] {
        assert!(!out.stderr.contains(needle), "{needle} in {}", out.stderr);
    }
}

#[tokio::test]
async fn spans_the_full_batch_queue_dropped_are_counted_in_one_warning() {
    let (open, held) = tokio::sync::watch::channel(false);
    let collector = Collector::start_held(held).await;
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    fan_out(&server).await;
    // The primary's last request, after both subagents ended.
    let last = server.gate(Match::Custom(Arc::new(|b: &Value| {
        b["messages"].as_array().is_some_and(|m| m.len() > 1)
            && b["messages"][0].to_string().contains("Survey")
    })));
    let uri = server.uri();
    let endpoint = collector.endpoint.clone();
    let run = tokio::spawn(async move {
        let env = [
            ("ANTHROPIC_BASE_URL", uri.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            // One span in the queue, one in the export the collector holds.
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "120000"),
            ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
        ];
        cadre_env(dir.path(), &env, &["run", PROMPT]).await
    });
    // By then seven spans have ended (the primary's first request, and each subagent's
    // agent, request and Task call): at least five found the queue full.
    assert!(last.wait_for(1, std::time::Duration::from_secs(60)).await);
    open.send(true).unwrap();
    last.open();
    let out = run.await.unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("spans were not exported"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    assert!(warnings[0].contains("OTEL_BSP_MAX_QUEUE_SIZE"));
    let dropped: u64 = warnings[0]
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap();
    assert!(dropped >= 5, "{}", warnings[0]);
    // What was exported and what was dropped make up the run's nine spans (three agents,
    // four requests, two Task calls).
    assert_eq!(collector.spans().len() as u64 + dropped, 9);
}
