//! Team members: opening a run's team, starting a named subagent that stays after it
//! answers, and bringing the team back when a run is resumed.

use crate::definitions::spec::AgentSpec;
use crate::record::journal::Journal;
use crate::run::answer::AnswerSchema;
use crate::run::background::TaskResult;
use crate::run::budget::Budget;
use crate::run::orchestrator::config::RunError;
use crate::run::orchestrator::handle::{AgentHandle, Start, TaskCall};
use crate::run::orchestrator::run_context::RunContext;
use crate::run::orchestrator::Orchestrator;
use crate::run::state::AgentState;
use crate::run::task_result::SubagentError;
use crate::run::team::{Team, TeamState};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::step::{Step, TEAM_STEPS};
use crate::vocab::team::{Member, TeamChange};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

impl Orchestrator {
    /// Opens the team of `run` with its primary agent of type `spec` as its first member
    /// (a resumed run's open members are started again by [`Self::restart_members`]).
    /// Returns the primary's member name in a team run, `None` otherwise.
    pub(in crate::run::orchestrator) async fn open_team(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        spec: &AgentSpec,
    ) -> Option<String> {
        if !run.teams_on {
            return None;
        }
        run.team
            .lead(&spec.name, &AgentPath::primary(&spec.name), &spec.name)
            .await;
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
        let depth = self.depth_below(parent)?;
        let Some(starter) = parent.member.clone() else {
            return Err(SubagentError::NotAMember);
        };
        if spec.is_isolated() || self.delegates() {
            let agent_type = spec.name.clone();
            return Err(if self.delegates() {
                SubagentError::MemberOnEngine { agent_type }
            } else {
                SubagentError::MemberIsolated { agent_type }
            });
        }
        let run = &parent.run;
        // A resumed run: this call started the member before.
        if let Some(path) = run.resumed_child(&parent.path, task.call) {
            if let Some(member) = run.team.snapshot().await.member_at(&path).cloned() {
                let again = Box::pin(self.resumed_member(parent, task, spec, member, cancel));
                return again.await;
            }
        }
        // The name is taken here, before anything is journaled: a second call for it in
        // the same turn is refused, and never journals a start.
        run.team.reserve(name).await.map_err(SubagentError::Team)?;
        let model = self.model_for(&spec, &parent.model);
        let path = self.spawned(run, parent, &spec.name, task.call).await;
        let mut member = Member::new(name, &path, &spec.name, Some(starter));
        member.last_asked = task.description.to_owned();
        // Its call's settings go with it, so a resumed run starts it as this one did.
        member.model = Some(model.clone());
        member.answer = task.answer.map(|a| a.schema().clone());
        let me = called_member(parent, task, path, depth, model, name);
        member.limits = me.limits;
        run.team.join(&parent.path, member).await;
        let rx = self
            .spawn_member(spec, me, task.description, task.prompt, None)
            .await;
        run.team.answer(rx, cancel).await
    }

    /// The answer of `member`, which `parent`'s `task` started before the run was
    /// resumed: started again when the team was opened (its answer is waited for), ended
    /// (its result stands), or never at its first step (it starts now, with the model it
    /// joined with).
    async fn resumed_member(
        self: &Arc<Self>,
        parent: &AgentHandle,
        task: &TaskCall<'_>,
        spec: AgentSpec,
        member: Member,
        cancel: &CancellationToken,
    ) -> TaskResult {
        let run = &parent.run;
        if let Some(rx) = run.team.answers(&member.name).await {
            return run.team.answer(rx, cancel).await;
        }
        let path = member.path.clone();
        let rebuilt = match run.take_resumed(&path) {
            Some(AgentState {
                finished: Some((stop, text)),
                ..
            }) => return self.task_result(run, &path, stop, text),
            rebuilt => rebuilt,
        };
        let model = member
            .model
            .clone()
            .unwrap_or_else(|| self.model_for(&spec, &parent.model));
        let me = called_member(parent, task, path, parent.depth + 1, model, &member.name);
        let rx = self
            .spawn_member(spec, me, task.description, task.prompt, rebuilt)
            .await;
        run.team.answer(rx, cancel).await
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
        let team = me.run.team.clone();
        let rx = team.seat(&name, cancel.clone()).await;
        let this = self.clone();
        let (description, prompt) = (description.to_owned(), prompt.to_owned());
        let work = async move {
            let run = me.run.clone();
            let path = me.path.clone();
            let start = match rebuilt {
                Some(state) => Start::Resume(Box::new(state)),
                None => Start::Fresh(&prompt),
            };
            let outcome = this
                .run_agent(&spec, me, &description, start, cancel, false)
                .await;
            let result = this.task_result(&run, &path, outcome.stop, outcome.text);
            run.team.ended(&name, &path, result).await;
        };
        // The span of the `Task` call that started it goes with it, so its spans nest under
        // that call.
        let handle = tokio::spawn(work.in_current_span());
        team.keep(handle);
        rx
    }

    /// Rebuilds `team`, the team of a resumed run, from its `journal`: the changes in
    /// order, with the messages each member's own steps say it was given taken out of its
    /// inbox.
    pub(in crate::run::orchestrator) async fn restore_team(
        &self,
        team: &Team,
        journal: &Arc<dyn Journal>,
    ) -> Result<(), RunError> {
        let mut steps: Vec<Step> = journal
            .steps(TEAM_STEPS)
            .await?
            .into_iter()
            .filter(|s| matches!(s, Step::Team { .. }))
            .collect();
        if steps.is_empty() {
            return Ok(());
        }
        let paths: Vec<AgentPath> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Team {
                    change: TeamChange::Joined { member },
                    ..
                } => Some(member.path.clone()),
                _ => None,
            })
            .collect();
        // The members' own steps say what each was given; the one fold does the rest.
        let mut unseen = HashMap::new();
        for path in paths {
            let own = journal.steps(path.as_str()).await?;
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
            team.restore(state, unseen).await;
        }
        Ok(())
    }

    /// Starts again every member of a resumed run that was not closed, from its journal:
    /// one that was waiting waits again (and gets what was sent to it and not given), one
    /// that was working goes on. A member with no steps yet is started by its starter's
    /// call, which the resumed run makes again.
    pub(in crate::run::orchestrator) async fn restart_members(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
    ) {
        let state = run.team.snapshot().await;
        for member in state.members.values() {
            if member.closed || member.starter.is_none() {
                continue;
            }
            let path = member.path.clone();
            let Some(rebuilt) = run.take_resumed(&path) else {
                continue;
            };
            let Some(spec) = self.registry.get(&member.agent_type).cloned() else {
                // Its type is gone: it cannot go on, and the run must not wait for it.
                let why = self.unknown_type(&member.agent_type);
                run.team.ended(&member.name, &member.path, Err(why)).await;
                continue;
            };
            // It runs again, so its earlier record gives way to the one it ends with.
            self.roster.forget(&path);
            let me = self.member_handle(run, &spec, member, path);
            let description = rebuilt.description.clone();
            self.spawn_member(spec, me, &description, "", Some(rebuilt))
                .await;
        }
    }

    /// The handle of `member` at `path`, of type `spec`, as a resumed run starts it again:
    /// with the model, schema and limits it joined with (a run journaled before they were
    /// kept falls back to its type's model, and no schema or call limits).
    fn member_handle(
        &self,
        run: &Arc<RunContext>,
        spec: &AgentSpec,
        member: &Member,
        path: AgentPath,
    ) -> AgentHandle {
        let depth = u32::try_from(path.depth()).unwrap_or(1);
        let model = member
            .model
            .clone()
            .unwrap_or_else(|| self.model_for(spec, &self.config.model_id));
        let workspace = self.config.workspace.clone();
        let mut me = AgentHandle::new(run.clone(), path, depth, model, workspace);
        me.member = Some(member.name.clone());
        me.limits = member.limits;
        me.answer = member.answer.as_ref().and_then(|schema| {
            AnswerSchema::new(schema)
                .map_err(|e| tracing::warn!("{}'s output schema is unusable: {e}", member.name))
                .ok()
        });
        me
    }
}

/// The handle of the member `name` at `path` that `parent`'s `task` starts: in the
/// parent's run and workspace, its answer held to the call's schema.
fn called_member(
    parent: &AgentHandle,
    task: &TaskCall<'_>,
    path: AgentPath,
    depth: u32,
    model: String,
    name: &str,
) -> AgentHandle {
    let workspace = parent.workspace.clone();
    let mut me = AgentHandle::new(parent.run.clone(), path, depth, model, workspace);
    me.member = Some(name.to_owned());
    me.answer = task.answer.cloned();
    // Its own limits hold; a member outlives its caller's turn, so they count against the
    // run's budget rather than its caller's. What its caller's limits (and those above)
    // leave of tokens and time when it starts caps it, so no member gets around them.
    let call = task.limits.copied().unwrap_or_default();
    let left = parent.budget.as_ref().map(Budget::left).unwrap_or_default();
    me.limits = call.tightened_by(&left);
    me
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
