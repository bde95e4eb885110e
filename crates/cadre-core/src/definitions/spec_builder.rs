//! [`AgentSpec::builder`]: an agent type made in code, field by field, so the spec can grow
//! (it is `#[non_exhaustive]`) without breaking the code that builds one.

use super::hooks::Hooks;
use super::permissions::PermissionRules;
use super::spec::{AgentSpec, CompactAt, McpServerRef, Mode};

/// Builds an [`AgentSpec`]: unset fields keep the defaults of a file that gives only its name.
#[derive(Debug, Clone)]
#[must_use]
pub struct AgentSpecBuilder {
    /// The spec so far.
    spec: AgentSpec,
}

impl AgentSpec {
    /// A builder of the agent type `name`, with a file's defaults for everything else.
    pub fn builder(name: impl Into<String>) -> AgentSpecBuilder {
        AgentSpecBuilder {
            spec: AgentSpec {
                name: name.into(),
                ..AgentSpec::default()
            },
        }
    }
}

impl AgentSpecBuilder {
    /// What it is for; the parent reads this to choose it.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.spec.description = description.into();
        self
    }

    /// Where it may run (primary, subagent or both).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.spec.mode = mode;
        self
    }

    /// `inherit`, an alias (`opus`, `sonnet`, `haiku`) or a full model id.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.spec.model = model.into();
        self
    }

    /// Tools it may use; `"*"` is every tool; `mcp__…` names are MCP tools.
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.spec.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Tools taken away after `tools` is applied.
    pub fn disallowed_tools<S: Into<String>>(
        mut self,
        disallowed_tools: impl IntoIterator<Item = S>,
    ) -> Self {
        self.spec.disallowed_tools = disallowed_tools.into_iter().map(Into::into).collect();
        self
    }

    /// The subagent types its `Task` tool may start; empty is any.
    pub fn subagent_types<S: Into<String>>(
        mut self,
        subagent_types: impl IntoIterator<Item = S>,
    ) -> Self {
        self.spec.subagent_types = subagent_types.into_iter().map(Into::into).collect();
        self
    }

    /// Whether it must not change anything (its `bash` runs sandboxed).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.spec.read_only = read_only;
        self
    }

    /// Whether its `bash` commands may open TCP connections.
    pub fn network(mut self, network: bool) -> Self {
        self.spec.network = network;
        self
    }

    /// Most model requests it may make.
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.spec.max_turns = max_turns;
        self
    }

    /// Its limits (tokens for it and its subagents, turns, wall time).
    pub fn limits(mut self, limits: crate::vocab::limits::AgentLimits) -> Self {
        self.spec.limits = limits;
        self
    }

    /// When its conversation is compacted (unset follows the run).
    pub fn compact_at(mut self, compact_at: CompactAt) -> Self {
        self.spec.compact_at = Some(compact_at);
        self
    }

    /// Skills listed to it, loaded on demand with the `Skill` tool; `"*"` is all.
    pub fn skills<S: Into<String>>(mut self, skills: impl IntoIterator<Item = S>) -> Self {
        self.spec.skills = skills.into_iter().map(Into::into).collect();
        self
    }

    /// Skills whose bodies go into its system prompt from the start.
    pub fn preload_skills<S: Into<String>>(
        mut self,
        preload_skills: impl IntoIterator<Item = S>,
    ) -> Self {
        self.spec.preload_skills = preload_skills.into_iter().map(Into::into).collect();
        self
    }

    /// Its permission mode (`auto`, `ask`, `deny-writes`, `plan`, …).
    pub fn permission_mode(mut self, permission_mode: impl Into<String>) -> Self {
        self.spec.permission_mode = Some(permission_mode.into());
        self
    }

    /// Its own allow and deny rules, on top of the run's.
    pub fn permissions(mut self, permissions: PermissionRules) -> Self {
        self.spec.permissions = permissions;
        self
    }

    /// MCP servers it uses.
    pub fn mcp_servers(mut self, mcp_servers: Vec<McpServerRef>) -> Self {
        self.spec.mcp_servers = mcp_servers;
        self
    }

    /// `worktree`: each subagent of this type works in its own git worktree.
    pub fn isolation(mut self, isolation: impl Into<String>) -> Self {
        self.spec.isolation = Some(isolation.into());
        self
    }

    /// Whether its subagents always run in the background.
    pub fn background(mut self, background: bool) -> Self {
        self.spec.background = background;
        self
    }

    /// The colour of its line in the live display.
    pub fn color(mut self, color: impl Into<String>) -> Self {
        self.spec.color = Some(color.into());
        self
    }

    /// How much effort the model spends on its requests (`low` … `max`).
    pub fn effort(mut self, effort: impl Into<String>) -> Self {
        self.spec.effort = Some(effort.into());
        self
    }

    /// A JSON Schema its final answer must be valid against.
    pub fn output_schema(mut self, output_schema: serde_json::Value) -> Self {
        self.spec.output_schema = Some(output_schema);
        self
    }

    /// Its system prompt.
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.spec.prompt = prompt.into();
        self
    }

    /// Its own hooks, run for its agents only, after the run's.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.spec.hooks = hooks;
        self
    }

    /// The spec.
    pub fn build(self) -> AgentSpec {
        self.spec
    }
}
