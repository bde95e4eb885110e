//! Background subagents: a `Task` call with `run_in_background: true` returns at once with a
//! task id while the subagent works; `TaskOutput` reads its status or waits for its result,
//! `TaskStop` cancels it, and whatever the parent has not collected when it ends its turn is
//! handed to it as one more user message, so no result is lost.

use crate::definitions::hooks::DEFAULT_HOOK_TIMEOUT_SECS;
use crate::run::agent::Inbox;
use crate::run::task_result::SubagentError;
pub use crate::run::task_result::TaskResult;
use async_trait::async_trait;
use cadre_model::ContentBlock;
use cadre_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use crate::definitions::tools::{TASK_OUTPUT_TOOL, TASK_STOP_TOOL};

/// One background subagent of a parent.
struct Entry {
    description: String,
    cancel: CancellationToken,
    result: watch::Receiver<Option<TaskResult>>,
    /// Whether the parent has been given its result (by `TaskOutput` or a delivery).
    delivered: bool,
    /// Its task, aborted if the parent's handle goes away without waiting for it.
    task: Option<tokio::task::AbortHandle>,
}

/// The background subagents one parent started, by task id (`task_1`, `task_2`, …).
#[derive(Default)]
pub struct Background {
    tasks: Mutex<BTreeMap<u32, Entry>>,
    next: AtomicU32,
}

/// How long a background subagent cancelled with its dropped parent may take to end by
/// itself (its end recorded, its `SubagentStop` hooks run, at their default bound) before
/// it is aborted.
const END_GRACE: Duration = Duration::from_secs(DEFAULT_HOOK_TIMEOUT_SECS + 5);

impl Drop for Background {
    /// A parent dropped without waiting (its own call cut off after a cancel, or its run
    /// given up) takes its background subagents with it: each is cancelled and ends as a
    /// cancelled agent does; one not ended within `END_GRACE` is aborted, so none runs
    /// on unowned.
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut running = Vec::new();
        for entry in tasks.values_mut() {
            entry.cancel.cancel();
            if let Some(task) = entry.task.take().filter(|t| !t.is_finished()) {
                running.push((task, entry.result.clone()));
            }
        }
        if running.is_empty() {
            return;
        }
        // Outside a runtime nothing can wait for them: they are aborted at once.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            running.iter().for_each(|(task, _)| task.abort());
            return;
        };
        runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + END_GRACE;
            for (task, mut result) in running {
                // Reported means ended; a sender gone means its task is gone too.
                let _ = tokio::time::timeout_at(deadline, result.wait_for(Option::is_some)).await;
                task.abort();
            }
        });
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("tasks", &self.lock().len())
            .finish()
    }
}

/// Where a background subagent reports its result.
pub struct Reporter(watch::Sender<Option<TaskResult>>);

impl Reporter {
    /// Records the subagent's result.
    pub fn report(self, result: TaskResult) {
        // No receiver left means nobody will ask; nothing to do.
        let _ = self.0.send(Some(result));
    }
}

impl Background {
    /// Registers a new background subagent; returns its task id, the token that stops it
    /// (a child of `parent_cancel`, so cancelling the parent stops it too) and where it
    /// reports.
    pub fn start(
        &self,
        description: &str,
        parent_cancel: &CancellationToken,
    ) -> (String, CancellationToken, Reporter) {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let cancel = parent_cancel.child_token();
        let (tx, rx) = watch::channel(None);
        self.lock().insert(
            n,
            Entry {
                description: description.to_owned(),
                cancel: cancel.clone(),
                result: rx,
                delivered: false,
                task: None,
            },
        );
        (task_id(n), cancel, Reporter(tx))
    }

    /// Notes the task running the background subagent `id`, so it can be aborted.
    pub fn attach(&self, id: &str, task: tokio::task::AbortHandle) {
        let Some(n) = task_number(id) else {
            return;
        };
        if let Some(e) = self.lock().get_mut(&n) {
            e.task = Some(task);
        }
    }

    /// Cancels every background subagent still running (the parent stopped early).
    pub fn cancel_all(&self) {
        for entry in self.lock().values() {
            entry.cancel.cancel();
        }
    }

    /// Waits until every background subagent has reported.
    pub async fn settle(&self) {
        for mut rx in self.receivers() {
            let _ = rx.wait_for(Option::is_some).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Entry>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn receivers(&self) -> Vec<watch::Receiver<Option<TaskResult>>> {
        self.lock().values().map(|e| e.result.clone()).collect()
    }

    /// The entry for `id`: its number, description, cancel token and result channel.
    fn find(
        &self,
        id: &str,
    ) -> Option<(
        u32,
        String,
        CancellationToken,
        watch::Receiver<Option<TaskResult>>,
    )> {
        let n = task_number(id)?;
        self.lock()
            .get(&n)
            .map(|e| (n, e.description.clone(), e.cancel.clone(), e.result.clone()))
    }

    fn mark_delivered(&self, n: u32) {
        if let Some(e) = self.lock().get_mut(&n) {
            e.delivered = true;
        }
    }

    fn known_ids(&self) -> String {
        let ids: Vec<String> = self.lock().keys().map(|n| task_id(*n)).collect();
        if ids.is_empty() {
            "none was started".into()
        } else {
            ids.join(", ")
        }
    }
}

fn task_id(n: u32) -> String {
    format!("task_{n}")
}

/// The number in a task id (`task_3` → 3), the inverse of [`task_id`].
fn task_number(id: &str) -> Option<u32> {
    id.trim().strip_prefix("task_")?.parse().ok()
}

#[async_trait]
impl Inbox for Background {
    async fn undelivered(&self) -> Option<Vec<ContentBlock>> {
        let waiting: Vec<u32> = self
            .lock()
            .iter()
            .filter(|(_, e)| !e.delivered)
            .map(|(n, _)| *n)
            .collect();
        if waiting.is_empty() {
            return None;
        }
        // In task order, whichever finishes first, so a replay sees the same message.
        let mut text = String::from(
            "[Results of the background subagents you started, which finished after your last turn:]",
        );
        for n in waiting {
            let Some((_, description, _, mut rx)) = self.find(&task_id(n)) else {
                continue;
            };
            let result = rx
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|r| r.clone())
                .unwrap_or(Err(SubagentError::Lost));
            self.mark_delivered(n);
            let (status, body) = match result {
                Ok(t) => ("finished", t),
                Err(e) => ("failed", e.to_string()),
            };
            text.push_str(&format!(
                "\n\n## {} ({description}) {status}\n{body}",
                task_id(n)
            ));
        }
        Some(vec![ContentBlock::text(text)])
    }
}

/// What `TaskOutput` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskOutputInput {
    /// The id Task returned (task_1, …).
    pub task_id: String,
    /// Wait for the subagent to finish (default false).
    #[serde(default)]
    pub wait: bool,
}

/// What `TaskStop` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskStopInput {
    /// The id Task returned (task_1, …).
    pub task_id: String,
}

/// `TaskOutput`: the status or result of one of the parent's background subagents.
pub struct TaskOutputTool(pub Arc<Background>);

/// `TaskStop`: cancels one of the parent's background subagents.
pub struct TaskStopTool(pub Arc<Background>);

impl TypedTool for TaskOutputTool {
    type Input = TaskOutputInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        TASK_OUTPUT_TOOL
    }

    fn description(&self) -> String {
        "Get the result of a subagent you started with Task and run_in_background: true. \
         With wait: false (the default) it says at once whether the subagent is still \
         running or gives its final message; with wait: true it waits until it finishes. \
         Results you have not collected are also handed to you when you end your turn."
            .into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(
        &self,
        input: TaskOutputInput,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let Some((n, description, _, mut rx)) = self.0.find(&input.task_id) else {
            return Ok(ToolOutput::error(format!(
                "no background task {:?}; the tasks are: {}",
                input.task_id,
                self.0.known_ids()
            )));
        };
        if input.wait {
            tokio::select! {
                () = ctx.cancel.cancelled() => return Ok(ToolOutput::error("cancelled while waiting")),
                _ = rx.wait_for(Option::is_some) => {}
            }
        }
        let result = rx.borrow().clone();
        Ok(match result {
            None => ToolOutput::ok(format!(
                "{} ({description}) is still running; call TaskOutput with wait: true to wait for it.",
                input.task_id
            )),
            Some(result) => {
                self.0.mark_delivered(n);
                match result {
                    Ok(text) => ToolOutput::ok(text),
                    Err(why) => ToolOutput::error(why.to_string()),
                }
            }
        })
    }
}

impl TypedTool for TaskStopTool {
    type Input = TaskStopInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        TASK_STOP_TOOL
    }

    fn description(&self) -> String {
        "Stop a subagent you started with Task and run_in_background: true: it is cancelled \
         and its running commands are killed."
            .into()
    }

    fn is_read_only(&self) -> bool {
        false
    }

    async fn run(&self, input: TaskStopInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some((n, description, cancel, mut rx)) = self.0.find(&input.task_id) else {
            return Ok(ToolOutput::error(format!(
                "no background task {:?}; the tasks are: {}",
                input.task_id,
                self.0.known_ids()
            )));
        };
        let finished = rx.borrow().is_some();
        if !finished {
            cancel.cancel();
            // The subagent ends promptly once cancelled: its tools are killed with it.
            let _ = rx.wait_for(Option::is_some).await;
            self.0.mark_delivered(n);
        }
        Ok(ToolOutput::ok(if finished {
            format!(
                "{} ({description}) had already finished; nothing to stop. TaskOutput gives its result.",
                input.task_id
            )
        } else {
            format!("{} ({description}) stopped.", input.task_id)
        }))
    }
}
