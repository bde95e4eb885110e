//! How the orchestrator sends a message to a [`Conversation`] kept open between messages:
//! the first starts the run, each later one goes on from the run kept in memory (or read
//! from its folder, when it could not be kept).

use super::config::RunError;
use super::conversation::{At, Conversation, Keeper, Kept};
use super::resume::LoadedRun;
use super::run_context::{Lineage, RunParts};
use super::{Orchestrator, RunSummary};
use crate::record::journal::{Journal, JournaledRun};
use crate::record::transcript::Earlier;
use crate::vocab::outcome::AgentOutcome;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a message brought: the primary agent's outcome and the run's summary.
type Said = Result<(AgentOutcome, RunSummary), RunError>;

/// Opens the run in folder `dir`.
fn open_folder(dir: &Path) -> Result<JournaledRun, RunError> {
    match JournaledRun::open(dir)? {
        Some(run) => Ok(run),
        None => Err(RunError::NoJournal {
            run_id: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }),
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
