//! Tool names as agent files write them (cadre's names, Claude Code's, MCP tools,
//! `Task(explore)`), mapped to what cadre runs. Shared by cadre's YAML files and Claude Code
//! files, so both repair the same way.

use crate::definitions::permissions::Rule;
use crate::definitions::problem::Problem;

pub use crate::definitions::tool_names::{
    DROPPED_TOOLS, SKILL_TOOL, TASK_OUTPUT_TOOL, TASK_STOP_TOOL, TASK_TOOL, TEAM_TOOL,
    WORKFLOW_TOOL,
};
use cadre_tools::canonical_tool_name;
use std::path::Path;

/// Maps a tool name as written in an agent file (cadre's or a Claude Code alias) to the
/// name cadre uses, or `None` if there is no such tool.
pub fn resolve_tool_name(name: &str) -> Option<&'static str> {
    match name {
        // The tools of background subagents come with Task.
        TASK_TOOL | "task" | "Agent" | TASK_OUTPUT_TOOL | TASK_STOP_TOOL => Some(TASK_TOOL),
        SKILL_TOOL | "skill" => Some(SKILL_TOOL),
        WORKFLOW_TOOL | "workflow" => Some(WORKFLOW_TOOL),
        // The team's tools come together (Claude Code's names; Codex's spelled its way).
        "SendMessage" | "send_message" | "ListMembers" | "list_agents" | "CloseMember"
        | "close_agent" | "TaskCreate" | "TaskUpdate" | "TaskList" | "TaskGet" => Some(TEAM_TOOL),
        other => canonical_tool_name(other),
    }
}

/// Whether `name` is an MCP tool or server (`mcp__<server>`, `mcp__<server>__*`,
/// `mcp__<server>__<tool>`); those are resolved when an agent is built, not here.
pub fn is_mcp_name(name: &str) -> bool {
    name.strip_prefix("mcp__")
        .is_some_and(|rest| !rest.is_empty())
}

/// A `tools` or `disallowed_tools` list after mapping.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct MappedTools {
    /// The names cadre uses, without duplicates, in the order written.
    pub names: Vec<String>,
    /// The subagent types `Task(a, b)` / `Agent(a)` allowed (empty when not restricted).
    pub subagent_types: Vec<String>,
    /// The names as written that were dropped.
    pub dropped: Vec<String>,
    /// Permission rules written as entries (`Bash(git diff:*)`): in `tools`, allow rules
    /// that limit the tool to what they match; in a deny list, deny rules.
    pub rules: Vec<String>,
    /// Tools given only through such rules (not also by name or `*`).
    pub limited: Vec<String>,
}

/// Maps the names of `key` (`tools` or `disallowed_tools` as the file spells it) of `file`.
/// Aliases resolve, `mcp__…` names are kept as written, `Task(a, b)` becomes `Task` with
/// its types; everything else is dropped with a warning placed by `pos` (given the name).
/// In a deny list, a tool cadre lacks anyway is dropped without a warning.
pub fn map_tools(
    file: &Path,
    key: &str,
    written: &[String],
    allow: bool,
    pos: &dyn Fn(&str) -> (usize, usize),
    problems: &mut Vec<Problem>,
) -> MappedTools {
    let mut out = MappedTools::default();
    let mut limited: Vec<String> = Vec::new();
    let push = |names: &mut Vec<String>, name: &str| {
        if !names.iter().any(|t| t == name) {
            names.push(name.to_owned());
        }
    };
    for name in written {
        let warn = |problems: &mut Vec<Problem>, why: String| {
            problems.push(Problem::warning_at(file, pos(name), why));
        };
        if name == "*" || is_mcp_name(name) {
            push(&mut out.names, name);
        } else if let Some(mapped) = resolve_tool_name(name) {
            push(&mut out.names, mapped);
        } else if let Some(types) = task_types(name).filter(|_| allow) {
            push(&mut out.names, TASK_TOOL);
            for t in types {
                push(&mut out.subagent_types, &t);
            }
        } else if let Some(tool) = pattern_tool(name, allow) {
            // A permission rule such as `Bash(git diff:*)`: in `tools` the agent gets the
            // tool, limited to what the rule matches; in a deny list, the rule denies.
            match Rule::parse(name) {
                Ok(_) => {
                    if allow {
                        push(&mut out.names, tool);
                        push(&mut limited, tool);
                    }
                    push(&mut out.rules, name);
                }
                Err(e) => {
                    out.dropped.push(name.clone());
                    warn(
                        problems,
                        format!("tool {name:?} dropped from {key}: {}", e.why),
                    );
                }
            }
        } else {
            out.dropped.push(name.clone());
            let tool = name.split('(').next().unwrap_or_default().trim();
            if DROPPED_TOOLS.contains(&tool) {
                if allow {
                    warn(
                        problems,
                        format!("tool {name:?} dropped from {key}: cadre does not provide it"),
                    );
                }
            } else if name.contains('(') {
                warn(
                    problems,
                    format!("unknown tool {name:?} dropped from {key}: cadre has no such tool"),
                );
            } else {
                let why = match closest_tools(name, &[]).first() {
                    Some(near) => format!("did you mean {near}?"),
                    None => "it is no cadre or Claude Code tool (an MCP server or agent name? MCP tools are written mcp__<server>__<tool>)".to_owned(),
                };
                warn(
                    problems,
                    format!("unknown tool {name:?} dropped from {key}: {why}"),
                );
            }
        }
    }
    out.limited = limited
        .into_iter()
        .filter(|t| !out.names.iter().any(|n| n == "*") && !given_by_name(written, t))
        .collect();
    out
}

/// The tool names, cadre's, Claude Code's or one of `extra`, that `name` most likely
/// misspells (`read_fiel` → `read_file`, `Grpe` → `Grep`), closest first; empty when none
/// is close enough.
pub(crate) fn closest_tools<'a>(name: &str, extra: &[&'a str]) -> Vec<&'a str> {
    // Claude Code's spelling first: of two names alike but for case, it is the one kept.
    let names = cadre_tools::CLAUDE_CODE_NAMES
        .map(|(alias, _)| alias)
        .into_iter()
        .chain(cadre_tools::BUILTIN_TOOL_NAMES)
        .chain([TASK_TOOL, SKILL_TOOL, WORKFLOW_TOOL, TEAM_TOOL])
        .chain(extra.iter().copied());
    let name = name.to_lowercase();
    let mut scored: Vec<(f64, &str)> = names
        .map(|n| (strsim::jaro_winkler(&name, &n.to_lowercase()), n))
        // Close enough to be a slip of the hand, not merely another word.
        .filter(|(score, _)| *score > 0.85)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut out: Vec<&str> = Vec::new();
    for (_, n) in scored {
        // A Claude Code name may be a cadre one in another case (`Grep`, `grep`).
        if !out.iter().any(|o| o.eq_ignore_ascii_case(n)) {
            out.push(n);
        }
    }
    out
}

/// The cadre tool a pattern entry such as `Bash(git diff:*)` or `Edit(src/**)` is about;
/// `None` for plain names and, in `tools`, for `Task(a, b)`, which names subagent types.
fn pattern_tool(name: &str, allow: bool) -> Option<&'static str> {
    let (tool, _) = name.split_once('(')?;
    match resolve_tool_name(tool.trim())? {
        TASK_TOOL if allow => None,
        tool => Some(tool),
    }
}

/// Whether `written` gives `tool` by a plain name (not only through patterns).
fn given_by_name(written: &[String], tool: &str) -> bool {
    written
        .iter()
        .any(|w| !w.contains('(') && resolve_tool_name(w) == Some(tool))
}

/// The types of `Task(a, b)` or `Agent(a)`, split on commas and spaces.
fn task_types(name: &str) -> Option<Vec<String>> {
    let inner = name
        .strip_prefix("Task(")
        .or_else(|| name.strip_prefix("Agent("))?
        .strip_suffix(')')?;
    Some(
        inner
            .split([',', ' '])
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keeps_mcp_restricts_task_and_drops_the_rest() {
        let written: Vec<String> = [
            "Read",
            "read_file",
            "mcp__github__search_issues",
            "mcp__fs",
            "Task(explore, plan)",
            "Bash(git diff:*)",
            "WebFetch",
            "airis-mcp-gateway",
            "*",
        ]
        .map(String::from)
        .to_vec();
        let mut problems = Vec::new();
        let out = map_tools(
            Path::new("a.md"),
            "tools",
            &written,
            true,
            &|_| (4, 1),
            &mut problems,
        );
        assert_eq!(
            out.names,
            [
                "read_file",
                "mcp__github__search_issues",
                "mcp__fs",
                "Task",
                "bash",
                "*"
            ]
        );
        assert_eq!(out.subagent_types, ["explore", "plan"]);
        // A pattern gives its tool and becomes a rule; with `*` nothing is limited.
        assert_eq!(out.rules, ["Bash(git diff:*)"]);
        assert!(out.limited.is_empty());
        assert_eq!(out.dropped, ["WebFetch", "airis-mcp-gateway"]);
        assert_eq!(problems.len(), 2);
        assert!(problems.iter().all(|p| p.warning));
        assert!(problems[1]
            .message
            .contains("unknown tool \"airis-mcp-gateway\""));
        assert!(!problems[1].message.contains("did you mean"));
        assert_eq!(closest_tools("read_fiel", &[]).first(), Some(&"read_file"));
        assert_eq!(closest_tools("Grpe", &[]).first(), Some(&"Grep"));
        assert!(closest_tools("airis-mcp-gateway", &[]).is_empty());
        assert_eq!(closest_tools("my_tol", &["my_tool"]), ["my_tool"]);

        let mut problems = Vec::new();
        let out = map_tools(
            Path::new("a.md"),
            "disallowedTools",
            &["WebFetch".into(), "Bash".into()],
            false,
            &|_| (4, 1),
            &mut problems,
        );
        assert_eq!(out.names, ["bash"]);
        assert!(problems.is_empty());

        // Patterns alone limit their tool; in a deny list they are deny rules.
        let mut problems = Vec::new();
        let written = [
            "Read",
            "Bash(git diff:*)",
            "Bash(git log:*)",
            "Edit(src/**)",
        ];
        let out = map_tools(
            Path::new("a.md"),
            "tools",
            &written.map(String::from),
            true,
            &|_| (4, 1),
            &mut problems,
        );
        assert_eq!(out.names, ["read_file", "bash", "edit_file"]);
        assert_eq!(out.limited, ["bash", "edit_file"]);
        assert_eq!(out.rules.len(), 3);
        let out = map_tools(
            Path::new("a.md"),
            "disallowedTools",
            &["Bash(rm:*)".into(), "Task(code)".into()],
            false,
            &|_| (4, 1),
            &mut problems,
        );
        assert!(out.names.is_empty());
        assert_eq!(out.rules, ["Bash(rm:*)", "Task(code)"]);
        assert!(problems.is_empty(), "{problems:?}");
    }
}
