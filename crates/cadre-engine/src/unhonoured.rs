//! What a call asks for that a worker cannot honour. The client refuses such a run before it
//! starts; a worker checks the call again rather than trust whoever sent it, since anyone
//! who reaches Restate's ingress can send one.

use crate::wire::AgentCall;
use cadre_core::internal::unhonoured_by_workers;
use cadre_core::PermissionMode;

/// One line for each thing in `call` a worker cannot honour; empty when it can run it.
pub fn unhonoured(call: &AgentCall) -> Vec<String> {
    let mut out = Vec::new();
    // The agent's own type travels beside the run's types, and may differ from them.
    let types =
        std::iter::once(&call.agent.spec).chain(call.settings.agents.iter().map(|w| &w.spec));
    for line in types.flat_map(unhonoured_by_workers) {
        if !out.contains(&line) {
            out.push(line);
        }
    }
    if call.settings.permissions.mode == PermissionMode::Ask {
        out.push(
            "permission mode ask: it asks a person at a terminal, and workers have none (deny-writes with allow rules refuses what ask would ask about)".to_owned(),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::AgentCall;
    use serde_json::{json, Value};

    fn call(own: Value, agents: &[Value], mode: &str) -> AgentCall {
        serde_json::from_value(json!({
            "run": "r",
            "agent": {"path": "main", "depth": 0, "spec": own, "model": "m", "description": "d", "prompt": "p"},
            "settings": {
                "workspace": {"kind": "local"},
                "agents": agents.iter().map(|a| json!({"spec": a})).collect::<Vec<_>>(),
                "max_parallel": 1, "max_depth": 1, "max_fanout": 1, "max_tokens": 1,
                "context_tokens": 1, "permissions": {"mode": mode},
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_plain_call_is_honoured_and_each_thing_a_worker_cannot_do_is_named_once() {
        let plain = json!({"name": "main", "prompt": "p"});
        assert!(unhonoured(&call(
            plain.clone(),
            std::slice::from_ref(&plain),
            "deny-writes"
        ))
        .is_empty());
        let hook =
            json!([{"event": "PreToolUse", "command": "true", "timeout_secs": 1, "source": "s"}]);
        let hooked = json!({"name": "main", "prompt": "p", "hooks": hook});
        let served = json!({"name": "x", "prompt": "p", "mcp_servers": ["files"]});
        let teamed =
            json!({"name": "main", "prompt": "p", "tools": ["SendMessage"], "hooks": hook});
        let lines = unhonoured(&call(hooked.clone(), &[hooked, served], "ask"));
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("agent type main has hooks (PreToolUse)"));
        assert!(lines[1].contains("agent type x names MCP servers"));
        assert!(lines[2].contains("permission mode ask"));
        // Hooks of one event apart from each other: the event is named once.
        let hooks = json!([
            {"event": "PreToolUse", "command": "true", "timeout_secs": 1, "source": "s"},
            {"event": "Stop", "command": "true", "timeout_secs": 1, "source": "s"},
            {"event": "PreToolUse", "command": "false", "timeout_secs": 1, "source": "s"},
        ]);
        let spread = json!({"name": "main", "prompt": "p", "hooks": hooks});
        let lines = unhonoured(&call(spread, &[], "auto"));
        assert!(
            lines[0].contains("has hooks (PreToolUse, Stop):"),
            "{lines:?}"
        );
        let lines = unhonoured(&call(teamed, &[plain], "auto"));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("teams run only in one process")),
            "{lines:?}"
        );
    }
}
