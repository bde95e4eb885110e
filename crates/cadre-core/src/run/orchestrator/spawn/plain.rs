//! Running one subagent for a parent's `Task` call: its checks, its path (a new one, or the
//! one a resumed run finds by the call), its worktree when isolated, and its result. Its
//! subagents run here, or on a durable engine's workers when the run delegates them.

use super::with_report;
use crate::definitions::spec::AgentSpec;
use crate::run::budget::Budget;
use crate::run::continuation::{self, MAX_CONTINUATIONS};
use crate::run::delegate::{Delegate, Delegated, DelegatedCall};
use crate::run::orchestrator::handle::{AgentHandle, Start, TaskCall};
use crate::run::orchestrator::run_context::RunContext;
use crate::run::orchestrator::Orchestrator;
use crate::run::state::AgentState;
use crate::run::task_result::SubagentError;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use cadre_model::Usage;
use cadre_tools::{Finished, Workspace, Worktree};
use futures::FutureExt;
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a resumed run found for a `Task` call: the subagent had ended (its result stands),
/// or it goes on from its journal.
enum ResumedCall {
    Ended(Result<String, SubagentError>),
    GoesOn(AgentPath, Box<AgentState>),
}

impl Orchestrator {
    /// Runs one subagent for a `Task` call and returns its final text, or why it failed.
    pub(crate) async fn run_subagent(
        self: &Arc<Self>,
        parent: &AgentHandle,
        task: &TaskCall<'_>,
        cancel: CancellationToken,
    ) -> Result<String, SubagentError> {
        let run = &parent.run;
        if let Some(reason) = self.provider_refused() {
            return Err(SubagentError::ProviderRefused {
                parent: parent.path.clone(),
                reason: reason.to_owned(),
            });
        }
        // Boxed: a fork's spec is made for it, and every waiting subagent's future would
        // else hold room for one.
        let forked;
        let spec = match task.fork {
            Some(base) => {
                forked = Box::new(self.fork_spec(base, self.config.delegate.is_some())?);
                &*forked
            }
            None => self.subagent_spec(task.subagent_type)?,
        };
        let depth = self.depth_below(parent)?;
        let (running, _release) = parent.one_more_call();
        if running as usize >= self.config.limits.max_fanout {
            return Err(SubagentError::FanOut {
                parent: parent.path.clone(),
                running,
                limit: self.config.limits.max_fanout,
            });
        }
        // A resumed run finds the subagent this call started before, by the call's id. (Not
        // kept in a variable: a rebuilt state held to the end would cost every waiting
        // subagent's future its size.)
        let (path, start) = match self.resumed_call(run, parent, task.call) {
            Some(ResumedCall::Ended(result)) => return result,
            Some(ResumedCall::GoesOn(path, rebuilt)) => (path, Start::Resume(rebuilt)),
            None => (
                self.spawned(run, parent, &spec.name, task.call).await,
                Start::Fresh(task.prompt),
            ),
        };
        if let Some(delegate) = &self.config.delegate {
            let delegated = Box::pin(self.delegated(delegate, parent, spec, task, path, &cancel));
            return delegated.await;
        }
        let model = self.model_for(spec, &parent.model);
        let Some((worktree, workspace)) = self.isolate(spec, parent, &path).await? else {
            let me = self.subagent_handle(parent, task, path, depth, model, None);
            return self.run_to_result(spec, me, task, start, cancel).await;
        };
        let me = self.subagent_handle(parent, task, path.clone(), depth, model, Some(workspace));
        let result = self.run_to_result(spec, me, task, start, cancel).await;
        let report = Box::pin(worktree_report(worktree, &path, task.description)).await;
        with_report(result, report)
    }

    /// The handle of the subagent at `path` that `parent`'s `task` starts, working in
    /// `workspace` (its worktree's) or else in its parent's.
    fn subagent_handle(
        &self,
        parent: &AgentHandle,
        task: &TaskCall<'_>,
        path: AgentPath,
        depth: u32,
        model: String,
        workspace: Option<Arc<Workspace>>,
    ) -> AgentHandle {
        let workspace = workspace.unwrap_or_else(|| parent.workspace.clone());
        // Made whole in one expression: a handle changed field by field counts as borrowed,
        // and would be held beside the agent's future until it ends.
        AgentHandle {
            answer: task.answer.cloned(),
            fork: task.fork.cloned(),
            limits: task.limits.copied().unwrap_or_default(),
            budget: parent.budget.as_ref().map(Budget::inherited),
            ..AgentHandle::new(parent.run.clone(), path, depth, model, workspace)
        }
    }

    /// Runs the subagent `me` of type `spec` for `task`; what its parent's call gets.
    ///
    /// Not an `async fn`: one would keep its own copy of the handle `me` beside the one the
    /// agent's future holds, for as long as the subagent runs — a couple of hundred bytes in
    /// every waiting subagent of a large fan-out.
    fn run_to_result<'a>(
        self: &'a Arc<Self>,
        spec: &'a AgentSpec,
        me: AgentHandle,
        task: &'a TaskCall<'a>,
        start: Start<'a>,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<String, SubagentError>> + Send + 'a {
        let run = me.run.clone();
        let path = me.path.clone();
        // Mapped, not awaited in an `async` block, which would move the agent's future
        // into a second place of its own.
        self.run_agent(spec, me, task.description, start, cancel, task.background)
            .map(move |outcome| self.task_result(&run, &path, outcome.stop, outcome.text))
    }

    /// What a resumed run has for `parent`'s call `call`: nothing (it starts a new
    /// subagent), the result of the subagent that call started and that ended, or that
    /// subagent to go on.
    fn resumed_call(
        &self,
        run: &RunContext,
        parent: &AgentHandle,
        call: &str,
    ) -> Option<ResumedCall> {
        let path = run.resumed_child(&parent.path, call)?;
        let rebuilt = run.take_resumed(&path)?;
        match rebuilt {
            // It had finished: its result stands (its usage was counted when it was loaded),
            // unless its cut answer was still to be asked to go on.
            AgentState {
                finished: Some((stop, text)),
                history,
                ..
            } if !(stop == StopKind::MaxTokens
                && continuation::may_go_on(&history, MAX_CONTINUATIONS)) =>
            {
                Some(ResumedCall::Ended(self.task_result(run, &path, stop, text)))
            }
            rebuilt => {
                // Any record it had (a cut answer that goes on) gives way to the one it ends with.
                self.roster.forget(&path);
                Some(ResumedCall::GoesOn(path, Box::new(rebuilt)))
            }
        }
    }

    /// Hands the subagent at `path` of type `spec` that `parent`'s `task` starts to the
    /// run's `delegate` (a durable engine's workers) and keeps the records it brings back.
    /// It is held to its caller's limits as one run here is: what they leave of tokens and
    /// time tightens its type, what it used is charged to them, and the call ends
    /// `cancelled` when `cancel` (its caller's) is.
    async fn delegated(
        &self,
        delegate: &Arc<dyn Delegate>,
        parent: &AgentHandle,
        spec: &AgentSpec,
        task: &TaskCall<'_>,
        path: AgentPath,
        cancel: &CancellationToken,
    ) -> Result<String, SubagentError> {
        if task.answer.is_some() {
            return Err(SubagentError::SchemaOnEngine);
        }
        // The call's limits, and what its caller's leave, travel in the type the workers
        // are sent, where they tighten it.
        let mut spec = spec.clone();
        if let Some(limits) = task.limits {
            spec.limits = spec.limits.tightened_by(limits);
        }
        if let Some(budget) = &parent.budget {
            spec.limits = spec.limits.tightened_by(&budget.left());
        }
        let call = DelegatedCall {
            path: path.clone(),
            depth: parent.depth + 1,
            model: self.model_for(&spec, &parent.model),
            spec,
            description: task.description.to_owned(),
            prompt: task.prompt.to_owned(),
            // The current span is the `Task` call's.
            trace: cadre_tools::trace_context::traceparent(),
            output_schema: None,
        };
        let done = tokio::select! {
            done = delegate.run(call) => done,
            () = cancel.cancelled() => Delegated::stopped(StopKind::Cancelled),
        };
        if let Some(budget) = &parent.budget {
            // Charged as a subagent sharing its caller's budget: taking an agent above
            // over its limit trips it.
            let tokens = done.records.iter().map(|r| r.usage.total()).sum();
            let used = Usage {
                input_tokens: tokens,
                ..Usage::default()
            };
            budget.inherited().charge(&used);
        }
        self.roster.record_all(done.records);
        with_report(
            self.task_result(&parent.run, &path, done.stop, done.text),
            done.report,
        )
    }

    /// The worktree an isolated subagent at `path` works in, and its workspace there;
    /// `None` for a subagent that works in its parent's workspace.
    ///
    /// The worktree's futures are boxed, each in a statement of its own: few subagents are
    /// isolated, and every waiting subagent's future would else hold room for them.
    async fn isolate(
        &self,
        spec: &AgentSpec,
        parent: &AgentHandle,
        path: &AgentPath,
    ) -> Result<Option<(Worktree, Arc<Workspace>)>, SubagentError> {
        if !spec.is_isolated() {
            return Ok(None);
        }
        let create = Box::pin(Worktree::create(
            parent.workspace.root(),
            &parent.run.id,
            path.as_str(),
        ));
        let wt = create.await.map_err(|e| SubagentError::Worktree {
            path: path.clone(),
            source: Arc::new(e),
        })?;
        match Workspace::new(wt.workspace()) {
            Ok(w) => Ok(Some((wt, Arc::new(w)))),
            Err(e) => {
                let discard = Box::pin(wt.discard());
                if let Err(e) = discard.await {
                    tracing::warn!("could not remove the worktree of {path}: {e}");
                }
                Err(SubagentError::WorktreeWorkspace {
                    path: path.clone(),
                    source: Arc::new(e),
                })
            }
        }
    }
}

/// Commits what the subagent at `path` changed in its worktree `wt` (or removes the
/// worktree when it changed nothing); what its parent is told of it.
async fn worktree_report(wt: Worktree, path: &AgentPath, description: &str) -> String {
    let message = format!("{path}: {description}");
    match wt.finish(&message).await {
        Ok(Finished::Unchanged) => {
            "\n\n[It changed no file; its worktree and branch were removed.]".to_owned()
        }
        Ok(Finished::Committed { branch, diffstat }) => format!(
            "\n\n[Its changes are committed on branch {branch} (the main checkout is untouched):\n{diffstat}]"
        ),
        Err(e) => format!("\n\n[Its worktree could not be committed: {e}]"),
    }
}
