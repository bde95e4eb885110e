//! How the orchestrator sends a message to a [`Conversation`] kept open between messages:
//! the first starts the run, each later one goes on from the run kept in memory (or read
//! from its folder, when it could not be kept).

use super::config::RunError;
use super::conversation::{At, Conversation, Keeper, Kept};
use super::resume::LoadedRun;
use super::run_context::{open_transcript, Lineage, RunParts};
use super::{Orchestrator, RunSummary};
use crate::record::journal::{journal_len, Journal, JournaledRun};
use crate::record::transcript::Earlier;
use crate::vocab::agent_path::AgentPath;
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
        // Refused before the conversation is touched: this orchestrator's run is another's.
        if self.has_run() {
            return Err(RunError::AlreadyRan);
        }
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
            At::Opened(opened) if unchanged(&opened.run.dir, opened.journal_len) => {
                self.go_on_opened(opened.run, message).await?
            }
            At::Opened(opened) => {
                let dir = opened.run.dir.clone();
                // Let go of the stale handle before the journal is opened again.
                drop(opened);
                self.go_on_opened(open_folder(&dir)?, message).await?
            }
            At::Kept(kept) if unchanged(kept.dir.path(), kept.journal_len) => {
                tracing::debug!(run = kept.dir.id(), "the conversation goes on from memory");
                let keeper = Arc::new(Keeper::new(&kept.run.agent_type));
                let ended = kept.run.finished.clone();
                let run = kept.run.clone();
                let loaded = self.reload(*kept, &keeper)?;
                keeper.begin(&loaded.primary, run).await;
                let said = self.go_on(loaded, ended, Some(message)).await;
                (keeper, said)
            }
            At::Kept(kept) => {
                let dir = kept.dir.path().to_path_buf();
                drop(kept);
                self.go_on_opened(open_folder(&dir)?, message).await?
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
        let state = run.state.clone();
        let loaded = self.load_run(run, true, Some(&keeper)).await?;
        keeper.begin(&loaded.primary, state.clone()).await;
        let said = self.go_on(loaded, state.finished, Some(message)).await;
        Ok((keeper, said))
    }

    /// The run `kept` as a resume would have read it from its folder, its steps going to
    /// `keeper` too; the records of its ended agents count in this run's usage.
    fn reload(&self, kept: Kept, keeper: &Arc<Keeper>) -> Result<LoadedRun, RunError> {
        let Kept {
            dir,
            journal,
            journal_len: _,
            transcript,
            run,
            primary,
            elapsed_ms,
            records,
            counters,
        } = kept;
        let spec = self.primary_for(&run.agent_type)?;
        let earlier = Earlier {
            elapsed_ms,
            messages: primary.history.len(),
            last_blocks: primary.history.last().map_or(0, |m| m.content.len()),
        };
        let path = AgentPath::parse(&run.agent_type);
        let transcript = transcript.and_then(|t| match t.carried_on(&path, earlier) {
            Ok(t) => Some(Arc::new(t)),
            // As a run read from its folder would.
            Err(_) => open_transcript(&dir),
        });
        let lineage = Lineage::default();
        for (agent_type, n) in counters {
            lineage.counters.insert(agent_type, n);
        }
        let mut spent = primary.usage;
        for record in &records {
            spent.add(&record.usage);
        }
        self.roster.record_all(records);
        let parts = RunParts {
            journal: Some(self.run_journal(journal, Some(keeper))),
            transcript,
            lineage,
            answer: None,
            dir: Some(dir.clone()),
        };
        Ok(LoadedRun {
            id: dir.id().to_owned(),
            parts,
            spec,
            primary,
            task: run.task,
            spent,
        })
    }

    /// Where the conversation stands after a message: kept in memory when the run went
    /// through whole; else its folder (when it has one), read again at the next message.
    fn keep(&self, keeper: Option<Arc<Keeper>>, result: &Said, folder: Option<PathBuf>) -> At {
        let run = self.current.get();
        let dir = run.and_then(|r| r.dir.clone());
        let folder = dir.as_ref().map(|d| d.path().to_path_buf()).or(folder);
        let fallback = || folder.clone().map_or(At::Nothing, At::Folder);
        let (Some(keeper), Ok(_), Some(run), Some(dir)) = (keeper, result, run, dir) else {
            return fallback();
        };
        // The run is over, so nothing holds the folded state now; were it held, the run
        // is read again rather than waited for.
        let (Some(journal), Ok(mut folded)) = (keeper.file.get(), keeper.folded.try_lock()) else {
            return fallback();
        };
        // A lost step or transcript line, or a team (whose state a resume rebuilds from
        // the journal): read the run again.
        let lost_a_line = run.transcript.as_ref().is_some_and(|t| t.lost_a_line());
        let team = run.teams_on || keeper.team.load(Ordering::Relaxed);
        let Some(state) = folded.run.take() else {
            return fallback();
        };
        if self.failure.failed() || lost_a_line || team {
            return fallback();
        }
        let records: Vec<_> = self.roster.records();
        // The primary agent's own time, which its transcript's outcome line says.
        let elapsed_ms = records
            .iter()
            .find(|r| r.path == keeper.primary)
            .map_or(0, |r| r.elapsed_ms);
        At::Kept(Box::new(Kept {
            journal_len: journal_len(dir.path()),
            dir,
            journal: journal.clone(),
            transcript: run.transcript.clone(),
            run: state,
            primary: std::mem::take(&mut folded.primary),
            elapsed_ms,
            records: records
                .into_iter()
                .filter(|r| r.path != keeper.primary)
                .collect(),
            counters: run
                .lineage
                .counters
                .iter()
                .map(|e| (e.key().clone(), *e.value()))
                .collect(),
        }))
    }
}

/// Whether the journal of the run folder `dir` still has the size `len` it had: no other
/// process wrote to it since (else the conversation reads it again).
fn unchanged(dir: &Path, len: Option<u64>) -> bool {
    len.is_some() && journal_len(dir) == len
}
