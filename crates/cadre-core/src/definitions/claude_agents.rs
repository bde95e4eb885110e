//! Claude Code agent files: Markdown with YAML front matter (`name`, `description`, `tools`,
//! `model`, …) whose body is the system prompt, read into an [`AgentSpec`].
//!
//! They load as subagent types, as they are in Claude Code. Every Claude Code field is
//! understood: mapped to a spec field, or reported once as ignored. Claude Code tool names
//! map to cadre's (`Read` → `read_file`, …); tools cadre lacks and names that are no tool
//! are dropped with a warning so the rest of the file still works.

use crate::definitions::agent_hooks::read_hooks;
use crate::definitions::fields::{scalar_text, Fields};
use crate::definitions::frontmatter::{self, split, FrontMatterError};
use crate::definitions::problem::{Locator, Report};
use crate::definitions::spec::{
    check_name, valid_model, AgentSpec, McpServerRef, Mode, Problem, INHERIT_MODEL,
    LISTED_DESCRIPTION_CHARS,
};
use crate::definitions::yaml::{Mapping, Value};
use std::path::Path;

/// `max_turns` when the file gives no `maxTurns`, as for cadre's own agent files.
const DEFAULT_MAX_TURNS: u32 = 30;

/// The front matter keys Claude Code defines and cadre maps to a spec field.
pub const MAPPED_KEYS: [&str; 14] = [
    "name",
    "description",
    "tools",
    "disallowedTools",
    "model",
    "permissionMode",
    "maxTurns",
    "skills",
    "mcpServers",
    "background",
    "isolation",
    "color",
    "effort",
    "hooks",
];

/// Claude Code keys cadre reads but does not act on, and why.
const IGNORED_KEYS: [(&str, &str); 2] = [
    ("memory", "cadre does not keep Claude Code agent memory"),
    (
        "initialPrompt",
        "a subagent starts with the prompt of its Task call",
    ),
];

/// Parses one Claude Code agent file. Returns the agent type unless there was an error, and
/// every problem found (repairs are warnings). A file without front matter is only a
/// warning, so a README beside the agent files does no harm.
pub fn parse(file: &Path, text: &str) -> (Option<AgentSpec>, Vec<Problem>) {
    let FrontMatter {
        yaml,
        body,
        map,
        mut problems,
    } = match FrontMatter::read(file, text) {
        Ok(read) => read,
        Err(problem) => return (None, vec![problem]),
    };
    let at = |key: &str, needle: Option<&str>| frontmatter::locate(&yaml, key, needle);
    warn_unmapped_keys(file, &map, &at, &mut problems);
    let (mut spec, max_turns) = read_fields(file, &yaml, &map, &mut problems);
    let mut report = Report {
        file,
        at: &at,
        problems: &mut problems,
    };
    check_fields(&spec, &mut report);
    spec.max_turns = checked_max_turns(max_turns, &mut report);
    spec.prompt = body.trim().to_owned();
    if spec.prompt.is_empty() {
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
    spec.repair(file, &mut problems, &at);
    (Some(spec), problems)
}

/// An agent file cut in two: its front matter, read, and its body.
struct FrontMatter<'t> {
    /// The front matter's text.
    yaml: String,
    /// The text after it: the prompt.
    body: &'t str,
    /// Its keys and values.
    map: Mapping,
    /// What reading it repaired.
    problems: Vec<Problem>,
}

impl<'t> FrontMatter<'t> {
    /// Cuts `text` and reads its front matter; the one problem that stops it otherwise (no
    /// front matter is a warning only).
    fn read(file: &Path, text: &'t str) -> Result<Self, Problem> {
        let (yaml, body) = match split(text) {
            Ok(parts) => parts,
            Err(FrontMatterError::Missing) => return Err(Problem::warning_at(
                file,
                (1, 1),
                "skipped: no front matter, so this is not an agent file (an agent file starts with `---`, then name, description and tools, then `---`, then its prompt)",
            )),
            Err(e) => return Err(Problem::at(file, (1, 1), e.to_string())),
        };
        let (map, problems) = match crate::definitions::yaml::read(file, &yaml, 2) {
            Ok((Value::Mapping(map), problems)) => (map, problems),
            Ok((Value::Null, problems)) => (Mapping::new(), problems),
            Ok(_) => {
                return Err(Problem::at(
                    file,
                    (2, 1),
                    "the front matter must be YAML keys and values (name: …, description: …)",
                ))
            }
            Err(e) => {
                let (pos, msg) = frontmatter::yaml_error(&e);
                return Err(Problem::at(file, pos, msg));
            }
        };
        Ok(Self {
            yaml,
            body,
            map,
            problems,
        })
    }
}

/// Warns of each key cadre does not map: why it is ignored, or that it is unknown.
fn warn_unmapped_keys(file: &Path, map: &Mapping, at: &Locator, problems: &mut Vec<Problem>) {
    for key in map.keys() {
        let key = scalar_text(key).unwrap_or_default();
        if MAPPED_KEYS.contains(&key.as_str()) {
            continue;
        }
        let message = match IGNORED_KEYS.iter().find(|(k, _)| *k == key) {
            Some((_, why)) => format!("`{key}` ignored: {why}"),
            None => format!(
                "unknown key `{key}` ignored; the keys of a Claude Code agent file are: {}",
                MAPPED_KEYS.join(", ")
            ),
        };
        problems.push(Problem::warning_at(file, at(&key, None), message));
    }
}

/// The spec the mapped keys give (its prompt and `max_turns` yet to be set), and the
/// `maxTurns` written, if any.
fn read_fields(
    file: &Path,
    yaml: &str,
    map: &Mapping,
    problems: &mut Vec<Problem>,
) -> (AgentSpec, Option<u64>) {
    let mut fields = Fields {
        file,
        yaml,
        map,
        problems,
    };
    let name = fields.string("name").unwrap_or_default();
    let description = fields.string("description").unwrap_or_default();
    let model = fields
        .string("model")
        .unwrap_or_else(|| INHERIT_MODEL.to_owned());
    let max_turns = fields.number("maxTurns");
    // Without `tools`, a Claude Code agent gets every tool; an empty value gives none.
    let tools = if fields.has("tools") {
        fields.words("tools")
    } else {
        vec!["*".to_owned()]
    };
    let disallowed_tools = fields.words("disallowedTools");
    // Claude Code's `skills` preloads those skills; every skill stays listed, as in cadre.
    let preload_skills = fields.words("skills");
    let permission_mode = fields.string("permissionMode");
    let isolation = fields.string("isolation");
    let color = fields.string("color");
    let effort = fields.string("effort");
    let background = fields.boolean("background").unwrap_or(false);
    let mcp_servers = map
        .get("mcpServers")
        .map(|v| mcp_servers(file, yaml, v, problems))
        .unwrap_or_default();
    let at = |needle: Option<&str>| frontmatter::locate(yaml, "hooks", needle);
    let hooks = map
        .get("hooks")
        .map(|v| read_hooks(file, v, problems, &at))
        .unwrap_or_default();
    let spec = AgentSpec {
        name,
        description: description.trim().to_owned(),
        mode: Mode::Subagent,
        model,
        tools,
        disallowed_tools,
        max_turns: DEFAULT_MAX_TURNS,
        preload_skills,
        permission_mode,
        mcp_servers,
        isolation,
        background,
        color,
        effort,
        hooks,
        source: Some(file.to_path_buf()),
        ..AgentSpec::default()
    };
    (spec, max_turns)
}

/// Checks the name, description and model read into `spec`.
fn check_fields(spec: &AgentSpec, report: &mut Report) {
    let name = &spec.name;
    match check_name(name) {
        Err(msg) => report.push(
            false,
            "name",
            Some(name).filter(|n| !n.is_empty()).map(String::as_str),
            msg,
        ),
        Ok(Some(msg)) => report.push(true, "name", Some(name), msg),
        Ok(None) => {}
    }
    if spec.description.is_empty() {
        report.push(
            false,
            "description",
            None,
            "missing description: say what this agent is for, so a parent can choose it".into(),
        );
    }
    let chars = spec.description.chars().count();
    if chars > LISTED_DESCRIPTION_CHARS {
        report.push(
            true,
            "description",
            None,
            format!("description is {chars} characters; it is shortened to {LISTED_DESCRIPTION_CHARS} where it is listed to a parent"),
        );
    }
    if !valid_model(&spec.model) {
        report.push(
            false,
            "model",
            Some(&spec.model),
            format!(
                "unknown model {:?}: expected inherit, opus, sonnet, haiku or a full model id",
                spec.model
            ),
        );
    }
}

/// The `max_turns` a written `maxTurns` gives: the default when it is missing, or is not
/// at least 1 (an error).
fn checked_max_turns(written: Option<u64>, report: &mut Report) -> u32 {
    match written.map(u32::try_from) {
        None => DEFAULT_MAX_TURNS,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            report.push(
                false,
                "maxTurns",
                None,
                "maxTurns must be at least 1".into(),
            );
            DEFAULT_MAX_TURNS
        }
    }
}

/// `mcpServers`: a list whose items are a server's name or a map of inline servers (name →
/// `.mcp.json` definition), or one such map, or names in one string. Anything else is
/// dropped with a warning.
fn mcp_servers(
    file: &Path,
    yaml: &str,
    value: &Value,
    problems: &mut Vec<Problem>,
) -> Vec<McpServerRef> {
    let mut out = Vec::new();
    let drop = |problems: &mut Vec<Problem>, why: String| {
        let pos = frontmatter::locate(yaml, "mcpServers", None);
        problems.push(Problem::warning_at(file, pos, why));
    };
    let items: Vec<Value> = match value {
        Value::Null => Vec::new(),
        Value::Sequence(items) => items.clone(),
        Value::String(s) => s
            .split([',', ' '])
            .filter(|n| !n.is_empty())
            .map(|n| Value::String(n.to_owned()))
            .collect(),
        other => vec![other.clone()],
    };
    for item in items {
        match item {
            Value::String(name) => out.push(McpServerRef::Name(name)),
            Value::Mapping(map) => {
                let mut servers = std::collections::BTreeMap::new();
                for (k, v) in map {
                    let key = scalar_text(&k).unwrap_or_default();
                    match serde_json::to_value(&v) {
                        Ok(json) => {
                            servers.insert(key, json);
                        }
                        Err(e) => drop(problems, format!("MCP server {key:?} ignored: {e}")),
                    }
                }
                if !servers.is_empty() {
                    out.push(McpServerRef::Inline(servers));
                }
            }
            other => drop(
                problems,
                format!("mcpServers entry {other:?} ignored: expected a server's name or a map of name to definition"),
            ),
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
        // Claude Code preloads the skills it names; every skill stays listed.
        assert_eq!(spec.preload_skills, ["code-review"]);
        assert_eq!(spec.skills, ["*"]);
    }

    #[test]
    fn missing_and_unknown_tools_are_dropped_with_warnings_and_mcp_tools_kept() {
        let (spec, problems) = parse_ok(
            "---\nname: a\ndescription: d\ntools: Read, WebFetch, mcp__github__search, Bash(git diff:*)\ndisallowedTools: Bash(git diff --no-index:*)\npermissionMode: dontAsk\n---\np\n",
        );
        // The pattern gives bash, limited to what it matches; the deny pattern is a rule.
        assert_eq!(spec.tools, ["read_file", "mcp__github__search", "bash"]);
        assert_eq!(spec.limited_tools, ["bash"]);
        assert_eq!(spec.permissions.allow, ["Bash(git diff:*)"]);
        assert_eq!(spec.permissions.deny, ["Bash(git diff --no-index:*)"]);
        assert_eq!(spec.own_mode(), Some(crate::PermissionMode::DenyWrites));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems.iter().all(|p| p.warning && p.line == 4));
        assert_eq!(problems[0].column, 14);
        let (spec, problems) =
            parse_ok("---\nname: a\ndescription: d\ntools: Read, Teleport\n---\np\n");
        assert_eq!(spec.tools, ["read_file"]);
        assert!(
            problems[0]
                .to_string()
                .starts_with("a.md:4:14: warning: unknown tool \"Teleport\" dropped from tools"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn bad_files_say_where() {
        let cases = [
            ("# readme\n", "no front matter", (1, 1), true),
            ("---\nname: a\n", "not closed", (1, 1), false),
            (
                "---\nname: bad name\ndescription: d\n---\np\n",
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
