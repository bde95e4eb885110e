//! What a cadre workflow is, and what its items are: one agent call per item of an input,
//! over thousands of items, then an optional reduce.
//!
//! This crate reads and checks a workflow; it runs nothing and spends no token. It holds:
//!
//! - [`Workflow`]: the file (`.cadre/workflows/NAME.yaml` or any path), read liberally
//!   ([`Workflow::parse`] notes unknown keys as [`Warning`]s) and checked strictly
//!   ([`Workflow::problems`], [`Workflow::check_agents`]).
//! - [`Items`]: the input as a stream of [`Item`]s or [`ItemError`]s, read one at a time from
//!   JSON Lines, CSV with a header row, a JSON array or a glob of files; a bad item is that
//!   item's outcome and never stops the others.
//! - [`Prompts`]: the map and reduce prompt templates (minijinja, strict undefined), rendered
//!   per item.
//! - [`CallSpec`] and [`CallKey`]: an item's agent call and the stable hash of its content
//!   (agent type, rendered prompt, output schema, limits, model), by which a run looks up
//!   the result it already has (cadre-core computes it, so a run and `check` agree).
//!
//! cadre-core runs a workflow (`Orchestrator::run_workflow`: the queue, budget, journal and
//! resume), fed the items the CLI makes with this crate; cadre-core does not depend on it.

mod call_key;
mod error;
mod file;
mod input;
mod limits;
mod numbers;
mod step;
mod template;

pub use call_key::{CallKey, CallSpec};
pub use error::{Warning, WorkflowError};
pub use file::{
    find_workflow, saved_workflows, Budget, MapStep, ReduceStep, Workflow, DEFAULT_CONCURRENCY,
    WORKFLOWS_DIR,
};
pub use input::{BadItem, InputFormat, InputSpec, Item, ItemError, Items};
pub use limits::Limits;
pub use step::Step;
pub use template::{Prompts, TemplateError};
