//! A conversation kept open between its messages (`cadre chat`): the run as the last message
//! left it stays in memory — its journal open, the primary agent's state, the records of the
//! agents that ended — so the next message reads neither the journal nor the transcript
//! again, and costs the same however long the conversation grew. How the orchestrator
//! sends a message to one is in `converse.rs`.
//!
//! The primary agent's state is folded from the very steps the run journals, with
//! [`AgentState::apply`], as a resume reading them back would rebuild it.

use crate::record::journal::{Effect, Journal, JournalError, JournaledRun, Run, Work};
use crate::record::run_dir::RunDir;
use crate::record::transcript::RunTranscript;
use crate::record::usage::AgentRecord;
use crate::run::state::AgentState;
use crate::vocab::step::Step;
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::Mutex;

/// A conversation with a run's primary agent, kept open between its messages: give each
/// message to [`Orchestrator::converse`](crate::Orchestrator::converse) (one orchestrator per message). The first starts a
/// run; each later one goes on from where the last left it, from memory.
#[derive(Debug, Default)]
pub struct Conversation {
    pub(super) at: At,
}

/// Where a conversation stands.
#[derive(Debug, Default)]
pub(super) enum At {
    /// No run yet: the first message starts one.
    #[default]
    Nothing,
    /// A run folder, read when the next message comes.
    Folder(PathBuf),
    /// A run folder read once, not gone on with yet.
    Opened(Box<JournaledRun>),
    /// The run as the last message left it.
    Kept(Box<Kept>),
}

/// A run as its last message left it.
pub(super) struct Kept {
    /// Its folder.
    pub(super) dir: RunDir,
    /// Its folder's journal, still open.
    pub(super) journal: Arc<dyn Journal>,
    /// Its transcript, still open, when it has one.
    pub(super) transcript: Option<Arc<RunTranscript>>,
    /// The primary agent's type (and path).
    pub(super) agent_type: String,
    /// The primary agent's state.
    pub(super) primary: AgentState,
    /// How long the primary agent has run over every message, in milliseconds.
    pub(super) elapsed_ms: u64,
    /// The run's task (its first message).
    pub(super) task: String,
    /// The records of the run's other agents, which ended.
    pub(super) records: Vec<AgentRecord>,
    /// The highest number given out per agent type.
    pub(super) counters: Vec<(String, u32)>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("dir", &self.dir)
            .field("agent_type", &self.agent_type)
            .finish_non_exhaustive()
    }
}

impl At {
    /// The run folder, once there is one.
    pub(super) fn dir(&self) -> Option<&Path> {
        match self {
            At::Nothing => None,
            At::Folder(dir) => Some(dir),
            At::Opened(run) => Some(&run.dir),
            At::Kept(kept) => Some(kept.dir.path()),
        }
    }
}

impl Conversation {
    /// A conversation whose first message starts a new run.
    pub fn new() -> Self {
        Self::default()
    }

    /// The conversation of the run in folder `dir`, read when the next message comes.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self {
            at: At::Folder(dir.into()),
        }
    }

    /// The conversation of the run `run`, whose journal was read when it was opened.
    pub fn opened(run: JournaledRun) -> Self {
        Self {
            at: At::Opened(Box::new(run)),
        }
    }

    /// The run folder, once there is one.
    pub fn dir(&self) -> Option<&Path> {
        self.at.dir()
    }
}

/// What keeps a conversation open through one message: the run folder's journal, and the
/// primary agent's state folded from each step journaled for it.
pub(super) struct Keeper {
    /// The primary agent's path.
    pub(super) primary: String,
    /// Its state. Held while one of its steps is journaled, so the state takes its steps
    /// in the journal's order.
    pub(super) state: Mutex<AgentState>,
    /// The run folder's journal, once the run has one.
    pub(super) file: OnceLock<Arc<dyn Journal>>,
    /// Whether the run's team journaled a step: a team run reads its journal again.
    pub(super) team: AtomicBool,
}

impl Keeper {
    /// A keeper of the run whose primary agent is at `primary`.
    pub(super) fn new(primary: &str) -> Self {
        Self {
            primary: primary.to_owned(),
            state: Mutex::new(AgentState::default()),
            file: OnceLock::new(),
            team: AtomicBool::new(false),
        }
    }

    /// `file`, the run folder's journal, with each step also folded in here.
    pub(super) fn journal(self: &Arc<Self>, file: Arc<dyn Journal>) -> Arc<dyn Journal> {
        let _ = self.file.set(file.clone());
        Arc::new(Keeping {
            keeper: self.clone(),
            inner: file,
        })
    }

    /// Starts from `primary`, the primary agent's state when the run goes on.
    pub(super) async fn begin(&self, primary: &AgentState) {
        *self.state.lock().await = primary.clone();
    }
}

/// A run folder's journal whose primary agent's steps are also folded into its keeper.
struct Keeping {
    keeper: Arc<Keeper>,
    inner: Arc<dyn Journal>,
}

#[async_trait]
impl Journal for Keeping {
    async fn append(&self, step: &Step) -> Result<(), JournalError> {
        if matches!(step, Step::Team { .. }) {
            self.keeper.team.store(true, Ordering::Relaxed);
        }
        if step.agent() != Some(self.keeper.primary.as_str()) {
            return self.inner.append(step).await;
        }
        let mut state = self.keeper.state.lock().await;
        self.inner.append(step).await?;
        // As `AgentState::from_steps` reads them back.
        match step {
            Step::Started {
                agent_type,
                description,
                history,
                ..
            } => *state = AgentState::new(agent_type, description, history.clone()),
            other => {
                state.apply(other.clone());
            }
        }
        Ok(())
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
