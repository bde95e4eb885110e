//! Unit tests of the OpenAI-compatible provider.

use super::*;
use crate::{CacheControl, SystemBlock, ToolDefinition};
use serde_json::json;
use std::sync::Mutex;

const KEY: &str = "sk-openai-test-SECRET-456";

fn assemble(chunks: &[Value], done: bool) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
    let seen = Mutex::new(Vec::new());
    let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
    let ids = AtomicU64::new(1);
    let mut a = ChunkAssembler::new("m");
    for c in chunks {
        a.push(&c.to_string(), &ids, &sink).unwrap();
    }
    if done {
        a.push("[DONE]", &ids, &sink).unwrap();
    }
    let out = a.finish(&ids, &sink);
    (out, seen.into_inner().unwrap())
}

fn delta(d: Value) -> Value {
    json!({"id": "chatcmpl-1", "model": "llama3", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

#[test]
fn info_urls() {
    let urls = |base: &str| {
        let m = OpenAiModel::new(OpenAiConfig::new().with_base_url(base)).unwrap();
        (m.models_url.to_string(), m.props_url.map(|u| u.to_string()))
    };
    for (base, models, props) in [
        (
            "http://h:8080/v1",
            "http://h:8080/v1/models",
            "http://h:8080/props",
        ),
        (
            "http://h:8080/v1/",
            "http://h:8080/v1/models",
            "http://h:8080/props",
        ),
        (
            "http://h:8080",
            "http://h:8080/models",
            "http://h:8080/props",
        ),
        (
            "http://u:p@h/llm/v1",
            "http://u:p@h/llm/v1/models",
            "http://u:p@h/llm/props",
        ),
        ("http://v1", "http://v1/models", "http://v1/props"),
    ] {
        assert_eq!(
            urls(base),
            (models.to_owned(), Some(props.to_owned())),
            "{base}"
        );
    }
}

#[test]
fn windows_in_models_and_props() {
    let list = |entries: Value| json!({"object": "list", "data": entries});
    let vllm = list(json!([
        {"id": "a", "max_model_len": 1000},
        {"id": "b", "max_model_len": 2000}
    ]));
    assert_eq!(window_in_models(&vllm, "b"), Some(2000));
    assert_eq!(window_in_models(&vllm, "c"), None);
    let one = list(json!([{"id": "x", "context_length": 3000}]));
    assert_eq!(window_in_models(&one, "other"), Some(3000));
    let lm = list(json!([{"id": "x", "max_context_length": 4000}]));
    assert_eq!(window_in_models(&lm, "x"), Some(4000));
    for none in [
        list(json!([{"id": "x"}])),
        list(json!([{"id": "x", "max_model_len": 0}])),
        list(json!([{"id": "x", "max_model_len": "big"}])),
        list(json!([{"id": "x", "max_model_len": -1}])),
        list(json!([])),
        json!({"data": "nope"}),
        json!([1, 2]),
    ] {
        assert_eq!(window_in_models(&none, "x"), None, "{none}");
    }
    let props = json!({"default_generation_settings": {"n_ctx": 8192}, "n_ctx": 1});
    assert_eq!(window_in_props(&props), Some(8192));
    assert_eq!(window_in_props(&json!({"n_ctx": 4096})), Some(4096));
    assert_eq!(
        window_in_props(&json!({"default_generation_settings": {}})),
        None
    );
    assert_eq!(window_in_props(&json!("n_ctx")), None);
}

#[test]
fn defaults_and_debug_redaction() {
    let c = OpenAiConfig::new();
    assert_eq!(c.base_url, "https://api.openai.com/v1");
    assert!(c.http.stream && c.stream_usage && !c.max_completion_tokens);
    assert!(!c.has_api_key());
    assert!(format!("{c:?}").contains("api_key: None"));
    let c = c
        .with_api_key(KEY)
        .with_base_url("http://localhost:11434/v1");
    let shown = format!("{c:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("api_key: Some(<redacted>)"), "{shown}");
    let m = OpenAiModel::new(c).unwrap();
    let shown = format!("{m:?} {:#?}", m.transport.client);
    assert!(!shown.contains(KEY), "{shown}");
    assert_eq!(
        m.transport.endpoint.url.as_str(),
        "http://localhost:11434/v1/chat/completions"
    );
    assert!(!OpenAiConfig::new().with_api_key("  ").has_api_key());
}

#[test]
fn bad_setup_is_a_config_error() {
    let err = OpenAiModel::new(OpenAiConfig::new().with_base_url("nope")).unwrap_err();
    assert!(matches!(err, ModelError::BaseUrl { .. }) && err.is_config());
    assert!(std::error::Error::source(&err).is_some());
    let err = OpenAiModel::new(OpenAiConfig::new().with_api_key("bad\nkey-12345678")).unwrap_err();
    assert!(!err.to_string().contains("key-12345678"));
}

#[test]
fn translates_a_conversation() {
    let mut req = Request::new(
        "gpt-x",
        100,
        vec![
            Message::user_text("hi"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking(crate::ThinkingBlock {
                        thinking: "hmm".into(),
                        signature: "s".into(),
                        extra: Map::new(),
                    }),
                    ContentBlock::text("Looking."),
                    ContentBlock::tool_use("a", "bash", json!({"command": "ls"})),
                    ContentBlock::tool_use("b", "grep", json!({})),
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::tool_result("a", "out", false),
                    ContentBlock::tool_result("b", "bad", true),
                    ContentBlock::text("continue"),
                    ContentBlock::Image(ImageBlock {
                        source: json!({"type": "base64", "media_type": "image/png", "data": "QUJD"}),
                        cache_control: None,
                        extra: Map::new(),
                    }),
                    ContentBlock::Image(ImageBlock {
                        source: json!({"type": "url", "url": "https://x/y.png"}),
                        cache_control: None,
                        extra: Map::new(),
                    }),
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Unknown(json!({"type": "x"}))],
            ),
        ],
    );
    req.system = vec![SystemBlock::text("one"), SystemBlock::text("two")];
    req.tools = vec![ToolDefinition {
        name: "bash".into(),
        description: "runs".into(),
        input_schema: json!({"type": "object"}),
        cache_control: Some(CacheControl::ephemeral()),
    }]
    .into();
    req.temperature = Some(0.5);
    req.stop_sequences = vec!["END".into()];
    req.apply_prompt_caching();
    let body = chat_body(&req, &OpenAiConfig::new().with_max_completion_tokens(true));
    assert_eq!(
        body,
        json!({
            "model": "gpt-x",
            "messages": [
                {"role": "system", "content": "one\n\ntwo"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "b", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "a", "content": "out"},
                {"role": "tool", "tool_call_id": "b", "content": "bad"},
                {"role": "user", "content": [
                    {"type": "text", "text": "continue"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}
                ]}
            ],
            "tools": [{"type": "function", "function": {"name": "bash", "description": "runs", "parameters": {"type": "object"}}}],
            "max_completion_tokens": 100,
            "temperature": 0.5,
            "stop": ["END"],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    let body = chat_body(&req, &OpenAiConfig::new().with_stream(false));
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert!(body.get("response_format").is_none());

    // An answer schema becomes `response_format`; effort is not this dialect's.
    req.output_config = Some(crate::OutputConfig {
        effort: Some(crate::Effort::High),
        format: Some(crate::OutputFormat::json_schema(&json!({"type": "object"}))),
    });
    let body = chat_body(&req, &OpenAiConfig::new());
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "answer",
            "schema": {"type": "object", "properties": {}, "additionalProperties": false}}})
    );
    assert!(body.get("reasoning_effort").is_none() && body.get("output_config").is_none());
}

#[test]
fn streamed_tool_calls_and_usage() {
    let (out, events) = assemble(
        &[
            delta(json!({"role": "assistant", "content": ""})),
            delta(json!({"reasoning_content": "think"})),
            delta(json!({"content": "Hi"})),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"name": "bash", "arguments": ""}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"com"}}]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "mand\": 1}"}}]})),
            delta(
                json!({"tool_calls": [{"index": 1, "id": "x", "function": {"name": "grep", "arguments": "{bad"}}]}),
            ),
            finish("stop"),
            json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 7,
                   "prompt_tokens_details": {"cached_tokens": 60}}}),
        ],
        true,
    );
    let r = out.unwrap();
    assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(r.text(), "Hi");
    assert_eq!(r.model, "llama3");
    let uses: Vec<_> = r.tool_uses().collect();
    assert_eq!(uses[0].id, "call_1");
    assert_eq!(uses[0].input, json!({"command": 1}));
    let bad = uses[1].invalid_input.as_ref().unwrap();
    assert!(bad.text.starts_with("{bad"), "{}", bad.text);
    assert_eq!(uses[1].input, json!({}));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 7,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 60,
            ..Default::default()
        }
    );
    assert_eq!(r.usage.total_input(), 100);
    assert_eq!(
        events,
        vec![
            ModelEvent::ThinkingDelta("think".into()),
            ModelEvent::TextDelta("Hi".into()),
            ModelEvent::ToolUseStart {
                id: "call_1".into(),
                name: "bash".into()
            },
            ModelEvent::ToolUseStart {
                id: "x".into(),
                name: "grep".into()
            },
        ]
    );
}

#[test]
fn stream_endings() {
    let (out, _) = assemble(&[delta(json!({"content": "cut"}))], false);
    assert!(matches!(out, Err(ModelError::Protocol(_))));
    // A finish_reason without [DONE] is a complete answer.
    let (out, _) = assemble(&[delta(json!({"content": "a"})), finish("length")], false);
    assert_eq!(out.unwrap().stop_reason, Some(StopReason::MaxTokens));
    // [DONE] without a finish_reason: nothing to say.
    let (out, _) = assemble(&[delta(json!({"content": "a"}))], true);
    assert_eq!(out.unwrap().stop_reason, None);
    let ids = AtomicU64::new(1);
    let mut a = ChunkAssembler::new("m");
    let err = a
        .push(
            r#"{"error": {"message": "boom", "type": "server_error"}}"#,
            &ids,
            &crate::ignore_events,
        )
        .unwrap_err();
    assert!(matches!(err, ModelError::StreamError { .. }) && err.is_transient());
    let err = a.push("{nope", &ids, &crate::ignore_events).unwrap_err();
    assert!(matches!(err, ModelError::Malformed { .. }) && err.is_transient());
}

#[test]
fn finish_reasons() {
    for (reason, calls, expected) in [
        ("stop", false, StopReason::EndTurn),
        ("stop", true, StopReason::ToolUse),
        ("tool_calls", true, StopReason::ToolUse),
        ("function_call", true, StopReason::ToolUse),
        ("length", false, StopReason::MaxTokens),
        ("content_filter", false, StopReason::Refusal),
        ("refusal", false, StopReason::Refusal),
        ("eos", false, StopReason::Other("eos".into())),
    ] {
        assert_eq!(
            map_finish_reason(Some(reason), calls, false),
            Some(expected)
        );
    }
    assert_eq!(map_finish_reason(None, false, false), None);
}

#[test]
fn non_streamed_completion() {
    let body = json!({
        "id": "chatcmpl-9", "model": "gpt-x",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                {"id": "", "type": "function", "function": {"name": "ls", "arguments": {"x": 1}}}
            ]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    });
    let ids = AtomicU64::new(7);
    let r = decode_completion(body.to_string().as_bytes(), "m", &ids).unwrap();
    assert_eq!(r.id, "chatcmpl-9");
    assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
    let uses: Vec<_> = r.tool_uses().collect();
    assert_eq!(uses[0].input, json!({"path": "a"}));
    assert_eq!(uses[1].id, "call_7");
    assert_eq!(uses[1].input, json!({"x": 1}));
    assert_eq!(r.usage.input_tokens, 5);
    assert_eq!(r.usage.output_tokens, 6);
    let err = decode_completion(b"{\"choices\": []}", "m", &ids).unwrap_err();
    assert!(matches!(err, ModelError::Protocol(_)));
}

#[test]
fn error_bodies() {
    let (kind, msg) = parse_error_body(
        StatusCode::BAD_REQUEST,
        r#"{"error": {"message": "bad model", "type": "invalid_request_error", "code": null}}"#,
    );
    assert_eq!(
        (kind.as_str(), msg.as_str()),
        ("invalid_request_error", "bad model")
    );
    let (kind, msg) = parse_error_body(
        StatusCode::NOT_FOUND,
        r#"{"error": {"message": "model not found", "code": 404}}"#,
    );
    assert_eq!((kind.as_str(), msg.as_str()), ("404", "model not found"));
    let (kind, msg) = parse_error_body(StatusCode::BAD_REQUEST, r#"{"error": "plain"}"#);
    assert_eq!((kind.as_str(), msg.as_str()), ("Bad Request", "plain"));
    let (kind, msg) = parse_error_body(
        StatusCode::BAD_REQUEST,
        r#"{"object": "error", "message": "vllm says", "type": "BadRequestError", "code": 400}"#,
    );
    assert_eq!(
        (kind.as_str(), msg.as_str()),
        ("BadRequestError", "vllm says")
    );
    let (kind, msg) = parse_error_body(StatusCode::BAD_GATEWAY, "");
    assert_eq!(
        (kind.as_str(), msg.as_str()),
        ("Bad Gateway", "Bad Gateway")
    );
}
