//! The `Workflow` tool: how a model starts one of the project's saved workflows by name,
//! with arguments, and gets back its summary and where its results are — never the items'
//! texts.
//!
//! cadre-core cannot read workflow files (cadre-workflow depends on it), so what a saved
//! workflow is and how one runs comes from the program through [`SavedWorkflows`]; this
//! tool is the part that knows the calling agent: its run's id and its path (each call's
//! workflow run is named after them and the call's content, so a resumed caller that calls
//! it again — under a new call id — finds the same run), its budget (the workflow's tokens
//! count against it) and whether it is read-only.

use crate::definitions::registry::WORKFLOW_TOOL;
use crate::run::budget::Budget;
use crate::run::provider_stop::ProviderStop;
use crate::run::toolset::Spent;
use cadre_model::Usage;
use cadre_tools::{Rerun, ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
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
    /// The id its run must have: made of the calling run's id and a digest of the
    /// calling agent's path, the workflow's name and its arguments, so the same call made
    /// again (its caller resumed, or the model asking again) goes on with that run.
    pub run_id: String,
    /// The calling run's id: kept in the workflow's run folder, so that run is resumed
    /// through its caller, not on its own.
    pub called_by: String,
    /// Whether the calling agent is read-only: it may not start agents that can write.
    pub read_only: bool,
    /// The calling agent's budget: the workflow's run counts its tokens here
    /// (see [`OrchestratorBuilder::budget_within`](crate::OrchestratorBuilder::budget_within)).
    pub budget: Budget,
    /// Cancelled when the calling agent is: the workflow's run stops with it.
    pub cancel: CancellationToken,
    /// The calling run's record of a provider's refusal, which the workflow's run shares
    /// (see [`OrchestratorBuilder::called_by`](crate::OrchestratorBuilder::called_by)).
    pub(crate) provider_stop: Arc<ProviderStop>,
    /// What the workflow's run spent, once told ([`Self::spent`]).
    spent: Arc<OnceLock<Usage>>,
}

impl WorkflowCall {
    /// Tells what the workflow's run spent in all (its earlier parts too): journaled with
    /// the call's result as the calling agent's, so its resume counts it.
    pub fn spent(&self, usage: Usage) {
        // Told once, at the run's end.
        let _ = self.spent.set(usage);
    }
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
    agent: String,
    budget: Budget,
    provider_stop: Arc<ProviderStop>,
    spent: Spent,
}

impl WorkflowTool {
    /// A `Workflow` tool for the agent at `agent` of the run `run_id`, whose tokens count
    /// against `budget`, whose run stops for a provider's refusal in `provider_stop`, and
    /// whose spend is told in `spent` (its agent's tool set's).
    pub(crate) fn new(
        saved: Arc<dyn SavedWorkflows>,
        (run_id, agent): (&str, &str),
        budget: Budget,
        (provider_stop, spent): (Arc<ProviderStop>, Spent),
    ) -> Self {
        Self {
            listed: saved.list(),
            saved,
            run_id: run_id.to_owned(),
            agent: agent.to_owned(),
            budget,
            provider_stop,
            spent,
        }
    }

    /// The run id of the workflow `name` started with `args` (sorted by name): the calling
    /// run's id and a digest of the calling agent's path and the call's content. Not the
    /// call's id: a caller cancelled mid-call and resumed calls again under a new id (and
    /// a server's counter ids, `call_1`, repeat across processes).
    fn run_id_for(&self, name: &str, args: &[(String, String)]) -> String {
        let mut hasher = Sha256::new();
        // Each part is length-prefixed, so no two different calls give the same bytes.
        let parts = [self.agent.as_str(), name]
            .into_iter()
            .chain(args.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]));
        for part in parts {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = hasher.finalize();
        let mut id = format!("{}-wf-", self.run_id);
        for byte in &digest[..6] {
            // Writing to a String cannot fail.
            let _ = write!(id, "{byte:02x}");
        }
        id
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
             arguments it declares. Called again with the same name and arguments, it goes on \
             with the same run: only items not completed, or whose input changed, run again, \
             and you get its summary. The workflows:\n"
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
        // (named by the call's content), and no finished item runs again.
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
        let mut args: Vec<(String, String)> = input
            .args
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect();
        args.sort();
        let call = WorkflowCall {
            run_id: self.run_id_for(&input.name, &args),
            called_by: self.run_id.clone(),
            name: input.name,
            args,
            read_only: ctx.read_only,
            budget: self.budget.clone(),
            cancel: ctx.cancel.clone(),
            provider_stop: self.provider_stop.clone(),
            spent: Arc::default(),
        };
        let spent = call.spent.clone();
        let out = self.saved.run(call).await;
        if let Some(usage) = spent.get() {
            self.spent.insert(ctx.call_id.clone(), *usage);
        }
        Ok(out)
    }
}
