//! The MCP side: `tools/list`, `tools/call` (at once, or as a Task for a client that
//! declares the tasks extension), and `tasks/get|cancel`.

use super::call::{run_call, Progress, Sink};
use super::tools::{check_call, AgentTool, Call, ServerLimits};
use crate::common::session::Session;
use cadre_model::Model;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams,
    GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, ServerHandler};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What every connection of the server shares.
pub struct Shared {
    /// The project's settings, types, skills, trust and model, prepared once.
    pub session: Session,
    /// The model client, behind the server's one limit on requests in flight.
    pub model: Arc<dyn Model>,
    /// The tools, one per agent type.
    pub tools: Vec<AgentTool>,
    /// The limits a call may only tighten.
    pub limits: ServerLimits,
    /// Calls that run as MCP Tasks, shared by every connection so a client may fetch a
    /// task's result on another.
    pub tasks: TaskManager,
    /// Cancelled when the server stops: every call still running is cancelled.
    pub stopping: CancellationToken,
    /// The calls running now, which the server waits for when it stops.
    pub calls: tokio_util::task::TaskTracker,
}

/// The server one connection talks to; clones share everything.
#[derive(Clone)]
pub struct CadreServer {
    shared: Arc<Shared>,
}

impl CadreServer {
    /// A server over `shared`.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn find(&self, name: &str) -> Option<&AgentTool> {
        self.shared.tools.iter().find(|t| t.name == name)
    }
}

impl ServerHandler for CadreServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("cadre", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each tool is a cadre agent type: give it a self-contained prompt and it works in this project with the tools its type allows, then returns its final answer. Calls made at once run at the same time.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.shared.tools.iter().map(|t| t.tool.clone()).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.find(name).map(|t| t.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.find(&request.name) else {
            let known: Vec<&str> = self.shared.tools.iter().map(|t| t.name.as_str()).collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {:?}; the tools are: {}",
                    request.name,
                    known.join(", ")
                ),
                None,
            ));
        };
        let call = match check_call(tool, request.arguments, &self.shared.limits) {
            Ok(call) => call,
            Err(why) => return Ok(super::call::failed(why).into()),
        };
        let shared = self.shared.clone();
        let running = self.shared.calls.token();
        let as_task = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if as_task {
            return Ok(CallToolResponse::Task(spawn_task(shared, call, running)));
        }
        let progress = context.meta.get_progress_token().map(|token| {
            Progress::to(Sink::Client {
                peer: context.peer.clone(),
                token,
            })
        });
        // Cancelled by the client's `notifications/cancelled`, or by the server stopping.
        let cancel = shared.stopping.child_token();
        let from_client = context.ct.clone();
        let on_client = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = from_client.cancelled() => on_client.cancel(),
                () = on_client.cancelled() => {}
            }
        });
        let _done = cancel.clone().drop_guard();
        let _running = running;
        Ok(run_call(
            &shared.session,
            shared.model.clone(),
            call,
            progress,
            cancel,
        )
        .await
        .into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(
            self.shared.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.shared.tasks.cancel_task(&request.task_id)
    }
}

/// A served run's task lives this long at most (MCP's tasks end once their time is up, and
/// the rmcp task store then aborts one still running): a day, longer than any run.
const TASK_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Runs `call` as an MCP Task (for a client that declared the tasks extension): the call
/// returns at once, and the client fetches the result with `tasks/get`; `tasks/cancel`
/// cancels the run, and the cancelled task's status message keeps what the run said (its
/// outcome and run id). `running` keeps the server waiting for it when it stops.
fn spawn_task(
    shared: Arc<Shared>,
    call: Call,
    running: tokio_util::task::task_tracker::TaskTrackerToken,
) -> CreateTaskResult {
    let options = TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(500);
    let task = shared.tasks.clone().spawn(options, move |ctx| {
        Box::pin(async move {
            let cancel = shared.stopping.child_token();
            // The run lives in a task of its own, and this operation only waits for it: if
            // rmcp drops the operation (its TTL sweep, or shutdown, aborts it), this guard
            // cancels the run, which then ends as a cancelled run does (its commands'
            // process groups ended, its outcome recorded) instead of being dropped mid-step.
            let _cancel_if_dropped = cancel.clone().drop_guard();
            let progress = Progress::to(Sink::Task(ctx.clone()));
            let on_run = cancel.clone();
            let run = tokio::spawn(async move {
                let _running = running;
                run_call(
                    &shared.session,
                    shared.model.clone(),
                    call,
                    Some(progress),
                    on_run,
                )
                .await
            });
            tokio::pin!(run);
            // `tasks/cancel` cancels the run, which then ends as its agents do.
            let result = tokio::select! {
                result = &mut run => result,
                () = ctx.cancelled() => {
                    cancel.cancel();
                    run.await
                }
            };
            let result = result.map_err(|e| {
                TaskExit::Error(ErrorData::internal_error(
                    format!("the call's run stopped unexpectedly: {e}"),
                    None,
                ))
            })?;
            if cancel.is_cancelled() {
                // A cancelled task carries no result: its status message keeps the run's
                // word on how it ended and which run it was.
                ctx.set_status_message(text_of(&result));
                return Err(TaskExit::Cancelled);
            }
            Ok(result)
        })
    });
    CreateTaskResult::new(task)
}

/// The text of a tool result.
fn text_of(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}
