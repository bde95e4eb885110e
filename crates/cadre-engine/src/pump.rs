//! The agent's side of the seam: its journal and its delegate are one pump that hands every
//! effect and every subagent to the invocation's driver, which alone holds the Restate
//! context (two context futures may never be polled at once).

use async_trait::async_trait;
use cadre_core::internal::{Effect, EffectOutcome, Journal, Run, Work};
use cadre_core::vocab::Step;
use cadre_core::JournalError;
use cadre_core::{Delegate, Delegated, DelegatedCall, StopKind};
use cadre_tools::Rerun;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

/// What the agent asks the driver for.
pub(crate) enum Ask {
    /// Run (or replay) an effect as one durable step.
    Effect {
        /// What it is.
        kind: EffectKind,
        /// The work to run when the journal does not hold it yet.
        work: Work,
        /// Where the outcome goes.
        reply: oneshot::Sender<EffectOutcome>,
    },
    /// Run a subagent as a call to the agent service.
    Call {
        /// The subagent.
        call: Box<DelegatedCall>,
        /// Where its result goes.
        reply: oneshot::Sender<Delegated>,
    },
}

/// An [`Effect`] that owns its strings, to cross the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EffectKind {
    /// A model request.
    Model,
    /// A tool call.
    Tool {
        /// Its `tool_use` id.
        id: String,
        /// The tool.
        name: String,
        /// Whether running it twice could do harm.
        changing: bool,
    },
}

/// The journal and delegate of one invocation's agent.
pub(crate) struct Pump {
    tx: mpsc::UnboundedSender<Ask>,
}

impl Pump {
    /// A pump and the receiver its driver serves.
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<Ask>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }
}

#[async_trait]
impl Journal for Pump {
    async fn append(&self, _step: &Step) -> Result<(), JournalError> {
        // Restate journals the effects themselves; the loop's bookkeeping steps are
        // recomputed when the handler runs again.
        Ok(())
    }

    async fn steps(&self, _agent: &str) -> Result<Vec<Step>, JournalError> {
        Ok(Vec::new())
    }

    fn once(&self, _agent: &str, effect: Effect<'_>, work: Work) -> Run {
        let kind = match effect {
            Effect::Model => EffectKind::Model,
            // A subagent is kept as a call to another agent, not as a step of this one: its
            // tool runs here and asks the driver for the call.
            Effect::Tool {
                rerun: Rerun::Resumes,
                ..
            } => return Run::Here(work),
            Effect::Tool { id, name, rerun } => EffectKind::Tool {
                id: id.to_owned(),
                name: name.to_owned(),
                changing: rerun == Rerun::Never,
            },
        };
        // The driver polls the work, outside the agent's future: it takes the span it was
        // asked for in (the agent's, or its tool call's), so its `chat` span and what it
        // starts nest there.
        let work: Work = Box::pin(work.instrument(tracing::Span::current()));
        let tx = self.tx.clone();
        Run::Durably(Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            if tx.send(Ask::Effect { kind, work, reply }).is_err() {
                return EffectOutcome::Stopped(StopKind::Cancelled);
            }
            answer
                .await
                .unwrap_or(EffectOutcome::Stopped(StopKind::Cancelled))
        }))
    }
}

#[async_trait]
impl Delegate for Pump {
    async fn run(&self, call: DelegatedCall) -> Delegated {
        let (reply, answer) = oneshot::channel();
        let lost = || Delegated::stopped(StopKind::Cancelled);
        if self
            .tx
            .send(Ask::Call {
                call: Box::new(call),
                reply,
            })
            .is_err()
        {
            return lost();
        }
        answer.await.unwrap_or_else(|_| lost())
    }
}
