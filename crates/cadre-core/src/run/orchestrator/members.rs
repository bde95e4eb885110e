//! Team members: opening a run's team, starting a named subagent that stays after it
//! answers, and bringing the team back when a run is resumed.

use super::*;
use crate::record::journal::TEAM_STEPS;
use crate::run::background::TaskResult;
use crate::run::team::{Member, TeamChange, TeamState};
use std::collections::HashMap;
use tokio::sync::watch;

impl Orchestrator {
    /// Opens the run's team with the primary agent of type `spec` as its first member, and
    /// starts again the members a resumed run left open. Returns the primary's member name
    /// in a team run, `None` otherwise.
    pub(super) async fn open_team(self: &Arc<Self>, spec: &AgentSpec) -> Option<String> {
        let restored = !self.team.snapshot().await.members.is_empty();
        let on = self.config.team.is_some() || spec.team_tool().is_some() || restored;
        self.teams_on.store(on, Ordering::Relaxed);
        if !on {
            return None;
        }
        let journal = self
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let me = Arc::downgrade(self);
        self.team.attach(
            journal,
            Arc::new(move |e| {
                if let Some(o) = me.upgrade() {
                    o.observe(e);
                }
            }),
        );
        self.team.lead(&spec.name, &spec.name, &spec.name).await;
        self.restart_members().await;
        Some(spec.name.clone())
    }

    /// Starts the subagent of `task` as the team member `name`, which stays after it
    /// answers; returns its first answer.
    pub(crate) async fn start_member(
        self: &Arc<Self>,
        parent: &AgentHandle,
        task: &TaskCall<'_>,
        name: &str,
        cancel: &CancellationToken,
    ) -> TaskResult {
        let spec = self.subagent_spec(task.subagent_type)?.clone();
        let depth = parent.depth + 1;
        if depth > self.config.limits.max_depth {
            return Err(SubagentError::DepthLimit {
                limit: self.config.limits.max_depth,
                parent: parent.path.clone(),
            });
        }
        let Some(starter) = parent.member.clone() else {
            return Err(SubagentError::Team(
                "only a team member can start a named member; start it without a name".into(),
            ));
        };
        if spec.is_isolated() || self.delegates() {
            return Err(SubagentError::Team(format!(
                "{} cannot be a named member: {}; start it without a name",
                spec.name,
                if self.delegates() {
                    "a run on the engine has no teams"
                } else {
                    "it works in a worktree of its own, and members share the run's workspace"
                }
            )));
        }
        let model = self.model_for(&spec, &parent.model);
        // A resumed run: this call started the member before.
        if let Some(path) = self.resumed_child(&parent.path, task.call) {
            if let Some(member) = self.team.snapshot().await.member_at(&path).cloned() {
                // Started again when the team was opened: wait for its answer.
                if let Some(rx) = self.team.answers(&member.name).await {
                    return self.team.answer(rx, cancel).await;
                }
                let rebuilt = match self.resumed.remove(&path).map(|(_, s)| s) {
                    Some(AgentState {
                        finished: Some((stop, text)),
                        ..
                    }) => return self.task_result(&path, stop, text),
                    rebuilt => rebuilt,
                };
                // It never got to its first step: it starts now, with the model it
                // joined with.
                let model = member.model.clone().unwrap_or(model);
                let mut me = AgentHandle::new(path, depth, model, parent.workspace.clone());
                me.member = Some(member.name.clone());
                me.answer = task.answer.cloned();
                let rx = self
                    .spawn_member(spec, me, task.description, task.prompt, rebuilt)
                    .await;
                return self.team.answer(rx, cancel).await;
            }
        }
        // The name is taken here, before anything is journaled: a second call for it in
        // the same turn is refused, and never journals a start.
        self.team
            .reserve(name)
            .await
            .map_err(|e| SubagentError::Team(e.to_string()))?;
        let path = self.spawned(parent, &spec.name, task.call).await;
        let mut member = Member::new(name, &path, &spec.name, Some(starter));
        member.last_asked = task.description.to_owned();
        // Its call's settings go with it, so a resumed run starts it as this one did.
        member.model = Some(model.clone());
        member.answer = task.answer.map(|a| a.schema().clone());
        self.team.join(&parent.path, member).await;
        let mut me = AgentHandle::new(path, depth, model, parent.workspace.clone());
        me.member = Some(name.to_owned());
        me.answer = task.answer.cloned();
        let rx = self
            .spawn_member(spec, me, task.description, task.prompt, None)
            .await;
        self.team.answer(rx, cancel).await
    }

    /// Runs the member `me` on a task of its own (it outlives the call that started it);
    /// returns where its answers go.
    async fn spawn_member(
        self: &Arc<Self>,
        spec: AgentSpec,
        me: AgentHandle,
        description: &str,
        prompt: &str,
        rebuilt: Option<AgentState>,
    ) -> watch::Receiver<Option<TaskResult>> {
        // Its own token under the run's: the call that started it ends, the member stays.
        let cancel = self.cancel.child_token();
        let name = me.member.clone().unwrap_or_default();
        let rx = self.team.seat(&name, cancel.clone()).await;
        let this = self.clone();
        let (description, prompt) = (description.to_owned(), prompt.to_owned());
        let handle = tokio::spawn(async move {
            let path = me.path.clone();
            let start = match rebuilt {
                Some(state) => Start::Resume(Box::new(state)),
                None => Start::Fresh(&prompt),
            };
            let outcome = this
                .run_agent(&spec, me, &description, start, cancel, false)
                .await;
            let result = this.task_result(&path, outcome.stop, outcome.text);
            this.team.ended(&name, &path, result).await;
        });
        self.team.keep(handle);
        rx
    }

    /// Rebuilds the team of a resumed run from its journal: the changes in order, with the
    /// messages each member's own steps say it was given taken out of its inbox.
    pub(super) async fn restore_team(&self, journal: &Arc<dyn Journal>) -> Result<(), RunError> {
        let changes: Vec<TeamChange> = journal
            .steps(TEAM_STEPS)
            .await?
            .into_iter()
            .filter_map(|s| match s {
                Step::Team { change, .. } => Some(change),
                _ => None,
            })
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        let paths: Vec<String> = changes
            .iter()
            .filter_map(|c| match c {
                TeamChange::Joined { member } => Some(member.path.clone()),
                _ => None,
            })
            .collect();
        // The members' own steps say what each was given; the one fold does the rest.
        let mut steps: Vec<Step> = changes
            .into_iter()
            .map(|change| Step::Team {
                by: String::new(),
                change,
            })
            .collect();
        let mut unseen = HashMap::new();
        for path in paths {
            let own = journal.steps(&path).await?;
            unseen.insert(path, unread_since_acted_on(&own));
            steps.extend(
                own.into_iter()
                    .filter(|s| matches!(s, Step::Delivered { .. })),
            );
        }
        if let Some(state) = TeamState::from_steps(steps) {
            // Keyed by name, as the live list is; a closed member's list is spent.
            let unseen = state
                .members
                .values()
                .filter(|m| !m.closed)
                .filter_map(|m| Some((m.name.clone(), unseen.remove(&m.path)?)))
                .filter(|(_, u)| !u.is_empty())
                .collect();
            self.team.restore(state, unseen).await;
        }
        Ok(())
    }

    /// Starts again every member of a resumed run that was not closed, from its journal:
    /// one that was waiting waits again (and gets what was sent to it and not given), one
    /// that was working goes on. A member with no steps yet is started by its starter's
    /// call, which the resumed run makes again.
    async fn restart_members(self: &Arc<Self>) {
        let state = self.team.snapshot().await;
        for member in state.members.values() {
            if member.closed || member.starter.is_none() {
                continue;
            }
            let Some((path, rebuilt)) = self.resumed.remove(&member.path) else {
                continue;
            };
            let Some(spec) = self.registry.get(&member.agent_type).cloned() else {
                // Its type is gone: it cannot go on, and the run must not wait for it.
                let why = SubagentError::UnknownType {
                    name: member.agent_type.clone(),
                    known: self
                        .registry
                        .subagents()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                self.team.ended(&member.name, &path, Err(why)).await;
                continue;
            };
            // It runs again, so its earlier record gives way to the one it ends with.
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|r| r.path != path);
            let depth = u32::try_from(AgentPath::parse(&path).depth()).unwrap_or(1);
            // The model and schema it joined with (a run journaled before they were kept
            // falls back to its type's model, and no schema).
            let model = member
                .model
                .clone()
                .unwrap_or_else(|| self.model_for(&spec, &self.config.model_id));
            let mut me = AgentHandle::new(path, depth, model, self.config.workspace.clone());
            me.member = Some(member.name.clone());
            me.answer = member.answer.as_ref().and_then(|schema| {
                AnswerSchema::new(schema)
                    .map_err(|e| tracing::warn!("{}'s output schema is unusable: {e}", member.name))
                    .ok()
            });
            let description = rebuilt.description.clone();
            self.spawn_member(spec, me, &description, "", Some(rebuilt))
                .await;
        }
    }

    /// The subagent type `name`, if a `Task` call may start it.
    pub(super) fn subagent_spec(&self, name: &str) -> Result<&AgentSpec, SubagentError> {
        let Some(spec) = self.registry.get(name).filter(|s| s.mode.is_subagent()) else {
            let known: Vec<&str> = self.registry.subagents().map(|s| s.name.as_str()).collect();
            return Err(SubagentError::UnknownType {
                name: name.to_owned(),
                known: known.join(", "),
            });
        };
        if let Some(why) = spec.unusable() {
            return Err(SubagentError::Unusable(why));
        }
        Ok(spec)
    }
}

/// The messages (sender, number) an agent's journaled `steps` gave it after the last
/// response it acted on: a response not refused, cut or paused, whose answer was not
/// rejected. Its model never read them, as the live run counts it.
fn unread_since_acted_on(steps: &[Step]) -> Vec<(String, u64)> {
    let mut unread = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Delivered { messages, .. } => {
                unread.extend(messages.iter().map(|m| (m.from.clone(), m.seq)));
            }
            Step::Response { response, .. } if acted_on(response, &steps[i + 1..]) => {
                unread.clear();
            }
            _ => {}
        }
    }
    unread
}

/// Whether the agent acted on `response`, given the steps that follow it: it ran the
/// response's tool calls, or its answer was accepted — it went on to wait for messages and
/// was given more. An answer with nothing after it is left to the resumed run to judge.
fn acted_on(response: &cadre_model::Response, after: &[Step]) -> bool {
    use cadre_model::StopReason;
    if response.stop_reason == Some(StopReason::ToolUse) && response.tool_uses().next().is_some() {
        return true;
    }
    // The first thing the agent did after its answer: waited and was given messages, or
    // was asked again (rejected, kept going by a hook, told of its background work).
    let next = after.iter().find(|s| {
        matches!(
            s,
            Step::Delivered { .. }
                | Step::Rejected { .. }
                | Step::Hooked { .. }
                | Step::UserMessage { .. }
                | Step::Response { .. }
                | Step::Finished { .. }
        )
    });
    let answered = !matches!(
        response.stop_reason,
        Some(StopReason::Refusal | StopReason::MaxTokens | StopReason::PauseTurn)
    );
    answered && matches!(next, Some(Step::Delivered { .. }))
}
