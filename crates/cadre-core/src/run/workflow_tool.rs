//! The `Workflow` tool: how a model starts one of the project's saved workflows by name,
//! with arguments, and gets back its summary and where its results are — never the items'
//! texts.
//!
//! cadre-core cannot read workflow files (cadre-workflow depends on it), so what a saved
//! workflow is and how one runs comes from the program through [`SavedWorkflows`]; this
//! tool is the part that knows the calling agent: its run's id (each call's workflow run
//! is named after it and the call's id, so a resumed caller finds the same run), its
//! budget (the workflow's tokens count against it) and whether it is read-only.

use crate::definitions::registry::WORKFLOW_TOOL;
use crate::run::budget::Budget;
use cadre_tools::{Rerun, ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A saved workflow as the `Workflow` tool lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SavedWorkflow {
    /// Its name, as the model gives it.
    pub name: String,
    /// One line on what it does.
    pub description: String,
}

impl SavedWorkflow {
    /// The saved workflow `name`, which does what `description` says.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
        }
    }
}

/// One `Workflow` call, as the program runs it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkflowCall {
    /// The saved workflow's name (one of [`SavedWorkflows::list`]).
    pub name: String,
    /// Its arguments, as `--arg NAME=VALUE` gives them.
    pub args: Vec<(String, String)>,
    /// The id its run must have: made of the calling run's id and the call's, so the
    /// same call made again (its caller resumed) goes on with that run.
    pub run_id: String,
    /// Whether the calling agent is read-only: it may not start agents that can write.
    pub read_only: bool,
    /// The calling agent's budget: the workflow's run counts its tokens here
    /// (see [`OrchestratorBuilder::budget_within`](crate::OrchestratorBuilder::budget_within)).
    pub budget: Budget,
    /// Cancelled when the calling agent is: the workflow's run stops with it.
    pub cancel: CancellationToken,
}

/// The project's saved workflows, and how one runs: given by the program to
/// [`OrchestratorBuilder::workflows`](crate::OrchestratorBuilder::workflows).
#[async_trait::async_trait]
pub trait SavedWorkflows: Send + Sync {
    /// The saved workflows, in the order they are listed.
    fn list(&self) -> Vec<SavedWorkflow>;

    /// Runs (or goes on with) the workflow of `call` to its end: its summary, for the
    /// model — counts per outcome, tokens, how it ended, the results file's path — or an
    /// error result saying why it could not start.
    async fn run(&self, call: WorkflowCall) -> ToolOutput;
}

/// What `Workflow` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowInput {
    /// The saved workflow's name, as listed in this tool's description.
    pub name: String,
    /// Its arguments by name (the ones it declares), as strings.
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// `Workflow`, for one agent: starts the saved workflows of `saved`.
pub struct WorkflowTool {
    saved: Arc<dyn SavedWorkflows>,
    listed: Vec<SavedWorkflow>,
    run_id: String,
    budget: Budget,
}

impl WorkflowTool {
    /// A `Workflow` tool for an agent of the run `run_id` whose tokens count against
    /// `budget`.
    pub fn new(saved: Arc<dyn SavedWorkflows>, run_id: impl Into<String>, budget: Budget) -> Self {
        Self {
            listed: saved.list(),
            saved,
            run_id: run_id.into(),
            budget,
        }
    }

    /// The run id of the workflow the call `call_id` starts: the calling run's id and the
    /// call's, kept to what a run id may hold.
    fn run_id_for(&self, call_id: &str) -> String {
        let call: String = call_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        format!("{}-wf-{call}", self.run_id)
    }
}

impl TypedTool for WorkflowTool {
    type Input = WorkflowInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        WORKFLOW_TOOL
    }

    fn description(&self) -> String {
        let mut text = "Start one of the project's saved workflows: one agent per item of its \
             input, a few at once, each result a line of a results file. You get its summary \
             (items per outcome, tokens, how it ended) and the results file's path, never the \
             items' answers: read the file if you need them. Give its name and, as `args`, the \
             arguments it declares. The workflows:\n"
            .to_owned();
        for w in &self.listed {
            text.push_str(&format!("- {}: {}\n", w.name, w.description));
        }
        text
    }

    fn is_read_only(&self) -> bool {
        // Its items' agents may write (a read-only caller is refused such a workflow).
        false
    }

    fn runs_concurrently(&self) -> bool {
        true
    }

    fn rerun(&self) -> Rerun {
        // Its run journals its own steps: called again, it goes on with the same run
        // (named by this call's id), and no finished item runs again.
        Rerun::Resumes
    }

    async fn run(&self, input: WorkflowInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if !self.listed.iter().any(|w| w.name == input.name) {
            let names: Vec<&str> = self.listed.iter().map(|w| w.name.as_str()).collect();
            return Ok(ToolOutput::error(format!(
                "there is no saved workflow {:?}; the saved ones are: {}",
                input.name,
                names.join(", ")
            )));
        }
        let args = input
            .args
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect();
        let call = WorkflowCall {
            name: input.name,
            args,
            run_id: self.run_id_for(&ctx.call_id),
            read_only: ctx.read_only,
            budget: self.budget.clone(),
            cancel: ctx.cancel.clone(),
        };
        Ok(self.saved.run(call).await)
    }
}
