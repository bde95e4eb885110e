//! The orchestrator: owns the registry, the model, the live roster, the limits and the
//! shared budget, and builds and runs every agent of a run — the primary one and each
//! subagent a `Task` call asks for.

use crate::definitions::registry::{tools_for, Registry, SKILL_TOOL, TASK_TOOL};
use crate::definitions::skills::SkillSet;
use crate::definitions::spec::AgentSpec;
use crate::record::events::{millis, Event, EventHandler};
use crate::record::journal::{FileJournal, Journal, JournalError, Step};
use crate::record::transcript::{RunDir, Transcript};
use crate::record::usage::{AgentRecord, UsageReport};
use crate::run::agent::{Agent, AgentConfig};
use crate::run::background::{Background, TaskOutputTool, TaskStopTool};
use crate::run::budget::Budget;
use crate::run::mcp_tools::mcp_tools_for;
use crate::run::outcome::{AgentOutcome, StopKind};
use crate::run::prompt;
use crate::run::rebuild::Rebuilt;
use crate::run::skill_tool::SkillTool;
use crate::run::task::TaskTool;
use crate::run::toolset::ToolSet;
use cadre_mcp::McpServers;
use cadre_model::{resolve_model_alias, Message, Model, Usage};
use cadre_tools::{
    builtin_tools, Finished, PathLocks, SandboxMode, Tool, ToolContext, ToolLimits, Workspace,
    Worktree,
};
use dashmap::DashMap;
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Limits that hold across the whole tree of agents.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most model requests in flight at once, across every agent.
    pub max_parallel: usize,
    /// How deep delegation may go: the primary agent is depth 0, its subagents depth 1.
    pub max_depth: u32,
    /// Most `Task` calls one agent may have running at once; the excess is refused.
    pub max_fanout: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_parallel: 16,
            max_depth: 2,
            max_fanout: 64,
        }
    }
}

/// Everything an orchestrator needs besides its registry.
pub struct RunConfig {
    /// The folder every agent works in.
    pub workspace: Arc<Workspace>,
    /// The model client every agent talks through.
    pub model: Arc<dyn Model>,
    /// The model id for the primary agent and for types that say `inherit`.
    pub model_id: String,
    /// Tree-wide limits.
    pub limits: Limits,
    /// Token budget for the whole tree; `None` is unlimited.
    pub budget_tokens: Option<u64>,
    /// Output cap per model response.
    pub max_tokens: u32,
    /// The models' context window in tokens (old tool results are cleared near it); `None`
    /// takes each model's own: known for Claude models, else as the server reports it,
    /// else [`DEFAULT_CONTEXT_TOKENS`].
    pub context_tokens: Option<u64>,
    /// Input tokens at which conversations are compacted, unless an agent type says
    /// otherwise; `None` never compacts.
    pub compact_at: Option<u64>,
    /// Overrides the primary agent's `max_turns`.
    pub max_turns: Option<u32>,
    /// Tool caps (bash timeout, output size, …).
    pub tool_limits: ToolLimits,
    /// Where run folders go (normally `<workspace>/.cadre/runs`); `None` writes nothing.
    pub runs_dir: Option<PathBuf>,
    /// The skills agents may load with the `Skill` tool.
    pub skills: Arc<SkillSet>,
    /// Whether `bash` runs under the Landlock sandbox (the default) or without one.
    pub sandbox: SandboxMode,
    /// The run's MCP servers, started when an agent allowed them is first built.
    pub mcp: Arc<McpServers>,
    /// The run's id (its folder, when that name is free, and its worktree branches);
    /// `None` makes one. A replay passes the recorded run's, so it names things alike.
    pub run_id: Option<String>,
}

impl RunConfig {
    /// A configuration with default limits and no transcripts.
    pub fn new(
        workspace: Arc<Workspace>,
        model: Arc<dyn Model>,
        model_id: impl Into<String>,
    ) -> Self {
        Self {
            workspace,
            model,
            model_id: model_id.into(),
            limits: Limits::default(),
            budget_tokens: None,
            max_tokens: 8192,
            context_tokens: None,
            compact_at: Some(DEFAULT_COMPACT_AT),
            max_turns: None,
            tool_limits: ToolLimits::default(),
            runs_dir: None,
            skills: Arc::default(),
            sandbox: SandboxMode::default(),
            mcp: Arc::default(),
            run_id: None,
        }
    }
}

/// The context window assumed for a model that neither cadre nor its server knows.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 200_000;

/// Input tokens at which conversations are compacted by default.
pub const DEFAULT_COMPACT_AT: u64 = 150_000;

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No such agent type.
    #[error("unknown agent type {name:?}; the types are: {known}")]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// The type exists but may not run as the primary agent.
    #[error(
        "agent type {0:?} is a subagent type (mode: subagent) and cannot run as the primary agent"
    )]
    NotPrimary(String),
    /// The type cannot start (every entry of its `tools` was dropped while loading).
    #[error("{0}")]
    Unusable(String),
    /// The run folder could not be created.
    #[error("cannot create the run folder: {0}")]
    RunDir(#[from] std::io::Error),
    /// The run's journal could not be read or written.
    #[error("{0}")]
    Journal(#[from] JournalError),
    /// Resuming needs a journal, and this run has none (or no run header).
    #[error("run {0} has no journal to resume from (it was made by an older cadre, or with --no-transcripts)")]
    NoJournal(String),
    /// The run to resume already ended.
    #[error("run {id} already finished ({stop}); to ask a follow-up, use `cadre run --resume {id} TASK`")]
    AlreadyFinished {
        /// The run id.
        id: String,
        /// How it ended.
        stop: String,
    },
    /// Compacting the conversation failed.
    #[error("could not compact the conversation: {0}")]
    Compact(String),
    /// The run to continue has not ended: resume it first.
    #[error("run {0} has not finished; `cadre resume {0}` carries it on")]
    NotFinished(String),
}

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
    /// Its type's colour in the live display, if it has one.
    pub color: Option<String>,
    /// Whether it runs in the background (its parent goes on meanwhile).
    pub background: bool,
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
}

/// Who is calling `Task`: the parent's path, depth and model.
#[derive(Debug, Clone)]
pub struct Parent {
    /// The parent's path.
    pub path: String,
    /// The parent's depth (0 for the primary agent).
    pub depth: u32,
    /// The parent's model id, for subagent types that say `inherit`.
    pub model: String,
    /// `Task` calls of this parent running now.
    running: Arc<AtomicU32>,
    /// The subagents it started in the background.
    pub(crate) background: Arc<Background>,
    /// The folder its tools are confined to: the run's workspace, or the worktree of an
    /// isolated subagent (whose own subagents work there too).
    pub(crate) workspace: Arc<Workspace>,
}

impl Parent {
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
    /// Why the primary agent stopped.
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
    cancel: CancellationToken,
    locks: Arc<PathLocks>,
    builtins: Vec<Arc<dyn Tool>>,
    roster: DashMap<String, RosterEntry>,
    records: Mutex<Vec<AgentRecord>>,
    counters: DashMap<String, u32>,
    run_dir: Mutex<Option<RunDir>>,
    journal: Mutex<Option<Arc<dyn Journal>>>,
    /// Agents rebuilt from the journal of a resumed run, by path.
    resumed: DashMap<String, Rebuilt>,
    /// The subagent each journaled `Task` call started: (parent path, call id) → path.
    children: DashMap<(String, String), String>,
    /// The run's id when it writes no run folder (worktree branches are named by it).
    unsaved_id: String,
}

/// How an agent starts: on a fresh prompt, or from its journal.
enum Start<'a> {
    Fresh(&'a str),
    Resume(Box<Rebuilt>),
}

impl Orchestrator {
    /// An orchestrator for one run; `events` receives every agent's events.
    pub fn new(registry: Registry, config: RunConfig, events: EventHandler) -> Arc<Self> {
        Arc::new(Self {
            budget: Budget::new(config.budget_tokens),
            limiter: Arc::new(Semaphore::new(config.limits.max_parallel.max(1))),
            registry,
            config,
            events,
            cancel: CancellationToken::new(),
            locks: Arc::default(),
            builtins: builtin_tools(),
            roster: DashMap::new(),
            records: Mutex::new(Vec::new()),
            counters: DashMap::new(),
            run_dir: Mutex::new(None),
            journal: Mutex::new(None),
            resumed: DashMap::new(),
            children: DashMap::new(),
            unsaved_id: crate::record::transcript::new_run_id(),
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
        let spec = self.primary_spec(agent_type)?;
        if let Some(why) = spec.unusable() {
            return Err(RunError::Unusable(why));
        }
        if let Some(runs) = &self.config.runs_dir {
            let dir = match &self.config.run_id {
                Some(id) => RunDir::create_named(runs, id)?,
                None => RunDir::create(runs)?,
            };
            let journal: Arc<dyn Journal> = Arc::new(FileJournal::create(dir.path())?);
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

    /// Carries on the run in the run folder `dir` from its journal: every agent that was
    /// running is rebuilt and goes on; no journaled model request is sent again and no
    /// journaled tool call runs again. With `follow_up`, the run must have finished, and
    /// its primary conversation continues with that new user message.
    pub async fn resume(
        self: &Arc<Self>,
        dir: &Path,
        follow_up: Option<&str>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let (run_dir, journal, spec, mut rebuilt, task) = self.load_run(dir).await?;
        let id = run_dir.id().to_owned();
        match (follow_up, &rebuilt.finished) {
            (None, Some((stop, _))) => {
                return Err(RunError::AlreadyFinished {
                    id,
                    stop: stop.to_string(),
                })
            }
            // A cancelled run may take a follow-up; a killed one must be resumed first.
            (Some(_), None) if !rebuilt.cancelled => return Err(RunError::NotFinished(id)),
            _ => {}
        }
        *self.run_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(run_dir);
        *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal.clone());
        if let Some(text) = follow_up {
            let message = Message::user_text(text);
            journal
                .append(&Step::UserMessage {
                    agent: spec.name.clone(),
                    message: message.clone(),
                })
                .await?;
            rebuilt.follow_up(message);
        }
        let description = rebuilt.description.clone();
        self.run_primary(spec, &description, &task, Start::Resume(Box::new(rebuilt)))
            .await
    }

    /// Compacts the primary conversation of the ended run in `dir` now (the `/compact` of
    /// an interactive session), so the next follow-up starts from the summary; returns what
    /// compacting cost.
    pub async fn compact(self: &Arc<Self>, dir: &Path) -> Result<Usage, RunError> {
        let (run_dir, journal, spec, rebuilt, _) = self.load_run(dir).await?;
        if rebuilt.finished.is_none() && !rebuilt.cancelled {
            return Err(RunError::NotFinished(run_dir.id().to_owned()));
        }
        *self.run_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(run_dir);
        *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal);
        let model = self.model_for(&spec, &self.config.model_id);
        let me = Parent::new(spec.name.clone(), 0, model, self.config.workspace.clone());
        let (agent, own_servers) = self
            .build_agent(&spec, &me, self.cancel.child_token())
            .await;
        let result = agent.compact(&rebuilt.history).await;
        for server in own_servers {
            server.shutdown().await;
        }
        self.config.mcp.shutdown().await;
        result
            .map(|(_, used)| used)
            .map_err(|e| RunError::Compact(e.to_string()))
    }

    /// Opens the run folder `dir` and rebuilds its tree from the journal: the folder, the
    /// journal, the primary agent's type, its rebuilt state, and the run's task.
    async fn load_run(
        &self,
        dir: &Path,
    ) -> Result<(RunDir, Arc<dyn Journal>, AgentSpec, Rebuilt, String), RunError> {
        let run_dir = RunDir::open(dir)?;
        let id = run_dir.id().to_owned();
        let (journal, notes) = FileJournal::open(dir).map_err(|e| match e {
            JournalError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                RunError::NoJournal(id.clone())
            }
            other => RunError::Journal(other),
        })?;
        if notes.dropped_partial_line {
            tracing::warn!("run {id}: the journal's last line was cut off when the run was killed; that step never took effect and was dropped");
        }
        let Some(Step::Run {
            agent_type, task, ..
        }) = journal.steps("").await?.into_iter().next()
        else {
            return Err(RunError::NoJournal(id));
        };
        let spec = self.primary_spec(&agent_type)?.clone();
        let journal: Arc<dyn Journal> = Arc::new(journal);
        let primary = self.load_tree(&journal, &spec.name).await?;
        let Some(rebuilt) = primary else {
            return Err(RunError::NoJournal(id));
        };
        Ok((run_dir, journal, spec, rebuilt, task))
    }

    /// The type `agent_type`, if it may run as the primary agent.
    fn primary_spec(&self, agent_type: &str) -> Result<&AgentSpec, RunError> {
        let spec = self
            .registry
            .get(agent_type)
            .ok_or_else(|| RunError::UnknownAgent {
                name: agent_type.to_owned(),
                known: self
                    .registry
                    .all()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        if !spec.mode.is_primary() {
            return Err(RunError::NotPrimary(agent_type.to_owned()));
        }
        Ok(spec)
    }

    /// Rebuilds the agent at `path` and, through the subagents its `Task` calls started,
    /// the whole tree below it. Finished agents are counted in the usage now (they will not
    /// run again); the others wait in `resumed` for their parent's call to reach them.
    async fn load_tree(
        &self,
        journal: &Arc<dyn Journal>,
        path: &str,
    ) -> Result<Option<Rebuilt>, RunError> {
        let mut root = None;
        let mut queue = vec![path.to_owned()];
        while let Some(path) = queue.pop() {
            let Some(rebuilt) = Rebuilt::from_steps(&journal.steps(&path).await?) else {
                continue;
            };
            for (call, child) in &rebuilt.spawned {
                self.children
                    .insert((path.clone(), call.clone()), child.clone());
                queue.push(child.clone());
            }
            // New subagents must not take a path the journal already uses.
            if let Some((kind, n)) = path.rsplit('/').next().and_then(|l| l.split_once('#')) {
                let n: u32 = n.parse().unwrap_or(0);
                let mut c = self.counters.entry(kind.to_owned()).or_insert(0);
                *c = (*c).max(n);
            }
            if root.is_none() {
                root = Some(rebuilt);
                continue;
            }
            if let Some((stop, _)) = &rebuilt.finished {
                self.record_earlier(&path, &rebuilt, stop.clone());
            }
            self.resumed.insert(path, rebuilt);
        }
        Ok(root)
    }

    /// Counts the usage of an agent that ran before the resume and will not run again.
    fn record_earlier(&self, path: &str, rebuilt: &Rebuilt, stop: StopKind) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(AgentRecord {
                path: path.to_owned(),
                agent_type: rebuilt.agent_type.clone(),
                description: rebuilt.description.clone(),
                model: String::new(),
                turns: rebuilt.turns,
                tool_calls: rebuilt.tool_calls,
                usage: rebuilt.usage,
                elapsed_ms: 0,
                stop,
            });
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
        if let Some(max_turns) = self.config.max_turns {
            spec.max_turns = max_turns;
        }
        let model = self.model_for(&spec, &self.config.model_id);
        let me = Parent::new(spec.name.clone(), 0, model, self.config.workspace.clone());
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
        self.config.mcp.shutdown().await;
        // Agents of the journal that no call reached again (a subagent cancelled before the
        // resume, whose parent already has its result) still count in the usage.
        let left: Vec<(String, Rebuilt)> = self
            .resumed
            .iter()
            .filter(|e| e.value().finished.is_none())
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (path, rebuilt) in left {
            self.resumed.remove(&path);
            self.record_earlier(&path, &rebuilt, StopKind::Cancelled);
        }
        let summary = RunSummary {
            run_id: self.run_dir().map(|d| d.id().to_owned()),
            task: task.to_owned(),
            answer: outcome.text.clone(),
            stop: outcome.stop.clone(),
            elapsed_ms: millis(started.elapsed()),
            usage: self.usage(),
        };
        if let Some(dir) = self.run_dir() {
            if let Err(e) = dir.write_summary(&summary) {
                tracing::warn!("could not write the run summary: {e}");
            }
        }
        Ok((outcome, summary))
    }

    /// Gives the run up without waiting for its agents (a second Ctrl-C): cancels every
    /// agent and writes `summary.json` from what has ended so far, stop `cancelled`. The
    /// caller then drops the run's future, whose agents' commands die with it.
    pub fn abandon(&self, task: &str, elapsed_ms: u64) -> RunSummary {
        self.cancel.cancel();
        let summary = RunSummary {
            run_id: self.run_dir().map(|d| d.id().to_owned()),
            task: task.to_owned(),
            answer: String::new(),
            stop: StopKind::Cancelled,
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

    /// The run folder, once `run` has created it.
    pub fn run_dir(&self) -> Option<RunDir> {
        self.run_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs one subagent for a `Task` call and returns its final text, or why it failed.
    pub(crate) async fn run_subagent(
        self: &Arc<Self>,
        parent: &Parent,
        task: &TaskCall<'_>,
        cancel: CancellationToken,
    ) -> Result<String, String> {
        let TaskCall {
            subagent_type,
            description,
            prompt,
            call,
            background,
        } = *task;
        let Some(spec) = self
            .registry
            .get(subagent_type)
            .filter(|s| s.mode.is_subagent())
        else {
            let known: Vec<&str> = self.registry.subagents().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "unknown subagent_type {subagent_type:?}; the subagent types are: {}",
                known.join(", ")
            ));
        };
        if let Some(why) = spec.unusable() {
            return Err(why);
        }
        let depth = parent.depth + 1;
        if depth > self.config.limits.max_depth {
            return Err(format!(
                "delegation is limited to {} levels; {} cannot start another subagent — do this work yourself",
                self.config.limits.max_depth, parent.path
            ));
        }
        let running = parent.running.fetch_add(1, Ordering::SeqCst);
        let _release = Release(&parent.running);
        if running as usize >= self.config.limits.max_fanout {
            return Err(format!(
                "refused: {} already has {} subagents running (the limit is {}); wait for their results and delegate the rest afterwards",
                parent.path, running, self.config.limits.max_fanout
            ));
        }
        // A resumed run finds the subagent this call started before, by the call's id.
        let earlier = self
            .resumed_child(&parent.path, call)
            .and_then(|path| self.resumed.remove(&path));
        let (path, start) = match earlier {
            // It had finished: its result stands (its usage was counted when it was loaded).
            Some((
                path,
                Rebuilt {
                    finished: Some((stop, text)),
                    ..
                },
            )) => return subagent_result(&path, stop, text),
            Some((path, rebuilt)) => (path, Start::Resume(Box::new(rebuilt))),
            None => {
                let n = {
                    let mut c = self.counters.entry(spec.name.clone()).or_insert(0);
                    *c += 1;
                    *c
                };
                let path = format!("{}/{}#{n}", parent.path, spec.name);
                self.journal(Step::Spawned {
                    agent: parent.path.clone(),
                    call: call.to_owned(),
                    child: path.clone(),
                })
                .await;
                (path, Start::Fresh(prompt))
            }
        };
        let model = self.model_for(spec, &parent.model);
        // An isolated subagent works in a worktree of its own: its Workspace root, which
        // confines its tools and its sandbox alike.
        let worktree = if spec.is_isolated() {
            let wt = Worktree::create(parent.workspace.root(), &self.run_id(), &path)
                .await
                .map_err(|e| format!("subagent {path} could not get its own worktree: {e}"))?;
            Some(wt)
        } else {
            None
        };
        let workspace = match worktree.as_ref().map(|wt| Workspace::new(wt.workspace())) {
            None => parent.workspace.clone(),
            Some(Ok(w)) => Arc::new(w),
            Some(Err(e)) => {
                if let Some(wt) = worktree {
                    if let Err(e) = wt.discard().await {
                        tracing::warn!("could not remove the worktree of {path}: {e}");
                    }
                }
                return Err(format!(
                    "subagent {path} could not work in its worktree: {e}"
                ));
            }
        };
        let me = Parent::new(path.clone(), depth, model, workspace);
        let outcome = self
            .run_agent(spec, me, description, start, cancel, background)
            .await;
        let result = subagent_result(&path, outcome.stop, outcome.text);
        match worktree {
            None => result,
            Some(wt) => {
                let report = match wt.finish(&format!("{path}: {description}")).await {
                    Ok(Finished::Unchanged) => {
                        "\n\n[It changed no file; its worktree and branch were removed.]".to_owned()
                    }
                    Ok(Finished::Committed { branch, diffstat }) => format!(
                        "\n\n[Its changes are committed on branch {branch} (the main checkout is untouched):\n{diffstat}]"
                    ),
                    Err(e) => format!("\n\n[Its worktree could not be committed: {e}]"),
                };
                match result {
                    Ok(text) => Ok(text + &report),
                    Err(why) => Err(why + &report),
                }
            }
        }
    }

    /// The model id for `spec`: `inherit` takes the parent's; aliases resolve.
    fn model_for(&self, spec: &AgentSpec, parent_model: &str) -> String {
        match spec.model.as_str() {
            "inherit" => parent_model.to_owned(),
            other => resolve_model_alias(other).to_owned(),
        }
    }

    /// Builds the agent `me` of type `spec`, runs it on `prompt`, and records the result.
    async fn run_agent(
        self: &Arc<Self>,
        spec: &AgentSpec,
        me: Parent,
        description: &str,
        start: Start<'_>,
        cancel: CancellationToken,
        background: bool,
    ) -> AgentOutcome {
        let started = Instant::now();
        let (agent, own_servers) = self.build_agent(spec, &me, cancel).await;
        let children = me.background.clone();
        let Parent { path, model, .. } = me;
        self.roster.insert(
            path.clone(),
            RosterEntry {
                path: path.clone(),
                agent_type: spec.name.clone(),
                description: description.to_owned(),
                turn: 0,
                current_tool: None,
                tokens: 0,
                color: spec.color.clone(),
                background,
                started,
            },
        );
        let transcript = self.open_transcript(&agent, spec, description);
        let agent = Agent {
            transcript: transcript.clone(),
            ..agent
        };
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
                let history = vec![Message::user_text(prompt)];
                self.journal(Step::Started {
                    agent: path.clone(),
                    agent_type: spec.name.clone(),
                    description: description.to_owned(),
                    history: history.clone(),
                })
                .await;
                agent.run(history).await
            }
            Start::Resume(rebuilt) => agent.resume(*rebuilt).await,
        };
        // Background subagents never outlive their parent: one that stopped early (turn
        // limit, budget, error) takes them down with it.
        children.cancel_all();
        children.settle().await;
        self.journal(Step::Finished {
            agent: path.clone(),
            stop: outcome.stop.clone(),
            text: outcome.text.clone(),
        })
        .await;
        for server in own_servers {
            server.shutdown().await;
        }
        if let Some(t) = &transcript {
            t.record("outcome", json!({"stop": outcome.stop, "text": outcome.text, "turns": outcome.turns, "tool_calls": outcome.tool_calls, "usage": outcome.usage}));
        }
        self.roster.remove(&path);
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
                elapsed_ms: millis(started.elapsed()),
                stop: outcome.stop.clone(),
            });
        outcome
    }

    fn open_transcript(
        &self,
        agent: &Agent,
        spec: &AgentSpec,
        description: &str,
    ) -> Option<Arc<Transcript>> {
        let dir = self.run_dir()?;
        match dir.transcript(&agent.config.path) {
            Ok(t) => {
                t.record(
                    "agent",
                    json!({
                        "path": agent.config.path,
                        "agent_type": spec.name,
                        "description": description,
                        "model": agent.config.model,
                        "system": agent.config.system,
                        "tools": agent.tools.names(),
                    }),
                );
                Some(Arc::new(t))
            }
            Err(e) => {
                tracing::warn!(
                    "could not create a transcript for {}: {e}",
                    agent.config.path
                );
                None
            }
        }
    }

    /// The agent for `spec`: its prompt, its filtered tools (with `Task` while depth
    /// allows, `Skill` when some skill is visible to it, and the MCP tools its type may
    /// use), its own file tracker, and the run's shared budget, locks and limiter. Also
    /// returns the MCP servers started for it alone, to stop when it ends.
    async fn build_agent(
        self: &Arc<Self>,
        spec: &AgentSpec,
        me: &Parent,
        cancel: CancellationToken,
    ) -> (Agent, Vec<Arc<cadre_mcp::Server>>) {
        let mut available: Vec<&str> = self.builtins.iter().map(|t| t.name()).collect();
        if me.depth < self.config.limits.max_depth {
            available.push(TASK_TOOL);
        }
        let visible = self.config.skills.visible(&spec.skills);
        if !visible.is_empty() {
            available.push(SKILL_TOOL);
        }
        let names = tools_for(spec, &available);
        let mut tools = ToolSet::new(
            self.builtins
                .iter()
                .filter(|t| names.iter().any(|n| n == t.name()))
                .cloned(),
        );
        let delegates = names.iter().any(|n| n == TASK_TOOL);
        if delegates {
            tools.insert(Arc::new(TaskTool::new(
                self.clone(),
                me.clone(),
                spec.subagent_types.clone(),
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
        let this = self.clone();
        let agent = Agent {
            config: AgentConfig {
                path: me.path.clone(),
                agent_type: spec.name.clone(),
                model: me.model.clone(),
                system: prompt::system_prompt_for(spec, me.depth > 0, &listed, &self.config.skills),
                max_tokens: self.config.max_tokens,
                max_turns: spec.max_turns,
                context_tokens: self.context_window(&me.model).await,
                compact_at: match spec.compact_at {
                    Some(at) => at.tokens(),
                    None => self.config.compact_at,
                },
            },
            model: self.config.model.clone(),
            tools,
            ctx,
            budget: self.budget.clone(),
            events: Arc::new(move |e| this.observe(e)),
            limiter: Some(self.limiter.clone()),
            transcript: None,
            journal: self
                .journal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            inbox: delegates.then(|| me.background.clone() as Arc<dyn crate::run::agent::Inbox>),
        };
        (agent, mcp.own)
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
                tracing::warn!("could not journal a step: {e}");
            }
        }
    }

    /// Keeps the roster current, then passes the event on.
    fn observe(&self, event: Event) {
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
                Event::Usage { usage, .. } => entry.tokens += usage.total(),
                _ => {}
            }
        }
        (self.events)(event);
    }
}

/// What a parent's `Task` call gets from a subagent that stopped with `stop`.
fn subagent_result(path: &str, stop: StopKind, text: String) -> Result<String, String> {
    match stop {
        StopKind::Done if text.trim().is_empty() => {
            Ok(format!("({path} finished without a final message)"))
        }
        StopKind::Done => Ok(text),
        stop => {
            let last = text.trim();
            let last = if last.is_empty() { "(none)" } else { last };
            Err(format!(
                "subagent {path} did not finish: {stop}. Its last message: {last}"
            ))
        }
    }
}

/// Decrements a running-call counter when dropped, however the call ends.
struct Release<'a>(&'a AtomicU32);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
