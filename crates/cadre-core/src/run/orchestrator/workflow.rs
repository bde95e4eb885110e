//! Workflow runs: a run like any other (folder, journal, transcript, usage), whose root is
//! the driver, not a model-driven agent. Each item is one agent call made as a subagent of
//! the root, journaled as `Spawned` under the call's content key, so a resumed run finds
//! every call by its content whatever order items started in: a finished one's result
//! stands, one in flight or stopped by the model API goes on from its own journal, and a
//! call that changed (an edited file) runs anew.

use super::config::RunError;
use super::handle::AgentHandle;
use super::run_context::{open_transcript, Lineage, RunContext, RunParts};
use super::workflow_item::{item_description, ItemRules, Prepared};
use super::{Orchestrator, RunSummary};
use crate::record::events::millis;
use crate::record::journal::{Journal, JournaledRun};
use crate::record::run_dir::{write_replacing, RunDir};
use crate::run::spans;
use crate::run::state::AgentState;
use crate::run::workflow::results::{ResultsDigest, ResultsFile};
use crate::run::workflow::seen::Seen;
use crate::run::workflow::{CallKey, ItemCall, ItemResult, ResultSink, WorkItem, Workflow};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use cadre_model::Usage;
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

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
        // A finished item is kept as its result alone, not its conversation: only the
        // items in flight at the kill (and one given a follow-up) are rebuilt whole.
        let follow_up = workflow
            .follow_up
            .as_ref()
            .map(|(key, _)| item_description(key));
        let settled = |path: &AgentPath, state: &AgentState| {
            path.depth() == 1
                && state
                    .finished
                    .as_ref()
                    .is_some_and(|(stop, _)| !stop.resumes())
                && follow_up.as_deref() != Some(state.description.as_str())
        };
        let rebuilt = self
            .load_tree(
                &journal,
                &lineage,
                transcript.as_deref(),
                root_path(),
                &settled,
            )
            .await?;
        if rebuilt.root.is_none() {
            return Err(RunError::NoJournal { run_id });
        }
        self.charge_earlier(&rebuilt.spent);
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

    /// Why no new item may start, if none may: the provider refused the run, it was
    /// cancelled, or its budget is spent.
    pub(super) fn scheduling_stopped(&self) -> Option<StopKind> {
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
        let rules = Arc::new(ItemRules {
            retries: workflow.retries,
            retry_failed: workflow.retry_failed,
            follow_up: workflow.follow_up.take(),
            on_start: std::mem::take(&mut workflow.start_sinks),
        });
        let mut seen = Seen::default();
        let mut items = std::mem::replace(&mut workflow.items, Box::new(std::iter::empty())).fuse();
        let mut running = FuturesUnordered::new();
        loop {
            // Items are taken from their source only when a slot frees: the queue is the
            // source itself, never a list of agents.
            while running.len() < workflow.concurrency {
                let Some(item) = items.next() else { break };
                match self.prepare(item, &mut seen, "") {
                    Ok(prepared) => running.push(self.spawn_item(run, &root, prepared, &rules)),
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
