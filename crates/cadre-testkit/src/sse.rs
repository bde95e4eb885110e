//! Builders for the server-sent events of a streamed Messages API response.
//!
//! Each function returns one complete event (`event: NAME\ndata: JSON\n\n`), so tests can
//! assemble their own streams for [`Reply::raw_sse`](crate::Reply::raw_sse).

use serde_json::{json, Value};

use crate::reply::Usage;

/// One SSE event: `event: NAME\ndata: JSON\n\n`.
pub fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// `message_start` for an empty assistant message; `output_tokens` is 1 as the real API sends.
pub fn message_start(id: &str, model: &str, usage: &Usage) -> String {
    event(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {
                "id": id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                    "cache_read_input_tokens": usage.cache_read_input_tokens,
                },
            },
        }),
    )
}

/// A `ping` event.
pub fn ping() -> String {
    event("ping", &json!({"type": "ping"}))
}

/// `content_block_start` carrying `block` (already in its empty starting form).
pub fn content_block_start(index: usize, block: &Value) -> String {
    event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

/// A `content_block_delta` with a `text_delta`.
pub fn text_delta(index: usize, text: &str) -> String {
    delta(index, json!({"type": "text_delta", "text": text}))
}

/// A `content_block_delta` with an `input_json_delta`.
pub fn input_json_delta(index: usize, partial_json: &str) -> String {
    delta(
        index,
        json!({"type": "input_json_delta", "partial_json": partial_json}),
    )
}

/// A `content_block_delta` with a `thinking_delta`.
pub fn thinking_delta(index: usize, thinking: &str) -> String {
    delta(
        index,
        json!({"type": "thinking_delta", "thinking": thinking}),
    )
}

/// A `content_block_delta` with a `signature_delta`.
pub fn signature_delta(index: usize, signature: &str) -> String {
    delta(
        index,
        json!({"type": "signature_delta", "signature": signature}),
    )
}

fn delta(index: usize, delta: Value) -> String {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

/// `content_block_stop`.
pub fn content_block_stop(index: usize) -> String {
    event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}

/// `message_delta` with the stop reason and the final output token count.
pub fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
    event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens},
        }),
    )
}

/// `message_delta` whose usage lists `iterations` too (when the server compacted).
pub fn message_delta_with(stop_reason: &str, output_tokens: u64, iterations: &[Value]) -> String {
    let mut usage = json!({"output_tokens": output_tokens});
    if !iterations.is_empty() {
        usage["iterations"] = Value::Array(iterations.to_vec());
    }
    event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": usage,
        }),
    )
}

/// `message_stop`.
pub fn message_stop() -> String {
    event("message_stop", &json!({"type": "message_stop"}))
}

/// An in-stream `error` event.
pub fn error(kind: &str, message: &str) -> String {
    event(
        "error",
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

/// Splits `s` into up to `n` non-empty pieces at char boundaries (fewer if `s` has fewer chars).
pub fn split_pieces(s: &str, n: usize) -> Vec<&str> {
    let n = n.max(1).min(s.chars().count());
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    for i in 1..=n {
        let mut end = if i == n { s.len() } else { s.len() * i / n };
        while end < s.len() && !s.is_char_boundary(end) {
            end += 1;
        }
        if end > start {
            pieces.push(&s[start..end]);
            start = end;
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_pieces_rejoins_and_respects_char_boundaries() {
        for s in [
            "",
            "a",
            "ab",
            "hello world",
            "ééé😀x",
            r#"{"path":"a.txt"}"#,
        ] {
            let pieces = split_pieces(s, 3);
            assert_eq!(pieces.concat(), s);
            assert!(pieces.iter().all(|p| !p.is_empty()));
            assert!(pieces.len() <= 3);
        }
        assert_eq!(split_pieces("hello world", 3).len(), 3);
    }

    #[test]
    fn event_format() {
        assert_eq!(ping(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
}
