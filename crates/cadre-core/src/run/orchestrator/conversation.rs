//! A conversation kept open between its messages (`cadre chat`): the run as the last message
//! left it stays in memory — its journal open, the primary agent's state, the records of the
//! agents that ended — so the next message reads neither the journal nor the transcript
//! again. What a message still costs in the length of the conversation is sending it, and
//! one copy of the history in memory (the kept state and the running agent each change
//! their own). How the orchestrator sends a message to one is in `converse.rs`.
//!
//! The primary agent's state is folded from the very steps the run journals, with
//! [`AgentState::apply`], as a resume reading them back would rebuild it.

use crate::record::journal::{
    journal_len, Effect, Journal, JournalError, JournaledRun, Run, RunState, Work,
};
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
/// message to [`Orchestrator::converse`](crate::Orchestrator::converse), one orchestrator per
/// message. The first starts a run; each later one goes on from where the last left it,
/// from memory — unless the run could not be kept (a team run, a step or a transcript line
/// lost, a message that failed or was given up) or its journal changed since (another
/// process went on with it): then it is read from its folder again.
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
    Opened(Box<Opened>),
    /// The run as the last message left it.
    Kept(Box<Kept>),
}

/// A run folder read once.
#[derive(Debug)]
pub(super) struct Opened {
    /// The run as read.
    pub(super) run: JournaledRun,
    /// The size of its journal then: another size means another process wrote to it.
    pub(super) journal_len: Option<u64>,
}

/// A run as its last message left it.
pub(super) struct Kept {
    /// Its folder.
    pub(super) dir: RunDir,
    /// Its folder's journal, still open.
    pub(super) journal: Arc<dyn Journal>,
    /// The size of that journal after the message: another size means another process
    /// wrote to it since.
    pub(super) journal_len: Option<u64>,
    /// Its transcript, still open, when it has one.
    pub(super) transcript: Option<Arc<RunTranscript>>,
    /// What its journal says of it: the primary agent's type (and path), the task, how
    /// the last message ended.
    pub(super) run: RunState,
    /// The primary agent's state.
    pub(super) primary: AgentState,
    /// How long the primary agent has run over every message, in milliseconds, as its
    /// transcript says.
    pub(super) elapsed_ms: u64,
    /// The records of the run's other agents, which ended.
    pub(super) records: Vec<AgentRecord>,
    /// The highest number given out per agent type.
    pub(super) counters: Vec<(String, u32)>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("dir", &self.dir)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl At {
    /// The run folder, once there is one.
    pub(super) fn dir(&self) -> Option<&Path> {
        match self {
            At::Nothing => None,
            At::Folder(dir) => Some(dir),
            At::Opened(opened) => Some(&opened.run.dir),
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
        let journal_len = journal_len(&run.dir);
        Self {
            at: At::Opened(Box::new(Opened { run, journal_len })),
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
    /// Its state, and the run's. Held while one of the agent's steps is journaled, so the
    /// state takes its steps in the journal's order.
    pub(super) folded: Mutex<Folded>,
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
            folded: Mutex::new(Folded::default()),
            file: OnceLock::new(),
            team: AtomicBool::new(false),
        }
    }

    /// `file`, the run folder's journal, with each step also folded in here.
    pub(super) fn journal(self: &Arc<Self>, file: Arc<dyn Journal>) -> Arc<dyn Journal> {
        // One run, one journal: it is given once, as the run starts or goes on.
        let _ = self.file.set(file.clone());
        Arc::new(Keeping {
            keeper: self.clone(),
            inner: file,
        })
    }

    /// Starts from `primary`, the primary agent's state when the run goes on, and `run`,
    /// the run's.
    pub(super) async fn begin(&self, primary: &AgentState, run: RunState) {
        *self.folded.lock().await = Folded {
            primary: primary.clone(),
            run: Some(run),
        };
    }
}

/// The primary agent's state and the run's, as the steps journaled so far make them.
#[derive(Default)]
pub(super) struct Folded {
    /// The primary agent's.
    pub(super) primary: AgentState,
    /// The run's, once its header was journaled or it was read.
    pub(super) run: Option<RunState>,
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
        let header = matches!(step, Step::Run { .. });
        if !header && step.agent() != Some(self.keeper.primary.as_str()) {
            return self.inner.append(step).await;
        }
        let mut folded = self.keeper.folded.lock().await;
        self.inner.append(step).await?;
        // As `RunState::from_steps` and `AgentState::from_steps` read them back.
        match &mut folded.run {
            Some(run) => run.take(step),
            None => folded.run = RunState::header(step),
        }
        if header {
            return Ok(());
        }
        let state = &mut folded.primary;
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
