//! How a run starts: its context is made (its folder, journal, transcript and team), then
//! its primary agent runs to its end and the run is summarised. A durable engine's call for
//! one agent starts here too.

use super::config::RunError;
use super::handle::{AgentHandle, Start};
use super::run_context::{open_transcript, Lineage, RunContext};
use super::{primary_spec, Orchestrator, RunSummary};
use crate::definitions::spec::AgentSpec;
use crate::record::events::millis;
use crate::record::journal::{FileJournal, Journal, Step};
use crate::record::run_dir::{AgentPath, RunDir};
use crate::record::transcript::RunTranscript;
use crate::record::usage::AgentRecord;
use crate::run::answer::AnswerSchema;
use crate::run::delegate::DelegatedCall;
use crate::run::outcome::{AgentOutcome, StopKind};
use crate::run::state::AgentState;
use crate::run::team::Team;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// What a run's context is made of besides its team: found by a fresh start, or read from
/// the journal of a resumed run.
#[derive(Default)]
pub(super) struct RunParts {
    /// The run folder, when the run writes one.
    pub(super) dir: Option<RunDir>,
    /// Where its steps are journaled.
    pub(super) journal: Option<Arc<dyn Journal>>,
    /// The run folder's transcript.
    pub(super) transcript: Option<Arc<RunTranscript>>,
    /// What the journal of a resumed run says of its agents.
    pub(super) lineage: Lineage,
    /// The schema the primary agent's answer must match.
    pub(super) answer: Option<AnswerSchema>,
}

impl Orchestrator {
    /// Starts the run: its folder and journal, its context, then its primary agent of type
    /// `agent_type` on `task` (whose answer must match `answer`, when given).
    pub(super) async fn start(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
        answer: Option<AnswerSchema>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let spec = primary_spec(&self.registry, agent_type)?;
        // A run that could not begin (an unknown type) leaves the orchestrator unused.
        self.first_run()?;
        let mut parts = RunParts {
            journal: self.config.journal.clone(),
            answer,
            ..RunParts::default()
        };
        if let Some(runs) = &self.config.runs_dir {
            let (dir, journal) = self.new_run_folder(runs, agent_type, task).await?;
            parts.transcript = open_transcript(&dir);
            parts.dir = Some(dir);
            // The run folder's own journal replaces the configured one.
            parts.journal = Some(journal);
        }
        let team = self.new_team(parts.journal.as_ref());
        let teams_on = self.config.team.is_some() || spec.team_tool().is_some();
        let run = self.context(parts, team, teams_on);
        let description: String = task.chars().take(60).collect();
        self.run_primary(&run, spec.clone(), &description, task, Start::Fresh(task))
            .await
    }

    /// A new run folder in `runs`, with its journal begun by the run's header.
    async fn new_run_folder(
        &self,
        runs: &Path,
        agent_type: &str,
        task: &str,
    ) -> Result<(RunDir, Arc<dyn Journal>), RunError> {
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
        Ok((dir, journal))
    }

    /// The run's team, journaling to `journal` and telling its events to the roster.
    pub(super) fn new_team(&self, journal: Option<&Arc<dyn Journal>>) -> Arc<Team> {
        Arc::new(Team::new(
            self.config.team.clone().unwrap_or_default(),
            journal.cloned(),
            self.roster.handler(),
        ))
    }

    /// The run's context, made of `parts`, `team` and whether it is a team run; the
    /// caller's getters see the run from now on.
    pub(super) fn context(
        &self,
        parts: RunParts,
        team: Arc<Team>,
        teams_on: bool,
    ) -> Arc<RunContext> {
        let results = match &parts.dir {
            Some(dir) => dir.results_dir().into(),
            None => self.results.path(),
        };
        let run = Arc::new(RunContext {
            id: self.new_run_id(parts.dir.as_ref()),
            dir: parts.dir,
            journal: parts.journal,
            transcript: parts.transcript,
            team,
            teams_on,
            answer: parts.answer,
            results,
            lineage: parts.lineage,
        });
        // Every caller claimed the run first (`first_run`), so this is the one set: a
        // second would find the slot full and change nothing.
        let _ = self.current.set(run.clone());
        run
    }

    /// Runs one agent of a run whose subagents are delegated (one invocation of a durable
    /// engine): the agent `call` names, in this orchestrator's workspace, to its end.
    /// Returns its outcome and the records of it and of every agent below it.
    pub async fn run_delegated(
        self: &Arc<Self>,
        call: &DelegatedCall,
    ) -> (AgentOutcome, Vec<AgentRecord>) {
        // Like any run, one delegated agent per orchestrator: its context is the run's.
        if let Err(refused) = self.first_run() {
            let outcome = AgentOutcome {
                text: String::new(),
                stop: StopKind::Other(refused.to_string()),
                turns: 0,
                tool_calls: 0,
                usage: Default::default(),
                history: Vec::new(),
            };
            return (outcome, Vec::new());
        }
        let mut spec = call.spec.clone();
        if call.depth == 0 {
            if let Some(max_turns) = self.config.max_turns {
                spec.max_turns = max_turns;
            }
        }
        // With a runs folder, the agent's transcript is written there (its journal is the
        // delegate's), for whoever runs it elsewhere to carry back.
        let mut parts = RunParts {
            journal: self.config.journal.clone(),
            ..RunParts::default()
        };
        if let Some(runs) = &self.config.runs_dir {
            match RunDir::create_named(runs, &self.run_id()) {
                Ok(dir) => {
                    parts.transcript = open_transcript(&dir);
                    parts.dir = Some(dir);
                }
                Err(e) => tracing::warn!("could not create a folder for {}: {e}", call.path),
            }
        }
        let run = self.context(parts, self.new_team(None), false);
        let me = AgentHandle::new(
            run,
            AgentPath::parse(&call.path),
            call.depth,
            call.model.clone(),
            self.config.workspace.clone(),
        );
        let start = Start::Fresh(&call.prompt);
        let cancel = self.cancel.child_token();
        let mut outcome = self
            .run_agent(&spec, me, &call.description, start, cancel, false)
            .await;
        // A file the agent could not keep cancelled it: say so, not just "cancelled".
        if let Some(lost) = self.failure.take() {
            outcome.stop = StopKind::Other(format!("stopped: {lost}"));
        }
        self.config.mcp.shutdown().await;
        self.roster.close();
        (outcome, self.roster.records())
    }

    /// Runs the primary agent of type `spec` of `run` and writes the summary.
    pub(super) async fn run_primary(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        mut spec: AgentSpec,
        description: &str,
        task: &str,
        start: Start<'_>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let started = Instant::now();
        // The run's time covers its earlier parts: the primary agent ran through each.
        let earlier = run.earlier(&spec.name).elapsed_ms;
        if let Some(max_turns) = self.config.max_turns {
            spec.max_turns = max_turns;
        }
        let model = self.model_for(&spec, &self.config.model_id);
        let path = AgentPath::parse(&spec.name);
        let workspace = self.config.workspace.clone();
        let mut me = AgentHandle::new(run.clone(), path, 0, model, workspace);
        me.member = self.open_team(run, &spec).await;
        me.answer = run.answer.clone();
        let cancel = self.cancel.child_token();
        let outcome = self
            .run_agent(&spec, me, description, start, cancel, false)
            .await;
        // The primary answered with nothing left in flight, or stopped: every member still
        // open is closed (one at work is cancelled), and the run waits for them to end.
        run.team.finish().await;
        self.config.mcp.shutdown().await;
        self.record_left_behind(run);
        // An agent still on the roster now was dropped before it could end.
        self.roster.record_unended(&StopKind::Killed);
        let elapsed = earlier + millis(started.elapsed());
        let summary = self.summarise_run(task, &outcome.text, outcome.stop.clone(), elapsed);
        Ok((outcome, summary))
    }

    /// Records the agents of the journal that no call reached again (a subagent cancelled
    /// before the resume, whose parent already has its result): they still count in the
    /// usage.
    fn record_left_behind(&self, run: &RunContext) {
        let left: Vec<(AgentPath, AgentState)> = run
            .lineage
            .resumed
            .iter()
            .filter(|e| e.value().finished.is_none())
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (path, rebuilt) in left {
            run.lineage.resumed.remove(&path);
            let elapsed = run.earlier(&path.to_string()).elapsed_ms;
            self.record_earlier(&path, &rebuilt, StopKind::Cancelled, elapsed);
        }
    }
}
