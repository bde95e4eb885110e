//! Agent types: one YAML file each, validated with file:line:column problems.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where an agent type may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Only as the agent a person talks to.
    Primary,
    /// Only as a subagent spawned by `Task`.
    #[default]
    Subagent,
    /// Either.
    All,
}

impl Mode {
    /// Whether `cadre run --agent` may pick it.
    pub fn is_primary(self) -> bool {
        matches!(self, Self::Primary | Self::All)
    }

    /// Whether `Task` may spawn it.
    pub fn is_subagent(self) -> bool {
        matches!(self, Self::Subagent | Self::All)
    }
}

/// One agent type, as written in its YAML file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Unique name of `[a-z0-9-]`.
    pub name: String,
    /// What it is for; the parent reads this to choose it.
    #[serde(default)]
    pub description: String,
    /// Where it may run.
    #[serde(default)]
    pub mode: Mode,
    /// `inherit`, an alias (`opus`, `sonnet`, `haiku`) or a full model id.
    #[serde(default = "inherit")]
    pub model: String,
    /// Tools it may use; `"*"` is every tool.
    #[serde(default = "all_tools")]
    pub tools: Vec<String>,
    /// Tools taken away after `tools` is applied.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// Whether it must not change anything (its `bash` runs sandboxed).
    #[serde(default)]
    pub read_only: bool,
    /// Whether its `bash` commands may open TCP connections (denied by the sandbox when
    /// false, on kernels whose Landlock supports it).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub network: bool,
    /// Most model requests it may make.
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Skills it may load; `"*"` is all.
    #[serde(default = "all_tools")]
    pub skills: Vec<String>,
    /// Its system prompt.
    #[serde(default)]
    pub prompt: String,
    /// MCP servers it uses, besides filtering them with `tools`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerRef>,
    /// Where it was loaded from (not part of the file).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// An MCP server an agent type uses: one configured for the run, by name, or its own inline definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpServerRef {
    /// A server from the run's MCP configuration (`.mcp.json` and the like).
    Name(String),
    /// Servers defined here, by name, in the `.mcp.json` format (`{"command", "args", "env"}` or `{"type": "http", "url", "headers"}`); they start with each subagent of this type and stop when it ends.
    Inline(std::collections::BTreeMap<String, serde_json::Value>),
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn inherit() -> String {
    "inherit".into()
}

fn all_tools() -> Vec<String> {
    vec!["*".into()]
}

fn default_max_turns() -> u32 {
    30
}

/// A problem found in an agent or skill file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, 0 when unknown.
    pub line: usize,
    /// 1-based column, 0 when unknown.
    pub column: usize,
    /// What is wrong and what was expected.
    pub message: String,
    /// Whether loading can go on without fixing it (a dropped tool, say).
    pub warning: bool,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.warning { "warning" } else { "error" };
        write!(
            f,
            "{}:{}:{}: {kind}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

impl Problem {
    /// An error at `line:column` of `file`.
    pub fn at(file: &Path, (line, column): (usize, usize), message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line,
            column,
            message: message.into(),
            warning: false,
        }
    }

    /// A warning at `line:column` of `file`: reported, but loading goes on.
    pub fn warning_at(
        file: &Path,
        (line, column): (usize, usize),
        message: impl Into<String>,
    ) -> Self {
        Self {
            warning: true,
            ..Self::at(file, (line, column), message)
        }
    }
}

/// Whether `name` is a valid agent or skill name: 1–64 chars of `[a-z0-9-]`, no leading,
/// trailing or doubled hyphen.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Whether `model` is `inherit`, a known alias, or looks like a full model id (has a digit
/// or one of `-./:`); a bare word that is none of these is a mistyped alias.
pub fn valid_model(model: &str) -> bool {
    matches!(model, "inherit" | "opus" | "sonnet" | "haiku")
        || (!model.is_empty()
            && !model.contains(char::is_whitespace)
            && model
                .chars()
                .any(|c| c.is_ascii_digit() || "-./:".contains(c)))
}

/// Where `needle` first appears in `text` at or after the line that starts with `key:`,
/// as 1-based (line, column); the key's own line when the needle is not found.
pub fn locate(text: &str, key: &str, needle: Option<&str>) -> (usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.starts_with(':'))
        })
        .unwrap_or(0);
    if let Some(needle) = needle.filter(|n| !n.is_empty()) {
        for (i, line) in lines.iter().enumerate().skip(start) {
            if let Some(col) = line.find(needle) {
                return (i + 1, line[..col].chars().count() + 1);
            }
        }
    }
    let col = lines
        .get(start)
        .map_or(0, |l| l.len() - l.trim_start().len());
    (start + 1, col + 1)
}

/// The keys an agent file may use.
pub const KNOWN_KEYS: [&str; 12] = [
    "name",
    "description",
    "mode",
    "model",
    "tools",
    "disallowed_tools",
    "read_only",
    "network",
    "max_turns",
    "skills",
    "prompt",
    "mcp_servers",
];

impl AgentSpec {
    /// Parses one YAML agent file. Every unknown key, and a syntax or shape error, is a
    /// problem with its position; the spec comes back when the known keys parse.
    pub fn parse_yaml(file: &Path, text: &str) -> (Option<Self>, Vec<Problem>) {
        let yaml_problem = |e: serde_yaml::Error, fallback: (usize, usize)| {
            let pos = e.location().map_or(fallback, |l| (l.line(), l.column()));
            // The position is already in front of the message; drop serde_yaml's copy.
            let msg = e.to_string();
            let msg = match msg.rfind(" at line ") {
                Some(i) => msg[..i].to_owned(),
                None => msg,
            };
            Problem::at(file, pos, msg)
        };
        // Unknown keys are reported one by one, then dropped, so one stray key does not
        // hide every other problem of the file.
        let mut problems = Vec::new();
        let value: serde_yaml::Value = match serde_yaml::from_str(text) {
            Ok(v) => v,
            Err(e) => return (None, vec![yaml_problem(e, (0, 0))]),
        };
        let serde_yaml::Value::Mapping(mut map) = value else {
            let msg = "expected a mapping of keys (name: …, description: …, prompt: …)";
            return (None, vec![Problem::at(file, (1, 1), msg)]);
        };
        map.retain(|key, _| {
            let name = key.as_str().unwrap_or_default();
            let known = KNOWN_KEYS.contains(&name);
            if !known {
                problems.push(Problem::at(
                    file,
                    locate(text, name, None),
                    format!(
                        "unknown key `{name}`; expected one of {}",
                        KNOWN_KEYS.join(", ")
                    ),
                ));
            }
            known
        });
        let parsed = if problems.is_empty() {
            serde_yaml::from_str::<AgentSpec>(text).map_err(|e| yaml_problem(e, (0, 0)))
        } else {
            serde_path_to_error::deserialize::<_, AgentSpec>(serde_yaml::Value::Mapping(map))
                .map_err(|e| {
                    // A value knows no positions: find the field the error names.
                    let key = e.path().to_string();
                    let inner = e.into_inner();
                    let mut p = yaml_problem(inner, locate(text, &key, None));
                    if key != "." {
                        p.message = format!("{key}: {}", p.message);
                    }
                    p
                })
        };
        match parsed {
            Ok(mut spec) => {
                spec.source = Some(file.to_path_buf());
                (Some(spec), problems)
            }
            Err(p) => {
                problems.push(p);
                (None, problems)
            }
        }
    }

    /// Checks the fields a parser cannot: name, description, prompt, model and tools.
    /// `known_tool` says whether a tool name exists.
    pub fn validate(
        &self,
        file: &Path,
        text: &str,
        known_tool: &dyn Fn(&str) -> bool,
    ) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut err = |key: &str, needle: Option<&str>, msg: String| {
            problems.push(Problem::at(file, locate(text, key, needle), msg));
        };
        if !valid_name(&self.name) {
            err(
                "name",
                Some(&self.name),
                format!(
                    "bad name {:?}: expected 1–64 characters of a-z, 0-9 and single hyphens inside",
                    self.name
                ),
            );
        }
        if self.description.trim().is_empty() {
            err(
                "description",
                None,
                "missing description: say what this agent is for, so a parent can choose it".into(),
            );
        }
        if self.prompt.trim().is_empty() {
            err(
                "prompt",
                None,
                "missing prompt: the agent's system prompt is required".into(),
            );
        }
        if !valid_model(&self.model) {
            err("model", Some(&self.model), format!(
                "unknown model {:?}: expected inherit, opus, sonnet, haiku or a full model id such as claude-sonnet-5-5",
                self.model
            ));
        }
        if self.max_turns == 0 {
            err("max_turns", None, "max_turns must be at least 1".into());
        }
        for (key, list) in [
            ("tools", &self.tools),
            ("disallowed_tools", &self.disallowed_tools),
        ] {
            for tool in list {
                if tool != "*" && !known_tool(tool) {
                    err(key, Some(tool), format!("unknown tool {tool:?} in {key}"));
                }
            }
        }
        problems
    }
}
