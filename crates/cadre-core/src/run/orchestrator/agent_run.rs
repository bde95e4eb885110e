//! One agent's run, from its start to its record: it goes on the roster, starts fresh (its
//! start hooks may add to its prompt or refuse it) or from its journal, and when it ends its
//! end hooks run, its end is journaled and its record is kept.

use super::handle::{AgentHandle, Start};
use super::roster::RosterEntry;
use super::Orchestrator;
use crate::definitions::spec::AgentSpec;
use crate::record::events::millis;
use crate::record::usage::AgentRecord;
use crate::run::agent::Agent;
use crate::run::budget::Budget;
use crate::run::fork::first_history;
use crate::run::hooks::AgentHooks;
use crate::run::spans::{self, AgentSpan};
use crate::run::state::AgentState;
use crate::vocab::event::Event;
use crate::vocab::hooks::HookDecision;
use crate::vocab::hooks::HookEvent;
use crate::vocab::outcome::{AgentOutcome, StopKind};
use crate::vocab::step::Step;
use cadre_model::{ContentBlock, Message, Usage};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span};

/// The time an agent starting at `start` has already run against its time limit: what its
/// earlier parts ran (`earlier` ms, for a resume), but none for a follow-up just made, a
/// new ask whose time runs from now (a fix round after a time limit stop gets its time).
fn time_counted(start: &Start<'_>, earlier: u64) -> u64 {
    match start {
        Start::Resume(rebuilt) if rebuilt.follow_up_unstarted => 0,
        _ => earlier,
    }
}

impl Orchestrator {
    /// Builds the agent `me` of type `spec`, runs it on `prompt`, and records the result.
    ///
    /// An async block rather than an `async fn`: an `async fn` moves its arguments into
    /// locals of their own, and every waiting subagent's future would hold `me` twice.
    #[allow(clippy::manual_async_fn)] // an `async fn` holds its arguments twice
    pub(super) fn run_agent<'a>(
        self: &'a Arc<Self>,
        spec: &'a AgentSpec,
        mut me: AgentHandle,
        description: &'a str,
        start: Start<'a>,
        cancel: CancellationToken,
        background: bool,
    ) -> Instrumented<impl Future<Output = AgentOutcome> + Send + 'a> {
        // Its `invoke_agent` span, under the current one (its `Task` call's, for a
        // subagent); current while it runs, so its requests and tool calls nest under it.
        let span = self.agent_span(spec, &me, &start);
        let id = span.id();
        async move {
            let started = Instant::now();
            self.limit(spec, &mut me, &start, &cancel).await;
            let (mut agent, own_servers) =
                self.build_agent(spec, &me, cancel, Some(description)).await;
            // Time run in the earlier parts of the run (a resume) counts too.
            let earlier = agent
                .transcript
                .as_ref()
                .map_or(0, |t| t.earlier().elapsed_ms);
            let counted = time_counted(&start, earlier);
            let deadline = me
                .limits
                .time
                .map(|time| Deadline::start(time, counted, &agent.budget));
            self.put_on_roster(spec, &me, description, background, started)
                .await;
            let outcome = match start {
                Start::Fresh(prompt) => {
                    let fresh = self.start_fresh(&mut agent, spec, &me, description, prompt);
                    fresh.await
                }
                Start::Resume(rebuilt) => {
                    if let Some(t) = &agent.transcript {
                        t.catch_up(&rebuilt.history);
                    }
                    // Boxed: resuming needs a larger future than a fresh start (it may compact
                    // first), and every waiting subagent would else hold room for it.
                    let resume = Box::pin(agent.resume(*rebuilt));
                    resume.await
                }
            };
            // Its time limit covers its work: what follows (waiting for its background
            // subagents, which are cancelled now, its end hooks, its journal) is not cut.
            drop(deadline);
            // Background subagents never outlive their parent: one that stopped early (turn
            // limit, budget, error) takes them down with it.
            me.background.cancel_all();
            me.background.settle().await;
            self.end_hooks(&agent, &outcome).await;
            me.run
                .journal(Step::Finished {
                    agent: me.path.clone(),
                    stop: outcome.stop.clone(),
                    text: outcome.text.clone(),
                })
                .await;
            for server in own_servers {
                server.shutdown().await;
            }
            let elapsed_ms = earlier + millis(started.elapsed());
            if let Some(t) = &agent.transcript {
                t.outcome_after(&outcome, elapsed_ms);
            }
            self.record_end(spec, &me, description, &outcome, elapsed_ms);
            // Current here: the future runs inside it (a handle kept for this would make
            // every waiting agent's future larger). Told apart by its id: were it left out by
            // a subscriber, the current span would be its `Task` call's.
            let current = Span::current();
            if id.is_some() && current.id() == id {
                spans::record_agent_end(&current, &self.config.record_content, &outcome);
            }
            outcome
        }
        .instrument(span)
    }

    /// Settles the limits of the agent `me` of type `spec`: its type's, tightened by its
    /// caller's. With a token or time limit it gets a budget of its own below its parent's,
    /// counting what it and its subagents used in earlier parts of a resumed run (since its
    /// last follow-up, when it had one), and reaching one cancels `cancel` — so its
    /// subagents stop with it.
    async fn limit(
        &self,
        spec: &AgentSpec,
        me: &mut AgentHandle,
        start: &Start<'_>,
        cancel: &CancellationToken,
    ) {
        me.limits = spec.agent_limits().tightened_by(&me.limits);
        if me.limits.tokens.is_none() && me.limits.time.is_none() {
            return;
        }
        let used = match start {
            Start::Fresh(_) => 0,
            // A follow-up's token limit counts from it: a follow-up just made has used
            // nothing, neither the turns before it nor its earlier subagents count.
            Start::Resume(rebuilt) if rebuilt.follow_up_unstarted => 0,
            // Resumed, its own tokens since its last follow-up (all, without one) and its
            // subagents'.
            Start::Resume(rebuilt) => {
                let members = me.run.team.member_paths().await;
                rebuilt.tokens_since_follow_up() + me.run.earlier_tokens_below(&me.path, &members)
            }
        };
        let above = me.budget.take().unwrap_or_else(|| self.budget.clone());
        me.budget = Some(above.below(me.limits.tokens, used, cancel.clone()));
    }

    /// The `invoke_agent` span of the agent `me` of type `spec`, with its prompt when the
    /// run records prompts.
    fn agent_span(&self, spec: &AgentSpec, me: &AgentHandle, start: &Start<'_>) -> Span {
        let span = spans::invoke_agent(&AgentSpan {
            agent_type: &spec.name,
            path: &me.path,
            run_id: &me.run.id,
            model: &me.model,
            provider: self.config.model.provider(),
        });
        if let Start::Fresh(prompt) = start {
            spans::record_prompt(&span, &self.config.record_content, prompt);
        }
        span
    }

    /// Puts the agent `me` of type `spec` on the roster and tells its start.
    async fn put_on_roster(
        &self,
        spec: &AgentSpec,
        me: &AgentHandle,
        description: &str,
        background: bool,
        started: Instant,
    ) {
        let member = me.member.clone().filter(|_| me.depth > 0);
        // Messages sent to a member before it is on the roster count as unread from the start.
        let unread = match &member {
            Some(name) => u32::try_from(me.run.team.unread(name).await).unwrap_or(u32::MAX),
            None => 0,
        };
        self.roster.add(RosterEntry {
            path: me.path.clone(),
            agent_type: spec.name.clone(),
            description: description.to_owned(),
            turn: 0,
            current_tool: None,
            tokens: 0,
            usage: Usage::default(),
            color: spec.color.clone(),
            background,
            member,
            waiting: false,
            unread,
            started,
        });
        self.roster.observe(Event::Started {
            agent: me.path.clone(),
            agent_type: spec.name.clone(),
            description: description.to_owned(),
            model: me.model.clone(),
            color: spec.color.clone(),
            background,
        });
    }

    /// Runs `agent` on a fresh `prompt`: its first history (a fork's starts with its
    /// parent's), its start hooks, and its start journaled.
    async fn start_fresh(
        &self,
        agent: &mut Agent,
        spec: &AgentSpec,
        me: &AgentHandle,
        description: &str,
        prompt: &str,
    ) -> AgentOutcome {
        let mut history = match &me.fork {
            Some(base) => {
                let (history, point) = first_history(base, prompt);
                agent.config.fork = Some(point);
                history
            }
            None => vec![Message::user_text(prompt)],
        };
        // The hooks of its start may add to its first message, or refuse the prompt.
        // Boxed, as every hook run here: few agents run hooks, and every waiting
        // subagent's future would else hold room for one.
        let refused = match &agent.hooks {
            Some(hooks) => {
                let start_hooks = Box::pin(start_hooks(hooks, &me.model, prompt, &mut history));
                start_hooks.await.map(Box::new)
            }
            None => None,
        };
        me.run
            .journal(Step::Started {
                agent: me.path.clone(),
                agent_type: spec.name.clone(),
                description: description.to_owned(),
                history: history.clone(),
            })
            .await;
        match refused {
            None => agent.run(history).await,
            Some(step) => {
                // Written as a fresh start writes it, so the transcript holds the whole
                // history whichever way the run goes on.
                if let Some(t) = &agent.transcript {
                    history.iter().for_each(|m| t.message(m));
                }
                me.run.journal((*step).clone()).await;
                let mut state = AgentState::new(&spec.name, description, history);
                state.apply(*step);
                let resume = Box::pin(agent.resume(state));
                resume.await
            }
        }
    }

    /// Runs the hooks of `agent`'s end: `SessionEnd` for the primary agent, and however
    /// it ended, a subagent's `SubagentStop` hooks once.
    async fn end_hooks(&self, agent: &Agent, outcome: &AgentOutcome) {
        let Some(hooks) = agent.hooks.as_ref() else {
            return;
        };
        if !hooks.is_subagent() {
            let reason = match outcome.stop {
                StopKind::Cancelled => "prompt_input_exit",
                _ => "other",
            };
            let session_end = Box::pin(hooks.session_end(reason));
            session_end.await;
        }
        let stop = outcome.stop.to_string();
        let subagent_end = Box::pin(hooks.subagent_end(&outcome.text, &stop));
        subagent_end.await;
    }

    /// Takes the agent `me` off the roster and keeps its record — unless it was off the
    /// roster already: then it was recorded when the run was given up.
    fn record_end(
        &self,
        spec: &AgentSpec,
        me: &AgentHandle,
        description: &str,
        outcome: &AgentOutcome,
        elapsed_ms: u64,
    ) {
        if !self.roster.leave(&me.path) {
            return;
        }
        let result_file = self.result_name(&me.run, &me.path, me.depth, &outcome.text);
        let path = me.path.clone();
        self.roster.record(AgentRecord {
            path,
            agent_type: spec.name.clone(),
            description: description.to_owned(),
            model: me.model.clone(),
            turns: outcome.turns,
            tool_calls: outcome.tool_calls,
            usage: outcome.usage,
            elapsed_ms,
            outcome: outcome.stop.outcome(),
            stop: outcome.stop.clone(),
            result_file,
            worker: None,
            member: me.member.clone().filter(|_| me.depth > 0),
        });
    }
}

/// Runs the hooks of an agent's fresh start: `SubagentStart` for a subagent,
/// `SessionStart` and `UserPromptSubmit` for the primary agent on `prompt`, talking to
/// `model`. What they add for the model joins `history`'s last message; a refused
/// prompt comes back as the journal step that stops the agent.
async fn start_hooks(
    hooks: &AgentHooks,
    model: &str,
    prompt: &str,
    history: &mut [Message],
) -> Option<Step> {
    let mut notes: Vec<(HookEvent, String)> = Vec::new();
    let mut refused = None;
    if hooks.is_subagent() {
        let v = hooks.subagent_start().await;
        notes.extend(v.context.map(|c| (HookEvent::SubagentStart, c)));
    } else {
        let v = hooks.session_start("startup", model).await;
        notes.extend(v.context.map(|c| (HookEvent::SessionStart, c)));
        let v = hooks.user_prompt_submit(prompt).await;
        notes.extend(v.context.map(|c| (HookEvent::UserPromptSubmit, c)));
        refused = v.stop.or(v.block).map(|reason| Step::Hooked {
            agent: hooks.agent_id().clone(),
            event: HookEvent::UserPromptSubmit,
            call: None,
            decision: HookDecision::Stop {
                reason: format!("the prompt was refused by a UserPromptSubmit hook: {reason}"),
            },
        });
    }
    // The prompt is the last message (a fork's first ones are its parent's, shared
    // with the cache, so they are left as they are).
    if let Some(last) = history.last_mut() {
        for (event, note) in notes {
            last.content
                .push(ContentBlock::text(format!("[{event} hook] {note}")));
        }
    }
    refused
}

/// An agent's time limit, running while it is kept: when the time is up, the agent's
/// budget is tripped, which cancels it and its subagents.
struct Deadline(tokio::task::AbortHandle);

impl Deadline {
    /// The time limit `time` of the agent whose budget is `budget`, of which `earlier_ms`
    /// were spent by earlier parts of its run.
    fn start(time: Duration, earlier_ms: u64, budget: &Budget) -> Self {
        let left = time.saturating_sub(Duration::from_millis(earlier_ms));
        budget.set_deadline(Instant::now() + left);
        let idle = budget.idle_watch();
        let budget = budget.clone();
        let timer = tokio::spawn(run_out(left, idle, move || budget.time_up()));
        Self(timer.abort_handle())
    }
}

/// Waits until the agent has worked `left` — the time it waits idle (`idle` says when)
/// does not count — then calls `up`.
async fn run_out(mut left: Duration, mut idle: watch::Receiver<bool>, up: impl FnOnce() + Send) {
    loop {
        let started = tokio::time::Instant::now();
        let went_idle = tokio::select! {
            () = tokio::time::sleep(left) => break,
            went = idle.wait_for(|i| *i) => went.is_ok(),
        };
        left = left.saturating_sub(started.elapsed());
        // When no one can say it is idle any more, the rest of its time runs.
        if !went_idle || idle.wait_for(|i| !*i).await.is_err() {
            tokio::time::sleep(left).await;
            break;
        }
    }
    up();
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_time_limit_counts_working_time_not_idle_time() {
        let (tx, rx) = watch::channel(false);
        let up = Arc::new(AtomicBool::new(false));
        let timer = tokio::spawn(run_out(Duration::from_secs(10), rx, {
            let up = up.clone();
            move || up.store(true, Ordering::Relaxed)
        }));
        tokio::time::sleep(Duration::from_secs(6)).await;
        tx.send_replace(true);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!up.load(Ordering::Relaxed), "idle time counted");
        tx.send_replace(false);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!up.load(Ordering::Relaxed), "9 of 10 seconds worked");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(up.load(Ordering::Relaxed), "11 seconds worked");
        timer.await.unwrap();
    }
}
