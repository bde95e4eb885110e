//! A server's tool as one more cadre [`Tool`], named `mcp__<server>__<tool>`.

use crate::server::{RemoteTool, Server};
use async_trait::async_trait;
use cadre_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;
use std::sync::Arc;

/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";
/// The longest tool name the Messages API accepts.
const MAX_NAME: usize = 64;

/// The name the model sees for `tool` of `server`: `mcp__<server>__<tool>`, with characters
/// the API does not allow in tool names replaced by `_`, cut to 64 characters.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!("{PREFIX}{}__{}", clean(server), clean(tool));
    name.truncate(MAX_NAME);
    name
}

/// Splits a `tools:` entry `mcp__<server>[__<tool>]` into its server and tool parts; the
/// tool part is `None` when the entry names the whole server (`mcp__s`, `mcp__s__*`).
pub fn parse_pattern(entry: &str) -> Option<(&str, Option<&str>)> {
    let rest = entry.strip_prefix(PREFIX)?;
    Some(match rest.split_once("__") {
        Some((s, "*" | "")) => (s, None),
        Some((s, t)) => (s, Some(t)),
        None => (rest, None),
    })
}

/// Whether a `tools:` entry names `server` (wholly or one of its tools). Names compare as
/// the model sees them, so `mcp__my_server` names the server `my.server`.
pub fn pattern_names_server(entry: &str, server: &str) -> bool {
    parse_pattern(entry).is_some_and(|(s, _)| tool_name(s, "") == tool_name(server, ""))
}

/// Whether a `tools:` entry names `tool` of `server`: `mcp__<server>` and `mcp__<server>__*`
/// name all of its tools, `mcp__<server>__<tool>` one.
pub fn pattern_matches(entry: &str, server: &str, tool: &str) -> bool {
    pattern_names_server(entry, server)
        && match parse_pattern(entry).and_then(|(_, t)| t) {
            None => true,
            Some(t) => tool_name(server, t) == tool_name(server, tool),
        }
}

/// One tool of one MCP server. MCP tools run outside cadre's sandbox: the server does the work.
pub struct McpTool {
    name: String,
    server: Arc<Server>,
    remote: RemoteTool,
}

impl McpTool {
    /// The tool `remote` of `server`.
    pub fn new(server: Arc<Server>, remote: RemoteTool) -> Self {
        Self {
            name: tool_name(server.name(), &remote.name),
            server,
            remote,
        }
    }

    /// The server it belongs to.
    pub fn server(&self) -> &str {
        self.server.name()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        let d = self.remote.description.trim();
        if d.is_empty() {
            format!(
                "{} (from the MCP server {:?})",
                self.remote.name,
                self.server.name()
            )
        } else {
            d.to_owned()
        }
    }

    fn input_schema(&self) -> Value {
        // The API requires an object schema; a server that sends none still gets one.
        let mut schema = self.remote.input_schema.clone();
        if let Value::Object(map) = &mut schema {
            map.entry("type")
                .or_insert_with(|| Value::String("object".into()));
            schema
        } else {
            serde_json::json!({"type": "object"})
        }
    }

    fn is_read_only(&self) -> bool {
        self.remote.read_only
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(self
            .server
            .call(&self.remote.name, input, &ctx.cancel)
            .await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_api_safe() {
        assert_eq!(
            tool_name("github", "search_issues"),
            "mcp__github__search_issues"
        );
        assert_eq!(tool_name("my.server", "do it"), "mcp__my_server__do_it");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }

    #[test]
    fn patterns_name_servers_and_tools() {
        assert!(pattern_matches("mcp__github", "github", "search"));
        assert!(pattern_matches("mcp__github__*", "github", "search"));
        assert!(pattern_matches("mcp__github__search", "github", "search"));
        assert!(!pattern_matches("mcp__github__search", "github", "create"));
        assert!(!pattern_matches("mcp__git", "github", "search"));
        assert!(!pattern_matches("github", "github", "search"));
        assert!(pattern_matches("mcp__my_server", "my.server", "x"));
        assert!(pattern_names_server("mcp__github__search", "github"));
        assert_eq!(parse_pattern("mcp__s__*"), Some(("s", None)));
        assert_eq!(parse_pattern("read_file"), None);
    }
}
