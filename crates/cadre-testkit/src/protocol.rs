//! The protocol checker: the request rules the real Messages API enforces with a 400.
//!
//! The mock runs it on every request so a client bug fails the test here instead of in
//! production.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// The most `cache_control` breakpoints the API accepts in one request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// Every protocol problem of one request (empty when it is well-formed).
///
/// `headers` are (name, value) pairs; names are compared case-insensitively.
pub fn check_request(body: &Value, headers: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    check_headers(headers, &mut problems);
    problems.extend(crate::compaction::check(body, headers));
    problems.extend(crate::output_config::check(body));

    let Some(obj) = body.as_object() else {
        problems.push("body is not a JSON object".to_owned());
        return problems;
    };

    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        _ => problems.push("model: must be a non-empty string".to_owned()),
    }
    let max_tokens = obj.get("max_tokens").and_then(Value::as_u64);
    match max_tokens {
        Some(n) if n > 0 => {}
        _ => problems.push("max_tokens: must be a positive integer".to_owned()),
    }
    if let (Some(thinking), Some(max)) = (obj.get("thinking"), max_tokens) {
        if thinking.get("type").and_then(Value::as_str) == Some("enabled") {
            match thinking.get("budget_tokens").and_then(Value::as_u64) {
                Some(budget) if budget >= max => problems.push(format!(
                    "thinking.budget_tokens ({budget}) must be less than max_tokens ({max})"
                )),
                Some(_) => {}
                None => problems.push(
                    "thinking.budget_tokens: must be an integer when thinking is enabled"
                        .to_owned(),
                ),
            }
        }
    }

    let mut breakpoints = usize::from(has_cache_control(body));
    breakpoints += check_system(obj.get("system"), &mut problems);
    breakpoints += check_tools(obj.get("tools"), &mut problems);
    breakpoints += check_messages(obj.get("messages"), &mut problems);
    if breakpoints > MAX_CACHE_BREAKPOINTS {
        problems.push(format!(
            "{breakpoints} cache_control breakpoints found; at most {MAX_CACHE_BREAKPOINTS} are allowed"
        ));
    }
    problems
}

fn check_headers(headers: &[(String, String)], problems: &mut Vec<String>) {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if get("x-api-key").is_none_or(str::is_empty) {
        problems.push("header x-api-key: missing".to_owned());
    }
    if get("anthropic-version").is_none_or(str::is_empty) {
        problems.push("header anthropic-version: missing".to_owned());
    }
    match get("content-type") {
        Some(ct)
            if ct
                .trim()
                .to_ascii_lowercase()
                .starts_with("application/json") => {}
        Some(ct) => problems.push(format!(
            "header content-type: expected application/json, got {ct:?}"
        )),
        None => problems.push("header content-type: missing".to_owned()),
    }
}

fn has_cache_control(v: &Value) -> bool {
    v.get("cache_control").is_some_and(|c| !c.is_null())
}

/// Checks `system`; returns its cache breakpoint count.
fn check_system(system: Option<&Value>, problems: &mut Vec<String>) -> usize {
    match system {
        None | Some(Value::Null) | Some(Value::String(_)) => 0,
        Some(Value::Array(blocks)) => {
            let mut count = 0;
            for (i, b) in blocks.iter().enumerate() {
                if b.get("type").and_then(Value::as_str) != Some("text")
                    || !b.get("text").is_some_and(Value::is_string)
                {
                    problems.push(format!("system.{i}: must be a text block with string text"));
                }
                count += usize::from(has_cache_control(b));
            }
            count
        }
        Some(_) => {
            problems.push("system: must be a string or an array of text blocks".to_owned());
            0
        }
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// Checks `tools`; returns its cache breakpoint count.
fn check_tools(tools: Option<&Value>, problems: &mut Vec<String>) -> usize {
    let tools = match tools {
        None | Some(Value::Null) => return 0,
        Some(Value::Array(tools)) => tools,
        Some(_) => {
            problems.push("tools: must be an array".to_owned());
            return 0;
        }
    };
    let mut seen = HashSet::new();
    let mut count = 0;
    for (i, tool) in tools.iter().enumerate() {
        count += usize::from(has_cache_control(tool));
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            problems.push(format!("tools.{i}.name: missing"));
            continue;
        };
        if !valid_tool_name(name) {
            problems.push(format!(
                "tools.{i}.name: {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
        }
        if !seen.insert(name) {
            problems.push(format!("tools.{i}.name: {name:?} is not unique"));
        }
        // Server tools (web_search_…, etc.) carry a versioned `type` and no input_schema.
        let custom = matches!(
            tool.get("type").and_then(Value::as_str),
            None | Some("custom")
        );
        if custom {
            let schema = tool.get("input_schema");
            if !schema.is_some_and(Value::is_object) {
                problems.push(format!("tools.{i}.input_schema: must be an object"));
            } else if schema.and_then(|s| s.get("type")).and_then(Value::as_str) != Some("object") {
                problems.push(format!("tools.{i}.input_schema.type: must be \"object\""));
            }
        }
    }
    count
}

/// Checks `messages`; returns their cache breakpoint count.
fn check_messages(messages: Option<&Value>, problems: &mut Vec<String>) -> usize {
    let messages = match messages {
        Some(Value::Array(m)) if !m.is_empty() => m,
        _ => {
            problems.push("messages: must be a non-empty array".to_owned());
            return 0;
        }
    };
    let mut breakpoints = 0;
    let mut prev_role: Option<&str> = None;
    // tool_use ids of the previous assistant message, still waiting for their results.
    let mut pending: Vec<&str> = Vec::new();
    let mut all_tool_use_ids: HashSet<&str> = HashSet::new();
    let last = messages.len() - 1;

    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str);
        let role = match role {
            Some(r @ ("user" | "assistant")) => r,
            _ => {
                problems.push(format!(
                    "messages.{i}.role: must be \"user\" or \"assistant\""
                ));
                prev_role = None;
                pending.clear();
                continue;
            }
        };
        if i == 0 && role != "user" && !crate::compaction::opens_with_compaction(msg) {
            problems.push("messages.0: first message must use the \"user\" role".to_owned());
        }
        if prev_role == Some(role) {
            problems.push(format!(
                "messages.{i}: roles must alternate between \"user\" and \"assistant\" (two {role} messages in a row)"
            ));
        }

        let blocks: Vec<&Value> = match msg.get("content") {
            Some(Value::String(s)) => {
                // A prefilled final assistant message may be empty; nothing else may.
                if s.is_empty() && !(i == last && role == "assistant") {
                    problems.push(format!("messages.{i}.content: must not be empty"));
                }
                Vec::new()
            }
            Some(Value::Array(blocks)) => {
                if blocks.is_empty() && !(i == last && role == "assistant") {
                    problems.push(format!("messages.{i}.content: must not be empty"));
                }
                blocks.iter().collect()
            }
            _ => {
                problems.push(format!(
                    "messages.{i}.content: must be a string or an array of blocks"
                ));
                Vec::new()
            }
        };
        let mut typed: Vec<(usize, &str, &Value)> = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str) {
                Some(t) => typed.push((j, t, b)),
                None => problems.push(format!(
                    "messages.{i}.content.{j}: block must be an object with a string type"
                )),
            }
            breakpoints += usize::from(has_cache_control(b));
            // Blocks nested in a tool_result count towards the limit too.
            if let Some(Value::Array(inner)) = b.get("content") {
                breakpoints += inner.iter().filter(|v| has_cache_control(v)).count();
            }
        }
        for &(j, t, b) in &typed {
            if t == "text"
                && b.get("text")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                problems.push(format!(
                    "messages.{i}.content.{j}: text content blocks must be non-empty"
                ));
            }
        }

        if role == "user" {
            check_tool_results(i, &typed, &pending, problems);
            pending.clear();
        } else {
            pending.clear();
            for &(j, t, b) in &typed {
                if t != "tool_use" {
                    continue;
                }
                let id = b.get("id").and_then(Value::as_str);
                let name_ok = b.get("name").is_some_and(Value::is_string);
                let Some(id) = id.filter(|_| name_ok) else {
                    problems.push(format!(
                        "messages.{i}.content.{j}: tool_use needs a string id and name"
                    ));
                    continue;
                };
                if !all_tool_use_ids.insert(id) {
                    problems.push(format!(
                        "messages.{i}.content.{j}: tool_use id {id:?} is used more than once"
                    ));
                }
                pending.push(id);
            }
            // A final assistant message is a continuation; its tool uses have no answer yet.
            if i == last {
                pending.clear();
            }
        }
        prev_role = Some(role);
    }
    breakpoints
}

/// Checks the tool_result blocks of user message `i` against the previous assistant's
/// `pending` tool_use ids.
fn check_tool_results(
    i: usize,
    typed: &[(usize, &str, &Value)],
    pending: &[&str],
    problems: &mut Vec<String>,
) {
    let mut answered: HashMap<&str, usize> = HashMap::new();
    let mut seen_other = false;
    for &(j, t, b) in typed {
        if t != "tool_result" {
            seen_other = true;
            continue;
        }
        if seen_other {
            problems.push(format!(
                "messages.{i}.content.{j}: tool_result blocks must come before any other block"
            ));
        }
        let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
            problems.push(format!(
                "messages.{i}.content.{j}: tool_result needs a string tool_use_id"
            ));
            continue;
        };
        if !pending.contains(&id) {
            problems.push(format!(
                "messages.{i}.content.{j}: unexpected tool_use_id {id:?} in tool_result; it is not a tool_use of the previous message"
            ));
        }
        *answered.entry(id).or_default() += 1;
    }
    for (id, n) in &answered {
        if *n > 1 && pending.contains(id) {
            problems.push(format!(
                "messages.{i}: tool_use id {id:?} is answered by {n} tool_result blocks"
            ));
        }
    }
    let missing: Vec<&str> = pending
        .iter()
        .copied()
        .filter(|id| !answered.contains_key(id))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "messages.{i}: tool_use ids were found without tool_result blocks immediately after: {}",
            missing.join(", ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers() -> Vec<(String, String)> {
        vec![
            ("x-api-key".into(), "k".into()),
            ("anthropic-version".into(), "2023-06-01".into()),
            ("content-type".into(), "application/json".into()),
        ]
    }

    fn body(messages: Value) -> Value {
        json!({"model": "m", "max_tokens": 100, "messages": messages})
    }

    fn problems(messages: Value) -> Vec<String> {
        check_request(&body(messages), &headers())
    }

    fn tool_turn() -> Value {
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "read", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
                {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "b"}]},
                {"type": "text", "text": "continue"}
            ]}
        ])
    }

    #[test]
    fn good_requests_pass() {
        assert_eq!(
            problems(json!([{"role": "user", "content": "hi"}])),
            Vec::<String>::new()
        );
        assert_eq!(problems(tool_turn()), Vec::<String>::new());
        // A final assistant message (prefill / pause_turn continuation) is allowed.
        let msgs = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}]}
        ]);
        assert_eq!(problems(msgs), Vec::<String>::new());
        let full = json!({
            "model": "m", "max_tokens": 100, "stream": true,
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "tools": [
                {"name": "read_file", "description": "d", "input_schema": {"type": "object", "properties": {}}, "cache_control": {"type": "ephemeral"}},
                {"type": "web_search_20250305", "name": "web_search"}
            ],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]
        });
        assert_eq!(check_request(&full, &headers()), Vec::<String>::new());
    }

    #[test]
    fn missing_headers_and_fields() {
        let p = check_request(&json!({"messages": []}), &[]);
        let all = p.join("\n");
        for needle in [
            "x-api-key",
            "anthropic-version",
            "content-type",
            "model",
            "max_tokens",
            "messages",
        ] {
            assert!(all.contains(needle), "{needle} not flagged in {all}");
        }
        let mut h = headers();
        h[2].1 = "text/plain".into();
        assert_eq!(
            check_request(&body(json!([{"role": "user", "content": "x"}])), &h).len(),
            1
        );
        let neg =
            json!({"model": "m", "max_tokens": -1, "messages": [{"role": "user", "content": "x"}]});
        assert_eq!(check_request(&neg, &headers()).len(), 1);
        assert_eq!(
            check_request(&json!("x"), &headers()),
            vec!["body is not a JSON object"]
        );
    }

    #[test]
    fn roles_and_content() {
        let p = problems(json!([{"role": "assistant", "content": "hi"}]));
        assert!(p.iter().any(|s| s.contains("first message")), "{p:?}");
        let p =
            problems(json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]));
        assert!(p.iter().any(|s| s.contains("alternate")), "{p:?}");
        let p = problems(json!([{"role": "user", "content": [{"text": "no type"}]}]));
        assert!(p.iter().any(|s| s.contains("string type")), "{p:?}");
        let p = problems(json!([{"role": "user", "content": 5}]));
        assert!(p.iter().any(|s| s.contains("string or an array")), "{p:?}");
        let p = problems(json!([{"role": "user", "content": []}]));
        assert!(p.iter().any(|s| s.contains("must not be empty")), "{p:?}");
        let p = problems(json!([{"role": "system", "content": "x"}]));
        assert!(p.iter().any(|s| s.contains("role")), "{p:?}");
    }

    #[test]
    fn tool_pairing() {
        // Missing result.
        let mut m = tool_turn();
        m[2]["content"].as_array_mut().unwrap().remove(1);
        let p = problems(m);
        assert!(
            p.iter()
                .any(|s| s.contains("without tool_result") && s.contains("t2")),
            "{p:?}"
        );

        // Result after a text block.
        let mut m = tool_turn();
        m[2]["content"].as_array_mut().unwrap().swap(1, 2);
        let p = problems(m);
        assert!(p.iter().any(|s| s.contains("must come before")), "{p:?}");

        // Duplicate result.
        let mut m = tool_turn();
        m[2]["content"][1]["tool_use_id"] = json!("t1");
        let p = problems(m);
        assert!(p.iter().any(|s| s.contains("answered by 2")), "{p:?}");
        assert!(p.iter().any(|s| s.contains("t2")), "{p:?}");

        // Unknown id.
        let mut m = tool_turn();
        m[2]["content"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "tool_result", "tool_use_id": "zz"}));
        let p = problems(m);
        assert!(
            p.iter()
                .any(|s| s.contains("unexpected tool_use_id \"zz\"")),
            "{p:?}"
        );

        // Results not in the very next user message.
        let m = json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
            {"role": "user", "content": "forgot"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}
        ]);
        let p = problems(m);
        assert!(
            p.iter()
                .any(|s| s.starts_with("messages.2") && s.contains("t1")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|s| s.starts_with("messages.4") && s.contains("unexpected")),
            "{p:?}"
        );

        // Reused id across turns.
        let mut m = tool_turn().as_array().unwrap().clone();
        m.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]}));
        m.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}));
        let p = problems(Value::Array(m));
        assert!(p.iter().any(|s| s.contains("more than once")), "{p:?}");
    }

    #[test]
    fn tools_and_cache() {
        let mut b = body(json!([{"role": "user", "content": "x"}]));
        b["tools"] = json!([
            {"name": "bad name!", "input_schema": {"type": "object"}},
            {"name": "dup", "input_schema": {"type": "object"}},
            {"name": "dup", "input_schema": {"type": "object"}},
            {"name": "noschema"},
            {"name": "wrongtype", "input_schema": {"type": "string"}},
            {"name": "a".repeat(65), "input_schema": {"type": "object"}}
        ]);
        let p = check_request(&b, &headers());
        assert_eq!(p.len(), 5, "{p:?}");

        let cc = json!({"type": "ephemeral"});
        let mut b = body(json!([
            {"role": "user", "content": [
                {"type": "text", "text": "a", "cache_control": cc},
                {"type": "text", "text": "b", "cache_control": cc}
            ]}
        ]));
        b["system"] = json!([{"type": "text", "text": "s", "cache_control": cc}]);
        b["tools"] =
            json!([{"name": "t", "input_schema": {"type": "object"}, "cache_control": cc}]);
        assert_eq!(check_request(&b, &headers()), Vec::<String>::new());
        b["cache_control"] = cc.clone();
        let p = check_request(&b, &headers());
        assert!(p.len() == 1 && p[0].contains("5 cache_control"), "{p:?}");
    }

    #[test]
    fn thinking_budget() {
        let mut b = body(json!([{"role": "user", "content": "x"}]));
        b["thinking"] = json!({"type": "enabled", "budget_tokens": 100});
        assert_eq!(check_request(&b, &headers()).len(), 1);
        b["thinking"]["budget_tokens"] = json!(50);
        assert!(check_request(&b, &headers()).is_empty());
    }
}
