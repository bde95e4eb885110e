//! The request's `output_config`, checked as the official SDKs type it and as structured
//! outputs accept a schema.
//!
//! `OutputConfig` is `{effort?: "low" | "medium" | "high" | "xhigh" | "max" | null,
//! format?: {type: "json_schema", schema: object} | null}`. A `format.schema` must be in the
//! subset structured outputs accept: every object closed with `additionalProperties: false`,
//! and none of the keywords the API does not support (numeric and length bounds, `pattern`,
//! `oneOf`, `not`, …; an array's `minItems` only 0 or 1; a string's `format` only one of the
//! supported ones).

use serde_json::Value;

/// The effort levels the API accepts.
pub const EFFORTS: [&str; 5] = ["low", "medium", "high", "xhigh", "max"];

/// Keywords structured outputs refuse anywhere in a schema.
const UNSUPPORTED: [&str; 18] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
];

/// String formats structured outputs enforce.
const FORMATS: [&str; 10] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Every problem of the request's `output_config` (none when absent).
pub fn check(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let config = match body.get("output_config") {
        None | Some(Value::Null) => return problems,
        Some(Value::Object(config)) => config,
        Some(_) => return vec!["output_config: must be an object".to_owned()],
    };
    for key in config.keys() {
        if !matches!(key.as_str(), "effort" | "format") {
            problems.push(format!(
                "output_config.{key}: Extra inputs are not permitted"
            ));
        }
    }
    match config.get("effort") {
        None | Some(Value::Null) => {}
        Some(Value::String(e)) if EFFORTS.contains(&e.as_str()) => {}
        Some(other) => problems.push(format!(
            "output_config.effort: Input should be {}; got {other}",
            EFFORTS.map(|e| format!("'{e}'")).join(", ")
        )),
    }
    match config.get("format") {
        None | Some(Value::Null) => {}
        Some(Value::Object(format)) => {
            if format.get("type").and_then(Value::as_str) != Some("json_schema") {
                problems.push("output_config.format.type: Input should be 'json_schema'".into());
            }
            for key in format.keys() {
                if !matches!(key.as_str(), "type" | "schema") {
                    problems.push(format!(
                        "output_config.format.{key}: Extra inputs are not permitted"
                    ));
                }
            }
            match format.get("schema") {
                Some(schema @ Value::Object(_)) => {
                    check_schema(schema, "output_config.format.schema", &mut problems)
                }
                _ => problems.push("output_config.format.schema: must be an object".into()),
            }
        }
        Some(_) => problems.push("output_config.format: must be an object or null".into()),
    }
    problems
}

/// Checks one node of a schema (and those below it) against what structured outputs accept.
fn check_schema(node: &Value, at: &str, problems: &mut Vec<String>) {
    let Value::Object(node) = node else {
        if !node.is_boolean() {
            problems.push(format!("{at}: a schema must be an object"));
        }
        return;
    };
    for key in UNSUPPORTED {
        if node.contains_key(key) {
            problems.push(format!(
                "{at}: `{key}` is not supported in structured outputs schemas"
            ));
        }
    }
    let is = |name: &str| match node.get("type") {
        Some(Value::String(k)) => k == name,
        Some(Value::Array(ks)) => ks.iter().any(|k| k == name),
        _ => false,
    };
    let open = node.get("additionalProperties") != Some(&Value::Bool(false));
    if (is("object") || node.contains_key("properties")) && open {
        problems.push(format!(
            "{at}: For 'object' type, 'additionalProperties' must be explicitly set to false"
        ));
    }
    if let Some(format) = node.get("format").and_then(Value::as_str) {
        if !FORMATS.contains(&format) {
            problems.push(format!("{at}.format: {format:?} is not a supported format"));
        }
    }
    if let Some(min) = node.get("minItems") {
        if !matches!(min.as_u64(), Some(0 | 1)) {
            problems.push(format!("{at}.minItems: only 0 and 1 are supported"));
        }
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(children)) = node.get(key) {
            for (name, child) in children {
                check_schema(child, &format!("{at}.{key}.{name}"), problems);
            }
        }
    }
    for key in ["anyOf", "allOf"] {
        if let Some(Value::Array(children)) = node.get(key) {
            for (i, child) in children.iter().enumerate() {
                check_schema(child, &format!("{at}.{key}.{i}"), problems);
            }
        }
    }
    if let Some(items) = node.get("items") {
        check_schema(items, &format!("{at}.items"), problems);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_and_values() {
        assert!(check(&json!({})).is_empty());
        assert!(check(&json!({"output_config": {"effort": "xhigh"}})).is_empty());
        let good = json!({"output_config": {"effort": null, "format": {"type": "json_schema",
            "schema": {"type": "object", "additionalProperties": false,
                "properties": {"a": {"type": "array", "minItems": 1,
                    "items": {"type": "string", "format": "date"}}}}}}});
        assert_eq!(check(&good), Vec::<String>::new());
        assert_eq!(
            check(&json!({"output_config": {"effort": "ultra"}})).len(),
            1
        );
        assert_eq!(check(&json!({"output_config": {"budget": 1}})).len(), 1);
        let p = check(&json!({"output_config": {"format": {"type": "json",
            "schema": {"type": "object", "properties": {
                "n": {"type": "integer", "minimum": 0},
                "o": {"type": "object", "properties": {}}}}}}}));
        let all = p.join("\n");
        for needle in [
            "'json_schema'",
            "minimum",
            "format.schema: For",
            "properties.o",
        ] {
            assert!(all.contains(needle), "{needle} not in {all}");
        }
    }
}
