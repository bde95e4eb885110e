use super::*;
use cadre_core::{AgentSpec, Registry};
use cadre_mcp::{McpConfig, McpServers, Timeouts};
use cadre_testkit::{mcp_server_binary, McpHttpServer};
use std::path::Path;

fn servers(dir: &Path, json: Value, call_timeout: Duration) -> Arc<McpServers> {
    let mut config = McpConfig::default();
    config.add_text(Path::new(".mcp.json"), &json.to_string());
    assert!(config.problems.is_empty(), "{:?}", config.problems);
    let timeouts = Timeouts {
        start: Duration::from_secs(30),
        call: call_timeout,
    };
    Arc::new(McpServers::new(config, dir.to_path_buf(), timeouts))
}

fn stdio(log: &Path) -> Value {
    json!({"command": mcp_server_binary(), "args": ["--log", log]})
}

fn spec(yaml: &str) -> AgentSpec {
    let (spec, problems) = AgentSpec::parse_yaml(Path::new("t.yaml"), yaml);
    spec.unwrap_or_else(|| panic!("{problems:?}"))
}

/// The pids a `--log` file says were started.
fn starts(log: &Path) -> Vec<i32> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("start ")?.trim().parse().ok())
        .collect()
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

async fn run(
    server: &MockServer,
    dir: &Path,
    registry: Registry,
    mcp: Arc<McpServers>,
    task: &str,
) -> AgentOutcome {
    let o = mock_builder(server, dir)
        .registry(registry)
        .mcp(mcp)
        .build()
        .unwrap();
    o.run("main", task).await.unwrap().0
}

fn results_of(r: &cadre_testkit::Captured) -> Vec<Value> {
    r.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn stdio_and_http_tools_reach_the_model_and_only_the_types_allowed_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("local.log");
    let http = McpHttpServer::spawn(&[]);
    let mcp = servers(
        dir.path(),
        json!({"local": stdio(&log), "remote": {"type": "http", "url": http.url()}}),
        Duration::from_secs(30),
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_uses(vec![
                ("m1", "mcp__local__echo", json!({"text": "hi"})),
                ("m2", "mcp__local__add", json!({"a": 2, "b": 3})),
                ("m3", "mcp__remote__image", json!({})),
            ]),
            Reply::tasks([
                ("t1", "explore", "Look around"),
                ("t2", "reader", "Echo once"),
                ("t3", "sealed", "Try nothing"),
            ]),
            Reply::text("done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Look around".into()),
        vec![Reply::text("explored")],
    );
    server.route(
        Match::FirstUserContains("Echo once".into()),
        vec![
            Reply::tool_use("r1", "mcp__local__echo", json!({"text": "again"})),
            Reply::text("echoed"),
        ],
    );
    server.route(
        Match::FirstUserContains("Try nothing".into()),
        vec![Reply::text("nothing")],
    );
    let mut registry = Registry::shipped();
    // Read-only: MCP tools only by explicit name, and here only one of them.
    registry.insert(spec(
        "name: reader\ndescription: d\nread_only: true\ntools: [read_file, mcp__local__echo]\nprompt: p\n",
    ));
    // Every tool, but read-only: no MCP tool at all.
    registry.insert(spec(
        "name: sealed\ndescription: d\nread_only: true\ntools: [\"*\"]\nprompt: p\n",
    ));
    let outcome = run(&server, dir.path(), registry, mcp.clone(), "PARENT task").await;
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);

    let requests = server.requests();
    let first = &requests[0];
    let tools = first.body["tools"].as_array().unwrap();
    let add = tools
        .iter()
        .find(|t| t["name"] == "mcp__local__add")
        .unwrap();
    assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer");
    let required: Vec<&str> = add["input_schema"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(required.contains(&"a") && required.contains(&"b"), "{add}");
    for name in [
        "mcp__local__echo",
        "mcp__remote__image",
        "mcp__remote__hang",
    ] {
        assert!(first.tool_names().contains(&name.to_owned()), "{name}");
    }

    // The results: text, the sum, and a text plus an image block.
    let second = requests
        .iter()
        .find(|r| r.first_user_text().contains("PARENT") && r.messages().len() == 3)
        .unwrap();
    let results = results_of(second);
    assert_eq!(results[0]["content"][0]["text"], "echo: hi");
    assert_eq!(results[1]["content"][0]["text"], "5");
    assert_eq!(results[2]["content"][0]["text"], "a red pixel");
    assert_eq!(results[2]["content"][1]["type"], "image");
    assert_eq!(
        results[2]["content"][1]["source"]["media_type"],
        "image/png"
    );
    assert!(results.iter().all(|r| r.get("is_error").is_none()));

    // Filtering per type.
    let offered = |prompt: &str| {
        requests
            .iter()
            .find(|r| r.first_user_text() == prompt)
            .unwrap()
            .tool_names()
            .into_iter()
            .filter(|t| t.starts_with("mcp__"))
            .collect::<Vec<_>>()
    };
    assert!(offered("Look around").is_empty());
    assert!(offered("Try nothing").is_empty());
    assert_eq!(offered("Echo once"), ["mcp__local__echo"]);

    // One stdio server for the whole run, shared by main and reader, stopped at its end.
    let pids = starts(&log);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls.matches("call echo").count(), 2, "{calls}");
    for _ in 0..50 {
        if !alive(pids[0]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pids[0]), "the stdio server outlived the run");
}

#[tokio::test]
async fn a_crash_and_a_hang_are_errors_naming_the_server_and_the_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("local.log");
    let http = McpHttpServer::spawn(&[]);
    let mcp = servers(
        dir.path(),
        json!({"local": stdio(&log), "slow": {"type": "http", "url": http.url()}}),
        Duration::from_secs(2),
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("c1", "mcp__local__crash", json!({})),
            Reply::tool_use("h1", "mcp__slow__hang", json!({})),
            Reply::tool_use("f1", "mcp__slow__fail", json!({"message": "no such row"})),
            Reply::text("survived"),
        ],
    );
    let outcome = run(&server, dir.path(), Registry::shipped(), mcp, "go").await;
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(outcome.text, "survived");
    let requests = server.requests();
    let result = |n: usize| results_of(&requests[n])[0].clone();
    let crash = result(1);
    assert_eq!(crash["is_error"], true);
    let text = crash["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("\"local\"") && text.contains("crashing on purpose"),
        "{text}"
    );
    let hang = result(2);
    assert_eq!(hang["is_error"], true);
    let text = hang["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("\"slow\"") && text.contains("did not answer"),
        "{text}"
    );
    let fail = result(3);
    assert_eq!(fail["is_error"], true);
    assert_eq!(fail["content"][0]["text"], "no such row");
}

#[tokio::test]
async fn an_inline_server_lives_and_dies_with_its_subagent() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("own.log");
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "owner", "Use your server")]),
            Reply::text("ok"),
        ],
    );
    server.route(
        Match::FirstUserContains("Use your server".into()),
        vec![
            Reply::tool_use("o1", "mcp__own__echo", json!({"text": "mine"})),
            Reply::text("used"),
        ],
    );
    let mut registry = Registry::shipped();
    let mut owner = spec("name: owner\ndescription: d\ntools: [read_file]\nprompt: p\n");
    owner.mcp_servers = vec![cadre_core::McpServerRef::Inline(
        [("own".to_owned(), stdio(&log))].into_iter().collect(),
    )];
    registry.insert(owner);
    // The parent sees no server of the run, so it gets no MCP tool.
    let mcp = servers(dir.path(), json!({}), Duration::from_secs(30));
    let outcome = run(&server, dir.path(), registry, mcp, "PARENT task").await;
    assert_eq!(outcome.stop, StopKind::Done);
    let requests = server.requests();
    let sub = requests
        .iter()
        .rfind(|r| r.first_user_text() == "Use your server")
        .unwrap();
    assert_eq!(results_of(sub)[0]["content"][0]["text"], "echo: mine");
    assert!(!requests[0]
        .tool_names()
        .iter()
        .any(|t| t.starts_with("mcp__")));
    let pids = starts(&log);
    assert_eq!(pids.len(), 1);
    // Stopped when the subagent ended, before the run did.
    assert!(!alive(pids[0]));
}
