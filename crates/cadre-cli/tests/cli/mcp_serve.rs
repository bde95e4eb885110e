//! `cadre mcp serve` through an rmcp client, as Claude Code or Codex would start it: over
//! stdio, against the real binary and the mock Messages API.

use super::*;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, Implementation, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
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
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("cadre-test-client", "1"),
        )
    }
}

/// A running `cadre mcp serve` and the client connected to it.
struct Served {
    client: RunningService<RoleClient, Client>,
    seen: Client,
    _home: tempfile::TempDir,
}

/// Starts `cadre mcp serve ARGS` in `dir` against the mock at `base_url`, connected over
/// stdio as an MCP client launches a server.
async fn serve(dir: &Path, base_url: &str, args: &[&str]) -> Served {
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"));
    command
        .current_dir(dir)
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", base_url)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .args(["mcp", "serve"])
        .args(args);
    let seen = Client::default();
    let client = seen
        .clone()
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap();
    Served {
        client,
        seen,
        _home: home,
    }
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

#[tokio::test]
async fn each_agent_type_is_a_tool_and_a_call_is_a_run_with_its_answer() {
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
    let served = serve(dir.path(), &server.uri(), &[]).await;

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

#[tokio::test]
async fn bad_input_is_a_clear_error_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("agents/counter.yaml"), COUNTER);
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("still here")]);
    let served = serve(dir.path(), &server.uri(), &[]).await;
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

#[tokio::test]
async fn two_calls_at_once_run_concurrently_under_one_limit() {
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
    let served = serve(dir.path(), &server.uri(), &["--max-parallel", "2"]).await;
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
    let served = serve(dir.path(), &server.uri(), &["--max-parallel", "1"]).await;
    let first = served
        .client
        .call_tool(call("explore", json!({"prompt": "the first"})));
    let second = async {
        // The first call's request holds the one permit at the gate before the second
        // call is made; the second's request can only follow once the gate opens.
        assert!(gate.wait_for(1, std::time::Duration::from_secs(60)).await);
        let second = served
            .client
            .call_tool(call("plan", json!({"prompt": "the second"})));
        let opener = async {
            gate.open();
        };
        tokio::join!(second, opener).0
    };
    let (a, b) = tokio::join!(first, second);
    assert_eq!(text_of(&a.unwrap()), "one");
    assert_eq!(text_of(&b.unwrap()), "two");
    assert_eq!(server.max_in_flight(), 1);
}

#[tokio::test]
async fn a_cancelled_call_stops_its_agent_and_children() {
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
    let served = serve(dir.path(), &server.uri(), &[]).await;
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
    wait_for("the child agent's command to start", || pid_file.exists()).await;
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
