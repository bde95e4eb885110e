//! Agent types: the fields of one as its YAML file gives them ([`AgentSpec`]), their
//! defaults and what they mean. Reading a file, repairing its fields and checking them
//! live beside it (`agent_yaml`, `agent_repair`, `agent_validate`).

use crate::definitions::hooks::Hooks;
use crate::definitions::permissions::{file_mode, PermissionMode, PermissionRules};
use crate::definitions::tools::{resolve_tool_name, TEAM_TOOL};

pub use crate::definitions::problem::{check_name, locate, Problem};
use crate::vocab::limits::AgentLimits;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// Its limits (`{tokens: 50000, turns: 10, time: 5m}`): tokens count its subagents'
    /// too; the tighter of `turns` and `max_turns` holds. A `Task` call may only tighten them.
    #[serde(default, skip_serializing_if = "AgentLimits::is_unlimited")]
    pub limits: AgentLimits,
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
            limits: AgentLimits::default(),
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
pub const KNOWN_KEYS: [&str; 24] = [
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
    "limits",
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

impl AgentSpec {
    /// The model id its agents talk to under a parent on `parent_model`: its own, aliases
    /// resolved, or the parent's when it inherits.
    pub fn model_under(&self, parent_model: &str) -> String {
        match self.model.as_str() {
            INHERIT_MODEL => parent_model.to_owned(),
            other => cadre_model::resolve_model_alias(other).to_owned(),
        }
    }

    /// Its limits, with `max_turns` as a turn limit: the tighter of the two holds.
    pub fn agent_limits(&self) -> AgentLimits {
        let turns = AgentLimits::new(None, Some(self.max_turns), None);
        self.limits.tightened_by(&turns)
    }

    /// Whether each of its subagents works in its own git worktree.
    pub fn is_isolated(&self) -> bool {
        self.isolation.as_deref() == Some("worktree")
    }

    /// Its effort level, when it sets a valid one (loading drops others with a warning).
    pub fn effort(&self) -> Option<cadre_model::Effort> {
        self.effort.as_deref().and_then(cadre_model::Effort::parse)
    }

    /// The permission mode it tightens the run to, if any.
    pub fn own_mode(&self) -> Option<PermissionMode> {
        self.permission_mode
            .as_deref()
            .and_then(|m| file_mode(m).ok())
            .and_then(|m| m.mode)
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
    pub fn unusable(&self) -> Option<ToolsDropped> {
        (self.tools.is_empty() && !self.dropped_tools.is_empty()).then(|| ToolsDropped {
            agent_type: self.name.clone(),
            dropped: self.dropped_tools.clone(),
        })
    }
}

/// Why an agent type cannot start: it has no tools, because every entry of its `tools` was
/// dropped while loading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("agent type {agent_type:?} cannot start: it has no tools, because every entry of its tools was dropped while loading ({}); fix its file (`cadre agents check` says why)", .dropped.join(", "))]
pub struct ToolsDropped {
    /// The agent type.
    pub agent_type: String,
    /// The entries of its `tools` that were dropped.
    pub dropped: Vec<String>,
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
