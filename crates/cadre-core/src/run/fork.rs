//! Forks: a subagent that starts from its parent's conversation instead of a fresh one.
//!
//! `Task` with `subagent_type: "fork"` hands the orchestrator the parent's conversation as
//! it was sent, its system prompt and its tool definitions ([`ForkBase`]). The fork is an
//! agent of the parent's type with that very system prompt and the same tools, whose first
//! history is the parent's messages — the last one the assistant turn holding the `Task`
//! call — then one user message: a result for every call of that turn (the same text for
//! each, so sibling forks of one turn send the same bytes up to their directives), then its
//! directive. Its first request so shares the parent's prefix byte for byte and reads it from
//! the prompt cache; two explicit breakpoints ([`ForkPoint`]) mark where the parent's last
//! request ended and where the siblings' shared part ends.

use cadre_model::{ContentBlock, Message, Messages, Request, Role, ToolDefinition};
use cadre_tools::{Tool, ToolContext, ToolError, ToolOutput};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

/// The `subagent_type` that forks the calling agent (unless a type of that name exists).
pub const FORK_TYPE: &str = "fork";

/// How the fork type is listed among the `Task` tool's subagent types.
pub const DESCRIPTION: &str = "A copy of you that starts from this whole conversation, with your instructions and your tools. Give it only its task, not the context.";

/// What the `Task` tool's description says of forks and typed answers.
pub const TASK_NOTE: &str = "With subagent_type \"fork\", the subagent is a copy of you instead: it inherits this whole conversation, your instructions and your tools, and reads them from the prompt cache, so its prompt need hold only its task. A fork does not fork again.\n\nWith output_schema (a JSON Schema object), the subagent must answer with JSON valid against it; that JSON is its result.\n\n";

/// What each call of the forking turn is answered with in a fork's history.
pub const PLACEHOLDER: &str =
    "(Not known to the fork: this conversation was forked while the calls of this turn ran.)";

/// What a forking agent shares with its forks: its type, system prompt, tools and
/// conversation as sent (the last message the assistant turn holding the fork's call).
#[derive(Debug)]
pub struct ForkBase {
    /// The parent's agent type.
    pub(crate) agent_type: String,
    /// The parent's system prompt.
    pub(crate) system: Arc<str>,
    /// The parent's tool definitions.
    pub(crate) tools: Arc<Vec<ToolDefinition>>,
    /// The parent's messages as its requests send them, ending with its tool turn: shared
    /// with the parent's history, not copied.
    pub(crate) messages: Messages,
}

/// Where a fork's first request carries its explicit cache breakpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkPoint {
    /// (message, block) positions to mark.
    pins: Vec<(usize, usize)>,
    /// The length of the fork's first history: pins apply to that request only.
    len: usize,
}

impl ForkPoint {
    /// Marks the breakpoints on `request` when it is the fork's first, sending `history_len`
    /// messages.
    pub(crate) fn pin(&self, request: &mut Request, history_len: usize) {
        if history_len != self.len {
            return;
        }
        for &(message, block) in &self.pins {
            request.pin_cache_at(message, block);
        }
    }
}

/// The fork's first history and its breakpoints: the parent's messages, then the results of
/// the forking turn's calls and the fork's `directive`.
pub(crate) fn first_history(base: &ForkBase, directive: &str) -> (Vec<Message>, ForkPoint) {
    // The one copy of the parent's messages: they become the fork's own history.
    let mut history = base.messages.to_vec();
    let calls: Vec<String> = history
        .last()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse(t) => Some(t.id.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut pins = Vec::with_capacity(2);
    // The end of the parent's last request: the message before its tool turn.
    if let Some(i) = history.len().checked_sub(2) {
        pins.push((i, history[i].content.len().saturating_sub(1)));
    }
    let mut content: Vec<ContentBlock> = calls
        .iter()
        .map(|id| ContentBlock::tool_result(id, PLACEHOLDER, false))
        .collect();
    if !content.is_empty() {
        pins.push((history.len(), content.len() - 1));
    }
    content.push(ContentBlock::text(directive_text(directive)));
    history.push(Message::new(Role::User, content));
    let len = history.len();
    (history, ForkPoint { pins, len })
}

/// The fork's directive: who it is, then its task.
fn directive_text(prompt: &str) -> String {
    format!(
        "You are a fork of the agent whose conversation is above: you have its context and its tools, and you work on your own from here. Do this task directly (do not fork again); only your final message goes back to the agent that forked you, so end with what it needs.\n\nYour task: {prompt}"
    )
}

/// A tool that can start a fork of the agent calling it (the `Task` tool): a call that forks
/// is handed the caller's conversation, typed. A trait, so the tool set that dispatches
/// calls need not know the tool that delegates.
pub(crate) trait Forking: Tool {
    /// Whether a call with `input` forks the caller, and so needs its conversation.
    fn wants_conversation(&self, input: &Value) -> bool;

    /// Runs a call that forks the caller from `conversation`.
    fn call_forking<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
        conversation: Arc<ForkBase>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_call_of_the_turn_is_answered_before_the_directive() {
        let base = ForkBase {
            agent_type: "main".into(),
            system: Arc::from("sys"),
            tools: Arc::default(),
            messages: Messages::from(vec![
                Message::user_text("context"),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::text("forking"),
                        ContentBlock::tool_use("a", "Task", json!({})),
                        ContentBlock::tool_use("b", "read_file", json!({})),
                    ],
                ),
            ]),
        };
        let (history, point) = first_history(&base, "count the files");
        assert_eq!(history.len(), 3);
        let last = &history[2];
        assert_eq!(last.role, Role::User);
        assert!(matches!(&last.content[0], ContentBlock::ToolResult(r) if r.tool_use_id == "a"));
        assert!(matches!(&last.content[1], ContentBlock::ToolResult(r) if r.tool_use_id == "b"));
        assert!(last.text().ends_with("Your task: count the files"));
        assert_eq!(point.pins, vec![(0, 0), (2, 1)]);

        let mut request = Request::new("m", 10, history.clone());
        request.system = vec![cadre_model::SystemBlock::text("sys")];
        request.apply_prompt_caching();
        point.pin(&mut request, history.len());
        assert_eq!(request.cache_breakpoints(), 4);
        let mut later = Request::new("m", 10, history.clone());
        point.pin(&mut later, history.len() + 2);
        assert_eq!(later.cache_breakpoints(), 0);
    }
}
