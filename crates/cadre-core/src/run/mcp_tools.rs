//! Which MCP tools an agent gets.
//!
//! A type sees every server of the run, or only those its `mcp_servers` lists (by name or
//! inline). It gets a server's tools when its `tools` is `"*"` — unless it is read-only: MCP
//! tools run outside the sandbox, so a read-only type gets them only by explicit name — or
//! when `mcp_servers` or a `tools` entry (`mcp__<server>`, `mcp__<server>__*`,
//! `mcp__<server>__<tool>`) names them; `disallowed_tools` takes them away the same way.

use crate::definitions::spec::{AgentSpec, McpServerRef};
use cadre_mcp::{pattern_matches, pattern_names_server, McpTool, ServerConfig};
pub(crate) use cadre_mcp::{McpServers, Server};
use cadre_tools::Tool;
use futures::future::join_all;
use std::sync::Arc;

/// An agent's MCP tools, and the inline servers that live and die with it.
#[derive(Default)]
pub(crate) struct AgentMcp {
    /// The tools offered to it.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Servers started for this agent alone; stop them when it ends.
    pub own: Vec<Arc<Server>>,
}

/// A server the agent may see: its name, its inline definition if it has one, and whether
/// the type names it outright in `mcp_servers`.
struct Candidate {
    name: String,
    inline: Option<serde_json::Value>,
    named: bool,
}

/// Starts (or reuses) the servers agent `path` of type `spec` may use and returns its tools.
/// A server that cannot start is logged and left out; the agent runs without it.
pub(crate) async fn mcp_tools_for(spec: &AgentSpec, servers: &McpServers, path: &str) -> AgentMcp {
    let candidates = candidates(spec, servers);
    let grant = Grant::of(spec);
    let wanted = candidates.iter().filter(|c| grant.wants_server(c));
    let started = join_all(wanted.map(|c| async move { (c, start(c, servers, spec).await) })).await;
    let mut out = AgentMcp::default();
    for (c, server) in started {
        let server = match server {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("{path}: MCP server {:?} is not available: {e}", c.name);
                continue;
            }
        };
        for remote in server.tools() {
            if grant.wants_tool(c, &remote.name) {
                out.tools
                    .push(Arc::new(McpTool::new(server.clone(), remote.clone())));
            }
        }
        if c.inline.is_some() {
            out.own.push(server);
        }
    }
    out
}

/// The servers type `spec` may see: every server of the run, or those its `mcp_servers`
/// lists (by name, or inline), which it then names outright.
fn candidates(spec: &AgentSpec, servers: &McpServers) -> Vec<Candidate> {
    if spec.mcp_servers.is_empty() {
        return servers
            .names()
            .into_iter()
            .map(|name| Candidate {
                name: name.to_owned(),
                inline: None,
                named: false,
            })
            .collect();
    }
    let mut out = Vec::new();
    for entry in &spec.mcp_servers {
        match entry {
            McpServerRef::Name(n) => out.push((n.clone(), None)),
            McpServerRef::Inline(map) => {
                out.extend(map.iter().map(|(n, v)| (n.clone(), Some(v.clone()))));
            }
        }
    }
    out.into_iter()
        .map(|(name, inline)| Candidate {
            name,
            inline,
            named: true,
        })
        .collect()
}

/// Which servers and tools a type's `tools` and `disallowed_tools` give it.
struct Grant<'a> {
    /// The type.
    spec: &'a AgentSpec,
    /// Whether it gets every tool of a server it sees (`"*"`, and not read-only).
    every: bool,
}

impl<'a> Grant<'a> {
    /// The grant of type `spec`.
    fn of(spec: &'a AgentSpec) -> Self {
        let every = spec.tools.iter().any(|t| t == "*") && !spec.read_only;
        Self { spec, every }
    }

    /// Whether `disallowed_tools` takes away `tool` of `server` (the whole server for `None`).
    fn denied(&self, server: &str, tool: Option<&str>) -> bool {
        self.spec.disallowed_tools.iter().any(|t| match tool {
            Some(tool) => t == "*" || pattern_matches(t, server, tool),
            // The whole server is taken away only by an entry naming the whole server.
            None => {
                pattern_names_server(t, server)
                    && cadre_mcp::parse_pattern(t).is_some_and(|(_, t)| t.is_none())
            }
        })
    }

    /// Whether the server `c` is started for it: some of its tools may be granted.
    fn wants_server(&self, c: &Candidate) -> bool {
        let named = self.every
            || c.named
            || self
                .spec
                .tools
                .iter()
                .any(|t| pattern_names_server(t, &c.name));
        named && !self.denied(&c.name, None)
    }

    /// Whether the tool `tool` of server `c` is granted.
    fn wants_tool(&self, c: &Candidate, tool: &str) -> bool {
        let allowed = self.every
            || c.named
            || self
                .spec
                .tools
                .iter()
                .any(|t| pattern_matches(t, &c.name, tool));
        allowed && !self.denied(&c.name, Some(tool))
    }
}

/// Starts (or reuses) the server `c`: one of the run's by name, or its inline definition.
async fn start(
    c: &Candidate,
    servers: &McpServers,
    spec: &AgentSpec,
) -> Result<Arc<Server>, String> {
    match &c.inline {
        None => servers.get(&c.name).await.map_err(|e| e.to_string()),
        Some(value) => match ServerConfig::from_json(value) {
            Ok(config) => servers
                .start_from(&c.name, &config, spec.source.as_deref())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("bad inline definition: {e}")),
        },
    }
}
