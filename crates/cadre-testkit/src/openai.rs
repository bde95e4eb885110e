//! The OpenAI Chat Completions dialect of the mock server (`POST /v1/chat/completions`):
//! the same scripted [`Reply`](crate::Reply)s, rendered as Chat Completions chunks, and a
//! checker for the request rules OpenAI-compatible servers enforce.

use crate::reply::Block;
use crate::sse::split_pieces;
use serde_json::{json, Value};

/// One `data:` line of a streamed completion.
pub fn chunk(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// The stream terminator.
pub fn done() -> String {
    "data: [DONE]\n\n".into()
}

/// The `finish_reason` for a Messages-API stop reason.
pub fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
}

fn delta(id: &str, model: &str, delta: Value, finish: Option<&str>) -> String {
    chunk(&json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

/// The usage object of a completion.
pub fn usage_json(input: u64, output: u64, cached: u64) -> Value {
    json!({
        "prompt_tokens": input + cached,
        "completion_tokens": output,
        "total_tokens": input + cached + output,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// The streamed chunks of an assistant message made of `blocks`.
pub fn stream_message(
    id: &str,
    model: &str,
    blocks: &[Block],
    stop_reason: &str,
    usage: Value,
) -> Vec<String> {
    let mut out = vec![delta(
        id,
        model,
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    let mut call_index = 0;
    for block in blocks {
        match block {
            Block::Text(text) => {
                for piece in split_pieces(text, 3) {
                    out.push(delta(id, model, json!({"content": piece}), None));
                }
            }
            Block::Thinking { thinking, .. } => {
                for piece in split_pieces(thinking, 2) {
                    out.push(delta(id, model, json!({"reasoning_content": piece}), None));
                }
            }
            Block::ToolUse {
                id: call_id,
                name,
                input,
            } => {
                out.push(delta(
                    id,
                    model,
                    json!({"tool_calls": [{"index": call_index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
                let args = input.to_string();
                for piece in split_pieces(&args, 3) {
                    out.push(delta(
                        id,
                        model,
                        json!({"tool_calls": [{"index": call_index, "function": {"arguments": piece}}]}),
                        None,
                    ));
                }
                call_index += 1;
            }
            // Nothing in Chat Completions carries these.
            Block::RedactedThinking(_) | Block::Raw(_) | Block::Compaction(_) => {}
        }
    }
    out.push(delta(
        id,
        model,
        json!({}),
        Some(finish_reason(stop_reason)),
    ));
    out.push(chunk(&json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": usage})));
    out.push(done());
    out
}

/// The whole (non-streamed) completion of an assistant message made of `blocks`.
pub fn message(id: &str, model: &str, blocks: &[Block], stop_reason: &str, usage: Value) -> Value {
    let text: String = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<Value> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}})),
            _ => None,
        })
        .collect();
    let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish_reason(stop_reason)}],
        "usage": usage,
    })
}

/// An OpenAI-style error body.
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "code": null}})
}

/// Problems an OpenAI-compatible server would reject the request for.
pub fn check_chat_request(body: &Value, _headers: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    if body.get("model").and_then(Value::as_str).is_none() {
        problems.push("`model` must be a string".to_owned());
    }
    let Some(messages) = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
    else {
        problems.push("`messages` must be a non-empty array".to_owned());
        return problems;
    };
    // Tool calls still waiting for their `tool` message.
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                match open.iter().position(|o| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => problems.push(format!("messages[{i}]: tool message for unknown or already answered tool_call_id {id:?}")),
                }
                continue;
            }
            "system" | "user" | "assistant" => {}
            other => problems.push(format!("messages[{i}]: unknown role {other:?}")),
        }
        if !open.is_empty() {
            problems.push(format!(
                "messages[{i}]: tool calls {open:?} were not answered before this {role} message"
            ));
            open.clear();
        }
        if role == "assistant" {
            for call in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let id = call.get("id").and_then(Value::as_str).unwrap_or("");
                if id.is_empty() {
                    problems.push(format!("messages[{i}]: a tool call has no id"));
                }
                let args = call.pointer("/function/arguments").and_then(Value::as_str);
                if args.is_none_or(|a| serde_json::from_str::<Value>(a).is_err()) {
                    problems.push(format!(
                        "messages[{i}]: tool call {id:?} arguments must be a JSON string"
                    ));
                }
                open.push(id.to_owned());
            }
        }
    }
    if !open.is_empty() {
        problems.push(format!("tool calls {open:?} were never answered"));
    }
    for (i, t) in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = t
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if t.get("type").and_then(Value::as_str) != Some("function") || !valid {
            problems.push(format!("tools[{i}]: expected {{type: function, function: {{name}}}} with a valid name, got {t}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checker_wants_every_tool_call_answered() {
        let good = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}
        ]});
        assert!(check_chat_request(&good, &[]).is_empty());
        let mut bad = good.clone();
        bad["messages"][2]["tool_call_id"] = json!("c9");
        assert!(!check_chat_request(&bad, &[]).is_empty());
    }
}
