//! The agent loop: send the history and tools, run the tools asked for, append, repeat.

use crate::record::events::{millis, Event, EventHandler};
use crate::record::journal::{Effect, Journal, ModelStep, Outcome, Step, Work};
use crate::record::transcript::Transcript;
use crate::run::budget::Budget;
use crate::run::context;
use crate::run::outcome::{AgentOutcome, StopKind};
use crate::run::permissions::AgentPermissions;
use crate::run::state::{final_text, PendingTurn, Rebuilt};
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
    /// Input tokens at which the conversation is compacted (by the server where it can,
    /// else summarised by cadre near the window); `None` never compacts.
    pub compact_at: Option<u64>,
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
    /// Where its steps are journaled before it acts on them, if anywhere.
    pub journal: Option<Arc<dyn Journal>>,
    /// Work it started that reports later (background subagents), if any: when it would
    /// end its turn, the loop waits for that work and hands it the results instead.
    pub inbox: Option<Arc<dyn Inbox>>,
    /// What its calls are checked against before they run; `None` checks nothing.
    pub permissions: Option<Arc<AgentPermissions>>,
}

/// Results that reach an agent after the tool call that started them returned.
#[async_trait::async_trait]
pub trait Inbox: Send + Sync {
    /// Waits for every piece of work not yet reported and returns the blocks of one user
    /// message that report it; `None` when nothing is outstanding.
    async fn undelivered(&self) -> Option<Vec<ContentBlock>>;
}

/// Where a loop stands: the conversation and what it has used so far.
struct Progress {
    history: Vec<Message>,
    turns: u32,
    tool_calls: u32,
    usage: Usage,
}

impl Agent {
    /// Runs the loop from `history` (normally one user message) until the agent stops.
    pub async fn run(&self, history: Vec<Message>) -> AgentOutcome {
        history.iter().for_each(|m| self.log(m));
        self.drive(Progress {
            history,
            turns: 0,
            tool_calls: 0,
            usage: Usage::default(),
        })
        .await
    }

    /// Carries on an agent rebuilt from its journal: a finished one returns its outcome at
    /// once; an unanswered tool turn is completed first — calls with a journaled result
    /// keep it, read-only ones run again, and a changing call that had started is reported
    /// to the model as interrupted rather than repeated.
    pub async fn resume(&self, rebuilt: Rebuilt) -> AgentOutcome {
        let Rebuilt {
            mut history,
            turns,
            tool_calls,
            mut usage,
            pending,
            finished,
            last_input,
            ..
        } = rebuilt;
        history.iter().for_each(|m| self.log(m));
        if let Some((stop, text)) = finished {
            return AgentOutcome {
                text,
                stop,
                turns,
                tool_calls,
                usage,
                history,
            };
        }
        if let Some(turn) = pending {
            let results = self.finish_turn(turn).await;
            history.push(Message::new(Role::User, results));
            self.log(&history[history.len() - 1]);
        }
        // A conversation already past the threshold is compacted before it goes on, so the
        // first request of a continued or resumed run does not carry the whole of it again.
        if self
            .config
            .compact_at
            .is_some_and(|at| last_input >= at.min(self.summarise_at()))
        {
            match self.compact(&history).await {
                Ok((compacted, used)) => {
                    history = compacted;
                    usage.add(&used);
                }
                Err(e) => {
                    tracing::warn!(agent = %self.config.path, "could not compact before going on: {e}")
                }
            }
        }
        self.drive(Progress {
            history,
            turns,
            tool_calls,
            usage,
        })
        .await
    }

    /// The loop itself.
    async fn drive(&self, progress: Progress) -> AgentOutcome {
        let started = Instant::now();
        let Progress {
            mut history,
            mut turns,
            mut tool_calls,
            mut usage,
        } = progress;
        // Set once a request refused as too long was answered by compacting, so a second
        // refusal stops the loop instead of compacting forever.
        let mut compacted_for_length = false;
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
                Err(Failed::TooLong(why)) => {
                    match self.mend_length(&history, &why, compacted_for_length).await {
                        Some((compacted, used)) => {
                            history = compacted;
                            usage.add(&used);
                            compacted_for_length = true;
                            // The refused request is sent again: it was no turn.
                            turns -= 1;
                            continue;
                        }
                        None => break StopKind::ContextWindowExceeded,
                    }
                }
                Err(Failed::Stop(stop)) => break stop,
            };
            compacted_for_length = false;
            // Journaled before anything acts on it: a resumed run never asks for it again.
            self.journal(Step::Response {
                agent: self.config.path.clone(),
                response: response.clone(),
            })
            .await;
            usage.add(&response.usage);
            self.budget.charge(&response.usage);
            self.emit(Event::Usage {
                agent: self.config.path.clone(),
                usage: response.usage,
            });
            if response
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::Compaction(_)))
            {
                self.emit(Event::Compacted {
                    agent: self.config.path.clone(),
                    by: "server".into(),
                    usage: response.usage.compaction,
                });
            }
            let message = sanitized(&response);
            self.log(&message);
            match history.last_mut() {
                // Continuing a paused turn: the new blocks belong to the same assistant turn.
                Some(last) if last.role == Role::Assistant => last.content.extend(message.content),
                _ => history.push(message),
            }
            let reason = response.stop_reason.clone().unwrap_or(StopReason::EndTurn);
            let calls: Vec<ToolUseBlock> = response.tool_uses().cloned().collect();
            // A tool_use stop without calls has nothing to answer: it ends the turn.
            let stop = match terminal(&reason) {
                None if reason == StopReason::ToolUse && calls.is_empty() => Some(StopKind::Done),
                other => other,
            };
            if let Some(stop) = stop {
                if stop == StopKind::Done {
                    if let Some(results) = self.collect_inbox().await {
                        history.push(results);
                        self.log(&history[history.len() - 1]);
                        continue;
                    }
                    if self.ctx.cancel.is_cancelled() {
                        break StopKind::Cancelled;
                    }
                }
                break stop;
            }
            if reason == StopReason::ToolUse {
                tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
                history.push(Message::new(Role::User, self.run_tools(calls).await));
                self.log(&history[history.len() - 1]);
                if let Some(used) = self.summarise_if_near(&mut history, &response.usage).await {
                    usage.add(&used);
                }
                self.keep_within_context(&mut history, &response.usage);
            }
            // The server paused a long turn (pause_turn): sending the history back resumes it.
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

    /// Waits for the work this agent left running and returns the user message that reports
    /// it, journaled; `None` when there is none (or the agent was cancelled meanwhile).
    async fn collect_inbox(&self) -> Option<Message> {
        let inbox = self.inbox.as_ref()?;
        let blocks = tokio::select! {
            biased;
            () = self.ctx.cancel.cancelled() => None,
            blocks = inbox.undelivered() => blocks,
        }?;
        let message = Message::new(Role::User, blocks);
        self.journal(Step::UserMessage {
            agent: self.config.path.clone(),
            message: message.clone(),
        })
        .await;
        Some(message)
    }

    /// Answers every call of a turn cut short by a crash, in call order (see [`Agent::resume`]).
    async fn finish_turn(&self, turn: PendingTurn) -> Vec<ContentBlock> {
        let PendingTurn {
            calls,
            mut results,
            started,
        } = turn;
        let mut rerun = Vec::new();
        for call in &calls {
            if results.contains_key(&call.id) {
                continue;
            }
            if started.contains(&call.id) && !self.safe_to_repeat(&call.name) {
                let block = ContentBlock::tool_result(&call.id, interrupted(&call.name), true);
                self.journal(Step::ToolResult {
                    agent: self.config.path.clone(),
                    result: block.clone(),
                })
                .await;
                results.insert(call.id.clone(), block);
            } else {
                rerun.push(call.clone());
            }
        }
        let ids: Vec<String> = rerun.iter().map(|c| c.id.clone()).collect();
        for (id, block) in ids.into_iter().zip(self.run_tools(rerun).await) {
            results.insert(id, block);
        }
        calls.iter().filter_map(|c| results.remove(&c.id)).collect()
    }

    /// Whether running a call to `name` twice does no harm: read-only tools, any tool of a
    /// read-only (sandboxed) agent, and `Task`, whose subagent resumes from its own steps.
    fn safe_to_repeat(&self, name: &str) -> bool {
        self.ctx.read_only
            || self.tools.get(name).is_none_or(|t| {
                t.is_read_only() || t.name() == crate::definitions::registry::TASK_TOOL
            })
    }

    /// Appends a step to the journal, if there is one; a failure to write it is logged and
    /// the run goes on (it only loses the ability to resume from here).
    pub(crate) async fn journal(&self, step: Step) {
        if let Some(journal) = &self.journal {
            if let Err(e) = journal.append(&step).await {
                tracing::warn!(agent = %self.config.path, "could not journal a step: {e}");
            }
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

    /// Sends the history to the model, asking the server to compact it past the threshold.
    async fn send(&self, history: &[Message]) -> Result<Response, Failed> {
        let mut request = self.request(history);
        if let Some(at) = self.server_compact_at() {
            request.compact_at(at);
        }
        self.call(request).await
    }

    /// A request of this agent carrying what is sent of `history`.
    pub(crate) fn request(&self, history: &[Message]) -> Request {
        let mut request = Request::new(
            &self.config.model,
            self.config.max_tokens,
            context::since_compaction(history),
        );
        request.system = vec![SystemBlock::text(&self.config.system)];
        request.tools = self.tools.definitions();
        request.apply_prompt_caching();
        request.origin = Some(RequestOrigin {
            path: self.config.path.clone(),
            agent_type: self.config.agent_type.clone(),
        });
        request
    }

    /// The journal, when it runs the loop's effects itself (a durable engine).
    fn durable(&self) -> Option<&Arc<dyn Journal>> {
        self.journal.as_ref().filter(|j| j.runs_effects())
    }

    /// Sends one request, streaming text out as events; cancel wins.
    pub(crate) async fn call(&self, request: Request) -> Result<Response, Failed> {
        if let Some(journal) = self.durable() {
            return self.call_durably(journal, request).await;
        }
        let path = &self.config.path;
        let on_event = |e: ModelEvent| model_event(&self.events, path, e);
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
            () = self.ctx.cancel.cancelled() => Err(Failed::Stop(StopKind::Cancelled)),
            r = call => r.map_err(|e: ModelError| {
                if e.is_context_too_long() {
                    Failed::TooLong(e.to_string())
                } else {
                    Failed::Stop(StopKind::ModelError(e.to_string()))
                }
            }),
        }
    }

    /// Sends one request as a durable step: the engine runs it once (under the run's
    /// limits) and a replay gets the kept response, or the kept error, back.
    async fn call_durably(
        &self,
        journal: &Arc<dyn Journal>,
        request: Request,
    ) -> Result<Response, Failed> {
        let model = self.model.clone();
        let events = self.events.clone();
        let path = self.config.path.clone();
        let work: Work = Box::pin(async move {
            let on_event = |e: ModelEvent| model_event(&events, &path, e);
            let step = match model.send(request, &on_event).await {
                Ok(response) => ModelStep::Response(response),
                Err(e) if e.is_context_too_long() => ModelStep::TooLong(e.to_string()),
                Err(e) => ModelStep::Error(e.to_string()),
            };
            serde_json::to_value(step).unwrap_or_else(|e| Value::String(e.to_string()))
        });
        match journal.once(&self.config.path, Effect::Model, work).await {
            Outcome::Ran(value) => match serde_json::from_value::<ModelStep>(value) {
                Ok(ModelStep::Response(response)) => Ok(response),
                Ok(ModelStep::TooLong(why)) => Err(Failed::TooLong(why)),
                Ok(ModelStep::Error(why)) => Err(Failed::Stop(StopKind::ModelError(why))),
                Err(e) => Err(Failed::Stop(StopKind::ModelError(format!(
                    "the kept response cannot be read: {e}"
                )))),
            },
            Outcome::Stopped(stop) => Err(Failed::Stop(stop)),
            Outcome::Interrupted => Err(Failed::Stop(StopKind::ModelError(
                "the request was interrupted".into(),
            ))),
        }
    }

    /// Runs one tool call as a durable step: the engine runs it once, a replay gets the kept
    /// output back, and a changing call that had started in an attempt that died is
    /// reported as interrupted instead of run again.
    async fn tool_durably(
        &self,
        journal: &Arc<dyn Journal>,
        id: &str,
        name: &str,
        input: Value,
        changing: bool,
    ) -> cadre_tools::ToolOutput {
        let tools = self.tools.clone();
        let mut ctx = self.ctx.clone();
        id.clone_into(&mut ctx.call_id);
        let tool = name.to_owned();
        let work: Work = Box::pin(async move {
            let out = tools.call(&tool, input, &ctx).await;
            serde_json::to_value(out).unwrap_or_else(|e| Value::String(e.to_string()))
        });
        let effect = Effect::Tool { id, name, changing };
        match journal.once(&self.config.path, effect, work).await {
            Outcome::Ran(value) => serde_json::from_value(value).unwrap_or_else(|e| {
                cadre_tools::ToolOutput::error(format!("the kept result cannot be read: {e}"))
            }),
            Outcome::Interrupted => cadre_tools::ToolOutput::error(interrupted(name)),
            Outcome::Stopped(stop) => {
                cadre_tools::ToolOutput::error(format!("not run: the agent stopped ({stop})"))
            }
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
        let denied = match &self.permissions {
            // Input that was not JSON is refused below without asking anyone.
            Some(p) if call.invalid_input.is_none() => {
                p.check(&call.name, &call.input, &self.tools, &self.ctx)
                    .await
            }
            _ => None,
        };
        let changing = !self.safe_to_repeat(&call.name) && denied.is_none();
        if changing {
            self.journal(Step::ToolStarted {
                agent: agent.clone(),
                id: call.id.clone(),
                name: call.name.clone(),
            })
            .await;
        }
        let out = if self.ctx.cancel.is_cancelled() {
            cadre_tools::ToolOutput::error("cancelled before it ran")
        } else if let Some(why) = denied {
            cadre_tools::ToolOutput::error(why)
        } else if let Some(bad) = &call.invalid_input {
            cadre_tools::ToolOutput::error(format!(
                "invalid input for `{}`: the arguments were not valid JSON: {}; the text was: {}",
                call.name, bad.error, bad.text
            ))
        } else if let Some(journal) = self
            .durable()
            .filter(|_| call.name != crate::definitions::registry::TASK_TOOL)
        {
            // A `Task` call is kept by the engine as a call to another agent, not a step.
            self.tool_durably(journal, &call.id, &call.name, call.input, changing)
                .await
        } else {
            let mut ctx = self.ctx.clone();
            ctx.call_id.clone_from(&call.id);
            self.tools.call(&call.name, call.input, &ctx).await
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
        self.journal(Step::ToolResult {
            agent: self.config.path.clone(),
            result: block.clone(),
        })
        .await;
        block
    }

    fn log(&self, message: &Message) {
        if let Some(t) = &self.transcript {
            t.message(message);
        }
    }

    pub(crate) fn emit(&self, event: Event) {
        (self.events)(event);
    }
}

/// What the model is told of a changing call that may or may not have taken effect.
fn interrupted(tool: &str) -> String {
    format!(
        "interrupted: cadre stopped while `{tool}` was running, so this call may or may not have taken effect. Check its effects before running it again."
    )
}

/// Passes a model client's event on as the agent's event.
fn model_event(events: &EventHandler, path: &str, e: ModelEvent) {
    let event = match e {
        ModelEvent::TextDelta(delta) => Event::Text {
            agent: path.to_owned(),
            delta,
        },
        ModelEvent::Compacting => Event::Compacting {
            agent: path.to_owned(),
        },
        ModelEvent::Retrying {
            attempt,
            wait,
            reason,
        } => Event::Retrying {
            agent: path.to_owned(),
            attempt,
            wait_ms: millis(wait),
            reason,
        },
        _ => return,
    };
    events(event);
}

/// Why a request brought no response.
pub(crate) enum Failed {
    /// The loop stops with this.
    Stop(StopKind),
    /// The server refused the request as too long for the context window.
    TooLong(String),
}

/// The response as an assistant message, with any unparsable or non-object tool input
/// replaced by `{}` (and the note of it dropped) so the history stays valid for the API.
pub(crate) fn sanitized(response: &Response) -> Message {
    let mut message = response.to_message();
    for block in &mut message.content {
        if let ContentBlock::ToolUse(t) = block {
            if t.invalid_input.take().is_some() || !t.input.is_object() {
                t.input = Value::Object(Default::default());
            }
        }
    }
    message
}

/// The outcome a stop reason ends the loop with, or `None` when the loop goes on
/// (`tool_use`, `pause_turn`, `compaction`).
pub(crate) fn terminal(reason: &StopReason) -> Option<StopKind> {
    match reason {
        StopReason::ToolUse | StopReason::PauseTurn | StopReason::Compaction => None,
        StopReason::EndTurn | StopReason::StopSequence => Some(StopKind::Done),
        StopReason::MaxTokens => Some(StopKind::MaxTokens),
        StopReason::Refusal => Some(StopKind::Refusal),
        StopReason::ModelContextWindowExceeded => Some(StopKind::ContextWindowExceeded),
        StopReason::Other(other) => Some(StopKind::Other(other.clone())),
    }
}
