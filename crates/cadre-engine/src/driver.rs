//! One invocation's driver: the only owner of the Restate context. It runs the agent's
//! future and serves what the agent asks for, one request at a time and in the order
//! asked, so the sequence of journal entries is a function of the journal itself. The
//! `CadreAgent` service that runs it is here too: the driver calls that same service for
//! each `Task` call.

use crate::pump::{Ask, EffectKind};
use crate::service::{CadreRosterClient, CadreRunClient};
use crate::wire::{Acquire, AgentCall, AgentTranscript, Grant, Progress};
use crate::worker::{Checkpoints, Prepared, Worker};
use cadre_core::internal::{Done, EffectOutcome, ModelStep, Work};
use cadre_core::{Delegated, DelegatedCall, StopKind};
use cadre_tools::Finished;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Runs one agent of a run to its end, as one durable invocation.
pub struct CadreAgent(pub Arc<Worker>);

#[restate_sdk::service]
impl CadreAgent {
    /// Runs the agent `call` names; its model requests and tool calls are durable steps and
    /// its `Task` calls are calls to this same service, on whichever worker takes them.
    #[handler]
    async fn run(
        &self,
        ctx: Context<'_>,
        Json(call): Json<AgentCall>,
    ) -> Result<Json<Delegated>, HandlerError> {
        drive(&ctx, &self.0, call).await.map(Json)
    }
}

/// A model step as journaled: the step and the worker that ran it.
#[derive(Debug, Serialize, Deserialize)]
struct KeptModel {
    worker: String,
    step: Done,
}

/// A tool step as journaled.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kept", rename_all = "snake_case")]
enum KeptTool {
    /// It ran: its output, and the checkpoint of the writer's tree after it.
    Ran {
        output: Box<Done>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint: Option<String>,
    },
    /// A changing call whose intent an earlier attempt had journaled: not run again.
    Interrupted,
}

/// The HTTP status Restate gives an await cut short by cancellation.
const CANCELLED: u16 = 409;

/// Runs the agent of `call` on this worker to its end (or replays it from the journal).
pub(crate) async fn drive(
    ctx: &Context<'_>,
    worker: &Arc<Worker>,
    call: AgentCall,
) -> Result<Delegated, HandlerError> {
    let mut line = announce(ctx, worker, &call).await?;
    let prepared = match worker.prepare(&call).await {
        Ok(prepared) => prepared,
        // A worker set up wrong stays wrong: the run fails and says why, instead of
        // being retried forever.
        Err(e) if e.is_lasting() => return Err(TerminalError::new(e.to_string()).into()),
        Err(e) => return Err(e.into()),
    };
    let mut driver = Driver::new(ctx, &call, worker, &prepared);
    let mut asks = prepared.asks;
    let orchestrator = prepared.orchestrator.clone();
    let agent = orchestrator.run_delegated(&call.agent);
    tokio::pin!(agent);
    let mut children = DurableFuturesUnordered::new();
    let mut waiting: Vec<Option<oneshot::Sender<Delegated>>> = Vec::new();
    let (outcome, records) = loop {
        tokio::select! {
            biased;
            done = &mut agent => break done,
            Some(ask) = asks.recv() => match ask {
                Ask::Call { call: child, reply } => {
                    if driver.cancelled {
                        let _ = reply.send(Delegated::stopped(StopKind::Cancelled));
                        continue;
                    }
                    let mut child = *child;
                    child.trace = driver.kept_trace(child.trace.take()).await;
                    let input = driver.child_call(child);
                    children.push(ctx.service_client::<CadreAgentClient>().run(Json(input)).call());
                    waiting.push(Some(reply));
                }
                Ask::Effect { kind, work, reply } => {
                    let outcome = driver.serve(kind, work, &mut line).await;
                    let _ = reply.send(outcome);
                }
            },
            next = children.next(), if !children.is_empty() => match next {
                Ok(Some((i, result))) => {
                    if let Some(reply) = waiting.get_mut(i).and_then(Option::take) {
                        let _ = reply.send(child_report(result));
                    }
                }
                Ok(None) => {}
                Err(_) => driver.on_cancel(),
            },
        }
    };
    let mut records = records;
    for record in records.iter_mut().filter(|r| r.path == call.agent.path) {
        record.worker = Some(line.worker.clone());
    }
    let report = match &prepared.tree {
        Some(tree) => driver.finish(tree.clone()).await?,
        None => String::new(),
    };
    keep_transcript(ctx, &call, prepared.transcripts.as_ref()).await?;
    line.done = true;
    ctx.object_client::<CadreRosterClient>(call.run.clone())
        .progress(Json(line))
        .send();
    Ok(Delegated {
        stop: outcome.stop,
        text: outcome.text,
        report,
        records,
    })
}

/// Tells the run's objects that the agent of `call` starts on `worker` (opening the run
/// for the primary agent); returns its roster line. The worker's name is journaled: every
/// payload sent from here is built from journaled values only, so a replay elsewhere sends
/// the same ones.
async fn announce(
    ctx: &Context<'_>,
    worker: &Worker,
    call: &AgentCall,
) -> Result<Progress, HandlerError> {
    let began_on = worker.name().to_owned();
    let began_on: String = ctx
        .run(|| async move { Ok(began_on) })
        .name("worker")
        .await?;
    if call.agent.depth == 0 {
        ctx.object_client::<CadreRunClient>(call.run.clone())
            .open(ctx.invocation_id().to_owned())
            .send();
    }
    let line = Progress {
        path: call.agent.path.clone(),
        agent_type: call.agent.spec.name.clone(),
        description: call.agent.description.clone(),
        worker: began_on,
        turn: 0,
        tokens: 0,
        tool: None,
        done: false,
    };
    ctx.object_client::<CadreRosterClient>(call.run.clone())
        .progress(Json(line.clone()))
        .send();
    tracing::info!(
        invocation = ctx.invocation_id(),
        agent = %call.agent.path,
        "attempt starts"
    );
    Ok(line)
}

/// What a delegated subagent's call came back with, as its parent is told.
fn child_report(result: Result<Json<Delegated>, TerminalError>) -> Delegated {
    match result {
        Ok(Json(report)) => report,
        Err(e) if e.code() == CANCELLED => Delegated::stopped(StopKind::Cancelled),
        Err(e) => Delegated::stopped(StopKind::ModelError(format!(
            "the subagent failed: {}",
            e.message()
        ))),
    }
}

/// Carries the transcript the agent of `call` wrote in `transcripts` to the run's roster.
async fn keep_transcript(
    ctx: &Context<'_>,
    call: &AgentCall,
    transcripts: Option<&tempfile::TempDir>,
) -> Result<(), HandlerError> {
    // Journaled first: a replay elsewhere writes its own transcript, with other times, and
    // must send what the first attempt sent.
    let written = crate::worker::written_transcript(transcripts, &call.run);
    let Json(kept) = ctx
        .run(|| async move { Ok(Json(written)) })
        .name("transcript")
        .await?;
    if let Some(text) = kept {
        // Awaited: the client asks for the transcripts once the primary agent has ended, and
        // a one-way call might not have been kept by then.
        let stored = ctx
            .object_client::<CadreRosterClient>(call.run.clone())
            .keep(Json(AgentTranscript {
                path: call.agent.path.clone(),
                text,
            }))
            .call()
            .await;
        if let Err(e) = stored {
            tracing::warn!(agent = %call.agent.path, "the transcript was not kept: {}", e.message());
        }
    }
    Ok(())
}

/// The state of one invocation's driver.
struct Driver<'a, 'ctx> {
    ctx: &'a Context<'ctx>,
    call: &'a AgentCall,
    /// This attempt's own mark, journaled as a changing tool's intent.
    nonce: String,
    /// This worker's name.
    worker: String,
    /// The writing agent's tree, when it has one.
    tree: Option<Arc<dyn Checkpoints>>,
    /// Whether this attempt has brought the tree to the journaled checkpoint yet.
    restored: Arc<AtomicBool>,
    /// The tree's last journaled checkpoint.
    checkpoint: Option<String>,
    /// Cancels the agent's loop.
    cancel: CancellationToken,
    /// Whether Restate cancelled the invocation.
    cancelled: bool,
    /// Model steps so far (they name the steps).
    models: u32,
}

impl<'a, 'ctx> Driver<'a, 'ctx> {
    /// The driver of `call`'s attempt on `worker`, with what it `prepared`.
    fn new(
        ctx: &'a Context<'ctx>,
        call: &'a AgentCall,
        worker: &Worker,
        prepared: &Prepared,
    ) -> Self {
        Self {
            ctx,
            call,
            nonce: worker.attempt_nonce(),
            worker: worker.name().to_owned(),
            tree: prepared.tree.clone(),
            restored: Arc::new(AtomicBool::new(false)),
            checkpoint: None,
            cancel: prepared.orchestrator.cancel_token(),
            cancelled: false,
            models: 0,
        }
    }

    /// Restate cancelled the invocation: the agent stops at its next step.
    fn on_cancel(&mut self) {
        self.cancelled = true;
        self.cancel.cancel();
    }

    /// The input of a subagent's invocation; it starts from this agent's last checkpoint.
    fn child_call(&self, agent: DelegatedCall) -> AgentCall {
        AgentCall {
            run: self.call.run.clone(),
            agent,
            base: self.checkpoint.clone().or_else(|| self.call.base.clone()),
            settings: self.call.settings.clone(),
        }
    }

    /// The caller's trace context for a subagent's call, journaled: a replay makes new
    /// spans, and the call it sends again must carry the same bytes. Journaled whether this
    /// worker traces or not, so that every attempt journals the same steps.
    async fn kept_trace(&mut self, trace: Option<String>) -> Option<String> {
        let kept = self
            .ctx
            .run(|| async move { Ok(Json(trace)) })
            .name("trace")
            .await;
        match kept {
            Ok(Json(trace)) => trace,
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }

    /// The outcome of an await that failed: cancellation stops the agent.
    fn failed(&mut self, e: &TerminalError) -> EffectOutcome {
        if e.code() == CANCELLED {
            self.on_cancel();
            EffectOutcome::Stopped(StopKind::Cancelled)
        } else {
            EffectOutcome::Stopped(StopKind::ModelError(e.message().to_owned()))
        }
    }

    /// Runs (or replays) one effect as durable steps.
    async fn serve(&mut self, kind: EffectKind, work: Work, line: &mut Progress) -> EffectOutcome {
        if self.cancelled {
            return EffectOutcome::Stopped(StopKind::Cancelled);
        }
        match kind {
            EffectKind::Model => self.model(work, line).await,
            EffectKind::Tool { id, name, changing } => self.tool(&id, &name, changing, work).await,
        }
    }

    /// A model request, within the run's slots and budget.
    async fn model(&mut self, work: Work, line: &mut Progress) -> EffectOutcome {
        let run = self.call.run.clone();
        let (awakeable, granted) = self.slot().await;
        let grant = match granted {
            Ok(Json(grant)) => grant,
            Err(e) => {
                // Cut short (cancelled): the ask is still in line, or its slot was granted
                // to an agent that will not give it back; either is taken back.
                self.ctx
                    .object_client::<CadreRunClient>(run.clone())
                    .withdraw(awakeable)
                    .send();
                return self.failed(&e);
            }
        };
        let release = |tokens: u64| {
            self.ctx
                .object_client::<CadreRunClient>(run.clone())
                .release(tokens)
                .send();
        };
        if grant.exhausted {
            release(0);
            return EffectOutcome::Stopped(StopKind::Budget);
        }
        self.models += 1;
        // The roster shows the turn under way, from its request on, as a local run's does.
        line.turn += 1;
        line.tool = None;
        self.show(line);
        let worker = self.worker.clone();
        let (agent, n) = (self.call.agent.path.clone(), self.models);
        let kept = self
            .ctx
            .run(|| async move {
                tracing::debug!(%agent, "model step {n} runs");
                let step = work.await;
                Ok(Json(KeptModel { worker, step }))
            })
            .name(format!("model {}", self.models))
            .await;
        let Json(kept) = match kept {
            Ok(kept) => kept,
            Err(e) => {
                release(0);
                return self.failed(&e);
            }
        };
        let response = match &kept.step {
            Done::Model(ModelStep::Response(r)) => Some(r),
            _ => None,
        };
        let tokens = response.as_ref().map_or(0, |r| r.usage.total());
        self.count(tokens).await;
        line.tokens += tokens;
        line.worker = kept.worker;
        line.tool = response.and_then(|r| {
            let names: Vec<String> = r.tool_uses().map(|t| t.name.clone()).collect();
            (!names.is_empty()).then(|| names.join(", "))
        });
        self.show(line);
        EffectOutcome::Ran(kept.step)
    }

    /// Asks the run for a model slot within its budget, and waits for it; the awakeable
    /// it asked with (to withdraw the ask) and the grant.
    async fn slot(&self) -> (String, Result<Json<Grant>, TerminalError>) {
        let settings = &self.call.settings;
        let (awakeable, grant) = self.ctx.awakeable::<Json<Grant>>();
        self.ctx
            .object_client::<CadreRunClient>(self.call.run.clone())
            .acquire(Json(Acquire {
                awakeable: awakeable.clone(),
                max_parallel: settings.max_parallel,
                budget_tokens: settings.budget_tokens,
            }))
            .send();
        (awakeable, grant.await)
    }

    /// Gives the slot back with the `tokens` the step spent. Awaited: what the tree spent
    /// is counted before this agent goes on, so a subagent it starts next already sees it
    /// when it asks for a slot.
    async fn count(&mut self, tokens: u64) {
        let counted = self
            .ctx
            .object_client::<CadreRunClient>(self.call.run.clone())
            .release(tokens)
            .call()
            .await;
        if let Err(e) = counted {
            // The slot is given back all the same: the call is journaled.
            if e.code() == CANCELLED {
                self.on_cancel();
            }
        }
    }

    /// Sends the agent's roster `line` to the run's roster.
    fn show(&self, line: &Progress) {
        self.ctx
            .object_client::<CadreRosterClient>(self.call.run.clone())
            .progress(Json(line.clone()))
            .send();
    }

    /// A tool call; a changing one journals its intent first, and a writer's tree is
    /// checkpointed after it inside the same step.
    async fn tool(&mut self, id: &str, name: &str, changing: bool, work: Work) -> EffectOutcome {
        let fresh = if changing {
            let nonce = self.nonce.clone();
            let kept = self
                .ctx
                .run(|| async move { Ok(nonce) })
                .name(format!("intent {id}"))
                .await;
            match kept {
                Ok(kept) => kept == self.nonce,
                Err(e) => return self.failed(&e),
            }
        } else {
            true
        };
        let tree = self.tree.clone();
        let restored = self.restored.clone();
        let target = self.checkpoint.clone();
        let message = format!("{}: {name} {id}", self.call.agent.path);
        let kept = self
            .ctx
            .run(|| async move {
                if let Some(tree) = &tree {
                    restore(tree.as_ref(), &restored, target.as_deref()).await?;
                }
                if !fresh {
                    // The intent is an earlier attempt's: the call may have taken effect.
                    return Ok(Json(KeptTool::Interrupted));
                }
                let output = work.await;
                let checkpoint = match &tree {
                    Some(tree) if changing => Some(tree.checkpoint(&message).await?),
                    _ => None,
                };
                Ok(Json(KeptTool::Ran {
                    output: Box::new(output),
                    checkpoint,
                }))
            })
            .name(format!("tool {name} {id}"))
            .await;
        match kept {
            Ok(Json(KeptTool::Ran { output, checkpoint })) => {
                if checkpoint.is_some() {
                    self.checkpoint = checkpoint;
                }
                EffectOutcome::Ran(*output)
            }
            Ok(Json(KeptTool::Interrupted)) => EffectOutcome::Interrupted,
            Err(e) => self.failed(&e),
        }
    }

    /// Commits and pushes the writer's branch as one last step; its report is journaled.
    async fn finish(&mut self, tree: Arc<dyn Checkpoints>) -> Result<String, HandlerError> {
        let restored = self.restored.clone();
        let target = self.checkpoint.clone();
        let message = format!("{}: {}", self.call.agent.path, self.call.agent.description);
        let primary = self.call.agent.depth == 0;
        let report: String = self
            .ctx
            .run(|| async move {
                restore(tree.as_ref(), &restored, target.as_deref()).await?;
                Ok(match tree.finish(&message).await? {
                    // The person reads the primary agent's answer: no news is no news.
                    Finished::Unchanged if primary => String::new(),
                    Finished::Unchanged => {
                        "\n\n[It changed no file; its worktree was removed and no branch was pushed.]"
                            .to_owned()
                    }
                    Finished::Committed { branch, diffstat } => format!(
                        "\n\n[Its changes are committed on branch {branch}, pushed to the run's repository:\n{diffstat}]"
                    ),
                })
            })
            .name("finish")
            .await?;
        Ok(report)
    }
}

/// Brings the tree to `target` once per attempt: a replay on another worker goes on from
/// the files the journaled steps left.
async fn restore(
    tree: &dyn Checkpoints,
    restored: &AtomicBool,
    target: Option<&str>,
) -> Result<(), HandlerError> {
    if restored.load(Ordering::SeqCst) {
        return Ok(());
    }
    if let Some(sha) = target {
        tree.restore(sha).await?;
    }
    restored.store(true, Ordering::SeqCst);
    Ok(())
}
