//! A hand-written stand-in for a model, used only to author the shipped cassettes.
//!
//! The offline cassettes could not be recorded from a real model where they were made, so
//! their model replies were written by hand here and recorded through
//! [`RecordingModel`](cadre_model::RecordingModel) while the real orchestrator and real
//! tools ran them — so every tool result in a cassette is what the tools really return.
//! `cargo run -p cadre-examples --example author_cassettes` writes them again.

use async_trait::async_trait;
use cadre_model::{
    ContentBlock, EventSink, Model, ModelError, Request, Response, Role, StopReason, Usage,
};
use serde_json::Value;

/// One scripted model turn.
#[derive(Debug, Clone)]
pub struct Turn {
    content: Vec<ContentBlock>,
    stop: StopReason,
}

impl Turn {
    /// A final answer.
    pub fn text(text: &str) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            stop: StopReason::EndTurn,
        }
    }

    /// Tool calls, optionally after a sentence of text.
    pub fn tools(say: &str, calls: Vec<(&str, &str, Value)>) -> Self {
        let mut content = Vec::new();
        if !say.is_empty() {
            content.push(ContentBlock::text(say));
        }
        content.extend(
            calls
                .into_iter()
                .map(|(id, name, input)| ContentBlock::tool_use(id, name, input)),
        );
        Self {
            content,
            stop: StopReason::ToolUse,
        }
    }
}

/// Replies by agent type, a phrase of the agent's first message, and the turn number.
#[derive(Debug, Default)]
pub struct ScriptedModel {
    scripts: Vec<(String, String, Vec<Turn>)>,
}

impl ScriptedModel {
    /// Adds the turns of the agent of `agent_type` whose first message contains `phrase`.
    pub fn on(mut self, agent_type: &str, phrase: &str, turns: Vec<Turn>) -> Self {
        self.scripts.push((agent_type.into(), phrase.into(), turns));
        self
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    async fn send(&self, request: Request, _events: EventSink<'_>) -> Result<Response, ModelError> {
        let agent_type = request
            .origin
            .as_ref()
            .map(|o| o.agent_type.clone())
            .unwrap_or_default();
        let first = request
            .messages
            .first()
            .map(|m| m.text())
            .unwrap_or_default();
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let script = self
            .scripts
            .iter()
            .find(|(t, phrase, _)| *t == agent_type && first.contains(phrase.as_str()))
            .ok_or_else(|| ModelError::Custom {
                provider: self.provider().to_owned(),
                source: format!("no script for a {agent_type} agent asked {first:?}").into(),
            })?;
        let reply = script.2.get(turn).ok_or_else(|| ModelError::Custom {
            provider: self.provider().to_owned(),
            source: format!(
                "the script for {agent_type} ({:?}) has no turn {turn}",
                script.1
            )
            .into(),
        })?;
        // Plausible token counts, so usage tables in replays look like real ones.
        let input =
            serde_json::to_string(&request.messages).map_or(0, |s| s.len() as u64 / 4) + 900;
        let output = serde_json::to_string(&reply.content).map_or(0, |s| s.len() as u64 / 4);
        Ok(Response {
            id: format!("msg_scripted_{agent_type}_{turn}"),
            model: request.model,
            role: Role::Assistant,
            content: reply.content.clone(),
            stop_reason: Some(reply.stop.clone()),
            stop_sequence: None,
            usage: Usage {
                input_tokens: input.saturating_sub(800),
                output_tokens: output,
                cache_creation_input_tokens: if turn == 0 { 800 } else { 0 },
                cache_read_input_tokens: if turn == 0 { 0 } else { 800 },
                ..Default::default()
            },
        })
    }
}
