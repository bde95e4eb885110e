//! The items of an engine workflow run: each made into its agent call and content key (as
//! cadre-core's driver makes them), submitted as attempts at most `concurrency` at once,
//! and told as they end; what an earlier part of the run finished stands.

use super::submitted::{self, Submitted};
use super::tally::Tally;
use crate::common::signals::{self, Ending};
use cadre_core::workflow::{CallKey, ItemResult, WorkItem};
use cadre_core::{AgentPath, Delegated, DelegatedCall, Registry, StopKind, Usage};
use cadre_engine::client::{ClientError, Ingress};
use cadre_engine::wire::AgentCall;
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The longest wait before a failed item is tried again.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

/// How often a submit or attach that cannot reach the ingress is tried in all before the
/// item is given up (the run then stops submitting, and a resume attaches again).
const TRIES: u32 = 12;

/// The first wait before trying the ingress again; it doubles up to [`MOST_ENGINE_WAIT`].
const FIRST_ENGINE_WAIT: Duration = Duration::from_millis(250);

/// The longest wait between two tries of the ingress (about a minute in all).
const MOST_ENGINE_WAIT: Duration = Duration::from_secs(8);

/// An item on its way: its call, and which attempt.
pub(super) struct Pending {
    key: String,
    /// Its content key, with the occurrence number of a second call of the same content.
    base: String,
    agent: DelegatedCall,
    typed: bool,
    attempt: u32,
    /// Tokens its attempts so far used.
    usage: Usage,
}

impl Pending {
    /// The id of its attempt under way (`KEY`, then `KEY~1`, `KEY~2`… for retries).
    fn call_id(&self) -> String {
        match self.attempt {
            0 => self.base.clone(),
            n => format!("{}~{n}", self.base),
        }
    }
}

/// The result lines an earlier part of the run wrote, by call (without its attempt).
pub(super) struct Earlier {
    lines: HashMap<String, ItemResult>,
    retry_failed: bool,
}

/// What becomes of an item given its earlier line.
enum Decision {
    /// Its earlier result stands.
    Stands(Box<ItemResult>),
    /// It is submitted as this attempt.
    Submit(u32),
}

impl Earlier {
    /// The lines of `results` (and of the `.partial` file a resume cut short left beside
    /// it, which is newer), the last for each call winning; `retry_failed` runs failed
    /// items again.
    pub(super) fn read(results: &Path, retry_failed: bool) -> Self {
        let mut partial = results.as_os_str().to_owned();
        partial.push(".partial");
        let mut lines = HashMap::new();
        for file in [results, Path::new(&partial)] {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for r in text
                .lines()
                .filter_map(|l| serde_json::from_str::<ItemResult>(l).ok())
            {
                let Some(call) = &r.call else { continue };
                let base = call.split('~').next().unwrap_or(call).to_owned();
                lines.insert(base, r);
            }
        }
        Self {
            lines,
            retry_failed,
        }
    }

    /// The agents the lines name.
    pub(super) fn agents(&self) -> impl Iterator<Item = AgentPath> + '_ {
        self.lines.values().filter_map(|r| r.agent.clone())
    }

    /// What the run does with the item whose call is `base`: a completed line stands, and
    /// so does a failure that a resume does not carry on (an invalid answer, a limit); an
    /// item stopped by the model API, cancelled or not started is submitted again as a
    /// fresh attempt (its last one ended on the engine, where it cannot go on).
    /// An item with no line goes on from `recorded`, the last attempt the run submitted
    /// (the same key attaches to it, running or ended).
    fn decide(&mut self, base: &str, recorded: Option<u32>) -> Decision {
        let Some(line) = self.lines.remove(base) else {
            return Decision::Submit(recorded.unwrap_or(0));
        };
        // A later attempt went out after the line was written (a retry whose client was
        // killed): it is the item's, and the same key attaches to it.
        if let Some(later) = recorded.filter(|&n| n >= line.attempts.max(1)) {
            if !line.is_completed() {
                return Decision::Submit(later);
            }
        }
        let not_started = line
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("not started:"));
        let resumes = line.outcome == StopKind::Cancelled.label()
            || line.outcome == StopKind::ModelError(String::new()).label();
        if !line.is_completed()
            && (not_started || resumes || (self.retry_failed && line.is_failed()))
        {
            return Decision::Submit(line.attempts);
        }
        Decision::Stands(Box::new(line))
    }
}

/// What the next item of the input comes to.
pub(super) enum Next {
    /// Its line, known now (bad input, an unknown type, an earlier result that stands).
    Told(Box<ItemResult>),
    /// It is to be submitted.
    Run(Box<Pending>),
}

/// The items of the input, made into calls as they are read.
pub(super) struct Items {
    source: Box<dyn Iterator<Item = WorkItem> + Send>,
    registry: Registry,
    model: String,
    seen: HashMap<CallKey, u32>,
    earlier: Earlier,
    /// What the run submitted before: each call's agent and attempt.
    submitted: Submitted,
}

impl Items {
    /// The items of `source`, their types in `registry`, the run's model `model`, what an
    /// earlier part of the run found in `earlier` and submitted in `submitted`.
    pub(super) fn new(
        source: Box<dyn Iterator<Item = WorkItem> + Send>,
        registry: Registry,
        model: String,
        earlier: Earlier,
        submitted: Submitted,
    ) -> Self {
        Self {
            source,
            registry,
            model,
            seen: HashMap::new(),
            earlier,
            submitted,
        }
    }

    /// The next item, read from the input only now.
    pub(super) fn next(&mut self) -> Option<Next> {
        let item = self.source.next()?;
        Some(self.prepare(item))
    }

    /// `item` made into its call and content key, or its line when it cannot run.
    fn prepare(&mut self, item: WorkItem) -> Next {
        let WorkItem {
            key, line, call, ..
        } = item;
        let failed = |why: String, outcome: &str| {
            let mut r = ItemResult::new(key.clone(), outcome);
            r.line = line;
            r.error = Some(why);
            Next::Told(Box::new(r))
        };
        let call = match call {
            Ok(call) => call,
            Err(why) => return failed(why, ItemResult::BAD_INPUT),
        };
        let Some(spec) = self.registry.get(&call.agent) else {
            let known: Vec<&str> = self.registry.all().map(|s| s.name.as_str()).collect();
            let why = format!(
                "unknown agent type {:?}; the types are: {}",
                call.agent,
                known.join(", ")
            );
            return failed(why, "failed: unknown type");
        };
        if let Some(why) = spec.unusable() {
            return failed(why.to_string(), "failed: unusable type");
        }
        let mut spec = spec.clone();
        // The item's limits travel in the type the workers are sent, where they tighten it
        // (as a `Task` call's do on the engine).
        spec.limits = spec.limits.tightened_by(&call.limits);
        let model = spec.model_under(&self.model);
        let content = CallKey::of(
            &call.agent,
            &call.prompt,
            call.output_schema.as_ref(),
            &call.limits,
            &model,
        );
        let base = self.call_id(content);
        let recorded = self.submitted.attempt_of(&base);
        let attempt = match self.earlier.decide(&base, recorded) {
            Decision::Stands(line) => return Next::Told(line),
            Decision::Submit(attempt) => attempt,
        };
        // Named from its call, not its place in the input: a line inserted above it does
        // not hand it an earlier agent's path (its branch, transcript and record).
        let path = self.submitted.agent_of(&base, &spec.name);
        let agent = DelegatedCall {
            path,
            depth: 1,
            spec,
            model,
            description: format!("item {key}"),
            prompt: call.prompt,
            trace: None,
            output_schema: call.output_schema,
        };
        Next::Run(Box::new(Pending {
            key,
            base,
            typed: agent.output_schema.is_some(),
            agent,
            attempt,
            usage: Usage::default(),
        }))
    }

    /// The id of the call of content `key`: a second call of the same content is a call of
    /// its own, its id carrying how many came before it in the input's order.
    fn call_id(&mut self, key: CallKey) -> String {
        let n = self.seen.entry(key).or_insert(0);
        let id = match *n {
            0 => key.to_string(),
            n => format!("{key}.{n}"),
        };
        *n += 1;
        id
    }
}

/// How one attempt ended.
pub(super) enum Ended {
    /// Its invocation ended with this report.
    Ran(Delegated),
    /// It was never submitted: the run stopped first.
    NotStarted,
    /// Its invocation ended in a failure of the handler's own (the body Restate gave):
    /// the attempt is over, and another goes under a new key.
    Failed(String),
    /// The engine could not be asked (it was not submitted, or the attach was lost).
    Lost(String),
}

/// Submits attempts and keeps the invocations in flight, to cancel them.
pub(super) struct Attempts {
    ingress: Ingress,
    template: Arc<AgentCall>,
    retries: u32,
    /// Invocations in flight, by idempotency key.
    inflight: Arc<Mutex<BTreeMap<String, String>>>,
    /// Cancelled when the run stops scheduling.
    stop: CancellationToken,
    /// Where each attempt is recorded before it is submitted.
    submitted: Arc<PathBuf>,
}

impl Attempts {
    /// Attempts sent through `ingress`, each with `template`'s settings, a failed item
    /// tried again `retries` times, each recorded in the file `submitted` first.
    pub(super) fn new(
        ingress: Ingress,
        template: AgentCall,
        retries: u32,
        submitted: PathBuf,
    ) -> Self {
        Self {
            ingress,
            template: Arc::new(template),
            retries,
            inflight: Arc::default(),
            stop: CancellationToken::new(),
            submitted: Arc::new(submitted),
        }
    }

    /// The attempt of `pending` under way, after `wait`: submitted under the idempotency
    /// key `RUN:CALL`, then attached to until its invocation ends.
    fn attempt(
        &self,
        pending: Box<Pending>,
        wait: Duration,
    ) -> impl std::future::Future<Output = (Box<Pending>, Ended)> + Send + 'static {
        let ingress = self.ingress.clone();
        let template = self.template.clone();
        let inflight = self.inflight.clone();
        let stop = self.stop.clone();
        let file = self.submitted.clone();
        async move {
            if !wait.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = stop.cancelled() => {}
                }
            }
            if stop.is_cancelled() {
                return (pending, Ended::NotStarted);
            }
            let mut call = AgentCall::clone(&template);
            call.agent = pending.agent.clone();
            // The caller's trace, if it is in one: each item's span is its child.
            call.agent.trace.clone_from(&template.agent.trace);
            let key = format!("{}:{}", call.run, pending.call_id());
            let (base, attempt, agent) = (&pending.base, pending.attempt, &call.agent.path);
            // Recorded first: a client killed while it is sent resumes this attempt.
            submitted::record(&file, base, attempt, agent, None);
            // The idempotency key makes a submit tried again the same submit.
            let invocation = match reaching(|| ingress.submit_keyed(&call, &key)).await {
                Ok(id) => id,
                Err(e) => return (pending, Ended::Lost(e.to_string())),
            };
            submitted::record(&file, base, attempt, agent, Some(&invocation));
            lock(&inflight).insert(key.clone(), invocation.clone());
            if stop.is_cancelled() {
                // The run stopped while it was being submitted: the cancel may have missed it.
                let _ = ingress
                    .cancel_items(&call.run, std::slice::from_ref(&invocation))
                    .await;
            }
            let ended = attach(&ingress, &invocation).await;
            lock(&inflight).remove(&key);
            (pending, ended)
        }
    }

    /// The invocations in flight, by idempotency key (as they are at each look).
    pub(super) fn in_flight(&self) -> Arc<Mutex<BTreeMap<String, String>>> {
        self.inflight.clone()
    }

    /// Stops scheduling: no attempt is submitted from now on, and every invocation in
    /// flight is cancelled on the engine.
    fn stop_all(&self) {
        self.stop.cancel();
        let ids: Vec<String> = {
            let inflight = lock(&self.inflight);
            // Marked first: a client killed before their lines are written resumes each
            // with a fresh attempt, not the cancelled one's key.
            submitted::mark_cancelled(&self.submitted, &self.template.run, inflight.keys());
            inflight.values().cloned().collect()
        };
        if ids.is_empty() {
            return;
        }
        let ingress = self.ingress.clone();
        let run = self.template.run.clone();
        tokio::spawn(async move {
            if let Err(e) = ingress.cancel_items(&run, &ids).await {
                errln!("cadre: could not cancel the items in flight: {e}");
            }
        });
    }
}

/// The inflight map, whatever a panicking holder left.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits for the invocation `id` to end; an ingress that cannot be reached is tried again.
async fn attach(ingress: &Ingress, id: &str) -> Ended {
    match reaching(|| ingress.attach(id)).await {
        Ok(report) => Ended::Ran(report),
        // Restate answers a cancelled invocation's attach with its cancellation.
        Err(ClientError::Status { status: 409, .. }) => {
            Ended::Ran(Delegated::stopped(StopKind::Cancelled))
        }
        // Not the ingress's own error: the invocation's stored result, which the same
        // key would hand back on every resume.
        Err(ClientError::Status {
            body,
            from_ingress: false,
            ..
        }) => Ended::Failed(failure_message(&body)),
        Err(e) => Ended::Lost(e.to_string()),
    }
}

/// `ask` until the ingress is reached, waiting longer after each try it could not be (a
/// brief outage is ridden out), at most [`TRIES`] times.
async fn reaching<T, F, A>(mut ask: A) -> Result<T, ClientError>
where
    A: FnMut() -> F,
    F: std::future::Future<Output = Result<T, ClientError>>,
{
    let mut wait = FIRST_ENGINE_WAIT;
    let mut tries = 1;
    loop {
        match ask().await {
            Err(ClientError::Unreachable { .. }) if tries < TRIES => {
                tries += 1;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MOST_ENGINE_WAIT);
            }
            answer => return answer,
        }
    }
}

/// The message of a failed invocation's body (`{"message": …}`), else the body itself.
fn failure_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.to_owned())
}

/// Drives the items to their ends: at most `concurrency` submitted and unfinished at once,
/// items read only as slots free; `tick` redraws the live block with the number running.
/// Returns why scheduling stopped (`Done` when it did not), or `None` when a second Ctrl-C
/// (or signal) gave the run up at once, or SIGHUP left its items running on the engine.
pub(super) async fn drive(
    mut items: Items,
    attempts: Attempts,
    tally: &mut Tally,
    concurrency: usize,
    endings: &mut watch::Receiver<Option<Ending>>,
    mut tick: impl FnMut(u64),
) -> Option<StopKind> {
    let mut running = FuturesUnordered::new();
    let mut stopped: Option<StopKind> = None;
    let mut exhausted = false;
    let mut asked = false;
    let mut ticker = tokio::time::interval(Duration::from_millis(200));
    // One handler for the whole drive: a Ctrl-C that comes while a pass is busy outside the
    // `select!` is kept for the next (a listener made anew each pass would miss it).
    let mut interrupts = signal(SignalKind::interrupt()).ok();
    loop {
        while !exhausted && running.len() < concurrency {
            match items.next() {
                None => exhausted = true,
                Some(Next::Told(r)) => tally.tell(&r),
                Some(Next::Run(p)) => match &stopped {
                    Some(stop) => tally.tell(&not_started(&p.key, &p.call_id(), stop, p.attempt)),
                    None => running.push(attempts.attempt(p, Duration::ZERO)),
                },
            }
        }
        if running.is_empty() && exhausted {
            break;
        }
        let why = tokio::select! {
            Some((pending, ended)) = running.next() => {
                if let Some((pending, wait)) = ended_attempt(&attempts, pending, ended, &mut stopped, tally) {
                    running.push(attempts.attempt(pending, wait));
                }
                continue;
            }
            Some(()) = signals::next(&mut interrupts) => "Ctrl-C",
            Ok(()) = endings.changed() => {
                if *endings.borrow() == Some(Ending::HungUp) {
                    // As `cadre run --engine` does: the items go on there, and a resume
                    // attaches to them under their keys.
                    return None;
                }
                "a signal"
            }
            _ = ticker.tick() => {
                tick(running.len() as u64);
                continue;
            }
        };
        if asked {
            return None;
        }
        errln!("cadre: stopping every item ({why}; a second one quits at once)");
        asked = true;
        stopped.get_or_insert(StopKind::Cancelled);
        attempts.stop_all();
    }
    Some(stopped.unwrap_or(StopKind::Done))
}

/// Takes the end of `pending`'s attempt: its line told, or its next attempt (a retry) to
/// run after the wait returned; a terminal provider error, the budget spent or a lost
/// engine stops scheduling.
fn ended_attempt(
    attempts: &Attempts,
    mut pending: Box<Pending>,
    ended: Ended,
    stopped: &mut Option<StopKind>,
    tally: &mut Tally,
) -> Option<(Box<Pending>, Duration)> {
    let (report, failure) = match ended {
        Ended::Ran(report) => (report, None),
        Ended::Failed(why) => (Delegated::stopped(StopKind::Other(why.clone())), Some(why)),
        Ended::NotStarted => {
            let stop = stopped.clone().unwrap_or(StopKind::Cancelled);
            let call = pending.call_id();
            tally.tell(&not_started(&pending.key, &call, &stop, pending.attempt));
            return None;
        }
        Ended::Lost(why) => {
            let stop = StopKind::Other(format!("the engine could not be asked: {why}"));
            if stopped.is_none() {
                let run = &attempts.template.run;
                errln!("cadre: the engine could not be asked ({why}); no more items are submitted, the items in flight go on there, and `cadre resume {run}` attaches to them again");
                *stopped = Some(stop.clone());
                // What runs there is left running: a resume attaches to it under its key.
                attempts.stop.cancel();
            }
            let call = pending.call_id();
            tally.tell(&not_started(&pending.key, &call, &stop, pending.attempt));
            return None;
        }
    };
    let Delegated {
        stop,
        text,
        records,
        ..
    } = report;
    if let Some(own) = records.iter().find(|r| r.path == pending.agent.path) {
        pending.usage.add(&own.usage);
    }
    tally.keep(&pending.call_id(), &records);
    match &stop {
        StopKind::ModelError(why) if cadre_core::ModelError::text_is_terminal(why) => {
            stop_scheduling(attempts, stopped, stop.clone());
        }
        StopKind::Budget => stop_scheduling(attempts, stopped, StopKind::Budget),
        _ => {}
    }
    let failed = stop.outcome() == cadre_core::Outcome::Failed;
    if failed && pending.attempt < attempts.retries && stopped.is_none() {
        let wait = Duration::from_millis(500)
            .saturating_mul(1 << pending.attempt.min(10))
            .min(MOST_BACKOFF);
        pending.attempt += 1;
        return Some((pending, wait));
    }
    let (output, error) = ItemResult::output_of(&stop, &text, pending.typed);
    let mut r = ItemResult::new(pending.key.clone(), stop.label());
    r.call = Some(pending.call_id());
    r.output = output;
    r.error = match failure {
        Some(why) => Some(format!("the engine failed its invocation: {why}")),
        None => error,
    };
    r.usage = pending.usage;
    r.agent = Some(pending.agent.path.clone());
    r.attempts = pending.attempt + 1;
    r.ran_now = true;
    tally.tell(&r);
    None
}

/// Stops scheduling for `stop`, unless it stopped before.
fn stop_scheduling(attempts: &Attempts, stopped: &mut Option<StopKind>, stop: StopKind) {
    if stopped.is_none() {
        *stopped = Some(stop);
        attempts.stop_all();
    }
}

/// The result line of an item that did not start because the run stopped for `stop`.
fn not_started(key: &str, call: &str, stop: &StopKind, attempt: u32) -> ItemResult {
    let outcome = match stop {
        StopKind::Budget => cadre_core::Outcome::Budget,
        _ => cadre_core::Outcome::Cancelled,
    };
    let mut r = ItemResult::new(key, outcome.label());
    r.call = Some(call.to_owned());
    r.error = Some(format!("not started: {stop}"));
    r.attempts = attempt;
    r
}
