//! The tools one agent may use, and how one call is dispatched safely.

use crate::run::fork::{ForkBase, Forking};
use cadre_model::ToolDefinition;
use cadre_tools::{cap_output, Tool, ToolContext, ToolError, ToolOutput};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// How long a cancelled tool may take to stop by itself before it is dropped.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// An ordered set of tools, looked up by name.
#[derive(Clone, Default)]
pub struct ToolSet {
    // Shared: a call clones the set into its own task, which must cost one count.
    tools: Arc<Vec<Arc<dyn Tool>>>,
    // The definitions, made on the first request and kept (one copy per distinct set, see
    // `shared`); a change to the set forgets them.
    definitions: Arc<OnceLock<Arc<Vec<ToolDefinition>>>>,
    // The `Task` tool as itself, when the set holds it: a call that forks the agent is
    // handed the agent's conversation through it, typed.
    task: Option<Arc<dyn Forking>>,
    // What the runs its calls started spent, by call id, until journaled with the result;
    // made only for a set with a tool that starts runs (the `Workflow` tool), as every
    // agent has a set and most never need it.
    spent: Option<Spent>,
}

/// What the runs an agent's calls started spent, by call id (see [`ToolSet::spent`]).
pub(crate) type Spent = Arc<dashmap::DashMap<String, cadre_model::Usage>>;

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ToolSet {
    /// A set holding `tools` (a later tool with the same name replaces an earlier one).
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        let mut set = Self::default();
        for t in tools {
            set.insert(t);
        }
        set
    }

    /// Adds a tool, replacing one of the same name.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        if self.task.as_ref().is_some_and(|t| t.name() == tool.name()) {
            self.task = None;
        }
        let tools = Arc::make_mut(&mut self.tools);
        tools.retain(|t| t.name() != tool.name());
        tools.push(tool);
        self.definitions = Arc::default();
    }

    /// Where a tool tells what a run its call started spent (the `Workflow` tool), by the
    /// call's id: journaled with the call's result as the agent's own spend.
    pub(crate) fn spent(&mut self) -> Spent {
        self.spent.get_or_insert_with(Spent::default).clone()
    }

    /// What the run the call `call_id` started spent, if it started one; told once.
    pub(crate) fn take_spent(&self, call_id: &str) -> Option<cadre_model::Usage> {
        self.spent.as_ref()?.remove(call_id).map(|(_, usage)| usage)
    }

    /// Adds the `Task` tool, replacing one of the same name: calls that fork the agent
    /// reach it with the agent's conversation.
    pub(crate) fn insert_task(&mut self, task: Arc<dyn Forking>) {
        self.insert(task.clone());
        self.task = Some(task);
    }

    /// Keeps only the tools for which `keep` says so.
    pub fn retain(&mut self, mut keep: impl FnMut(&dyn Tool) -> bool) {
        Arc::make_mut(&mut self.tools).retain(|t| keep(t.as_ref()));
        if self
            .task
            .as_ref()
            .is_some_and(|t| self.get(t.name()).is_none())
        {
            self.task = None;
        }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// Tool names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The definitions sent to the model: made once per set, and shared by every set
    /// that offers the same ones (the agents of one type), so each request holds a count.
    pub fn definitions(&self) -> Arc<Vec<ToolDefinition>> {
        self.definitions
            .get_or_init(|| {
                shared(
                    self.tools
                        .iter()
                        .map(|t| ToolDefinition {
                            name: t.name().to_owned(),
                            description: t.description(),
                            input_schema: t.input_schema(),
                            cache_control: None,
                        })
                        .collect(),
                )
            })
            .clone()
    }

    /// Whether a call to `name` with `input` forks the caller, and so needs its
    /// conversation (`call_forking`).
    pub fn wants_conversation(&self, name: &str, input: &Value) -> bool {
        self.forking(name)
            .is_some_and(|t| t.wants_conversation(input))
    }

    /// The `Task` tool, when `name` is its name.
    fn forking(&self, name: &str) -> Option<&Arc<dyn Forking>> {
        self.task.as_ref().filter(|t| t.name() == name)
    }

    /// Whether a call to `name` may run beside the other calls of its turn.
    pub fn runs_concurrently(&self, name: &str) -> bool {
        // Unknown tools only produce an error result, so they are safe to run anywhere.
        self.get(name).is_none_or(|t| t.runs_concurrently())
    }

    /// Runs one call. Whatever goes wrong — unknown tool, bad input, a failing or even
    /// panicking tool — comes back as an `is_error` output the model can read.
    pub async fn call(&self, name: &str, input: Value, ctx: &ToolContext) -> ToolOutput {
        self.call_forking(name, input, ctx, None).await
    }

    /// [`Self::call`], a call that forks the caller handed its `conversation`.
    pub(crate) async fn call_forking(
        &self,
        name: &str,
        input: Value,
        ctx: &ToolContext,
        conversation: Option<Arc<ForkBase>>,
    ) -> ToolOutput {
        let Some(tool) = self.get(name) else {
            return ToolOutput::error(format!(
                "unknown tool `{name}`; the tools available are: {}",
                self.names().join(", ")
            ));
        };
        if !input.is_object() {
            return ToolOutput::error(format!(
                "invalid input for `{name}`: expected a JSON object matching its schema, got {}",
                short_json(&input)
            ));
        }
        let call = match (conversation, self.forking(name)) {
            (Some(conversation), Some(task)) => task.call_forking(input, ctx, conversation),
            _ => tool.call(input, ctx),
        };
        let mut run = std::pin::pin!(AssertUnwindSafe(call).catch_unwind());
        let finished = tokio::select! {
            r = &mut run => r,
            // Tools that watch the token stop and clean up by themselves; one that ignores
            // it gets a moment, then is dropped so the agent can still stop.
            () = ctx.cancel.cancelled() => {
                match tokio::time::timeout(CANCEL_GRACE, &mut run).await {
                    Ok(r) => r,
                    Err(_) => Ok(Err(ToolError::Cancelled)),
                }
            }
        };
        let out = match finished {
            Ok(Ok(out)) => out,
            Ok(Err(ToolError::InvalidInput { message: msg })) => ToolOutput::error(format!(
                "{msg}\nexpected input schema: {}",
                tool.input_schema()
            )),
            Ok(Err(e)) => ToolOutput::error(format!("{name} failed: {e}")),
            Err(panic) => ToolOutput::error(format!(
                "{name} crashed: {}; nothing else was affected",
                panic_message(&panic)
            )),
        };
        // The API refuses empty text blocks.
        let content = if out.content.trim().is_empty() {
            "(no output)".to_owned()
        } else {
            cap_output(&out.content, ctx.limits.max_output_bytes)
        };
        ToolOutput {
            content,
            is_error: out.is_error,
            images: out.images,
        }
    }
}

/// The one live copy of `definitions`: thousands of agents of a type offer the same tools,
/// and each would otherwise keep its own copy. Copies no agent holds any more are forgotten.
fn shared(definitions: Vec<ToolDefinition>) -> Arc<Vec<ToolDefinition>> {
    static LIVE: Mutex<Vec<Weak<Vec<ToolDefinition>>>> = Mutex::new(Vec::new());
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|w| w.strong_count() > 0);
    if let Some(same) = live
        .iter()
        .filter_map(Weak::upgrade)
        .find(|d| **d == definitions)
    {
        return same;
    }
    let new = Arc::new(definitions);
    live.push(Arc::downgrade(&new));
    new
}

fn short_json(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}
