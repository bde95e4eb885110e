//! A turn's tool calls: checked, run through the journal (together where they may), answered.

use super::Agent;
use crate::record::journal::{Done, Effect, EffectOutcome, Work};
use crate::run::context;
use crate::run::fork::ForkBase;
use crate::run::hooks::{AgentHooks, Answered};
use crate::run::spans;
use crate::run::state::AgentState;
use crate::vocab::event::Event;
use crate::vocab::hooks::{CallPermission, HookDecision};
use crate::vocab::step::Step;
use cadre_model::{ContentBlock, History, ToolUseBlock};
use cadre_tools::{Rerun, ToolOutput};
use futures::future::join_all;
use std::sync::Arc;
use tracing::{Instrument, Span};

impl Agent {
    /// Answers the pending turn's calls that have no result yet and returns their journaled
    /// results. A changing call journaled as started (by a run that was killed) is reported
    /// as interrupted instead of run again; every other call runs.
    pub(super) async fn answer(&self, state: &AgentState) -> Vec<Step> {
        let Some(turn) = &state.pending else {
            return Vec::new();
        };
        let mut steps = Vec::new();
        let mut to_run = Vec::new();
        for (call, sent) in state.pending_calls() {
            if turn.results.contains_key(&call.id) {
                continue;
            }
            // Answered without running: a changing call a crash cut short, or (never by the
            // loop's own steps) a call the history no longer holds, which would else be
            // waited for for ever.
            let unrun = match sent {
                // Journaled as started only when the run's own setup said it must never run
                // twice: that answer holds, whatever the resume's setup would say now.
                Some(_) if turn.started.contains(&call.id) => Some(interrupted(&call.name)),
                Some(sent) => {
                    to_run.push((sent, turn.hooked.get(&call.id)));
                    None
                }
                None => Some(format!(
                    "`{}` was not run: its call is missing from the conversation",
                    call.name
                )),
            };
            if let Some(why) = unrun {
                let step = Step::ToolResult {
                    agent: self.config.path.clone(),
                    result: ContentBlock::tool_result(&call.id, why, true),
                    spent: None,
                };
                self.journal(&step).await;
                steps.push(step);
            }
        }
        // A call that forks this agent is handed its conversation: made only then.
        let conversation = to_run
            .iter()
            .any(|(c, _)| self.tools.wants_conversation(&c.name, &c.input))
            .then(|| self.fork_base(&state.history));
        steps.extend(self.run_tools(to_run, conversation).await);
        steps
    }

    /// What a fork of this agent starts from: its type, system prompt, tools, and
    /// `history` as its requests send it.
    fn fork_base(&self, history: &History) -> Arc<ForkBase> {
        Arc::new(ForkBase {
            agent_type: self.config.agent_type.clone(),
            system: self.config.system.clone(),
            tools: self.tools.definitions(),
            messages: context::since_compaction(history),
        })
    }

    /// What a resumed run may do with a call to `name` of `input` cut short by a crash:
    /// the tool's own answer for that call. A read-only agent's calls are not repeated for
    /// that alone: its MCP tools and, with the network open, its `bash` reach outside the
    /// sandbox (see [`cadre_tools::Tool::rerun_call`]).
    fn rerun(&self, name: &str, input: &serde_json::Value) -> Rerun {
        match self.tools.get(name) {
            Some(tool) => tool.rerun_call(input, &self.ctx),
            // An unknown tool runs nothing: it only answers with an error.
            None => Rerun::Repeat,
        }
    }

    /// Runs one turn's tool calls and returns their journaled results in call order. Calls
    /// that may run concurrently (read-only tools, `Task`) run together; a writing call
    /// waits for the ones before it and runs alone.
    /// Each call comes with what `PreToolUse` hooks decided for it before a resume, if they
    /// did. A call's hook decisions come back as steps beside its result.
    async fn run_tools(
        &self,
        calls: Vec<(&ToolUseBlock, Option<&HookDecision>)>,
        conversation: Shared,
    ) -> Vec<Step> {
        let mut results = Vec::with_capacity(calls.len());
        let mut batch: Vec<(&ToolUseBlock, Option<&HookDecision>)> = Vec::new();
        let c = &conversation;
        for (call, kept) in calls {
            if !self.tools.runs_concurrently(&call.name) {
                let ran = join_all(batch.drain(..).map(|(b, k)| self.run_tool(b, k, c))).await;
                results.extend(ran.into_iter().flatten());
                // Boxed: a call's future is large (its hooks, its permission check), and
                // the waiting agent's own future would else hold room for one.
                let alone = Box::pin(self.run_tool(call, kept, c));
                results.extend(alone.await);
            } else {
                batch.push((call, kept));
            }
        }
        let ran = join_all(batch.into_iter().map(|(b, k)| self.run_tool(b, k, c))).await;
        results.extend(ran.into_iter().flatten());
        results
    }

    /// Runs one tool call and turns whatever happens into a journaled tool_result step,
    /// with the journaled steps of hook decisions about it before and after it. `kept` is
    /// what its `PreToolUse` hooks decided before a resume: they do not run again.
    async fn run_tool(
        &self,
        call: &ToolUseBlock,
        kept: Option<&HookDecision>,
        conversation: &Shared,
    ) -> Answered {
        // Its `execute_tool` span: current while it runs, so a `Task` call's subagent
        // starts under it; filled in through this handle, not as the current span, which
        // is its agent's when a subscriber leaves `execute_tool` out.
        let span = spans::execute_tool(&call.name, &call.id);
        spans::record_tool_input(&span, &self.content, &call.input);
        let here = self.run_tool_here(call, kept, conversation, &span);
        here.instrument(span.clone()).await
    }

    /// [`Self::run_tool`] inside the call's span.
    async fn run_tool_here(
        &self,
        call: &ToolUseBlock,
        kept: Option<&HookDecision>,
        conversation: &Shared,
        span: &Span,
    ) -> Answered {
        self.emit(Event::ToolCall {
            agent: self.config.path.clone(),
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
        // Input that was not JSON is refused without asking any hook.
        let Some(hooks) = self.hooks.as_ref().filter(|_| call.invalid_input.is_none()) else {
            let (out, _) = self
                .execute(call, &call.input, None, None, conversation, span)
                .await;
            return Answered {
                before: None,
                result: self.finish(call, out, span).await,
                after: None,
            };
        };
        // Boxed, in a statement of its own: every call waiting for its tool would else hold
        // room for hooks, which few runs have.
        let hooked = Box::pin(self.run_hooked_tool(hooks, call, kept, conversation, span));
        hooked.await
    }

    /// [`Self::run_tool`] for an agent with hooks: its `PreToolUse` hooks, before the
    /// permission rules as in Claude Code, then the call, then its `PostToolUse` hooks.
    async fn run_hooked_tool(
        &self,
        hooks: &AgentHooks,
        call: &ToolUseBlock,
        kept: Option<&HookDecision>,
        conversation: &Shared,
        span: &Span,
    ) -> Answered {
        let (pre, before) = self.pre_tool(hooks, call, kept).await;
        let input = pre.input.as_ref().unwrap_or(&call.input);
        let (mut out, ran) = self
            .execute(
                call,
                input,
                pre.refused.clone(),
                pre.permission,
                conversation,
                span,
            )
            .await;
        let after = if ran {
            self.post_tool(hooks, call, input, &mut out, pre.context)
                .await
        } else {
            None
        };
        let result = self.finish(call, out, span).await;
        if let Some(after) = &after {
            self.journal(after).await;
        }
        Answered {
            before: before.map(Box::new),
            result,
            after: after.map(Box::new),
        }
    }

    /// Checks a call with `input` against the permission rules (unless a hook `refused`
    /// it; a hook's `permission` goes with the check) and runs it through the journal.
    /// Returns its output and whether it ran.
    async fn execute(
        &self,
        call: &ToolUseBlock,
        input: &serde_json::Value,
        refused: Option<String>,
        permission: Option<CallPermission>,
        conversation: &Shared,
        span: &Span,
    ) -> (ToolOutput, bool) {
        let refused_by_hook = refused.is_some();
        let denied = match (refused, &self.permissions) {
            (Some(why), _) => Some(why),
            // Input that was not JSON is refused below without asking anyone.
            (None, Some(p)) if call.invalid_input.is_none() => {
                p.check_with(&call.name, input, &self.tools, &self.ctx, permission)
                    .await
            }
            _ => None,
        };
        spans::record_decision(span, refused_by_hook, denied.is_some());
        let rerun = self.rerun(&call.name, input);
        if rerun == Rerun::Never && denied.is_none() {
            self.journal(&Step::ToolStarted {
                agent: self.config.path.clone(),
                id: call.id.clone(),
                name: call.name.clone(),
            })
            .await;
        }
        let cancelled_before = self.ctx.cancel.is_cancelled();
        let ran = !cancelled_before && denied.is_none() && call.invalid_input.is_none();
        let out = if cancelled_before {
            ToolOutput::error("cancelled before it ran")
        } else if let Some(why) = denied {
            ToolOutput::error(why)
        } else if let Some(bad) = &call.invalid_input {
            ToolOutput::error(format!(
                "invalid input for `{}`: the arguments were not valid JSON: {}; the text was: {}",
                call.name, bad.error, bad.text
            ))
        } else {
            let tools = self.tools.clone();
            let mut ctx = self.ctx.clone();
            ctx.call_id.clone_from(&call.id);
            let fork = conversation.clone();
            let name = call.name.clone();
            // The input is cloned here, for the call alone: the history keeps the calls.
            let input = input.clone();
            let work: Work =
                Box::pin(
                    async move { Done::Tool(tools.call_forking(&name, input, &ctx, fork).await) },
                );
            let effect = Effect::Tool {
                id: &call.id,
                name: &call.name,
                rerun,
            };
            match self.effect(effect, work).await {
                EffectOutcome::Ran(Done::Tool(out)) => out,
                EffectOutcome::Ran(Done::Model(_)) => {
                    ToolOutput::error("the kept step is not this tool's result")
                }
                EffectOutcome::Interrupted => ToolOutput::error(interrupted(&call.name)),
                EffectOutcome::Stopped(stop) => {
                    ToolOutput::error(format!("not run: the agent stopped ({stop})"))
                }
            }
        };
        (out, ran)
    }

    /// Tells the events how a call ended and returns its journaled tool_result step.
    async fn finish(&self, call: &ToolUseBlock, out: ToolOutput, span: &Span) -> Step {
        spans::record_tool_end(span, &self.content, out.is_error, &out.content);
        self.emit(Event::ToolResult {
            agent: self.config.path.clone(),
            id: call.id.clone(),
            name: call.name.clone(),
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
        let mut block = ContentBlock::tool_result(&call.id, out.content, out.is_error);
        if let ContentBlock::ToolResult(result) = &mut block {
            result.content.extend(
                out.images
                    .into_iter()
                    .map(|i| ContentBlock::image(i.media_type, i.data)),
            );
        }
        let step = Step::ToolResult {
            agent: self.config.path.clone(),
            result: block,
            spent: self.tools.take_spent(&call.id).map(Box::new),
        };
        self.journal(&step).await;
        step
    }
}

/// What a turn's calls that fork the agent start from (made only for such a turn).
type Shared = Option<Arc<ForkBase>>;

/// What the model is told of a changing call that may or may not have taken effect.
fn interrupted(tool: &str) -> String {
    format!(
        "interrupted: cadre stopped while `{tool}` was running, so this call may or may not have taken effect. Check its effects before running it again."
    )
}
