//! The agent factory: how the orchestrator builds one agent — its tool set, the context its
//! tools run in, its configuration (prompt, model, limits), its transcript and its hooks.

use super::config::DEFAULT_CONTEXT_TOKENS;
use super::handle::AgentHandle;
use super::run_context::RunContext;
use super::Orchestrator;
use crate::definitions::permissions::PermissionMode;
use crate::definitions::registry::{
    resolve_tool_name, tools_for, SKILL_TOOL, TASK_TOOL, WORKFLOW_TOOL,
};
use crate::definitions::skills::Skill;
use crate::definitions::spec::AgentSpec;
use crate::record::transcript::{AgentHeader, Transcript, TranscriptRecord};
use crate::run::agent::{Agent, AgentConfig, Inbox};
use crate::run::background::{TaskOutputTool, TaskStopTool};
use crate::run::continuation::MAX_CONTINUATIONS;
use crate::run::hooks::{claude_mode, AgentHooks, Who};
use crate::run::mcp_tools::{mcp_tools_for, Server};
use crate::run::model_settings::{answer_for, effort_for};
use crate::run::permissions::AgentPermissions;
use crate::run::prompt;
use crate::run::skill_tool::SkillTool;
use crate::run::task::TaskTool;
use crate::run::team::tools::team_tools;
use crate::run::team::Seat;
use crate::run::toolset::ToolSet;
use crate::run::workflow_tool::{SavedWorkflows, WorkflowTool};
use cadre_tools::{Tool, ToolContext};
use std::borrow::Cow;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// An agent's tools as its type, depth and team allow, with what was settled on the way.
struct AgentTools<'a> {
    /// The tools it may call.
    tools: ToolSet,
    /// The skills listed in its prompt (those it can load).
    listed: Vec<&'a Skill>,
    /// Whether it may delegate (it has `Task`).
    delegates: bool,
    /// Its seat in the run's team, when it is a member.
    seat: Option<Seat>,
    /// The MCP servers started for it alone, to stop when it ends.
    own: Vec<Arc<Server>>,
}

impl Orchestrator {
    /// The agent for `spec`: its prompt, its filtered tools (with `Task` while depth
    /// allows, `Skill` when some skill is visible to it, and the MCP tools its type may
    /// use), its own file tracker, the run's shared budget, locks and limiter, and — given
    /// the `description` it runs under — its transcript. Also returns the MCP servers
    /// started for it alone, to stop when it ends.
    pub(super) async fn build_agent(
        self: &Arc<Self>,
        spec: &AgentSpec,
        me: &AgentHandle,
        cancel: CancellationToken,
        description: Option<&str>,
    ) -> (Agent, Vec<Arc<Server>>) {
        let path = &me.path;
        let permissions = self.config.permissions.for_agent(spec, path);
        let planned = planned(spec, permissions.as_deref());
        let spec = &*planned;
        let mut kit = self.tool_set(spec, me).await;
        let ctx = self.tool_context(spec, me, cancel);
        if let Some(p) = &permissions {
            p.withhold(&mut kit.tools, &ctx);
        }
        // An agent with hooks is always checked: a hook may ask the person, or allow a call
        // that deny rules still refuse.
        let permissions = match permissions {
            None if self.hooks.any_for(spec) => {
                self.config.permissions.for_agent_always(spec, path)
            }
            p => p,
        };
        let mut agent = Agent {
            config: self.agent_config(spec, me, &kit.listed).await,
            model: self.config.model.clone(),
            tools: kit.tools,
            ctx,
            budget: me.budget.clone().unwrap_or_else(|| self.budget.clone()),
            events: self.roster.handler(),
            limiter: Some(self.limiter.clone()),
            transcript: None,
            journal: me.run.journal.clone(),
            inbox: kit
                .delegates
                .then(|| me.background.clone() as Arc<dyn Inbox>),
            permissions,
            team: kit.seat,
            hooks: None,
            content: self.config.record_content,
        };
        check_fork_tools(&agent, me);
        if let Some(description) = description {
            agent.transcript = self.open_transcript(&me.run, &agent, spec, description);
        }
        agent.hooks = self.hooks.for_agent(
            spec,
            || self.who(spec, me, &agent.ctx),
            me.depth > 0,
            &agent.events,
            &agent.ctx.cancel,
            agent.transcript.clone(),
        );
        (agent, kit.own)
    }

    /// The tools of the agent `me` of type `spec`: the built-ins and extra tools its type
    /// names, `Task` (and the team's tools) while it may delegate, `Skill` when a skill is
    /// visible to it, and its MCP tools.
    async fn tool_set<'a>(
        self: &'a Arc<Self>,
        spec: &AgentSpec,
        me: &AgentHandle,
    ) -> AgentTools<'a> {
        // Code from outside this process cannot be sandboxed: a read-only type gets only
        // the extra tools that say they change nothing.
        let offered: Vec<&Arc<dyn Tool>> = self
            .builtins
            .iter()
            .filter(|t| !spec.read_only || t.is_read_only() || !self.is_extra(t.name()))
            .collect();
        let mut available: Vec<&str> = offered.iter().map(|t| t.name()).collect();
        // A fork offers its parent's tools to the byte, so `Task` too at the depth limit
        // (where a call is refused); a fork that called it would be refused a fork as well.
        if me.depth < self.config.limits.max_depth || me.fork.is_some() {
            available.push(TASK_TOOL);
        }
        let visible = self.config.skills.visible(&spec.skills);
        if !visible.is_empty() {
            available.push(SKILL_TOOL);
        }
        let workflows = self.workflows_for(spec, me);
        if workflows.is_some() {
            available.push(WORKFLOW_TOOL);
        }
        let names = tools_for(spec, &available);
        let mut tools = ToolSet::new(
            offered
                .into_iter()
                .filter(|t| names.iter().any(|n| n == t.name()))
                .cloned(),
        );
        let delegates = names.iter().any(|n| n == TASK_TOOL);
        let seat = self.delegation_tools(&mut tools, spec, me, delegates);
        // Skills are listed only to an agent that can load them.
        let listed = if names.iter().any(|n| n == SKILL_TOOL) {
            let visible_names = visible.iter().map(|s| s.name.clone()).collect();
            tools.insert(Arc::new(SkillTool::new(
                self.config.skills.clone(),
                visible_names,
            )));
            visible
        } else {
            Vec::new()
        };
        if let Some(saved) = workflows.filter(|_| names.iter().any(|n| n == WORKFLOW_TOOL)) {
            let budget = me.budget.clone().unwrap_or_else(|| self.budget.clone());
            let shared = (self.provider_stop.clone(), tools.spent());
            tools.insert(Arc::new(WorkflowTool::new(
                saved,
                (&me.run.id, me.path.as_str()),
                budget,
                shared,
            )));
        }
        let mcp = mcp_tools_for(spec, &self.config.mcp, me.path.as_str()).await;
        for tool in mcp.tools {
            // A built-in of the same name is never shadowed by a server's tool.
            if tools.get(tool.name()).is_none() {
                tools.insert(tool);
            }
        }
        AgentTools {
            tools,
            listed,
            delegates,
            seat,
            own: mcp.own,
        }
    }

    /// The saved workflows the agent `me` of type `spec` may start, if any: the primary
    /// agent's when the project has some, another agent's only when its type names
    /// `Workflow` (not through `"*"`: a subagent fanning out a workflow is asked for).
    fn workflows_for(&self, spec: &AgentSpec, me: &AgentHandle) -> Option<Arc<dyn SavedWorkflows>> {
        let saved = self.config.workflows.as_ref()?;
        let named = spec
            .tools
            .iter()
            .any(|t| resolve_tool_name(t) == Some(WORKFLOW_TOOL));
        ((me.depth == 0 || named) && !saved.list().is_empty()).then(|| saved.clone())
    }

    /// Adds the team's tools (for a member) and `Task` with its background tools (for an
    /// agent that `delegates`) to `tools`; returns the agent's seat in the team.
    fn delegation_tools(
        self: &Arc<Self>,
        tools: &mut ToolSet,
        spec: &AgentSpec,
        me: &AgentHandle,
        delegates: bool,
    ) -> Option<Seat> {
        let run = &me.run;
        let seat = me
            .member
            .as_ref()
            .map(|name| Seat::new(run.team.clone(), name, &me.path, me.depth == 0));
        if let Some(seat) = &seat {
            // Named members always talk; the primary agent has a seat only in a team run.
            if me.depth > 0 || run.teams_on {
                for tool in team_tools(seat, delegates && run.teams_on) {
                    tools.insert(tool);
                }
            }
        }
        if delegates {
            tools.insert_task(Arc::new(TaskTool::new(
                self.clone(),
                me.clone(),
                spec.subagent_types.clone(),
                run.teams_on && seat.is_some(),
            )));
            tools.insert(Arc::new(TaskOutputTool(me.background.clone())));
            tools.insert(Arc::new(TaskStopTool(me.background.clone())));
        }
        seat
    }

    /// The context the tools of the agent `me` of type `spec` run in: its workspace, the
    /// run's limits, sandbox and locks, and the results folder it may read.
    fn tool_context(
        &self,
        spec: &AgentSpec,
        me: &AgentHandle,
        cancel: CancellationToken,
    ) -> ToolContext {
        let mut ctx = ToolContext::new(me.workspace.clone());
        ctx.cancel = cancel;
        ctx.limits = self.config.tool_limits.clone();
        ctx.read_only = spec.read_only;
        ctx.sandbox = self.config.sandbox;
        ctx.allow_network = spec.network;
        ctx.locks = self.locks.clone();
        ctx.also_readable = Some(me.run.results.clone());
        ctx
    }

    /// The configuration of the agent `me` of type `spec`, whose prompt lists `listed`.
    async fn agent_config(
        &self,
        spec: &AgentSpec,
        me: &AgentHandle,
        listed: &[&Skill],
    ) -> AgentConfig {
        let answer = answer_for(spec, me.answer.as_ref());
        // A subagent's answer is all its parent gets: a cut one is asked to go on. A typed
        // answer cut short cannot go on under its format (each piece would be a whole JSON
        // value): it ends cut instead.
        let continuations = if me.depth > 0 && answer.is_none() {
            MAX_CONTINUATIONS
        } else {
            0
        };
        AgentConfig {
            path: me.path.clone(),
            agent_type: spec.name.clone(),
            model: me.model.clone(),
            system: match &me.fork {
                // The parent's own prompt, not one made again: its bytes start the prefix.
                Some(base) => base.system.clone(),
                None => self.shared_prompt(prompt::system_prompt_for(
                    spec,
                    me.depth > 0,
                    listed,
                    &self.config.skills,
                    self.config.instructions.section(),
                )),
            },
            max_tokens: self.config.max_tokens,
            // Settled by the agent's start (its type's limits and its caller's).
            max_turns: me.limits.turns.unwrap_or(spec.max_turns),
            context_tokens: self.context_window(&me.model).await,
            compact_at: match spec.compact_at {
                Some(at) => at.tokens(),
                None => self.config.compact_at,
            },
            effort: effort_for(spec, &me.model),
            answer,
            fork: None,
            continuations,
        }
    }

    /// The transcript of `agent` of type `spec` in the run folder of `run`, its header
    /// written; `None` without one.
    fn open_transcript(
        &self,
        run: &RunContext,
        agent: &Agent,
        spec: &AgentSpec,
        description: &str,
    ) -> Option<Arc<Transcript>> {
        let transcript = run.transcript.as_ref()?;
        let path = &agent.config.path;
        // Hooks are handed the agent's transcript path: it gets a file of its own for them.
        let own = self
            .hooks
            .any_for(spec)
            .then(|| run.dir.as_ref().map(|d| d.agent_file(path)))
            .flatten();
        let t = transcript.agent(path, own.as_deref());
        t.write(TranscriptRecord::Agent(AgentHeader {
            path: path.clone(),
            agent_type: spec.name.as_str().into(),
            description: description.into(),
            model: agent.config.model.as_str().into(),
            system: agent.config.system.as_ref().into(),
            tools: agent.tools.names().into_iter().map(Into::into).collect(),
        }));
        Some(Arc::new(t))
    }

    /// The hooks of the primary agent of type `spec` of `run`, for the moments of a run
    /// before its agent is built (a follow-up's prompt, a resume's start); `None` without any.
    pub(super) fn primary_hooks(
        &self,
        run: &Arc<RunContext>,
        spec: &AgentSpec,
    ) -> Option<Arc<AgentHooks>> {
        if self.config.hooks.is_empty() && spec.hooks.is_empty() {
            return None;
        }
        let me = self.primary_handle(run, spec);
        let ctx = ToolContext::new(me.workspace.clone());
        self.hooks.for_agent(
            spec,
            || self.who(spec, &me, &ctx),
            false,
            &self.roster.handler(),
            &self.cancel,
            None,
        )
    }

    /// Who the agent `me` of type `spec` is, as its hooks are told.
    fn who(&self, spec: &AgentSpec, me: &AgentHandle, ctx: &ToolContext) -> Who {
        Who {
            session_id: me.run.id.clone(),
            transcript_path: me.run.dir.as_ref().map(|d| d.agent_file(&me.path)),
            cwd: ctx.workspace.root().to_path_buf(),
            permission_mode: claude_mode(self.config.permissions.mode_for(spec)),
            agent_id: me.path.clone(),
            agent_type: spec.name.clone(),
        }
    }

    /// `prompt` as the copy already given out, if an agent before had the same one.
    fn shared_prompt(&self, prompt: String) -> Arc<str> {
        if let Some(known) = self.prompts.get(prompt.as_str()) {
            return known.key().clone();
        }
        let prompt: Arc<str> = prompt.into();
        self.prompts.insert(prompt.clone());
        prompt
    }

    /// Whether `name` is one of the run's extra tools rather than a built-in.
    fn is_extra(&self, name: &str) -> bool {
        self.config.tools.iter().any(|t| t.name() == name)
    }

    /// The context window of `model`: the configured override, the known window of a
    /// Claude model, what the server reports, or the default.
    async fn context_window(&self, model: &str) -> u64 {
        if let Some(n) = self.config.context_tokens {
            return n;
        }
        if let Some(n) = cadre_model::known_context_window(model) {
            return n;
        }
        self.config
            .model
            .context_window(model)
            .await
            .unwrap_or(DEFAULT_CONTEXT_TOKENS)
    }
}

/// `spec` as an agent under `permissions` runs it: plan mode is read-only, so the type is
/// built as one, sandbox and prompt included.
fn planned<'a>(spec: &'a AgentSpec, permissions: Option<&AgentPermissions>) -> Cow<'a, AgentSpec> {
    match permissions {
        Some(p) if p.mode() == PermissionMode::Plan && !spec.read_only => Cow::Owned(AgentSpec {
            read_only: true,
            ..spec.clone()
        }),
        _ => Cow::Borrowed(spec),
    }
}

/// Notes a fork whose tools differ from its parent's: its first request cannot read the
/// parent's cached prefix.
fn check_fork_tools(agent: &Agent, me: &AgentHandle) {
    if let Some(base) = &me.fork {
        if *agent.tools.definitions() != *base.tools {
            tracing::debug!(
                "the fork {} offers other tools than the agent it forks: its first request cannot read that agent's cached prefix",
                me.path
            );
        }
    }
}
