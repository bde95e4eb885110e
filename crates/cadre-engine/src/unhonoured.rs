//! What a call asks for that a worker cannot honour. The client refuses such a run before it
//! starts; a worker checks the call again rather than trust whoever sent it, since anyone
//! who reaches Restate's ingress can send one.

use crate::wire::AgentCall;
use cadre_core::{AgentSpec, PermissionMode};

/// One line for each thing in `call` a worker cannot honour; empty when it can run it.
pub fn unhonoured(call: &AgentCall) -> Vec<String> {
    let mut out = Vec::new();
    // The agent's own type travels beside the run's types, and may differ from them.
    let types =
        std::iter::once(&call.agent.spec).chain(call.settings.agents.iter().map(|w| &w.spec));
    for line in types.flat_map(of_type) {
        if !out.contains(&line) {
            out.push(line);
        }
    }
    if call.settings.permissions.mode == PermissionMode::Ask {
        out.push(
            "permission mode ask: it asks a person at a terminal, and workers have none".to_owned(),
        );
    }
    if let Some(tool) = call.agent.spec.team_tool() {
        out.push(format!(
            "agent type {} lists {tool}: teams run only in one process",
            call.agent.spec.name
        ));
    }
    out
}

/// What agent type `spec` asks for that a worker cannot honour.
fn of_type(spec: &AgentSpec) -> Vec<String> {
    let mut out = Vec::new();
    if !spec.hooks.is_empty() {
        let mut events: Vec<&str> = spec.hooks.all().iter().map(|h| h.event.name()).collect();
        events.dedup();
        out.push(format!(
            "agent type {} has hooks ({}): workers run no hooks",
            spec.name,
            events.join(", ")
        ));
    }
    if !spec.mcp_servers.is_empty() {
        out.push(format!(
            "agent type {} names MCP servers: workers run none",
            spec.name
        ));
    }
    out
}
