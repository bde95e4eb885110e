//! Agent types: one YAML file each, validated with file:line:column problems.

use crate::definitions::hooks::Hooks;
use crate::definitions::permissions::{file_mode, PermissionMode, PermissionRules, Rule};
use crate::definitions::tools::{is_mcp_name, map_tools, resolve_tool_name, SKILL_TOOL, TEAM_TOOL};
use crate::definitions::yaml;

pub(crate) use crate::definitions::problem::Locator;
pub use crate::definitions::problem::{check_name, locate, valid_name, Problem};
use serde::{Deserialize, Serialize};
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

/// An MCP server an agent type uses: one configured for the run, by name, or its own inline definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpServerRef {
    /// A server from the run's MCP configuration (`.mcp.json` and the like).
    Name(String),
    /// Servers defined here, by name, in the `.mcp.json` format (`{"command", "args", "env"}` or `{"type": "http", "url", "headers"}`); they start with each subagent of this type and stop when it ends.
    Inline(std::collections::BTreeMap<String, serde_json::Value>),
}

/// When an agent type's conversation is compacted: at a number of input tokens, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactAt {
    /// Once a request's input reaches this many tokens.
    Tokens(u64),
    /// Never.
    Off,
}

impl CompactAt {
    /// The threshold, `None` for off; values under the API's minimum are raised to it.
    pub fn tokens(self) -> Option<u64> {
        match self {
            Self::Tokens(n) => Some(n.max(cadre_model::MIN_COMPACT_AT)),
            Self::Off => None,
        }
    }
}

impl Serialize for CompactAt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Tokens(n) => s.serialize_u64(*n),
            Self::Off => s.serialize_str("off"),
        }
    }
}

impl<'de> Deserialize<'de> for CompactAt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Flag(bool),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(Self::Tokens(n)),
            Raw::Flag(false) => Ok(Self::Off),
            Raw::Word(w) if matches!(w.trim(), "off" | "never" | "none") => Ok(Self::Off),
            Raw::Word(w) if w.trim().replace('_', "").parse::<u64>().is_ok() => Ok(Self::Tokens(
                w.trim()
                    .replace('_', "")
                    .parse()
                    .unwrap_or(cadre_model::MIN_COMPACT_AT),
            )),
            _ => Err(serde::de::Error::custom(
                "compact_at must be a number of input tokens (at least 50000) or off",
            )),
        }
    }
}

/// One agent type, as written in its YAML file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentSpec {
    /// Its name, unique; usually `[a-z0-9-]` (others load with a warning).
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
    /// Tools it may use; `"*"` is every tool; `mcp__…` names are MCP tools.
    #[serde(default = "all_tools")]
    pub tools: Vec<String>,
    /// Tools taken away after `tools` is applied.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// The subagent types its `Task` tool may start (Claude Code's `Task(a, b)`); empty is any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagent_types: Vec<String>,
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
    /// When its conversation is compacted; unset follows the run (`--compact-at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_at: Option<CompactAt>,
    /// Skills listed to it, loaded on demand with the `Skill` tool; `"*"` is all.
    #[serde(default = "all_tools")]
    pub skills: Vec<String>,
    /// Skills whose bodies go into its system prompt from the start (Claude Code's `skills`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preload_skills: Vec<String>,
    /// Its permission mode (`auto`, `ask`, `deny-writes`, `plan`, or Claude Code's
    /// `permissionMode` values); it can tighten the run's mode, not loosen it. `plan` makes
    /// it read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Its own allow and deny rules (`Bash(git diff:*)`, `Edit(src/**)`, …), on top of the run's.
    #[serde(default, skip_serializing_if = "PermissionRules::is_empty")]
    pub permissions: PermissionRules,
    /// MCP servers it uses (Claude Code's `mcpServers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerRef>,
    /// `worktree`: each subagent of this type works in its own git worktree of HEAD, on its
    /// own branch (Claude Code's `isolation` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// Whether its subagents always run in the background (Claude Code's `background`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub background: bool,
    /// The colour of its line in the live display (`red`, `blue`, `green`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    /// How much effort the model spends on its requests (`low`, `medium`, `high`, `xhigh`,
    /// `max`; Claude Code's `effort`), sent as `output_config.effort`; unset leaves the
    /// model's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// A JSON Schema its final answer must be valid against: the answer is then JSON alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// Its system prompt.
    #[serde(default)]
    pub prompt: String,
    /// Its own hooks (Claude Code's `hooks` object in a file), run for its agents only, after
    /// the run's; a `Stop` hook of a subagent's type runs when that subagent stops.
    #[serde(default, skip_serializing_if = "Hooks::is_empty")]
    pub hooks: Hooks,
    /// Where it was loaded from (not part of the file).
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// Entries of `tools` dropped while loading (not part of the file); when nothing else
    /// is left, spawning it fails and names them.
    #[serde(skip)]
    pub dropped_tools: Vec<String>,
    /// Tools its `tools` gives only through patterns (`Bash(git diff:*)`), so only calls
    /// those allow (not part of the file).
    #[serde(skip)]
    pub limited_tools: Vec<String>,
}

impl Default for AgentSpec {
    /// A spec with the same defaults as a file that gives only its name.
    fn default() -> Self {
        Self {
            name: String::new(),
            description: String::new(),
            mode: Mode::default(),
            model: inherit(),
            tools: all_tools(),
            disallowed_tools: Vec::new(),
            subagent_types: Vec::new(),
            read_only: false,
            network: true,
            max_turns: default_max_turns(),
            compact_at: None,
            skills: all_tools(),
            preload_skills: Vec::new(),
            permission_mode: None,
            permissions: PermissionRules::default(),
            mcp_servers: Vec::new(),
            isolation: None,
            background: false,
            color: None,
            effort: None,
            output_schema: None,
            prompt: String::new(),
            hooks: Hooks::default(),
            source: None,
            dropped_tools: Vec::new(),
            limited_tools: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn inherit() -> String {
    INHERIT_MODEL.into()
}

fn all_tools() -> Vec<String> {
    vec!["*".into()]
}

fn default_max_turns() -> u32 {
    30
}

/// The `model` of an agent type that talks to its parent's model (the default).
pub const INHERIT_MODEL: &str = "inherit";

/// How many characters of a description are shown where agent types and skills are listed
/// in a prompt; longer ones load and are shortened there.
pub const LISTED_DESCRIPTION_CHARS: usize = 1024;

/// Whether `model` is `inherit`, a known alias, or looks like a full model id (has a digit
/// or one of `-./:`); a bare word that is none of these is a mistyped alias.
pub fn valid_model(model: &str) -> bool {
    matches!(model, INHERIT_MODEL | "opus" | "sonnet" | "haiku")
        || (!model.is_empty()
            && !model.contains(char::is_whitespace)
            && model
                .chars()
                .any(|c| c.is_ascii_digit() || "-./:".contains(c)))
}

/// The keys an agent file may use.
pub const KNOWN_KEYS: [&str; 23] = [
    "name",
    "description",
    "mode",
    "model",
    "tools",
    "disallowed_tools",
    "subagent_types",
    "read_only",
    "network",
    "max_turns",
    "compact_at",
    "skills",
    "preload_skills",
    "permission_mode",
    "permissions",
    "mcp_servers",
    "isolation",
    "background",
    "color",
    "effort",
    "output_schema",
    "prompt",
    "hooks",
];

/// The text that places the first event of `hooks` that cannot become JSON (a key that is
/// not text, say), if one can be told.
fn failing_yaml_event(hooks: &yaml::Value) -> Option<String> {
    let yaml::Value::Mapping(map) = hooks else {
        return None;
    };
    map.iter()
        .find(|(k, v)| !k.is_string() || serde_json::to_value(v).is_err())
        .and_then(|(k, _)| yaml::to_string(k).ok())
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
}

/// The text that places the first event or entry of `hooks` that cannot load: the event's
/// name when the event itself is wrong, else the entry's matcher or first command.
fn failing_entry(hooks: &serde_json::Value) -> Option<String> {
    use crate::definitions::hooks::StrictHooks;
    let events = hooks.as_object()?;
    for (event, entries) in events {
        let alone = |v: serde_json::Value| {
            let mut one = serde_json::Map::new();
            one.insert(event.clone(), v);
            serde_json::from_value::<StrictHooks>(serde_json::Value::Object(one)).is_err()
        };
        if !alone(entries.clone()) {
            continue;
        }
        // The event itself is wrong (unknown), or its entries are not a list.
        let list = match entries.as_array() {
            Some(list) if !alone(serde_json::Value::Array(Vec::new())) => list,
            _ => return Some(event.clone()),
        };
        let Some(entry) = list
            .iter()
            .find(|e| alone(serde_json::Value::Array(vec![(*e).clone()])))
        else {
            return Some(event.clone());
        };
        let text = entry.get("matcher").and_then(|m| m.as_str()).or_else(|| {
            entry
                .get("hooks")
                .and_then(|h| h.as_array())
                .and_then(|h| h.iter().find_map(|c| c.get("command")?.as_str()))
        });
        return Some(text.unwrap_or(event).to_owned());
    }
    None
}

/// Reads an agent file's `hooks` (Claude Code's object, in YAML) written in `file`; an entry
/// that cannot load is an error (see [`HOOK_REFUSED`](crate::definitions::hooks::HOOK_REFUSED))
/// placed by `pos` at the text of the failing event or entry (`pos(None)`: the `hooks` key).
pub(crate) fn read_hooks(
    file: &Path,
    value: &yaml::Value,
    problems: &mut Vec<Problem>,
    pos: &dyn Fn(Option<&str>) -> (usize, usize),
) -> Hooks {
    use crate::definitions::hooks::HOOK_REFUSED;
    // A guard that cannot load fails closed: the file is refused, and with it the run.
    let json = match serde_json::to_value(value) {
        Ok(json) => json,
        Err(e) => {
            let at = failing_yaml_event(value);
            problems.push(Problem::at(
                file,
                pos(at.as_deref()),
                format!("{HOOK_REFUSED}: {e}"),
            ));
            return Hooks::default();
        }
    };
    if let Err(e) = serde_json::from_value::<crate::definitions::hooks::StrictHooks>(json.clone()) {
        let at = failing_entry(&json);
        problems.push(Problem::at(
            file,
            pos(at.as_deref()),
            format!("{HOOK_REFUSED}: {e}"),
        ));
        return Hooks::default();
    }
    let (hooks, warnings) = Hooks::from_json(&json, &file.display().to_string());
    for w in warnings {
        problems.push(Problem::warning_at(file, pos(None), w));
    }
    hooks
}

impl AgentSpec {
    /// Whether each of its subagents works in its own git worktree.
    pub fn is_isolated(&self) -> bool {
        self.isolation.as_deref() == Some("worktree")
    }

    /// Its effort level, when it sets a valid one (loading drops others with a warning).
    pub fn effort(&self) -> Option<cadre_model::Effort> {
        self.effort.as_deref().and_then(cadre_model::Effort::parse)
    }

    /// Parses one YAML agent file. Text that is not strict YAML is read line by line, and
    /// unknown keys and tools are dropped, each with a warning; a shape error (a number
    /// where a list belongs, say) is an error. Every problem has its position; the spec
    /// comes back unless there was an error.
    pub fn parse_yaml(file: &Path, text: &str) -> (Option<Self>, Vec<Problem>) {
        let yaml_problem = |e: yaml::Error, fallback: (usize, usize)| {
            let pos = e.location().map_or(fallback, |l| (l.line(), l.column()));
            // The position is already in front of the message; drop the reader's copy.
            let msg = e.to_string();
            let msg = match msg.rfind(" at line ") {
                Some(i) => msg[..i].to_owned(),
                None => msg,
            };
            Problem::at(file, pos, msg)
        };
        let (value, mut problems) = match yaml::read(file, text, 1) {
            Ok(read) => read,
            Err(e) => return (None, vec![yaml_problem(e, (0, 0))]),
        };
        let repaired = !problems.is_empty();
        let yaml::Value::Mapping(mut map) = value else {
            let msg = "expected a mapping of keys (name: …, description: …, prompt: …)";
            return (None, vec![Problem::at(file, (1, 1), msg)]);
        };
        let lists_skills = map.contains_key("skills");
        // Unknown keys are reported one by one, then dropped, so one stray key does not
        // hide every other problem of the file, nor stop it loading.
        let mut unknown = false;
        map.retain(|key, _| {
            let name = key.as_str().unwrap_or_default();
            let known = KNOWN_KEYS.contains(&name);
            if !known {
                unknown = true;
                problems.push(Problem::warning_at(
                    file,
                    locate(text, name, None),
                    format!(
                        "unknown key `{name}` ignored; the keys are: {}",
                        KNOWN_KEYS.join(", ")
                    ),
                ));
            }
            known
        });
        // Hooks are written as Claude Code writes them, read forgivingly on their own.
        let hooks_yaml = map.remove("hooks");
        let parsed = if !repaired && !unknown && hooks_yaml.is_none() {
            // From the text, so a type error has its exact position.
            yaml::from_str::<AgentSpec>(text).map_err(|e| yaml_problem(e, (0, 0)))
        } else {
            serde_path_to_error::deserialize::<_, AgentSpec>(yaml::Value::Mapping(map)).map_err(
                |e| {
                    // A value knows no positions: find the field the error names.
                    let key = e.path().to_string();
                    let inner = e.into_inner();
                    let mut p = yaml_problem(inner, locate(text, &key, None));
                    if key != "." {
                        p.message = format!("{key}: {}", p.message);
                    }
                    p
                },
            )
        };
        match parsed {
            Ok(mut spec) => {
                spec.source = Some(file.to_path_buf());
                if let Some(value) = hooks_yaml {
                    spec.hooks = read_hooks(file, &value, &mut problems, &|needle| {
                        locate(text, "hooks", needle)
                    });
                }
                spec.repair(file, &mut problems, &|key, needle| {
                    locate(text, key, needle)
                });
                // Skills are loaded with the `Skill` tool: listing them to a type that
                // lacks it is a mistake, told rather than silently widening its tools.
                let no_skill_tool = tools_for(&spec, &[SKILL_TOOL]).is_empty();
                if lists_skills && !spec.skills.is_empty() && no_skill_tool {
                    problems.push(Problem::warning_at(
                        file,
                        locate(text, "skills", None),
                        "skills: lists skills, but tools: lacks `Skill`, so this type cannot load them; add Skill to tools (or set skills: [])",
                    ));
                }
                (Some(spec), problems)
            }
            Err(p) => {
                problems.push(p);
                (None, problems)
            }
        }
    }

    /// What both file kinds repair once their fields are read: tool names mapped (unknown
    /// ones dropped with a warning, `Task(a, b)` turned into `Task` and `subagent_types`),
    /// patterns such as `Bash(git diff:*)` turned into rules, the permission mode read
    /// (`plan` makes it read-only), and an `isolation` other than `worktree` dropped.
    /// `pos` places a problem at a key (spelled as in the file) and an optional needle.
    pub(crate) fn repair(&mut self, file: &Path, problems: &mut Vec<Problem>, pos: &Locator) {
        let claude = file.extension().is_some_and(|x| x == "md");
        let key = |cadre: &'static str, claude_key: &'static str| {
            if claude {
                claude_key
            } else {
                cadre
            }
        };
        let tools_key = "tools";
        let tools = map_tools(
            file,
            tools_key,
            &self.tools,
            true,
            &|name| pos(tools_key, Some(name)),
            problems,
        );
        let denied_key = key("disallowed_tools", "disallowedTools");
        let denied = map_tools(
            file,
            denied_key,
            &self.disallowed_tools,
            false,
            &|name| pos(denied_key, Some(name)),
            problems,
        );
        if tools.names.is_empty() && !tools.dropped.is_empty() {
            problems.push(Problem::warning_at(
                file,
                pos(tools_key, None),
                format!(
                    "no tool is left: every entry of {tools_key} was dropped ({}); this agent type loads, but starting it fails",
                    tools.dropped.join(", ")
                ),
            ));
        }
        self.tools = tools.names;
        self.dropped_tools = tools.dropped;
        self.disallowed_tools = denied.names;
        for t in tools.subagent_types {
            if !self.subagent_types.contains(&t) {
                self.subagent_types.push(t);
            }
        }
        self.limited_tools = tools.limited;
        self.permissions.allow.extend(tools.rules);
        self.permissions.deny.extend(denied.rules);
        self.repair_permissions(
            file,
            problems,
            pos,
            key("permission_mode", "permissionMode"),
        );
        crate::definitions::model_settings::repair(
            &mut self.effort,
            &mut self.output_schema,
            file,
            problems,
            pos,
        );
        if let Some(isolation) = self.isolation.take() {
            let normal = isolation.trim().to_ascii_lowercase();
            if normal == "worktree" {
                self.isolation = Some(normal);
            } else if !matches!(normal.as_str(), "" | "none" | "shared") {
                problems.push(Problem::warning_at(
                    file,
                    pos("isolation", Some(&isolation)),
                    format!("unknown `isolation: {isolation}` ignored (cadre knows `worktree`): the agent works in the shared workspace"),
                ));
            }
        }
    }

    /// Reads its permission mode and rules: an unknown mode is dropped with a warning,
    /// `plan` makes it read-only, Claude Code's `acceptEdits` allows edits; a rule that
    /// cannot be read is dropped with a warning.
    fn repair_permissions(
        &mut self,
        file: &Path,
        problems: &mut Vec<Problem>,
        pos: &Locator,
        mode_key: &str,
    ) {
        if let Some(written) = self.permission_mode.clone() {
            match file_mode(&written) {
                Ok(mode) => {
                    if mode.mode == Some(PermissionMode::Plan) {
                        self.read_only = true;
                    }
                    if mode.allow_edits && !self.permissions.allow.iter().any(|r| r == "Edit") {
                        self.permissions.allow.push("Edit".into());
                    }
                }
                Err(why) => {
                    problems.push(Problem::warning_at(
                        file,
                        pos(mode_key, Some(&written)),
                        why,
                    ));
                    self.permission_mode = None;
                }
            }
        }
        for list in [&mut self.permissions.allow, &mut self.permissions.deny] {
            list.retain(|rule| match Rule::parse(rule) {
                Ok(_) => true,
                Err(e) => {
                    let at = pos("permissions", Some(rule));
                    problems.push(Problem::warning_at(
                        file,
                        at,
                        format!("{e}; it is not applied"),
                    ));
                    false
                }
            });
        }
    }

    /// The permission mode it tightens the run to, if any.
    pub fn own_mode(&self) -> Option<PermissionMode> {
        self.permission_mode
            .as_deref()
            .and_then(|m| file_mode(m).ok())
            .and_then(|m| m.mode)
    }

    /// Checks the fields a parser cannot: name, description, prompt, model and tools.
    /// `known_tool` says whether a tool name exists. A tool it does not know (and that is
    /// no MCP tool) and an unusual name or long description are warnings.
    pub fn validate(
        &self,
        file: &Path,
        text: &str,
        known_tool: &dyn Fn(&str) -> bool,
    ) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut report = |warning: bool, key: &str, needle: Option<&str>, msg: String| {
            let at = locate(text, key, needle);
            problems.push(if warning {
                Problem::warning_at(file, at, msg)
            } else {
                Problem::at(file, at, msg)
            });
        };
        match check_name(&self.name) {
            Err(msg) => report(false, "name", Some(&self.name), msg),
            Ok(Some(msg)) => report(true, "name", Some(&self.name), msg),
            Ok(None) => {}
        }
        if self.description.trim().is_empty() {
            report(
                false,
                "description",
                None,
                "missing description: say what this agent is for, so a parent can choose it".into(),
            );
        }
        let chars = self.description.trim().chars().count();
        if chars > LISTED_DESCRIPTION_CHARS {
            report(true, "description", None, format!(
                "description is {chars} characters; it is shortened to {LISTED_DESCRIPTION_CHARS} where it is listed to a parent"
            ));
        }
        if self.prompt.trim().is_empty() {
            report(
                false,
                "prompt",
                None,
                "missing prompt: the agent's system prompt is required".into(),
            );
        }
        if !valid_model(&self.model) {
            report(false, "model", Some(&self.model), format!(
                "unknown model {:?}: expected inherit, opus, sonnet, haiku or a full model id such as claude-sonnet-5-5",
                self.model
            ));
        }
        if let Some(CompactAt::Tokens(n)) = self.compact_at {
            if n < cadre_model::MIN_COMPACT_AT {
                report(
                    true,
                    "compact_at",
                    None,
                    format!("compact_at {n} is below the API's minimum of 50000; 50000 is used"),
                );
            }
        }
        if self.max_turns == 0 {
            report(
                false,
                "max_turns",
                None,
                "max_turns must be at least 1".into(),
            );
        }
        for (key, list) in [
            ("tools", &self.tools),
            ("disallowed_tools", &self.disallowed_tools),
        ] {
            for tool in list {
                if tool != "*" && !is_mcp_name(tool) && !known_tool(tool) {
                    report(
                        true,
                        key,
                        Some(tool),
                        format!("unknown tool {tool:?} in {key}"),
                    );
                }
            }
        }
        problems
    }

    /// The first team tool its `tools` names, if any: a primary type that names one makes
    /// its run a team run.
    pub fn team_tool(&self) -> Option<&str> {
        self.tools
            .iter()
            .map(String::as_str)
            .find(|t| resolve_tool_name(t) == Some(TEAM_TOOL))
    }

    /// Why an agent of this type cannot start: every entry of its `tools` was dropped while
    /// loading. `None` when it can.
    pub fn unusable(&self) -> Option<String> {
        (self.tools.is_empty() && !self.dropped_tools.is_empty()).then(|| {
            format!(
                "agent type {:?} cannot start: it has no tools, because every entry of its tools was dropped while loading ({}); fix its file (`cadre agents check` says why)",
                self.name,
                self.dropped_tools.join(", ")
            )
        })
    }
}

/// The cadre tool names an agent type gets, given every tool the run offers: `tools`
/// (with `"*"` meaning all, aliases resolved) minus `disallowed_tools`, in `available` order.
pub fn tools_for(spec: &AgentSpec, available: &[&str]) -> Vec<String> {
    let resolve = |names: &[String]| -> Vec<&str> {
        names
            .iter()
            .filter_map(|n| {
                if n == "*" {
                    Some("*")
                } else {
                    // A run's extra tools go by their own names.
                    resolve_tool_name(n).or_else(|| available.iter().copied().find(|a| *a == n))
                }
            })
            .collect()
    };
    let allowed = resolve(&spec.tools);
    let denied = resolve(&spec.disallowed_tools);
    available
        .iter()
        .filter(|t| allowed.contains(&"*") || allowed.contains(t))
        .filter(|t| !denied.contains(t) && !denied.contains(&"*"))
        .map(|t| (*t).to_owned())
        .collect()
}
