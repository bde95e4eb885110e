//! The content blocks of a message, as the Messages API has them: text, tool calls and
//! results, thinking, images, compaction summaries, and any block type not known yet (kept
//! as raw JSON, so it goes back to the API unchanged).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A cache breakpoint marker (`{"type": "ephemeral"}`, optionally with a `ttl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheControl {
    /// Always `ephemeral` today.
    #[serde(rename = "type")]
    pub kind: String,
    /// `5m` or `1h`; the API's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

impl CacheControl {
    /// The default five-minute ephemeral breakpoint.
    pub fn ephemeral() -> Self {
        Self {
            kind: "ephemeral".into(),
            ttl: None,
        }
    }
}

/// A `text` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// A cache breakpoint on this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Fields this version does not model (citations, …), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `tool_use` block: the model asks for a tool to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUseBlock {
    /// The id the matching `tool_result` must carry.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's input, a JSON object when the model behaves (`{}` when it sent text that
    /// is not JSON: see `invalid_input`).
    pub input: Value,
    /// A cache breakpoint on this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Set when the model's input was not valid JSON: the agent answers the call with an
    /// `is_error` result instead of running it. Cassettes keep it (so a replay answers
    /// alike); it is removed before the block goes back to the model.
    #[serde(
        default,
        rename = "cadre_invalid_input",
        skip_serializing_if = "Option::is_none"
    )]
    pub invalid_input: Option<InvalidInput>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Tool input the model sent that is not valid JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidInput {
    /// The text it sent.
    pub text: String,
    /// Why it could not be read.
    pub error: String,
}

impl ToolUseBlock {
    /// A block for a call whose input `text` failed to parse with `error`: its input is `{}`.
    pub fn invalid(
        id: impl Into<String>,
        name: impl Into<String>,
        text: impl Into<String>,
        error: impl std::fmt::Display,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            input: Value::Object(Map::new()),
            cache_control: None,
            invalid_input: Some(InvalidInput {
                text: text.into(),
                error: error.to_string(),
            }),
            extra: Map::new(),
        }
    }
}

/// A `tool_result` block: the answer to one `tool_use`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultBlock {
    /// The id of the `tool_use` this answers.
    pub tool_use_id: String,
    /// The result: text blocks (a bare string on the wire is read as one).
    #[serde(
        default,
        deserialize_with = "content_from_string_or_blocks",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub content: Vec<ContentBlock>,
    /// Whether the tool failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// A cache breakpoint on this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `thinking` block, kept verbatim with its signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThinkingBlock {
    /// The model's visible reasoning.
    pub thinking: String,
    /// The signature the API checks when the block is sent back.
    #[serde(default)]
    pub signature: String,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `redacted_thinking` block, kept verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedactedThinkingBlock {
    /// Encrypted reasoning.
    pub data: String,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An `image` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageBlock {
    /// The image source (`base64` or `url`), kept as the API spells it.
    pub source: Value,
    /// A cache breakpoint on this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `compaction` block: the server's summary of the conversation before it. Sent back
/// exactly as received; the API ignores every block before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionBlock {
    /// The summary, or null when compaction failed (such a block is a no-op when sent back).
    #[serde(default)]
    pub content: Option<String>,
    /// Opaque data from prior compactions, round-tripped verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    /// A cache breakpoint on this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Fields this version does not model (a signature, tool changes, …), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One content block of a message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ContentBlock {
    /// `text`.
    Text(TextBlock),
    /// `tool_use`.
    ToolUse(ToolUseBlock),
    /// `tool_result`.
    ToolResult(ToolResultBlock),
    /// `thinking`.
    Thinking(ThinkingBlock),
    /// `redacted_thinking`.
    RedactedThinking(RedactedThinkingBlock),
    /// `image`.
    Image(ImageBlock),
    /// `compaction`.
    Compaction(CompactionBlock),
    /// Any block type this version does not know, kept as raw JSON (with its `type`).
    Unknown(Value),
}

impl ContentBlock {
    /// A plain text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(TextBlock {
            text: text.into(),
            cache_control: None,
            extra: Map::new(),
        })
    }

    /// A base64 image block (`media_type` such as `image/png`).
    pub fn image(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self::Image(ImageBlock {
            source: serde_json::json!({
                "type": "base64",
                "media_type": media_type.into(),
                "data": data.into(),
            }),
            cache_control: None,
            extra: Map::new(),
        })
    }

    /// A tool_use block.
    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self::ToolUse(ToolUseBlock {
            id: id.into(),
            name: name.into(),
            input,
            cache_control: None,
            invalid_input: None,
            extra: Map::new(),
        })
    }

    /// A tool_result block holding one text block.
    pub fn tool_result(id: impl Into<String>, text: impl Into<String>, is_error: bool) -> Self {
        Self::ToolResult(ToolResultBlock {
            tool_use_id: id.into(),
            content: vec![Self::text(text)],
            is_error,
            cache_control: None,
            extra: Map::new(),
        })
    }

    /// The wire `type` of this block.
    pub fn type_name(&self) -> &str {
        match self {
            Self::Text(_) => "text",
            Self::ToolUse(_) => "tool_use",
            Self::ToolResult(_) => "tool_result",
            Self::Thinking(_) => "thinking",
            Self::RedactedThinking(_) => "redacted_thinking",
            Self::Image(_) => "image",
            Self::Compaction(_) => "compaction",
            Self::Unknown(v) => v.get("type").and_then(Value::as_str).unwrap_or("unknown"),
        }
    }

    /// Whether a block of this type can carry a cache breakpoint.
    pub fn can_cache(&self) -> bool {
        matches!(
            self,
            Self::Text(_)
                | Self::ToolUse(_)
                | Self::ToolResult(_)
                | Self::Image(_)
                | Self::Compaction(_)
        )
    }

    /// The cache breakpoint on this block, if it carries one.
    pub fn cache_control(&self) -> Option<&CacheControl> {
        match self {
            Self::Text(b) => b.cache_control.as_ref(),
            Self::ToolUse(b) => b.cache_control.as_ref(),
            Self::ToolResult(b) => b.cache_control.as_ref(),
            Self::Image(b) => b.cache_control.as_ref(),
            Self::Compaction(b) => b.cache_control.as_ref(),
            _ => None,
        }
    }

    /// Sets a cache breakpoint on this block if its type can carry one; says whether it did.
    pub fn set_cache_control(&mut self, cc: Option<CacheControl>) -> bool {
        match self {
            Self::Text(b) => b.cache_control = cc,
            Self::ToolUse(b) => b.cache_control = cc,
            Self::ToolResult(b) => b.cache_control = cc,
            Self::Image(b) => b.cache_control = cc,
            Self::Compaction(b) => b.cache_control = cc,
            _ => return false,
        }
        true
    }
}

/// A block as the wire has it, `{"type": tag, ...its fields}`, written straight out: not
/// through a `Value`, which copied every string of every request, journal step and
/// transcript line into a tree of maps first.
#[derive(Serialize)]
struct Tagged<'a, T> {
    #[serde(rename = "type")]
    tag: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn tagged<S: Serializer, T: Serialize>(
            s: S,
            tag: &str,
            body: &T,
        ) -> Result<S::Ok, S::Error> {
            Tagged { tag, body }.serialize(s)
        }
        match self {
            Self::Text(b) => tagged(s, "text", b),
            Self::ToolUse(b) => tagged(s, "tool_use", b),
            Self::ToolResult(b) => tagged(s, "tool_result", b),
            Self::Thinking(b) => tagged(s, "thinking", b),
            Self::RedactedThinking(b) => tagged(s, "redacted_thinking", b),
            Self::Image(b) => tagged(s, "image", b),
            Self::Compaction(b) => tagged(s, "compaction", b),
            Self::Unknown(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = Value::deserialize(d)?;
        let Some(obj) = v.as_object_mut() else {
            return Err(D::Error::custom("a content block must be a JSON object"));
        };
        let Some(kind) = obj.get("type").and_then(Value::as_str).map(str::to_owned) else {
            return Err(D::Error::custom("a content block needs a string `type`"));
        };
        fn body<T: serde::de::DeserializeOwned, E: serde::de::Error>(
            mut obj: Map<String, Value>,
            kind: &str,
        ) -> Result<T, E> {
            obj.remove("type");
            serde_json::from_value(Value::Object(obj))
                .map_err(|e| E::custom(format!("bad `{kind}` block: {e}")))
        }
        let obj = std::mem::take(obj);
        Ok(match kind.as_str() {
            "text" => Self::Text(body(obj, &kind)?),
            "tool_use" => Self::ToolUse(body(obj, &kind)?),
            "tool_result" => Self::ToolResult(body(obj, &kind)?),
            "thinking" => Self::Thinking(body(obj, &kind)?),
            "redacted_thinking" => Self::RedactedThinking(body(obj, &kind)?),
            "image" => Self::Image(body(obj, &kind)?),
            "compaction" => Self::Compaction(body(obj, &kind)?),
            _ => Self::Unknown(Value::Object(obj)),
        })
    }
}

pub(crate) fn content_from_string_or_blocks<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<ContentBlock>, D::Error> {
    // Not an untagged enum: its error ("did not match any variant") would hide which block
    // is wrong and why.
    match Value::deserialize(d)? {
        Value::String(text) => Ok(vec![ContentBlock::text(text)]),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                ContentBlock::deserialize(item)
                    .map_err(|e| D::Error::custom(format!("content block {i}: {e}")))
            })
            .collect(),
        other => Err(D::Error::custom(format!(
            "content must be a string or an array of content blocks, not {}",
            json_kind(&other)
        ))),
    }
}

/// What kind of JSON value `v` is, for error messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
