//! Going on with a run from its journal: resuming it, continuing it, compacting it.

use super::config::RunError;
use super::conversation::Keeper;
use super::handle::Start;
use super::run_context::{open_transcript, Ended, Lineage, RunContext, RunParts};
use super::{Orchestrator, RunSummary};
use crate::definitions::spec::AgentSpec;
use crate::record::journal::{Journal, JournaledRun};
use crate::record::run_dir::RunDir;
use crate::record::transcript::RunTranscript;
use crate::record::usage::AgentRecord;
use crate::run::state::AgentState;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::hooks::HookDecision;
use crate::vocab::hooks::HookEvent;
use crate::vocab::outcome::{AgentOutcome, StopKind};
use crate::vocab::step::Step;
use cadre_model::{ContentBlock, Message, Usage};
use std::sync::Arc;

/// A run read back from its journal: what its context is made of, its primary agent's
/// type and rebuilt state, and its task.
pub(super) struct LoadedRun {
    /// The run's id (its folder's name).
    pub(super) id: String,
    /// Its folder, journal, transcript and the agents its journal rebuilt.
    pub(super) parts: RunParts,
    /// The primary agent's type.
    pub(super) spec: AgentSpec,
    /// The primary agent as its journal left it.
    pub(super) primary: AgentState,
    /// The run's task.
    pub(super) task: String,
    /// What its journal shows its agents spent before.
    pub(super) spent: Usage,
}

/// Whether the agent at a path, as its journal left it, is settled: it ended for good and
/// nothing will go on with it, so a resume keeps only its result ([`Ended`]) and the records
/// of its subtree, not its conversation.
pub(super) type Settled<'a> = &'a (dyn Fn(&AgentPath, &AgentState) -> bool + Sync);

/// Settles no agent: a plain resume may reach any again (a parent's `Task` call takes its
/// subagent's state back).
pub(super) fn none_settled(_: &AgentPath, _: &AgentState) -> bool {
    false
}

/// What [`Orchestrator::load_tree`] rebuilt: the agent at its root, and what the journal
/// shows the whole tree spent.
pub(super) struct Rebuilt {
    /// The agent at the root (`None` when the journal has none).
    pub(super) root: Option<AgentState>,
    /// The tokens every agent of the tree used before.
    pub(super) spent: Usage,
}

impl Orchestrator {
    /// Carries on the run in `run` (a run folder whose journal was read once, when it was
    /// opened) from its journal: every agent that was running is rebuilt and goes on; no
    /// journaled model request is sent again and no journaled tool call runs again. With
    /// `follow_up`, the run must have finished, and its primary conversation continues with
    /// that new user message.
    pub async fn resume(
        self: &Arc<Self>,
        run: JournaledRun,
        follow_up: Option<&str>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        self.first_run()?;
        let result = self.carry_on(run, follow_up).await;
        self.roster.close();
        self.unless_failed(result)
    }

    async fn carry_on(
        self: &Arc<Self>,
        opened: JournaledRun,
        follow_up: Option<&str>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        // The run ended when its primary agent's end was journaled; one that answered and
        // waited for its team, or was killed right after answering, has not.
        let ended = opened.state.finished.clone();
        let loaded = self.load_run(opened, true, None).await?;
        self.charge_earlier(&loaded.spent);
        self.go_on(loaded, ended, follow_up).await
    }

    /// Goes on with the run `loaded`, whose primary agent's conversation ended for `ended`
    /// (`None` while it is open): with `follow_up`, its next message.
    pub(super) async fn go_on(
        self: &Arc<Self>,
        loaded: LoadedRun,
        ended: Option<StopKind>,
        follow_up: Option<&str>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let LoadedRun {
            id,
            parts,
            spec,
            mut primary,
            task,
            spent: _,
        } = loaded;
        match (follow_up, &ended) {
            (None, Some(stop)) if !stop.resumes() => {
                return Err(RunError::AlreadyFinished {
                    id,
                    stop: stop.to_string(),
                })
            }
            // A cancelled run may take a follow-up; a killed one must be resumed first.
            (Some(_), None) if !primary.cancelled => {
                return Err(RunError::NotFinished { run_id: id })
            }
            // Stopped by a failure of the model API: the primary agent asks again.
            (None, Some(StopKind::ModelError(_))) => primary.finished = None,
            _ => {}
        }
        let run = self.resumed_context(parts, &spec).await?;
        match follow_up {
            Some(text) => self.follow_up(&run, &spec, &mut primary, text).await?,
            None => {
                if let Some(hooks) = self.primary_hooks(&run, &spec) {
                    let model = self.model_for(&spec, &self.config.model_id);
                    hooks.session_start("resume", &model).await;
                }
            }
        }
        let description = primary.description.clone();
        let start = Start::Resume(Box::new(primary));
        self.run_primary(&run, spec, &description, &task, start)
            .await
    }

    /// The context of a resumed run: its team brought back from its journal, a team run
    /// when it was one or its primary type makes it one.
    async fn resumed_context(
        &self,
        parts: RunParts,
        spec: &AgentSpec,
    ) -> Result<Arc<RunContext>, RunError> {
        let team = self.new_team(parts.journal.as_ref());
        if let Some(journal) = &parts.journal {
            self.restore_team(&team, journal).await?;
            // Rebuilt: the steps read to do it are not kept for the rest of the run.
            journal.release_earlier();
        }
        let restored = !team.snapshot().await.members.is_empty();
        let teams_on = self.team_run(spec) || restored;
        Ok(self.context(parts, team, teams_on))
    }

    /// Adds the follow-up `text` to the conversation of the primary agent (of type `spec`)
    /// of `run`, journaled. The follow-up is a prompt like the first: its hooks may add to
    /// it or refuse it (a refused one never joins the conversation; the run stops with the
    /// reason).
    async fn follow_up(
        &self,
        run: &Arc<RunContext>,
        spec: &AgentSpec,
        primary: &mut AgentState,
        text: &str,
    ) -> Result<(), RunError> {
        let mut message = Message::user_text(text);
        let step = match self.prompt_hooks(run, spec, text).await {
            Ok(notes) => {
                message.content.extend(notes);
                Step::UserMessage {
                    agent: AgentPath::primary(&spec.name),
                    message,
                }
            }
            Err(refused) => refused,
        };
        if let Some(journal) = &run.journal {
            journal.append(&step).await?;
        }
        primary.apply(step);
        Ok(())
    }

    /// Runs the `UserPromptSubmit` hooks of the primary agent of type `spec` on the
    /// follow-up `prompt`: what they add for the model, or the step that refuses it.
    async fn prompt_hooks(
        &self,
        run: &Arc<RunContext>,
        spec: &AgentSpec,
        prompt: &str,
    ) -> Result<Vec<ContentBlock>, Step> {
        let Some(hooks) = self.primary_hooks(run, spec) else {
            return Ok(Vec::new());
        };
        let verdict = hooks.user_prompt_submit(prompt).await;
        if let Some(reason) = verdict.stop.or(verdict.block) {
            return Err(Step::Hooked {
                agent: AgentPath::primary(&spec.name),
                event: HookEvent::UserPromptSubmit,
                call: None,
                decision: HookDecision::Stop {
                    reason: format!("the prompt was refused by a UserPromptSubmit hook: {reason}"),
                },
            });
        }
        Ok(verdict
            .context
            .map(|c| ContentBlock::text(format!("[UserPromptSubmit hook] {c}")))
            .into_iter()
            .collect())
    }

    /// Compacts the primary conversation of the ended run in `dir` now (the `/compact` of
    /// an interactive session), so the next follow-up starts from the summary; returns what
    /// compacting cost.
    pub async fn compact(self: &Arc<Self>, run: JournaledRun) -> Result<Usage, RunError> {
        self.first_run()?;
        // Compacting reads the primary conversation alone: the transcript stays closed.
        let loaded = self.load_run(run, false, None).await?;
        if loaded.primary.finished.is_none() && !loaded.primary.cancelled {
            return Err(RunError::NotFinished { run_id: loaded.id });
        }
        let spec = loaded.spec;
        let run = self.context(loaded.parts, self.new_team(None), false);
        let me = self.primary_handle(&run, &spec);
        let (agent, own_servers) = self
            .build_agent(&spec, &me, self.cancel.child_token(), None)
            .await;
        let result = match agent.compact_as(&loaded.primary.history, "manual").await {
            Ok(compaction) => {
                let used = compaction.usage;
                agent.journal(&agent.compacted(compaction)).await;
                Ok(used)
            }
            Err(e) => Err(RunError::Compact(e)),
        };
        for server in own_servers {
            server.shutdown().await;
        }
        self.config.mcp.shutdown().await;
        // A summary the journal did not take is lost: the next turn would not start from it.
        self.unless_failed(result)
    }

    /// Rebuilds the tree of the opened run from its journal; `with_transcript` opens its
    /// transcript too, for the earlier times of its agents and for them to go on writing.
    /// With `kept`, the run's steps also go to it, to keep the conversation open after.
    pub(super) async fn load_run(
        &self,
        run: JournaledRun,
        with_transcript: bool,
        kept: Option<&Arc<Keeper>>,
    ) -> Result<LoadedRun, RunError> {
        let JournaledRun {
            dir,
            journal,
            state,
            notes,
        } = run;
        let run_dir = RunDir::open(&dir)?;
        let id = run_dir.id().to_owned();
        if notes.dropped_partial_line {
            tracing::warn!("run {id}: the journal's last line was cut off when the run was killed; that step never took effect and was dropped");
        }
        let spec = self.primary_for(&state.agent_type)?;
        let journal: Arc<dyn Journal> = Arc::new(journal);
        let journal = self.run_journal(journal, kept);
        let transcript = with_transcript.then(|| open_transcript(&run_dir)).flatten();
        let lineage = Lineage::default();
        let root = AgentPath::primary(&spec.name);
        let Rebuilt { root, spent } = self
            .load_tree(
                &journal,
                &lineage,
                transcript.as_deref(),
                root,
                &none_settled,
            )
            .await?;
        let Some(primary) = root else {
            return Err(RunError::NoJournal { run_id: id });
        };
        let parts = RunParts {
            dir: Some(run_dir),
            journal: Some(journal),
            transcript,
            lineage,
            answer: None,
        };
        Ok(LoadedRun {
            id,
            parts,
            spec,
            primary,
            task: state.task,
            spent,
        })
    }

    /// Rebuilds the agent at `root` and, through the subagents its `Task` calls started,
    /// the whole tree below it, into `lineage`. Finished agents are counted in the usage
    /// now (they will not run again); the others wait in the lineage for their parent's
    /// call to reach them. An agent `settled` says ended for good keeps only its result, in
    /// the lineage's `ended`; its state and its subtree's are let go once recorded, so a
    /// resumed workflow holds no finished item's conversation.
    pub(super) async fn load_tree(
        &self,
        journal: &Arc<dyn Journal>,
        lineage: &Lineage,
        transcript: Option<&RunTranscript>,
        root: AgentPath,
        settled: Settled<'_>,
    ) -> Result<Rebuilt, RunError> {
        let mut primary = None;
        let mut spent = Usage::default();
        // Each agent still to rebuild, and whether an agent above it is settled.
        let mut queue = vec![(root, false)];
        while let Some((path, below_settled)) = queue.pop() {
            // New subagents must not take a path the journal already uses, even one whose
            // agent never got to its first step.
            lineage.taken(&path);
            let Some(rebuilt) = AgentState::from_steps(journal.steps(path.as_str()).await?) else {
                continue;
            };
            spent.add(&rebuilt.usage);
            let is_root = primary.is_none();
            let settled_here = below_settled || (!is_root && settled(&path, &rebuilt));
            for (call, child) in &rebuilt.spawned {
                // No call of a settled agent is made again: its children are not looked up.
                if !settled_here {
                    lineage
                        .children
                        .insert((path.clone(), call.clone()), child.clone());
                }
                queue.push((child.clone(), settled_here));
            }
            if is_root {
                primary = Some(rebuilt);
                continue;
            }
            let elapsed = || transcript.map_or(0, |t| t.earlier(&path).elapsed_ms);
            match (&rebuilt.finished, settled_here) {
                (Some((stop, _)), _) => {
                    self.record_earlier(&path, &rebuilt, stop.clone(), elapsed())
                }
                // Below a settled agent, no call reaches it again: counted as the run's
                // end would count it (`record_left_behind`).
                (None, true) => {
                    self.record_earlier(&path, &rebuilt, StopKind::Cancelled, elapsed())
                }
                (None, false) => {}
            }
            if !settled_here {
                lineage.resumed.insert(path, rebuilt);
            } else if let (Some((stop, text)), false) = (rebuilt.finished, below_settled) {
                let usage = rebuilt.usage;
                lineage.ended.insert(path, Ended { stop, text, usage });
            }
        }
        Ok(Rebuilt {
            root: primary,
            spent,
        })
    }

    /// Charges the run's budget with `spent`, what its journal shows was spent before this
    /// resume: the budget is the whole run's across its parts, so a run stopped by it, or
    /// killed near it, and resumed does not spend it again. A plain run and a workflow run
    /// are both charged here.
    pub(super) fn charge_earlier(&self, spent: &Usage) {
        self.budget.charge(spent);
    }

    /// Counts the usage of an agent that ran before the resume and will not run again.
    pub(super) fn record_earlier(
        &self,
        path: &AgentPath,
        rebuilt: &AgentState,
        stop: StopKind,
        elapsed_ms: u64,
    ) {
        self.roster.record(AgentRecord {
            path: path.clone(),
            agent_type: rebuilt.agent_type.clone(),
            description: rebuilt.description.clone(),
            model: String::new(),
            turns: rebuilt.turns,
            tool_calls: rebuilt.tool_calls,
            usage: rebuilt.usage,
            elapsed_ms,
            outcome: stop.outcome(),
            stop,
            result_file: None,
            worker: None,
            member: None,
        });
    }
}
