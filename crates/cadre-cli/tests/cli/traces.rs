//! `cadre run` exporting its spans over OTLP/HTTP to a collector on 127.0.0.1 that decodes
//! the protobuf: one trace, subagents under their `Task` calls, usage on the requests, no
//! content unless asked, and a collector that is down is one warning.

use super::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::{number_data_point, Metric};
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
    /// The metrics exports, decoded.
    metrics: Vec<ExportMetricsServiceRequest>,
    /// Each trace export's `x-tenant` header, if it had one.
    tenants: Vec<String>,
}

/// A loopback OTLP/HTTP collector: `POST /v1/traces` with protobuf bodies (decoded) or
/// JSON ones (kept as sent), and `POST /v1/metrics` with protobuf bodies.
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
                        if let Some(t) = headers.get("x-tenant").and_then(|v| v.to_str().ok()) {
                            r.tenants.push(t.to_owned());
                        }
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
        let kept = received.clone();
        let app = app.route(
            "/v1/metrics",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportMetricsServiceRequest::decode(body).unwrap();
                    kept.lock().unwrap().metrics.push(request);
                    ""
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, received }
    }

    /// The last export's reading of the metric `name` (readings are cumulative).
    fn metric(&self, name: &str) -> Option<Metric> {
        let r = self.received.lock().unwrap();
        last_metric(&r.metrics, name)
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

/// The last reading of the metric `name` in `exports`.
fn last_metric(exports: &[ExportMetricsServiceRequest], name: &str) -> Option<Metric> {
    exports
        .iter()
        .flat_map(|req| &req.resource_metrics)
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .rfind(|m| m.name == name)
        .cloned()
}

/// Attributes as sorted pairs of text.
type Attributes = Vec<(String, String)>;

/// A histogram's points, each as its attributes, count and sum.
fn histogram(metric: &Metric) -> Vec<(Attributes, u64, f64)> {
    let Some(Data::Histogram(h)) = &metric.data else {
        panic!("{} is not a histogram: {:?}", metric.name, metric.data);
    };
    h.data_points
        .iter()
        .map(|p| (pairs(&p.attributes), p.count, p.sum.unwrap_or_default()))
        .collect()
}

/// A sum's points (a counter's or an up-down counter's), each as its attributes and value.
fn sum(metric: &Metric) -> Vec<(Attributes, i64)> {
    let Some(Data::Sum(s)) = &metric.data else {
        panic!("{} is not a sum: {:?}", metric.name, metric.data);
    };
    s.data_points
        .iter()
        .map(|p| {
            let value = match p.value {
                Some(number_data_point::Value::AsInt(n)) => n,
                other => panic!("{other:?}"),
            };
            (pairs(&p.attributes), value)
        })
        .collect()
}

/// Attributes as sorted pairs of text.
fn pairs(attributes: &[KeyValue]) -> Attributes {
    let mut out: Attributes = attributes
        .iter()
        .map(|kv| {
            let value = text(kv.value.as_ref().and_then(|v| v.value.as_ref()));
            (kv.key.clone(), value)
        })
        .collect();
    out.sort();
    out
}

/// Whether `attributes` hold `key` = `value`.
fn has(attributes: &[(String, String)], key: &str, value: &str) -> bool {
    attributes.iter().any(|(k, v)| k == key && v == value)
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
async fn a_collector_that_never_answers_costs_the_exit_about_a_second_at_most() {
    use tokio::io::AsyncBufReadExt as _;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    fan_out(&server).await;
    let mut cmd = tokio::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
    for (name, _) in std::env::vars_os().filter(|(n, _)| n.to_string_lossy().starts_with("OTEL_")) {
        cmd.env_remove(name);
    }
    let mut child = cmd
        .current_dir(dir.path())
        .args(["run", PROMPT])
        .env("HOME", dir.path())
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("ANTHROPIC_API_KEY", "k")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .env("OTEL_BSP_EXPORT_TIMEOUT", "300000")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "300000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answered = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("Survey complete.") {
            answered = Some(std::time::Instant::now());
        }
    }
    let status = child.wait().await.unwrap();
    let exit_took = answered.expect("the run's answer").elapsed();
    assert!(status.success());
    // The exit waits 0.8 s for the spans and the last metrics; bound generously, so that a
    // loaded machine cannot trip it while a wait for the exports' own timeouts (minutes
    // here) would.
    assert!(
        exit_took < std::time::Duration::from_secs(3),
        "{exit_took:?}"
    );
    drop(silent);
}

#[tokio::test]
async fn an_untrusted_project_sends_no_content_to_the_users_collector_nor_traceparents_to_the_model(
) {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    write_file(
        &home.path().join(".config/cadre/config.toml"),
        &format!("[telemetry]\nendpoint = \"{}\"\n", collector.endpoint),
    );
    write_file(
        &dir.path().join("cadre.toml"),
        "[telemetry]\nlog_user_prompts = true\nlog_tool_details = true\ntraceparent_to_model = true\n",
    );
    let server = MockServer::start().await;
    fan_out(&server).await;
    let uri = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("HOME", home.path().to_str().unwrap()),
        ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
    ];
    let out = cadre_env(dir.path(), &env, &["run", PROMPT]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("telemetry.log_user_prompts"),
        "{}",
        out.stderr
    );
    // The user's collector gets the run's spans, without the prompt.
    assert_eq!(collector.spans().len(), 9);
    assert!(!collector.saw("TRACE-MARKER-7f3a"));
    let sent = traceparents(&server);
    assert_eq!(sent.len(), 4);
    assert!(sent.iter().all(Option::is_none), "{sent:?}");
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

#[tokio::test]
async fn metrics_carry_the_token_counts_and_durations_of_the_requests() {
    let collector = Collector::start().await;
    let out = traced_run(&collector, &[("OTEL_METRICS_EXPORTER", "otlp")]).await;
    assert!(!out.stderr.contains("export"), "{}", out.stderr);

    // Four requests: the primary's two and each subagent's one; the explorer's reported
    // 2000 input tokens, 1500 more read from the cache, and 50 output; the others 10 and 5.
    let tokens = collector
        .metric("gen_ai.client.token.usage")
        .expect("the token histogram");
    assert_eq!(tokens.unit, "{token}");
    let points = histogram(&tokens);
    let of = |kind: &str| {
        let typed: Vec<_> = points
            .iter()
            .filter(|(a, _, _)| has(a, "gen_ai.token.type", kind))
            .collect();
        assert!(!typed.is_empty(), "no {kind} in {points:?}");
        for (a, _, _) in &typed {
            assert!(has(a, "gen_ai.operation.name", "chat"), "{a:?}");
            assert!(has(a, "gen_ai.provider.name", "anthropic"), "{a:?}");
            assert!(has(a, "server.address", "127.0.0.1"), "{a:?}");
            assert!(a.iter().any(|(k, _)| k == "gen_ai.request.model"), "{a:?}");
        }
        let count: u64 = typed.iter().map(|(_, c, _)| c).sum();
        let total: f64 = typed.iter().map(|(_, _, s)| s).sum();
        (count, total)
    };
    assert_eq!(of("input"), (4, 3530.0));
    assert_eq!(of("output"), (4, 65.0));

    let duration = collector
        .metric("gen_ai.client.operation.duration")
        .expect("the duration histogram");
    assert_eq!(duration.unit, "s");
    let points = histogram(&duration);
    assert_eq!(points.iter().map(|(_, c, _)| c).sum::<u64>(), 4);
    assert!(points.iter().all(|(a, _, s)| *s > 0.0
        && has(a, "gen_ai.operation.name", "chat")
        && !a.iter().any(|(k, _)| k == "error.type")));

    // cadre's own: the tokens spent by kind, and no agent still running at the end.
    let spent = sum(&collector
        .metric("cadre.usage.tokens")
        .expect("tokens spent"));
    let spent_of = |kind: &str| -> i64 {
        spent
            .iter()
            .filter(|(a, _)| has(a, "cadre.token.type", kind))
            .map(|(_, v)| v)
            .sum()
    };
    // cadre's own kinds are not put under the conventions' attribute (input or output).
    assert!(
        spent
            .iter()
            .all(|(a, _)| !a.iter().any(|(k, _)| k == "gen_ai.token.type")),
        "{spent:?}"
    );
    assert_eq!(spent_of("input"), 2030);
    assert_eq!(spent_of("cache_read"), 1500);
    assert_eq!(spent_of("output"), 65);
    let running = sum(&collector
        .metric("cadre.agents.running")
        .expect("agents running"));
    let mut types: Vec<&str> = running
        .iter()
        .flat_map(|(a, _)| a.iter().filter(|(k, _)| k == "gen_ai.agent.name"))
        .map(|(_, v)| v.as_str())
        .collect();
    types.sort_unstable();
    assert_eq!(types, ["explore", "main", "plan"]);
    assert!(running.iter().all(|(_, v)| *v == 0), "{running:?}");
}

#[tokio::test]
async fn no_metrics_unless_their_exporter_is_asked_for() {
    let collector = Collector::start().await;
    traced_run(&collector, &[]).await;
    assert!(!collector.spans().is_empty());
    assert!(collector.received.lock().unwrap().metrics.is_empty());
}

/// A loopback OTLP/gRPC collector: opentelemetry-proto's trace and metrics services,
/// served by tonic, keeping what they are sent.
#[derive(Clone, Default)]
struct GrpcCollector {
    received: Arc<Mutex<Received>>,
}

#[async_trait::async_trait]
impl TraceService for GrpcCollector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.received
            .lock()
            .unwrap()
            .requests
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[async_trait::async_trait]
impl MetricsService for GrpcCollector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.received
            .lock()
            .unwrap()
            .metrics
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

impl GrpcCollector {
    /// Serves both services on a port of 127.0.0.1; its `http://` endpoint.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let router = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(self.clone()))
            .add_service(MetricsServiceServer::new(self.clone()));
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(async move { router.serve_with_incoming(incoming).await.unwrap() });
        endpoint
    }
}

#[tokio::test]
async fn grpc_carries_the_spans_and_the_metrics_when_asked() {
    let grpc = GrpcCollector::default();
    let endpoint = grpc.start().await;
    // The HTTP collector is only where `traced_run` would send otherwise: grpc is asked
    // for, and the endpoint is the grpc one.
    let http = Collector::start().await;
    let out = traced_run(
        &http,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_METRICS_EXPORTER", "otlp"),
        ],
    )
    .await;
    assert!(!out.stderr.contains("export"), "{}", out.stderr);
    assert!(http.received.lock().unwrap().bodies.is_empty());
    let r = grpc.received.lock().unwrap();
    let spans: Vec<&Span> = r
        .requests
        .iter()
        .flat_map(|req| &req.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();
    // The fan-out's nine spans: three agents, four requests, two Task calls.
    assert_eq!(spans.len(), 9, "{spans:?}");
    assert_eq!(
        spans.iter().filter(|s| s.name.starts_with("chat ")).count(),
        4
    );
    let tokens = last_metric(&r.metrics, "gen_ai.client.token.usage").expect("token usage");
    let input: f64 = histogram(&tokens)
        .iter()
        .filter(|(a, _, _)| has(a, "gen_ai.token.type", "input"))
        .map(|(_, _, s)| s)
        .sum();
    assert_eq!(input, 3530.0);
}

#[tokio::test]
async fn a_grpc_collector_that_is_down_is_one_warning() {
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = held.local_addr().unwrap().as_socket().unwrap().port();
    let closed = format!("http://127.0.0.1:{port}");
    run_exporting_to(
        &closed,
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
        ],
    )
    .await;
    drop(held);
}

#[tokio::test]
async fn a_grpc_collector_that_never_answers_is_one_warning_and_the_run_does_not_wait_for_it() {
    // It takes connections (the kernel completes them) but never reads or answers: no
    // HTTP/2 handshake ever ends.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let slow = [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_METRICS_EXPORTER", "otlp"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "300000"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "300000"),
    ];
    run_exporting_to(&endpoint, &slow).await;
    drop(silent);
}

/// The fan-out run in a fresh folder whose user's `config.toml` (in `home`) and project's
/// `cadre.toml` hold `user` and `project`, with `env` and `args` besides.
async fn run_with_settings(
    user: &str,
    project: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    write_file(&home.path().join(".config/cadre/config.toml"), user);
    write_file(&dir.path().join("cadre.toml"), project);
    let server = MockServer::start().await;
    fan_out(&server).await;
    let uri = server.uri();
    let home_path = home.path().to_str().unwrap();
    let mut all = vec![
        ("ANTHROPIC_BASE_URL", uri.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
        ("HOME", home_path),
        ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
    ];
    all.extend_from_slice(env);
    let mut argv = vec!["run"];
    argv.extend_from_slice(args);
    argv.push(PROMPT);
    let out = cadre_env(dir.path(), &all, &argv).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Survey complete."));
    out
}

/// A user's `[telemetry]` table sending to `endpoint`, with a header, a service name and
/// metrics.
fn users_table(endpoint: &str) -> String {
    format!(
        "[telemetry]\nendpoint = \"{endpoint}\"\nheaders = {{ x-tenant = \"from-table\" }}\nservice_name = \"from-table\"\nmetrics = true\n"
    )
}

#[tokio::test]
async fn the_users_telemetry_table_sends_spans_and_metrics_with_its_headers_and_name() {
    let collector = Collector::start().await;
    let out = run_with_settings(&users_table(&collector.endpoint), "", &[], &[]).await;
    assert!(!out.stderr.contains("export"), "{}", out.stderr);
    assert_eq!(collector.spans().len(), 9);
    let services = collector.service_names();
    assert!(
        !services.is_empty() && services.iter().all(|s| s == "from-table"),
        "{services:?}"
    );
    let tenants = collector.received.lock().unwrap().tenants.clone();
    assert!(
        !tenants.is_empty() && tenants.iter().all(|t| t == "from-table"),
        "{tenants:?}"
    );
    assert!(collector.metric("gen_ai.client.token.usage").is_some());
}

#[tokio::test]
async fn the_otel_variables_win_over_the_telemetry_table() {
    let table = Collector::start().await;
    let env = Collector::start().await;
    run_with_settings(
        &users_table(&table.endpoint),
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", env.endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=from-env"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
        &[],
    )
    .await;
    assert!(table.received.lock().unwrap().bodies.is_empty());
    assert_eq!(env.spans().len(), 9);
    assert!(env.service_names().iter().all(|s| s == "from-env"));
    let r = env.received.lock().unwrap();
    assert!(r.tenants.iter().all(|t| t == "from-env"), "{:?}", r.tenants);
    assert!(!r.tenants.is_empty() && r.metrics.is_empty());
}

#[tokio::test]
async fn an_untrusted_projects_telemetry_table_sends_nowhere_and_says_so() {
    let collector = Collector::start().await;
    let project = format!(
        "[telemetry]\nendpoint = \"{}\"\nlog_user_prompts = true\n",
        collector.endpoint
    );
    let out = run_with_settings("", &project, &[], &[]).await;
    assert!(collector.received.lock().unwrap().bodies.is_empty());
    assert!(
        out.stderr.contains("left out") && out.stderr.contains("telemetry.endpoint"),
        "{}",
        out.stderr
    );
    // Trusted this once, it is used, prompts and all.
    let out = run_with_settings("", &project, &[], &["--trust-project"]).await;
    assert!(!out.stderr.contains("left out"), "{}", out.stderr);
    assert_eq!(collector.spans().len(), 9);
    assert!(collector.saw("TRACE-MARKER-7f3a"));
}

#[tokio::test]
async fn a_trusted_projects_collector_gets_none_of_the_users_headers() {
    let collector = Collector::start().await;
    let project = format!("[telemetry]\nendpoint = \"{}\"\n", collector.endpoint);
    let user = "[telemetry]\nheaders = { x-tenant = \"mine\" }\n";
    run_with_settings(user, &project, &[], &["--trust-project"]).await;
    assert_eq!(collector.spans().len(), 9);
    let tenants = collector.received.lock().unwrap().tenants.clone();
    assert!(tenants.is_empty(), "{tenants:?}");
    // The environment's headers would ride along to it: the project's endpoint is not used.
    let env = [("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=from-env")];
    run_with_settings("", &project, &env, &["--trust-project"]).await;
    assert_eq!(collector.spans().len(), 9, "nothing more was sent");
    let tenants = collector.received.lock().unwrap().tenants.clone();
    assert!(tenants.is_empty(), "{tenants:?}");
}

#[tokio::test]
async fn a_project_the_user_trusts_sends_where_its_telemetry_table_says_and_a_change_undoes_it() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().to_str().unwrap();
    let table = format!("[telemetry]\nendpoint = \"{}\"\n", collector.endpoint);
    write_file(&dir.path().join("cadre.toml"), &table);
    let out = cadre_env(dir.path(), &[("HOME", home_path)], &["trust"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The fan-out against a mock of its own, in the folder.
    let run = || async {
        let server = MockServer::start().await;
        fan_out(&server).await;
        let uri = server.uri();
        let env = [
            ("ANTHROPIC_BASE_URL", uri.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
            ("HOME", home_path),
            ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
        ];
        let out = cadre_env(dir.path(), &env, &["run", PROMPT]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    run().await;
    assert_eq!(collector.spans().len(), 9);
    // Changed since it was trusted (a header added), the project's table is left out again.
    write_file(
        &dir.path().join("cadre.toml"),
        &format!("{table}headers = \"x-tenant=sneaky\"\n"),
    );
    let out = run().await;
    assert!(out.stderr.contains("telemetry.headers"), "{}", out.stderr);
    assert_eq!(collector.spans().len(), 9, "nothing more was sent");
    assert!(collector.received.lock().unwrap().tenants.is_empty());
}

/// The `traceparent` header of each request `server` received, if it had one.
fn traceparents(server: &MockServer) -> Vec<Option<String>> {
    server
        .requests()
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k == "traceparent")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

#[tokio::test]
async fn model_requests_carry_their_chat_spans_traceparent_only_when_asked() {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for asked in [false, true] {
        let collector = Collector::start().await;
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start().await;
        fan_out(&server).await;
        let uri = server.uri();
        let mut env = vec![
            ("ANTHROPIC_BASE_URL", uri.as_str()),
            ("ANTHROPIC_API_KEY", "k"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("CADRE_OTEL_EXIT_WAIT_MS", "60000"),
        ];
        if asked {
            env.push(("CADRE_OTEL_TRACEPARENT_TO_MODEL", "1"));
        }
        let out = cadre_env(dir.path(), &env, &["run", PROMPT]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let sent = traceparents(&server);
        assert_eq!(sent.len(), 4);
        if !asked {
            assert!(sent.iter().all(Option::is_none), "{sent:?}");
            continue;
        }
        // Each is the context of one `chat` span, a different one each.
        let chats: Vec<String> = collector
            .spans()
            .iter()
            .filter(|s| s.name.starts_with("chat "))
            .map(|s| format!("00-{}-{}-01", hex(&s.trace_id), hex(&s.span_id)))
            .collect();
        let mut sent: Vec<String> = sent.into_iter().map(Option::unwrap).collect();
        sent.sort();
        sent.dedup();
        assert_eq!(sent.len(), 4);
        assert!(
            sent.iter().all(|tp| chats.contains(tp)),
            "{sent:?} {chats:?}"
        );
    }
}

#[tokio::test]
async fn metrics_go_to_their_own_endpoint_when_one_is_set() {
    let traces = Collector::start().await;
    let metrics = Collector::start().await;
    let own = format!("{}/v1/metrics", metrics.endpoint);
    traced_run(
        &traces,
        &[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", own.as_str()),
        ],
    )
    .await;
    assert_eq!(traces.spans().len(), 9);
    assert!(traces.received.lock().unwrap().metrics.is_empty());
    assert!(metrics.metric("gen_ai.client.operation.duration").is_some());
    assert!(metrics.spans().is_empty());
}
