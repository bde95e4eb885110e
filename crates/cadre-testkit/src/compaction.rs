//! Server-side compaction as the Messages API does it, for tests.
//!
//! A request whose `context_management` carries a `compact_20260112` edit, and whose input
//! (estimated at four characters a token, from the newest `compaction` block on) reaches its
//! trigger, is answered with a signed `compaction` block before the scripted reply; with
//! `pause_after_compaction` the block alone, stop reason `compaction`. A request with
//! `compaction: {"type": "summarize"}` is answered with a block alone and takes no scripted
//! reply. Every compaction block a request sends back must carry the signature the mock
//! gave it, over its content unchanged.

use serde_json::{json, Value};

/// The beta header value of threshold compaction.
pub const COMPACT_BETA: &str = "compact-2026-01-12";
/// The beta header value of on-demand compaction.
pub const SUMMARIZE_BETA: &str = "compact-2026-09-04";
/// The trigger the API uses when an edit gives none.
pub const DEFAULT_TRIGGER: u64 = 150_000;
/// The smallest trigger the API accepts.
pub const MIN_TRIGGER: u64 = 50_000;
/// Output tokens the mock reports for writing a summary.
pub const SUMMARY_TOKENS: u64 = 120;

/// The signature the mock puts on a compaction block with this `content` (FNV-1a, so it is
/// the same in every run).
pub fn sign(content: &str) -> String {
    let hash = content.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("mocksig-{hash:016x}")
}

/// A compaction block with this summary, signed as the mock signs it.
pub fn block(content: &str) -> Value {
    json!({"type": "compaction", "content": content, "signature": sign(content)})
}

/// The compaction block the mock writes for the request `body`: a summary that names how
/// much it replaces and quotes the task (the first user message), as a real summary would,
/// so routes that match the first user message still find the conversation.
pub fn block_for(body: &Value) -> Value {
    let task: String = crate::server::first_user_text(body)
        .chars()
        .take(200)
        .collect();
    block(&format!(
        "Summary of the {} earlier messages (about {} tokens). The task: {task}",
        message_count(body),
        estimate_tokens(body)
    ))
}

/// What is counted as the request's input: the messages from the newest compaction block
/// on (the API ignores the blocks before it), the system prompt and the tools.
pub fn estimate_tokens(body: &Value) -> u64 {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut counted: Vec<Value> = Vec::new();
    for m in messages.iter().rev() {
        let blocks = m
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        match blocks.iter().rposition(is_compaction) {
            Some(j) => {
                counted.push(Value::Array(blocks[j..].to_vec()));
                break;
            }
            None => counted.push(m.clone()),
        }
    }
    let chars = serde_json::to_string(&counted).map_or(0, |s| s.len())
        + body.get("system").map_or(0, |s| s.to_string().len())
        + body.get("tools").map_or(0, |t| t.to_string().len());
    (chars / 4) as u64
}

fn is_compaction(b: &Value) -> bool {
    b.get("type").and_then(Value::as_str) == Some("compaction")
}

/// What the request asks of compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Nothing (no edit, or the input is below its trigger).
    Nothing,
    /// Compact before answering: the input is `tokens`, at or past the trigger.
    Threshold {
        /// The estimated input.
        tokens: u64,
        /// Answer with the block alone.
        pause: bool,
    },
    /// Answer with a compaction of the messages only.
    Summarize {
        /// The estimated input.
        tokens: u64,
    },
}

/// What `body` asks of compaction.
pub(crate) fn ask(body: &Value) -> Ask {
    if body.get("compaction").is_some_and(|c| !c.is_null()) {
        return Ask::Summarize {
            tokens: estimate_tokens(body),
        };
    }
    let edit = body
        .pointer("/context_management/edits")
        .and_then(Value::as_array)
        .and_then(|edits| {
            edits
                .iter()
                .find(|e| e.get("type").and_then(Value::as_str) == Some("compact_20260112"))
        });
    let Some(edit) = edit else {
        return Ask::Nothing;
    };
    let trigger = edit
        .pointer("/trigger/value")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TRIGGER);
    // Counted only when an edit asks: it costs a serialisation of the whole request.
    let tokens = estimate_tokens(body);
    if tokens < trigger {
        return Ask::Nothing;
    }
    Ask::Threshold {
        tokens,
        pause: edit.get("pause_after_compaction").and_then(Value::as_bool) == Some(true),
    }
}

/// How many messages a compaction of `body` summarises.
pub fn message_count(body: &Value) -> usize {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// The compaction rules of one request: the betas its fields need, triggers the API
/// accepts, never both kinds at once, and every compaction block sent back unaltered.
pub(crate) fn check(body: &Value, headers: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let betas: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"))
        .flat_map(|(_, v)| v.split(',').map(str::trim))
        .collect();
    let managed = body.get("context_management").is_some_and(|c| !c.is_null());
    let summarize = body.get("compaction").is_some_and(|c| !c.is_null());
    if managed && summarize {
        problems.push("compaction cannot be combined with context_management".to_owned());
    }
    if let Some(edits) = body
        .pointer("/context_management/edits")
        .and_then(Value::as_array)
    {
        for (i, e) in edits.iter().enumerate() {
            if e.get("type").and_then(Value::as_str) != Some("compact_20260112") {
                continue;
            }
            if !betas.contains(&COMPACT_BETA) {
                problems.push(format!(
                    "context_management.edits.{i}: compact_20260112 needs the anthropic-beta header {COMPACT_BETA}"
                ));
            }
            if let Some(trigger) = e.get("trigger") {
                if trigger.get("type").and_then(Value::as_str) != Some("input_tokens") {
                    problems.push(format!(
                        "context_management.edits.{i}.trigger.type: must be \"input_tokens\""
                    ));
                }
                match trigger.get("value").and_then(Value::as_u64) {
                    Some(v) if v >= MIN_TRIGGER => {}
                    other => problems.push(format!(
                        "context_management.edits.{i}.trigger.value: must be an integer of at least {MIN_TRIGGER}, got {other:?}"
                    )),
                }
            }
        }
    }
    if summarize {
        if body.pointer("/compaction/type").and_then(Value::as_str) != Some("summarize") {
            problems.push("compaction.type: must be \"summarize\"".to_owned());
        }
        if !betas.contains(&SUMMARIZE_BETA) {
            problems.push(format!(
                "compaction needs the anthropic-beta header {SUMMARIZE_BETA}"
            ));
        }
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, m) in messages.iter().enumerate() {
        let blocks = m
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (j, b) in blocks.iter().enumerate().filter(|(_, b)| is_compaction(b)) {
            if m.get("role").and_then(Value::as_str) != Some("assistant") {
                problems.push(format!(
                    "messages.{i}.content.{j}: a compaction block belongs in an assistant message"
                ));
            }
            let content = b.get("content").and_then(Value::as_str);
            let signature = b.get("signature").and_then(Value::as_str);
            match (content, signature) {
                (Some(c), Some(s)) if sign(c) == s => {}
                (Some(""), _) => problems.push(format!(
                    "messages.{i}.content.{j}: compaction content must not be empty"
                )),
                _ => problems.push(format!(
                    "messages.{i}.content.{j}: the compaction block was not sent back as received (its signature does not match)"
                )),
            }
        }
    }
    problems
}

/// Whether `messages[0]` may be an assistant message: it opens with a compaction block,
/// which stands in for everything before it.
pub(crate) fn opens_with_compaction(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("assistant")
        && message.pointer("/content/0").is_some_and(is_compaction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_content() {
        assert_eq!(sign("a"), sign("a"));
        assert_ne!(sign("a"), sign("b"));
        let b = block("x");
        assert_eq!(b["signature"], sign(b["content"].as_str().unwrap()));
    }

    #[test]
    fn an_altered_or_misplaced_block_and_missing_betas_are_violations() {
        let good = block("the summary");
        let mut altered = good.clone();
        altered["content"] = json!("the summary, edited");
        let body = |b: Value| {
            json!({"messages": [{"role": "assistant", "content": [b]},
                                {"role": "user", "content": "go on"}]})
        };
        assert!(check(&body(good.clone()), &[]).is_empty());
        let problems = check(&body(altered), &[]);
        assert!(
            problems[0].contains("not sent back as received"),
            "{problems:?}"
        );
        let misplaced = json!({"messages": [{"role": "user", "content": [good]}]});
        assert!(check(&misplaced, &[])[0].contains("assistant message"));
        let edit = json!({"messages": [], "context_management": {"edits": [
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1000}}]}});
        let problems = check(&edit, &[]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let both = json!({"messages": [], "compaction": {"type": "summarize"},
                          "context_management": {"edits": []}});
        let beta = [("anthropic-beta".to_owned(), SUMMARIZE_BETA.to_owned())];
        assert_eq!(check(&both, &beta).len(), 1);
    }

    #[test]
    fn input_is_counted_from_the_newest_compaction_block() {
        let big = "x".repeat(4000);
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": big}]},
            {"role": "assistant", "content": [block("s"), {"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "go on"}]},
        ]});
        assert!(estimate_tokens(&body) < 100, "{}", estimate_tokens(&body));
        let body =
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": big}]}]});
        assert!(estimate_tokens(&body) >= 1000);
    }
}
