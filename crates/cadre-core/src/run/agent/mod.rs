//! The agent loop: send the history and tools, run the tools asked for, append, repeat.

pub(crate) mod request;
mod tools;

use crate::record::events::{millis, EventHandler};
use crate::record::journal::{run_here, Effect, EffectOutcome, Journal, Run, Work};
use crate::record::transcript::Transcript;
use crate::run::answer::{judge, AnswerSchema, Verdict};
use crate::run::budget::Budget;
use crate::run::continuation;
use crate::run::fork::ForkPoint;
use crate::run::hooks::AgentHooks;
use crate::run::permissions::AgentPermissions;
use crate::run::state::{final_text, Added, AgentState, Next};
use crate::run::team::Seat;
use crate::run::toolset::ToolSet;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::event::Event;
use crate::vocab::outcome::{AgentOutcome, StopKind};
use crate::vocab::step::Step;
use crate::vocab::team::Envelope;
use cadre_model::{ContentBlock, Message, Model, Role};
use cadre_tools::ToolContext;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// Who an agent is and how far it may go.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Its path in the tree of agents (`main`, `main/explore#2`).
    pub path: AgentPath,
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
    /// The schema its final answer must match, if any (see `run::answer`).
    pub answer: Option<AnswerSchema>,
    /// Where its first request marks the prefix it shares with the agent it was forked
    /// from, when it is a fork (see `run::fork`).
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
    /// The token budget shared with every other agent of the run, or its own below it when
    /// it has limits (see [`Budget`]).
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
    /// What content its spans carry besides their attributes (none by default).
    pub content: cadre_model::RecordContent,
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
                        match self.should_stop(state.turns_since_follow_up()) {
                            Some(stop) => break stop,
                            None => continuation::request(&self.config.path),
                        }
                    }
                    Next::End(stop) => break stop,
                    Next::Answer => match self.run_turn(&mut state).await {
                        Some(step) => step,
                        None => continue,
                    },
                    Next::Ask => match self.ask(&state, &mut compacted_for_length).await {
                        Ok(step) => step,
                        Err(stop) => break stop,
                    },
                };
                self.record(&mut state, step).await;
            };
            // A cancel its own limits caused (a subagent's tokens, its time) is that limit.
            let stop = match stop {
                StopKind::Cancelled => self.budget.tripped().unwrap_or(StopKind::Cancelled),
                stop => stop,
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

    /// Runs the pending turn's tools and folds their results into `state`; returns the
    /// step that delivers messages that came meanwhile, if any go with the results.
    async fn run_turn(&self, state: &mut AgentState) -> Option<Step> {
        // The model acted on what it was given: read. (A response that is refused, cut or
        // rejected is not acted on: what it was given stays unread, and goes back to its
        // senders if it ends so.)
        if let Some(seat) = &self.team {
            seat.read().await;
        }
        for step in self.answer(state).await {
            self.apply(state, step);
        }
        // Messages that came while it worked go with its tool results — unless it must
        // stop before another request, when no model would read them: they stay, and go
        // back to their senders when it ends.
        let seat = self.team.as_ref().filter(|_| {
            state.pending.is_none() && self.should_stop(state.turns_since_follow_up()).is_none()
        })?;
        let given = seat.arrived().await?;
        Some(self.delivered(given))
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
        // Its time limit covers working, not waiting for messages.
        self.budget.set_idle(true);
        let given = seat
            .idle(&answer, state.woken, state.turns, &self.ctx.cancel)
            .await;
        self.budget.set_idle(false);
        Some(self.delivered(given?))
    }

    /// The step that gives this agent `messages`.
    fn delivered(&self, messages: Vec<Envelope>) -> Step {
        Step::Delivered {
            agent: self.config.path.clone(),
            messages,
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
            Some(journal) => journal.once(self.config.path.as_str(), effect, work),
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
        } else if let Some(stop) = self.budget.stop() {
            Some(stop)
        } else if turns >= self.config.max_turns {
            Some(StopKind::MaxTurns)
        } else {
            None
        }
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
