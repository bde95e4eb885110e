use async_trait::async_trait;
use cadre_model::{
    ContentBlock, EventSink, Message, Model, ModelError, ModelEvent, RecordingModel, ReplayModel,
    Request, RequestOrigin, Response, Role, StopReason, SystemBlock, ToolDefinition, Usage,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Answers from the request alone: a user prompt gets a `read_file` call (plus some
/// text), a tool result gets a final answer. Counts calls; fails on the prompt "fail".
#[derive(Default)]
struct Scripted {
    calls: AtomicUsize,
}

#[async_trait]
impl Model for Scripted {
    fn provider(&self) -> &str {
        "scripted"
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let agent = request.origin.clone().unwrap_or_default().agent_type;
        let last = request.messages.last().unwrap();
        // Let concurrent agents interleave.
        tokio::task::yield_now().await;
        let result = last.content.iter().find_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(cadre_model::join_text(&r.content)),
            _ => None,
        });
        let (content, stop) = match result {
            Some(result) => (
                vec![ContentBlock::text(format!("{agent} is done: {result}"))],
                StopReason::EndTurn,
            ),
            None if last.text() == "fail" => {
                return Err(ModelError::Api {
                    status: 400,
                    kind: "invalid_request_error".into(),
                    message: "scripted failure".into(),
                    retry_after: None,
                })
            }
            None if last.text().starts_with("dup") => (
                vec![ContentBlock::text(format!("answer #{n}"))],
                StopReason::EndTurn,
            ),
            None => (
                vec![
                    ContentBlock::text(format!("{agent} reads.")),
                    ContentBlock::tool_use(
                        format!("toolu_{agent}_{}", request.messages.len()),
                        "read_file",
                        json!({"path": last.text(), "limit": 2.5}),
                    ),
                ],
                StopReason::ToolUse,
            ),
        };
        for block in &content {
            match block {
                ContentBlock::Text(t) => events(ModelEvent::TextDelta(t.text.clone())),
                ContentBlock::ToolUse(t) => events(ModelEvent::ToolUseStart {
                    id: t.id.clone(),
                    name: t.name.clone(),
                }),
                _ => {}
            }
        }
        Ok(Response {
            id: format!("msg_{n}"),
            model: request.model.clone(),
            role: Role::Assistant,
            content,
            stop_reason: Some(stop),
            stop_sequence: None,
            usage: Usage {
                input_tokens: 10 * n as u64,
                output_tokens: n as u64,
                ..Usage::default()
            },
        })
    }
}

/// How one agent of the test conversation is set up.
#[derive(Clone)]
struct Agent {
    path: &'static str,
    agent_type: &'static str,
    prompt: &'static str,
    system: String,
    caching: bool,
    description: &'static str,
}

fn agent(path: &'static str, agent_type: &'static str, prompt: &'static str) -> Agent {
    Agent {
        path,
        agent_type,
        prompt,
        system: format!("You are the {agent_type} agent.\nBe brief."),
        caching: false,
        description: "Reads a file.",
    }
}

fn request(a: &Agent, messages: Vec<Message>) -> Request {
    let mut r = Request::new("claude-sonnet-5-5", 1024, messages);
    r.system = vec![SystemBlock::text(&a.system)];
    r.tools = vec![ToolDefinition {
        name: "read_file".into(),
        description: a.description.into(),
        input_schema: json!({"type": "object"}),
        cache_control: None,
    }]
    .into();
    if a.caching {
        r.apply_prompt_caching();
    }
    r.origin = Some(RequestOrigin {
        path: a.path.into(),
        agent_type: a.agent_type.into(),
    });
    r
}

/// Runs an agent loop: prompt, tool calls answered, until the model ends its turn.
async fn run(model: &dyn Model, a: &Agent) -> Result<(Vec<Response>, Vec<ModelEvent>), ModelError> {
    let seen = Mutex::new(Vec::new());
    let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
    let mut history = vec![Message::user_text(a.prompt)];
    let mut out = Vec::new();
    loop {
        let resp = model.send(request(a, history.clone()), &sink).await?;
        history.push(resp.to_message());
        let results: Vec<ContentBlock> = resp
            .tool_uses()
            .map(|t| {
                ContentBlock::tool_result(&t.id, format!("contents of {}", t.input["path"]), false)
            })
            .collect();
        let stop = resp.stop_reason.clone();
        out.push(resp);
        if stop != Some(StopReason::ToolUse) {
            break;
        }
        history.push(Message::new(Role::User, results));
    }
    Ok((out, seen.into_inner().unwrap()))
}

fn main_agent() -> Agent {
    agent("main", "main", "src/lib.rs")
}

fn explore_agent() -> Agent {
    agent("main/explore#1", "explore", "Cargo.toml")
}

type Runs = Vec<(Vec<Response>, Vec<ModelEvent>)>;

/// Records the two-agent conversation (concurrently) to a fresh cassette.
async fn record(dir: &tempfile::TempDir) -> (std::path::PathBuf, Runs) {
    let path = dir.path().join("run.cassette.jsonl");
    let inner = Arc::new(Scripted::default());
    let rec = RecordingModel::create(&path, inner.clone()).unwrap();
    let (main, explore) = (main_agent(), explore_agent());
    let (m, e) = tokio::join!(run(&rec, &main), run(&rec, &explore));
    assert_eq!(rec.recorded(), 4);
    assert_eq!(inner.calls.load(Ordering::SeqCst), 4);
    (path, vec![m.unwrap(), e.unwrap()])
}

#[tokio::test]
async fn replays_identically_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let (path, live) = record(&dir).await;

    // The file: a header, then one whole exchange per line.
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["cadre_cassette"], 1);
    assert!(lines[0]["created_by"]
        .as_str()
        .unwrap()
        .starts_with("cadre "));
    for line in &lines[1..] {
        assert_eq!(line["key"].as_str().unwrap().len(), 64);
        assert!(["main", "main/explore#1"].contains(&line["agent"].as_str().unwrap()));
        assert_eq!(line["request"]["tool_names"], json!(["read_file"]));
        assert_eq!(line["request"]["tools"][0]["description"], "Reads a file.");
        assert!(line["request"]["system"][0]["text"].is_string());
        assert!(line["response"]["content"].is_array());
    }

    // Reversed, one after the other.
    let replay = ReplayModel::open(&path).unwrap();
    assert_eq!(replay.len(), 4);
    let e = run(&replay, &explore_agent()).await.unwrap();
    let m = run(&replay, &main_agent()).await.unwrap();
    assert_eq!(vec![m, e], live);
    assert_eq!(replay.remaining(), 0);
    assert_eq!(replay.provider(), "replay");

    // Concurrently, with prompt caching on (cache_control must not matter).
    let replay = ReplayModel::open(&path).unwrap();
    let (mut main, mut explore) = (main_agent(), explore_agent());
    main.caching = true;
    explore.caching = true;
    let (e, m) = tokio::join!(run(&replay, &explore), run(&replay, &main));
    assert_eq!(vec![m.unwrap(), e.unwrap()], live);
    assert_eq!(replay.remaining(), 0);
}

#[tokio::test]
async fn a_changed_system_prompt_fails_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = record(&dir).await;
    let replay = ReplayModel::open(&path).unwrap();
    let mut explore = explore_agent();
    explore.system = "You are the explore agent.\nBe thorough.".into();
    let err = run(&replay, &explore).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::Replay(_)), "{err:?}");
    assert!(!err.is_transient());
    assert!(msg.contains("main/explore#1"), "{msg}");
    assert!(msg.contains("system prompt"), "{msg}");
    assert!(msg.contains("\n-Be brief.\n"), "{msg}");
    assert!(msg.contains("\n+Be thorough.\n"), "{msg}");
    // A failed check serves nothing.
    assert_eq!(replay.remaining(), 4);

    let mut main = main_agent();
    main.description = "Reads a text file.";
    let err = run(&replay, &main).await.unwrap_err().to_string();
    assert!(err.contains("agent main (type \"main\")"), "{err}");
    assert!(err.contains("definition of tool \"read_file\""), "{err}");
    assert!(
        err.contains("+  \"description\": \"Reads a text file.\""),
        "{err}"
    );
}

#[tokio::test]
async fn an_unknown_request_fails_naming_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = record(&dir).await;
    let replay = ReplayModel::open(&path).unwrap();
    let err = run(&replay, &agent("main/explore#2", "explore", "build.rs"))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Replay(_)));
    let msg = err.to_string();
    assert!(msg.contains("main/explore#2"), "{msg}");
    assert!(msg.contains("type \"explore\""), "{msg}");
    assert!(msg.contains("(1 message)"), "{msg}");
    assert!(msg.contains("from agent main/explore#1"), "{msg}");
    assert!(msg.contains("\n-    Cargo.toml\n"), "{msg}");
    assert!(msg.contains("\n+    build.rs\n"), "{msg}");

    let err = run(&replay, &agent("main/plan#1", "plan", "x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("main/plan#1"), "{err}");
    assert!(
        err.contains("no request from an agent of type \"plan\""),
        "{err}"
    );
    assert!(err.contains("explore, main"), "{err}");
}

#[tokio::test]
async fn a_truncated_last_line_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (path, live) = record(&dir).await;
    let text = std::fs::read_to_string(&path).unwrap();
    // Simulate a crash in the middle of writing the last exchange.
    std::fs::write(&path, &text[..text.len() - 30]).unwrap();
    let replay = ReplayModel::open(&path).unwrap();
    assert_eq!(replay.truncated_tail(), Some(5));
    assert_eq!(replay.len(), 3);
    // Which agent's exchange was last depends on the recording's interleaving; one of
    // the two agents still replays in full, the other fails at its lost exchange.
    let m = run(&replay, &main_agent()).await;
    let e = run(&replay, &explore_agent()).await;
    let ok = [m.is_ok(), e.is_ok()];
    assert_eq!(ok.iter().filter(|x| **x).count(), 1, "{m:?} {e:?}");
    if let Ok(m) = m {
        assert_eq!(m, live[0]);
    }
    if let Ok(e) = e {
        assert_eq!(e, live[1]);
    }

    // A broken line that is not the last one is an error naming the line.
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"key\": ";
    std::fs::write(&path, lines.join("\n")).unwrap();
    let err = ReplayModel::open(&path).unwrap_err().to_string();
    assert!(err.contains("unreadable line 3"), "{err}");
}

#[tokio::test]
async fn duplicates_are_served_in_order_and_failures_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.jsonl");
    let rec = RecordingModel::create(&path, Arc::new(Scripted::default())).unwrap();
    let one = agent("main/explore#1", "explore", "dup");
    let two = agent("main/explore#2", "explore", "dup");
    let first = run(&rec, &one).await.unwrap().0;
    let second = run(&rec, &two).await.unwrap().0;
    assert_eq!(first[0].text(), "answer #1");
    assert_eq!(second[0].text(), "answer #2");
    let err = run(&rec, &agent("main", "main", "fail")).await.unwrap_err();
    assert!(matches!(err, ModelError::Api { status: 400, .. }));
    assert_eq!(rec.recorded(), 2);
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);

    let replay = ReplayModel::open(&path).unwrap();
    // The second agent asks first; it still gets the first recorded answer.
    assert_eq!(run(&replay, &two).await.unwrap().0, first);
    assert_eq!(run(&replay, &one).await.unwrap().0, second);
    let err = run(&replay, &one).await.unwrap_err().to_string();
    assert!(err.contains("already served"), "{err}");
    assert!(err.contains("main/explore#1"), "{err}");
    let err = run(&replay, &agent("main", "main", "fail"))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Replay(_)), "{err:?}");
}
