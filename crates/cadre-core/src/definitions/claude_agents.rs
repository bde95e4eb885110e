//! Claude Code agent files: Markdown with YAML front matter (`name`, `description`, `tools`,
//! `model`, …) whose body is the system prompt, read into an [`AgentSpec`].
//!
//! They load as subagent types, as they are in Claude Code. Claude Code tool names map to
//! cadre's (`Read` → `read_file`, …); tools cadre lacks are dropped with a warning so the
//! rest of the file still works; a name that is no tool at all is an error.

use crate::definitions::frontmatter::{self, split, FrontMatterError};
use crate::definitions::registry::resolve_tool_name;
use crate::definitions::skills::Fields;
use crate::definitions::spec::{valid_model, valid_name, AgentSpec, Mode, Problem};
use serde_yaml::{Mapping, Value};
use std::path::Path;

/// Claude Code tools cadre does not provide; an agent file naming one still loads, without it.
pub const DROPPED_TOOLS: [&str; 9] = [
    "WebFetch",
    "WebSearch",
    "NotebookEdit",
    "NotebookRead",
    "TodoWrite",
    "BashOutput",
    "KillShell",
    "SlashCommand",
    "ExitPlanMode",
];

/// `max_turns` when the file gives no `maxTurns`, as for cadre's own agent files.
const DEFAULT_MAX_TURNS: u32 = 30;

/// Parses one Claude Code agent file. Returns the agent type unless there was an error, and
/// every problem found (dropped tools are warnings). A file without front matter is only a
/// warning, so a README beside the agent files does no harm.
pub fn parse(file: &Path, text: &str) -> (Option<AgentSpec>, Vec<Problem>) {
    let (yaml, body) = match split(text) {
        Ok(parts) => parts,
        Err(FrontMatterError::Missing) => {
            return (
                None,
                vec![Problem::warning_at(
                    file,
                    (1, 1),
                    "skipped: no front matter, so this is not an agent file (an agent file starts with `---`, then name, description and tools, then `---`, then its prompt)",
                )],
            )
        }
        Err(e) => return (None, vec![Problem::at(file, (1, 1), e.to_string())]),
    };
    let map = match serde_yaml::from_str::<Value>(&yaml) {
        Ok(Value::Mapping(map)) => map,
        Ok(Value::Null) => Mapping::new(),
        Ok(_) => {
            return (
                None,
                vec![Problem::at(
                    file,
                    (2, 1),
                    "the front matter must be YAML keys and values (name: …, description: …)",
                )],
            )
        }
        Err(e) => {
            let (pos, msg) = frontmatter::yaml_error(&e);
            return (None, vec![Problem::at(file, pos, msg)]);
        }
    };
    let mut problems = Vec::new();
    let mut fields = Fields {
        file,
        yaml: &yaml,
        map: &map,
        problems: &mut problems,
    };
    let name = fields.string("name").unwrap_or_default();
    let description = fields.string("description").unwrap_or_default();
    let model = fields
        .string("model")
        .unwrap_or_else(|| "inherit".to_owned());
    let max_turns = fields.number("maxTurns");
    // Without `tools`, a Claude Code agent gets every tool; an empty value gives none.
    let tools = if fields.has("tools") {
        let words = fields.words("tools");
        map_tools(file, &yaml, "tools", &words, true, &mut problems)
    } else {
        vec!["*".to_owned()]
    };
    let mut fields = Fields {
        file,
        yaml: &yaml,
        map: &map,
        problems: &mut problems,
    };
    let denied = fields.words("disallowedTools");
    let skills = if fields.has("skills") {
        fields.words("skills")
    } else {
        vec!["*".to_owned()]
    };
    let disallowed_tools = map_tools(
        file,
        &yaml,
        "disallowedTools",
        &denied,
        false,
        &mut problems,
    );
    let mut error = |key: &str, needle: Option<&str>, message: String| {
        problems.push(Problem::at(
            file,
            frontmatter::locate(&yaml, key, needle),
            message,
        ));
    };
    if !valid_name(&name) {
        error(
            "name",
            Some(&name).filter(|n| !n.is_empty()).map(String::as_str),
            format!(
                "bad name {name:?}: expected 1–64 characters of a-z, 0-9 and single hyphens inside"
            ),
        );
    }
    if description.trim().is_empty() {
        error(
            "description",
            None,
            "missing description: say what this agent is for, so a parent can choose it".into(),
        );
    }
    if !valid_model(&model) {
        error(
            "model",
            Some(&model),
            format!(
                "unknown model {model:?}: expected inherit, opus, sonnet, haiku or a full model id"
            ),
        );
    }
    let max_turns = match max_turns.map(u32::try_from) {
        None => DEFAULT_MAX_TURNS,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            error("maxTurns", None, "maxTurns must be at least 1".into());
            DEFAULT_MAX_TURNS
        }
    };
    let prompt = body.trim().to_owned();
    if prompt.is_empty() {
        // The body starts after the opening line, the front matter and the closing line.
        let line = yaml.lines().count() + 3;
        problems.push(Problem::at(
            file,
            (line, 1),
            "missing prompt: the text after the front matter is the agent's system prompt",
        ));
    }
    if problems.iter().any(|p| !p.warning) {
        return (None, problems);
    }
    let spec = AgentSpec {
        name,
        description: description.trim().to_owned(),
        mode: Mode::Subagent,
        model,
        tools,
        disallowed_tools,
        read_only: false,
        network: true,
        max_turns,
        skills,
        prompt,
        mcp_servers: Vec::new(),
        source: Some(file.to_path_buf()),
    };
    (Some(spec), problems)
}

/// Maps Claude Code tool names to cadre's. Tools cadre lacks are dropped (with a warning
/// when `warn` is set: losing an allowed tool matters, not having a denied one does not).
fn map_tools(
    file: &Path,
    yaml: &str,
    key: &str,
    names: &[String],
    warn: bool,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let pos = || frontmatter::locate(yaml, key, Some(name));
        let mapped = if name == "*" {
            Some("*")
        } else {
            resolve_tool_name(name)
        };
        if let Some(mapped) = mapped {
            if !out.iter().any(|t| t == mapped) {
                out.push(mapped.to_owned());
            }
        } else if name.contains('(') {
            // A permission rule such as `Bash(git diff:*)`: allowing the whole tool instead
            // would give the agent more than its author meant, so it gets none of it.
            if warn {
                problems.push(Problem::warning_at(
                    file,
                    pos(),
                    format!("tool {name:?} dropped: cadre cannot limit a tool to a pattern, so the agent does not get it"),
                ));
            }
        } else if DROPPED_TOOLS.contains(&name.as_str()) || name.starts_with("mcp__") {
            if warn {
                problems.push(Problem::warning_at(
                    file,
                    pos(),
                    format!("tool {name:?} dropped: cadre does not provide it"),
                ));
            }
        } else {
            problems.push(Problem::at(
                file,
                pos(),
                format!("unknown tool {name:?} in {key}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> (AgentSpec, Vec<Problem>) {
        let (spec, problems) = parse(Path::new("a.md"), text);
        (spec.unwrap_or_else(|| panic!("{problems:?}")), problems)
    }

    #[test]
    fn maps_a_claude_code_agent() {
        let (spec, problems) = parse_ok(
            "---\nname: reviewer\ndescription: Reviews code.\ntools: Read, Grep, Glob, Bash, MultiEdit\nmodel: sonnet\ncolor: blue\nmaxTurns: 7\n---\n\nYou review code.\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            spec.tools,
            ["read_file", "grep", "list_files", "bash", "edit_file"]
        );
        assert_eq!(spec.model, "sonnet");
        assert_eq!(spec.mode, Mode::Subagent);
        assert_eq!(spec.max_turns, 7);
        assert_eq!(spec.skills, ["*"]);
        assert_eq!(spec.prompt, "You review code.");
    }

    #[test]
    fn missing_tools_means_all_and_lists_work() {
        let (spec, _) = parse_ok("---\nname: a\ndescription: d\n---\np\n");
        assert_eq!(spec.tools, ["*"]);
        assert_eq!(spec.model, "inherit");
        let (spec, _) = parse_ok(
            "---\nname: a\ndescription: d\ntools: [Read, Task, Skill]\ndisallowedTools: Bash, WebFetch\nskills: [code-review]\n---\np\n",
        );
        assert_eq!(spec.tools, ["read_file", "Task", "Skill"]);
        assert_eq!(spec.disallowed_tools, ["bash"]);
        assert_eq!(spec.skills, ["code-review"]);
    }

    #[test]
    fn missing_tools_are_dropped_with_warnings_and_unknown_ones_are_errors() {
        let (spec, problems) = parse_ok(
            "---\nname: a\ndescription: d\ntools: Read, WebFetch, mcp__github__search, Bash(git diff:*)\n---\np\n",
        );
        assert_eq!(spec.tools, ["read_file"]);
        assert_eq!(problems.len(), 3);
        assert!(problems.iter().all(|p| p.warning && p.line == 4));
        assert_eq!(problems[0].column, 14);
        let (spec, problems) = parse(
            Path::new("a.md"),
            "---\nname: a\ndescription: d\ntools: Read, Teleport\n---\np\n",
        );
        assert!(spec.is_none());
        assert_eq!(
            problems[0].to_string(),
            "a.md:4:14: error: unknown tool \"Teleport\" in tools"
        );
    }

    #[test]
    fn bad_files_say_where() {
        let cases = [
            ("# readme\n", "no front matter", (1, 1), true),
            ("---\nname: a\n", "not closed", (1, 1), false),
            (
                "---\nname: Bad\ndescription: d\n---\np\n",
                "bad name",
                (2, 7),
                false,
            ),
            (
                "---\nname: a\n---\np\n",
                "missing description",
                (1, 1),
                false,
            ),
            (
                "---\nname: a\ndescription: d\n---\n\n",
                "missing prompt",
                (5, 1),
                false,
            ),
            (
                "---\nname: a\ndescription: d\nmodel: sonet\n---\np\n",
                "unknown model",
                (4, 8),
                false,
            ),
            (
                "---\nname: a\ndescription: d\nmaxTurns: 0\n---\np\n",
                "at least 1",
                (4, 1),
                false,
            ),
        ];
        for (text, words, pos, warning) in cases {
            let (spec, problems) = parse(Path::new("a.md"), text);
            assert!(spec.is_none(), "{text}");
            let p = problems
                .iter()
                .find(|p| p.message.contains(words))
                .unwrap_or_else(|| panic!("{words}: {problems:?}"));
            assert_eq!(
                (p.line, p.column, p.warning),
                (pos.0, pos.1, warning),
                "{p}"
            );
        }
    }
}
