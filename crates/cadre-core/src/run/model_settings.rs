//! Per-type model settings as an agent's requests carry them: its effort, and the schema
//! its answer must match.

use crate::definitions::spec::AgentSpec;
use crate::run::answer::AnswerSchema;
use cadre_model::Effort;

/// The effort `spec` asks for, if `model` takes one: a model from before effort existed
/// would refuse the request, so it is not sent there (said once per agent, in the log).
pub(crate) fn effort_for(spec: &AgentSpec, model: &str) -> Option<Effort> {
    let effort = spec.effort()?;
    if Effort::accepted_by(model) {
        return Some(effort);
    }
    tracing::warn!(
        "agent type {}: `effort: {effort}` is not sent, as {model} does not take an effort",
        spec.name
    );
    None
}

/// The schema an agent's answer must match: the one its caller gave, else its type's.
pub(crate) fn answer_for(spec: &AgentSpec, given: Option<&AnswerSchema>) -> Option<AnswerSchema> {
    if let Some(given) = given {
        return Some(given.clone());
    }
    let schema = spec.output_schema.as_ref()?;
    match AnswerSchema::new(schema) {
        Ok(schema) => Some(schema),
        // Loading drops a schema that does not compile; one given in code may still not.
        Err(why) => {
            tracing::warn!("agent type {}: output_schema ignored: {why}", spec.name);
            None
        }
    }
}
