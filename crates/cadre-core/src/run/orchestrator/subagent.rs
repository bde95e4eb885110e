//! Running one subagent for a parent's `Task` call: its path, its worktree, its result.

use super::*;
use crate::run::continuation;
pub use crate::run::task_result::SubagentError;

impl Orchestrator {
    /// Runs one subagent for a `Task` call and returns its final text, or why it failed.
    pub(crate) async fn run_subagent(
        self: &Arc<Self>,
        parent: &AgentHandle,
        task: &TaskCall<'_>,
        cancel: CancellationToken,
    ) -> Result<String, SubagentError> {
        let TaskCall {
            subagent_type,
            description,
            prompt,
            call,
            background,
            answer,
            fork,
        } = *task;
        // Boxed: a fork's spec is made for it, and every waiting subagent's future would
        // else hold room for one.
        let forked;
        let spec = match fork {
            Some(base) => {
                forked = Box::new(self.fork_spec(base, self.config.delegate.is_some())?);
                &*forked
            }
            None => self.subagent_spec(subagent_type)?,
        };
        let depth = parent.depth + 1;
        if depth > self.config.limits.max_depth {
            return Err(SubagentError::DepthLimit {
                limit: self.config.limits.max_depth,
                parent: parent.path.clone(),
            });
        }
        let running = parent.running.fetch_add(1, Ordering::SeqCst);
        let _release = Release(&parent.running);
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
        let (path, start) = match self
            .resumed_child(&parent.path, call)
            .and_then(|path| self.resumed.remove(&path))
        {
            // It had finished: its result stands (its usage was counted when it was loaded),
            // unless its cut answer was still to be asked to go on.
            Some((
                path,
                AgentState {
                    finished: Some((stop, text)),
                    history,
                    ..
                },
            )) if !(stop == StopKind::MaxTokens
                && continuation::may_go_on(&history, MAX_CONTINUATIONS)) =>
            {
                return self.task_result(&path, stop, text)
            }
            Some((path, rebuilt)) => {
                // Any record it had (a cut answer that goes on) gives way to the one it ends with.
                self.records
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|r| r.path != path);
                (path, Start::Resume(Box::new(rebuilt)))
            }
            None => (
                self.spawned(parent, &spec.name, call).await,
                Start::Fresh(prompt),
            ),
        };
        let model = self.model_for(spec, &parent.model);
        if let Some(delegate) = &self.config.delegate {
            if answer.is_some() {
                return Err(SubagentError::Unusable(
                    "output_schema on a Task call is not available when subagents run on the engine; give the agent type an output_schema instead".into(),
                ));
            }
            let done = delegate
                .run(crate::run::delegate::DelegatedCall {
                    path: path.clone(),
                    depth,
                    spec: spec.clone(),
                    model,
                    description: description.to_owned(),
                    prompt: prompt.to_owned(),
                })
                .await;
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(done.records);
            return with_report(self.task_result(&path, done.stop, done.text), done.report);
        }
        // An isolated subagent works in a worktree of its own: its Workspace root, which
        // confines its tools and its sandbox alike.
        // The worktree's futures are boxed, each in a statement of its own: few subagents are
        // isolated, and every waiting subagent's future would else hold room for them.
        let worktree = if spec.is_isolated() {
            let run_id = self.run_id();
            let create = Box::pin(Worktree::create(parent.workspace.root(), &run_id, &path));
            let wt = create.await.map_err(|e| SubagentError::Worktree {
                path: path.clone(),
                source: Arc::new(e),
            })?;
            Some(wt)
        } else {
            None
        };
        let workspace = match worktree.as_ref().map(|wt| Workspace::new(wt.workspace())) {
            None => parent.workspace.clone(),
            Some(Ok(w)) => Arc::new(w),
            Some(Err(e)) => {
                if let Some(wt) = worktree {
                    let discard = Box::pin(wt.discard());
                    if let Err(e) = discard.await {
                        tracing::warn!("could not remove the worktree of {path}: {e}");
                    }
                }
                return Err(SubagentError::WorktreeWorkspace {
                    path,
                    source: Arc::new(e),
                });
            }
        };
        // Made whole in one expression: a handle changed field by field counts as borrowed,
        // and would be held beside the agent's future until it ends.
        let me = AgentHandle {
            answer: answer.cloned(),
            fork: fork.cloned(),
            ..AgentHandle::new(path.clone(), depth, model, workspace)
        };
        let outcome = self
            .run_agent(spec, me, description, start, cancel, background)
            .await;
        let result = self.task_result(&path, outcome.stop, outcome.text);
        match worktree {
            None => result,
            Some(wt) => {
                let message = format!("{path}: {description}");
                let finish = Box::pin(wt.finish(&message));
                let report = match finish.await {
                    Ok(Finished::Unchanged) => {
                        "\n\n[It changed no file; its worktree and branch were removed.]".to_owned()
                    }
                    Ok(Finished::Committed { branch, diffstat }) => format!(
                        "\n\n[Its changes are committed on branch {branch} (the main checkout is untouched):\n{diffstat}]"
                    ),
                    Err(e) => format!("\n\n[Its worktree could not be committed: {e}]"),
                };
                with_report(result, report)
            }
        }
    }
}

impl Orchestrator {
    /// The path of a new subagent of type `agent_type` that `parent`'s call `call` starts,
    /// journaled, so a resumed run finds it by the call.
    pub(super) async fn spawned(
        &self,
        parent: &AgentHandle,
        agent_type: &str,
        call: &str,
    ) -> String {
        let n = {
            let mut c = self.counters.entry(agent_type.to_owned()).or_insert(0);
            *c += 1;
            *c
        };
        let path = AgentPath::parse(&parent.path)
            .child(agent_type, n)
            .to_string();
        self.journal(Step::Spawned {
            agent: parent.path.clone(),
            call: call.to_owned(),
            child: path.clone(),
        })
        .await;
        path
    }
}

/// A subagent's result with what became of its worktree added.
fn with_report(
    result: Result<String, SubagentError>,
    report: String,
) -> Result<String, SubagentError> {
    match result {
        Ok(text) => Ok(text + &report),
        Err(SubagentError::Stopped {
            path, stop, last, ..
        }) => Err(SubagentError::Stopped {
            path,
            stop,
            last,
            report,
        }),
        Err(other) => Err(other),
    }
}

/// What a parent's `Task` call gets from a subagent that stopped with `stop`.
pub(super) fn subagent_result(
    path: &str,
    stop: StopKind,
    text: String,
) -> Result<String, SubagentError> {
    match stop {
        StopKind::Done if text.trim().is_empty() => {
            Ok(format!("({path} finished without a final message)"))
        }
        StopKind::Done => Ok(text),
        stop => {
            let last = text.trim();
            Err(SubagentError::Stopped {
                path: path.to_owned(),
                stop,
                last: if last.is_empty() { "(none)" } else { last }.to_owned(),
                report: String::new(),
            })
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
