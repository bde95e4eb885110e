//! Workflows: a run whose root is not a model-driven agent but a driver that makes one
//! agent call per item, items pulled from their source only when a slot frees, each call
//! remembered in the journal by its content ([`CallKey`]), each result a line of
//! `results.jsonl` in the run folder. [`Workflow`] says what to run;
//! [`Orchestrator::run_workflow`](crate::Orchestrator::run_workflow) runs it and
//! [`Orchestrator::resume_workflow`](crate::Orchestrator::resume_workflow) goes on with it.

mod call_key;
pub(crate) mod results;
pub(crate) mod seen;

pub use call_key::CallKey;

use crate::vocab::agent_path::AgentPath;
use crate::vocab::limits::AgentLimits;
use cadre_model::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// One item's agent call: the type, the prompt, the schema its answer must match, and the
/// limits it runs within.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemCall {
    /// The agent type.
    pub agent: String,
    /// Its prompt.
    pub prompt: String,
    /// The JSON Schema its answer must be valid against, when the answer is typed.
    pub output_schema: Option<Value>,
    /// Its limits (carried in the call and its key; enforced where agents' limits are).
    pub limits: AgentLimits,
}

impl ItemCall {
    /// A call of an agent of type `agent` on `prompt`, with a text answer and no limits.
    pub fn new(agent: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self {
            agent: agent.into(),
            prompt: prompt.into(),
            output_schema: None,
            limits: AgentLimits::default(),
        }
    }

    /// The same call whose answer must be valid against the JSON Schema `schema`.
    pub fn schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The same call whose answer must be a `T` (its schema derived by schemars).
    pub fn schema_of<T: schemars::JsonSchema>(self) -> Self {
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
        self.schema(schema)
    }

    /// The same call within `limits`.
    pub fn limits(mut self, limits: AgentLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// One item as the driver takes it: named by `key`, its call, or why it is bad input.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkItem {
    /// What names the item (its key field, or its position).
    pub key: String,
    /// The line it starts on in its input, if the input has lines.
    pub line: Option<u64>,
    /// Its call, or why it has none (bad input, a prompt that does not render).
    pub call: Result<ItemCall, String>,
}

impl WorkItem {
    /// The item `key`, whose call is `call`.
    pub fn new(key: impl Into<String>, call: ItemCall) -> Self {
        Self {
            key: key.into(),
            line: None,
            call: Ok(call),
        }
    }

    /// The item `key` that is bad input, for the reason `why`: its outcome is
    /// `failed: bad input`, and the other items go on.
    pub fn bad(key: impl Into<String>, line: Option<u64>, why: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            line,
            call: Err(why.into()),
        }
    }

    /// The same item, noted as starting on `line` of its input.
    pub fn at_line(mut self, line: Option<u64>) -> Self {
        self.line = line;
        self
    }
}

/// What became of one item: a line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ItemResult {
    /// The item's key.
    pub key: String,
    /// Its call's content key (and attempt), as the journal knows it; none for bad input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// What became of it: `completed`, `cut`, `budget`, `turn limit`, `cancelled`, or
    /// `failed: …` (`failed: bad input` for bad input).
    pub outcome: String,
    /// Its answer: the typed JSON when the call had a schema, else the text.
    pub output: Value,
    /// Tokens its agent used: its last attempt's, and those of the attempts made since the
    /// run last started or resumed.
    pub usage: Usage,
    /// Its agent's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentPath>,
    /// Its line in the input, for bad input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many times it was tried (0 for bad input).
    #[serde(default)]
    pub attempts: u32,
    /// Whether an attempt of it ran in this part of the run, not only before a resume
    /// (what an ETA counts); not written to the results.
    #[serde(skip)]
    pub ran_now: bool,
}

impl ItemResult {
    /// The outcome of an item that is bad input.
    pub const BAD_INPUT: &'static str = "failed: bad input";

    /// The result of item `key` with `outcome`, and nothing else known yet (for a driver
    /// other than cadre-core's, which fills in the rest).
    pub fn new(key: impl Into<String>, outcome: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            call: None,
            outcome: outcome.into(),
            output: Value::Null,
            usage: Usage::default(),
            agent: None,
            line: None,
            error: None,
            attempts: 0,
            ran_now: false,
        }
    }

    /// Whether the item's agent finished its work.
    pub fn is_completed(&self) -> bool {
        self.outcome == crate::vocab::outcome::Outcome::Completed.label()
    }

    /// Whether it failed (bad input among the failures).
    pub fn is_failed(&self) -> bool {
        self.outcome.starts_with("failed")
    }
}

/// An item's agent starting (or going on after a resume): a `started` event of its own
/// beside the result line told when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ItemStart {
    /// The item's key.
    pub key: String,
    /// The id its call is journaled under (its content key, and attempt).
    pub call: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// Its agent's path.
    pub agent: AgentPath,
    /// `None` as it starts. An attempt that failed and is tried again is told once more
    /// as it ends, with why it failed here: its end, as the item's result is the end of
    /// its last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// Where the items come from.
pub(crate) type ItemSource = Box<dyn Iterator<Item = WorkItem> + Send>;

/// Makes the reduce step's prompt, given the results file.
pub(crate) type ReducePrompt = Box<dyn FnOnce(&Path) -> String + Send>;

/// Told of each item's result as it is known.
pub(crate) type ResultSink = Box<dyn FnMut(&ItemResult) + Send>;

/// Told of each item's agent as it starts; called from the items' futures, so shared.
pub(crate) type StartSink = Box<dyn Fn(&ItemStart) + Send + Sync>;

/// A workflow: items, each made into one agent call, run at most `concurrency` at once,
/// then an optional reduce given the results file.
///
/// ```no_run
/// # async fn demo(orchestrator: std::sync::Arc<cadre_core::Orchestrator>) -> Result<(), cadre_core::RunError> {
/// use cadre_core::workflow::{ItemCall, Workflow};
/// let files = ["src/a.rs", "src/b.rs"];
/// let mut workflow = Workflow::new("review", files, |file| {
///     Ok((file.to_owned(), ItemCall::new("explore", format!("Review {file}"))))
/// })
/// .concurrency(8)
/// .retries(1);
/// let results = workflow.results();
/// let summary = orchestrator.run_workflow(workflow).await?;
/// # drop((results, summary)); Ok(()) }
/// ```
pub struct Workflow {
    pub(crate) name: String,
    pub(crate) items: ItemSource,
    pub(crate) concurrency: usize,
    pub(crate) retries: u32,
    pub(crate) retry_failed: bool,
    pub(crate) follow_up: Option<(String, String)>,
    pub(crate) reduce: Option<(String, ReducePrompt)>,
    pub(crate) sinks: Vec<ResultSink>,
    pub(crate) start_sinks: Vec<StartSink>,
    pub(crate) invocation: Option<Value>,
}

impl std::fmt::Debug for Workflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow")
            .field("name", &self.name)
            .field("concurrency", &self.concurrency)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Workflow {
    /// The agent type a workflow run's root is journaled under (its path is `workflow`).
    pub const ROOT_TYPE: &'static str = "workflow";

    /// The file in a workflow run's folder that keeps each item's result line.
    pub const RESULTS_FILE: &'static str = "results.jsonl";

    /// The file in a workflow run's folder that keeps how it was invoked
    /// ([`Workflow::invocation`]), so the run can be carried on.
    pub const INVOCATION_FILE: &'static str = "workflow.json";

    /// A workflow named `name` over `items`, each made into its key and call by `make`
    /// (an `Err` is that item's bad input, said). Items are taken from `items` only when
    /// a slot frees, so it may be a stream of any length.
    pub fn new<I, T, F>(name: impl Into<String>, items: I, mut make: F) -> Self
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: Send + 'static,
        F: FnMut(T) -> Result<(String, ItemCall), String> + Send + 'static,
    {
        let mut position = 0u64;
        let items = items.into_iter().map(move |item| {
            let at = position;
            position += 1;
            match make(item) {
                Ok((key, call)) => WorkItem::new(key, call),
                Err(why) => WorkItem::bad(at.to_string(), None, why),
            }
        });
        Self::from_items(name, items)
    }

    /// A workflow named `name` over items already made.
    pub fn from_items(
        name: impl Into<String>,
        items: impl Iterator<Item = WorkItem> + Send + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            items: Box::new(items),
            concurrency: 16,
            retries: 0,
            retry_failed: false,
            follow_up: None,
            reduce: None,
            sinks: Vec::new(),
            start_sinks: Vec::new(),
            invocation: None,
        }
    }

    /// At most `n` items at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// A failed item is tried again up to `n` times, with backoff, as a fresh call.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }

    /// On a resume: the items whose last attempt failed are tried once more (the others'
    /// results stand).
    pub fn retry_failed(mut self) -> Self {
        self.retry_failed = true;
        self
    }

    /// On a resume: the agent of the item `key` goes on from its history with `text` as
    /// a new user message (a fix round).
    pub fn follow_up(mut self, key: impl Into<String>, text: impl Into<String>) -> Self {
        self.follow_up = Some((key.into(), text.into()));
        self
    }

    /// After the items, one agent of type `agent` is given the prompt `prompt` makes of
    /// the results file's path.
    pub fn reduce(
        mut self,
        agent: impl Into<String>,
        prompt: impl FnOnce(&Path) -> String + Send + 'static,
    ) -> Self {
        self.reduce = Some((agent.into(), Box::new(prompt)));
        self
    }

    /// How it was invoked, kept in the run folder (`workflow.json`) for whoever carries the
    /// run on.
    pub fn invocation(mut self, invocation: Value) -> Self {
        self.invocation = Some(invocation);
        self
    }

    /// Calls `f` with each item's result as it is known.
    pub fn on_result(mut self, f: impl FnMut(&ItemResult) + Send + 'static) -> Self {
        self.sinks.push(Box::new(f));
        self
    }

    /// Calls `f` as each item's agent starts (or goes on after a resume), before it ends.
    pub fn on_start(mut self, f: impl Fn(&ItemStart) + Send + Sync + 'static) -> Self {
        self.start_sinks.push(Box::new(f));
        self
    }

    /// A stream of the item results as they are known; it ends with the run.
    pub fn results(&mut self) -> futures::channel::mpsc::UnboundedReceiver<ItemResult> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        self.sinks.push(Box::new(move |r: &ItemResult| {
            let _ = tx.unbounded_send(r.clone());
        }));
        rx
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
