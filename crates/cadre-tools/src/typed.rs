//! Typed tools: a tool whose input is a Rust type, whose JSON Schema is derived from that
//! type, and which every caller sees as one more [`Tool`].
//!
//! ```
//! use cadre_tools::{ToolContext, ToolError, TypedTool};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Counts the words of a text.
//! struct WordCount;
//!
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Input {
//!     /// The text to count the words of.
//!     text: String,
//! }
//!
//! impl TypedTool for WordCount {
//!     type Input = Input;
//!     type Output = String;
//!     fn name(&self) -> &str {
//!         "word_count"
//!     }
//!     fn description(&self) -> String {
//!         "Count the words of a text.".into()
//!     }
//!     fn is_read_only(&self) -> bool {
//!         true
//!     }
//!     async fn run(&self, input: Input, _ctx: &ToolContext) -> Result<String, ToolError> {
//!         Ok(input.text.split_whitespace().count().to_string())
//!     }
//! }
//!
//! // It is a `Tool` like any other, with its schema from `Input`.
//! let tool: std::sync::Arc<dyn cadre_tools::Tool> = std::sync::Arc::new(WordCount);
//! assert_eq!(tool.input_schema()["required"], serde_json::json!(["text"]));
//! ```

use crate::{parse_input, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A tool with a typed input (its schema) and a typed output; every `TypedTool` is a
/// [`Tool`], so it goes wherever tools go.
///
/// Its `run` is a native `async fn` (no `async-trait`): implement it as `async fn run(…)`;
/// the future must be `Send`, since agents run on a multi-threaded runtime.
pub trait TypedTool: Send + Sync + 'static {
    /// What the model sends. Its JSON Schema is what the model is offered: field doc
    /// comments become descriptions, `Option` fields are optional, `deny_unknown_fields`
    /// says no other field is allowed.
    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    /// What a call hands back (text, a [`ToolOutput`], or [`Json`] of a serialisable value).
    type Output: Into<ToolOutput>;
    /// The name the model sees.
    fn name(&self) -> &str;
    /// What it does and when to use it, for the model.
    fn description(&self) -> String;
    /// Whether it never changes anything, so it may run beside other calls.
    fn is_read_only(&self) -> bool;
    /// Whether it may run at the same time as other calls of the same turn (default: when
    /// read-only).
    fn runs_concurrently(&self) -> bool {
        self.is_read_only()
    }
    /// What a resumed run may do with a call that a crash cut short (see [`Tool::rerun`]).
    fn rerun(&self) -> crate::Rerun {
        if self.is_read_only() {
            crate::Rerun::Repeat
        } else {
            crate::Rerun::Never
        }
    }
    /// What a resumed run may do with this call if a crash cut it short (see
    /// [`Tool::rerun_call`]; default: [`Self::rerun`]).
    fn rerun_call(&self, input: &Value, ctx: &ToolContext) -> crate::Rerun {
        let _ = (input, ctx);
        TypedTool::rerun(self)
    }
    /// The input schema; the default derives it from [`Self::Input`]. Override it only to
    /// add what the type cannot know, such as a list of names known at run time.
    fn input_schema(&self) -> Value {
        input_schema_for::<Self::Input>()
    }
    /// Runs it on decoded input. Errors become `is_error` results for the model.
    fn run(
        &self,
        input: Self::Input,
        ctx: &ToolContext,
    ) -> impl std::future::Future<Output = Result<Self::Output, ToolError>> + Send;
}

#[async_trait]
impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        TypedTool::name(self)
    }

    fn description(&self) -> String {
        TypedTool::description(self)
    }

    fn input_schema(&self) -> Value {
        TypedTool::input_schema(self)
    }

    fn is_read_only(&self) -> bool {
        TypedTool::is_read_only(self)
    }

    fn runs_concurrently(&self) -> bool {
        TypedTool::runs_concurrently(self)
    }

    fn rerun(&self) -> crate::Rerun {
        TypedTool::rerun(self)
    }

    fn rerun_call(&self, input: &Value, ctx: &ToolContext) -> crate::Rerun {
        TypedTool::rerun_call(self, input, ctx)
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: T::Input = parse_input(TypedTool::name(self), input)?;
        Ok(self.run(input, ctx).await?.into())
    }
}

/// A serialisable value handed back as its JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> From<Json<T>> for ToolOutput {
    fn from(Json(value): Json<T>) -> Self {
        match serde_json::to_string(&value) {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("the tool's result could not be encoded: {e}")),
        }
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::ok(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::ok(text)
    }
}

/// The JSON Schema of `T` as a tool's `input_schema` (derived once per type, then copied):
/// an inline object schema with no `$schema` or title, `Option` fields optional (not
/// nullable), integer formats and serde defaults left out (the descriptions say the
/// defaults), and `properties` and `required` always present.
pub fn input_schema_for<T: JsonSchema + 'static>() -> Value {
    // Every request of every agent offers its tools' schemas: derive each once.
    static DERIVED: OnceLock<Mutex<HashMap<TypeId, Arc<Value>>>> = OnceLock::new();
    let derived = DERIVED.get_or_init(Mutex::default);
    let known = derived
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&TypeId::of::<T>())
        .cloned();
    // The copy is made outside the lock, so agents do not queue for it.
    let schema = match known {
        Some(schema) => schema,
        None => {
            let schema = Arc::new(derive::<T>());
            derived
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(TypeId::of::<T>(), schema.clone());
            schema
        }
    };
    (*schema).clone()
}

/// Derives the schema of `T` (see [`input_schema_for`]).
fn derive<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(root) = &mut value {
        root.remove("title");
        root.remove("description");
        root.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        root.entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    tidy(&mut value);
    value
}

/// Tidies an object schema and every property schema below it.
fn tidy(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    strip_generated(map);
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                not_nullable(property);
            }
            tidy(property);
        }
    }
    if let Some(items) = map.get_mut("items") {
        tidy(items);
    }
}

/// Removes what the generator adds that a tool schema does not want.
fn strip_generated(map: &mut Map<String, Value>) {
    map.remove("default");
    let integer_format = map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"));
    if integer_format {
        map.remove("format");
    }
}

/// An optional field's schema says its type, not "or null": leaving it out is how the
/// model says "none".
fn not_nullable(property: &mut Value) {
    let Value::Object(map) = property else {
        return;
    };
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            map.insert("type".into(), only);
        }
    }
    // `Option` of a type without a plain `type` comes as `anyOf: [T, {"type": "null"}]`.
    if let Some(Value::Array(any)) = map.get("anyOf") {
        let rest: Vec<Value> = any
            .iter()
            .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
            .cloned()
            .collect();
        if let [only] = rest.as_slice() {
            if let Value::Object(inner) = only.clone() {
                map.remove("anyOf");
                for (k, v) in inner {
                    map.entry(k).or_insert(v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Input {
        /// Where to look.
        path: String,
        /// How many, at least one.
        #[schemars(range(min = 1))]
        limit: Option<u64>,
        /// Whether to shout.
        #[serde(default)]
        loud: bool,
        /// Which kind.
        kind: Option<Kind>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Kind {
        Small,
        Large,
    }

    #[test]
    fn the_schema_is_a_plain_object_schema_with_optional_fields_not_nullable() {
        assert_eq!(
            input_schema_for::<Input>(),
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where to look."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many, at least one."},
                    "loud": {"type": "boolean", "description": "Whether to shout."},
                    "kind": {"type": "string", "enum": ["small", "large"], "description": "Which kind."}
                },
                "required": ["path"],
                "additionalProperties": false
            })
        );
    }

    #[derive(Deserialize, JsonSchema)]
    struct Empty {}

    #[test]
    fn a_type_without_fields_still_says_none_is_required() {
        assert_eq!(
            input_schema_for::<Empty>(),
            json!({"type": "object", "properties": {}, "required": []})
        );
    }
}
