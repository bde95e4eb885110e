//! The agent loop: send the history and tools, run the tools asked for, append, repeat.

use crate::record::events::{millis, Event, EventHandler};
use crate::record::transcript::Transcript;
use crate::run::budget::Budget;
use crate::run::context;
use crate::run::outcome::{AgentOutcome, StopKind};
use crate::run::toolset::ToolSet;
use cadre_model::{
    ContentBlock, Message, Model, ModelError, ModelEvent, Request, RequestOrigin, Response, Role,
    StopReason, SystemBlock, ToolUseBlock, Usage,
};
use cadre_tools::ToolContext;
use futures::future::join_all;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// Who an agent is and how far it may go.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Its path in the tree of agents (`main`, `main/explore#2`).
    pub path: String,
    /// Its agent type (`main`, `explore`, …).
    pub agent_type: String,
    /// The model id it talks to.
    pub model: String,
    /// Its system prompt.
    pub system: String,
    /// Output token cap per response.
    pub max_tokens: u32,
    /// Most model requests it may make.
    pub max_turns: u32,
    /// The model's context window in tokens; old tool results are cleared near it.
    pub context_tokens: u64,
}

/// One agent: a model, a tool set and the limits it runs under.
pub struct Agent {
    /// Who it is and its limits.
    pub config: AgentConfig,
    /// The model it talks to.
    pub model: Arc<dyn Model>,
    /// The tools it may use.
    pub tools: ToolSet,
    /// The workspace, cancel token and shared file state its tools use.
    pub ctx: ToolContext,
    /// The token budget shared with every other agent of the run.
    pub budget: Budget,
    /// Where its events go.
    pub events: EventHandler,
    /// Bounds model requests in flight across the whole run, if set.
    pub limiter: Option<Arc<Semaphore>>,
    /// Where its history is written as it grows, if anywhere.
    pub transcript: Option<Arc<Transcript>>,
}

impl Agent {
    /// Runs the loop from `history` (normally one user message) until the agent stops.
    pub async fn run(&self, mut history: Vec<Message>) -> AgentOutcome {
        let started = Instant::now();
        let (mut turns, mut tool_calls, mut usage) = (0u32, 0u32, Usage::default());
        history.iter().for_each(|m| self.log(m));
        let stop = loop {
            if let Some(stop) = self.should_stop(turns) {
                break stop;
            }
            turns += 1;
            self.emit(Event::Turn {
                agent: self.config.path.clone(),
                turn: turns,
            });
            let response = match self.send(&history).await {
                Ok(r) => r,
                Err(stop) => break stop,
            };
            usage.add(&response.usage);
            self.budget.charge(&response.usage);
            self.emit(Event::Usage {
                agent: self.config.path.clone(),
                usage: response.usage,
            });
            let message = sanitized(&response);
            self.log(&message);
            match history.last_mut() {
                // Continuing a paused turn: the new blocks belong to the same assistant turn.
                Some(last) if last.role == Role::Assistant => last.content.extend(message.content),
                _ => history.push(message),
            }
            match response.stop_reason.clone().unwrap_or(StopReason::EndTurn) {
                StopReason::ToolUse => {
                    let calls: Vec<ToolUseBlock> = response.tool_uses().cloned().collect();
                    if calls.is_empty() {
                        // Nothing to answer: an empty user message would be invalid.
                        break StopKind::Done;
                    }
                    tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
                    history.push(Message::new(Role::User, self.run_tools(calls).await));
                    self.log(&history[history.len() - 1]);
                    self.keep_within_context(&mut history, &response.usage);
                }
                // The server paused a long turn: sending the history back as is resumes it.
                StopReason::PauseTurn => {}
                StopReason::EndTurn | StopReason::StopSequence => break StopKind::Done,
                StopReason::MaxTokens => break StopKind::MaxTokens,
                StopReason::Refusal => break StopKind::Refusal,
                StopReason::ModelContextWindowExceeded => break StopKind::ContextWindowExceeded,
                StopReason::Other(other) => break StopKind::Other(other),
            }
        };
        let text = final_text(&history);
        self.emit(Event::Finished {
            agent: self.config.path.clone(),
            stop: stop.clone(),
            turns,
            usage,
            elapsed_ms: millis(started.elapsed()),
        });
        AgentOutcome {
            text,
            stop,
            turns,
            tool_calls,
            usage,
            history,
        }
    }

    /// Whether the loop must stop before sending another request, and why.
    fn should_stop(&self, turns: u32) -> Option<StopKind> {
        if self.ctx.cancel.is_cancelled() {
            Some(StopKind::Cancelled)
        } else if self.budget.exhausted() {
            Some(StopKind::Budget)
        } else if turns >= self.config.max_turns {
            Some(StopKind::MaxTurns)
        } else {
            None
        }
    }

    /// Sends the history to the model, streaming text out as events; cancel wins.
    async fn send(&self, history: &[Message]) -> Result<Response, StopKind> {
        let mut request =
            Request::new(&self.config.model, self.config.max_tokens, history.to_vec());
        request.system = vec![SystemBlock::text(&self.config.system)];
        request.tools = self.tools.definitions();
        request.apply_prompt_caching();
        request.origin = Some(RequestOrigin {
            path: self.config.path.clone(),
            agent_type: self.config.agent_type.clone(),
        });
        let path = &self.config.path;
        let on_event = |e: ModelEvent| match e {
            ModelEvent::TextDelta(delta) => self.emit(Event::Text {
                agent: path.clone(),
                delta,
            }),
            ModelEvent::Retrying {
                attempt,
                wait,
                reason,
            } => self.emit(Event::Retrying {
                agent: path.clone(),
                attempt,
                wait_ms: millis(wait),
                reason,
            }),
            _ => {}
        };
        let call = async {
            // Waiting for a slot is part of the request: cancel interrupts it too.
            let _permit = match &self.limiter {
                Some(limiter) => limiter.acquire().await.ok(),
                None => None,
            };
            self.model.send(request, &on_event).await
        };
        tokio::select! {
            biased;
            () = self.ctx.cancel.cancelled() => Err(StopKind::Cancelled),
            r = call => r.map_err(|e: ModelError| StopKind::ModelError(e.to_string())),
        }
    }

    /// Runs one turn's tool calls and returns their results in call order. Calls that may
    /// run concurrently (read-only tools, `Task`) run together; a writing call waits for
    /// the ones before it and runs alone.
    async fn run_tools(&self, calls: Vec<ToolUseBlock>) -> Vec<ContentBlock> {
        let mut results = Vec::with_capacity(calls.len());
        let mut batch: Vec<ToolUseBlock> = Vec::new();
        for call in calls {
            if !self.tools.runs_concurrently(&call.name) {
                results.extend(join_all(batch.drain(..).map(|c| self.run_tool(c))).await);
                results.push(self.run_tool(call).await);
            } else {
                batch.push(call);
            }
        }
        results.extend(join_all(batch.into_iter().map(|c| self.run_tool(c))).await);
        results
    }

    /// Runs one tool call and turns whatever happens into a tool_result block.
    async fn run_tool(&self, call: ToolUseBlock) -> ContentBlock {
        let agent = self.config.path.clone();
        self.emit(Event::ToolCall {
            agent: agent.clone(),
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
        let out = if self.ctx.cancel.is_cancelled() {
            cadre_tools::ToolOutput::error("cancelled before it ran")
        } else if let Some(raw) = invalid_json_input(&call.input) {
            cadre_tools::ToolOutput::error(format!(
                "invalid input for `{}`: the arguments were not valid JSON: {raw}",
                call.name
            ))
        } else {
            self.tools.call(&call.name, call.input, &self.ctx).await
        };
        self.emit(Event::ToolResult {
            agent,
            id: call.id.clone(),
            name: call.name,
            is_error: out.is_error,
            summary: out
                .content
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(120)
                .collect(),
        });
        let mut block = ContentBlock::tool_result(call.id, out.content, out.is_error);
        if let ContentBlock::ToolResult(result) = &mut block {
            result.content.extend(
                out.images
                    .into_iter()
                    .map(|i| ContentBlock::image(i.media_type, i.data)),
            );
        }
        block
    }

    /// Clears old tool results once the last request came near the context window, so the
    /// next one still fits.
    fn keep_within_context(&self, history: &mut [Message], last: &Usage) {
        let used = last.total_input() + last.output_tokens;
        if (used as f64) < self.config.context_tokens as f64 * context::CLEAR_AT {
            return;
        }
        let cleared = context::clear_old_tool_results(history, context::KEEP_RECENT);
        if cleared > 0 {
            tracing::info!(agent = %self.config.path, used, cleared, "cleared old tool results to stay within the context window");
        }
    }

    fn log(&self, message: &Message) {
        if let Some(t) = &self.transcript {
            t.message(message);
        }
    }

    fn emit(&self, event: Event) {
        (self.events)(event);
    }
}

fn invalid_json_input(input: &Value) -> Option<&str> {
    input
        .get(cadre_model::INVALID_TOOL_INPUT_KEY)
        .and_then(Value::as_str)
}

/// The response as an assistant message, with any unparsable tool input replaced by `{}`
/// so the history stays valid for the API.
fn sanitized(response: &Response) -> Message {
    let mut message = response.to_message();
    for block in &mut message.content {
        if let ContentBlock::ToolUse(t) = block {
            if invalid_json_input(&t.input).is_some() || !t.input.is_object() {
                t.input = Value::Object(Default::default());
            }
        }
    }
    message
}

/// The text of the last assistant message, which is all a caller (or parent) sees.
fn final_text(history: &[Message]) -> String {
    history
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(Message::text)
        .unwrap_or_default()
}
