//! Permission modes and rules as agent files, settings and flags write them, in Claude
//! Code's syntax: `Bash(git diff:*)` (a command prefix), `Bash(npm test)` (exact),
//! `Edit(src/**)`, `Read(./secrets/**)` (gitignore-style globs from the workspace root),
//! bare `Bash` or `Read` for the whole tool, and `mcp__server__tool`.

use crate::definitions::tool_names::{
    DROPPED_TOOLS, SKILL_TOOL, TASK_OUTPUT_TOOL, TASK_STOP_TOOL, TASK_TOOL, WORKFLOW_TOOL,
};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

/// How much an agent may do without a person saying yes, from loosest to strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub enum PermissionMode {
    /// Tools as the agent type allows (deny rules still apply).
    #[default]
    Auto,
    /// Before a writing tool or `bash` outside the allow rules, the person is asked; with
    /// no one to ask, the call is denied.
    Ask,
    /// Writing tools and `bash` outside the allow rules are denied.
    DenyWrites,
    /// Read-only: nothing may change (the kernel sandbox enforces it for `bash`).
    Plan,
}

/// The modes as written, loosest first.
pub const PERMISSION_MODES: [&str; 4] = ["auto", "ask", "deny-writes", "plan"];

impl PermissionMode {
    /// The mode as written (`auto`, `ask`, `deny-writes`, `plan`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Ask => "ask",
            Self::DenyWrites => "deny-writes",
            Self::Plan => "plan",
        }
    }

    /// The stricter of two modes: an agent type can tighten the run's mode, never loosen it.
    pub fn stricter(self, other: Self) -> Self {
        self.max(other)
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermissionMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "ask" => Ok(Self::Ask),
            "deny-writes" | "deny_writes" => Ok(Self::DenyWrites),
            "plan" => Ok(Self::Plan),
            other => Err(format!(
                "unknown permission mode {other:?}: expected {}",
                PERMISSION_MODES.join(", ")
            )),
        }
    }
}

impl Serialize for PermissionMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PermissionMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What an agent file's `permission_mode` (Claude Code's `permissionMode`) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMode {
    /// The mode the type tightens the run to; `None` follows the run.
    pub mode: Option<PermissionMode>,
    /// Claude Code's `acceptEdits`: file edits need no approval.
    pub allow_edits: bool,
}

/// Reads an agent file's permission mode: cadre's names, or Claude Code's (`default` and
/// `acceptEdits` follow the run, `dontAsk` is `deny-writes`, `bypassPermissions` is
/// `auto`, `plan` is `plan`). `Err` for a value that is neither.
pub fn file_mode(written: &str) -> Result<FileMode, String> {
    let mode = |mode| FileMode {
        mode,
        allow_edits: false,
    };
    match written.trim() {
        "" | "default" => Ok(mode(None)),
        "acceptEdits" => Ok(FileMode {
            mode: None,
            allow_edits: true,
        }),
        "dontAsk" => Ok(mode(Some(PermissionMode::DenyWrites))),
        "bypassPermissions" => Ok(mode(Some(PermissionMode::Auto))),
        other => other.parse().map(|m| mode(Some(m))).map_err(|_| {
            format!(
                "unknown permission mode {other:?} ignored: expected {} (or Claude Code's default, acceptEdits, dontAsk, bypassPermissions)",
                PERMISSION_MODES.join(", ")
            )
        }),
    }
}

/// An agent type's own allow and deny rules (`permissions: {allow: [...], deny: [...]}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionRules {
    /// Rules that let a call through without asking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Rules that refuse a call, whatever else allows it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl PermissionRules {
    /// Whether it holds no rule.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// Why a rule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad permission rule {rule:?}: {why}")]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub why: String,
    /// The glob error behind a bad path pattern.
    #[source]
    pub source: Option<globset::Error>,
}

/// One allow or deny rule, read from Claude Code's syntax.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    target: Target,
    spec: Spec,
}

/// The tools a rule is about.
#[derive(Debug, Clone)]
enum Target {
    /// These tools (cadre's names).
    Tools(Vec<String>),
    /// Every tool of this MCP server.
    McpServer(String),
}

/// Which calls of its tools a rule covers.
#[derive(Debug, Clone)]
enum Spec {
    /// Every call.
    Whole,
    /// `bash` commands.
    Command(Command),
    /// Calls on these paths.
    Paths(PathGlob),
    /// `Task` or `Skill` calls naming this agent type or skill.
    Name(String),
}

#[derive(Debug, Clone)]
enum Command {
    Exact(String),
    /// The command, or the command followed by arguments (`git diff:*`).
    Prefix(String),
    /// `*` stands for any text (`npm run *`).
    Wildcard(String),
}

#[derive(Debug, Clone)]
struct PathGlob {
    set: GlobSet,
    /// Whether it matches absolute paths (`//abs`, `~/…`) rather than paths from the root.
    absolute: bool,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The cadre tools a rule's tool name stands for. Claude Code's `Read` rules cover every
/// tool that reads files and its `Edit` rules every tool that edits them.
fn rule_tools(name: &str) -> Option<Vec<&'static str>> {
    let tools: &[&'static str] = match name {
        "Bash" | "bash" => &["bash"],
        "Read" => &["read_file", "list_files", "grep"],
        "Edit" | "MultiEdit" => &["edit_file", "write_file"],
        "Write" => &["write_file"],
        "Glob" | "LS" => &["list_files"],
        "Grep" => &["grep"],
        "Task" | "task" | "Agent" => &[TASK_TOOL],
        "Skill" | "skill" => &[SKILL_TOOL],
        "Workflow" | "workflow" => &[WORKFLOW_TOOL],
        TASK_OUTPUT_TOOL => &[TASK_OUTPUT_TOOL],
        TASK_STOP_TOOL => &[TASK_STOP_TOOL],
        other => return cadre_tools::canonical_tool_name(other).map(|t| vec![t]),
    };
    Some(tools.to_vec())
}

impl Rule {
    /// Reads a rule. `~/` in a path pattern is the user's home (from `HOME`).
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Self::parse_with_home(text, home.as_deref())
    }

    /// Reads a rule, with `home` standing for `~`.
    pub fn parse_with_home(text: &str, home: Option<&Path>) -> Result<Rule, RuleError> {
        let text = text.trim();
        let err = |why: &str| RuleError {
            rule: text.to_owned(),
            why: why.to_owned(),
            source: None,
        };
        let (name, inner) = match text.find('(') {
            Some(open) if text.ends_with(')') => (
                text[..open].trim(),
                Some(text[open + 1..text.len() - 1].trim()),
            ),
            Some(_) => return Err(err("a `(` must be closed by a `)` at the end")),
            None => (text, None),
        };
        let inner = inner.filter(|i| !i.is_empty() && *i != "*");
        if name.is_empty() {
            return Err(err(
                "it names no tool (e.g. Bash, Read, Edit, mcp__server__tool)",
            ));
        }
        if let Some(rest) = name.strip_prefix("mcp__") {
            if inner.is_some() {
                return Err(err(
                    "an MCP rule names a server (mcp__server) or a tool (mcp__server__tool), with nothing in parentheses",
                ));
            }
            let target = match rest.split_once("__") {
                None | Some((_, "*")) => {
                    Target::McpServer(rest.split("__").next().unwrap_or(rest).to_owned())
                }
                Some((_, _)) => Target::Tools(vec![name.to_owned()]),
            };
            return Ok(Rule {
                text: text.to_owned(),
                target,
                spec: Spec::Whole,
            });
        }
        let Some(tools) = rule_tools(name) else {
            let why = if DROPPED_TOOLS.contains(&name) {
                format!("cadre has no {name} tool")
            } else {
                format!("unknown tool {name:?} (Bash, Read, Edit, Write, Glob, Grep, LS, Task, Skill or mcp__server__tool)")
            };
            return Err(err(&why));
        };
        let spec = match inner {
            None => Spec::Whole,
            Some(inner) if tools == ["bash"] => Spec::Command(command_pattern(inner)),
            Some(inner) if tools == [TASK_TOOL] || tools == [SKILL_TOOL] => {
                Spec::Name(inner.to_owned())
            }
            Some(inner) if tools.iter().all(|t| is_path_tool(t)) => {
                Spec::Paths(path_glob(inner, home).map_err(|(why, source)| RuleError {
                    rule: text.to_owned(),
                    why,
                    source,
                })?)
            }
            Some(_) => return Err(err(&format!("{name} takes no pattern; write it bare"))),
        };
        Ok(Rule {
            text: text.to_owned(),
            target: Target::Tools(tools.into_iter().map(str::to_owned).collect()),
            spec,
        })
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the rule is about calls of `tool` (cadre's name).
    pub fn covers_tool(&self, tool: &str) -> bool {
        match &self.target {
            Target::Tools(tools) => tools.iter().any(|t| t == tool),
            Target::McpServer(server) => tool
                .strip_prefix("mcp__")
                .and_then(|rest| rest.strip_prefix(server.as_str()))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("__")),
        }
    }

    /// Whether the rule names a whole tool (`Bash`, `Edit`, `mcp__server`), with no pattern.
    pub fn is_whole_tool(&self) -> bool {
        matches!(self.spec, Spec::Whole)
    }

    /// Whether this rule, as a deny rule, refuses `call`: a `bash` rule refuses a command
    /// any of whose parts (`a && b`, `a | b`, `a; b`) it matches.
    pub fn denies(&self, call: &CallView) -> bool {
        if !self.covers_tool(call.tool) {
            return false;
        }
        match &self.spec {
            Spec::Whole => true,
            Spec::Command(pattern) => {
                let command = call.command().unwrap_or_default();
                let (parts, _) = split_command(command);
                parts
                    .iter()
                    .any(|p| pattern.matches(p) || pattern.matches(&strip_wrappers(p)))
            }
            Spec::Paths(glob) => call.paths.iter().any(|p| glob.matches(p, call.root)),
            Spec::Name(name) => call.name() == Some(name.as_str()),
        }
    }

    /// Whether this rule alone lets `call` through (for `bash`, a rule for the whole tool
    /// or the exact command; see [`allowed_by`] for the rest).
    fn allows(&self, call: &CallView) -> bool {
        if !self.covers_tool(call.tool) {
            return false;
        }
        match &self.spec {
            Spec::Whole => true,
            Spec::Command(Command::Exact(c)) => {
                call.command().is_some_and(|given| normal(given) == *c)
            }
            Spec::Command(_) => false,
            Spec::Paths(glob) => {
                !call.paths.is_empty() && call.paths.iter().all(|p| glob.matches(p, call.root))
            }
            Spec::Name(name) => call.name() == Some(name.as_str()),
        }
    }
}

/// Whether some of `rules` let `call` through. A `bash` command is let through by a rule
/// for the whole of `bash`, one giving it exactly, or when each of its parts (`a && b`,
/// `a | b`) matches some rule; one with command substitution or output written to a file
/// cannot be judged part by part.
pub fn allowed_by<'r>(rules: impl IntoIterator<Item = &'r Rule> + Clone, call: &CallView) -> bool {
    if rules.clone().into_iter().any(|r| r.allows(call)) {
        return true;
    }
    if call.tool != "bash" {
        return false;
    }
    let Some(command) = call.command() else {
        return false;
    };
    let (parts, judged) = split_command(command);
    judged
        && !parts.is_empty()
        && parts.iter().all(|part| {
            rules.clone().into_iter().any(|r| {
                r.covers_tool("bash") && matches!(&r.spec, Spec::Command(p) if p.matches(part))
            })
        })
}

/// One tool call as rules see it.
#[derive(Debug, Clone)]
pub struct CallView<'a> {
    /// The tool's cadre name.
    pub tool: &'a str,
    /// Its input.
    pub input: &'a Value,
    /// The workspace root that relative path patterns start from.
    pub root: &'a Path,
    /// The absolute paths the call is on (as given, and as resolved through symlinks).
    pub paths: Vec<PathBuf>,
}

impl<'a> CallView<'a> {
    /// The view of a call of `tool` with `input` in the workspace at `root`; `resolve`
    /// turns a path the model gave into the real path inside the root, if it can.
    pub fn new(
        tool: &'a str,
        input: &'a Value,
        root: &'a Path,
        resolve: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> Self {
        let mut paths = Vec::new();
        if is_path_tool(tool) {
            let given = input.get("path").and_then(Value::as_str);
            // list_files and grep default to the whole workspace.
            let given = given.or((tool == "list_files" || tool == "grep").then_some("."));
            if let Some(given) = given.filter(|g| !g.trim().is_empty()) {
                let lexical = normalize(&root.join(given));
                if let Some(real) = resolve(given).filter(|r| *r != lexical) {
                    paths.push(real);
                }
                paths.push(lexical);
            }
        }
        Self {
            tool,
            input,
            root,
            paths,
        }
    }

    fn command(&self) -> Option<&str> {
        self.input.get("command").and_then(Value::as_str)
    }

    fn name(&self) -> Option<&str> {
        ["subagent_type", "skill", "name"]
            .iter()
            .find_map(|k| self.input.get(*k).and_then(Value::as_str))
    }

    /// A rule that allows exactly this call, as [`exact_rule`](Self::exact_rule) writes it
    /// (a command holding `*` stays exact, which the written form cannot say).
    pub fn exact(&self) -> Option<Rule> {
        let text = self.exact_rule();
        let mut rule = Rule::parse_with_home(&text, None).ok()?;
        if self.tool == "bash" {
            rule.spec = Spec::Command(Command::Exact(normal(self.command().unwrap_or_default())));
        }
        Some(rule)
    }

    /// The rule that would allow exactly this call (`Bash(npm test)`, `Edit(src/a.rs)`,
    /// `mcp__server__tool`), as the person's "always" remembers it and hints suggest.
    pub fn exact_rule(&self) -> String {
        let rel = |p: &Path| match p.strip_prefix(self.root) {
            Ok(rel) => globset::escape(&rel.to_string_lossy()),
            Err(_) => format!("/{}", globset::escape(&p.to_string_lossy())),
        };
        let path = self.paths.last().map(|p| rel(p));
        match (self.tool, path) {
            ("bash", _) => format!("Bash({})", normal(self.command().unwrap_or_default())),
            ("write_file", Some(p)) => format!("Write({p})"),
            ("edit_file", Some(p)) => format!("Edit({p})"),
            ("read_file" | "list_files" | "grep", Some(p)) => format!("Read({p})"),
            (tool, _) => tool.to_owned(),
        }
    }
}

/// The tools whose rules are path patterns.
fn is_path_tool(tool: &str) -> bool {
    matches!(
        tool,
        "read_file" | "list_files" | "grep" | "edit_file" | "write_file"
    )
}

fn command_pattern(inner: &str) -> Command {
    if let Some(prefix) = inner.strip_suffix(":*") {
        Command::Prefix(normal(prefix))
    } else if inner.contains('*') {
        Command::Wildcard(normal(inner))
    } else {
        Command::Exact(normal(inner))
    }
}

impl Command {
    /// Whether one part of a command (already normalised) matches.
    fn matches(&self, part: &str) -> bool {
        match self {
            Self::Exact(c) => part == c,
            Self::Prefix(p) => {
                p.is_empty()
                    || part == p
                    || part
                        .strip_prefix(p.as_str())
                        .is_some_and(|rest| rest.starts_with(' '))
            }
            Self::Wildcard(w) => {
                wildcard(w, part) || w.strip_suffix(" *").is_some_and(|bare| bare == part)
            }
        }
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any text.
fn wildcard(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    for (i, piece) in pieces.iter().enumerate() {
        if i == pieces.len() - 1 {
            return rest.ends_with(piece);
        }
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// A command with its runs of whitespace made single spaces, trimmed.
fn normal(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A part of a command without what runs it (`sudo`, `env`, `nohup`, `time`, `command`,
/// `exec`) and without leading variable assignments (`A=1 rm x` is `rm x`), so a deny
/// rule is not escaped that way.
fn strip_wrappers(part: &str) -> String {
    let mut words = part.split(' ').peekable();
    while let Some(word) = words.peek() {
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if assignment
            || matches!(
                *word,
                "sudo" | "env" | "nohup" | "time" | "command" | "exec"
            )
        {
            words.next();
        } else {
            break;
        }
    }
    words.collect::<Vec<_>>().join(" ")
}

/// A command split into its parts at `&&`, `||`, `;`, `|`, `&` and newlines outside
/// quotes, each normalised; and whether it can be judged part by part: not when it holds
/// command substitution (`$(…)`, backquotes, `<(…)`) or writes output to a file (`>` other
/// than to `/dev/null` or another descriptor).
fn split_command(command: &str) -> (Vec<String>, bool) {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut judged = true;
    let (mut single, mut double) = (false, false);
    let chars: Vec<char> = command.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if single {
            single = c != '\'';
            current.push(c);
        } else if c == '\\' {
            current.push(c);
            if let Some(n) = next {
                current.push(n);
                i += 1;
            }
        } else if c == '\'' && !double {
            single = true;
            current.push(c);
        } else if c == '"' {
            double = !double;
            current.push(c);
        } else if c == '`' || (c == '$' && next == Some('(')) {
            judged = false;
            current.push(c);
        } else if double {
            current.push(c);
        } else if (c == '<' || c == '>') && next == Some('(') {
            judged = false;
            current.push(c);
        } else if c == '>' {
            let rest: String = chars[i + 1..].iter().collect();
            let rest = rest.trim_start_matches('>').trim_start();
            let harmless = rest.starts_with('&') || rest.starts_with("/dev/null");
            judged &= harmless;
            current.push(c);
        } else if matches!(c, ';' | '\n' | '|' | '&') {
            // `2>&1` and `&>` are redirections, not separators.
            if c == '&' && (current.ends_with('>') || next == Some('>')) {
                current.push(c);
            } else {
                parts.push(normal(&current));
                current.clear();
                if next == Some(c) && c != ';' && c != '\n' {
                    i += 1;
                }
            }
        } else {
            current.push(c);
        }
        i += 1;
    }
    parts.push(normal(&current));
    parts.retain(|p| !p.is_empty());
    (parts, judged)
}

/// A path pattern as a glob set: gitignore-style, relative to the workspace root (`src/**`,
/// `./secrets/**`, `/docs/*.md`; one without a `/` matches at any depth), absolute with
/// `//`, or from the home folder with `~/`. A pattern also covers what is inside a folder it
/// matches.
fn path_glob(
    pattern: &str,
    home: Option<&Path>,
) -> Result<PathGlob, (String, Option<globset::Error>)> {
    let bad = |e: globset::Error| (format!("bad path pattern: {e}"), Some(e));
    let (absolute, body) = if let Some(abs) = pattern.strip_prefix("//") {
        (true, format!("/{abs}"))
    } else if let Some(rest) = pattern.strip_prefix("~/") {
        let home = home.ok_or_else(|| ("`~/` needs HOME to be set".to_owned(), None))?;
        (
            true,
            format!("{}/{rest}", globset::escape(&home.to_string_lossy())),
        )
    } else {
        let rel = pattern.strip_prefix("./").unwrap_or(pattern);
        let anchored = rel.starts_with('/') || rel.trim_end_matches('/').contains('/');
        let rel = rel.trim_start_matches('/');
        if anchored {
            (false, rel.to_owned())
        } else {
            (false, format!("**/{rel}"))
        }
    };
    let body = body.trim_end_matches('/').to_owned();
    let mut set = GlobSetBuilder::new();
    let mut globs = vec![body.clone(), format!("{body}/**")];
    // `secrets/**` covers the folder itself too: a search of it reads what is inside.
    if let Some(folder) = body.strip_suffix("/**").filter(|f| !f.is_empty()) {
        globs.push(folder.to_owned());
    }
    for p in globs {
        let glob = GlobBuilder::new(&p)
            .literal_separator(true)
            .build()
            .map_err(bad)?;
        set.add(glob);
    }
    let set = set.build().map_err(bad)?;
    Ok(PathGlob { set, absolute })
}

impl PathGlob {
    /// Whether the absolute `path` matches, relative patterns being taken from `root`.
    fn matches(&self, path: &Path, root: &Path) -> bool {
        if self.absolute {
            return self.set.is_match(path);
        }
        match path.strip_prefix(root) {
            Ok(rel) if rel.as_os_str().is_empty() => self.set.is_match("."),
            Ok(rel) => self.set.is_match(rel),
            Err(_) => false,
        }
    }
}

/// `path` with `.` and `..` taken out, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(text: &str) -> Rule {
        Rule::parse_with_home(text, Some(Path::new("/home/u"))).unwrap()
    }

    fn view<'a>(tool: &'a str, input: &'a Value) -> CallView<'a> {
        CallView::new(tool, input, Path::new("/ws"), &|_| None)
    }

    fn bash(command: &str) -> Value {
        json!({ "command": command })
    }

    #[test]
    fn bash_rules_match_prefixes_exact_commands_and_wildcards() {
        let diff = rule("Bash(git diff:*)");
        for (command, allowed) in [
            ("git diff", true),
            ("git  diff   --stat", true),
            ("git difftool", false),
            ("git diff && rm -rf /", false),
            ("git diff $(rm -rf /)", false),
            ("git diff > out.txt", false),
            ("git diff 2>/dev/null", true),
        ] {
            let input = bash(command);
            assert_eq!(
                allowed_by([&diff], &view("bash", &input)),
                allowed,
                "{command}"
            );
        }
        let exact = rule("Bash(npm test)");
        assert!(allowed_by([&exact], &view("bash", &bash("npm test"))));
        assert!(!allowed_by(
            [&exact],
            &view("bash", &bash("npm test --watch"))
        ));
        let star = rule("Bash(npm run *)");
        assert!(allowed_by([&star], &view("bash", &bash("npm run build"))));
        assert!(!allowed_by([&star], &view("bash", &bash("npx run build"))));
        // Each part of a compound command needs a rule of its own.
        let head = rule("Bash(head:*)");
        let input = bash("git diff | head -5");
        assert!(allowed_by([&diff, &head], &view("bash", &input)));
        assert!(!allowed_by([&diff], &view("bash", &input)));
        assert!(allowed_by(
            [&rule("Bash")],
            &view("bash", &bash("anything $(at all)"))
        ));
    }

    #[test]
    fn bash_deny_rules_catch_any_part_and_wrappers() {
        let rm = rule("Bash(rm:*)");
        for command in [
            "rm -rf x",
            "ls && rm x",
            "echo hi; rm x",
            "sudo rm x",
            "A=1 rm x",
        ] {
            assert!(rm.denies(&view("bash", &bash(command))), "{command}");
        }
        assert!(!rm.denies(&view("bash", &bash("rmdir x"))));
        assert!(!rm.denies(&view("bash", &bash("echo 'a; rm x'"))));
        assert!(!rm.denies(&view("read_file", &json!({"path": "rm"}))));
    }

    #[test]
    fn path_rules_are_gitignore_style_globs_from_the_root() {
        let secrets = rule("Read(./secrets/**)");
        let read = |p: &str| json!({ "path": p });
        for (tool, path, denied) in [
            ("read_file", "secrets/key", true),
            ("read_file", "./secrets/a/b", true),
            ("read_file", "/ws/secrets/key", true),
            ("read_file", "src/../secrets/key", true),
            ("grep", "secrets", true),
            ("read_file", "src/secrets/key", false),
            ("edit_file", "secrets/key", false),
        ] {
            let input = read(path);
            assert_eq!(secrets.denies(&view(tool, &input)), denied, "{tool} {path}");
        }
        // Without a slash, a pattern matches at any depth, and a folder covers its files.
        let env = rule("Read(*.env)");
        assert!(env.denies(&view("read_file", &read("a/b/prod.env"))));
        let target = rule("Edit(target)");
        assert!(target.denies(&view("write_file", &read("x/target/out.txt"))));
        let src = rule("Edit(src/**)");
        assert!(allowed_by([&src], &view("edit_file", &read("src/a/b.rs"))));
        assert!(allowed_by([&src], &view("write_file", &read("src/new.rs"))));
        assert!(!allowed_by([&src], &view("edit_file", &read("README.md"))));
        let single = rule("Write(docs/*.md)");
        assert!(!single.denies(&view("write_file", &read("docs/a/b.md"))));
        let abs = rule("Read(//etc/**)");
        assert!(abs.denies(&view("read_file", &read("/etc/passwd"))));
        let home = rule("Read(~/.ssh/**)");
        assert!(home.denies(&view("read_file", &read("/home/u/.ssh/id"))));
    }

    #[test]
    fn whole_tools_mcp_and_names() {
        assert!(rule("Bash").denies(&view("bash", &bash("ls"))));
        assert!(rule("Read").covers_tool("grep"));
        let server = rule("mcp__github");
        assert!(server.covers_tool("mcp__github__create_issue"));
        assert!(!server.covers_tool("mcp__githubber__x"));
        assert!(rule("mcp__github__*").covers_tool("mcp__github__x"));
        let one = rule("mcp__github__create_issue");
        assert!(one.covers_tool("mcp__github__create_issue"));
        assert!(!one.covers_tool("mcp__github__list"));
        let task = rule("Task(code)");
        assert!(task.denies(&view("Task", &json!({"subagent_type": "code"}))));
        assert!(!task.denies(&view("Task", &json!({"subagent_type": "explore"}))));
    }

    #[test]
    fn bad_rules_say_why() {
        for (text, why) in [
            ("WebFetch(domain:x)", "cadre has no WebFetch"),
            ("Teleport", "unknown tool"),
            ("Bash(git", "must be closed"),
            ("mcp__x(y)", "MCP rule"),
            ("Read([)", "bad path pattern"),
            ("", "names no tool"),
        ] {
            let e = Rule::parse(text).unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn modes_read_cadre_and_claude_code_names() {
        assert_eq!("deny-writes".parse(), Ok(PermissionMode::DenyWrites));
        assert!("sometimes".parse::<PermissionMode>().is_err());
        assert_eq!(
            PermissionMode::Ask.stricter(PermissionMode::Auto),
            PermissionMode::Ask
        );
        assert_eq!(
            file_mode("dontAsk").unwrap().mode,
            Some(PermissionMode::DenyWrites)
        );
        assert_eq!(file_mode("default").unwrap().mode, None);
        assert!(file_mode("acceptEdits").unwrap().allow_edits);
        assert!(file_mode("yolo").is_err());
    }

    #[test]
    fn exact_rules_name_the_call() {
        let input = bash("npm   test");
        assert_eq!(view("bash", &input).exact_rule(), "Bash(npm test)");
        let input = json!({"path": "src/a*.rs"});
        assert_eq!(view("edit_file", &input).exact_rule(), "Edit(src/a[*].rs)");
        let e = view("edit_file", &input).exact().unwrap();
        assert!(allowed_by([&e], &view("edit_file", &input)));
        assert!(!allowed_by(
            [&e],
            &view("edit_file", &json!({"path": "src/ab.rs"}))
        ));
        // A remembered command with `*` in it stays exact.
        let input = bash("ls *.rs");
        let e = view("bash", &input).exact().unwrap();
        assert!(allowed_by([&e], &view("bash", &input)));
        assert!(!allowed_by([&e], &view("bash", &bash("ls x.rs"))));
    }
}
