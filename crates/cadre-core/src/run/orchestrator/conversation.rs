//! A conversation kept open between its messages (`cadre chat`): the run as the last message
//! left it stays in memory — its journal open, the primary agent's state, the records of the
//! agents that ended — so the next message reads neither the journal nor the transcript
//! again, and costs the same however long the conversation grew.
//!
//! The primary agent's state is folded from the very steps the run journals, with
//! [`AgentState::apply`], as a resume reading them back would rebuild it.

use super::config::RunError;
use super::resume::LoadedRun;
use super::run_context::{Lineage, RunParts};
use super::{Orchestrator, RunSummary};
use crate::record::journal::{Effect, Journal, JournalError, JournaledRun, Run, Work};
use crate::record::run_dir::RunDir;
use crate::record::transcript::{Earlier, RunTranscript};
use crate::record::usage::AgentRecord;
use crate::run::state::AgentState;
use crate::vocab::outcome::AgentOutcome;
use crate::vocab::step::Step;
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::Mutex;

/// A conversation with a run's primary agent, kept open between its messages: give each
/// message to [`Orchestrator::converse`] (one orchestrator per message). The first starts a
/// run; each later one goes on from where the last left it, from memory.
#[derive(Debug, Default)]
pub struct Conversation {
    at: At,
}

/// Where a conversation stands.
#[derive(Debug, Default)]
enum At {
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
struct Kept {
    /// Its folder.
    dir: RunDir,
    /// Its folder's journal, still open.
    journal: Arc<dyn Journal>,
    /// Its transcript, still open, when it has one.
    transcript: Option<Arc<RunTranscript>>,
    /// The primary agent's type (and path).
    agent_type: String,
    /// The primary agent's state.
    primary: AgentState,
    /// How long the primary agent has run over every message, in milliseconds.
    elapsed_ms: u64,
    /// The run's task (its first message).
    task: String,
    /// The records of the run's other agents, which ended.
    records: Vec<AgentRecord>,
    /// The highest number given out per agent type.
    counters: Vec<(String, u32)>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("dir", &self.dir)
            .field("agent_type", &self.agent_type)
            .finish_non_exhaustive()
    }
}

/// What a message brought: the primary agent's outcome and the run's summary.
type Said = Result<(AgentOutcome, RunSummary), RunError>;

/// Opens the run in folder `dir`.
fn open_folder(dir: &Path) -> Result<JournaledRun, RunError> {
    match JournaledRun::open(dir)? {
        Some(run) => Ok(run),
        None => Err(RunError::NoJournal(
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        )),
    }
}

impl At {
    /// The run folder, once there is one.
    fn dir(&self) -> Option<&Path> {
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
    primary: String,
    /// Its state. Held while one of its steps is journaled, so the state takes its steps
    /// in the journal's order.
    state: Mutex<AgentState>,
    /// The run folder's journal, once the run has one.
    file: OnceLock<Arc<dyn Journal>>,
    /// Whether the run's team journaled a step: a team run reads its journal again.
    team: AtomicBool,
}

impl Keeper {
    /// A keeper of the run whose primary agent is at `primary`.
    fn new(primary: &str) -> Self {
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
    async fn begin(&self, primary: &AgentState) {
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

impl Orchestrator {
    /// Sends `message` to `conversation`, whose primary agent is of type `agent_type` when
    /// it starts a run: the first message starts one, each later one continues it as a
    /// follow-up (see [`resume`](Self::resume)). The run stays open in `conversation` for
    /// the next message, which a new orchestrator sends.
    pub async fn converse(
        self: &Arc<Self>,
        conversation: &mut Conversation,
        agent_type: &str,
        message: &str,
    ) -> Result<(AgentOutcome, RunSummary), RunError> {
        let at = std::mem::take(&mut conversation.at);
        let folder = at.dir().map(Path::to_path_buf);
        let result = self.say(at, agent_type, message).await;
        self.roster.close();
        let (result, keeper) = match result {
            Ok((said, keeper)) => (Ok(said), Some(keeper)),
            Err(e) => (Err(e), None),
        };
        conversation.at = self.keep(keeper, &result, folder);
        self.unless_failed(result)
    }

    /// Sends `message` to the conversation at `at`; gives back what kept it.
    async fn say(
        self: &Arc<Self>,
        at: At,
        agent_type: &str,
        message: &str,
    ) -> Result<((AgentOutcome, RunSummary), Arc<Keeper>), RunError> {
        // A fresh start claims the orchestrator itself, once it knows the type.
        if !matches!(at, At::Nothing) {
            self.first_run()?;
        }
        let (keeper, said) = match at {
            At::Nothing => {
                let keeper = Arc::new(Keeper::new(agent_type));
                let said = self.start(agent_type, message, None, Some(&keeper)).await;
                (keeper, said)
            }
            At::Folder(dir) => self.go_on_opened(open_folder(&dir)?, message).await?,
            At::Opened(run) => self.go_on_opened(*run, message).await?,
            At::Kept(kept) => {
                tracing::debug!(run = kept.dir.id(), "the conversation goes on from memory");
                let keeper = Arc::new(Keeper::new(&kept.agent_type));
                let loaded = self.reload(*kept, &keeper)?;
                keeper.begin(&loaded.primary).await;
                let ended = loaded.primary.finished.as_ref().map(|(s, _)| s.clone());
                let said = self.go_on(loaded, ended, Some(message)).await;
                (keeper, said)
            }
        };
        Ok((said?, keeper))
    }

    /// `journal` guarded for the run, its steps going to `kept` too when given.
    pub(super) fn run_journal(
        &self,
        journal: Arc<dyn Journal>,
        kept: Option<&Arc<Keeper>>,
    ) -> Arc<dyn Journal> {
        self.failure.guard(match kept {
            Some(keeper) => keeper.journal(journal),
            None => journal,
        })
    }

    /// Sends `message` to the opened `run`, read from its journal now.
    async fn go_on_opened(
        self: &Arc<Self>,
        run: JournaledRun,
        message: &str,
    ) -> Result<(Arc<Keeper>, Said), RunError> {
        tracing::debug!(run = %run.dir.display(), "the conversation goes on from its journal");
        let keeper = Arc::new(Keeper::new(&run.state.agent_type));
        let ended = run.state.finished.clone();
        let loaded = self.load_run(run, true, Some(&keeper)).await?;
        keeper.begin(&loaded.primary).await;
        let said = self.go_on(loaded, ended, Some(message)).await;
        Ok((keeper, said))
    }

    /// The run `kept` as a resume would have read it from its folder, its steps going to
    /// `keeper` too; the records of its ended agents count in this run's usage.
    fn reload(&self, kept: Kept, keeper: &Arc<Keeper>) -> Result<LoadedRun, RunError> {
        let spec = self.primary_for(&kept.agent_type)?;
        let earlier = Earlier {
            elapsed_ms: kept.elapsed_ms,
            messages: kept.primary.history.len(),
            last_blocks: kept.primary.history.last().map_or(0, |m| m.content.len()),
        };
        let transcript = kept.transcript.and_then(|t| {
            t.carried_on(&kept.agent_type, earlier)
                .map_err(|e| tracing::warn!("could not go on writing the transcript: {e}"))
                .ok()
                .map(Arc::new)
        });
        let lineage = Lineage::default();
        for (agent_type, n) in kept.counters {
            lineage.counters.insert(agent_type, n);
        }
        self.roster.record_all(kept.records);
        let parts = RunParts {
            journal: Some(self.run_journal(kept.journal, Some(keeper))),
            transcript,
            lineage,
            answer: None,
            dir: Some(kept.dir.clone()),
        };
        Ok(LoadedRun {
            id: kept.dir.id().to_owned(),
            parts,
            spec,
            primary: kept.primary,
            task: kept.task,
        })
    }

    /// Where the conversation stands after a message: kept in memory when the run went
    /// through whole; else its folder (when it has one), read again at the next message.
    fn keep(&self, keeper: Option<Arc<Keeper>>, result: &Said, folder: Option<PathBuf>) -> At {
        let run = self.current.get();
        let dir = run.and_then(|r| r.dir.clone());
        let folder = dir.as_ref().map(|d| d.path().to_path_buf()).or(folder);
        let fallback = || folder.clone().map_or(At::Nothing, At::Folder);
        let (Some(keeper), Ok((_, summary)), Some(run), Some(dir)) = (keeper, result, run, dir)
        else {
            return fallback();
        };
        let (Some(journal), Ok(mut state)) = (keeper.file.get(), keeper.state.try_lock()) else {
            return fallback();
        };
        // A lost step, or a team (whose state a resume rebuilds from the journal): read
        // the run again.
        if self.failure.failed() || run.teams_on || keeper.team.load(Ordering::Relaxed) {
            return fallback();
        }
        let records = self
            .roster
            .records()
            .into_iter()
            .filter(|r| r.path != keeper.primary)
            .collect();
        At::Kept(Box::new(Kept {
            dir,
            journal: journal.clone(),
            transcript: run.transcript.clone(),
            agent_type: keeper.primary.clone(),
            primary: std::mem::take(&mut *state),
            elapsed_ms: summary.elapsed_ms,
            task: summary.task.clone(),
            records,
            counters: run
                .lineage
                .counters
                .iter()
                .map(|e| (e.key().clone(), *e.value()))
                .collect(),
        }))
    }
}
