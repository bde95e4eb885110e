//! Going on with a run from its journal: resuming it, continuing it, compacting it.

use super::*;

impl Orchestrator {
    /// Carries on the run in the run folder `dir` from its journal: every agent that was
    /// running is rebuilt and goes on; no journaled model request is sent again and no
    /// journaled tool call runs again. With `follow_up`, the run must have finished, and
    /// its primary conversation continues with that new user message.
    pub async fn resume(
        self: &Arc<Self>,
        dir: &Path,
        follow_up: Option<&str>,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let result = self.carry_on(dir, follow_up).await;
        self.close_events();
        result
    }

    async fn carry_on(
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
        let me = AgentHandle::new(spec.name.clone(), 0, model, self.config.workspace.clone());
        let (agent, own_servers) = self
            .build_agent(&spec, &me, self.cancel.child_token(), None)
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
    pub(super) async fn load_run(
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
        let spec = primary_spec(&self.registry, &agent_type)?.clone();
        let journal: Arc<dyn Journal> = Arc::new(journal);
        let primary = self.load_tree(&journal, &spec.name).await?;
        let Some(rebuilt) = primary else {
            return Err(RunError::NoJournal(id));
        };
        Ok((run_dir, journal, spec, rebuilt, task))
    }

    /// Rebuilds the agent at `path` and, through the subagents its `Task` calls started,
    /// the whole tree below it. Finished agents are counted in the usage now (they will not
    /// run again); the others wait in `resumed` for their parent's call to reach them.
    pub(super) async fn load_tree(
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
            let at = AgentPath::parse(&path);
            if let Some(n) = at.ordinal() {
                let mut c = self.counters.entry(at.agent_type().to_owned()).or_insert(0);
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
    pub(super) fn record_earlier(&self, path: &str, rebuilt: &Rebuilt, stop: StopKind) {
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
                worker: None,
            });
    }
}
