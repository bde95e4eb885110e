//! The orchestrator: owns the registry, the model, the roster, the limits and the shared
//! budget, and builds and runs every agent of a run — the primary one and each subagent a
//! `Task` call asks for.
//!
//! Its parts: `roster` (who runs, their records, the event fan-out), `run_context` (one
//! run's folder, journal, transcript and team, made when the run starts or resumes and
//! handed down in every agent's handle), `factory` (how an agent is built), `agent_run`
//! (how one runs, from its start to its record), `spawn` (subagents: plain, team members,
//! forks), `primary` and `resume` (how a run starts and goes on), `results` and
//! `results_folder` (long answers, and where they are kept without a run folder).

use crate::definitions::registry::Registry;
use crate::definitions::spec::{AgentSpec, INHERIT_MODEL};
use crate::record::events::{EventHandler, EventStream};
use crate::record::failure::Failure;
use crate::record::run_dir::{new_run_id, RunDir};
use crate::record::usage::UsageReport;
use crate::run::answer::AnswerSchema;
use crate::run::budget::Budget;
use crate::run::hooks::RunHooks;
use crate::run::provider_stop::{Guarded, ProviderStop};
use crate::run::team::Team;
use crate::vocab::outcome::{AgentOutcome, Outcome, StopKind};
use cadre_model::resolve_model_alias;
use cadre_tools::{builtin_tools, PathLocks, Tool};
use dashmap::DashSet;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

mod agent_records;
mod agent_run;
mod config;
mod conversation;
mod converse;
mod delegated;
mod factory;
mod handle;
mod primary;
mod results;
mod results_folder;
mod resume;
mod roster;
mod run_context;
mod spawn;
mod typed;
mod workflow;
mod workflow_item;

pub use crate::run::task_result::SubagentError;
pub(crate) use config::RunConfig;
pub use config::{
    AnswerError, Limits, RunError, RunErrorKind, DEFAULT_COMPACT_AT, DEFAULT_CONTEXT_TOKENS,
};
pub use conversation::Conversation;
pub use handle::AgentHandle;
pub(crate) use handle::TaskCall;
pub use roster::RosterEntry;

use results_folder::ResultsFolder;
use roster::Roster;
use run_context::{RunContext, RunParts};

/// The summary written to `summary.json` and returned to callers.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
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

impl RunSummary {
    /// The summary of a run of `task` that answered `answer` and stopped for `stop` after
    /// `elapsed_ms`, with `usage`; its `run_id` is unset (no run folder).
    pub fn new(
        task: impl Into<String>,
        answer: impl Into<String>,
        stop: StopKind,
        elapsed_ms: u64,
        usage: UsageReport,
    ) -> Self {
        Self {
            run_id: None,
            task: task.into(),
            answer: answer.into(),
            outcome: stop.outcome(),
            stop,
            elapsed_ms,
            usage,
        }
    }
}

/// Builds and runs agents; one per run.
pub struct Orchestrator {
    registry: Registry,
    config: RunConfig,
    /// The agents running, their records and where their events go.
    roster: Arc<Roster>,
    budget: Budget,
    limiter: Arc<Semaphore>,
    cancel: CancellationToken,
    locks: Arc<PathLocks>,
    builtins: Vec<Arc<dyn Tool>>,
    /// The system prompts given out so far, one copy each: agents of one type share theirs.
    prompts: DashSet<Arc<str>>,
    /// The run's hooks, compiled once.
    hooks: RunHooks,
    /// Where long answers are kept when the run has no folder.
    results: ResultsFolder,
    /// The first file the run could not keep (its journal, a whole answer), which stops it.
    failure: Arc<Failure>,
    /// The run's id when it writes no run folder (worktree branches are named by it).
    unsaved_id: String,
    /// Whether its one run began (see [`Orchestrator::run`]).
    ran: AtomicBool,
    /// The first terminal provider error, after which nothing new starts.
    provider_stop: Arc<ProviderStop>,
    /// The run's context once it has begun, for the caller's questions while it runs
    /// ([`run_dir`](Self::run_dir), [`abandon`](Self::abandon)); the run itself hands its
    /// context down to every agent instead of reading it here.
    current: OnceLock<Arc<RunContext>>,
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
        return Err(RunError::NotPrimary {
            agent_type: agent_type.to_owned(),
        });
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

impl Orchestrator {
    /// An orchestrator for one run; `events` receives every agent's events. Programs get
    /// one from [`Orchestrator::builder`], which checks the configuration first.
    pub(crate) fn new(
        registry: Registry,
        mut config: RunConfig,
        events: EventHandler,
    ) -> Arc<Self> {
        let unsaved_id = new_run_id();
        let cancel = CancellationToken::new();
        let provider_stop = config.provider_stop.clone().unwrap_or_default();
        config.model = Arc::new(Guarded::new(config.model.clone(), provider_stop.clone()));
        Arc::new(Self {
            provider_stop,
            builtins: with_extra_tools(builtin_tools(), &config.tools),
            budget: match &config.budget_within {
                Some(above) => above.nested(config.budget_tokens),
                None => Budget::new(config.budget_tokens),
            },
            limiter: Arc::new(Semaphore::new(config.limits.max_parallel.max(1))),
            roster: Arc::new(Roster::new(events)),
            failure: Arc::new(Failure::new(cancel.clone())),
            cancel,
            locks: Arc::default(),
            prompts: DashSet::new(),
            hooks: RunHooks::new(&config.hooks, config.workspace.root().to_path_buf()),
            results: ResultsFolder::new(&unsaved_id),
            unsaved_id,
            ran: AtomicBool::new(false),
            current: OnceLock::new(),
            registry,
            config,
        })
    }

    /// The run's id, which names its worktree branches: the configured one, its run
    /// folder's name, or one made up when it writes none.
    pub fn run_id(&self) -> String {
        match self.current.get() {
            Some(run) => run.id.clone(),
            None => self.new_run_id(None),
        }
    }

    /// The id of a run whose folder is `dir`.
    fn new_run_id(&self, dir: Option<&RunDir>) -> String {
        if let Some(id) = &self.config.run_id {
            return id.clone();
        }
        dir.map_or_else(|| self.unsaved_id.clone(), |d| d.id().to_owned())
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
        self.roster.subscribe()
    }

    /// The agents running now, in the order they started.
    pub fn roster(&self) -> Vec<RosterEntry> {
        self.roster.entries()
    }

    /// Usage of every agent that has finished.
    pub fn usage(&self) -> UsageReport {
        self.roster.usage()
    }

    /// How many agents have finished (the rows [`Self::usage`] would hold), read without
    /// building the report.
    pub fn finished_count(&self) -> usize {
        self.roster.finished_count()
    }

    /// The provider's refusal that stopped the run, if one did: a key refused, no credit
    /// or quota left. Once there is one, no new subagent or workflow item starts and no
    /// request is sent.
    pub fn provider_refused(&self) -> Option<&str> {
        self.provider_stop.reason()
    }

    /// Tokens used by the whole tree so far.
    pub fn tokens_used(&self) -> u64 {
        self.budget.used()
    }

    /// Whether this run's subagents run elsewhere (see [`OrchestratorBuilder::delegate`](crate::OrchestratorBuilder::delegate)).
    pub fn delegates(&self) -> bool {
        self.config.delegate.is_some()
    }

    /// The run folder, once `run` has created it.
    pub fn run_dir(&self) -> Option<RunDir> {
        self.current.get().and_then(|run| run.dir.clone())
    }

    /// Runs the primary agent of type `agent_type` on `task` until it stops; writes the
    /// run folder when configured to.
    pub async fn run(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        self.run_to_end(agent_type, task, None).await
    }

    /// Runs a fresh run to its end (see [`run`](Self::run)), its primary agent's answer
    /// matching `answer` when given; the roster closes whatever came of it.
    async fn run_to_end(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
        answer: Option<AnswerSchema>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let result = self.start(agent_type, task, answer, None).await;
        self.roster.close();
        self.unless_failed(result)
    }

    /// `result`, unless the run lost a file it keeps: then the error that says which, and
    /// how to carry the run on.
    fn unless_failed<T>(&self, result: Result<T, RunError>) -> Result<T, RunError> {
        match self.failure.take() {
            Some(lost) => Err(RunError::Stopped {
                run: self.run_dir().map(|d| d.id().to_owned()),
                lost,
            }),
            None => result,
        }
    }

    /// Whether this orchestrator was claimed for its run already.
    fn has_run(&self) -> bool {
        self.ran.load(Ordering::SeqCst)
    }

    /// Claims this orchestrator for its one run: a second run, resume or compaction is
    /// refused, since the run's folder, journal, roster and usage belong to the first.
    fn first_run(&self) -> Result<(), RunError> {
        if self.ran.swap(true, Ordering::SeqCst) {
            return Err(RunError::AlreadyRan);
        }
        Ok(())
    }

    /// The run's context, made of `parts`, `team` and whether it is a team run; the
    /// caller's getters see the run from now on.
    fn context(&self, parts: RunParts, team: Arc<Team>, teams_on: bool) -> Arc<RunContext> {
        let results = match &parts.dir {
            Some(dir) => dir.results_dir().into(),
            None => self.results.path(),
        };
        let id = self.new_run_id(parts.dir.as_ref());
        let run = Arc::new(RunContext::new(id, parts, team, teams_on, results));
        // Every caller claimed the run first (`first_run`), so this is the one set: a
        // second would find the slot full and change nothing.
        let _ = self.current.set(run.clone());
        run
    }

    /// The run's summary as it stands, written to `summary.json` when there is a run folder.
    fn summarise_run(
        &self,
        task: &str,
        answer: &str,
        stop: StopKind,
        elapsed_ms: u64,
    ) -> RunSummary {
        let dir = self.run_dir();
        let summary = RunSummary {
            run_id: dir.as_ref().map(|d| d.id().to_owned()),
            task: task.to_owned(),
            answer: answer.to_owned(),
            outcome: stop.outcome(),
            stop,
            elapsed_ms,
            usage: self.usage(),
        };
        if let Some(dir) = dir {
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
        self.roster.record_unended(&StopKind::Cancelled);
        self.roster.close();
        self.summarise_run(task, "", StopKind::Cancelled, elapsed_ms)
    }

    /// The spec the primary agent of type `agent_type` runs under: the configured primary's
    /// when it has that name, else the registry's type, if it may be a primary agent.
    fn primary_for(&self, agent_type: &str) -> Result<AgentSpec, RunError> {
        match &self.config.primary {
            Some(spec) if spec.name == agent_type => match spec.unusable() {
                Some(why) => Err(RunError::Unusable(why)),
                None => Ok(spec.clone()),
            },
            _ => primary_spec(&self.registry, agent_type).cloned(),
        }
    }

    /// The model id for `spec`: `inherit` takes the parent's; aliases resolve.
    fn model_for(&self, spec: &AgentSpec, parent_model: &str) -> String {
        match spec.model.as_str() {
            INHERIT_MODEL => parent_model.to_owned(),
            other => resolve_model_alias(other).to_owned(),
        }
    }
}
