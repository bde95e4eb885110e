//! Typed answers: an agent whose final answer must be JSON valid against a schema.
//!
//! The schema reaches the model as `output_config.format` (structured outputs, in the form
//! the API accepts: [`cadre_model::strict_schema`]), or as `response_format` on an
//! OpenAI-compatible server; whatever the server enforces, the answer is checked here
//! against the schema as written. An invalid answer is sent back with what was wrong
//! ([`Step::Rejected`], journaled, so a resumed run counts the same tries), at most
//! [`MAX_ANSWERS`] answers in all; then the agent stops with
//! [`StopKind::InvalidAnswer`] naming the last error.

use crate::run::state::{final_text, AgentState};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use cadre_model::OutputFormat;
use serde_json::Value;
use std::sync::Arc;

/// How many answers an agent gives before an invalid one ends it.
pub const MAX_ANSWERS: u32 = 3;

/// How many validation errors one message names.
const ERRORS_SHOWN: usize = 5;

/// A schema an agent's final answer must be valid against, compiled once.
#[derive(Clone)]
pub struct AnswerSchema {
    written: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
    format: OutputFormat,
}

impl std::fmt::Debug for AnswerSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerSchema")
            .field("schema", &self.written)
            .finish_non_exhaustive()
    }
}

impl AnswerSchema {
    /// Compiles `schema`; `Err` says why it is no JSON Schema.
    pub fn new(schema: &Value) -> Result<Self, String> {
        let validator = crate::definitions::model_settings::compile(schema)?;
        Ok(Self {
            written: Arc::new(schema.clone()),
            validator: Arc::new(validator),
            format: OutputFormat::json_schema(schema),
        })
    }

    /// The schema for `T`, derived by schemars.
    pub fn of<T: schemars::JsonSchema>() -> Result<Self, String> {
        let schema = serde_json::to_value(schemars::schema_for!(T))
            .map_err(|e| format!("its schema could not be written: {e}"))?;
        Self::new(&schema)
    }

    /// The schema as written.
    pub fn schema(&self) -> &Value {
        &self.written
    }

    /// The `output_config.format` that asks the model for it.
    pub fn format(&self) -> &OutputFormat {
        &self.format
    }

    /// The JSON text of `answer` when it is valid (a code fence around it is taken off),
    /// else what is wrong with it.
    pub fn check(&self, answer: &str) -> Result<String, String> {
        let text = unfenced(answer);
        let value: Value = serde_json::from_str(text).map_err(|e| {
            format!("the answer is not JSON ({e}): it must be one JSON value and nothing else")
        })?;
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {e}")
            })
            .collect();
        if errors.is_empty() {
            return Ok(text.to_owned());
        }
        let mut said = errors
            .iter()
            .take(ERRORS_SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if errors.len() > ERRORS_SHOWN {
            said.push_str(&format!(" (and {} more)", errors.len() - ERRORS_SHOWN));
        }
        Err(format!(
            "the answer does not match the output schema: {said}"
        ))
    }
}

/// The text inside a Markdown code fence around the whole answer, else the answer trimmed.
fn unfenced(answer: &str) -> &str {
    let t = answer.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return t;
    };
    // The fence's language tag (`json`) runs to the end of its line.
    body.split_once('\n').map_or(body, |(_, b)| b).trim()
}

/// What becomes of an agent's answer.
pub(crate) enum Verdict {
    /// It stands: the JSON text the parent gets.
    Accept(String),
    /// It goes back to the model with this step.
    Retry(Step),
    /// The agent stops so.
    Fail(StopKind),
}

/// Judges the final answer of `state` (ended with `end_turn`) against `schema`.
pub(crate) fn judge(schema: &AnswerSchema, state: &AgentState, agent: &AgentPath) -> Verdict {
    match schema.check(&final_text(&state.history)) {
        Ok(text) => Verdict::Accept(text),
        Err(error) if state.rejected + 1 < MAX_ANSWERS => Verdict::Retry(Step::Rejected {
            agent: agent.clone(),
            error,
        }),
        Err(error) => Verdict::Fail(StopKind::InvalidAnswer(format!(
            "after {MAX_ANSWERS} answers, {error}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_checked_against_the_schema_as_written() {
        let schema = AnswerSchema::new(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
            "required": ["n"]
        }))
        .unwrap();
        assert_eq!(schema.check(" {\"n\": 2} ").unwrap(), "{\"n\": 2}");
        assert_eq!(
            schema.check("```json\n{\"n\": 3}\n```").unwrap(),
            "{\"n\": 3}"
        );
        let e = schema.check("{\"n\": 0, \"s\": 5}").unwrap_err();
        assert!(e.contains("/n") && e.contains("/s"), "{e}");
        assert!(schema
            .check("Here it is: {}")
            .unwrap_err()
            .contains("not JSON"));
        // What is sent is the strict form; the check keeps the bound it left out.
        assert_eq!(schema.format().schema["additionalProperties"], json!(false));
        assert!(AnswerSchema::new(&json!("no")).is_err());
        assert!(AnswerSchema::new(&json!({"type": 5})).is_err());
    }

    #[test]
    fn a_rejected_answer_folds_into_the_state_alike_live_and_on_resume() {
        let schema = AnswerSchema::new(&json!({"type": "integer"})).unwrap();
        let answer = |text: &str| Step::Response {
            agent: "main".into(),
            response: serde_json::from_value(json!({"id": "m", "type": "message",
                "role": "assistant", "model": "x", "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}))
            .unwrap(),
        };
        let mut steps = vec![
            Step::Started {
                agent: "main".into(),
                agent_type: "main".into(),
                description: "d".into(),
                history: vec![cadre_model::Message::user_text("go")],
            },
            answer("seven"),
        ];
        for n in 1..MAX_ANSWERS {
            let state = AgentState::from_steps(steps.clone()).unwrap();
            assert_eq!(state.rejected, n - 1);
            let Verdict::Retry(step) = judge(&schema, &state, &"main".into()) else {
                panic!("answer {n} was not sent back");
            };
            steps.push(step);
            let state = AgentState::from_steps(steps.clone()).unwrap();
            assert_eq!(state.next(), crate::run::state::Next::Ask);
            assert!(state.history.last().unwrap().text().contains("not JSON"));
            steps.push(answer("still words"));
        }
        let state = AgentState::from_steps(steps.clone()).unwrap();
        assert!(matches!(
            judge(&schema, &state, &"main".into()),
            Verdict::Fail(StopKind::InvalidAnswer(_))
        ));
        steps.pop();
        steps.push(answer("7"));
        let state = AgentState::from_steps(steps).unwrap();
        assert!(matches!(judge(&schema, &state, &"main".into()), Verdict::Accept(t) if t == "7"));
    }

    #[test]
    fn a_woken_member_s_answer_gets_its_tries_anew() {
        let schema = AnswerSchema::new(&json!({"type": "integer"})).unwrap();
        let answer = |text: &str| Step::Response {
            agent: "main/w#1".into(),
            response: serde_json::from_value(json!({"id": "m", "type": "message",
                "role": "assistant", "model": "x", "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}))
            .unwrap(),
        };
        let rejected = |error: &str| Step::Rejected {
            agent: "main/w#1".into(),
            error: error.into(),
        };
        let mut state = AgentState::new("w", "d", vec![cadre_model::Message::user_text("go")]);
        for step in [
            answer("one"),
            rejected("not JSON"),
            answer("two"),
            rejected("not JSON"),
            answer("3"),
        ] {
            state.apply(step);
        }
        assert_eq!(state.rejected, MAX_ANSWERS - 1);
        // A message wakes it for another turn: its first invalid answer there is sent back.
        let message: crate::vocab::team::Envelope = serde_json::from_value(json!({
            "from": "main", "to": "w", "seq": 1, "text": "more", "key": "k"
        }))
        .unwrap();
        state.apply(Step::Delivered {
            agent: "main/w#1".into(),
            messages: vec![message],
        });
        state.apply(answer("four"));
        assert!(matches!(
            judge(&schema, &state, &"main/w#1".into()),
            Verdict::Retry(_)
        ));
    }
}
