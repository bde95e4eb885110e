//! Typed runs: the primary agent's answer as a value of a Rust type.

use super::config::{AnswerError, RunError};
use super::{Orchestrator, RunSummary};
use crate::run::answer::AnswerSchema;
use serde::de::DeserializeOwned;
use std::sync::Arc;

impl Orchestrator {
    /// Like [`run`](Self::run), but the primary agent must answer with JSON valid against
    /// `T`'s schema (derived by schemars; sent as structured outputs, checked here, asked
    /// again with the error at most twice), and the answer comes back decoded as a `T`.
    /// `Err(RunError::Answer)` when the agent stopped without a valid answer.
    pub async fn run_typed<T: DeserializeOwned + schemars::JsonSchema>(
        self: &Arc<Self>,
        agent_type: &str,
        task: &str,
    ) -> Result<(T, RunSummary), RunError> {
        let schema = AnswerSchema::of::<T>().map_err(|why| {
            RunError::Answer(AnswerError::Type {
                type_name: std::any::type_name::<T>(),
                why,
            })
        })?;
        let (outcome, summary) = self.run_to_end(agent_type, task, Some(schema)).await?;
        if !outcome.stop.is_done() {
            return Err(RunError::Answer(AnswerError::NoAnswer {
                stop: outcome.stop,
            }));
        }
        let value = serde_json::from_str(&outcome.text)
            .map_err(|e| RunError::Answer(AnswerError::Undecodable(e)))?;
        Ok((value, summary))
    }
}
