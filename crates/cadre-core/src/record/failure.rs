//! The files a run must not lose: its journal and the whole answers it hands on by path.
//! The first that cannot be written stops the run.
//!
//! A run acts only on steps its journal holds, and a parent given the head of a long answer
//! is pointed at the file that keeps the rest; when either cannot be written (a full disk,
//! a folder gone), going on would lose work without a word. So the first such failure is
//! kept, every agent of the run is cancelled, and the journal takes no step after it: it
//! ends on the last step written whole, and the run is carried on from there once the file
//! can be written again.

use crate::record::journal::{Effect, Journal, JournalError, Run, Work};
use crate::vocab::agent_path::AgentPath;
use crate::vocab::step::Step;
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// What a run could not keep.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Lost {
    /// A step could not be journaled.
    #[error("could not write its journal: {0}")]
    Journal(#[source] JournalError),
    /// A subagent's whole answer could not be kept in its file.
    #[error("could not keep the whole answer of {agent} in {}: {source}", file.display())]
    Result {
        /// The subagent's path.
        agent: AgentPath,
        /// The file.
        file: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}

/// The first file a run could not keep, and the token that stops the run when it comes.
#[derive(Debug)]
pub(crate) struct Failure {
    first: Mutex<Option<Lost>>,
    /// Set with the first failure, and kept set once it is taken to be reported.
    failed: AtomicBool,
    cancel: CancellationToken,
}

impl Failure {
    /// No failure yet; one cancels `cancel`, the run's token.
    pub fn new(cancel: CancellationToken) -> Self {
        Self {
            first: Mutex::new(None),
            failed: AtomicBool::new(false),
            cancel,
        }
    }

    /// Keeps `lost` unless an earlier failure was kept, and stops the run.
    pub fn fail(&self, lost: Lost) {
        {
            let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                tracing::warn!("stopping every agent, as the run {lost}");
                *first = Some(lost);
            }
        }
        self.failed.store(true, Ordering::Release);
        self.cancel.cancel();
    }

    /// Whether the run failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The first failure, taken to be reported (the run stays failed).
    pub fn take(&self) -> Option<Lost> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// `journal`, made to stop the run at its first failed write and to take no step once
    /// the run failed.
    pub fn guard(self: &Arc<Self>, journal: Arc<dyn Journal>) -> Arc<dyn Journal> {
        Arc::new(Guarded {
            inner: journal,
            failure: self.clone(),
            stopped: AtomicBool::new(false),
        })
    }
}

/// Logs a step of the agent at `agent` (of the run, for `None`) that `e` kept out of the
/// journal: a warning, unless the run is stopping for a failure already told.
pub(crate) fn log_unjournaled(agent: Option<&AgentPath>, e: &JournalError) {
    match (e, agent) {
        (JournalError::Stopped, _) => tracing::debug!(?agent, "not journaled: {e}"),
        (_, Some(agent)) => tracing::warn!(%agent, "could not journal a step: {e}"),
        (_, None) => tracing::warn!("could not journal a step: {e}"),
    }
}

/// A journal that reports its first failure to the run's [`Failure`].
struct Guarded {
    inner: Arc<dyn Journal>,
    failure: Arc<Failure>,
    /// Set with the first failure this journal saw or was told of: later steps are refused.
    stopped: AtomicBool,
}

#[async_trait]
impl Journal for Guarded {
    async fn append(&self, step: &Step) -> Result<(), JournalError> {
        if self.stopped.load(Ordering::Acquire) || self.failure.failed() {
            self.stopped.store(true, Ordering::Release);
            return Err(JournalError::Stopped);
        }
        match self.inner.append(step).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stopped.store(true, Ordering::Release);
                self.failure.fail(Lost::Journal(e));
                Err(JournalError::Stopped)
            }
        }
    }

    async fn steps(&self, agent: &str) -> Result<Vec<Step>, JournalError> {
        self.inner.steps(agent).await
    }

    fn once(&self, agent: &str, effect: Effect<'_>, work: Work) -> Run {
        self.inner.once(agent, effect, work)
    }

    fn release_earlier(&self) {
        self.inner.release_earlier();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::journal::FileJournal;

    fn started(agent: &str) -> Step {
        Step::Started {
            agent: agent.into(),
            agent_type: "main".into(),
            description: "d".into(),
            history: vec![cadre_model::Message::user_text("hi")],
        }
    }

    #[tokio::test]
    async fn the_first_failure_cancels_the_run_and_closes_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let failure = Arc::new(Failure::new(cancel.clone()));
        let journal = failure.guard(Arc::new(FileJournal::create(dir.path()).unwrap()));
        journal.append(&started("main")).await.unwrap();
        assert!(!cancel.is_cancelled());
        // A result file that cannot be written stops the run, and the journal with it.
        failure.fail(Lost::Result {
            agent: "main/explore#1".into(),
            file: dir.path().join("results/x.md"),
            source: std::io::Error::other("disk full"),
        });
        assert!(cancel.is_cancelled());
        let refused = journal.append(&started("main/plan#1")).await.unwrap_err();
        assert!(matches!(refused, JournalError::Stopped), "{refused}");
        // A later failure does not replace the first.
        failure.fail(Lost::Journal(JournalError::Stopped));
        let first = failure.take().unwrap();
        assert!(first.to_string().contains("results/x.md"), "{first}");
        assert!(failure.take().is_none());
        assert!(failure.failed());
        let (steps, _, _) =
            crate::record::journal::read_steps(&dir.path().join("journal.jsonl")).unwrap();
        assert_eq!(steps, [started("main")]);
    }
}
