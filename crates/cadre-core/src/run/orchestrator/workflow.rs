//! Workflow runs: a run like any other (folder, journal, transcript, usage), whose root is
//! the driver, not a model-driven agent. Each item is one agent call made as a subagent of
//! the root, journaled as `Spawned` under the call's content key, so a resumed run finds
//! every call by its content whatever order items started in: a finished one's result
//! stands, one in flight or stopped by the model API goes on from its own journal, and a
//! call that changed (an edited file) runs anew.

use super::config::RunError;
use super::handle::{AgentHandle, Start};
use super::run_context::{open_transcript, Lineage, RunContext, RunParts};
use super::{Orchestrator, RunSummary};
use crate::definitions::spec::AgentSpec;
use crate::record::events::millis;
use crate::record::journal::{Journal, JournaledRun};
use crate::record::run_dir::{write_replacing, RunDir};
use crate::run::answer::AnswerSchema;
use crate::run::spans;
use crate::run::state::AgentState;
use crate::run::workflow::results::{output_of, ResultsDigest, ResultsFile};
use crate::run::workflow::seen::Seen;
use crate::run::workflow::{
    CallKey, ItemCall, ItemResult, ItemStart, ResultSink, StartSink, WorkItem, Workflow,
};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::{Outcome, StopKind};
use crate::vocab::step::Step;
use cadre_model::{Message, Usage};
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The longest wait before a failed item is tried again.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

/// An item ready to run: its key, its call, and the id its call is journaled under.
struct Prepared {
    key: String,
    call: ItemCall,
    /// The content key, with the occurrence number of a second call of the same content.
    base: String,
    spec: AgentSpec,
    answer: Option<AnswerSchema>,
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
struct ItemRules {
    retries: u32,
    retry_failed: bool,
    follow_up: Option<(String, String)>,
    /// Told as each item's agent starts.
    on_start: Vec<StartSink>,
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

/// Where each result goes: the results file and the caller's sinks; and the counts, and
/// the digest of the results.
struct Output {
    file: ResultsFile,
    sinks: Vec<ResultSink>,
    outcomes: BTreeMap<String, u64>,
    digest: ResultsDigest,
}

impl Output {
    /// Writes `result`'s line, tells the sinks, and counts its outcome.
    fn tell(&mut self, result: &ItemResult) {
        self.file.write(result);
        self.digest.add(result);
        for sink in &mut self.sinks {
            sink(result);
        }
        *self.outcomes.entry(result.outcome.clone()).or_default() += 1;
    }

    /// `N items: a completed, b failed: …`.
    fn said(&self) -> String {
        let total: u64 = self.outcomes.values().sum();
        let parts: Vec<String> = self
            .outcomes
            .iter()
            .map(|(outcome, n)| format!("{n} {outcome}"))
            .collect();
        format!("{total} items: {}", parts.join(", "))
    }
}

/// The root's path.
fn root_path() -> AgentPath {
    AgentPath::primary(Workflow::ROOT_TYPE)
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
    /// Runs `workflow` as a new run: each item one agent call, at most its concurrency at
    /// once, each result a line of the run folder's `results.jsonl` (and told to the
    /// workflow's sinks), then its reduce. The summary's `stop` says why scheduling
    /// stopped early, if it did: a terminal provider error (`ModelError`), the budget, a
    /// cancel.
    pub async fn run_workflow(
        self: &Arc<Self>,
        workflow: Workflow,
    ) -> Result<RunSummary, RunError> {
        self.first_run()?;
        let result = self.start_workflow(workflow).await;
        self.roster.close();
        self.unless_failed(result)
    }

    /// Goes on with the workflow run `run` (its folder opened): every item whose call the
    /// journal has finished keeps its result and is not run again; the others run, those
    /// in flight going on from their journal. `workflow` gives the items again (read from
    /// the same, or an edited, file): a call whose content changed runs anew.
    pub async fn resume_workflow(
        self: &Arc<Self>,
        run: JournaledRun,
        workflow: Workflow,
    ) -> Result<RunSummary, RunError> {
        self.first_run()?;
        let result = self.go_on_workflow(run, workflow).await;
        self.roster.close();
        self.unless_failed(result)
    }

    /// Makes the run's folder and journal, and drives `workflow` in it.
    async fn start_workflow(self: &Arc<Self>, workflow: Workflow) -> Result<RunSummary, RunError> {
        let mut parts = RunParts {
            journal: self.config.journal.clone(),
            ..RunParts::default()
        };
        if let Some(runs) = &self.config.runs_dir {
            let (dir, journal) = self
                .new_run_folder(runs, Workflow::ROOT_TYPE, &workflow.name, None)
                .await?;
            parts.transcript = open_transcript(&dir);
            parts.dir = Some(dir);
            parts.journal = Some(journal);
        }
        let run = self.context(parts, self.new_team(None), false);
        keep_invocation(&run, &workflow);
        run.journal(Step::Started {
            agent: root_path(),
            agent_type: Workflow::ROOT_TYPE.to_owned(),
            description: workflow.name.clone(),
            history: Vec::new(),
        })
        .await;
        self.traced_drive(&run, workflow).await
    }

    /// Rebuilds the run `opened` from its journal, and drives `workflow` in it.
    async fn go_on_workflow(
        self: &Arc<Self>,
        opened: JournaledRun,
        workflow: Workflow,
    ) -> Result<RunSummary, RunError> {
        let JournaledRun {
            dir,
            journal,
            state,
            ..
        } = opened;
        let run_dir = RunDir::open(&dir)?;
        let run_id = run_dir.id().to_owned();
        if state.agent_type != Workflow::ROOT_TYPE {
            return Err(RunError::NotAWorkflow { run_id });
        }
        let journal: Arc<dyn Journal> = self.run_journal(Arc::new(journal), None);
        let transcript = open_transcript(&run_dir);
        let lineage = Lineage::default();
        // Only whether the root was journaled matters: its state (with every call it
        // spawned) is let go at once, not held for the whole run.
        let found = self
            .load_tree(&journal, &lineage, transcript.as_deref(), root_path())
            .await?
            .is_some();
        if !found {
            return Err(RunError::NoJournal { run_id });
        }
        self.charge_earlier(&lineage);
        // Rebuilt: the steps read to do it are not kept for the rest of the run.
        journal.release_earlier();
        let parts = RunParts {
            dir: Some(run_dir),
            journal: Some(journal),
            transcript,
            lineage,
            answer: None,
        };
        let run = self.context(parts, self.new_team(None), false);
        keep_invocation(&run, &workflow);
        self.traced_drive(&run, workflow).await
    }

    /// Charges the run's budget with what the agents of `lineage` (every item's agent the
    /// journal has) spent before the resume: `budget.tokens` is the whole run's, not each
    /// part's, so a run stopped by it and resumed does not spend it again.
    fn charge_earlier(&self, lineage: &Lineage) {
        let mut earlier = Usage::default();
        for agent in lineage.resumed.iter() {
            earlier.add(&agent.value().usage);
        }
        self.budget.charge(&earlier);
    }

    /// Why no new item may start, if none may: the provider refused the run, it was
    /// cancelled, or its budget is spent.
    fn scheduling_stopped(&self) -> Option<StopKind> {
        if let Some(reason) = self.provider_refused() {
            return Some(StopKind::ModelError(reason.to_owned()));
        }
        if self.cancel.is_cancelled() {
            return Some(StopKind::Cancelled);
        }
        self.budget.exhausted().then_some(StopKind::Budget)
    }

    /// Drives `workflow` in `run` under its `invoke_workflow` span, where its items'
    /// agents nest.
    async fn traced_drive(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        workflow: Workflow,
    ) -> Result<RunSummary, RunError> {
        let span = spans::invoke_workflow(&workflow.name, &run.id);
        self.drive(run, workflow).instrument(span).await
    }

    /// Runs the items of `workflow` in `run`, then its reduce, and summarises the run.
    async fn drive(
        self: &Arc<Self>,
        run: &Arc<RunContext>,
        mut workflow: Workflow,
    ) -> Result<RunSummary, RunError> {
        let started = Instant::now();
        let results = run
            .dir
            .as_ref()
            .map(|d| d.path().join(Workflow::RESULTS_FILE));
        let mut out = Output {
            file: ResultsFile::create(results),
            sinks: std::mem::take(&mut workflow.sinks),
            outcomes: BTreeMap::new(),
            digest: ResultsDigest::default(),
        };
        let root = self.root_handle(run);
        let rules = ItemRules {
            retries: workflow.retries,
            retry_failed: workflow.retry_failed,
            follow_up: workflow.follow_up.take(),
            on_start: std::mem::take(&mut workflow.start_sinks),
        };
        let mut seen = Seen::default();
        let mut items = std::mem::replace(&mut workflow.items, Box::new(std::iter::empty())).fuse();
        let mut running = FuturesUnordered::new();
        loop {
            // Items are taken from their source only when a slot frees: the queue is the
            // source itself, never a list of agents.
            while running.len() < workflow.concurrency {
                let Some(item) = items.next() else { break };
                match self.prepare(item, &mut seen, "") {
                    Ok(prepared) => running.push(self.run_item(run, &root, prepared, &rules)),
                    Err(result) => out.tell(&result),
                }
            }
            match running.next().await {
                Some(result) => out.tell(&result),
                None => break,
            }
        }
        drop(running);
        // Whole now: the reduce reads it where it belongs.
        out.file.finish();
        let mut answer = out.said();
        if let Some(reduced) = self.reduce(run, &root, &mut workflow, &out, &rules) {
            answer = format!("{answer}\n\n{}", reduced.await);
        }
        let stop = self.scheduling_stopped().unwrap_or(StopKind::Done);
        run.journal(Step::Finished {
            agent: root_path(),
            stop: stop.clone(),
            text: answer.clone(),
        })
        .await;
        drop(out);
        self.config.mcp.shutdown().await;
        self.record_left_behind(run);
        self.roster.record_unended(&StopKind::Killed);
        let elapsed = millis(started.elapsed());
        Ok(self.summarise_run(&workflow.name, &answer, stop, elapsed))
    }

    /// The reduce step's run, when the workflow has one and the items were not stopped:
    /// what it answered, or why it did not. Its call id carries the digest of the results
    /// in `out`: its prompt names only their file, which new results (a retry) do not
    /// change, and they must make a new reduce.
    fn reduce<'a>(
        self: &'a Arc<Self>,
        run: &'a Arc<RunContext>,
        root: &'a AgentHandle,
        workflow: &mut Workflow,
        out: &Output,
        rules: &ItemRules,
    ) -> Option<impl std::future::Future<Output = String> + 'a> {
        let (agent, prompt) = workflow.reduce.take()?;
        if self.scheduling_stopped().is_some() {
            return None;
        }
        let item = WorkItem::new("reduce", ItemCall::new(agent, prompt(out.file.path())));
        let prefix = format!("reduce:{}:", out.digest.short());
        let prepared = self.prepare(item, &mut Seen::default(), &prefix);
        // The reduce is no item: the start sinks are not told of it.
        let rules = ItemRules {
            retries: rules.retries,
            retry_failed: rules.retry_failed,
            follow_up: rules.follow_up.clone(),
            on_start: Vec::new(),
        };
        Some(async move {
            let result = match prepared {
                Ok(prepared) => self.run_item(run, root, prepared, &rules).await,
                Err(result) => *result,
            };
            match (result.output, result.error) {
                (_, Some(error)) => format!("reduce: {error}"),
                (serde_json::Value::String(text), None) => text,
                (value, None) => value.to_string(),
            }
        })
    }

    /// The handle of the root of the workflow run `run`.
    fn root_handle(&self, run: &Arc<RunContext>) -> AgentHandle {
        let model = self.config.model_id.clone();
        let workspace = self.config.workspace.clone();
        AgentHandle::new(run.clone(), root_path(), 0, model, workspace)
    }

    /// `item` ready to run: its type found, its schema compiled (once for a run of equal
    /// schemas), its content key made (`prefix` before it); or its result when it cannot
    /// run (bad input, an unknown type, a bad schema).
    fn prepare(
        &self,
        item: WorkItem,
        seen: &mut Seen,
        prefix: &str,
    ) -> Result<Prepared, Box<ItemResult>> {
        let WorkItem { key, line, call } = item;
        let failed = |why: String, outcome: &str| {
            Box::new(ItemResult {
                key: key.clone(),
                call: None,
                outcome: outcome.to_owned(),
                output: serde_json::Value::Null,
                usage: Usage::default(),
                agent: None,
                line,
                error: Some(why),
                attempts: 0,
                ran_now: false,
            })
        };
        let call = call.map_err(|why| failed(why, ItemResult::BAD_INPUT))?;
        let Some(spec) = self.registry.get(&call.agent) else {
            let known: Vec<&str> = self.registry.all().map(|s| s.name.as_str()).collect();
            let why = format!(
                "unknown agent type {:?}; the types are: {}",
                call.agent,
                known.join(", ")
            );
            return Err(failed(why, "failed: unknown type"));
        };
        if let Some(why) = spec.unusable() {
            return Err(failed(why.to_string(), "failed: unusable type"));
        }
        let answer = seen
            .schema(call.output_schema.as_ref())
            .map_err(|why| failed(format!("bad output schema: {why}"), ItemResult::BAD_INPUT))?;
        let model = self.model_for(spec, &self.config.model_id);
        let content = CallKey::of(
            &call.agent,
            &call.prompt,
            call.output_schema.as_ref(),
            &call.limits,
            &model,
        );
        Ok(Prepared {
            base: seen.call_id(prefix, content),
            spec: spec.clone(),
            key,
            call,
            answer,
        })
    }

    /// Runs `item` to its result: its last attempt found in the journal (its result stands,
    /// or it goes on), then fresh attempts while it fails and retries are left.
    async fn run_item(
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
        let description = format!("item {}", item.key);
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

/// Keeps how `workflow` was invoked in the run folder of `run`, when it says.
fn keep_invocation(run: &RunContext, workflow: &Workflow) {
    let (Some(dir), Some(invocation)) = (&run.dir, &workflow.invocation) else {
        return;
    };
    let file = dir.path().join(Workflow::INVOCATION_FILE);
    let written = serde_json::to_vec_pretty(invocation)
        .map_err(std::io::Error::other)
        .and_then(|bytes| write_replacing(&file, &bytes));
    if let Err(e) = written {
        tracing::warn!("cannot write {}: {e}", file.display());
    }
}
