//! The `Task` tool: how an agent hands a piece of work to a fresh subagent.
//!
//! To the agent loop this is one more tool. It holds a handle back to the
//! [`Orchestrator`], which builds and runs the subagent.

use crate::run::answer::AnswerSchema;
use crate::run::fork::{ForkBase, Forking, FORK_TYPE};
use crate::run::orchestrator::{AgentHandle, Orchestrator, TaskCall};
use crate::run::prompt::shorten;
use crate::vocab::limits::AgentLimits;
use cadre_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// `Task`, bound to the agent that may call it.
pub struct TaskTool {
    orchestrator: Arc<Orchestrator>,
    parent: AgentHandle,
    description: String,
    schema: Value,
    /// The types it may start; empty is any.
    allowed: Vec<String>,
}

/// The input fields only a team run's `Task` offers.
const TEAM_FIELDS: [&str; 1] = ["name"];

/// What `Task` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// A short (3-5 word) description of the task, shown to the person watching.
    pub description: String,
    /// The complete, self-contained instructions for the subagent.
    pub prompt: String,
    /// Which type of subagent to launch.
    pub subagent_type: String,
    /// Return at once with a task id and let the subagent work meanwhile (default false).
    #[serde(default)]
    pub run_in_background: bool,
    /// A name makes the subagent a team member: it stays after it answers, waiting for
    /// messages (SendMessage) addressed to this name, which must be new in the run.
    #[serde(default)]
    pub name: Option<String>,
    /// A JSON Schema (an object) the subagent's final answer must be valid against; its result is then that JSON.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub output_schema: Option<Value>,
    /// Limits for the subagent: tokens (its own and its subagents'), turns (model requests) and time (`5m`, `90s`). They may only tighten its type's limits: a looser value is ignored.
    #[serde(default)]
    pub limits: Option<AgentLimits>,
}

impl TaskTool {
    /// Whether a call for `subagent_type` forks the calling agent.
    fn forks(&self, subagent_type: &str) -> bool {
        subagent_type == FORK_TYPE && self.orchestrator.registry().get(FORK_TYPE).is_none()
    }

    /// The conversation a fork of the calling agent starts from, or why it cannot fork.
    fn fork_base(
        &self,
        input: &TaskInput,
        conversation: Option<Arc<ForkBase>>,
    ) -> Result<Arc<ForkBase>, String> {
        if self.parent.fork.is_some() {
            return Err(
                "you are a fork: do this work yourself (a fork does not fork again)".into(),
            );
        }
        if input.name.is_some() {
            return Err("a fork cannot be a named team member; leave out the name".into());
        }
        conversation.ok_or_else(|| {
            "a fork needs the calling agent's conversation, which this call was not given".into()
        })
    }

    /// A `Task` tool for `parent`, offering the subagent types of the orchestrator's
    /// registry that `allowed` names (every one when it is empty).
    /// In a team run (`team`), a call may name the subagent to start a member that stays.
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        parent: AgentHandle,
        allowed: Vec<String>,
        team: bool,
    ) -> Self {
        let types: Vec<(String, String)> = orchestrator
            .registry()
            .subagents()
            .filter(|s| allowed.is_empty() || allowed.contains(&s.name))
            .map(|s| (s.name.clone(), shorten(s.description.trim())))
            .collect();
        let mut description = String::from(
            "Launch a subagent to do one piece of work on its own. A subagent starts with a fresh \
             conversation: it sees only the prompt you write, uses the tools of its type, and \
             returns only its final message to you — you never see its intermediate steps. \
             All Task calls you make in one turn run at the same time, so to parallelise \
             independent work, make several Task calls in one message.\n\n\
             Write each prompt so it stands alone: the goal, what you already know (files, \
             names, constraints), and exactly what the subagent should report back.\n\n\
             With run_in_background: true, Task returns at once with a task id and the \
             subagent works while you go on; TaskOutput gives its result (or waits for it), \
             TaskStop cancels it, and results you have not collected reach you when you end \
             your turn.\n\n",
        );
        if team {
            description.push_str(
                "With a name, the subagent joins your team as a member: Task returns its first \
                 answer, and it then stays, waiting. SendMessage to its name gives it more work \
                 with its conversation intact; when it finishes a turn you started with a \
                 message, you are told with its reply. Members can message each other and \
                 share the task list (TaskCreate, TaskUpdate, TaskList). Close members whose \
                 work is done with CloseMember; the run closes the rest when you answer.\n\n",
            );
        }
        description.push_str(crate::run::fork::TASK_NOTE);
        description.push_str("Available subagent types:\n");
        for (name, desc) in &types {
            description.push_str(&format!("- {name}: {desc}\n"));
        }
        let mut names: Vec<&str> = types.iter().map(|(n, _)| n.as_str()).collect();
        let forks = orchestrator.registry().get(FORK_TYPE).is_none()
            && (allowed.is_empty() || allowed.iter().any(|a| a == FORK_TYPE));
        if forks {
            description.push_str(&format!(
                "- {FORK_TYPE}: {}\n",
                crate::run::fork::DESCRIPTION
            ));
            names.push(FORK_TYPE);
        }
        let mut schema = cadre_tools::input_schema_for::<TaskInput>();
        // The types are known only now; an empty enum would be refused by the API.
        if let (false, Some(Value::Object(t))) = (
            names.is_empty(),
            schema.pointer_mut("/properties/subagent_type"),
        ) {
            t.insert("enum".into(), names.into());
        }
        if !team {
            if let Some(Value::Object(props)) = schema.get_mut("properties") {
                for field in TEAM_FIELDS {
                    props.remove(field);
                }
            }
        }
        Self {
            orchestrator,
            parent,
            description,
            schema,
            allowed,
        }
    }
}

impl TypedTool for TaskTool {
    type Input = TaskInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        crate::definitions::registry::TASK_TOOL
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn is_read_only(&self) -> bool {
        // Its subagents may write; the orchestrator serialises their writes per file.
        false
    }

    fn runs_concurrently(&self) -> bool {
        true
    }

    fn rerun(&self) -> cadre_tools::Rerun {
        // Its subagent journals its own steps: a resumed run calls it again and the subagent
        // picks up where it was, found by this call's id.
        cadre_tools::Rerun::Resumes
    }

    async fn run(&self, input: TaskInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(self.start(input, ctx, None).await)
    }
}

impl TaskTool {
    /// Starts the subagent `input` asks for (a fork of the caller from `conversation`) and
    /// returns its result, or at once its task id when it runs in the background.
    async fn start(
        &self,
        input: TaskInput,
        ctx: &ToolContext,
        conversation: Option<Arc<ForkBase>>,
    ) -> ToolOutput {
        let (answer, fork) = match self.settings(&input, conversation) {
            Ok(settings) => settings,
            Err(refused) => return refused,
        };
        let name = input.name.as_deref().map(str::trim);
        // A type marked `background` always runs so (Claude Code's `background: true`).
        let background = input.run_in_background
            || self
                .orchestrator
                .registry()
                .get(&input.subagent_type)
                .is_some_and(|s| s.background);
        // Delegated subagents are calls the engine keeps in order; one in the background
        // would make that order depend on timing, so it is awaited like any other.
        // A named member stays after it answers: it is never a background task.
        if background && name.is_none() && !self.orchestrator.delegates() {
            return self.in_background(input, answer, fork, ctx);
        }
        let task = TaskCall {
            subagent_type: &input.subagent_type,
            description: &input.description,
            prompt: &input.prompt,
            call: &ctx.call_id,
            background: false,
            answer: answer.as_ref(),
            fork: fork.as_ref(),
            limits: input.limits.as_ref(),
        };
        let result = match name {
            // Boxed, in a statement of its own: a member's start needs a larger future than a
            // plain subagent, and every waiting `Task` call would else hold room for one.
            Some(name) => {
                let start = Box::pin(self.orchestrator.start_member(
                    &self.parent,
                    &task,
                    name,
                    &ctx.cancel,
                ));
                start.await
            }
            None => {
                self.orchestrator
                    .run_subagent(&self.parent, &task, ctx.cancel.child_token())
                    .await
            }
        };
        let ignored = self.ignored_limits(&input);
        match result {
            Ok(text) => ToolOutput::ok(text + &ignored),
            Err(why) => ToolOutput::error(why.to_string() + &ignored),
        }
    }

    /// What the agent is told of the limits its call gave that would loosen its subagent
    /// type's and were ignored; empty when none were.
    fn ignored_limits(&self, input: &TaskInput) -> String {
        let (Some(asked), Some(spec)) = (
            &input.limits,
            self.orchestrator.registry().get(&input.subagent_type),
        ) else {
            return String::new();
        };
        let looser = spec.agent_limits().looser_in(asked);
        if looser.is_empty() {
            return String::new();
        }
        format!(
            "\n\n[Limits ignored, as a call may only tighten those of the type {}: {}.]",
            spec.name,
            looser.join(", ")
        )
    }
}

impl TaskTool {
    /// The call's answer schema and, for a fork, the conversation it starts from; `Err`
    /// with what the agent is told when the call cannot be made.
    #[allow(clippy::type_complexity)] // two settings, each optional
    fn settings(
        &self,
        input: &TaskInput,
        conversation: Option<Arc<ForkBase>>,
    ) -> Result<(Option<AnswerSchema>, Option<Arc<ForkBase>>), ToolOutput> {
        if !self.allowed.is_empty() && !self.allowed.contains(&input.subagent_type) {
            return Err(ToolOutput::error(format!(
                "subagent_type {:?} is not one this agent may start; it may start: {}",
                input.subagent_type,
                self.allowed.join(", ")
            )));
        }
        if let Some(zeros) = input.limits.as_ref().map(AgentLimits::zeros) {
            if !zeros.is_empty() {
                return Err(ToolOutput::error(format!(
                    "limits: {} must be above 0 (a zero would stop the subagent before it does anything); leave a limit out to set none",
                    zeros.join(", ")
                )));
            }
        }
        let answer = match input.output_schema.as_ref().map(AnswerSchema::new) {
            Some(Err(why)) => return Err(ToolOutput::error(format!("output_schema: {why}"))),
            Some(Ok(schema)) => Some(schema),
            None => None,
        };
        let fork = match self.forks(&input.subagent_type) {
            true => Some(
                self.fork_base(input, conversation)
                    .map_err(ToolOutput::error)?,
            ),
            false => None,
        };
        Ok((answer, fork))
    }

    /// Starts the subagent of `input` in the background and tells the agent so; its result
    /// comes through `TaskOutput`, or when the agent ends its turn.
    fn in_background(
        &self,
        input: TaskInput,
        answer: Option<AnswerSchema>,
        fork: Option<Arc<ForkBase>>,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let (id, cancel, reporter) = self
            .parent
            .background
            .start(&input.description, &ctx.cancel);
        let orchestrator = self.orchestrator.clone();
        // Without the parent's own background list, so the task does not keep it (and
        // itself) alive: dropping the parent's handle aborts it.
        let parent = self.parent.detached();
        let call = ctx.call_id.clone();
        let ignored = self.ignored_limits(&input);
        let work = async move {
            let task = TaskCall {
                subagent_type: &input.subagent_type,
                description: &input.description,
                prompt: &input.prompt,
                call: &call,
                background: true,
                answer: answer.as_ref(),
                fork: fork.as_ref(),
                limits: input.limits.as_ref(),
            };
            reporter.report(orchestrator.run_subagent(&parent, &task, cancel).await);
        };
        // Its call's span goes with it, so the subagent's span nests under the call.
        let handle = tokio::spawn(work.in_current_span());
        self.parent.background.attach(&id, handle.abort_handle());
        ToolOutput::ok(format!(
            "Started in the background as {id}. Go on with other work; TaskOutput with task_id {id} gives its result (wait: true waits for it), TaskStop cancels it, and if you end your turn first its result is handed to you then.{ignored}"
        ))
    }
}

impl Forking for TaskTool {
    fn wants_conversation(&self, input: &Value) -> bool {
        input
            .get("subagent_type")
            .and_then(Value::as_str)
            .is_some_and(|t| self.forks(t))
    }

    fn call_forking<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
        conversation: Arc<ForkBase>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let input: TaskInput = cadre_tools::parse_input(TypedTool::name(self), input)?;
            Ok(self.start(input, ctx, Some(conversation)).await)
        })
    }
}
