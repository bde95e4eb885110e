//! What the server received — requests, their headers and text — and how routes match them.

use super::*;

/// Which requests a route answers.
#[derive(Clone)]
pub enum Match {
    /// Every request.
    Any,
    /// The text of the first user message contains this.
    FirstUserContains(String),
    /// The text (tool_result text included) of the last user message contains this.
    LastUserContains(String),
    /// The system prompt text (string or blocks) contains this.
    SystemContains(String),
    /// The request offers a tool with this name.
    ToolOffered(String),
    /// This predicate on the request body holds.
    Custom(Arc<dyn Fn(&Value) -> bool + Send + Sync>),
}

impl fmt::Debug for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Any => f.write_str("Any"),
            Match::FirstUserContains(s) => f.debug_tuple("FirstUserContains").field(s).finish(),
            Match::LastUserContains(s) => f.debug_tuple("LastUserContains").field(s).finish(),
            Match::SystemContains(s) => f.debug_tuple("SystemContains").field(s).finish(),
            Match::ToolOffered(s) => f.debug_tuple("ToolOffered").field(s).finish(),
            Match::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl Match {
    /// Whether a request with this body matches.
    pub fn matches(&self, body: &Value) -> bool {
        match self {
            Match::Any => true,
            Match::FirstUserContains(s) => first_user_text(body).contains(s.as_str()),
            Match::LastUserContains(s) => last_user_text(body).contains(s.as_str()),
            Match::SystemContains(s) => system_text(body).contains(s.as_str()),
            Match::ToolOffered(s) => tool_names(body).iter().any(|n| n == s),
            Match::Custom(f) => f(body),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    /// The JSON body (`Null` if it was not JSON).
    pub body: Value,
    /// The headers, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
    /// Whether the whole response body went out: false while it is being answered or held,
    /// and for good when the client left first or the stream was dropped mid-way (a
    /// truncated reply that ended cleanly counts as complete).
    pub completed: bool,
    /// What it read from and wrote to the prompt cache, when the server simulates one
    /// ([`MockServer::simulate_prompt_cache`](crate::MockServer::simulate_prompt_cache)).
    pub cache: Option<crate::cache::CacheUse>,
}

/// One `GET` the server received on an information endpoint (`/v1/models`, `/props`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// The path asked for (`/v1/models` or `/props`).
    pub path: String,
    /// The headers, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
}

impl InfoRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

pub(super) fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

pub(super) fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

impl Captured {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// The `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        messages(&self.body)
    }

    /// The system prompt text; blocks joined with newlines.
    pub fn system_text(&self) -> String {
        system_text(&self.body)
    }

    /// The names of the offered tools.
    pub fn tool_names(&self) -> Vec<String> {
        tool_names(&self.body)
    }

    /// The text of the first user message.
    pub fn first_user_text(&self) -> String {
        first_user_text(&self.body)
    }

    /// The text of the last user message, tool_result text included.
    pub fn last_user_text(&self) -> String {
        last_user_text(&self.body)
    }

    /// Whether the request asked for a streamed response.
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }
}

pub(super) fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub(super) fn is_user(m: &&Value) -> bool {
    m.get("role").and_then(Value::as_str) == Some("user")
}

/// A user message, or (in Chat Completions) a `tool` message carrying a tool result.
pub(super) fn is_user_or_tool(m: &&Value) -> bool {
    matches!(m.get("role").and_then(Value::as_str), Some("user" | "tool"))
}

/// The text of the first user message; for a conversation that opens with a compaction
/// block (which stands in for it), that block's summary.
pub(crate) fn first_user_text(body: &Value) -> String {
    let messages = messages(body);
    if let Some(first) = messages
        .first()
        .filter(|m| crate::compaction::opens_with_compaction(m))
    {
        return first
            .pointer("/content/0/content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
    }
    messages
        .iter()
        .find(is_user)
        .map(|m| content_text(m.get("content")))
        .unwrap_or_default()
}

pub(super) fn last_user_text(body: &Value) -> String {
    messages(body)
        .iter()
        .rfind(is_user_or_tool)
        .map(|m| content_text(m.get("content")))
        .unwrap_or_default()
}

/// The text of a content value (a message's, or a tool_result's): a string, or its text
/// blocks and tool_result contents joined with newlines; empty for anything else.
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("tool_result") => Some(content_text(b.get("content"))),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

pub(super) fn system_text(body: &Value) -> String {
    match body.get("system") {
        Some(system) => content_text(Some(system)),
        // Chat Completions: the system prompt is a message.
        None => messages(body)
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .map(|m| content_text(m.get("content")))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

pub(super) fn tool_names(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t.get("name")
                        .or_else(|| t.pointer("/function/name"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}
