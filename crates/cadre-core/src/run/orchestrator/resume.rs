//! Going on with a run from its journal: resuming it, continuing it, compacting it.

use super::*;

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
        self.close_events();
        self.unless_failed(result)
    }

    async fn carry_on(
        self: &Arc<Self>,
        run: JournaledRun,
        follow_up: Option<&str>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        // The run ended when its primary agent's end was journaled; one that answered and
        // waited for its team, or was killed right after answering, has not.
        let ended = run.state.finished.clone();
        let (run_dir, journal, spec, mut rebuilt, task) = self.load_run(run).await?;
        let id = run_dir.id().to_owned();
        match (follow_up, &ended) {
            (None, Some(stop)) if !stop.resumes() => {
                return Err(RunError::AlreadyFinished {
                    id,
                    stop: stop.to_string(),
                })
            }
            // A cancelled run may take a follow-up; a killed one must be resumed first.
            (Some(_), None) if !rebuilt.cancelled => return Err(RunError::NotFinished(id)),
            // Stopped by a failure of the model API: the primary agent asks again.
            (None, Some(StopKind::ModelError(_))) => rebuilt.finished = None,
            _ => {}
        }
        *self.run_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(run_dir);
        *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal.clone());
        self.restore_team(&journal).await?;
        // Rebuilt: the steps read to do it are not kept for the rest of the run.
        journal.release_earlier();
        if let Some(text) = follow_up {
            let mut message = Message::user_text(text);
            // The follow-up is a prompt like the first: its hooks may add to it or refuse it
            // (a refused one never joins the conversation; the run stops with the reason).
            let step = match self.prompt_hooks(&spec, text).await {
                Ok(notes) => {
                    message.content.extend(notes);
                    Step::UserMessage {
                        agent: spec.name.clone(),
                        message,
                    }
                }
                Err(refused) => refused,
            };
            journal.append(&step).await?;
            rebuilt.apply(step);
        }
        if follow_up.is_none() {
            if let Some(hooks) = self.primary_hooks(&spec) {
                let model = self.model_for(&spec, &self.config.model_id);
                hooks.session_start("resume", &model).await;
            }
        }
        let description = rebuilt.description.clone();
        self.run_primary(spec, &description, &task, Start::Resume(Box::new(rebuilt)))
            .await
    }

    /// Runs the `UserPromptSubmit` hooks of the primary agent of type `spec` on the
    /// follow-up `prompt`: what they add for the model, or the step that refuses it.
    async fn prompt_hooks(
        self: &Arc<Self>,
        spec: &AgentSpec,
        prompt: &str,
    ) -> Result<Vec<cadre_model::ContentBlock>, Step> {
        use crate::definitions::hooks::HookEvent;
        let Some(hooks) = self.primary_hooks(spec) else {
            return Ok(Vec::new());
        };
        let verdict = hooks.user_prompt_submit(prompt).await;
        if let Some(reason) = verdict.stop.or(verdict.block) {
            return Err(Step::Hooked {
                agent: spec.name.clone(),
                event: HookEvent::UserPromptSubmit,
                call: None,
                decision: crate::run::hooks::HookDecision::Stop {
                    reason: format!("the prompt was refused by a UserPromptSubmit hook: {reason}"),
                },
            });
        }
        Ok(verdict
            .context
            .map(|c| cadre_model::ContentBlock::text(format!("[UserPromptSubmit hook] {c}")))
            .into_iter()
            .collect())
    }

    /// Compacts the primary conversation of the ended run in `dir` now (the `/compact` of
    /// an interactive session), so the next follow-up starts from the summary; returns what
    /// compacting cost.
    pub async fn compact(self: &Arc<Self>, run: JournaledRun) -> Result<Usage, RunError> {
        self.first_run()?;
        let (run_dir, journal, spec, rebuilt, _) = self.load_run(run).await?;
        if rebuilt.finished.is_none() && !rebuilt.cancelled {
            return Err(RunError::NotFinished(run_dir.id().to_owned()));
        }
        *self.run_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(run_dir);
        *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal);
        let model = self.model_for(&spec, &self.config.model_id);
        let me = AgentHandle::new(spec.name.clone(), 0, model, self.config.workspace.clone());
        let (agent, own_servers) = self
            .build_agent(&spec, &me, self.cancel.child_token(), None)
            .await;
        let result = match agent.compact_as(&rebuilt.history, "manual").await {
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

    /// Rebuilds the tree of the opened run from its journal: the folder, the journal, the
    /// primary agent's type, its rebuilt state, and the run's task.
    pub(super) async fn load_run(
        &self,
        run: JournaledRun,
    ) -> Result<(RunDir, Arc<dyn Journal>, AgentSpec, AgentState, String), RunError> {
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
        let spec = primary_spec(&self.registry, &state.agent_type)?.clone();
        let journal = self.failure.guard(Arc::new(journal));
        let primary = self.load_tree(&journal, &spec.name, &run_dir).await?;
        let Some(rebuilt) = primary else {
            return Err(RunError::NoJournal(id));
        };
        Ok((run_dir, journal, spec, rebuilt, state.task))
    }

    /// Rebuilds the agent at `path` and, through the subagents its `Task` calls started,
    /// the whole tree below it. Finished agents are counted in the usage now (they will not
    /// run again); the others wait in `resumed` for their parent's call to reach them.
    pub(super) async fn load_tree(
        &self,
        journal: &Arc<dyn Journal>,
        path: &str,
        run_dir: &RunDir,
    ) -> Result<Option<AgentState>, RunError> {
        let mut root = None;
        let mut queue = vec![path.to_owned()];
        while let Some(path) = queue.pop() {
            // New subagents must not take a path the journal already uses, even one whose
            // agent never got to its first step.
            let at = AgentPath::parse(&path);
            if let Some(n) = at.ordinal() {
                let mut c = self.counters.entry(at.agent_type().to_owned()).or_insert(0);
                *c = (*c).max(n);
            }
            let Some(rebuilt) = AgentState::from_steps(journal.steps(&path).await?) else {
                continue;
            };
            for (call, child) in &rebuilt.spawned {
                self.children
                    .insert((path.clone(), call.clone()), child.clone());
                queue.push(child.clone());
            }
            if root.is_none() {
                root = Some(rebuilt);
                continue;
            }
            if let Some((stop, _)) = &rebuilt.finished {
                let elapsed = self
                    .transcript_in(run_dir)
                    .map_or(0, |t| t.earlier(&path).elapsed_ms);
                self.record_earlier(&path, &rebuilt, stop.clone(), elapsed);
            }
            self.resumed.insert(path, rebuilt);
        }
        Ok(root)
    }

    /// Counts the usage of an agent that ran before the resume and will not run again.
    pub(super) fn record_earlier(
        &self,
        path: &str,
        rebuilt: &AgentState,
        stop: StopKind,
        elapsed_ms: u64,
    ) {
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
                elapsed_ms,
                outcome: stop.outcome(),
                stop,
                result_file: None,
                worker: None,
                member: None,
            });
    }
}
