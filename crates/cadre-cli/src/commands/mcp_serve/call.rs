//! One tool call: a cadre run of the call's type on its prompt, followed for progress and
//! cancellation, and its outcome told as MCP's tool result.

use super::tools::{declared_output, Call};
use crate::common::session::Session;
use cadre_core::{AgentOutcome, Event, Orchestrator, RunSummary};
use cadre_model::Model;
use futures::StreamExt;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use rmcp::task_manager::TaskContext;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Where a call's progress goes.
pub enum Sink {
    /// The client that asked for it with a progress token.
    Client {
        /// The client.
        peer: Peer<RoleServer>,
        /// The token its request carried.
        token: ProgressToken,
    },
    /// The call's MCP Task, whose status message `tasks/get` shows.
    Task(TaskContext),
}

/// A call's progress, told as the run goes.
pub struct Progress {
    /// Where it goes.
    pub to: Sink,
}

impl Progress {
    /// Progress told to `to`.
    pub fn to(to: Sink) -> Self {
        Self { to }
    }

    /// Starts the one task that tells the client, in order, what [`Teller::tell`] hands it:
    /// the run's loop never waits on the client, so a slow or stuck client cannot hold up
    /// the run nor its cancel.
    fn start(self) -> (Teller, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let forwarder = tokio::spawn(async move {
            // Each notification's `progress` is the next number, so they rise.
            let mut sent = 0u32;
            while let Some(message) = rx.recv().await {
                sent += 1;
                match &self.to {
                    Sink::Client { peer, token } => {
                        let param = ProgressNotificationParam::new(token.clone(), f64::from(sent))
                            .with_message(message);
                        // A client that went away cannot be told; the run goes on regardless.
                        if let Err(e) = peer.notify_progress(param).await {
                            tracing::debug!("progress not sent: {e}");
                        }
                    }
                    Sink::Task(task) => task.set_status_message(message),
                }
            }
        });
        (Teller { tx }, forwarder)
    }
}

/// Hands a call's progress to its forwarder without waiting.
struct Teller {
    tx: mpsc::UnboundedSender<String>,
}

impl Teller {
    /// Tells how the run stands, if `event` changed what it shows.
    fn tell(&self, event: &Event, orchestrator: &Orchestrator) {
        let what = match event {
            Event::Turn { turn, .. } => format!("{}: turn {turn}", event.agent()),
            Event::Started { agent_type, .. } => {
                format!("{} started ({agent_type})", event.agent())
            }
            Event::Finished { outcome, .. } => format!("{} {outcome}", event.agent()),
            Event::Usage { .. } => "tokens".to_owned(),
            _ => return,
        };
        let running = orchestrator.roster().len().saturating_sub(1);
        let message = format!(
            "{what} · {} tokens · {running} subagent{} running",
            orchestrator.tokens_used(),
            if running == 1 { "" } else { "s" }
        );
        // The forwarder ends only once this sender is dropped, so the send cannot fail.
        let _ = self.tx.send(message);
    }
}

/// Runs `call` as a run of its own in `session`'s project, its model requests through
/// `model` (the server's shared limit); `cancel` cancels it and every agent it started.
pub async fn run_call(
    session: &Session,
    model: Arc<dyn Model>,
    call: Call,
    progress: Option<Progress>,
    cancel: CancellationToken,
) -> CallToolResult {
    let mut builder = session
        .builder()
        .model(model)
        .primary(call.spec.clone())
        .max_turns(call.served.max_turns);
    if let Some(n) = call.served.budget_tokens {
        builder = builder.budget_tokens(n);
    }
    let orchestrator = match builder.build() {
        Ok(o) => o,
        Err(e) => return failed(format!("the run could not start: {e}")),
    };
    let mut events = orchestrator.events();
    let (teller, forwarder) = progress.map(Progress::start).unzip();
    let run = orchestrator.run(&call.spec.name, &call.prompt);
    tokio::pin!(run);
    let mut cancelled = false;
    // Whether the call is kept in its run folder yet (made once the run starts).
    let mut kept = false;
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            // The run is not dropped: its agents are cancelled, end as they do on Ctrl-C
            // (their commands' process groups killed), and the run's outcome is recorded.
            () = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                orchestrator.cancel_token().cancel();
            }
            Some(event) = events.next() => {
                if !kept {
                    kept = keep_served(&call, &orchestrator);
                }
                if let Some(t) = &teller {
                    t.tell(&event, &orchestrator);
                }
            }
        }
    };
    // What was told reaches the client before the result does.
    drop(teller);
    if let Some(forwarder) = forwarder {
        let _ = forwarder.await;
    }
    match result {
        Ok((outcome, summary)) => told(&call, &outcome, &summary),
        Err(e) => failed(format!("the run failed: {e}")),
    }
}

/// Keeps the call in its run's folder, once there is one, so `cadre resume` can carry the
/// run on as the call ran it; true once done (or when it never can be).
fn keep_served(call: &Call, orchestrator: &Orchestrator) -> bool {
    let Some(dir) = orchestrator.run_dir() else {
        return false;
    };
    if let Err(e) = call.served.write(dir.path()) {
        errln!(
            "cadre: warning: cannot write {} in {}: {e}; `cadre resume` cannot carry this run on",
            crate::common::served::FILE,
            dir.path().display()
        );
    }
    true
}

/// The tool result for a run that ended: its answer, or an error naming its outcome.
fn told(call: &Call, outcome: &AgentOutcome, summary: &RunSummary) -> CallToolResult {
    let run = summary
        .run_id
        .as_deref()
        .map(|id| format!("run {id} (`cadre runs show {id}`)"))
        .unwrap_or_else(|| "a run without a folder".to_owned());
    if !outcome.stop.is_done() {
        let word = serde_json::to_value(summary.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| summary.outcome.to_string());
        return failed(format!(
            "the agent did not complete: outcome {word} ({}); {run}",
            outcome.stop
        ));
    }
    if call.spec.output_schema.is_none() {
        return CallToolResult::success(vec![ContentBlock::text(outcome.text.clone())]);
    }
    // The answer was checked against the schema by the run; an object is also structured
    // content (MCP's structured results are objects).
    match serde_json::from_str::<Value>(&outcome.text) {
        Ok(value @ Value::Object(_)) => CallToolResult::structured(value),
        // A tool with an outputSchema must answer with structuredContent (MCP's rule), so
        // an answer that is no JSON object, or no JSON at all, is an error, never text.
        _ if declared_output(&call.spec).is_some() => failed(format!(
            "the answer is not the JSON object the tool's outputSchema describes; {run}"
        )),
        _ => CallToolResult::success(vec![ContentBlock::text(outcome.text.clone())]),
    }
}

/// An error result with `text`.
pub fn failed(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}
