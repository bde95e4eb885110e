//! The team's tools, bound to one member's seat: `SendMessage`, `ListMembers`,
//! `CloseMember` and the shared task list (`TaskCreate`, `TaskUpdate`, `TaskList`,
//! `TaskGet`) — Claude Code's names, so its agent files that list them get them.

use super::error::TeamError;
use super::seat::Seat;
use crate::vocab::team::{SharedTask, TaskStatus};
use cadre_tools::{Rerun, Tool, ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::sync::Arc;

/// The team tools for the member in `seat`; `CloseMember` only when it may start members.
pub fn team_tools(seat: &Seat, starts_members: bool) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(SendMessage(seat.clone())),
        Arc::new(ListMembers(seat.clone())),
        Arc::new(TaskCreate(seat.clone())),
        Arc::new(TaskUpdate(seat.clone())),
        Arc::new(TaskList(seat.clone())),
        Arc::new(TaskGet(seat.clone())),
    ];
    if starts_members {
        tools.push(Arc::new(CloseMember(seat.clone())));
    }
    tools
}

fn refused(e: TeamError) -> ToolOutput {
    ToolOutput::error(e.to_string())
}

/// A task id as models write it: `3` or `"3"` (or `"#3"`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum TaskRef {
    /// A number.
    Number(u32),
    /// A number written as text.
    Text(String),
}

impl TaskRef {
    fn id(&self) -> Result<u32, ToolError> {
        match self {
            Self::Number(n) => Ok(*n),
            Self::Text(t) => t.trim().trim_start_matches('#').parse().map_err(|_| {
                ToolError::invalid_input(format!("{t:?} is not a task id (a number such as 3)"))
            }),
        }
    }
}

/// `SendMessage`: a message to another member.
pub struct SendMessage(Seat);

/// What `SendMessage` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SendMessageInput {
    /// The recipient's member name (see ListMembers), or "*" for every other member.
    #[serde(alias = "recipient")]
    pub to: String,
    /// What to tell them: complete on its own, since they see nothing else of your work.
    #[serde(alias = "content")]
    pub message: String,
}

impl TypedTool for SendMessage {
    type Input = SendMessageInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "SendMessage"
    }

    fn description(&self) -> String {
        "Send a message to another member of your team by name (ListMembers shows them; the \
         primary agent is a member too). The recipient gets it between its turns: at once \
         if it is waiting, else with its next tool results. Messages from you to one member \
         arrive in order, each exactly once. A member that finishes a turn and waits tells \
         the agent that started it, so you need not ask for status. A message gives no \
         authority: it cannot change what the recipient may do."
            .into()
    }

    fn is_read_only(&self) -> bool {
        // It changes no file; sends of one turn still go out in the order written.
        true
    }

    fn runs_concurrently(&self) -> bool {
        false
    }

    fn rerun(&self) -> Rerun {
        // Keyed by its call id: sent again, it finds the first send.
        Rerun::Repeat
    }

    async fn run(&self, input: Self::Input, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let seat = &self.0;
        let sent = seat
            .team()
            .send(
                &seat.path,
                &seat.name,
                input.to.trim(),
                &input.message,
                &ctx.call_id,
            )
            .await;
        let sent = match sent {
            Ok(sent) => sent,
            Err(e) => return Ok(refused(e)),
        };
        // The same words whatever the recipient is doing, so a replay sees what the
        // recording saw; ListMembers tells who is working.
        let mut out = String::new();
        for m in &sent {
            let _ = writeln!(out, "Sent to {} as message #{}.", m.to, m.seq);
        }
        if sent.is_empty() {
            out.push_str("There is no other member to send it to.");
        }
        Ok(ToolOutput::ok(out.trim_end().to_owned()))
    }
}

/// `ListMembers`: who is in the team and what each is doing.
pub struct ListMembers(Seat);

/// What `ListMembers` takes (nothing).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoInput {}

impl TypedTool for ListMembers {
    type Input = NoInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "ListMembers"
    }

    fn description(&self) -> String {
        "List the members of your team: name, type, state (working, waiting or closed), \
         unread messages, who started it and what it was last asked; and which of your \
         messages were not delivered yet."
            .into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, _: NoInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let seat = &self.0;
        let state = seat.team().snapshot().await;
        let mut out = String::from("name | type | state | unread | started by | last asked\n");
        for m in state.members.values() {
            let status = if m.closed {
                "closed"
            } else if m.starter.is_none() || seat.team().is_running(&m.name).await {
                "working"
            } else {
                "waiting"
            };
            let _ = writeln!(
                out,
                "{}{} | {} | {status} | {} | {} | {}",
                m.name,
                if m.name == seat.name { " (you)" } else { "" },
                m.agent_type,
                state.unread(&m.name),
                m.starter.as_deref().unwrap_or("-"),
                if m.last_asked.is_empty() {
                    "-"
                } else {
                    &m.last_asked
                },
            );
        }
        let pending: Vec<String> = state
            .messages
            .iter()
            .filter(|m| m.from == seat.name && !state.was_delivered(&m.to, &m.from, m.seq))
            .map(|m| format!("#{} to {}", m.seq, m.to))
            .collect();
        if pending.is_empty() {
            out.push_str("\nEvery message you sent was delivered.");
        } else {
            let _ = write!(out, "\nNot delivered yet: {}.", pending.join(", "));
        }
        Ok(ToolOutput::ok(out))
    }
}

/// `CloseMember`: ends a member this agent started, and the members it started.
pub struct CloseMember(Seat);

/// What `CloseMember` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CloseMemberInput {
    /// The member's name.
    pub name: String,
}

impl TypedTool for CloseMember {
    type Input = CloseMemberInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "CloseMember"
    }

    fn description(&self) -> String {
        "Close a member you started (and the members it started): it stops, a turn it is \
         in the middle of is cancelled, and it takes no more messages. Close members whose \
         work is done; the run closes the rest when it ends."
            .into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn runs_concurrently(&self) -> bool {
        false
    }

    fn rerun(&self) -> Rerun {
        Rerun::Repeat
    }

    async fn run(&self, input: Self::Input, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let seat = &self.0;
        Ok(
            match seat.team().close(Some(&seat.name), input.name.trim()).await {
                Ok(closed) if closed.is_empty() => {
                    ToolOutput::ok(format!("{} was already closed.", input.name.trim()))
                }
                Ok(closed) => ToolOutput::ok(format!("Closed: {}.", closed.join(", "))),
                Err(e) => refused(e),
            },
        )
    }
}

/// `TaskCreate`: adds a task to the run's shared list.
pub struct TaskCreate(Seat);

/// What `TaskCreate` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskCreateInput {
    /// A one-line subject.
    pub subject: String,
    /// What is to be done, complete enough for any member to do it.
    #[serde(default)]
    pub description: String,
    /// Ids of tasks that must be completed before this one can be started.
    #[serde(default, alias = "blockedBy")]
    pub blocked_by: Vec<TaskRef>,
}

impl TypedTool for TaskCreate {
    type Input = TaskCreateInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "TaskCreate"
    }

    fn description(&self) -> String {
        "Add a task to the team's shared task list (every member sees it). Name the tasks \
         that must be completed first in blocked_by. Returns its id."
            .into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn runs_concurrently(&self) -> bool {
        false
    }

    fn rerun(&self) -> Rerun {
        Rerun::Repeat
    }

    async fn run(&self, input: Self::Input, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let seat = &self.0;
        let blocked_by = input
            .blocked_by
            .iter()
            .map(TaskRef::id)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(
            match seat
                .team()
                .create_task(
                    &seat.path,
                    &seat.name,
                    &input.subject,
                    &input.description,
                    blocked_by,
                    &ctx.call_id,
                )
                .await
            {
                Ok(task) => ToolOutput::ok(format!("Created task #{}: {}", task.id, task.subject)),
                Err(e) => refused(e),
            },
        )
    }
}

/// `TaskUpdate`: claims, starts, completes or hands over a task.
pub struct TaskUpdate(Seat);

/// What `TaskUpdate` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskUpdateInput {
    /// The task's id.
    #[serde(alias = "taskId")]
    pub task_id: TaskRef,
    /// Its new status: in_progress claims it for you (unless owner names another member).
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Its new owner's member name ("" for none).
    #[serde(default)]
    pub owner: Option<String>,
}

impl TypedTool for TaskUpdate {
    type Input = TaskUpdateInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "TaskUpdate"
    }

    fn description(&self) -> String {
        "Change a task of the shared list: status in_progress claims it for you (refused \
         if another member owns it, or while a task blocking it is not completed), \
         completed marks it done, owner hands it to a member. Only a task's owner can \
         change it."
            .into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn runs_concurrently(&self) -> bool {
        false
    }

    fn rerun(&self) -> Rerun {
        Rerun::Repeat
    }

    async fn run(&self, input: Self::Input, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let seat = &self.0;
        let id = input.task_id.id()?;
        Ok(
            match seat
                .team()
                .update_task(&seat.path, &seat.name, id, input.status, input.owner)
                .await
            {
                Ok(task) => ToolOutput::ok(format!("Task {}", line(&task))),
                Err(e) => refused(e),
            },
        )
    }
}

/// `TaskList`: the shared list, one task a line.
pub struct TaskList(Seat);

impl TypedTool for TaskList {
    type Input = NoInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "TaskList"
    }

    fn description(&self) -> String {
        "List the team's shared tasks: id, status, owner, what blocks each, subject.".into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, _: NoInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let state = self.0.team().snapshot().await;
        if state.tasks.is_empty() {
            return Ok(ToolOutput::ok("The task list is empty."));
        }
        let lines: Vec<String> = state.tasks.values().map(line).collect();
        Ok(ToolOutput::ok(lines.join("\n")))
    }
}

/// `TaskGet`: one task whole.
pub struct TaskGet(Seat);

/// What `TaskGet` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskGetInput {
    /// The task's id.
    #[serde(alias = "taskId")]
    pub task_id: TaskRef,
}

impl TypedTool for TaskGet {
    type Input = TaskGetInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "TaskGet"
    }

    fn description(&self) -> String {
        "Get one task of the shared list with its whole description.".into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: Self::Input, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let id = input.task_id.id()?;
        let state = self.0.team().snapshot().await;
        Ok(match state.tasks.get(&id) {
            Some(task) => ToolOutput::ok(format!(
                "{}\ncreated by {}\n\n{}",
                line(task),
                task.created_by,
                task.description
            )),
            None => refused(TeamError::UnknownTask {
                id,
                known: state
                    .tasks
                    .keys()
                    .map(|k| format!("#{k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        })
    }
}

/// One task on a line: `#3 [in_progress, owner coder, blocked by #1] Write the parser`.
fn line(task: &SharedTask) -> String {
    let mut tags = vec![task.status.to_string()];
    if let Some(o) = &task.owner {
        tags.push(format!("owner {o}"));
    }
    if !task.blocked_by.is_empty() {
        let ids: Vec<String> = task.blocked_by.iter().map(|b| format!("#{b}")).collect();
        tags.push(format!("blocked by {}", ids.join(", ")));
    }
    format!("#{} [{}] {}", task.id, tags.join(", "), task.subject)
}
