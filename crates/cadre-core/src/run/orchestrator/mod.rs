//! The orchestrator: owns the registry, the model, the live roster, the limits and the
//! shared budget, and builds and runs every agent of a run — the primary one and each
//! subagent a `Task` call asks for.

use crate::definitions::permissions::PermissionMode;
use crate::definitions::registry::{tools_for, Registry, SKILL_TOOL, TASK_TOOL};
use crate::definitions::skills::SkillSet;
use crate::definitions::spec::{AgentSpec, INHERIT_MODEL};
use crate::record::events::{millis, Event, EventHandler, EventStream};
use crate::record::failure::Failure;
use crate::record::journal::{FileJournal, Journal, JournalError, JournaledRun, Step};
use crate::record::run_dir::{new_run_id, AgentPath, RunDir};
use crate::record::transcript::{
    AgentHeader, Earlier, RunTranscript, Transcript, TranscriptRecord,
};
use crate::record::usage::{AgentRecord, UsageReport};
use crate::run::agent::{Agent, AgentConfig};
use crate::run::answer::AnswerSchema;
use crate::run::background::{Background, TaskOutputTool, TaskStopTool};
use crate::run::budget::Budget;
use crate::run::continuation::MAX_CONTINUATIONS;
use crate::run::fork::ForkBase;
use crate::run::mcp_tools::mcp_tools_for;
use crate::run::outcome::{AgentOutcome, Outcome, StopKind};
use crate::run::permissions::Permissions;
use crate::run::prompt;
use crate::run::skill_tool::SkillTool;
use crate::run::state::AgentState;
use crate::run::task::TaskTool;
use crate::run::team::{team_tools, Seat, Team};
use crate::run::toolset::ToolSet;
use cadre_mcp::McpServers;
use cadre_model::{resolve_model_alias, Message, Model, Usage};
use cadre_tools::{
    builtin_tools, Finished, PathLocks, SandboxMode, Tool, ToolContext, ToolLimits, Workspace,
    Worktree,
};
use dashmap::DashMap;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

mod config;
mod forks;
mod members;
mod results;
mod resume;
mod subagent;
mod typed;
mod unended;

pub use config::*;
pub use subagent::SubagentError;

/// One agent that is running now, as the live display shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RosterEntry {
    /// Its path.
    pub path: String,
    /// Its agent type.
    pub agent_type: String,
    /// What it was asked to do.
    pub description: String,
    /// Model requests made so far.
    pub turn: u32,
    /// The tool it is running, if any.
    pub current_tool: Option<String>,
    /// Tokens used so far.
    pub tokens: u64,
    /// Those tokens by kind, for the record of an agent that never ends.
    #[serde(skip)]
    pub usage: Usage,
    /// Its type's colour in the live display, if it has one.
    pub color: Option<String>,
    /// Whether it runs in the background (its parent goes on meanwhile).
    pub background: bool,
    /// Its name in the run's team, when it is a member started with one.
    pub member: Option<String>,
    /// Whether it is a team member waiting for a message (its turn is over).
    pub waiting: bool,
    /// Team messages waiting for it.
    pub unread: u32,
    /// When it started.
    #[serde(skip)]
    pub started: Instant,
}

/// One `Task` call, as the orchestrator runs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskCall<'a> {
    /// The type of subagent to start.
    pub subagent_type: &'a str,
    /// What it is asked to do, in a few words.
    pub description: &'a str,
    /// Its first user message.
    pub prompt: &'a str,
    /// The `tool_use` id of the call (a resumed run finds the subagent by it).
    pub call: &'a str,
    /// Whether the call returned at once and the subagent runs in the background.
    pub background: bool,
    /// The schema the subagent's answer must match, given by the call.
    pub answer: Option<&'a AnswerSchema>,
    /// The conversation a fork starts from (`subagent_type: "fork"`).
    pub fork: Option<&'a Arc<ForkBase>>,
}

/// The running agent's handle: its path, depth, model and workspace, the `Task` calls it has
/// running and the subagents it started in the background. Its `Task` tools hold a clone.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    /// The agent's path.
    pub path: String,
    /// Its depth (0 for the primary agent).
    pub depth: u32,
    /// Its model id, which its subagent types that say `inherit` take.
    pub model: String,
    /// `Task` calls of this parent running now.
    running: Arc<AtomicU32>,
    /// The subagents it started in the background.
    pub(crate) background: Arc<Background>,
    /// The folder its tools are confined to: the run's workspace, or the worktree of an
    /// isolated subagent (whose own subagents work there too).
    pub(crate) workspace: Arc<Workspace>,
    /// Its name in the run's team, when it is a member (the primary agent, or a subagent
    /// started with a name).
    pub(crate) member: Option<String>,
    /// The schema its answer must match, when its caller gave one (its type's own is used
    /// otherwise).
    pub(crate) answer: Option<AnswerSchema>,
    /// The conversation it was forked from, when it is a fork.
    pub(crate) fork: Option<Arc<ForkBase>>,
}

impl AgentHandle {
    /// The same handle without its background subagents, for a task that must not keep
    /// them alive.
    pub(crate) fn detached(&self) -> Self {
        Self {
            background: Arc::default(),
            ..self.clone()
        }
    }

    fn new(path: String, depth: u32, model: String, workspace: Arc<Workspace>) -> Self {
        Self {
            path,
            depth,
            model,
            running: Arc::default(),
            background: Arc::default(),
            workspace,
            member: None,
            answer: None,
            fork: None,
        }
    }
}

/// The summary written to `summary.json` and returned to callers.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The run id (the run folder's name), if transcripts were written.
    pub run_id: Option<String>,
    /// The task given to the primary agent.
    pub task: String,
    /// The primary agent's final text.
    pub answer: String,
    /// What became of the primary agent's work (always `stop`'s outcome).
    pub outcome: Outcome,
    /// Why the primary agent stopped, as the raw reason.
    pub stop: StopKind,
    /// Wall time of the whole run, in milliseconds.
    pub elapsed_ms: u64,
    /// Usage per agent, per type and in total.
    pub usage: UsageReport,
}

/// Builds and runs agents; one per run.
pub struct Orchestrator {
    registry: Registry,
    config: RunConfig,
    events: EventHandler,
    budget: Budget,
    limiter: Arc<Semaphore>,
    /// Whether its one run began (see [`Orchestrator::run`]).
    ran: std::sync::atomic::AtomicBool,
    cancel: CancellationToken,
    locks: Arc<PathLocks>,
    builtins: Vec<Arc<dyn Tool>>,
    roster: DashMap<String, RosterEntry>,
    /// The agents whose end was told: a run given up tells it for the agents still at work,
    /// and their own end, if it still comes, is not told again.
    ended: dashmap::DashSet<String>,
    records: Mutex<Vec<AgentRecord>>,
    counters: DashMap<String, u32>,
    run_dir: Mutex<Option<RunDir>>,
    /// The run folder's transcript, opened for the first agent that writes to it.
    transcript: std::sync::OnceLock<Option<Arc<RunTranscript>>>,
    journal: Mutex<Option<Arc<dyn Journal>>>,
    /// Agents rebuilt from the journal of a resumed run, by path.
    resumed: DashMap<String, AgentState>,
    /// The subagent each journaled `Task` call started: (parent path, call id) → path.
    children: DashMap<(String, String), String>,
    /// The run's id when it writes no run folder (worktree branches are named by it).
    unsaved_id: String,
    /// The event streams handed out by [`Orchestrator::events`].
    streams: RwLock<Vec<tokio::sync::mpsc::UnboundedSender<Event>>>,
    /// The run's team: its members, their messages and the shared task list.
    team: Arc<Team>,
    /// Whether this is a team run (`Task` takes a name; see [`RunConfig::team`]).
    teams_on: std::sync::atomic::AtomicBool,
    /// The system prompts given out so far, one copy each: agents of one type share theirs.
    prompts: dashmap::DashSet<Arc<str>>,
    /// The schema the primary agent's answer must match ([`Orchestrator::run_typed`]).
    primary_answer: Mutex<Option<AnswerSchema>>,
    /// Where long answers are kept.
    results: results::ResultsFolder,
    /// The run's hooks, compiled once.
    hooks: crate::run::hooks::RunHooks,
    /// The first file the run could not keep (its journal, a whole answer), which stops it.
    failure: Arc<Failure>,
}

/// The type `agent_type` of `registry`, if it may run as the primary agent.
pub fn primary_spec<'a>(
    registry: &'a Registry,
    agent_type: &str,
) -> Result<&'a AgentSpec, RunError> {
    let spec = registry
        .get(agent_type)
        .ok_or_else(|| RunError::UnknownAgent {
            name: agent_type.to_owned(),
            known: registry
                .all()
                .filter(|s| s.mode.is_primary())
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    if !spec.mode.is_primary() {
        return Err(RunError::NotPrimary(agent_type.to_owned()));
    }
    if let Some(why) = spec.unusable() {
        return Err(RunError::Unusable(why));
    }
    Ok(spec)
}

/// The built-in tools with `extra` added, each replacing a built-in of its name.
fn with_extra_tools(builtins: Vec<Arc<dyn Tool>>, extra: &[Arc<dyn Tool>]) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = builtins
        .into_iter()
        .filter(|b| extra.iter().all(|e| e.name() != b.name()))
        .collect();
    tools.extend(extra.iter().cloned());
    tools
}

/// How an agent starts: on a fresh prompt, or from its journal.
enum Start<'a> {
    Fresh(&'a str),
    Resume(Box<AgentState>),
}

impl Orchestrator {
    /// An orchestrator for one run; `events` receives every agent's events. Programs get
    /// one from [`Orchestrator::builder`], which checks the configuration first.
    pub(crate) fn new(registry: Registry, config: RunConfig, events: EventHandler) -> Arc<Self> {
        let builtins = with_extra_tools(builtin_tools(), &config.tools);
        let journal = Mutex::new(config.journal.clone());
        let unsaved_id = new_run_id();
        let cancel = CancellationToken::new();
        Arc::new(Self {
            budget: Budget::new(config.budget_tokens),
            limiter: Arc::new(Semaphore::new(config.limits.max_parallel.max(1))),
            ran: std::sync::atomic::AtomicBool::new(false),
            events,
            failure: Arc::new(Failure::new(cancel.clone())),
            cancel,
            locks: Arc::default(),
            builtins,
            roster: DashMap::new(),
            ended: dashmap::DashSet::new(),
            records: Mutex::new(Vec::new()),
            counters: DashMap::new(),
            run_dir: Mutex::new(None),
            transcript: std::sync::OnceLock::new(),
            journal,
            resumed: DashMap::new(),
            children: DashMap::new(),
            results: results::ResultsFolder::new(&unsaved_id),
            unsaved_id,
            streams: RwLock::default(),
            team: Arc::new(Team::new(config.team.clone().unwrap_or_default())),
            teams_on: std::sync::atomic::AtomicBool::new(false),
            prompts: dashmap::DashSet::new(),
            primary_answer: Mutex::new(None),
            hooks: crate::run::hooks::RunHooks::new(
                &config.hooks,
                config.workspace.root().to_path_buf(),
            ),
            registry,
            config,
        })
    }

    /// The run's id, which names its worktree branches: the configured one, its run
    /// folder's name, or one made up when it writes none.
    pub fn run_id(&self) -> String {
        if let Some(id) = &self.config.run_id {
            return id.clone();
        }
        self.run_dir()
            .map_or_else(|| self.unsaved_id.clone(), |d| d.id().to_owned())
    }

    /// The agent types of this run.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Cancelling this token stops every agent of the run.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Every event of every agent of the run, as a `Stream` that ends when the run does;
    /// subscribe before [`run`](Self::run) to miss nothing. Nothing is dropped: a slow
    /// reader only lets events queue.
    pub fn events(&self) -> EventStream {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        EventStream::new(rx)
    }

    /// Ends every event stream (the run is over).
    fn close_events(&self) {
        self.streams
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The agents running now, in the order they started.
    pub fn roster(&self) -> Vec<RosterEntry> {
        let mut entries: Vec<RosterEntry> = self.roster.iter().map(|e| e.value().clone()).collect();
        entries.sort_by_key(|e| e.started);
        entries
    }

    /// Usage of every agent that has finished.
    pub fn usage(&self) -> UsageReport {
        UsageReport::new(
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }

    /// How many agents have finished (the rows [`Self::usage`] would hold), read without
    /// building the report.
    pub fn finished_count(&self) -> usize {
        self.records.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Tokens used by the whole tree so far.
    pub fn tokens_used(&self) -> u64 {
        self.budget.used()
    }

    /// Runs the primary agent of type `agent_type` on `task` until it stops; writes the
    /// run folder when configured to.
    pub async fn run(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let result = self.start(agent_type, task).await;
        self.close_events();
        self.unless_failed(result)
    }

    /// `result`, unless the run lost a file it keeps: then the error that says which, and
    /// how to carry the run on.
    pub(super) fn unless_failed<T>(&self, result: Result<T, RunError>) -> Result<T, RunError> {
        match self.failure.take() {
            Some(lost) => Err(RunError::Stopped {
                run: self.run_dir().map(|d| d.id().to_owned()),
                lost,
            }),
            None => result,
        }
    }

    /// Claims this orchestrator for its one run: a second run, resume or compaction is
    /// refused, since the run's folder, journal, roster and usage belong to the first.
    pub(super) fn first_run(&self) -> Result<(), RunError> {
        if self.ran.swap(true, Ordering::SeqCst) {
            return Err(RunError::AlreadyRan);
        }
        Ok(())
    }

    async fn start(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let spec = primary_spec(&self.registry, agent_type)?;
        // A run that could not begin (an unknown type) leaves the orchestrator unused.
        self.first_run()?;
        if let Some(runs) = &self.config.runs_dir {
            let dir = match &self.config.run_id {
                Some(id) => RunDir::create_named(runs, id)?,
                None => RunDir::create(runs)?,
            };
            let journal = self
                .failure
                .guard(Arc::new(FileJournal::create(dir.path())?));
            journal
                .append(&Step::Run {
                    agent_type: agent_type.to_owned(),
                    task: task.to_owned(),
                    model: self.config.model_id.clone(),
                })
                .await?;
            *self.run_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir);
            *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal);
        }
        let description: String = task.chars().take(60).collect();
        self.run_primary(spec.clone(), &description, task, Start::Fresh(task))
            .await
    }

    /// Runs one agent of a run whose subagents are delegated (one invocation of a durable
    /// engine): the agent `call` names, in this orchestrator's workspace, to its end.
    /// Returns its outcome and the records of it and of every agent below it.
    pub async fn run_delegated(
        self: &Arc<Self>,
        call: &crate::run::delegate::DelegatedCall,
    ) -> (AgentOutcome, Vec<AgentRecord>) {
        let mut spec = call.spec.clone();
        if call.depth == 0 {
            if let Some(max_turns) = self.config.max_turns {
                spec.max_turns = max_turns;
            }
        }
        let me = AgentHandle::new(
            call.path.clone(),
            call.depth,
            call.model.clone(),
            self.config.workspace.clone(),
        );
        // With a runs folder, the agent's transcript is written there (its journal is the
        // delegate's), for whoever runs it elsewhere to carry back.
        if let Some(runs) = &self.config.runs_dir {
            match RunDir::create_named(runs, &self.run_id()) {
                Ok(dir) => *self.run_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir),
                Err(e) => tracing::warn!("could not create a folder for {}: {e}", call.path),
            }
        }
        let mut outcome = self
            .run_agent(
                &spec,
                me,
                &call.description,
                Start::Fresh(&call.prompt),
                self.cancel.child_token(),
                false,
            )
            .await;
        // A file the agent could not keep cancelled it: say so, not just "cancelled".
        if let Some(lost) = self.failure.take() {
            outcome.stop = StopKind::Other(format!("stopped: {lost}"));
        }
        self.config.mcp.shutdown().await;
        self.close_events();
        let records = self
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (outcome, records)
    }

    /// Whether this run's subagents run elsewhere (see [`OrchestratorBuilder::delegate`](crate::OrchestratorBuilder::delegate)).
    pub fn delegates(&self) -> bool {
        self.config.delegate.is_some()
    }

    /// Runs the primary agent of type `spec` and writes the summary.
    async fn run_primary(
        self: &Arc<Self>,
        mut spec: AgentSpec,
        description: &str,
        task: &str,
        start: Start<'_>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let started = Instant::now();
        // The run's time covers its earlier parts: the primary agent ran through each.
        let earlier = self.earlier(&spec.name).elapsed_ms;
        if let Some(max_turns) = self.config.max_turns {
            spec.max_turns = max_turns;
        }
        let model = self.model_for(&spec, &self.config.model_id);
        let mut me = AgentHandle::new(spec.name.clone(), 0, model, self.config.workspace.clone());
        me.member = self.open_team(&spec).await;
        me.answer = self
            .primary_answer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let outcome = self
            .run_agent(
                &spec,
                me,
                description,
                start,
                self.cancel.child_token(),
                false,
            )
            .await;
        // The primary answered with nothing left in flight, or stopped: every member still
        // open is closed (one at work is cancelled), and the run waits for them to end.
        self.team.finish().await;
        self.config.mcp.shutdown().await;
        // Agents of the journal that no call reached again (a subagent cancelled before the
        // resume, whose parent already has its result) still count in the usage.
        let left: Vec<(String, AgentState)> = self
            .resumed
            .iter()
            .filter(|e| e.value().finished.is_none())
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (path, rebuilt) in left {
            self.resumed.remove(&path);
            let elapsed = self.earlier(&path).elapsed_ms;
            self.record_earlier(&path, &rebuilt, StopKind::Cancelled, elapsed);
        }
        // An agent still on the roster now was dropped before it could end.
        self.record_unended(&StopKind::Killed);
        let summary = self.summarise_run(
            task,
            &outcome.text,
            outcome.stop.clone(),
            earlier + millis(started.elapsed()),
        );
        Ok((outcome, summary))
    }

    /// The run's summary as it stands, written to `summary.json` when there is a run folder.
    fn summarise_run(
        &self,
        task: &str,
        answer: &str,
        stop: StopKind,
        elapsed_ms: u64,
    ) -> RunSummary {
        let summary = RunSummary {
            run_id: self.run_dir().map(|d| d.id().to_owned()),
            task: task.to_owned(),
            answer: answer.to_owned(),
            outcome: stop.outcome(),
            stop,
            elapsed_ms,
            usage: self.usage(),
        };
        if let Some(dir) = self.run_dir() {
            if let Err(e) = dir.write_summary(&summary) {
                tracing::warn!("could not write the run summary: {e}");
            }
        }
        summary
    }

    /// Gives the run up without waiting for its agents (a second Ctrl-C): cancels every
    /// agent and writes `summary.json` from what has ended so far, stop `cancelled`. The
    /// caller then drops the run's future, whose agents' commands die with it. The agents
    /// still at work are recorded as ended here, without their `SubagentStop` hooks: giving
    /// the run up waits for nothing (background subagents and team members, which run as
    /// tasks of their own, may still end and run theirs while the process lives).
    pub fn abandon(&self, task: &str, elapsed_ms: u64) -> RunSummary {
        self.cancel.cancel();
        // The agents still at work are given up with the run: cancelled, by the person.
        self.record_unended(&StopKind::Cancelled);
        self.close_events();
        self.summarise_run(task, "", StopKind::Cancelled, elapsed_ms)
    }

    /// The run folder, once `run` has created it.
    pub fn run_dir(&self) -> Option<RunDir> {
        self.run_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The run folder's transcript: opened once the run folder is known, `None` without
    /// one (or when it cannot be opened, as a warning says).
    fn run_transcript(&self) -> Option<&Arc<RunTranscript>> {
        match self.transcript.get() {
            Some(t) => t.as_ref(),
            None => self.transcript_in(&self.run_dir()?),
        }
    }

    /// The transcript of the run in `dir` (the run folder this orchestrator works in),
    /// opened once: a resume reads what its agents wrote before from it, and its agents
    /// go on writing to it.
    fn transcript_in(&self, dir: &RunDir) -> Option<&Arc<RunTranscript>> {
        self.transcript
            .get_or_init(|| match RunTranscript::open(dir) {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => {
                    tracing::warn!("could not open {}: {e}", dir.transcript_file().display());
                    None
                }
            })
            .as_ref()
    }

    /// What the transcript of the agent at `path` holds from earlier parts of the run.
    fn earlier(&self, path: &str) -> Earlier {
        self.run_transcript()
            .map_or_else(Earlier::default, |t| t.earlier(path))
    }

    /// The model id for `spec`: `inherit` takes the parent's; aliases resolve.
    fn model_for(&self, spec: &AgentSpec, parent_model: &str) -> String {
        match spec.model.as_str() {
            INHERIT_MODEL => parent_model.to_owned(),
            other => resolve_model_alias(other).to_owned(),
        }
    }

    /// Builds the agent `me` of type `spec`, runs it on `prompt`, and records the result.
    ///
    /// An async block rather than an `async fn`: an `async fn` moves its arguments into
    /// locals of their own, and every waiting subagent's future would hold `me` twice.
    #[allow(clippy::manual_async_fn)] // an `async fn` holds its arguments twice
    fn run_agent<'a>(
        self: &'a Arc<Self>,
        spec: &'a AgentSpec,
        me: AgentHandle,
        description: &'a str,
        start: Start<'a>,
        cancel: CancellationToken,
        background: bool,
    ) -> impl std::future::Future<Output = AgentOutcome> + Send + 'a {
        async move {
            let started = Instant::now();
            let (mut agent, own_servers) =
                self.build_agent(spec, &me, cancel, Some(description)).await;
            let fork = me.fork.clone();
            let transcript = agent.transcript.clone();
            // Time run in the earlier parts of the run (a follow-up, a resume) counts too.
            let earlier = transcript.as_ref().map_or(0, |t| t.earlier().elapsed_ms);
            let children = me.background.clone();
            let member = me.member.clone().filter(|_| me.depth > 0);
            // Messages sent to a member before it is on the roster count as unread from the start.
            let unread = match &member {
                Some(name) => u32::try_from(self.team.unread(name).await).unwrap_or(u32::MAX),
                None => 0,
            };
            let AgentHandle {
                path, model, depth, ..
            } = me;
            self.roster.insert(
                path.clone(),
                RosterEntry {
                    path: path.clone(),
                    agent_type: spec.name.clone(),
                    description: description.to_owned(),
                    turn: 0,
                    current_tool: None,
                    tokens: 0,
                    usage: Usage::default(),
                    color: spec.color.clone(),
                    background,
                    member: member.clone(),
                    waiting: false,
                    unread,
                    started,
                },
            );
            self.observe(Event::Started {
                agent: path.clone(),
                agent_type: spec.name.clone(),
                description: description.to_owned(),
                model: model.clone(),
                color: spec.color.clone(),
                background,
            });
            let outcome = match start {
                Start::Fresh(prompt) => {
                    let mut history = match &fork {
                        Some(base) => {
                            let (history, point) = crate::run::fork::first_history(base, prompt);
                            agent.config.fork = Some(point);
                            history
                        }
                        None => vec![Message::user_text(prompt)],
                    };
                    // The hooks of its start may add to its first message, or refuse the prompt.
                    // Boxed, as every hook run here: few agents run hooks, and every waiting
                    // subagent's future would else hold room for one.
                    let refused = match &agent.hooks {
                        Some(hooks) => {
                            let start_hooks =
                                Box::pin(self.start_hooks(hooks, &model, prompt, &mut history));
                            start_hooks.await.map(Box::new)
                        }
                        None => None,
                    };
                    self.journal(Step::Started {
                        agent: path.clone(),
                        agent_type: spec.name.clone(),
                        description: description.to_owned(),
                        history: history.clone(),
                    })
                    .await;
                    match refused {
                        None => agent.run(history).await,
                        Some(step) => {
                            self.journal((*step).clone()).await;
                            let mut state = AgentState::new(&spec.name, description, history);
                            state.apply(*step);
                            let resume = Box::pin(agent.resume(state));
                            resume.await
                        }
                    }
                }
                Start::Resume(rebuilt) => {
                    if let Some(t) = &transcript {
                        t.catch_up(&rebuilt.history);
                    }

                    // Boxed: resuming needs a larger future than a fresh start (it may compact
                    // first), and every waiting subagent would else hold room for it.
                    let resume = Box::pin(agent.resume(*rebuilt));
                    resume.await
                }
            };
            // Background subagents never outlive their parent: one that stopped early (turn
            // limit, budget, error) takes them down with it.
            children.cancel_all();
            children.settle().await;
            if let Some(hooks) = agent.hooks.as_ref().filter(|h| !h.is_subagent()) {
                let reason = match outcome.stop {
                    StopKind::Cancelled => "prompt_input_exit",
                    _ => "other",
                };
                let session_end = Box::pin(hooks.session_end(reason));
                session_end.await;
            }
            // However it ended, a subagent's end runs its `SubagentStop` hooks once.
            if let Some(hooks) = agent.hooks.as_ref() {
                let stop = outcome.stop.to_string();
                let subagent_end = Box::pin(hooks.subagent_end(&outcome.text, &stop));
                subagent_end.await;
            }
            self.journal(Step::Finished {
                agent: path.clone(),
                stop: outcome.stop.clone(),
                text: outcome.text.clone(),
            })
            .await;
            for server in own_servers {
                server.shutdown().await;
            }
            let elapsed_ms = earlier + millis(started.elapsed());
            if let Some(t) = &transcript {
                t.outcome_after(&outcome, elapsed_ms);
            }
            // Off the roster already, it was recorded when the run was given up.
            if self.roster.remove(&path).is_none() {
                return outcome;
            }
            let result_file = self.result_name(&path, depth, &outcome.text);
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(AgentRecord {
                    path,
                    agent_type: spec.name.clone(),
                    description: description.to_owned(),
                    model,
                    turns: outcome.turns,
                    tool_calls: outcome.tool_calls,
                    usage: outcome.usage,
                    elapsed_ms,
                    outcome: outcome.stop.outcome(),
                    stop: outcome.stop.clone(),
                    result_file,
                    worker: None,
                    member,
                });
            outcome
        }
    }

    fn open_transcript(
        &self,
        agent: &Agent,
        spec: &AgentSpec,
        description: &str,
    ) -> Option<Arc<Transcript>> {
        let run = self.run_transcript()?;
        let path = agent.config.path.as_str();
        // Hooks are handed the agent's transcript path: it gets a file of its own for them.
        let own = self
            .hooks
            .any_for(spec)
            .then(|| {
                self.run_dir()
                    .map(|d| d.agent_file(&AgentPath::parse(path)))
            })
            .flatten();
        let t = run.agent(path, own.as_deref());
        t.write(TranscriptRecord::Agent(AgentHeader {
            path: path.into(),
            agent_type: spec.name.as_str().into(),
            description: description.into(),
            model: agent.config.model.as_str().into(),
            system: agent.config.system.as_ref().into(),
            tools: agent.tools.names().into_iter().map(Into::into).collect(),
        }));
        Some(Arc::new(t))
    }

    /// The agent for `spec`: its prompt, its filtered tools (with `Task` while depth
    /// allows, `Skill` when some skill is visible to it, and the MCP tools its type may
    /// use), its own file tracker, the run's shared budget, locks and limiter, and — given
    /// the `description` it runs under — its transcript. Also returns the MCP servers
    /// started for it alone, to stop when it ends.
    async fn build_agent(
        self: &Arc<Self>,
        spec: &AgentSpec,
        me: &AgentHandle,
        cancel: CancellationToken,
        description: Option<&str>,
    ) -> (Agent, Vec<Arc<cadre_mcp::Server>>) {
        let permissions = self.config.permissions.for_agent(spec, &me.path);
        // Plan mode is read-only: the type is built as one, sandbox and prompt included.
        let read_only;
        let spec = match &permissions {
            Some(p) if p.mode() == PermissionMode::Plan && !spec.read_only => {
                read_only = AgentSpec {
                    read_only: true,
                    ..spec.clone()
                };
                &read_only
            }
            _ => spec,
        };
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
        let names = tools_for(spec, &available);
        let mut tools = ToolSet::new(
            offered
                .into_iter()
                .filter(|t| names.iter().any(|n| n == t.name()))
                .cloned(),
        );
        let delegates = names.iter().any(|n| n == TASK_TOOL);
        let seat = me
            .member
            .as_ref()
            .map(|name| Seat::new(self.team.clone(), name, &me.path, me.depth == 0));
        let teams_on = self.teams_on.load(Ordering::Relaxed);
        if let Some(seat) = &seat {
            // Named members always talk; the primary agent has a seat only in a team run.
            if me.depth > 0 || teams_on {
                for tool in team_tools(seat, delegates && teams_on) {
                    tools.insert(tool);
                }
            }
        }
        if delegates {
            tools.insert_task(Arc::new(TaskTool::new(
                self.clone(),
                me.clone(),
                spec.subagent_types.clone(),
                teams_on && seat.is_some(),
            )));
            tools.insert(Arc::new(TaskOutputTool(me.background.clone())));
            tools.insert(Arc::new(TaskStopTool(me.background.clone())));
        }
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
        let mcp = mcp_tools_for(spec, &self.config.mcp, &me.path).await;
        for tool in mcp.tools {
            // A built-in of the same name is never shadowed by a server's tool.
            if tools.get(tool.name()).is_none() {
                tools.insert(tool);
            }
        }
        let mut ctx = ToolContext::new(me.workspace.clone());
        ctx.cancel = cancel;
        ctx.limits = self.config.tool_limits.clone();
        ctx.read_only = spec.read_only;
        ctx.sandbox = self.config.sandbox;
        ctx.allow_network = spec.network;
        ctx.locks = self.locks.clone();
        ctx.also_readable = Some(self.readable_results());
        if let Some(p) = &permissions {
            p.withhold(&mut tools, &ctx);
        }
        let this = self.clone();
        let events: EventHandler = Arc::new(move |e| this.observe(e));
        // An agent with hooks is always checked: a hook may ask the person, or allow a call
        // that deny rules still refuse.
        let permissions = match permissions {
            None if self.hooks.any_for(spec) => {
                self.config.permissions.for_agent_always(spec, &me.path)
            }
            p => p,
        };
        let mut agent = Agent {
            config: AgentConfig {
                path: me.path.clone(),
                agent_type: spec.name.clone(),
                model: me.model.clone(),
                system: match &me.fork {
                    // The parent's own prompt, not one made again: its bytes start the prefix.
                    Some(base) => base.system.clone(),
                    None => self.shared_prompt(prompt::system_prompt_for(
                        spec,
                        me.depth > 0,
                        &listed,
                        &self.config.skills,
                        self.config.instructions.section(),
                    )),
                },
                max_tokens: self.config.max_tokens,
                max_turns: spec.max_turns,
                context_tokens: self.context_window(&me.model).await,
                compact_at: match spec.compact_at {
                    Some(at) => at.tokens(),
                    None => self.config.compact_at,
                },
                effort: crate::run::model_settings::effort_for(spec, &me.model),
                answer: crate::run::model_settings::answer_for(spec, me.answer.as_ref()),
                fork: None,
                // A subagent's answer is all its parent gets: a cut one is asked to go on.
                continuations: if me.depth > 0 { MAX_CONTINUATIONS } else { 0 },
            },
            model: self.config.model.clone(),
            tools,
            ctx,
            budget: self.budget.clone(),
            events,
            limiter: Some(self.limiter.clone()),
            transcript: None,
            journal: self
                .journal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            inbox: delegates.then(|| me.background.clone() as Arc<dyn crate::run::agent::Inbox>),
            permissions,
            team: seat,
            hooks: None,
        };
        // A typed answer cut short cannot go on under its format (each piece would be a
        // whole JSON value): it ends cut instead.
        if agent.config.answer.is_some() {
            agent.config.continuations = 0;
        }
        if let Some(base) = &me.fork {
            if *agent.tools.definitions() != *base.tools {
                tracing::debug!(
                    "the fork {} offers other tools than the agent it forks: its first request cannot read that agent's cached prefix",
                    me.path
                );
            }
        }
        if let Some(description) = description {
            agent.transcript = self.open_transcript(&agent, spec, description);
        }
        agent.hooks = self.hooks.for_agent(
            spec,
            || self.who(spec, me, &agent.ctx),
            me.depth > 0,
            &agent.events,
            &agent.ctx.cancel,
            agent.transcript.clone(),
        );
        (agent, mcp.own)
    }

    /// Runs the hooks of an agent's fresh start: `SubagentStart` for a subagent,
    /// `SessionStart` and `UserPromptSubmit` for the primary agent on `prompt`, talking to
    /// `model`. What they add for the model joins `history`'s last message; a refused
    /// prompt comes back as the journal step that stops the agent.
    async fn start_hooks(
        &self,
        hooks: &crate::run::hooks::AgentHooks,
        model: &str,
        prompt: &str,
        history: &mut [Message],
    ) -> Option<Step> {
        use crate::definitions::hooks::HookEvent;
        let mut notes: Vec<(HookEvent, String)> = Vec::new();
        let mut refused = None;
        if hooks.is_subagent() {
            let v = hooks.subagent_start().await;
            notes.extend(v.context.map(|c| (HookEvent::SubagentStart, c)));
        } else {
            let v = hooks.session_start("startup", model).await;
            notes.extend(v.context.map(|c| (HookEvent::SessionStart, c)));
            let v = hooks.user_prompt_submit(prompt).await;
            notes.extend(v.context.map(|c| (HookEvent::UserPromptSubmit, c)));
            refused = v.stop.or(v.block).map(|reason| Step::Hooked {
                agent: hooks.agent_id().to_owned(),
                event: HookEvent::UserPromptSubmit,
                call: None,
                decision: crate::run::hooks::HookDecision::Stop {
                    reason: format!("the prompt was refused by a UserPromptSubmit hook: {reason}"),
                },
            });
        }
        // The prompt is the last message (a fork's first ones are its parent's, shared
        // with the cache, so they are left as they are).
        if let Some(last) = history.last_mut() {
            for (event, note) in notes {
                last.content.push(cadre_model::ContentBlock::text(format!(
                    "[{event} hook] {note}"
                )));
            }
        }
        refused
    }

    /// The hooks of the primary agent of type `spec`, for the moments of a run before its
    /// agent is built (a follow-up's prompt, a resume's start); `None` without any.
    pub(super) fn primary_hooks(
        self: &Arc<Self>,
        spec: &AgentSpec,
    ) -> Option<Arc<crate::run::hooks::AgentHooks>> {
        if self.config.hooks.is_empty() && spec.hooks.is_empty() {
            return None;
        }
        let model = self.model_for(spec, &self.config.model_id);
        let me = AgentHandle::new(spec.name.clone(), 0, model, self.config.workspace.clone());
        let ctx = ToolContext::new(me.workspace.clone());
        let this = self.clone();
        self.hooks.for_agent(
            spec,
            || self.who(spec, &me, &ctx),
            false,
            &(Arc::new(move |e| this.observe(e)) as EventHandler),
            &self.cancel,
            None,
        )
    }

    /// Who the agent `me` of type `spec` is, as its hooks are told.
    fn who(&self, spec: &AgentSpec, me: &AgentHandle, ctx: &ToolContext) -> crate::run::hooks::Who {
        crate::run::hooks::Who {
            session_id: self.run_id(),
            transcript_path: self
                .run_dir()
                .map(|d| d.agent_file(&AgentPath::parse(&me.path))),
            cwd: ctx.workspace.root().to_path_buf(),
            permission_mode: crate::run::hooks::claude_mode(self.config.permissions.mode_for(spec)),
            agent_id: me.path.clone(),
            agent_type: spec.name.clone(),
            parent_id: (me.depth > 0)
                .then(|| me.path.rsplit_once('/').map(|(p, _)| p.to_owned()))
                .flatten(),
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

    /// The path of the subagent that `parent`'s call `call` started before a resume.
    fn resumed_child(&self, parent: &str, call: &str) -> Option<String> {
        self.children
            .get(&(parent.to_owned(), call.to_owned()))
            .map(|c| c.value().clone())
    }

    /// Appends a step to the run's journal, if it has one.
    async fn journal(&self, step: Step) {
        let journal = self
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(journal) = journal {
            if let Err(e) = journal.append(&step).await {
                crate::record::failure::log_unjournaled(None, &e);
            }
        }
    }

    /// Keeps the roster current, then passes the event on.
    fn observe(&self, event: Event) {
        // Every start has one end: an agent's end is told once.
        if let Event::Finished { agent, .. } = &event {
            if !self.ended.insert(agent.clone()) {
                return;
            }
        }
        if let Some(mut entry) = self.roster.get_mut(event.agent()) {
            match &event {
                Event::Turn { turn, .. } => {
                    entry.turn = *turn;
                    entry.current_tool = None;
                }
                Event::ToolCall { name, input, .. } => {
                    entry.current_tool = Some(crate::record::events::describe_call(name, input));
                }
                Event::Compacting { .. } => entry.current_tool = Some("compacting…".into()),
                Event::Compacted { .. } => entry.current_tool = None,
                Event::Usage { usage, .. } => {
                    entry.tokens += usage.total();
                    entry.usage.add(usage);
                }
                Event::Idle { .. } => entry.waiting = true,
                Event::Woken { .. } => entry.waiting = false,
                Event::Delivered { .. } => entry.unread = entry.unread.saturating_sub(1),
                _ => {}
            }
        }
        if let Event::Message { to, .. } = &event {
            let recipient = self
                .roster
                .iter()
                .find(|e| e.member.as_deref() == Some(to.as_str()) || e.path == *to)
                .map(|e| e.key().clone());
            if let Some(mut entry) = recipient.and_then(|p| self.roster.get_mut(&p)) {
                entry.unread += 1;
            }
        }
        {
            let streams = self.streams.read().unwrap_or_else(|e| e.into_inner());
            for tx in streams.iter() {
                let _ = tx.send(event.clone());
            }
        }
        (self.events)(event);
    }
}
