//! What a hook reads on stdin: Claude Code's JSON contract. Calls of cadre's built-in tools
//! that have a Claude Code twin are shown by the twin's name and field names (`Bash` with
//! `command`, `Edit` with `file_path`, `old_string`, `new_string`, …), so a script written
//! for Claude Code works unchanged; an `updatedInput` it sends back is mapped to cadre's
//! fields.

use crate::vocab::agent_path::AgentPath;
use crate::vocab::hooks::HookEvent;
use cadre_tools::claude_code_name;
use cadre_tools::ToolOutput;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Who an agent is and where it works, as every hook's input tells it.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    /// The run's id (Claude Code's `session_id`).
    pub session_id: String,
    /// The agent's transcript file, when the run writes one.
    pub transcript_path: Option<PathBuf>,
    /// The folder it works in (its worktree, for an isolated subagent).
    pub cwd: PathBuf,
    /// Its permission mode, by Claude Code's names.
    pub permission_mode: &'static str,
    /// Its path (`main/explore#2`); its parent's is told with it for a subagent.
    pub agent_id: AgentPath,
    /// Its type.
    pub agent_type: String,
}

impl Who {
    /// Whether it is a subagent (its hooks are told its id and its parent's).
    pub(crate) fn is_subagent(&self) -> bool {
        !self.agent_id.is_primary()
    }
}

/// Claude Code's name for a cadre permission mode (`auto` lets everything through as
/// `bypassPermissions` does, `deny-writes` refuses what is not allowed as `dontAsk` does).
pub(crate) fn claude_mode(mode: crate::PermissionMode) -> &'static str {
    match mode {
        crate::PermissionMode::Auto => "bypassPermissions",
        crate::PermissionMode::Ask => "default",
        crate::PermissionMode::DenyWrites => "dontAsk",
        crate::PermissionMode::Plan => "plan",
    }
}

/// The JSON a hook of `event` reads, with the event's own `fields` after the common ones.
pub(crate) fn hook_input(who: &Who, event: HookEvent, fields: Map<String, Value>) -> Vec<u8> {
    let mut o = Map::new();
    o.insert("session_id".into(), who.session_id.clone().into());
    if let Some(t) = &who.transcript_path {
        o.insert("transcript_path".into(), t.display().to_string().into());
    }
    o.insert("cwd".into(), who.cwd.display().to_string().into());
    o.insert("permission_mode".into(), who.permission_mode.into());
    o.insert("hook_event_name".into(), event.name().into());
    o.insert("agent_type".into(), who.agent_type.clone().into());
    if let Some(parent) = who.agent_id.parent() {
        o.insert("agent_id".into(), who.agent_id.as_str().into());
        o.insert("parent_agent_id".into(), parent.as_str().into());
    }
    o.extend(fields);
    serde_json::to_vec(&Value::Object(o)).unwrap_or_default()
}

/// cadre's field names of a built-in tool and Claude Code's for the same thing; fields not
/// listed are named alike.
fn fields_of(tool: &str) -> &'static [(&'static str, &'static str)] {
    match tool {
        "read_file" | "write_file" | "edit_file" => &[("path", "file_path")],
        "bash" => &[("timeout_ms", "timeout")],
        "grep" => &[
            ("case_insensitive", "-i"),
            ("context", "-C"),
            ("max_results", "head_limit"),
        ],
        _ => &[],
    }
}

/// The name a hook is told for `tool`: Claude Code's twin's, else its own.
pub(crate) fn tool_name(tool: &str) -> &str {
    claude_code_name(tool).unwrap_or(tool)
}

/// A call's input as Claude Code's hooks read it: its twin's field names, file paths
/// absolute (resolved from `root`, as Claude Code gives them).
pub(crate) fn tool_input(tool: &str, input: &Value, root: &Path) -> Value {
    let fields = fields_of(tool);
    let Some(map) = input.as_object().filter(|_| !fields.is_empty()) else {
        return input.clone();
    };
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        match fields.iter().find(|(cadre, _)| cadre == key) {
            Some((_, "file_path")) => {
                let path = value.as_str().map_or_else(
                    || value.clone(),
                    |p| root.join(p).display().to_string().into(),
                );
                out.insert("file_path".into(), path);
            }
            Some((_, claude)) => {
                out.insert((*claude).into(), value.clone());
            }
            None => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// The input a call runs with after a hook's `updatedInput`: the model's input with the
/// fields the hook gave (by Claude Code's names or cadre's) put over it.
pub(crate) fn updated_input(tool: &str, original: &Value, updated: &Value) -> Value {
    let Some(updated) = updated.as_object() else {
        return original.clone();
    };
    let fields = fields_of(tool);
    let mut out = original.as_object().cloned().unwrap_or_default();
    for (key, value) in updated {
        let cadre = fields
            .iter()
            .find(|(_, claude)| claude == key)
            .map_or(key.as_str(), |(cadre, _)| cadre);
        out.insert(cadre.to_owned(), value.clone());
    }
    Value::Object(out)
}

/// A call's result as Claude Code's `PostToolUse` hooks read it (`tool_response`): for the
/// built-in tools an object shaped like their twin's, for the others the output's text.
pub(crate) fn tool_response(tool: &str, claude_input: &Value, out: &ToolOutput) -> Value {
    let file_path = || {
        claude_input
            .get("file_path")
            .cloned()
            .unwrap_or(Value::Null)
    };
    match tool {
        "bash" => serde_json::json!({
            "stdout": out.content,
            "stderr": "",
            "interrupted": false,
        }),
        "write_file" | "edit_file" => serde_json::json!({
            "filePath": file_path(),
            "success": !out.is_error,
            "output": out.content,
        }),
        "read_file" => serde_json::json!({
            "type": "text",
            "file": {"filePath": file_path(), "content": out.content},
        }),
        _ => Value::String(out.content.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn built_in_calls_are_shown_with_claude_code_fields_and_mapped_back() {
        let root = Path::new("/project");
        let edit = json!({"path": "src/a.rs", "old_string": "a", "new_string": "b"});
        let shown = tool_input("edit_file", &edit, root);
        assert_eq!(
            shown,
            json!({"file_path": "/project/src/a.rs", "old_string": "a", "new_string": "b"})
        );
        assert_eq!(tool_name("edit_file"), "Edit");
        assert_eq!(tool_name("mcp__x__y"), "mcp__x__y");
        let bash = json!({"command": "ls", "timeout_ms": 5});
        assert_eq!(
            tool_input("bash", &bash, root),
            json!({"command": "ls", "timeout": 5})
        );
        // What a hook sends back, by Claude Code's names, lands on cadre's fields.
        let back = updated_input("bash", &bash, &json!({"command": "ls -la", "timeout": 9}));
        assert_eq!(back, json!({"command": "ls -la", "timeout_ms": 9}));
        let back = updated_input(
            "write_file",
            &json!({"path": "a", "content": "x"}),
            &json!({"file_path": "/project/b"}),
        );
        assert_eq!(back, json!({"path": "/project/b", "content": "x"}));
        // Not an object: the model's input stands.
        assert_eq!(updated_input("bash", &bash, &json!("rm")), bash);
    }

    #[test]
    fn the_input_says_who_the_agent_is() {
        let mut who = Who {
            session_id: "run-1".into(),
            transcript_path: Some("/t/main.jsonl".into()),
            cwd: "/project".into(),
            permission_mode: "default",
            agent_id: "main".into(),
            agent_type: "main".into(),
        };
        let mut fields = Map::new();
        fields.insert("tool_name".into(), "Bash".into());
        let main: Value =
            serde_json::from_slice(&hook_input(&who, HookEvent::PreToolUse, fields.clone()))
                .unwrap();
        assert_eq!(main["session_id"], "run-1");
        assert_eq!(main["hook_event_name"], "PreToolUse");
        assert_eq!(main["tool_name"], "Bash");
        assert_eq!(main["transcript_path"], "/t/main.jsonl");
        assert!(main.get("agent_id").is_none());
        who.agent_id = "main/explore#1".into();
        who.agent_type = "explore".into();
        let sub: Value =
            serde_json::from_slice(&hook_input(&who, HookEvent::PreToolUse, fields)).unwrap();
        assert_eq!(sub["agent_id"], "main/explore#1");
        assert_eq!(sub["agent_type"], "explore");
        assert_eq!(sub["parent_agent_id"], "main");
    }
}
