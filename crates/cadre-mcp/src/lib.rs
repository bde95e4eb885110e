//! Talks to MCP servers.
//!
//! Servers are configured in Claude Code's `.mcp.json` format ([`McpConfig`]), started over
//! stdio or streamable HTTP with the official SDK (`rmcp`) when an agent first needs them
//! ([`McpServers`]), and each of their tools becomes one more cadre [`Tool`](cadre_tools::Tool)
//! named `mcp__<server>__<tool>` ([`McpTool`]), so the agent loop never knows the difference.
//! A server's error, crash or silence becomes an `is_error` result naming the server.
//!
//! MCP tools run in the server's process, outside cadre's sandbox; which agents get them
//! is decided by whoever builds the agents (cadre-core).

pub mod config;
pub mod result;
pub mod server;
pub mod servers;
pub mod tool;
mod traced_http;

pub use config::{ConfigProblem, Expansion, McpConfig, ServerConfig, MODEL_CREDENTIALS};
pub use server::{McpError, RemoteTool, Server, Timeouts, BASE_ENV};
pub use servers::McpServers;
pub use tool::{parse_pattern, pattern_matches, pattern_names_server, tool_name, McpTool, PREFIX};
