//! One item of a workflow run: its attempts and retries, what the journal has for it
//! on a resume, and the task it runs on.

use super::handle::{AgentHandle, Start};
use super::run_context::RunContext;
use super::Orchestrator;
use crate::definitions::spec::AgentSpec;
use crate::run::answer::AnswerSchema;
use crate::run::state::AgentState;
use crate::run::workflow::results::output_of;
use crate::run::workflow::{ItemCall, ItemResult, ItemStart, StartSink};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::{Outcome, StopKind};
use crate::vocab::step::Step;
use cadre_model::{Message, Usage};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

/// The longest wait before a failed item is tried again.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

/// An item ready to run: its key, its call, and the id its call is journaled under.
pub(super) struct Prepared {
    pub(super) key: String,
    pub(super) call: ItemCall,
    /// The content key, with the occurrence number of a second call of the same content.
    pub(super) base: String,
    pub(super) spec: AgentSpec,
    pub(super) answer: Option<AnswerSchema>,
}

/// What one attempt of an item came to.
enum Attempt {
    /// Its agent ended (now, or before the resume: `ran_now` false).
    Ended {
        path: AgentPath,
        stop: StopKind,
        text: String,
        usage: Usage,
        ran_now: bool,
    },
    /// It did not start: the run stopped scheduling, for this reason.
    NotStarted(StopKind),
}

/// One attempt of an item: the item, the id its call is journaled under, which attempt
/// (from 0), and the fix round's follow-up when one is asked for.
struct Try<'a> {
    item: &'a Prepared,
    call: &'a str,
    attempt: u32,
    follow_up: Option<&'a str>,
}

/// How the items of one run go: retries, and what a resume was asked to do again.
pub(super) struct ItemRules {
    pub(super) retries: u32,
    pub(super) retry_failed: bool,
    pub(super) follow_up: Option<(String, String)>,
    /// Told as each item's agent starts.
    pub(super) on_start: Vec<StartSink>,
}

impl ItemRules {
    /// Tells the start sinks that attempt `attempt` (from 0) of `item`, journaled as
    /// `call`, starts with its agent at `path` — or, with `failed`, that it ended so and
    /// the item is tried again.
    fn started(
        &self,
        item: &Prepared,
        (call, attempt): (&str, u32),
        path: &AgentPath,
        failed: Option<String>,
    ) {
        if self.on_start.is_empty() {
            return;
        }
        let start = ItemStart {
            key: item.key.clone(),
            call: call.to_owned(),
            attempt: attempt + 1,
            agent: path.clone(),
            failed,
        };
        for sink in &self.on_start {
            sink(&start);
        }
    }
}

/// What the agent of the item `key` is asked to do, as its start is journaled.
pub(super) fn item_description(key: &str) -> String {
    format!("item {key}")
}

/// The id of attempt `attempt` (from 0) of the call `base`.
fn attempt_id(base: &str, attempt: u32) -> String {
    if attempt == 0 {
        base.to_owned()
    } else {
        format!("{base}~{attempt}")
    }
}

impl Orchestrator {
    /// Runs `item` to its result on a task of its own: the items' work spreads over the
    /// runtime's threads instead of taking turns in the driver's task, where a burst of
    /// answers arriving together kept each next item waiting for all the others. The task
    /// ends with the future (a dropped driver leaves no item running).
    pub(super) fn spawn_item(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        root: &AgentHandle,
        item: Prepared,
        rules: &Arc<ItemRules>,
    ) -> impl std::future::Future<Output = ItemResult> + 'static {
        let key = item.key.clone();
        let (me, run, root, rules) = (self.clone(), run.clone(), root.clone(), rules.clone());
        let work = async move { me.run_item(&run, &root, item, &rules).await };
        let task = AbortOnDropHandle::new(tokio::spawn(work.in_current_span()));
        async move {
            task.await.unwrap_or_else(|failure| ItemResult {
                key,
                call: None,
                outcome: Outcome::Failed.label().to_owned(),
                output: serde_json::Value::Null,
                usage: Usage::default(),
                agent: None,
                line: None,
                error: Some(format!("its task ended without a result: {failure}")),
                attempts: 0,
                ran_now: true,
            })
        }
    }

    /// Runs `item` to its result: its last attempt found in the journal (its result stands,
    /// or it goes on), then fresh attempts while it fails and retries are left.
    pub(super) async fn run_item(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        root: &AgentHandle,
        item: Prepared,
        rules: &ItemRules,
    ) -> ItemResult {
        let mut attempt = 0;
        while run
            .resumed_child(&root.path, &attempt_id(&item.base, attempt + 1))
            .is_some()
        {
            attempt += 1;
        }
        let follow_up = rules
            .follow_up
            .as_ref()
            .filter(|(key, _)| *key == item.key)
            .map(|(_, text)| text.as_str());
        let mut retried_failed = false;
        let mut any_ran_now = false;
        let mut tries = 0;
        let mut usage = Usage::default();
        loop {
            let call = attempt_id(&item.base, attempt);
            let this = Try {
                item: &item,
                call: &call,
                attempt,
                follow_up: follow_up.filter(|_| tries == 0),
            };
            let ended = self.attempt(run, root, this, rules).await;
            tries += 1;
            let (path, stop, text, ran_now) = match ended {
                Attempt::NotStarted(stop) => return not_started(&item, &call, stop, attempt),
                Attempt::Ended {
                    path,
                    stop,
                    text,
                    usage: used,
                    ran_now,
                } => {
                    usage.add(&used);
                    any_ran_now |= ran_now;
                    (path, stop, text, ran_now)
                }
            };
            let failed = stop.outcome() == Outcome::Failed;
            // Retries left (a run stopped between two attempts had some), or one more
            // asked for by `retry --failed` for an item that had failed before.
            let retry = attempt < rules.retries;
            let asked = rules.retry_failed && !ran_now && !retried_failed;
            if failed && (retry || asked) && self.scheduling_stopped().is_none() {
                rules.started(&item, (&call, attempt), &path, Some(stop.to_string()));
                if ran_now {
                    self.back_off(attempt).await;
                }
                retried_failed |= !retry;
                attempt += 1;
                continue;
            }
            let (output, error) = output_of(&stop, &text, item.answer.is_some());
            return ItemResult {
                key: item.key,
                call: Some(call),
                outcome: stop.label().to_owned(),
                output,
                usage,
                agent: Some(path),
                line: None,
                error,
                attempts: attempt + 1,
                ran_now: any_ran_now,
            };
        }
    }

    /// Waits before attempt `attempt + 1` of a failed item: 0.5 s, doubling, at most 30 s;
    /// a cancel ends the wait.
    async fn back_off(&self, attempt: u32) {
        let wait = Duration::from_millis(500)
            .saturating_mul(1 << attempt.min(10))
            .min(MOST_BACKOFF);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = self.cancel.cancelled() => {}
        }
    }

    /// One attempt of an item (`this`), journaled as its call of the root: the agent the
    /// journal has for it ends or goes on (with the follow-up as its next message, when
    /// given), else a new one starts, unless scheduling stopped. Its start is told to the
    /// start sinks of `rules`.
    async fn attempt(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        root: &AgentHandle,
        this: Try<'_>,
        rules: &ItemRules,
    ) -> Attempt {
        let Try {
            item,
            call,
            attempt,
            follow_up,
        } = this;
        let (path, rebuilt) = match run.resumed_child(&root.path, call) {
            Some(path) => match self.found(run, &path, follow_up).await {
                Found::Ended(stop, text, usage) => {
                    return Attempt::Ended {
                        path,
                        stop,
                        text,
                        usage,
                        ran_now: false,
                    }
                }
                Found::GoesOn(state) => (path, state),
            },
            None => {
                if let Some(stop) = self.scheduling_stopped() {
                    return Attempt::NotStarted(stop);
                }
                (self.spawned(run, root, &item.spec.name, call).await, None)
            }
        };
        if let Some(stop) = self.scheduling_stopped() {
            // Left to be counted at the end, as any agent no call reached again.
            if let Some(state) = rebuilt {
                run.lineage.resumed.insert(path, *state);
            }
            return Attempt::NotStarted(stop);
        }
        let model = self.model_for(&item.spec, &root.model);
        let mut me = AgentHandle::new(
            run.clone(),
            path.clone(),
            root.depth + 1,
            model,
            root.workspace.clone(),
        );
        me.answer = item.answer.clone();
        // The item's limits, which its type's tighten when it starts, as a `Task` call's.
        me.limits = item.call.limits;
        let description = item_description(&item.key);
        rules.started(item, (call, attempt), &path, None);
        let start = match rebuilt {
            Some(state) => Start::Resume(state),
            None => Start::Fresh(&item.call.prompt),
        };
        let cancel = self.cancel.child_token();
        let outcome = self
            .run_agent(&item.spec, me, &description, start, cancel, false)
            .await;
        Attempt::Ended {
            path,
            stop: outcome.stop,
            text: outcome.text,
            usage: outcome.usage,
            ran_now: true,
        }
    }
}

/// What a resumed run's journal has for an attempt's agent.
enum Found {
    /// It ended, and its result stands: how, its answer, its usage.
    Ended(StopKind, String, Usage),
    /// It goes on from this state (none: it never started, and starts fresh).
    GoesOn(Option<Box<AgentState>>),
}

impl Orchestrator {
    /// What the journal of `run` has for the agent at `path`: an end that stands, or the
    /// state it goes on from — with `follow_up` as its next message, journaled, when given;
    /// asking again when the model API or a cancel stopped it.
    async fn found(&self, run: &RunContext, path: &AgentPath, follow_up: Option<&str>) -> Found {
        if let Some(ended) = run.take_ended(path) {
            return Found::Ended(ended.stop, ended.text, ended.usage);
        }
        let Some(mut state) = run.take_resumed(path) else {
            return Found::GoesOn(None);
        };
        match (&state.finished, follow_up) {
            (Some(_), Some(text)) => {
                let step = Step::UserMessage {
                    agent: path.clone(),
                    message: Message::user_text(text),
                };
                run.journal(step.clone()).await;
                state.apply(step);
                // Its record gives way to the one it ends with now.
                self.roster.forget(path);
            }
            (Some((stop, text)), None) if !stop.resumes() => {
                return Found::Ended(stop.clone(), text.clone(), state.usage);
            }
            (Some(_), None) => {
                state.finished = None;
                self.roster.forget(path);
            }
            (None, _) => {}
        }
        Found::GoesOn(Some(Box::new(state)))
    }
}

/// The result of `item`, whose attempt `attempt` (journaled as `call`) did not start
/// because the run stopped scheduling for `stop`.
fn not_started(item: &Prepared, call: &str, stop: StopKind, attempt: u32) -> ItemResult {
    let outcome = match stop {
        StopKind::Budget => Outcome::Budget,
        _ => Outcome::Cancelled,
    };
    ItemResult {
        key: item.key.clone(),
        call: Some(call.to_owned()),
        outcome: outcome.label().to_owned(),
        output: serde_json::Value::Null,
        usage: Usage::default(),
        agent: None,
        line: None,
        error: Some(format!("not started: {stop}")),
        attempts: attempt,
        ran_now: false,
    }
}
