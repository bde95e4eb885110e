//! The request's `output_config`: how much effort the model spends, and the JSON Schema its
//! answer must follow (structured outputs).
//!
//! The API accepts a subset of JSON Schema for `format`. [`strict_schema`] turns any schema
//! into one it accepts, as the official SDKs do before they send one: every object gets
//! `additionalProperties: false`, `oneOf` becomes `anyOf`, and each constraint the API does
//! not enforce (`minimum`, `maxLength`, `pattern`, an unknown `format`, …) moves into the
//! node's `description`, so the model still reads it. The schema as written is kept for
//! checking the answer on the client, where every constraint holds.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// How much effort the model puts into a response (`output_config.effort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    /// The most efficient: far fewer tokens, less capability.
    Low,
    /// A balance of speed, cost and capability.
    Medium,
    /// High capability; the API's default.
    High,
    /// Extended capability for long agentic work.
    Xhigh,
    /// No constraint on tokens: the most capability.
    Max,
}

impl Effort {
    /// Every level, lowest first.
    pub const ALL: [Effort; 5] = [
        Effort::Low,
        Effort::Medium,
        Effort::High,
        Effort::Xhigh,
        Effort::Max,
    ];

    /// The level as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
            Effort::Max => "max",
        }
    }

    /// Reads a level written loosely (any case, spaces around, `x-high`, `extra high`);
    /// `None` when it is no level.
    pub fn parse(text: &str) -> Option<Effort> {
        let word: String = text
            .trim()
            .to_ascii_lowercase()
            .chars()
            .filter(|c| c.is_ascii_alphabetic())
            .collect();
        match word.as_str() {
            "low" => Some(Effort::Low),
            "medium" | "med" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            "xhigh" | "extrahigh" => Some(Effort::Xhigh),
            "max" | "maximum" => Some(Effort::Max),
            _ => None,
        }
    }

    /// Whether `model` accepts `output_config.effort` at all: models before effort existed
    /// (Claude 3 and 4 up to 4.5 other than Opus 4.5) refuse it; later and unknown models
    /// are given it.
    pub fn accepted_by(model: &str) -> bool {
        const BEFORE_EFFORT: [&str; 9] = [
            "claude-2",
            "claude-3",
            "claude-opus-4-0",
            "claude-opus-4-1",
            "claude-opus-4-2025",
            "claude-sonnet-4-0",
            "claude-sonnet-4-2025",
            "claude-sonnet-4-5",
            "claude-haiku-4-5",
        ];
        let model = crate::resolve_model_alias(model);
        !BEFORE_EFFORT.iter().any(|p| model.starts_with(p))
    }
}

impl std::fmt::Display for Effort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The request's `output_config`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputConfig {
    /// How much effort the model spends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    /// The format its text answer must follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<OutputFormat>,
}

impl OutputConfig {
    /// Whether it asks for nothing (then the request leaves it out).
    pub fn is_empty(&self) -> bool {
        self.effort.is_none() && self.format.is_none()
    }
}

/// `{"type": "json_schema", "schema": …}`: the answer is JSON valid against `schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputFormat {
    /// Always `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The schema, in the form the API accepts (see [`strict_schema`]); shared by every
    /// request of an agent.
    pub schema: Arc<Value>,
}

impl OutputFormat {
    /// A `json_schema` format for `schema` as the API accepts it (made so by [`strict_schema`]).
    pub fn json_schema(schema: &Value) -> Self {
        Self {
            kind: "json_schema".into(),
            schema: Arc::new(strict_schema(schema)),
        }
    }
}

/// The string formats structured outputs enforce; others move into the description.
pub const SUPPORTED_STRING_FORMATS: [&str; 10] = [
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

/// `schema` in the form structured outputs accept (see the module's doc): the SDKs'
/// transformation, keeping `enum`, `const` and `default`, which the API documents as
/// supported, and dropping the root's `$schema`.
pub fn strict_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
        // schemars and others write `definitions` (draft 7); the API reads `$defs`.
        if let Some(defs) = root.remove("definitions") {
            root.entry("$defs").or_insert(defs);
        }
    }
    strict_node(schema)
}

fn strict_node(node: Value) -> Value {
    let Value::Object(mut node) = node else {
        // `true`/`false` schemas and other oddities pass as they are.
        return node;
    };
    let mut out = Map::new();
    if let Some(r) = node.remove("$ref") {
        out.insert("$ref".into(), r);
        return Value::Object(out);
    }
    if let Some(Value::Object(defs)) = node.remove("$defs") {
        let defs = defs.into_iter().map(|(k, v)| (k, strict_node(v))).collect();
        out.insert("$defs".into(), Value::Object(defs));
    }
    let kind = node.remove("type");
    let variants = |v: Value| match v {
        Value::Array(items) => Value::Array(items.into_iter().map(strict_node).collect()),
        other => other,
    };
    if let Some(any) = node.remove("anyOf").or_else(|| node.remove("oneOf")) {
        out.insert("anyOf".into(), variants(any));
    } else if let Some(all) = node.remove("allOf") {
        out.insert("allOf".into(), variants(all));
    }
    if let Some(kind) = &kind {
        out.insert("type".into(), kind.clone());
    }
    for key in ["description", "title", "enum", "const", "default"] {
        if let Some(v) = node.remove(key) {
            out.insert(key.into(), v);
        }
    }
    let is = |name: &str| match &kind {
        Some(Value::String(k)) => k == name,
        Some(Value::Array(ks)) => ks.iter().any(|k| k == name),
        _ => false,
    };
    if is("object") || node.contains_key("properties") {
        strict_object(&mut node, &mut out);
    }
    if is("string") {
        strict_string(&mut node, &mut out);
    }
    if is("array") {
        strict_array(&mut node, &mut out);
    }
    if !node.is_empty() {
        let said: Vec<String> = node.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let said = format!("{{{}}}", said.join(", "));
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) if !d.is_empty() => format!("{d}\n\n{said}"),
            _ => said,
        };
        out.insert("description".into(), Value::String(description));
    }
    Value::Object(out)
}

/// An object's part of its strict form: its properties (each made strict), no others
/// allowed, its `required` list.
fn strict_object(node: &mut Map<String, Value>, out: &mut Map<String, Value>) {
    let props = match node.remove("properties") {
        Some(Value::Object(p)) => p.into_iter().map(|(k, v)| (k, strict_node(v))).collect(),
        _ => Map::new(),
    };
    out.insert("properties".into(), Value::Object(props));
    node.remove("additionalProperties");
    out.insert("additionalProperties".into(), Value::Bool(false));
    if let Some(required) = node.remove("required") {
        out.insert("required".into(), required);
    }
}

/// A string's part of its strict form: its `format`, where strict mode supports it (else
/// it stays in `node`, to be said in the description).
fn strict_string(node: &mut Map<String, Value>, out: &mut Map<String, Value>) {
    if let Some(format) = node.remove("format") {
        if format
            .as_str()
            .is_some_and(|f| SUPPORTED_STRING_FORMATS.contains(&f))
        {
            out.insert("format".into(), format);
        } else {
            node.insert("format".into(), format);
        }
    }
}

/// An array's part of its strict form: its items (made strict) and a `minItems` of 0 or 1
/// (another stays in `node`, to be said in the description).
fn strict_array(node: &mut Map<String, Value>, out: &mut Map<String, Value>) {
    if let Some(items) = node.remove("items") {
        out.insert("items".into(), strict_node(items));
    }
    if let Some(min) = node.remove("minItems") {
        if matches!(min.as_u64(), Some(0 | 1)) {
            out.insert("minItems".into(), min);
        } else {
            node.insert("minItems".into(), min);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_are_closed_and_unsupported_constraints_are_described() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Report",
            "type": "object",
            "properties": {
                "count": {"type": "integer", "format": "uint32", "minimum": 0},
                "name": {"type": "string", "maxLength": 10, "description": "who"},
                "when": {"type": "string", "format": "date"},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}, "minItems": 2},
                "kind": {"oneOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]}
            },
            "required": ["count"],
            "additionalProperties": true
        });
        let strict = strict_schema(&schema);
        assert!(strict.get("$schema").is_none());
        assert_eq!(strict["additionalProperties"], json!(false));
        assert_eq!(strict["required"], json!(["count"]));
        let p = &strict["properties"];
        assert_eq!(p["count"]["type"], "integer");
        assert!(p["count"].get("minimum").is_none());
        let d = p["count"]["description"].as_str().unwrap();
        assert!(d.contains("minimum: 0") && d.contains("uint32"), "{d}");
        assert_eq!(p["name"]["description"], "who\n\n{maxLength: 10}");
        assert_eq!(p["when"]["format"], "date");
        assert_eq!(p["tags"]["items"]["additionalProperties"], json!(false));
        assert!(p["tags"].get("minItems").is_none());
        assert_eq!(p["kind"]["anyOf"][0]["enum"], json!(["a", "b"]));
    }

    #[test]
    fn efforts_parse_loosely_and_print_as_the_api_spells_them() {
        assert_eq!(Effort::parse(" High "), Some(Effort::High));
        assert_eq!(Effort::parse("x-high"), Some(Effort::Xhigh));
        assert_eq!(Effort::parse("ultra"), None);
        for e in Effort::ALL {
            assert_eq!(Effort::parse(e.as_str()), Some(e));
            assert_eq!(serde_json::to_value(e).unwrap(), json!(e.as_str()));
        }
        assert!(Effort::accepted_by("opus"));
        assert!(!Effort::accepted_by("claude-3-5-sonnet-latest"));
        assert!(!Effort::accepted_by("claude-sonnet-4-5"));
        let config = OutputConfig {
            effort: Some(Effort::Low),
            format: Some(OutputFormat::json_schema(&json!({"type": "object"}))),
        };
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"effort": "low", "format": {"type": "json_schema",
                "schema": {"type": "object", "properties": {}, "additionalProperties": false}}})
        );
    }
}
