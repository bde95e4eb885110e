use super::{
    assert_api_error, assert_key_hidden, assert_refused, assert_unauthorized_redacted,
    assert_waited_retry_after, awkward_tool_input, fast_retry, refused_uri, retries, send,
    text_deltas, tool_starts, LocalServer,
};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use cadre_model::{
    CacheControl, ContentBlock, Message, ModelEvent, OpenAiConfig, OpenAiModel, Request,
    RetryPolicy, Role, StopReason, SystemBlock, ToolDefinition, Usage,
};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const KEY: &str = "sk-openai-integration-SECRET-0077";

/// One scripted answer of the mock.
enum Scripted {
    /// An SSE stream: each item is sent as `data: {item}\n\n`, in 7-byte pieces.
    Sse(Vec<String>),
    /// One JSON body.
    Json(Value),
    /// An HTTP error with a JSON body and an optional `retry-after` (seconds).
    Error(u16, Value, Option<u64>),
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Scripted>>,
    captured: Mutex<Vec<(HeaderMap, Value)>>,
}

/// A Chat Completions server on 127.0.0.1 that answers from a script.
struct ChatMock {
    uri: String,
    shared: Arc<Shared>,
    _server: LocalServer,
}

impl ChatMock {
    async fn start(script: Vec<Scripted>) -> Self {
        let shared = Arc::new(Shared::default());
        *shared.script.lock().unwrap() = script.into();
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .with_state(shared.clone());
        let server = LocalServer::start(app).await;
        Self {
            uri: format!("http://{}/v1", server.addr),
            shared,
            _server: server,
        }
    }

    fn requests(&self) -> Vec<Value> {
        let captured = self.shared.captured.lock().unwrap();
        captured.iter().map(|(_, body)| body.clone()).collect()
    }

    fn header(&self, i: usize, name: &str) -> Option<String> {
        let captured = self.shared.captured.lock().unwrap();
        captured[i]
            .0
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    fn assert_script_used(&self) {
        assert!(self.shared.script.lock().unwrap().is_empty());
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.captured.lock().unwrap().push((headers, json));
    let next = shared.script.lock().unwrap().pop_front();
    let builder = axum::response::Response::builder();
    match next {
        Some(Scripted::Sse(events)) => {
            let text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
            let pieces: Vec<Result<Bytes, Infallible>> = text
                .as_bytes()
                .chunks(7)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            builder
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(futures::stream::iter(pieces)))
                .unwrap()
        }
        Some(Scripted::Json(v)) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(v.to_string()))
            .unwrap(),
        Some(Scripted::Error(status, v, retry_after)) => {
            let mut b = builder
                .status(StatusCode::from_u16(status).unwrap())
                .header(header::CONTENT_TYPE, "application/json");
            if let Some(secs) = retry_after {
                b = b.header("retry-after", secs.to_string());
            }
            b.body(Body::from(v.to_string())).unwrap()
        }
        None => builder
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from(
                json!({"error": {"message": "the mock has no reply left", "type": "mock"}})
                    .to_string(),
            ))
            .unwrap(),
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    })
    .to_string()
}

fn usage_chunk(prompt: u64, completion: u64, cached: u64) -> String {
    json!({
        "id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1,
        "model": "gpt-test", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached}}
    })
    .to_string()
}

fn done() -> String {
    "[DONE]".into()
}

/// A streamed text answer in 5-character pieces.
fn text_reply(text: &str, finish: &str) -> Scripted {
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(5) {
        let piece: String = piece.iter().collect();
        events.push(chunk(json!({"content": piece}), None));
    }
    events.push(chunk(json!({}), Some(finish)));
    events.push(usage_chunk(20, 5, 0));
    events.push(done());
    Scripted::Sse(events)
}

fn config(uri: &str) -> OpenAiConfig {
    OpenAiConfig::new()
        .with_base_url(uri)
        .with_retry(fast_retry())
}

fn model(mock: &ChatMock) -> OpenAiModel {
    OpenAiModel::new(config(&mock.uri)).unwrap()
}

fn request(text: &str) -> Request {
    Request::new("gpt-test", 512, vec![Message::user_text(text)])
}

#[tokio::test]
async fn streamed_text_and_usage() {
    let text = "Hello from a Chat Completions stream, in many small pieces.";
    let mut events = match text_reply(text, "stop") {
        Scripted::Sse(e) => e,
        _ => unreachable!(),
    };
    // The usage chunk of this reply reports cached prompt tokens.
    let n = events.len();
    events[n - 2] = usage_chunk(1000, 42, 800);
    let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
    let (out, seen) = send(&model(&mock), request("hi")).await;
    let resp = out.unwrap();
    assert_eq!(resp.text(), text);
    assert_eq!(resp.id, "chatcmpl-7");
    assert_eq!(resp.model, "gpt-test");
    assert_eq!(resp.role, Role::Assistant);
    assert_eq!(resp.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 200,
            output_tokens: 42,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 800,
            ..Default::default()
        }
    );
    assert_eq!(resp.usage.total_input(), 1000);
    let deltas = text_deltas(&seen);
    assert!(deltas.len() > 5, "{deltas:?}");
    assert_eq!(deltas.concat(), text);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0]["stream"], true);
    assert_eq!(reqs[0]["stream_options"], json!({"include_usage": true}));
    assert_eq!(mock.header(0, "authorization"), None);
    assert_eq!(
        mock.header(0, "content-type").as_deref(),
        Some("application/json")
    );
    mock.assert_script_used();
}

#[tokio::test]
async fn streamed_tool_calls_split_across_chunks() {
    let first = awkward_tool_input();
    let second = json!({"path": "src/lib.rs"});
    let mut events = vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        chunk(json!({"content": "Let me "}), None),
        chunk(json!({"content": "look."}), None),
        // id and name only in the first fragment of each call.
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                                   "function": {"name": "bash", "arguments": ""}}]}),
            None,
        ),
    ];
    // Three-character pieces split keys, strings, escapes and numbers mid-token.
    let chars: Vec<char> = first.to_string().chars().collect();
    for piece in chars.chunks(3) {
        let piece: String = piece.iter().collect();
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
            None,
        ));
    }
    // The second call comes with an empty id, as some local servers send it.
    events.push(chunk(
        json!({"tool_calls": [{"index": 1, "id": "", "type": "function",
                               "function": {"name": "read_file", "arguments": "{\"pa"}}]}),
        None,
    ));
    events.push(chunk(
        json!({"tool_calls": [{"index": 1, "function": {"arguments": "th\": \"src/lib.rs\"}"}}]}),
        None,
    ));
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push(usage_chunk(50, 30, 0));
    events.push(done());
    let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
    let (out, seen) = send(&model(&mock), request("find main")).await;
    let resp = out.unwrap();
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(resp.text(), "Let me look.");
    let uses: Vec<_> = resp.tool_uses().collect();
    assert_eq!(uses.len(), 2);
    assert_eq!(
        (uses[0].id.as_str(), uses[0].name.as_str()),
        ("call_abc", "bash")
    );
    assert_eq!(uses[0].input, first);
    assert!(uses[1].id.starts_with("call_"), "{}", uses[1].id);
    assert_ne!(uses[1].id, uses[0].id);
    assert_eq!(uses[1].name, "read_file");
    assert_eq!(uses[1].input, second);
    assert_eq!(
        tool_starts(&seen),
        vec![
            ModelEvent::ToolUseStart {
                id: "call_abc".into(),
                name: "bash".into()
            },
            ModelEvent::ToolUseStart {
                id: uses[1].id.clone(),
                name: "read_file".into()
            },
        ]
    );
    assert_eq!(resp.usage.input_tokens, 50);
    assert_eq!(resp.usage.output_tokens, 30);
    mock.assert_script_used();
}

#[tokio::test]
async fn invalid_tool_arguments_are_kept_for_an_error_result() {
    let events = vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "edit_file", "arguments": "{\"path\": "}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ];
    let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
    let resp = send(&model(&mock), request("edit")).await.0.unwrap();
    let t = resp.tool_uses().next().unwrap();
    let bad = t.invalid_input.as_ref().unwrap();
    assert_eq!(bad.text, "{\"path\": ");
    assert!(bad.error.contains("EOF"), "{}", bad.error);
    assert_eq!(t.input, json!({}));
}

#[tokio::test]
async fn each_finish_reason() {
    let cases = [
        ("stop", StopReason::EndTurn),
        ("tool_calls", StopReason::ToolUse),
        ("length", StopReason::MaxTokens),
        ("content_filter", StopReason::Refusal),
        ("function_call", StopReason::ToolUse),
        ("something_new", StopReason::Other("something_new".into())),
    ];
    let mock = ChatMock::start(cases.iter().map(|(r, _)| text_reply("answer", r)).collect()).await;
    let m = model(&mock);
    for (reason, expected) in cases {
        let resp = send(&m, request("hi")).await.0.unwrap();
        assert_eq!(resp.stop_reason, Some(expected), "{reason}");
        assert_eq!(resp.text(), "answer");
    }
    mock.assert_script_used();
}

#[tokio::test]
async fn reasoning_is_shown_not_kept() {
    let events = vec![
        chunk(json!({"reasoning_content": "Thinking it over."}), None),
        chunk(json!({"reasoning": " Still."}), None),
        chunk(json!({"content": "Done."}), None),
        chunk(json!({}), Some("stop")),
        done(),
    ];
    let mock = ChatMock::start(vec![Scripted::Sse(events)]).await;
    let (out, seen) = send(&model(&mock), request("hi")).await;
    let resp = out.unwrap();
    assert_eq!(resp.content, vec![ContentBlock::text("Done.")]);
    assert_eq!(
        seen[..2],
        [
            ModelEvent::ThinkingDelta("Thinking it over.".into()),
            ModelEvent::ThinkingDelta(" Still.".into())
        ]
    );
    // No usage chunk: the counts stay zero.
    assert_eq!(resp.usage, Usage::default());
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let mock = ChatMock::start(vec![
        Scripted::Error(
            429,
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
            Some(1),
        ),
        text_reply("after the wait", "stop"),
    ])
    .await;
    let start = Instant::now();
    let (out, seen) = send(&model(&mock), request("hi")).await;
    assert_eq!(out.unwrap().text(), "after the wait");
    let reason = assert_waited_retry_after(start, &seen);
    assert!(reason.contains("Rate limit reached"), "{reason}");
    assert_eq!(mock.requests().len(), 2);
    mock.assert_script_used();
}

#[tokio::test]
async fn server_error_and_cut_stream_are_retried() {
    let cut = vec![chunk(json!({"content": "cut sh"}), None)];
    let mock = ChatMock::start(vec![
        Scripted::Error(503, json!({"error": {"message": "busy"}}), None),
        Scripted::Sse(cut),
        text_reply("recovered", "stop"),
    ])
    .await;
    let (out, seen) = send(&model(&mock), request("hi")).await;
    assert_eq!(out.unwrap().text(), "recovered");
    let r = retries(&seen);
    assert_eq!(r.len(), 2);
    assert!(r[1].2.contains("finish_reason"), "{}", r[1].2);
    mock.assert_script_used();
}

#[tokio::test]
async fn bad_request_fails_at_once_with_the_servers_message() {
    let msg = "The model `gpt-nope` does not exist or you do not have access to it.";
    let mock = ChatMock::start(vec![
        Scripted::Error(
            400,
            json!({"error": {"message": msg, "type": "invalid_request_error", "code": "model_not_found"}}),
            None,
        ),
        text_reply("must not be reached", "stop"),
    ])
    .await;
    let (out, seen) = send(&model(&mock), request("hi")).await;
    assert_api_error(&out.unwrap_err(), 400, "invalid_request_error", msg);
    assert!(retries(&seen).is_empty());
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn translated_request_field_by_field() {
    let mock = ChatMock::start(vec![text_reply("ok", "stop")]).await;
    let m = OpenAiModel::new(config(&format!("{}/", mock.uri)).with_api_key(KEY)).unwrap();
    let mut req = Request::new(
        "qwen3:8b",
        2048,
        vec![
            Message::user_text("List the files, then read the readme."),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking(
                        serde_json::from_value(json!({"thinking": "plan", "signature": "sig"}))
                            .unwrap(),
                    ),
                    ContentBlock::text("I will look."),
                    ContentBlock::tool_use("call_1", "list_files", json!({"path": "."})),
                    ContentBlock::tool_use("call_2", "read_file", json!({"path": "README.md"})),
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::tool_result("call_1", "README.md\nsrc/", false),
                    ContentBlock::tool_result("call_2", "no such file", true),
                    ContentBlock::text("Keep going."),
                ],
            ),
        ],
    );
    req.system = vec![
        SystemBlock::text("You are a careful engineer."),
        SystemBlock::text("Answer briefly."),
    ];
    req.tools = vec![
        ToolDefinition {
            name: "list_files".into(),
            description: "Lists files.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            cache_control: None,
        },
        ToolDefinition {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            cache_control: Some(CacheControl::ephemeral()),
        },
    ]
    .into();
    req.temperature = Some(0.2);
    req.stop_sequences = vec!["</done>".into()];
    req.apply_prompt_caching();
    send(&m, req).await.0.unwrap();

    assert_eq!(
        mock.header(0, "authorization"),
        Some(format!("Bearer {KEY}"))
    );
    let body = &mock.requests()[0];
    assert_eq!(body["model"], "qwen3:8b");
    assert_eq!(body["max_tokens"], 2048);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["stop"], json!(["</done>"]));
    assert_eq!(body["stream"], true);
    assert!(body.get("cache_control").is_none());
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 6);
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(
        msgs[0]["content"],
        "You are a careful engineer.\n\nAnswer briefly."
    );
    assert_eq!(msgs[1]["role"], "user");
    assert_eq!(msgs[1]["content"], "List the files, then read the readme.");
    assert_eq!(msgs[2]["role"], "assistant");
    assert_eq!(msgs[2]["content"], "I will look.");
    let calls = msgs[2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["id"], "call_1");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "list_files");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "."}));
    assert_eq!(calls[1]["id"], "call_2");
    assert_eq!(calls[1]["function"]["name"], "read_file");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "call_1");
    assert_eq!(msgs[3]["content"], "README.md\nsrc/");
    assert_eq!(msgs[4]["role"], "tool");
    assert_eq!(msgs[4]["tool_call_id"], "call_2");
    assert_eq!(msgs[4]["content"], "no such file");
    assert_eq!(msgs[5]["role"], "user");
    assert_eq!(msgs[5]["content"], "Keep going.");
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "list_files");
    assert_eq!(tools[0]["function"]["description"], "Lists files.");
    assert_eq!(
        tools[1]["function"]["parameters"],
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    );
    assert!(tools[1].get("cache_control").is_none());
    assert!(!body.to_string().contains("cache_control"));
    assert!(!body.to_string().contains("signature"));
}

#[tokio::test]
async fn non_streaming_completion() {
    let mock = ChatMock::start(vec![Scripted::Json(json!({
        "id": "chatcmpl-9", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Reading.",
            "tool_calls": [{"id": "call_9", "type": "function",
                            "function": {"name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}}]
        }}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33}
    }))])
    .await;
    let m = OpenAiModel::new(
        OpenAiConfig::new()
            .with_base_url(&mock.uri)
            .with_stream(false)
            .with_max_completion_tokens(true),
    )
    .unwrap();
    let (out, seen) = send(&m, request("read it")).await;
    let resp = out.unwrap();
    assert_eq!(resp.text(), "Reading.");
    assert_eq!(resp.stop_reason, Some(StopReason::ToolUse));
    let uses: Vec<_> = resp.tool_uses().collect();
    assert_eq!(uses[0].id, "call_9");
    assert_eq!(uses[0].input, json!({"path": "src/lib.rs"}));
    assert_eq!(resp.usage.input_tokens, 11);
    assert_eq!(resp.usage.output_tokens, 22);
    assert!(seen.is_empty());
    let body = &mock.requests()[0];
    assert_eq!(body["stream"], false);
    assert_eq!(body["max_completion_tokens"], 512);
    assert!(body.get("max_tokens").is_none());
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn echoed_key_is_redacted_and_unauthorized_not_retried() {
    let mock = ChatMock::start(vec![
        Scripted::Error(
            401,
            json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "invalid_request_error", "code": "invalid_api_key"}}),
            None,
        ),
        text_reply("must not be reached", "stop"),
    ])
    .await;
    let config = config(&mock.uri).with_api_key(KEY);
    assert!(!format!("{config:?}").contains(KEY));
    let m = OpenAiModel::new(config).unwrap();
    assert!(!format!("{m:?}").contains(KEY));
    let (out, seen) = send(&m, request("hi")).await;
    assert_unauthorized_redacted(&out.unwrap_err(), &seen, KEY);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn unreachable_server_is_a_connect_error() {
    let uri = format!("{}/v1", refused_uri());
    let config = config(&uri).with_api_key(KEY);
    let m = OpenAiModel::new(config.with_retry(RetryPolicy::none())).unwrap();
    let err = send(&m, request("hi")).await.0.unwrap_err();
    assert_refused(&err, &uri);
    assert!(err.is_transient());
    assert_key_hidden(&err, KEY);
}
