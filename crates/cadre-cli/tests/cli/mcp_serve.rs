//! `cadre mcp serve` through an rmcp client, as Claude Code or Codex would start it: over
//! stdio, against the real binary and the mock Messages API.

use super::*;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, GetTaskParams, Implementation, ProgressNotificationParam, ServerResult,
    TaskPayload, TaskStatus,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceError, ServiceExt};
use std::sync::{Arc, Mutex};

/// A type with an answer schema, served as a tool with an `outputSchema`.
const COUNTER: &str = "name: counter\ndescription: Counts things.\ntools: [read_file]\noutput_schema: {type: object, properties: {count: {type: integer}}, required: [count]}\nprompt: You count.\n";

/// A type only a person may run: not a tool.
const BOSS: &str = "name: boss\ndescription: Runs the show.\nmode: primary\nprompt: You lead.\n";

/// A type that delegates to `code`, for the cancel test's agent with a child.
const CHIEF: &str = "name: chief\ndescription: Delegates.\ntools: [Task]\nsubagent_types: [code]\nprompt: You delegate.\n";

/// The test's MCP client: what the server told it on the side.
#[derive(Clone, Default)]
struct Client {
    /// Every progress notification, in the order it arrived.
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    /// Whether it declares MCP's tasks extension.
    tasks: bool,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("cadre-test-client", "1"))
    }
}

/// How the client reaches the server.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// Stdio: the client starts the server, as Claude Code or Codex do.
    Stdio,
    /// Streamable HTTP on a loopback port of the server's choosing.
    Http,
}

/// A running `cadre mcp serve` and the client connected to it.
struct Served {
    client: RunningService<RoleClient, Client>,
    seen: Client,
    /// The server's endpoint, over HTTP.
    url: Option<String>,
    /// The bearer token the HTTP server made and said on stderr.
    token: Option<String>,
    /// The server's process id.
    pid: u32,
    /// What the server wrote to stderr so far.
    stderr: Arc<Mutex<String>>,
    /// The server process, over HTTP (the client owns it over stdio).
    _child: Option<tokio::process::Child>,
    _home: tempfile::TempDir,
}

/// `cadre mcp serve ARGS` in `dir` against the mock at `base_url`, not yet started.
fn serve_command(
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
) -> tokio::process::Command {
    let serve_args: Vec<&str> = ["mcp", "serve"].iter().chain(args).copied().collect();
    let mut command = tokio::process::Command::from(super::sessions::cadre_command(
        dir,
        base_url,
        home,
        &serve_args,
    ));
    // Its standard streams are the client's to set (stdio), as a launched server's are.
    command
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    command
}

/// Starts `cadre mcp serve ARGS` in `dir` against the mock at `base_url` and connects a
/// client to it `via` stdio (as an MCP client launches a server) or HTTP.
async fn serve(via: Via, dir: &Path, base_url: &str, args: &[&str]) -> Served {
    serve_as(via, dir, base_url, args, Client::default()).await
}

/// [`serve`] with the client `seen`.
async fn serve_as(via: Via, dir: &Path, base_url: &str, args: &[&str], seen: Client) -> Served {
    let home = tempfile::tempdir().unwrap();
    match via {
        Via::Stdio => {
            let command = serve_command(dir, home.path(), base_url, args);
            let (transport, stderr) = TokioChildProcess::builder(command)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = transport.id().unwrap();
            let stderr = gather(tokio::io::BufReader::new(stderr.unwrap()));
            let client = seen.clone().serve(transport).await.unwrap();
            Served {
                client,
                seen,
                url: None,
                token: None,
                pid,
                stderr,
                _child: None,
                _home: home,
            }
        }
        Via::Http => {
            let mut args = args.to_vec();
            args.extend(["--http", "127.0.0.1:0"]);
            let (child, url, stderr) =
                start_http(serve_command(dir, home.path(), base_url, &args)).await;
            let token = said_token(&stderr);
            assert!(token.is_some(), "no token said: {}", stderr.lock().unwrap());
            let client = connect(&url, token.as_deref(), seen.clone()).await.unwrap();
            Served {
                client,
                seen,
                url: Some(url),
                token,
                pid: child.id().unwrap(),
                stderr,
                _child: Some(child),
                _home: home,
            }
        }
    }
}

/// Starts an HTTP server's `command`; the process, the endpoint it says it serves, and
/// what it writes to stderr.
async fn start_http(
    mut command: tokio::process::Command,
) -> (tokio::process::Child, String, Arc<Mutex<String>>) {
    command.stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stderr = gather(tokio::io::BufReader::new(child.stderr.take().unwrap()));
    let mut url = None;
    wait_for("the server to say where it serves", || {
        url = stderr
            .lock()
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("cadre: serving MCP at "))
            .map(str::to_owned);
        url.is_some()
    })
    .await;
    (child, url.unwrap(), stderr)
}

/// The token an HTTP server started without one made and said on stderr.
fn said_token(stderr: &Mutex<String>) -> Option<String> {
    stderr
        .lock()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("cadre: token: "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
}

/// Gathers every line of `pipe` as it comes (and passes it on to the test's stderr), so
/// a full pipe never stops the server.
fn gather(pipe: impl tokio::io::AsyncBufRead + Unpin + Send + 'static) -> Arc<Mutex<String>> {
    use tokio::io::AsyncBufReadExt;
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let mut lines = pipe.lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            let mut text = sink.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    text
}

/// A client of the HTTP server at `url`, sending `token` if given.
async fn connect(
    url: &str,
    token: Option<&str>,
    seen: Client,
) -> Result<RunningService<RoleClient, Client>, rmcp::service::ClientInitializeError> {
    // rmcp's reqwest client needs a crypto provider installed; the test kit installs one.
    let _ = cadre_testkit::http_client();
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    seen.serve(StreamableHttpClientTransport::from_config(config))
        .await
}

/// A `tools/call` of `tool` with `arguments`.
fn call(tool: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

/// The text of a tool result's content.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// The summary of the one run in `dir` whose task is `task`, once it is written.
async fn summary_of(dir: &Path, task: &str) -> Value {
    let runs = dir.join(".cadre/runs");
    let mut found = None;
    wait_for(&format!("the summary of the run of {task:?}"), || {
        let Ok(entries) = std::fs::read_dir(&runs) else {
            return false;
        };
        found = entries
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("summary.json")).ok())
            .filter_map(|s| serde_json::from_str::<Value>(&s).ok())
            .find(|s| s["task"] == task);
        found.is_some()
    })
    .await;
    found.unwrap()
}

async fn each_agent_type_is_a_tool_and_a_call_is_a_run_with_its_answer(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/counter.yaml"), COUNTER);
    write_file(&dir.path().join("agents/boss.yaml"), BOSS);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Where is alpha".into()),
        vec![
            Reply::tool_use("g1", "grep", json!({"pattern": "alpha"})),
            Reply::text("alpha is in lib.rs:1"),
        ],
    );
    server.route(
        Match::FirstUserContains("Count the files".into()),
        vec![Reply::text(r#"{"count": 7}"#)],
    );
    write_file(&dir.path().join("lib.rs"), "fn alpha() {}\n");
    let served = serve(via, dir.path(), &server.uri(), &[]).await;

    let tools = served.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in ["explore", "plan", "code", "counter"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    assert!(
        !names.contains(&"boss"),
        "a primary-only type is no tool: {names:?}"
    );
    let explore = tools.iter().find(|t| t.name == "explore").unwrap();
    let schema = Value::Object((*explore.input_schema).clone());
    assert_eq!(schema["required"], json!(["prompt"]));
    for field in [
        "prompt",
        "model",
        "effort",
        "max_turns",
        "budget_tokens",
        "output_schema",
    ] {
        assert!(
            schema["properties"].get(field).is_some(),
            "{field}: {schema}"
        );
    }
    assert_eq!(schema["properties"]["max_turns"]["maximum"], 30);
    assert!(explore
        .description
        .as_deref()
        .unwrap()
        .contains("Read-only"));
    assert!(explore.output_schema.is_none());
    let counter = tools.iter().find(|t| t.name == "counter").unwrap();
    let output = Value::Object((*counter.output_schema.clone().unwrap()).clone());
    assert_eq!(output["required"], json!(["count"]));

    let result = served
        .client
        .call_tool(call(
            "explore",
            json!({"prompt": "Where is alpha defined?"}),
        ))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(text_of(&result), "alpha is in lib.rs:1");
    // The client handles notifications apart from the result, so the last one (the second
    // turn's) may be handled after the call returns: wait for it, not for that order.
    let seen = served.seen.progress.clone();
    crate::wait_for("progress up to the second turn", || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|p| p.message.as_deref().is_some_and(|m| m.contains("turn 2")))
    })
    .await;
    // Progress came in order: each notification's progress above the one before.
    let progress = served.seen.progress.lock().unwrap().clone();
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(
        progress.windows(2).all(|w| w[0].progress < w[1].progress),
        "{progress:?}"
    );
    let messages: Vec<String> = progress.iter().filter_map(|p| p.message.clone()).collect();
    assert!(
        messages.iter().any(|m| m.contains("turn 2")),
        "{messages:?}"
    );

    let typed = served
        .client
        .call_tool(call("counter", json!({"prompt": "Count the files"})))
        .await
        .unwrap();
    assert_ne!(typed.is_error, Some(true), "{typed:?}");
    let structured = typed.structured_content.clone().unwrap();
    assert_eq!(structured, json!({"count": 7}));
    let validator = jsonschema::validator_for(&output).unwrap();
    assert!(validator.is_valid(&structured));
    let as_text: Value = serde_json::from_str(&text_of(&typed)).unwrap();
    assert_eq!(as_text, structured);
    served.client.cancel().await.unwrap();

    // Each call is a run like any other: journaled, and listed by `cadre runs`.
    let summary = summary_of(dir.path(), "Where is alpha defined?").await;
    assert_eq!(summary["outcome"], "completed");
    let listed = cadre_offline(dir.path(), &["runs", "list", "--json"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let runs: Value = serde_json::from_str(&listed.stdout).unwrap();
    let tasks: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["task"].as_str())
        .collect();
    assert!(tasks.contains(&"Where is alpha defined?"), "{tasks:?}");
    assert!(tasks.contains(&"Count the files"), "{tasks:?}");
}

async fn bad_input_is_a_clear_error_and_the_server_keeps_serving(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/counter.yaml"), COUNTER);
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("still here")]);
    let served = serve(via, dir.path(), &server.uri(), &[]).await;
    let client = &served.client;

    let unknown = client
        .call_tool(call("nope", json!({"prompt": "x"})))
        .await
        .unwrap_err();
    let ServiceError::McpError(error) = unknown else {
        panic!("not a JSON-RPC error: {unknown:?}")
    };
    assert_eq!(error.code.0, -32602);
    assert!(error.message.contains("unknown tool \"nope\""), "{error:?}");
    assert!(error.message.contains("explore"), "{error:?}");

    let refused = [
        (call("explore", json!({})), "prompt"),
        (
            call(
                "explore",
                json!({"prompt": "x", "output_schema": {"type": 12}}),
            ),
            "output_schema is not usable",
        ),
        (
            call(
                "explore",
                json!({"prompt": "x", "output_schema": "a string"}),
            ),
            "output_schema is not usable",
        ),
        (
            call("explore", json!({"prompt": "x", "max_turns": 31})),
            "max_turns 31 would loosen the limit of 30 turns",
        ),
        (
            call(
                "counter",
                json!({"prompt": "x", "output_schema": {"type": "object"}}),
            ),
            "its type's own schema",
        ),
        (
            call("explore", json!({"prompt": "x", "effort": "extreme"})),
            "effort \"extreme\" is no level",
        ),
    ];
    for (request, says) in refused {
        let result = client.call_tool(request.clone()).await.unwrap();
        assert_eq!(result.is_error, Some(true), "{request:?}: {result:?}");
        assert!(text_of(&result).contains(says), "{request:?}: {result:?}");
    }
    // None of them started a run or asked the model; the server still answers.
    assert!(server.requests().is_empty());
    let result = client
        .call_tool(call("explore", json!({"prompt": "x", "max_turns": 3})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "still here");
}

async fn two_calls_at_once_run_concurrently_under_one_limit(via: Via) {
    // Two at once: the mock holds each request until both wait, so both calls must be in
    // flight together, or the barrier times out and fails the test.
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("first".into()),
        vec![Reply::text("one")],
    );
    server.route(
        Match::FirstUserContains("second".into()),
        vec![Reply::text("two")],
    );
    server.hold_until_waiting(Match::Any, 2, std::time::Duration::from_secs(60));
    let served = serve(via, dir.path(), &server.uri(), &["--max-parallel", "2"]).await;
    let (a, b) = tokio::join!(
        served
            .client
            .call_tool(call("explore", json!({"prompt": "the first"}))),
        served
            .client
            .call_tool(call("plan", json!({"prompt": "the second"}))),
    );
    assert_eq!(text_of(&a.unwrap()), "one");
    assert_eq!(text_of(&b.unwrap()), "two");
    assert_eq!(server.max_in_flight(), 2);

    // One at a time: with --max-parallel 1 the two calls' requests never overlap.
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("first".into()),
        vec![Reply::text("one")],
    );
    server.route(
        Match::FirstUserContains("second".into()),
        vec![Reply::text("two")],
    );
    let gate = server.gate(Match::FirstUserContains("first".into()));
    let served = serve(
        via,
        dir.path(),
        &server.uri(),
        &["-v", "--max-parallel", "1"],
    )
    .await;
    let first = served
        .client
        .call_tool(call("explore", json!({"prompt": "the first"})));
    let second = async {
        // The first call's request holds the one slot at the gate; the second call's
        // request waits for it, as the server says, and only then does the gate open.
        assert!(gate.wait_for(1, std::time::Duration::from_secs(60)).await);
        let second = served
            .client
            .call_tool(call("plan", json!({"prompt": "the second"})));
        let opener = async {
            wait_for("the second call's request to wait for a slot", || {
                served
                    .stderr
                    .lock()
                    .unwrap()
                    .contains("a model request waits")
            })
            .await;
            assert_eq!(server.requests().len(), 1);
            gate.open();
        };
        tokio::join!(second, opener).0
    };
    let (a, b) = tokio::join!(first, second);
    assert_eq!(text_of(&a.unwrap()), "one");
    assert_eq!(text_of(&b.unwrap()), "two");
    assert_eq!(server.max_in_flight(), 1);
}

async fn a_cancelled_call_stops_its_agent_and_children(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/chief.yaml"), CHIEF);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![Reply::tasks([("t1", "code", "Sleeper")])],
    );
    server.route(
        Match::FirstUserContains("Sleeper".into()),
        vec![Reply::tool_use(
            "s1",
            "bash",
            json!({"command": "echo $$ > sleeper.pid; sleep 300"}),
        )],
    );
    let served = serve(via, dir.path(), &server.uri(), &[]).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "chief",
        json!({"prompt": "PARENT task"}),
    )));
    let handle = served
        .client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let pid_file = dir.path().join("sleeper.pid");
    wait_for("the child agent's command to start", || {
        super::sessions::written_pid(&pid_file).is_some()
    })
    .await;
    handle
        .cancel(Some("the test cancels".into()))
        .await
        .unwrap();

    let summary = summary_of(dir.path(), "PARENT task").await;
    assert_eq!(summary["outcome"], "cancelled", "{summary}");
    let sleeper: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for(
        &format!("the child's command (group {sleeper}) to end, not be orphaned"),
        || nix::sys::signal::killpg(nix::unistd::Pid::from_raw(sleeper), None).is_err(),
    )
    .await;
    // The server goes on serving after a cancel.
    server.route(Match::Any, vec![Reply::text("after")]);
    let result = served
        .client
        .call_tool(call("explore", json!({"prompt": "again"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "after");
}

#[tokio::test]
async fn each_agent_type_is_a_tool_and_a_call_is_a_run_with_its_answer_over_stdio() {
    each_agent_type_is_a_tool_and_a_call_is_a_run_with_its_answer(Via::Stdio).await;
}

#[tokio::test]
async fn each_agent_type_is_a_tool_and_a_call_is_a_run_with_its_answer_over_http() {
    each_agent_type_is_a_tool_and_a_call_is_a_run_with_its_answer(Via::Http).await;
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_the_server_keeps_serving_over_stdio() {
    bad_input_is_a_clear_error_and_the_server_keeps_serving(Via::Stdio).await;
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_the_server_keeps_serving_over_http() {
    bad_input_is_a_clear_error_and_the_server_keeps_serving(Via::Http).await;
}

#[tokio::test]
async fn two_calls_at_once_run_concurrently_under_one_limit_over_stdio() {
    two_calls_at_once_run_concurrently_under_one_limit(Via::Stdio).await;
}

#[tokio::test]
async fn two_calls_at_once_run_concurrently_under_one_limit_over_http() {
    two_calls_at_once_run_concurrently_under_one_limit(Via::Http).await;
}

#[tokio::test]
async fn a_cancelled_call_stops_its_agent_and_children_over_stdio() {
    a_cancelled_call_stops_its_agent_and_children(Via::Stdio).await;
}

#[tokio::test]
async fn a_cancelled_call_stops_its_agent_and_children_over_http() {
    a_cancelled_call_stops_its_agent_and_children(Via::Http).await;
}

#[tokio::test]
async fn a_task_outlives_a_two_second_client_timeout_and_is_fetched_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("long job".into()),
        vec![Reply::text("the long answer")],
    );
    // The other client's call is given up while held; its reply is never taken.
    server.route(
        Match::FirstUserContains("impatient".into()),
        vec![Reply::text("never taken")],
    );
    server.allow_unused_replies();
    let gate = server.gate(Match::Any);
    let tasks = Client {
        tasks: true,
        ..Client::default()
    };
    let served = serve_as(Via::Http, dir.path(), &server.uri(), &[], tasks).await;
    let two_seconds = || PeerRequestOptions::with_timeout(std::time::Duration::from_secs(2));
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "explore",
        json!({"prompt": "the long job"}),
    )));
    // A client that declares tasks gets a task at once, however long the run takes.
    let created = served
        .client
        .peer()
        .send_cancellable_request(request, two_seconds())
        .await
        .unwrap()
        .await_response()
        .await
        .unwrap();
    let ServerResult::CreateTaskResult(created) = created else {
        panic!("not a task: {created:?}")
    };
    let task_id = created.task.task_id.clone();
    assert!(gate.wait_for(1, std::time::Duration::from_secs(60)).await);
    // A plain call with the same two-second timeout, from a client without tasks, times
    // out meanwhile: the task has outlived such a timeout.
    let plain = connect(
        served.url.as_deref().unwrap(),
        served.token.as_deref(),
        Client::default(),
    )
    .await
    .unwrap();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "explore",
        json!({"prompt": "impatient"}),
    )));
    let timed_out = plain
        .peer()
        .send_cancellable_request(request, two_seconds())
        .await
        .unwrap()
        .await_response()
        .await
        .unwrap_err();
    assert!(
        matches!(timed_out, ServiceError::Timeout { .. }),
        "{timed_out:?}"
    );
    let working = served
        .client
        .get_task(GetTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    assert_eq!(working.task.status(), TaskStatus::Working);
    // Its status message tells how the run stands, as progress notifications would.
    let start = std::time::Instant::now();
    loop {
        let got = served
            .client
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap();
        let message = got.task.task.status_message.unwrap_or_default();
        if message.contains("explore: turn 1") {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no turn in the status: {message:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    gate.open();
    let mut done = None;
    let start = std::time::Instant::now();
    while done.is_none() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the task never ended"
        );
        let got = served
            .client
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap();
        if got.task.status().is_terminal() {
            done = Some(got.task);
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let TaskPayload::Completed { result } = done.unwrap().payload else {
        panic!("the task did not complete")
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(text_of(&result), "the long answer");
    let summary = summary_of(dir.path(), "the long job").await;
    assert_eq!(summary["outcome"], "completed");
}

#[tokio::test]
async fn http_off_loopback_needs_a_token_and_a_token_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let out = cadre_env(
        dir.path(),
        &[("CADRE_MCP_TOKEN", "")],
        &["mcp", "serve", "--http", "0.0.0.0:0", "--no-token"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--no-token is refused"),
        "{}",
        out.stderr
    );
    let out = cadre_env(
        dir.path(),
        &[("CADRE_MCP_TOKEN", "")],
        &["mcp", "serve", "--engine", "restate"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);

    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("let in")]);
    let home = tempfile::tempdir().unwrap();
    // Off loopback, with a token: any Host is let in (rmcp's loopback-only Host check is
    // off), only with the token.
    let command = serve_command(
        dir.path(),
        home.path(),
        &server.uri(),
        &["--http", "0.0.0.0:0", "--token", "s3cret"],
    );
    let (_child, url, _) = start_http(command).await;
    let url = url.replace("0.0.0.0", "127.0.0.1");
    let far = Some("cadre.example.org");
    assert_eq!(status(&url, None, far).await, 401);
    assert_eq!(status(&url, Some("Bearer wrong"), far).await, 401);
    assert_eq!(status(&url, Some("Bearer s3cret2"), far).await, 401);
    assert_eq!(status(&url, Some("Bearer s3cret"), far).await, 200);
    // The scheme's name is case-insensitive (RFC 7235).
    assert_eq!(status(&url, Some("bearer s3cret"), far).await, 200);
    assert!(connect(&url, None, Client::default()).await.is_err());
    let client = connect(&url, Some("s3cret"), Client::default())
        .await
        .unwrap();
    let result = client
        .call_tool(call("explore", json!({"prompt": "knock"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "let in");
}

#[tokio::test]
async fn http_on_loopback_makes_a_random_token_unless_told_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let home = tempfile::tempdir().unwrap();
    let command = serve_command(
        dir.path(),
        home.path(),
        &server.uri(),
        &["--http", "127.0.0.1:0"],
    );
    let (_child, url, stderr) = start_http(command).await;
    let token = said_token(&stderr).unwrap();
    assert!(token.len() >= 32, "{token}");
    assert_eq!(status(&url, None, None).await, 401);
    assert_eq!(
        status(&url, Some(&format!("Bearer {token}")), None).await,
        200
    );

    let command = serve_command(
        dir.path(),
        home.path(),
        &server.uri(),
        &["--http", "127.0.0.1:0", "--no-token"],
    );
    let (_child, url, stderr) = start_http(command).await;
    assert!(said_token(&stderr).is_none());
    assert_eq!(status(&url, None, None).await, 200);
}

/// The status of an `initialize` POST to `url` with `authorization`, and `host` as its
/// Host header's name when given.
async fn status(url: &str, authorization: Option<&str>, host: Option<&str>) -> u16 {
    let mut request = cadre_testkit::http_client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    if let Some(host) = host {
        request = request.header("host", host);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_server_killed_mid_call_leaves_an_unfinished_run_that_cadre_resume_completes() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("lib.rs"), "fn alpha() {}\n");
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Find alpha".into()),
        vec![
            Reply::tool_use("g1", "grep", json!({"pattern": "alpha"})),
            Reply::text("alpha is in lib.rs:1"),
        ],
    );
    // The second request (after the grep) is held: the server is killed while it waits.
    let gate = server.gate(Match::LastUserContains("fn alpha".into()));
    let served = serve(
        Via::Stdio,
        dir.path(),
        &server.uri(),
        &["--max-parallel", "1"],
    )
    .await;
    let peer = served.client.peer().clone();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "explore",
        json!({"prompt": "Find alpha", "max_turns": 5}),
    )));
    let _pending = peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    assert!(gate.wait_for(1, std::time::Duration::from_secs(60)).await);
    let runs = dir.path().join(".cadre/runs");
    wait_for("the call to be kept in its run folder", || {
        std::fs::read_dir(&runs).is_ok_and(|mut e| {
            e.next()
                .is_some_and(|r| r.unwrap().path().join("served.json").exists())
        })
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(served.pid).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_for("the killed server's request to leave the gate", || {
        gate.waiting() == 0
    })
    .await;
    drop(served);

    let listed = cadre_offline(dir.path(), &["runs", "list", "--json"]).await;
    let items: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(items[0]["outcome"], "unfinished", "{}", listed.stdout);
    let id = items[0]["id"].as_str().unwrap().to_owned();
    let before = server.requests().len();
    assert_eq!(before, 2);
    gate.open();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["resume", &id, "--output-format", "json"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let result: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(result["answer"], "alpha is in lib.rs:1");
    // Only the request the kill cut off is sent again; the first, answered, is not.
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{}", requests.len());
    assert_eq!(
        super::sessions::key(&requests[1]),
        super::sessions::key(&requests[2])
    );
    let summary = summary_of(dir.path(), "Find alpha").await;
    assert_eq!(summary["outcome"], "completed");
    // The call's own limit held on resume: the type's 30 turns were cut to 5.
    let kept = std::fs::read_to_string(runs.join(&id).join("served.json")).unwrap();
    assert!(kept.contains("\"max_turns\": 5"), "{kept}");
}

/// What installs the MCP Inspector where the tests look for it.
const INSPECTOR_INSTALL: &str =
    "npm install --prefix target/npm-inspector @modelcontextprotocol/inspector@1.0.3";

/// Runs the MCP Inspector's CLI against `cadre -C DIR mcp serve`, with `args` after the
/// server's command line; its stdout, after checking it succeeded.
async fn inspector(inspector: &Path, dir: &Path, base_url: &str, args: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let cadre = assert_cmd::cargo::cargo_bin("cadre");
    let mut command = tokio::process::Command::new(inspector);
    command
        .current_dir(dir)
        .env("HOME", home.path())
        .args(["--cli", "-e", "ANTHROPIC_API_KEY=k", "-e"])
        .arg(format!("ANTHROPIC_BASE_URL={base_url}"))
        .arg(&cadre)
        .arg("-C")
        .arg(dir)
        .args(["mcp", "serve"])
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .expect("the Inspector did not end")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A published MCP client (the MCP Inspector's CLI, from npm) lists the tools and calls
/// one (`.ci/run` installs it; elsewhere the test is ignored, with the reason).
#[tokio::test]
#[cfg_attr(
    not(has_mcp_inspector),
    ignore = "needs the MCP Inspector: npm install --prefix target/npm-inspector @modelcontextprotocol/inspector@1.0.3 (as .ci/run does)"
)]
async fn the_mcp_inspector_lists_and_calls_the_tools() {
    let Some(bin) = cadre_testkit::prereq::find_or_skip(
        &cadre_testkit::prereq::MCP_INSPECTOR,
        INSPECTOR_INSTALL,
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/counter.yaml"), COUNTER);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Where is beta".into()),
        vec![Reply::text("beta is nowhere")],
    );
    let listed = inspector(&bin, dir.path(), &server.uri(), &["--method", "tools/list"]).await;
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let tools = listed["tools"].as_array().unwrap();
    let counter = tools.iter().find(|t| t["name"] == "counter").unwrap();
    assert_eq!(counter["outputSchema"]["required"], json!(["count"]));
    assert!(tools.iter().any(|t| t["name"] == "explore"), "{listed}");
    let called = inspector(
        &bin,
        dir.path(),
        &server.uri(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "explore",
            "--tool-arg",
            "prompt=Where is beta?",
        ],
    )
    .await;
    let called: Value = serde_json::from_str(&called).unwrap();
    assert_eq!(called["content"][0]["text"], "beta is nowhere", "{called}");
    assert_ne!(called["isError"], true, "{called}");
}

#[tokio::test]
async fn an_ask_is_denied_with_a_clear_message_and_a_prefix_renames_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Write the note".into()),
        vec![
            bash("b1", "echo hi > note.txt"),
            Reply::text("I was not allowed to write it."),
        ],
    );
    let served = serve(
        Via::Stdio,
        dir.path(),
        &server.uri(),
        &["--permission-mode", "ask", "--prefix", "cadre_"],
    )
    .await;
    let tools = served.client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(names, ["cadre_code", "cadre_explore", "cadre_plan"]);
    let result = served
        .client
        .call_tool(call("cadre_code", json!({"prompt": "Write the note"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "I was not allowed to write it.");
    // The server has no terminal: the question became a denial that says why.
    let (is_error, text) = result_of(&server.requests(), "b1");
    assert!(is_error, "{text}");
    assert!(text.contains("no terminal to ask"), "{text}");
    assert!(!dir.path().join("note.txt").exists());
}

#[tokio::test]
async fn a_read_only_type_served_as_a_tool_stays_under_landlock() {
    let status = cadre_tools::landlock_status();
    if status.abi < cadre_tools::sandbox::MIN_READ_ONLY_ABI {
        // CI sets CADRE_REQUIRE_LANDLOCK: there a missing sandbox fails instead of skipping.
        assert!(
            std::env::var_os("CADRE_REQUIRE_LANDLOCK").is_none(),
            "CADRE_REQUIRE_LANDLOCK is set but {}",
            status.summary
        );
        eprintln!(
            "skipped: this kernel has no usable Landlock ({})",
            status.summary
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("keep.txt"), "original\n");
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Overwrite keep".into()),
        vec![
            bash("w1", "echo changed > keep.txt"),
            Reply::text("could not write"),
        ],
    );
    let served = serve(Via::Stdio, dir.path(), &server.uri(), &[]).await;
    let result = served
        .client
        .call_tool(call("explore", json!({"prompt": "Overwrite keep.txt"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "could not write");
    let (is_error, text) = result_of(&server.requests(), "w1");
    assert!(is_error, "the write went through: {text}");
    // The kernel's refusal (Landlock), not some other failure of the command.
    assert!(
        text.contains("Permission denied"),
        "not the sandbox's refusal: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "original\n"
    );
}

#[tokio::test]
async fn sigterm_stops_the_http_server_and_the_call_in_flight_ends_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Wait forever".into()),
        vec![Reply::text("never taken")],
    );
    server.allow_unused_replies();
    let gate = server.gate(Match::Any);
    let mut served = serve(Via::Http, dir.path(), &server.uri(), &[]).await;
    let peer = served.client.peer().clone();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "explore",
        json!({"prompt": "Wait forever"}),
    )));
    let _pending = peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    assert!(gate.wait_for(1, std::time::Duration::from_secs(60)).await);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(served.pid).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut child = served._child.take().unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .expect("the server did not stop on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let summary = summary_of(dir.path(), "Wait forever").await;
    assert_eq!(summary["outcome"], "cancelled", "{summary}");
}

#[tokio::test]
async fn a_call_that_did_not_complete_is_an_error_naming_its_outcome_and_budgets_only_tighten() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Search on".into()),
        vec![
            Reply::tool_use("g1", "grep", json!({"pattern": "x"})),
            Reply::text("a plausible answer it never reached"),
        ],
    );
    server.allow_unused_replies();
    let served = serve(
        Via::Stdio,
        dir.path(),
        &server.uri(),
        &["--budget-tokens", "100000"],
    )
    .await;
    let tools = served.client.list_all_tools().await.unwrap();
    let explore = tools.iter().find(|t| t.name == "explore").unwrap();
    assert_eq!(
        explore.input_schema["properties"]["budget_tokens"]["maximum"],
        100000
    );
    let loose = served
        .client
        .call_tool(call(
            "explore",
            json!({"prompt": "x", "budget_tokens": 200000}),
        ))
        .await
        .unwrap();
    assert_eq!(loose.is_error, Some(true));
    assert!(
        text_of(&loose).contains("would loosen the server's budget of 100000 tokens"),
        "{loose:?}"
    );

    let cut = served
        .client
        .call_tool(call(
            "explore",
            json!({"prompt": "Search on", "max_turns": 1}),
        ))
        .await
        .unwrap();
    assert_eq!(cut.is_error, Some(true), "{cut:?}");
    let text = text_of(&cut);
    assert!(text.contains("outcome turn_limit"), "{text}");
    assert!(!text.contains("plausible"), "{text}");
    let summary = summary_of(dir.path(), "Search on").await;
    assert_eq!(summary["outcome"], "turn_limit");
    let id = summary["run_id"].as_str().unwrap();
    assert!(text.contains(&format!("cadre runs show {id}")), "{text}");
}

/// A type that may delegate to a copy of itself.
const NESTER: &str = "name: nester\ndescription: Nests.\ntools: [Task]\nsubagent_types: [nester]\nprompt: You nest.\n";

#[tokio::test]
async fn a_calls_settings_stay_with_its_primary_and_never_reach_a_nested_agent_of_its_type() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/nester.yaml"), NESTER);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("OUTER".into()),
        vec![
            Reply::tasks([("t1", "nester", "INNER job")]),
            Reply::text(r#"{"n": 1}"#),
        ],
    );
    server.route(
        Match::FirstUserContains("INNER".into()),
        vec![Reply::text("inner done")],
    );
    let served = serve(Via::Stdio, dir.path(), &server.uri(), &[]).await;
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let result = served
        .client
        .call_tool(call(
            "nester",
            json!({"prompt": "OUTER job", "effort": "max", "output_schema": schema}),
        ))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(result.structured_content, Some(json!({"n": 1})));
    let requests = server.requests();
    let outer = requests
        .iter()
        .find(|r| r.first_user_text().contains("OUTER"))
        .unwrap();
    assert_eq!(
        outer.body["output_config"]["effort"], "max",
        "{}",
        outer.body
    );
    assert!(outer.body["output_config"]["format"].is_object());
    // The nested copy is the project's type: no answer schema, not the call's effort.
    let inner = requests
        .iter()
        .find(|r| r.first_user_text().contains("INNER"))
        .unwrap();
    assert!(
        inner.body["output_config"]["format"].is_null(),
        "{}",
        inner.body
    );
    assert_ne!(
        inner.body["output_config"]["effort"], "max",
        "{}",
        inner.body
    );
    served.client.cancel().await.unwrap();
}

/// How a stdio server's call in flight is ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// The server gets SIGHUP (its terminal or parent went away).
    HangUpSignal,
    /// The client closes the server's stdin and goes.
    ClientLeaves,
}

/// Starts a stdio server, a call whose agent runs a long command, then ends it as `how`:
/// the server exits, the run ends cancelled, and the command's process group is gone.
async fn a_call_in_flight_ends_cancelled_when(how: Ending) {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Sleep long".into()),
        vec![Reply::tool_use(
            "s1",
            "bash",
            json!({"command": "echo $$ > sleeper.pid; sleep 300"}),
        )],
    );
    server.allow_unused_replies();
    let served = serve(Via::Stdio, dir.path(), &server.uri(), &[]).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "code",
        json!({"prompt": "Sleep long"}),
    )));
    let _pending = served
        .client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let pid_file = dir.path().join("sleeper.pid");
    wait_for("the agent's command to start", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let server_pid = served.pid;
    match how {
        Ending::HangUpSignal => {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(server_pid).unwrap());
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        }
        Ending::ClientLeaves => {
            served.client.cancel().await.unwrap();
        }
    }
    let summary = summary_of(dir.path(), "Sleep long").await;
    assert_eq!(summary["outcome"], "cancelled", "{summary}");
    let sleeper: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for(
        &format!("the command's group {sleeper} to end, not be orphaned"),
        || nix::sys::signal::killpg(nix::unistd::Pid::from_raw(sleeper), None).is_err(),
    )
    .await;
    wait_for("the server to exit", || {
        cadre_testkit::hooks::gone(i32::try_from(server_pid).unwrap())
    })
    .await;
}

#[tokio::test]
async fn sighup_stops_the_stdio_server_and_the_call_in_flight_ends_cancelled() {
    a_call_in_flight_ends_cancelled_when(Ending::HangUpSignal).await;
}

#[tokio::test]
async fn the_stdio_client_hanging_up_ends_the_server_and_cancels_the_call() {
    a_call_in_flight_ends_cancelled_when(Ending::ClientLeaves).await;
}

#[tokio::test]
async fn options_of_one_run_are_refused_by_the_server_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (flags, named) in [
        (&["--agent", "code"][..], "--agent"),
        (&["--team"][..], "--team"),
        (&["--record", "c.json"][..], "--record"),
        (&["--replay", "c.json"][..], "--replay"),
        (&["--output-format", "json"][..], "--output-format"),
    ] {
        let mut args = vec!["mcp", "serve"];
        args.extend(flags);
        let out = cadre_offline(dir.path(), &args).await;
        assert_eq!(out.code, 2, "{flags:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("does not take {named}")),
            "{flags:?}: {}",
            out.stderr
        );
    }
}

#[tokio::test]
async fn a_served_calls_commands_are_marked_and_a_nested_server_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Mark".into()),
        vec![
            Reply::tool_use(
                "b1",
                "bash",
                json!({"command": "echo \"$CADRE_MCP_SERVED\" > marked"}),
            ),
            Reply::text("marked"),
        ],
    );
    let served = serve(Via::Stdio, dir.path(), &server.uri(), &[]).await;
    let result = served
        .client
        .call_tool(call("code", json!({"prompt": "Mark it"})))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "marked", "{result:?}");
    let marked = std::fs::read_to_string(dir.path().join("marked")).unwrap();
    assert_eq!(marked.trim(), "1");
    served.client.cancel().await.unwrap();

    let out = cadre_env(dir.path(), &[("CADRE_MCP_SERVED", "1")], &["mcp", "serve"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("refused inside a call of another cadre mcp serve"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn tasks_cancel_ends_the_run_cancelled_and_the_task_keeps_its_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Sleep as a task".into()),
        vec![Reply::tool_use(
            "s1",
            "bash",
            json!({"command": "echo $$ > sleeper.pid; sleep 300"}),
        )],
    );
    server.allow_unused_replies();
    let tasks = Client {
        tasks: true,
        ..Client::default()
    };
    let served = serve_as(Via::Stdio, dir.path(), &server.uri(), &[], tasks).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "code",
        json!({"prompt": "Sleep as a task"}),
    )));
    let created = served
        .client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap()
        .await_response()
        .await
        .unwrap();
    let ServerResult::CreateTaskResult(created) = created else {
        panic!("not a task: {created:?}")
    };
    let task_id = created.task.task_id.clone();
    let pid_file = dir.path().join("sleeper.pid");
    wait_for("the agent's command to start", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    served
        .client
        .cancel_task(rmcp::model::CancelTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    let summary = summary_of(dir.path(), "Sleep as a task").await;
    assert_eq!(summary["outcome"], "cancelled", "{summary}");
    let run_id = summary["run_id"].as_str().unwrap().to_owned();
    let sleeper: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for(
        &format!("the command's group {sleeper} to end, not be orphaned"),
        || nix::sys::signal::killpg(nix::unistd::Pid::from_raw(sleeper), None).is_err(),
    )
    .await;
    let start = std::time::Instant::now();
    let ended = loop {
        let got = served
            .client
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap();
        if got.task.status().is_terminal() {
            break got.task;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the task never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(ended.status(), TaskStatus::Cancelled);
    let message = ended.task.status_message.clone().unwrap_or_default();
    assert!(message.contains(&run_id), "{message:?}");
    assert!(message.contains("cancelled"), "{message:?}");
}
