//! How a run starts: its context is made (its folder, journal, transcript and team), then
//! its primary agent runs to its end and the run is summarised.

use super::config::RunError;
use super::conversation::Keeper;
use super::handle::{AgentHandle, Start};
use super::run_context::{open_transcript, RunContext, RunParts};
use super::{Orchestrator, RunSummary};
use crate::definitions::spec::AgentSpec;
use crate::record::events::millis;
use crate::record::journal::{FileJournal, Journal};
use crate::record::run_dir::RunDir;
use crate::run::answer::AnswerSchema;
use crate::run::state::AgentState;
use crate::run::team::Team;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::{AgentOutcome, StopKind};
use crate::vocab::step::Step;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

impl Orchestrator {
    /// Starts the run: its folder and journal, its context, then its primary agent of type
    /// `agent_type` on `task` (whose answer must match `answer`, when given). With `kept`,
    /// the run folder's steps also go to it, to keep the conversation open after.
    pub(super) async fn start(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
        answer: Option<AnswerSchema>,
        kept: Option<&Arc<Keeper>>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let spec = self.primary_for(agent_type)?;
        // A run that could not begin (an unknown type) leaves the orchestrator unused.
        self.first_run()?;
        let mut parts = RunParts {
            journal: self.config.journal.clone(),
            answer,
            ..RunParts::default()
        };
        if let Some(runs) = &self.config.runs_dir {
            let (dir, journal) = self.new_run_folder(runs, agent_type, task, kept).await?;
            parts.transcript = open_transcript(&dir);
            parts.dir = Some(dir);
            // The run folder's own journal replaces the configured one.
            parts.journal = Some(journal);
        }
        let team = self.new_team(parts.journal.as_ref());
        let run = self.context(parts, team, self.team_run(&spec));
        let description: String = task.chars().take(60).collect();
        self.run_primary(&run, spec, &description, task, Start::Fresh(task))
            .await
    }

    /// A new run folder in `runs`, with its journal begun by the run's header.
    pub(super) async fn new_run_folder(
        &self,
        runs: &Path,
        agent_type: &str,
        task: &str,
        kept: Option<&Arc<Keeper>>,
    ) -> Result<(RunDir, Arc<dyn Journal>), RunError> {
        let dir = match &self.config.run_id {
            Some(id) => RunDir::create_named(runs, id)?,
            None => RunDir::create(runs)?,
        };
        let journal: Arc<dyn Journal> = Arc::new(FileJournal::create(dir.path())?);
        let journal = self.run_journal(journal, kept);
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

    /// Whether a run whose primary agent is of type `spec` is a team run (`Task` takes a
    /// name): the run was given a team, or the type may start one.
    pub(super) fn team_run(&self, spec: &AgentSpec) -> bool {
        self.config.team.is_some() || spec.team_tool().is_some()
    }

    /// The handle of the primary agent, of type `spec`, of `run`.
    pub(super) fn primary_handle(&self, run: &Arc<RunContext>, spec: &AgentSpec) -> AgentHandle {
        let model = self.model_for(spec, &self.config.model_id);
        let path = AgentPath::primary(&spec.name);
        let workspace = self.config.workspace.clone();
        AgentHandle::new(run.clone(), path, 0, model, workspace)
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
        let earlier = run.earlier(&AgentPath::primary(&spec.name)).elapsed_ms;
        if let Some(max_turns) = self.config.max_turns {
            spec.max_turns = max_turns;
        }
        let mut me = self.primary_handle(run, &spec);
        me.member = self.open_team(run, &spec).await;
        let team = me.member.is_some();
        me.answer = run.answer.clone();
        let cancel = self.cancel.child_token();
        let primary = self.run_agent(&spec, me, description, start, cancel, false);
        if team {
            // A resumed run's open members start again under the primary's span, as they
            // first did (under its `Task` calls): the resumed run stays one trace.
            let members = self.restart_members(run);
            members.instrument(primary.span().clone()).await;
        }
        let outcome = primary.await;
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
    pub(super) fn record_left_behind(&self, run: &RunContext) {
        let left: Vec<(AgentPath, AgentState)> = run
            .lineage
            .resumed
            .iter()
            .filter(|e| e.value().finished.is_none())
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (path, rebuilt) in left {
            run.lineage.resumed.remove(&path);
            let elapsed = run.earlier(&path).elapsed_ms;
            self.record_earlier(&path, &rebuilt, StopKind::Cancelled, elapsed);
        }
    }
}
