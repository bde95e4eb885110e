//! [`OrchestratorBuilder`]: the one way a program (the `cadre` binary included) gets a
//! running orchestrator — model, workspace, agent types, skills, extra tools, limits and
//! where events go.

use crate::definitions::hooks::Hooks;
use crate::definitions::instructions::Instructions;
use crate::definitions::registry::Registry;
use crate::definitions::skills::{Skill, SkillSet};
use crate::definitions::spec::AgentSpec;
use crate::definitions::tools::{closest_tools, is_mcp_name, resolve_tool_name};
use crate::record::events::EventHandler;
use crate::record::journal::Journal;
use crate::run::budget::Budget;
use crate::run::delegate::Delegate;
use crate::run::mcp_tools::McpServers;
use crate::run::orchestrator::{Limits, Orchestrator, RunConfig, RunError};
use crate::run::permissions::Permissions;
use crate::run::provider_stop::ProviderStop;
use crate::run::team::TeamLimits;
use crate::run::workflow_tool::{SavedWorkflows, WorkflowCall};
use cadre_model::{AnthropicConfig, AnthropicModel, Model, OpenAiConfig, OpenAiModel};
use cadre_tools::{SandboxMode, Tool, ToolLimits, Workspace};
use std::path::PathBuf;
use std::sync::Arc;

/// Where the model comes from.
enum ModelSource {
    Client(Arc<dyn Model>),
    Anthropic(Box<AnthropicConfig>),
    OpenAi(Box<OpenAiConfig>),
}

/// Where the agent types come from: the shipped ones unless a registry is given whole.
enum Agents {
    Shipped,
    Registry(Registry),
}

/// Builds an [`Orchestrator`]; start with [`Orchestrator::builder`].
///
/// Everything but the model has a default: the current folder as workspace, the shipped
/// agent types, no skills, default limits, no run folder, events dropped.
#[must_use]
pub struct OrchestratorBuilder {
    model: Option<ModelSource>,
    model_id: Option<String>,
    workspace: Option<Arc<Workspace>>,
    workspace_dir: Option<PathBuf>,
    agents: Agents,
    agent_dirs: Vec<PathBuf>,
    specs: Vec<AgentSpec>,
    primary: Option<AgentSpec>,
    skills: Option<Arc<SkillSet>>,
    skill_dirs: Vec<PathBuf>,
    skill_list: Vec<Skill>,
    tools: Vec<Arc<dyn Tool>>,
    limits: Option<Limits>,
    budget_tokens: Option<u64>,
    max_tokens: Option<u32>,
    max_turns: Option<u32>,
    context_tokens: Option<u64>,
    compact_at: Option<Option<u64>>,
    tool_limits: Option<ToolLimits>,
    runs_dir: Option<PathBuf>,
    sandbox: Option<SandboxMode>,
    mcp: Option<Arc<McpServers>>,
    instructions: Option<Arc<Instructions>>,
    permissions: Option<Permissions>,
    run_id: Option<String>,
    journal: Option<Arc<dyn Journal>>,
    delegate: Option<Arc<dyn Delegate>>,
    team: Option<TeamLimits>,
    hooks: Hooks,
    record_content: cadre_model::RecordContent,
    handlers: Vec<EventHandler>,
    workflows: Option<Arc<dyn SavedWorkflows>>,
    budget_within: Option<Budget>,
    provider_stop: Option<Arc<ProviderStop>>,
}

impl Orchestrator {
    /// A builder for an orchestrator; see [`OrchestratorBuilder`].
    pub fn builder() -> OrchestratorBuilder {
        OrchestratorBuilder {
            model: None,
            model_id: None,
            workspace: None,
            workspace_dir: None,
            agents: Agents::Shipped,
            agent_dirs: Vec::new(),
            specs: Vec::new(),
            primary: None,
            skills: None,
            skill_dirs: Vec::new(),
            skill_list: Vec::new(),
            tools: Vec::new(),
            limits: None,
            budget_tokens: None,
            max_tokens: None,
            max_turns: None,
            context_tokens: None,
            compact_at: None,
            tool_limits: None,
            runs_dir: None,
            sandbox: None,
            mcp: None,
            instructions: None,
            permissions: None,
            run_id: None,
            journal: None,
            delegate: None,
            team: None,
            hooks: Hooks::default(),
            record_content: Default::default(),
            handlers: Vec::new(),
            workflows: None,
            budget_within: None,
            provider_stop: None,
        }
    }
}

impl OrchestratorBuilder {
    /// The model client every agent talks through (a provider, a replay, your own).
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.model = Some(ModelSource::Client(model));
        self
    }

    /// The Anthropic Messages API with this configuration (see
    /// [`AnthropicConfig::from_env`]); the model id defaults to
    /// [`cadre_model::DEFAULT_MODEL`].
    pub fn anthropic(mut self, config: AnthropicConfig) -> Self {
        self.model = Some(ModelSource::Anthropic(Box::new(config)));
        self
    }

    /// An OpenAI-compatible server (Ollama, vLLM, llama.cpp, …); give the server's model
    /// name with [`Self::model_id`].
    pub fn openai(mut self, config: OpenAiConfig) -> Self {
        self.model = Some(ModelSource::OpenAi(Box::new(config)));
        self
    }

    /// The model id of the primary agent and of types that say `inherit`; aliases
    /// (`sonnet`, `opus`, `haiku`) resolve.
    pub fn model_id(mut self, id: impl Into<String>) -> Self {
        self.model_id = Some(id.into());
        self
    }

    /// The folder every agent works in (tools are confined to it).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace_dir = Some(dir.into());
        self.workspace = None;
        self
    }

    /// A workspace already opened (shared with something else of yours).
    pub fn workspace_handle(mut self, workspace: Arc<Workspace>) -> Self {
        self.workspace = Some(workspace);
        self.workspace_dir = None;
        self
    }

    /// Agent types from this whole registry instead of the shipped ones (folders and specs
    /// added with [`Self::agents_dir`] and [`Self::agent`] still go on top).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.agents = Agents::Registry(registry);
        self
    }

    /// Loads the agent types of a folder (cadre YAML or Claude Code Markdown); a later
    /// folder's type replaces an earlier one of the same name. Problems are kept on the
    /// registry ([`Registry::problems`]).
    pub fn agents_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.agent_dirs.push(dir.into());
        self
    }

    /// An agent type defined in code; it replaces a type of the same name.
    pub fn agent(mut self, spec: AgentSpec) -> Self {
        self.specs.push(spec);
        self
    }

    /// The spec the primary agent runs under when the run's type is `spec.name`, in place of
    /// the registry's type of that name, which the run's subagents keep (so a caller's
    /// settings for the primary never reach a nested agent of its type).
    pub fn primary(mut self, spec: AgentSpec) -> Self {
        self.primary = Some(spec);
        self
    }

    /// The skills agents may load, whole.
    pub fn skills(mut self, skills: Arc<SkillSet>) -> Self {
        self.skills = Some(skills);
        self
    }

    /// Loads the skills of a folder (`<name>/SKILL.md` each).
    pub fn skills_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.skill_dirs.push(dir.into());
        self
    }

    /// A skill made in code (see [`Skill::parse`]).
    pub fn skill(mut self, skill: Skill) -> Self {
        self.skill_list.push(skill);
        self
    }

    /// A tool beyond the built-ins, offered to the agent types that name it (or allow
    /// `"*"`). Read-only types get it only when it says it is read-only: the sandbox cannot
    /// confine code that runs in this process. A tool named like a built-in replaces it.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// A tool beyond the built-ins, already shared; see [`Self::tool`].
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// The project's saved workflows, which the `Workflow` tool starts: the primary agent
    /// gets the tool when there is one (and its type allows it, as `"*"` does), any other
    /// agent when its type names `Workflow`.
    pub fn workflows(mut self, saved: Arc<dyn SavedWorkflows>) -> Self {
        self.workflows = Some(saved);
        self
    }

    /// Counts every token of the run in `budget` too (an agent's, whose `Workflow` call
    /// starts this run): the run's own budget ([`Self::budget_tokens`]) is below it, and
    /// the run stops when it or any budget above it is spent.
    pub fn budget_within(mut self, budget: Budget) -> Self {
        self.budget_within = Some(budget);
        self
    }

    /// Makes this the run the `Workflow` call `call` starts: its tokens count in the
    /// caller's budget ([`Self::budget_within`]), and a provider's refusal for good (a 401,
    /// no quota) stops the caller's run as it stops this one, and the other way round.
    pub fn called_by(mut self, call: &WorkflowCall) -> Self {
        self.budget_within = Some(call.budget.clone());
        self.provider_stop = Some(call.provider_stop.clone());
        self
    }

    /// Tree-wide limits (parallel requests, depth, fan-out).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// A token budget for the whole tree of agents.
    pub fn budget_tokens(mut self, tokens: u64) -> Self {
        self.budget_tokens = Some(tokens);
        self
    }

    /// The output cap per model response.
    pub fn max_tokens(mut self, tokens: u32) -> Self {
        self.max_tokens = Some(tokens);
        self
    }

    /// Overrides the primary agent's `max_turns`.
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// The models' context window, instead of each model's own.
    pub fn context_tokens(mut self, tokens: u64) -> Self {
        self.context_tokens = Some(tokens);
        self
    }

    /// Input tokens at which conversations are compacted; `None` never compacts.
    pub fn compact_at(mut self, tokens: Option<u64>) -> Self {
        self.compact_at = Some(tokens);
        self
    }

    /// Tool caps (bash timeout, output size, …).
    pub fn tool_limits(mut self, limits: ToolLimits) -> Self {
        self.tool_limits = Some(limits);
        self
    }

    /// Writes each run's folder (transcripts, journal, summary) under `dir`, normally
    /// `<workspace>/.cadre/runs`.
    pub fn runs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.runs_dir = Some(dir.into());
        self
    }

    /// Whether `bash` runs under the Landlock sandbox (the default) or without one.
    pub fn sandbox(mut self, mode: SandboxMode) -> Self {
        self.sandbox = Some(mode);
        self
    }

    /// The run's MCP servers.
    #[cfg(feature = "mcp")]
    pub fn mcp(mut self, servers: Arc<McpServers>) -> Self {
        self.mcp = Some(servers);
        self
    }

    /// The project's instructions (AGENTS.md, CLAUDE.md, …) for every agent's system prompt;
    /// see [`Instructions::load`].
    pub fn instructions(mut self, instructions: Arc<Instructions>) -> Self {
        self.instructions = Some(instructions);
        self
    }

    /// The run's permission mode and rules, and who is asked in `ask` mode.
    pub fn permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = Some(permissions);
        self
    }

    /// The run's id (its folder and worktree branches); a replay passes the recorded one.
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.run_id = Some(id.into());
        self
    }

    /// Journals the run's steps to `journal` when it writes no run folder (a durable
    /// engine's journal); a run folder's own journal takes its place.
    // For cadre-engine: `Journal` is the mechanism's seam, reached through `internal`.
    #[doc(hidden)]
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Runs subagents through `delegate` instead of in this process (a durable engine's
    /// workers); the orchestrator still checks the type, the depth and the fan-out first.
    pub fn delegate(mut self, delegate: Arc<dyn Delegate>) -> Self {
        self.delegate = Some(delegate);
        self
    }

    /// Makes the run a team run under `limits`: `Task` takes a `name`, which starts a
    /// member that stays after it answers, and agents that may start members get the team
    /// tools (`SendMessage`, the shared task list, …). A run whose primary type lists a
    /// team tool is one anyway, under the default limits.
    pub fn team(mut self, limits: TeamLimits) -> Self {
        self.team = Some(limits);
        self
    }

    /// The run's hooks (settings files, `[hooks]` tables), run for every agent; an agent
    /// type's own `hooks:` add to them for that type's agents.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// What content the run's spans carry besides their attributes (prompts, tool inputs
    /// and results): none unless set here. See [`crate::semconv`].
    pub fn record_content(mut self, content: cadre_model::RecordContent) -> Self {
        self.record_content = content;
        self
    }

    /// Calls `handler` with every event of every agent, on the agent's task: keep it
    /// quick. For a `Stream` instead, see [`Orchestrator::events`].
    pub fn on_event(mut self, handler: impl Fn(crate::Event) + Send + Sync + 'static) -> Self {
        self.handlers.push(Arc::new(handler));
        self
    }

    /// Like [`Self::on_event`], with a handler already shared.
    pub fn on_event_handler(mut self, handler: EventHandler) -> Self {
        self.handlers.push(handler);
        self
    }

    /// The orchestrator, ready to [`run`](Orchestrator::run). Fails without a model (or
    /// without a model id for an OpenAI-compatible server), on a workspace folder that
    /// cannot be opened, or a provider client that cannot be made.
    pub fn build(self) -> Result<Arc<Orchestrator>, RunError> {
        let (model, model_id) = model_of(self.model, self.model_id)?;
        let workspace = workspace_of(self.workspace, self.workspace_dir)?;
        let registry = registry_of(self.agents, &self.agent_dirs, self.specs);
        let skills = skills_of(self.skills, &self.skill_dirs, self.skill_list);
        let mut config = RunConfig::new(workspace, model, model_id);
        config.tools = self.tools;
        if let Some(v) = self.limits {
            config.limits = v;
        }
        config.budget_tokens = self.budget_tokens;
        if let Some(v) = self.max_tokens {
            config.max_tokens = v;
        }
        config.max_turns = self.max_turns;
        config.context_tokens = self.context_tokens;
        if let Some(v) = self.compact_at {
            config.compact_at = v;
        }
        if let Some(v) = self.tool_limits {
            config.tool_limits = v;
        }
        config.runs_dir = self.runs_dir;
        if let Some(v) = skills {
            config.skills = v;
        }
        if let Some(v) = self.sandbox {
            config.sandbox = v;
        }
        if let Some(v) = self.mcp {
            config.mcp = v;
        }
        if let Some(v) = self.instructions {
            config.instructions = v;
        }
        if let Some(v) = self.permissions {
            config.permissions = v;
        }
        config.run_id = self.run_id;
        config.primary = self.primary;
        config.journal = self.journal;
        config.delegate = self.delegate;
        config.team = self.team;
        config.hooks = self.hooks;
        config.record_content = self.record_content;
        config.workflows = self.workflows;
        config.budget_within = self.budget_within;
        config.provider_stop = self.provider_stop;
        check_tools(&registry, &config.tools)?;
        if config.delegate.is_some() {
            let unhonoured = unhonoured_on_engine(&registry, &config);
            if !unhonoured.is_empty() {
                return Err(RunError::Unhonoured(unhonoured));
            }
        }
        Ok(Orchestrator::new(registry, config, fan_out(self.handlers)))
    }
}

/// The model client `source` makes, and the model id: `model_id` (aliases resolved), or
/// the provider's default; `Err` without a model, or without an id for a server that has
/// no default.
fn model_of(
    source: Option<ModelSource>,
    model_id: Option<String>,
) -> Result<(Arc<dyn Model>, String), RunError> {
    let (model, default_id): (Arc<dyn Model>, Option<&str>) = match source {
        None => return Err(RunError::NoModel),
        Some(ModelSource::Client(m)) => (m, Some(cadre_model::DEFAULT_MODEL)),
        Some(ModelSource::Anthropic(config)) => (
            Arc::new(AnthropicModel::new(*config)?),
            Some(cadre_model::DEFAULT_MODEL),
        ),
        Some(ModelSource::OpenAi(config)) => (Arc::new(OpenAiModel::new(*config)?), None),
    };
    let model_id = match (model_id, default_id) {
        (Some(id), _) => cadre_model::resolve_model_alias(&id).to_owned(),
        (None, Some(id)) => id.to_owned(),
        (None, None) => return Err(RunError::NoModelId),
    };
    Ok((model, model_id))
}

/// The workspace given, or one opened in `dir` (the current folder by default).
fn workspace_of(
    workspace: Option<Arc<Workspace>>,
    dir: Option<PathBuf>,
) -> Result<Arc<Workspace>, RunError> {
    if let Some(w) = workspace {
        return Ok(w);
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let w = Workspace::new(&dir).map_err(|source| RunError::Workspace { dir, source })?;
    Ok(Arc::new(w))
}

/// The agent types of the run: `agents`, with the types in `dirs` and then `specs` added.
fn registry_of(agents: Agents, dirs: &[PathBuf], specs: Vec<AgentSpec>) -> Registry {
    let mut registry = match agents {
        Agents::Shipped => Registry::shipped(),
        Agents::Registry(r) => r,
    };
    if !dirs.is_empty() {
        registry.load_dirs(dirs);
    }
    for spec in specs {
        registry.insert(spec);
    }
    registry
}

/// The skills of the run: `skills`, with those in `dirs` and then `list` added; `None`
/// keeps the configuration's default.
fn skills_of(
    skills: Option<Arc<SkillSet>>,
    dirs: &[PathBuf],
    list: Vec<Skill>,
) -> Option<Arc<SkillSet>> {
    if dirs.is_empty() && list.is_empty() {
        return skills;
    }
    let mut set = match skills {
        Some(s) => (*s).clone(),
        None => SkillSet::default(),
    };
    set.load_dirs(dirs);
    for skill in list {
        set.insert(skill);
    }
    Some(Arc::new(set))
}

/// One handler that passes every event to each of `handlers`.
fn fan_out(handlers: Vec<EventHandler>) -> EventHandler {
    match <[EventHandler; 1]>::try_from(handlers) {
        Ok([one]) => one,
        Err(none) if none.is_empty() => crate::record::events::no_events(),
        Err(handlers) => Arc::new(move |e: crate::Event| {
            for h in &handlers {
                h(e.clone());
            }
        }),
    }
}

/// What a run that hands its subagents to an engine asks for and the engine's workers
/// cannot honour, one line each: they run no hooks, no MCP servers and no teams. The
/// command line refuses these (and the flags its table of settings marks) before it
/// submits a run; this is the same check for whoever builds an orchestrator with a
/// [`Delegate`].
fn unhonoured_on_engine(registry: &Registry, config: &RunConfig) -> Vec<String> {
    let mut out = Vec::new();
    if !config.hooks.is_empty() {
        out.push(format!(
            "{} hook(s): the workers run no hooks",
            config.hooks.all().len()
        ));
    }
    let servers = config.mcp.names();
    if !servers.is_empty() {
        out.push(format!(
            "MCP servers {}: the workers run no MCP servers",
            servers.join(", ")
        ));
    }
    out.extend(registry.all().flat_map(unhonoured_by_workers));
    if config.team.is_some() {
        out.push("a team: teams run only in one process".to_owned());
    }
    out
}

/// What agent type `spec` asks for that a worker cannot honour, one line each: its hooks
/// (each event named once) and its MCP servers.
pub fn unhonoured_by_workers(spec: &AgentSpec) -> Vec<String> {
    let mut out = Vec::new();
    if !spec.hooks.is_empty() {
        // Each event once, in the order the hooks come (not only neighbours alike).
        let mut events: Vec<&str> = Vec::new();
        for name in spec.hooks.all().iter().map(|h| h.event.name()) {
            if !events.contains(&name) {
                events.push(name);
            }
        }
        out.push(format!(
            "agent type {} has hooks ({}): workers run no hooks",
            spec.name,
            events.join(", ")
        ));
    }
    if !spec.mcp_servers.is_empty() {
        out.push(format!(
            "agent type {} names MCP servers: workers run none",
            spec.name
        ));
    }
    out
}

/// Fails on the first tool name an agent type gives (in `tools` or `disallowed_tools`) that
/// no tool answers to: a typo would otherwise leave the agent without the tool, or with one
/// it was meant not to have. Types loaded from files were repaired, with a warning, when
/// they were read; this catches the ones made in code.
fn check_tools(registry: &Registry, extra: &[Arc<dyn Tool>]) -> Result<(), RunError> {
    let extra: Vec<&str> = extra.iter().map(|t| t.name()).collect();
    let known = |name: &str| {
        name == "*"
            || is_mcp_name(name)
            || resolve_tool_name(name).is_some()
            || extra.contains(&name)
    };
    for spec in registry.all() {
        for name in spec.tools.iter().chain(&spec.disallowed_tools) {
            // `Bash(git diff:*)` and `Task(explore)` are about the tool before the bracket.
            let tool = name.split('(').next().unwrap_or_default().trim();
            if known(tool) {
                continue;
            }
            return Err(RunError::UnknownTool {
                agent: spec.name.clone(),
                tool: name.clone(),
                closest: closest_tools(tool, &extra)
                    .into_iter()
                    .take(2)
                    .map(str::to_owned)
                    .collect(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_tools;
    use crate::definitions::hooks::Hooks;
    use crate::definitions::registry::Registry;
    use crate::definitions::spec::AgentSpec;
    use crate::definitions::spec::Mode;
    use crate::run::delegate::Delegate;
    use crate::run::orchestrator::{Orchestrator, RunError};
    use std::sync::Arc;

    fn with_tools(tools: &[&str]) -> Registry {
        let mut registry = Registry::shipped();
        registry.insert(AgentSpec {
            name: "reviewer".into(),
            description: "Reviews.".into(),
            mode: Mode::Subagent,
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            ..AgentSpec::default()
        });
        registry
    }

    /// A delegate that is never called: the builder refuses before any run.
    struct Nowhere;

    #[async_trait::async_trait]
    impl Delegate for Nowhere {
        async fn run(&self, _call: crate::run::delegate::DelegatedCall) -> crate::Delegated {
            unreachable!("no run starts")
        }
    }

    #[test]
    fn an_engine_run_refuses_hooks_and_mcp_servers_it_cannot_honour() {
        let dir = tempfile::tempdir().unwrap();
        let builder = || {
            Orchestrator::builder()
                .anthropic(cadre_model::AnthropicConfig::new("k"))
                .workspace(dir.path())
                .delegate(Arc::new(Nowhere))
        };
        assert!(builder().build().is_ok());
        let (hooks, _) = Hooks::from_json(
            &serde_json::json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "guard.sh"}]}]}),
            "settings.json",
        );
        let e = builder().hooks(hooks.clone()).build().err().unwrap();
        assert!(
            matches!(&e, RunError::Unhonoured(lines) if lines.len() == 1),
            "{e}"
        );
        assert!(e.to_string().contains("the workers run no hooks"), "{e}");
        let e = builder()
            .agent(AgentSpec {
                name: "guarded".into(),
                description: "Guarded.".into(),
                hooks,
                ..AgentSpec::default()
            })
            .build()
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("agent type guarded has hooks"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_tool_name_is_an_error_naming_the_closest() {
        let e = check_tools(&with_tools(&["raed_file", "grep"]), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "agent type \"reviewer\" names the tool \"raed_file\", which is no tool of this orchestrator (did you mean read_file or edit_file?)"
        );
        assert!(check_tools(
            &with_tools(&["Read", "Bash(git diff:*)", "mcp__docs__find", "*"]),
            &[]
        )
        .is_ok());
        assert!(check_tools(&Registry::shipped(), &[]).is_ok());
        let e = check_tools(&with_tools(&["zzz"]), &[]).unwrap_err();
        assert!(!e.to_string().contains("did you mean"), "{e}");
    }
}
