//! Running one subagent for a parent's `Task` call: its path, its worktree, its result.

use super::*;

impl Orchestrator {
    /// Runs one subagent for a `Task` call and returns its final text, or why it failed.
    pub(crate) async fn run_subagent(
        self: &Arc<Self>,
        parent: &AgentHandle,
        task: &TaskCall<'_>,
        cancel: CancellationToken,
    ) -> Result<String, String> {
        let TaskCall {
            subagent_type,
            description,
            prompt,
            call,
            background,
        } = *task;
        let Some(spec) = self
            .registry
            .get(subagent_type)
            .filter(|s| s.mode.is_subagent())
        else {
            let known: Vec<&str> = self.registry.subagents().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "unknown subagent_type {subagent_type:?}; the subagent types are: {}",
                known.join(", ")
            ));
        };
        if let Some(why) = spec.unusable() {
            return Err(why);
        }
        let depth = parent.depth + 1;
        if depth > self.config.limits.max_depth {
            return Err(format!(
                "delegation is limited to {} levels; {} cannot start another subagent — do this work yourself",
                self.config.limits.max_depth, parent.path
            ));
        }
        let running = parent.running.fetch_add(1, Ordering::SeqCst);
        let _release = Release(&parent.running);
        if running as usize >= self.config.limits.max_fanout {
            return Err(format!(
                "refused: {} already has {} subagents running (the limit is {}); wait for their results and delegate the rest afterwards",
                parent.path, running, self.config.limits.max_fanout
            ));
        }
        // A resumed run finds the subagent this call started before, by the call's id.
        let earlier = self
            .resumed_child(&parent.path, call)
            .and_then(|path| self.resumed.remove(&path));
        let (path, start) = match earlier {
            // It had finished: its result stands (its usage was counted when it was loaded).
            Some((
                path,
                Rebuilt {
                    finished: Some((stop, text)),
                    ..
                },
            )) => return subagent_result(&path, stop, text),
            Some((path, rebuilt)) => (path, Start::Resume(Box::new(rebuilt))),
            None => {
                let n = {
                    let mut c = self.counters.entry(spec.name.clone()).or_insert(0);
                    *c += 1;
                    *c
                };
                let path = format!("{}/{}#{n}", parent.path, spec.name);
                self.journal(Step::Spawned {
                    agent: parent.path.clone(),
                    call: call.to_owned(),
                    child: path.clone(),
                })
                .await;
                (path, Start::Fresh(prompt))
            }
        };
        let model = self.model_for(spec, &parent.model);
        // An isolated subagent works in a worktree of its own: its Workspace root, which
        // confines its tools and its sandbox alike.
        let worktree = if spec.is_isolated() {
            let wt = Worktree::create(parent.workspace.root(), &self.run_id(), &path)
                .await
                .map_err(|e| format!("subagent {path} could not get its own worktree: {e}"))?;
            Some(wt)
        } else {
            None
        };
        let workspace = match worktree.as_ref().map(|wt| Workspace::new(wt.workspace())) {
            None => parent.workspace.clone(),
            Some(Ok(w)) => Arc::new(w),
            Some(Err(e)) => {
                if let Some(wt) = worktree {
                    if let Err(e) = wt.discard().await {
                        tracing::warn!("could not remove the worktree of {path}: {e}");
                    }
                }
                return Err(format!(
                    "subagent {path} could not work in its worktree: {e}"
                ));
            }
        };
        let me = AgentHandle::new(path.clone(), depth, model, workspace);
        let outcome = self
            .run_agent(spec, me, description, start, cancel, background)
            .await;
        let result = subagent_result(&path, outcome.stop, outcome.text);
        match worktree {
            None => result,
            Some(wt) => {
                let report = match wt.finish(&format!("{path}: {description}")).await {
                    Ok(Finished::Unchanged) => {
                        "\n\n[It changed no file; its worktree and branch were removed.]".to_owned()
                    }
                    Ok(Finished::Committed { branch, diffstat }) => format!(
                        "\n\n[Its changes are committed on branch {branch} (the main checkout is untouched):\n{diffstat}]"
                    ),
                    Err(e) => format!("\n\n[Its worktree could not be committed: {e}]"),
                };
                match result {
                    Ok(text) => Ok(text + &report),
                    Err(why) => Err(why + &report),
                }
            }
        }
    }
}

/// What a parent's `Task` call gets from a subagent that stopped with `stop`.
fn subagent_result(path: &str, stop: StopKind, text: String) -> Result<String, String> {
    match stop {
        StopKind::Done if text.trim().is_empty() => {
            Ok(format!("({path} finished without a final message)"))
        }
        StopKind::Done => Ok(text),
        stop => {
            let last = text.trim();
            let last = if last.is_empty() { "(none)" } else { last };
            Err(format!(
                "subagent {path} did not finish: {stop}. Its last message: {last}"
            ))
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
