//! Which MCP tools an agent gets when cadre is built without its `mcp` feature: none, since
//! no server can be configured or started.

use crate::definitions::spec::AgentSpec;
use cadre_tools::Tool;
use std::sync::Arc;

/// The run's MCP servers: always none without the `mcp` feature.
#[derive(Debug, Default)]
pub(crate) struct McpServers;

impl McpServers {
    /// The servers' names: none.
    pub(crate) fn names(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Stops every server: there is none.
    pub(crate) async fn shutdown(&self) {}
}

/// An MCP server, of which there is none without the `mcp` feature.
pub(crate) enum Server {}

impl Server {
    /// Stops it (never called: no value exists).
    pub(crate) async fn shutdown(&self) {
        match *self {}
    }
}

/// An agent's MCP tools, and the servers that live and die with it: none.
#[derive(Default)]
pub(crate) struct AgentMcp {
    /// The tools offered to it.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Servers started for this agent alone.
    pub own: Vec<Arc<Server>>,
}

/// No MCP tools for anyone.
pub(crate) async fn mcp_tools_for(
    _spec: &AgentSpec,
    _servers: &McpServers,
    _path: &str,
) -> AgentMcp {
    AgentMcp::default()
}
