//! The agent loop: send the history and tools, run the tools asked for, append, repeat.

use crate::record::events::{millis, EventHandler};
use crate::record::journal::{
    run_here, Done, Effect, EffectOutcome, Journal, ModelStep, Run, Work,
};
use crate::record::transcript::Transcript;
use crate::run::answer::{judge, AnswerSchema, Verdict};
use crate::run::budget::Budget;
use crate::run::context;
use crate::run::continuation;
use crate::run::fork::{ForkBase, ForkPoint};
use crate::run::hooks::{AgentHooks, Answered};
use crate::run::permissions::AgentPermissions;
use crate::run::state::{final_text, Added, AgentState, Next};
use crate::run::team::Seat;
use crate::run::toolset::ToolSet;
use crate::vocab::event::Event;
use crate::vocab::hooks::{CallPermission, HookDecision};
use crate::vocab::outcome::{AgentOutcome, StopKind};
use crate::vocab::step::Step;
use crate::vocab::team::Envelope;
use cadre_model::{
    ContentBlock, History, Message, Model, ModelEvent, Request, RequestOrigin, Response, Role,
    SystemBlock, ToolUseBlock,
};
use cadre_tools::{Rerun, ToolContext, ToolOutput};
use futures::future::join_all;
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
    /// Its system prompt (shared with its requests, and with agents of the same prompt).
    pub system: Arc<str>,
    /// Output token cap per response.
    pub max_tokens: u32,
    /// Most model requests it may make.
    pub max_turns: u32,
    /// The model's context window in tokens; old tool results are cleared near it.
    pub context_tokens: u64,
    /// Input tokens at which the conversation is compacted (by the server where it can,
    /// else summarised by cadre near the window); `None` never compacts.
    pub compact_at: Option<u64>,
    /// The effort its requests ask of the model (`output_config.effort`); `None` leaves the
    /// model's default.
    pub effort: Option<cadre_model::Effort>,
    /// The schema its final answer must match, if any (see [`crate::run::answer`]).
    pub answer: Option<AnswerSchema>,
    /// Where its first request marks the prefix it shares with the agent it was forked
    /// from, when it is a fork (see [`crate::run::fork`]).
    pub fork: Option<ForkPoint>,
    /// How many times a final answer cut at `max_tokens` is asked to go on (0: never).
    pub continuations: u32,
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
    /// Its place in the run's team, when it is a member: messages reach it between turns,
    /// and when it has answered it waits for more instead of ending.
    pub team: Option<Seat>,
    /// The hooks it runs (the run's and its type's); `None` when it has none, so a run
    /// without hooks does no hook work at all.
    pub hooks: Option<Arc<AgentHooks>>,
}

/// Results that reach an agent after the tool call that started them returned.
#[async_trait::async_trait]
pub trait Inbox: Send + Sync {
    /// Waits for every piece of work not yet reported and returns the blocks of one user
    /// message that report it; `None` when nothing is outstanding.
    async fn undelivered(&self) -> Option<Vec<ContentBlock>>;
}

impl Agent {
    /// Runs the loop from `history` (normally one user message) until the agent stops.
    pub async fn run(&self, history: Vec<Message>) -> AgentOutcome {
        history.iter().for_each(|m| self.log(m));
        let state = AgentState::new(&self.config.agent_type, "", history);
        self.drive(state).await
    }

    /// Carries on an agent rebuilt from its journal. It goes through the same loop as a
    /// fresh one: a finished agent returns its outcome at once, and an unanswered tool turn
    /// is answered first — calls with a journaled result keep it, read-only ones run again,
    /// and a changing call that had started is reported to the model as interrupted rather
    /// than repeated.
    pub async fn resume(&self, mut state: AgentState) -> AgentOutcome {
        // A conversation already past the threshold is compacted before it goes on, so the
        // first request of a continued or resumed run does not carry the whole of it again.
        let past = |at: u64| state.last_input >= at.min(self.summarise_at());
        if state.finished.is_none()
            && state.pending.is_none()
            && self.config.compact_at.is_some_and(past)
        {
            match self.compact(&state.history).await {
                Ok(compacted) => {
                    let step = self.compacted(compacted);
                    self.record(&mut state, step).await;
                }
                Err(e) => {
                    tracing::warn!(agent = %self.config.path, "could not compact before going on: {e}")
                }
            }
        }
        self.drive(state).await
    }

    /// The loop itself: ask what the state says comes next, do it, journal the step and
    /// fold it into the state.
    ///
    /// An async block rather than an `async fn`, as [`record`](Self::record) is: an `async
    /// fn` moves its argument into a local of its own, and every waiting agent's future would
    /// hold its state twice.
    #[allow(clippy::manual_async_fn)] // an `async fn` holds its arguments twice
    fn drive(
        &self,
        mut state: AgentState,
    ) -> impl std::future::Future<Output = AgentOutcome> + Send + '_ {
        async move {
            let started = Instant::now();
            // Set once a request refused as too long was answered by compacting, so a second
            // refusal stops the loop instead of compacting forever.
            let mut compacted_for_length = false;
            // A typed answer as accepted (its JSON text), which the outcome hands on.
            let mut accepted = None;
            let stop = loop {
                // Each branch decides the next step, or how the agent stops; the step is
                // recorded in one place, so the future holds room for one step, not one per
                // branch.
                let step = match state.next() {
                    // Work this agent left running reports before it ends.
                    Next::End(StopKind::Done) => {
                        match self.after_answer(&state, &mut accepted).await {
                            Ok(step) => step,
                            Err(stop) => break stop,
                        }
                    }
                    // A text answer cut at the output token limit is asked to go on while it
                    // may; one that cannot, for the agent must stop, ends for that reason.
                    Next::End(StopKind::MaxTokens)
                        if continuation::may_go_on(&state.history, self.config.continuations) =>
                    {
                        match self.should_stop(state.turns) {
                            Some(stop) => break stop,
                            None => continuation::request(&self.config.path),
                        }
                    }
                    Next::End(stop) => break stop,
                    Next::Answer => {
                        // The model acted on what it was given: read. (A response that
                        // is refused, cut or rejected is not acted on: what it was given
                        // stays unread, and goes back to its senders if it ends so.)
                        if let Some(seat) = &self.team {
                            seat.read().await;
                        }
                        for step in self.answer(&state).await {
                            self.apply(&mut state, step);
                        }
                        // Messages that came while it worked go with its tool results —
                        // unless it must stop before another request, when no model would
                        // read them: they stay, and go back to their senders when it ends.
                        let seat = self.team.as_ref().filter(|_| {
                            state.pending.is_none() && self.should_stop(state.turns).is_none()
                        });
                        let arrived = match seat {
                            Some(seat) => seat.arrived().await,
                            None => None,
                        };
                        match arrived {
                            Some(given) => self.delivered(given),
                            None => continue,
                        }
                    }
                    Next::Ask => match self.ask(&state, &mut compacted_for_length).await {
                        Ok(step) => step,
                        Err(stop) => break stop,
                    },
                };
                self.record(&mut state, step).await;
            };
            let AgentState {
                history,
                turns,
                tool_calls,
                usage,
                ..
            } = state;
            self.emit(Event::Finished {
                agent: self.config.path.clone(),
                outcome: stop.outcome(),
                stop: stop.clone(),
                turns,
                usage,
                elapsed_ms: millis(started.elapsed()),
            });
            AgentOutcome {
                text: accepted.unwrap_or_else(|| final_text(&history)),
                stop,
                turns,
                tool_calls,
                usage,
                history: history.into_vec(),
            }
        }
    }

    /// What comes after the agent's answer: the results of work it left running, its typed
    /// answer asked for again, a stop hook keeping it going, or a team member's next
    /// messages; else how it ends.
    async fn after_answer(
        &self,
        state: &AgentState,
        accepted: &mut Option<String>,
    ) -> Result<Step, StopKind> {
        if let Some(step) = self.collect_inbox().await {
            return Ok(step);
        }
        if self.ctx.cancel.is_cancelled() {
            return Err(StopKind::Cancelled);
        }
        // An answer accepted before does not stand for this one.
        *accepted = None;
        // A typed answer is checked first: an invalid one is asked for again.
        let typed = match &self.config.answer {
            Some(schema) => match judge(schema, state, &self.config.path) {
                Verdict::Accept(text) => Some(text),
                Verdict::Retry(step) => return Ok(step),
                Verdict::Fail(stop) => return Err(stop),
            },
            None => None,
        };
        // Its stop hooks may keep it going (or stop it for good). Boxed, as every hook run
        // below: few agents run hooks, and every waiting agent's future would else hold room
        // for one. The box is made in a statement of its own: a future made in the awaiting
        // one keeps its room in this one after all.
        let stop_hooks = Box::pin(self.stop_hooks(state));
        if let Some(step) = stop_hooks.await {
            // Kept going (or stopped) by a hook: the answer is not the last word.
            return Ok(step);
        }
        *accepted = typed;
        let team = Box::pin(self.wait_for_team(state, accepted.as_deref()));
        match team.await {
            Some(step) => {
                // Woken for another turn: that turn gives the answer.
                *accepted = None;
                Ok(step)
            }
            None if self.ctx.cancel.is_cancelled() => Err(StopKind::Cancelled),
            None => Err(StopKind::Done),
        }
    }

    /// One request: unless the agent must stop (and why), make room in the context if the
    /// last request came near its limit, or send the history and take the response — or,
    /// refused as too long, compact once and let the loop ask again.
    async fn ask(
        &self,
        state: &AgentState,
        compacted_for_length: &mut bool,
    ) -> Result<Step, StopKind> {
        if let Some(stop) = self.should_stop(state.turns) {
            return Err(stop);
        }
        if let Some(step) = self.make_room(state).await {
            return Ok(step);
        }
        self.emit(Event::Turn {
            agent: self.config.path.clone(),
            turn: state.turns + 1,
        });
        match self.send(&state.history).await {
            Ok(response) => {
                *compacted_for_length = false;
                self.took(&response);
                // Journaled (by the loop) before anything acts on it: a resumed run never
                // asks again.
                Ok(Step::Response {
                    agent: self.config.path.clone(),
                    response,
                })
            }
            Err(Failed::TooLong(why)) => {
                let Some(compacted) = self
                    .mend_length(&state.history, &why, *compacted_for_length)
                    .await
                else {
                    return Err(StopKind::ContextWindowExceeded);
                };
                *compacted_for_length = true;
                Ok(self.compacted(compacted))
            }
            Err(Failed::Stop(stop)) => Err(stop),
        }
    }

    /// Journals `step`, then folds it into `state`.
    ///
    /// An async block rather than an `async fn`, which would hold the step twice (its
    /// argument and a local of its own) in every future that records one.
    #[allow(clippy::manual_async_fn)] // an `async fn` holds its arguments twice
    fn record<'a>(
        &'a self,
        state: &'a mut AgentState,
        step: Step,
    ) -> impl std::future::Future<Output = ()> + Send + 'a {
        async move {
            self.journal(&step).await;
            self.apply(state, step);
        }
    }

    /// Folds a step that is already journaled into `state`, writing what it added to the
    /// transcript.
    fn apply(&self, state: &mut AgentState, step: Step) {
        let added = state.apply(step);
        let Some(last) = state.history.last() else {
            return;
        };
        match added {
            Added::Message => self.log(last),
            Added::Blocks(n) => {
                let new = last.content[last.content.len().saturating_sub(n)..].to_vec();
                self.log(&Message::new(last.role, new));
            }
            Added::Nothing | Added::Rewritten => {}
        }
    }

    /// Charges a response's tokens to the run and tells the events.
    fn took(&self, response: &Response) {
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
    }

    /// What comes first after the agent's answer: the results of work it left running;
    /// `None` when nothing is outstanding (or it was cancelled meanwhile).
    async fn collect_inbox(&self) -> Option<Step> {
        let inbox = self.inbox.as_ref()?;
        let blocks = tokio::select! {
            biased;
            () = self.ctx.cancel.cancelled() => return None,
            blocks = inbox.undelivered() => blocks,
        };
        blocks.map(|blocks| Step::UserMessage {
            agent: self.config.path.clone(),
            message: Message::new(Role::User, blocks),
        })
    }

    /// What comes last after the agent's answer, for a team member: the next messages for
    /// it, waited for; `None` when nothing comes (or it was cancelled meanwhile).
    async fn wait_for_team(&self, state: &AgentState, accepted: Option<&str>) -> Option<Step> {
        let seat = self.team.as_ref()?;
        let answer = accepted.map_or_else(|| final_text(&state.history), str::to_owned);
        let given = seat
            .idle(&answer, state.woken, state.turns, &self.ctx.cancel)
            .await?;
        Some(self.delivered(given))
    }

    /// The step that gives this agent `messages`.
    fn delivered(&self, messages: Vec<Envelope>) -> Step {
        Step::Delivered {
            agent: self.config.path.clone(),
            messages,
        }
    }

    /// Answers the pending turn's calls that have no result yet and returns their journaled
    /// results. A changing call journaled as started (by a run that was killed) is reported
    /// as interrupted instead of run again; every other call runs.
    async fn answer(&self, state: &AgentState) -> Vec<Step> {
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

    /// Appends a step to the journal, if there is one. A run's journal that cannot be
    /// written stops the run (see [`crate::record::failure`]): the agent is cancelled and
    /// stops at its next step.
    pub(crate) async fn journal(&self, step: &Step) {
        if let Some(journal) = &self.journal {
            if let Err(e) = journal.append(step).await {
                crate::record::failure::log_unjournaled(Some(&self.config.path), &e);
            }
        }
    }

    /// Runs an effect through the journal, which decides how: here and now, or as a
    /// durable step.
    async fn effect(&self, effect: Effect<'_>, work: Work) -> EffectOutcome {
        let run = match &self.journal {
            Some(journal) => journal.once(&self.config.path, effect, work),
            None => Run::Here(work),
        };
        match run {
            Run::Here(work) => run_here(effect, work, &self.ctx.cancel).await,
            Run::Durably(step) => step.await,
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
    async fn send(&self, history: &History) -> Result<Response, Failed> {
        // Boxed from the start: the futures of every agent waiting for its response hold a
        // pointer here and in `call`, not two copies of the request.
        let mut request = Box::new(self.request(history));
        if let Some(at) = self.server_compact_at() {
            request.compact_at(at);
        }
        self.call(request).await
    }

    /// A request of this agent carrying what is sent of `history` (shared, not copied).
    pub(crate) fn request(&self, history: &History) -> Request {
        let mut request = Request::new(
            &self.config.model,
            self.config.max_tokens,
            context::since_compaction(history),
        );
        request.system = vec![SystemBlock::shared(self.config.system.clone())];
        request.tools = self.tools.definitions();
        request.apply_prompt_caching();
        if let Some(fork) = &self.config.fork {
            fork.pin(&mut request, history.len());
        }
        if self.config.effort.is_some() || self.config.answer.is_some() {
            request.output_config = Some(cadre_model::OutputConfig {
                effort: self.config.effort,
                format: self.config.answer.as_ref().map(|a| a.format().clone()),
            });
        }
        request.origin = Some(RequestOrigin {
            path: self.config.path.clone(),
            agent_type: self.config.agent_type.clone(),
        });
        request
    }

    /// Sends one request, streaming text out as events, under the run's limit on requests
    /// in flight; the journal runs it (a cancel wins over a request run here).
    pub(crate) async fn call(&self, request: Box<Request>) -> Result<Response, Failed> {
        let model = self.model.clone();
        let events = self.events.clone();
        let path = self.config.path.clone();
        let limiter = self.limiter.clone();
        // Boxed (by the caller), so the work waiting for its slot holds a pointer, not the
        // whole request: with thousands of agents waiting at once, that is most they hold.
        let work: Work = Box::pin(async move {
            // Waiting for a slot is part of the request: cancel interrupts it too.
            let _permit = match &limiter {
                Some(limiter) => limiter.acquire().await.ok(),
                None => None,
            };
            let on_event = |e: ModelEvent| model_event(&events, &path, e);
            Done::Model(match model.send(*request, &on_event).await {
                Ok(response) => ModelStep::Response(response),
                Err(e) if e.is_context_too_long() => ModelStep::TooLong(e.to_string()),
                Err(e) => ModelStep::Error(e.to_string()),
            })
        });
        match self.effect(Effect::Model, work).await {
            EffectOutcome::Ran(Done::Model(ModelStep::Response(response))) => Ok(response),
            EffectOutcome::Ran(Done::Model(ModelStep::TooLong(why))) => Err(Failed::TooLong(why)),
            EffectOutcome::Ran(Done::Model(ModelStep::Error(why))) => {
                Err(Failed::Stop(StopKind::ModelError(why)))
            }
            EffectOutcome::Ran(Done::Tool(_)) => Err(Failed::Stop(StopKind::ModelError(
                "the kept step is not a model response".into(),
            ))),
            EffectOutcome::Stopped(stop) => Err(Failed::Stop(stop)),
            EffectOutcome::Interrupted => Err(Failed::Stop(StopKind::ModelError(
                "the request was interrupted".into(),
            ))),
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
        self.emit(Event::ToolCall {
            agent: self.config.path.clone(),
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
        // Input that was not JSON is refused without asking any hook.
        let Some(hooks) = self.hooks.as_ref().filter(|_| call.invalid_input.is_none()) else {
            let (out, _) = self
                .execute(call, &call.input, None, None, conversation)
                .await;
            return Answered {
                before: None,
                result: self.finish(call, out).await,
                after: None,
            };
        };
        // Boxed, in a statement of its own: every call waiting for its tool would else hold
        // room for hooks, which few runs have.
        let hooked = Box::pin(self.run_hooked_tool(hooks, call, kept, conversation));
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
            )
            .await;
        let after = if ran {
            self.post_tool(hooks, call, input, &mut out, pre.context)
                .await
        } else {
            None
        };
        let result = self.finish(call, out).await;
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
    ) -> (ToolOutput, bool) {
        let denied = match (refused, &self.permissions) {
            (Some(why), _) => Some(why),
            // Input that was not JSON is refused below without asking anyone.
            (None, Some(p)) if call.invalid_input.is_none() => {
                p.check_with(&call.name, input, &self.tools, &self.ctx, permission)
                    .await
            }
            _ => None,
        };
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
    async fn finish(&self, call: &ToolUseBlock, out: ToolOutput) -> Step {
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
        };
        self.journal(&step).await;
        step
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

/// What a turn's calls that fork the agent start from (made only for such a turn).
type Shared = Option<Arc<ForkBase>>;

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
