//! Wire types that mirror the Anthropic Messages API.
//!
//! Every struct keeps fields it does not know in an `extra` map and every unknown content
//! block type is kept as raw JSON, so whatever the API sends comes back to it unchanged.

use crate::content::{content_from_string_or_blocks, CacheControl, ContentBlock, ToolUseBlock};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::sync::Arc;

pub use crate::conversation::{History, Messages};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person, or tool results sent on their behalf.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content blocks (a bare string on the wire is read as one text block).
    #[serde(deserialize_with = "content_from_string_or_blocks")]
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message holding one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// A message from `role` with the given blocks.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self { role, content }
    }

    /// The text blocks of this message joined together.
    pub fn text(&self) -> String {
        join_text(&self.content)
    }
}

/// The text blocks of `blocks` concatenated.
pub fn join_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// It finished its turn.
    EndTurn,
    /// It wants tools run.
    ToolUse,
    /// It hit `max_tokens`; the answer is truncated.
    MaxTokens,
    /// It produced one of the stop sequences.
    StopSequence,
    /// A long server-side turn paused; send the response back to continue.
    PauseTurn,
    /// The server compacted the conversation and paused (`pause_after_compaction`, or an
    /// on-demand compaction); send the history back to continue.
    Compaction,
    /// It declined to answer.
    Refusal,
    /// The context window is full.
    ModelContextWindowExceeded,
    /// A reason this version does not know.
    Other(String),
}

impl StopReason {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::PauseTurn => "pause_turn",
            Self::Compaction => "compaction",
            Self::Refusal => "refusal",
            Self::ModelContextWindowExceeded => "model_context_window_exceeded",
            Self::Other(s) => s,
        }
    }

    /// Parses the wire spelling; unknown values become `Other`.
    pub fn parse(s: &str) -> Self {
        match s {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "pause_turn" => Self::PauseTurn,
            "compaction" => Self::Compaction,
            "refusal" => Self::Refusal,
            "model_context_window_exceeded" => Self::ModelContextWindowExceeded,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(d)?))
    }
}

/// Token counts for one response (or a sum of many).
///
/// The top-level counts are the answer's; a response in which the server compacted the
/// conversation also lists the summarising call among its `iterations`, which is read into
/// [`Usage::compaction`] (the wire's `iterations` array is accepted on input, and cadre's
/// own `compaction` object is what it writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "UsageWire")]
pub struct Usage {
    /// Input tokens not read from or written to the cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Compactions and their tokens, which the counts above leave out.
    #[serde(default, skip_serializing_if = "CompactionUsage::is_empty")]
    pub compaction: CompactionUsage,
}

/// What compacting a conversation cost: how many compactions, and their tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionUsage {
    /// Compactions.
    #[serde(default)]
    pub count: u64,
    /// Input tokens they read, cached or not.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens they wrote (the summaries).
    #[serde(default)]
    pub output_tokens: u64,
}

impl CompactionUsage {
    /// Whether nothing was compacted.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// The compaction entries of a Messages API `usage.iterations` array.
    pub fn from_iterations(iterations: &[Value]) -> Self {
        let n = |it: &Value, key: &str| it.get(key).and_then(Value::as_u64).unwrap_or(0);
        iterations
            .iter()
            .filter(|it| it.get("type").and_then(Value::as_str) == Some("compaction"))
            .fold(Self::default(), |acc, it| Self {
                count: acc.count + 1,
                input_tokens: acc.input_tokens
                    + n(it, "input_tokens")
                    + n(it, "cache_creation_input_tokens")
                    + n(it, "cache_read_input_tokens"),
                output_tokens: acc.output_tokens + n(it, "output_tokens"),
            })
    }
}

/// `usage` as it arrives: the API's `iterations`, or cadre's own `compaction`.
#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    compaction: Option<CompactionUsage>,
    #[serde(default)]
    iterations: Option<Vec<Value>>,
}

impl From<UsageWire> for Usage {
    fn from(w: UsageWire) -> Self {
        let compaction = w.compaction.unwrap_or_else(|| {
            CompactionUsage::from_iterations(w.iterations.as_deref().unwrap_or_default())
        });
        Self {
            input_tokens: w.input_tokens,
            output_tokens: w.output_tokens,
            cache_creation_input_tokens: w.cache_creation_input_tokens,
            cache_read_input_tokens: w.cache_read_input_tokens,
            compaction,
        }
    }
}

impl Usage {
    /// Every input token, cached or not.
    pub fn total_input(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }

    /// How much of the context window the conversation filled after this response: all
    /// its input, cached or not, and the answer (compactions, which replaced part of it,
    /// not counted).
    pub fn context_size(&self) -> u64 {
        self.total_input() + self.output_tokens
    }

    /// Input plus output, compactions included: what a token budget counts.
    pub fn total(&self) -> u64 {
        self.total_input() + self.output_tokens + self.compaction.total()
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
        self.compaction.count += other.compaction.count;
        self.compaction.input_tokens += other.compaction.input_tokens;
        self.compaction.output_tokens += other.compaction.output_tokens;
    }
}

/// A tool the model may call, as the API describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of its input (an object schema).
    pub input_schema: Value,
    /// A cache breakpoint after this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

/// A block of the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemBlock {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text (shared: every request of an agent, and every agent of a type, can hold
    /// one copy of a long prompt).
    pub text: Arc<str>,
    /// A cache breakpoint after this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

impl SystemBlock {
    /// A system text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::shared(Arc::from(text.into()))
    }

    /// A system text block holding `text` without copying it.
    pub fn shared(text: Arc<str>) -> Self {
        Self {
            kind: "text".into(),
            text,
            cache_control: None,
        }
    }
}

/// A request to the Messages API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Model id.
    pub model: String,
    /// Output token cap.
    pub max_tokens: u32,
    /// The system prompt, as blocks so it can carry a cache breakpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<SystemBlock>,
    /// The conversation so far, shared with the agent that sends it.
    pub messages: Messages,
    /// The tools offered; shared, as every request of an agent (and of its agent type)
    /// offers the same ones.
    #[serde(default, skip_serializing_if = "is_empty_tools")]
    pub tools: Arc<Vec<ToolDefinition>>,
    /// Request-level automatic cache breakpoint: caches up to the newest cacheable block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
    /// Stream the response as server-sent events.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Extended thinking configuration, passed through as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
    /// Custom stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Request metadata, passed through as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Edits the server applies to a long context (threshold compaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_management: Option<ContextManagement>,
    /// Asks for a compaction of the messages instead of an answer (on demand); never
    /// together with `context_management`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionRequest>,
    /// The effort the model spends and the format of its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_config: Option<crate::OutputConfig>,
    /// Beta features the request uses, sent as the `anthropic-beta` header.
    #[serde(skip)]
    pub betas: Vec<String>,
    /// Which agent sends it; never sent on the wire, used by record/replay and logs.
    #[serde(skip)]
    pub origin: Option<RequestOrigin>,
}

/// Whether a request offers no tools (then the field is left out).
fn is_empty_tools(tools: &Arc<Vec<ToolDefinition>>) -> bool {
    tools.is_empty()
}

/// The beta of threshold compaction (`context_management` with `compact_20260112`).
pub const COMPACT_BETA: &str = "compact-2026-01-12";

/// The beta of on-demand compaction (a request's `compaction`).
pub const SUMMARIZE_BETA: &str = "compact-2026-09-04";

/// The smallest input-token threshold the API accepts for compaction.
pub const MIN_COMPACT_AT: u64 = 50_000;

/// The request's `context_management`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextManagement {
    /// The edits, applied in order.
    #[serde(default)]
    pub edits: Vec<ContextEdit>,
}

/// One context edit; cadre builds `compact_20260112`, others pass through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextEdit {
    /// The edit's type (`compact_20260112`).
    #[serde(rename = "type")]
    pub kind: String,
    /// When it applies (`{"type": "input_tokens", "value": N}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<InputTokensTrigger>,
    /// Whether the response stops right after the compaction block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_compaction: Option<bool>,
    /// Extra instructions for the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Fields of other edit types, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ContextEdit {
    /// Compaction once the input reaches `at` tokens.
    pub fn compact_at(at: u64) -> Self {
        Self {
            kind: "compact_20260112".into(),
            trigger: Some(InputTokensTrigger {
                kind: "input_tokens".into(),
                value: at,
            }),
            pause_after_compaction: None,
            instructions: None,
            extra: Map::new(),
        }
    }
}

/// A trigger counted in input tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputTokensTrigger {
    /// Always `input_tokens`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The threshold.
    pub value: u64,
}

/// The request's `compaction` (on-demand compaction).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionRequest {
    /// Always `summarize`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Extra instructions for the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// The agent a request comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestOrigin {
    /// Its path in the tree of agents (`main/explore#2`).
    pub path: String,
    /// Its agent type (`explore`).
    pub agent_type: String,
}

impl Request {
    /// A request with the given model, cap and messages (a list, or a shared history);
    /// nothing else set.
    pub fn new(model: impl Into<String>, max_tokens: u32, messages: impl Into<Messages>) -> Self {
        Self {
            model: model.into(),
            max_tokens,
            system: Vec::new(),
            messages: messages.into(),
            tools: Arc::default(),
            cache_control: None,
            stream: false,
            temperature: None,
            thinking: None,
            stop_sequences: Vec::new(),
            metadata: None,
            context_management: None,
            compaction: None,
            output_config: None,
            betas: Vec::new(),
            origin: None,
        }
    }

    /// Asks the server to compact the conversation once its input reaches `at` tokens
    /// (the `compact_20260112` edit); the response then begins with a `compaction` block.
    pub fn compact_at(&mut self, at: u64) {
        self.context_management = Some(ContextManagement {
            edits: vec![ContextEdit::compact_at(at)],
        });
        self.add_beta(COMPACT_BETA);
    }

    /// Turns the request into an on-demand compaction: the answer is one `compaction` block
    /// summarising the messages, with stop reason `compaction`.
    pub fn summarize(&mut self, instructions: Option<String>) {
        self.context_management = None;
        self.betas.retain(|b| b != COMPACT_BETA);
        // The answer is a summary block, not the agent's answer: no format binds it.
        if let Some(config) = &mut self.output_config {
            config.format = None;
            if config.is_empty() {
                self.output_config = None;
            }
        }
        self.compaction = Some(CompactionRequest {
            kind: "summarize".into(),
            instructions,
        });
        self.add_beta(SUMMARIZE_BETA);
    }

    /// Adds a beta feature once.
    pub fn add_beta(&mut self, beta: &str) {
        if !self.betas.iter().any(|b| b == beta) {
            self.betas.push(beta.to_owned());
        }
    }

    /// Places cache breakpoints as the design asks: one explicit breakpoint at the end of
    /// the stable prefix (the last system block, else the last tool) and the request-level
    /// automatic breakpoint for the newest block. Any breakpoints already on messages are
    /// cleared first, so a request never carries more than the API's four.
    pub fn apply_prompt_caching(&mut self) {
        // The tools are shared: copied only when their breakpoints must change.
        let tool_mark = self
            .system
            .is_empty()
            .then(|| self.tools.len().saturating_sub(1));
        let tools_as_wanted = self.tools.iter().enumerate().all(|(i, t)| {
            t.cache_control.is_some() == (Some(i) == tool_mark)
                && t.cache_control
                    .as_ref()
                    .is_none_or(|c| *c == CacheControl::ephemeral())
        });
        if !tools_as_wanted {
            for t in Arc::make_mut(&mut self.tools) {
                t.cache_control = None;
            }
        }
        for s in &mut self.system {
            s.cache_control = None;
        }
        self.messages.clear_breakpoints();
        if let Some(last) = self.system.last_mut() {
            last.cache_control = Some(CacheControl::ephemeral());
        } else if !tools_as_wanted {
            if let Some(last) = Arc::make_mut(&mut self.tools).last_mut() {
                last.cache_control = Some(CacheControl::ephemeral());
            }
        }
        self.cache_control = Some(CacheControl::ephemeral());
    }

    /// Adds an explicit cache breakpoint on block `block` of message `message` — or the
    /// nearest block before it that can carry one — marking the end of a prefix another
    /// request shares (a fork's parent), unless the request already has the API's four;
    /// says whether it did.
    pub fn pin_cache_at(&mut self, message: usize, block: usize) -> bool {
        if self.cache_breakpoints() >= 4 {
            return false;
        }
        self.messages.add_breakpoint(message, block)
    }

    /// How many cache breakpoints this request carries, the request-level one included.
    pub fn cache_breakpoints(&self) -> usize {
        let tools = self
            .tools
            .iter()
            .filter(|t| t.cache_control.is_some())
            .count();
        let system = self
            .system
            .iter()
            .filter(|s| s.cache_control.is_some())
            .count();
        let blocks = self.messages.breakpoints();
        tools + system + blocks + usize::from(self.cache_control.is_some())
    }
}

/// A complete response from the Messages API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The message id.
    pub id: String,
    /// The model that answered.
    pub model: String,
    /// Always `assistant`.
    pub role: Role,
    /// The content blocks, in order.
    pub content: Vec<ContentBlock>,
    /// Why it stopped; `None` only if the stream never said.
    pub stop_reason: Option<StopReason>,
    /// The stop sequence that matched, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    /// Tokens used.
    #[serde(default)]
    pub usage: Usage,
}

impl Response {
    /// The text blocks joined together.
    pub fn text(&self) -> String {
        join_text(&self.content)
    }

    /// The tool_use blocks, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUseBlock> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(t) => Some(t),
            _ => None,
        })
    }

    /// This response as the assistant message to append to the history.
    pub fn to_message(&self) -> Message {
        Message::new(Role::Assistant, self.content.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_blocks_and_fields_round_trip() {
        let wire = json!([
            {"type": "text", "text": "hi", "citations": [{"x": 1}]},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
            {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}
        ]);
        let blocks: Vec<ContentBlock> = serde_json::from_value(wire.clone()).unwrap();
        assert!(matches!(blocks[1], ContentBlock::Unknown(_)));
        assert_eq!(serde_json::to_value(&blocks).unwrap(), wire);
    }

    #[test]
    fn string_content_reads_as_text() {
        let m: Message =
            serde_json::from_value(json!({"role": "user", "content": "hello"})).unwrap();
        assert_eq!(m.text(), "hello");
        let r: ContentBlock = serde_json::from_value(
            json!({"type": "tool_result", "tool_use_id": "a", "content": "out", "is_error": true}),
        )
        .unwrap();
        assert_eq!(r, ContentBlock::tool_result("a", "out", true));
    }

    #[test]
    fn stop_reasons_parse_and_print() {
        for s in [
            "end_turn",
            "tool_use",
            "max_tokens",
            "stop_sequence",
            "pause_turn",
            "refusal",
            "model_context_window_exceeded",
            "something_new",
        ] {
            assert_eq!(StopReason::parse(s).as_str(), s);
        }
        assert_eq!(
            StopReason::parse("weird"),
            StopReason::Other("weird".into())
        );
    }

    #[test]
    fn caching_uses_two_breakpoints_at_most() {
        let mut req = Request::new("m", 10, vec![Message::user_text("a")]);
        req.system = vec![SystemBlock::text("sys")];
        req.tools = vec![ToolDefinition {
            name: "t".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            cache_control: Some(CacheControl::ephemeral()),
        }]
        .into();
        if let ContentBlock::Text(t) = &mut req.messages.make_mut()[0].content[0] {
            t.cache_control = Some(CacheControl::ephemeral());
        }
        req.apply_prompt_caching();
        assert_eq!(req.cache_breakpoints(), 2);
        assert!(req.system[0].cache_control.is_some());
        let wire = serde_json::to_value(&req).unwrap();
        assert_eq!(wire["cache_control"], json!({"type": "ephemeral"}));
        assert!(wire["tools"][0].get("cache_control").is_none());
    }
}
