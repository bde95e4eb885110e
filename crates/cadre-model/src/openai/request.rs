//! The Chat Completions request a Messages-API [`Request`] becomes.

use super::*;

/// The Chat Completions body for `request`.
pub(super) fn chat_body(request: &Request, config: &OpenAiConfig) -> Value {
    let mut messages = Vec::new();
    let system = join_nonempty(request.system.iter().map(|b| &*b.text));
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        match message.role {
            Role::User => push_user(&mut messages, message),
            Role::Assistant => push_assistant(&mut messages, message),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let cap = if config.max_completion_tokens {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    body.insert(cap.into(), Value::from(request.max_tokens));
    if let Some(t) = request.temperature {
        // Through its shortest decimal form, so 0.7 is sent as 0.7, not 0.699999988….
        let t = t.to_string().parse::<f64>().unwrap_or(f64::from(t));
        body.insert("temperature".into(), Value::from(t));
    }
    if !request.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(request.stop_sequences));
    }
    // Structured outputs in this dialect; `effort` is the Messages API's own and is not sent.
    if let Some(format) = request
        .output_config
        .as_ref()
        .and_then(|c| c.format.as_ref())
    {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": format.schema}}),
        );
    }
    body.insert("stream".into(), Value::Bool(config.http.stream));
    if config.http.stream && config.stream_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// The non-empty texts joined by blank lines.
pub(super) fn join_nonempty<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    texts
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A user message: one `tool` message per tool result, in order, then the rest as a user message.
pub(super) fn push_user(out: &mut Vec<Value>, message: &Message) {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(r) => out.push(json!({
                "role": "tool",
                "tool_call_id": r.tool_use_id,
                "content": tool_result_text(r),
            })),
            ContentBlock::Text(t) => parts.push(json!({"type": "text", "text": t.text})),
            ContentBlock::Image(i) => {
                if let Some(url) = image_data_url(i) {
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        return;
    }
    let only_text = parts.iter().all(|p| p["type"] == "text");
    let content = if only_text {
        Value::String(join_nonempty(
            parts.iter().filter_map(|p| p["text"].as_str()),
        ))
    } else {
        Value::Array(parts)
    };
    out.push(json!({"role": "user", "content": content}));
}

/// An assistant message: its text as `content`, its tool uses as `tool_calls`.
pub(super) fn push_assistant(out: &mut Vec<Value>, message: &Message) {
    let text = join_nonempty(message.content.iter().filter_map(|b| match b {
        ContentBlock::Text(t) => Some(t.text.as_str()),
        _ => None,
    }));
    let calls: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse(t) => Some(json!({
                "id": t.id,
                "type": "function",
                "function": {"name": t.name, "arguments": t.input.to_string()},
            })),
            _ => None,
        })
        .collect();
    if text.is_empty() && calls.is_empty() {
        // Only thinking or unknown blocks: nothing these servers understand.
        return;
    }
    let mut m = Map::new();
    m.insert("role".into(), Value::String("assistant".into()));
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    m.insert("content".into(), content);
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    out.push(Value::Object(m));
}

pub(super) fn tool_result_text(r: &ToolResultBlock) -> String {
    join_nonempty(r.content.iter().filter_map(|b| match b {
        ContentBlock::Text(t) => Some(t.text.as_str()),
        _ => None,
    }))
}

/// A `data:` URL for a base64 image; `None` for any other source.
pub(super) fn image_data_url(image: &ImageBlock) -> Option<String> {
    let source = &image.source;
    if source.get("type").and_then(Value::as_str) != Some("base64") {
        return None;
    }
    let media = source.get("media_type").and_then(Value::as_str)?;
    let data = source.get("data").and_then(Value::as_str)?;
    Some(format!("data:{media};base64,{data}"))
}
