//! One run's context, made when the run starts or resumes and handed down to every agent
//! it builds: its folder, journal, transcript, team, the primary agent's answer schema and
//! what a resumed run rebuilt from its journal. Nothing in it is filled in later.

use crate::record::journal::Journal;
use crate::record::run_dir::RunDir;
use crate::record::transcript::{Earlier, RunTranscript};
use crate::run::answer::AnswerSchema;
use crate::run::state::AgentState;
use crate::run::team::Team;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use cadre_model::Usage;
use dashmap::DashMap;
use std::path::Path;
use std::sync::Arc;

/// What a run's context is made of besides its team: found by a fresh start, or read from
/// the journal of a resumed run.
#[derive(Default)]
pub(super) struct RunParts {
    /// The run folder, when the run writes one.
    pub(super) dir: Option<RunDir>,
    /// Where its steps are journaled.
    pub(super) journal: Option<Arc<dyn Journal>>,
    /// The run folder's transcript.
    pub(super) transcript: Option<Arc<RunTranscript>>,
    /// What the journal of a resumed run says of its agents.
    pub(super) lineage: Lineage,
    /// The schema the primary agent's answer must match.
    pub(super) answer: Option<AnswerSchema>,
}

/// The context of one run.
pub(crate) struct RunContext {
    /// The run's id, which names its worktree branches.
    pub(super) id: String,
    /// The run folder, when the run writes one.
    pub(super) dir: Option<RunDir>,
    /// Where the run's steps are journaled: its folder's journal, or a durable engine's.
    pub(super) journal: Option<Arc<dyn Journal>>,
    /// The run folder's transcript, when it has a folder (and it could be opened).
    pub(super) transcript: Option<Arc<RunTranscript>>,
    /// The run's team: its members, their messages and the shared task list.
    pub(super) team: Arc<Team>,
    /// Whether this is a team run (`Task` takes a name).
    pub(super) teams_on: bool,
    /// The schema the primary agent's answer must match, for a typed run.
    pub(super) answer: Option<AnswerSchema>,
    /// The folder long answers are kept in, which every agent's `read_file` may read.
    pub(super) results: Arc<Path>,
    /// What a resumed run rebuilt from its journal (empty for a fresh run).
    pub(super) lineage: Lineage,
}

/// The agents of a run as its journal left them: the ones still to go on, the subagent
/// each journaled `Task` call started, and the numbers given out per type.
#[derive(Default)]
pub(crate) struct Lineage {
    /// Agents rebuilt from the journal of a resumed run, waiting for their parent's call.
    pub(super) resumed: DashMap<AgentPath, AgentState>,
    /// Agents of a resumed run that ended for good, kept as their results alone (a
    /// workflow's finished items: see `Orchestrator::load_tree`).
    pub(super) ended: DashMap<AgentPath, Ended>,
    /// The subagent each journaled `Task` call started: (parent path, call id) → path.
    pub(super) children: DashMap<(AgentPath, String), AgentPath>,
    /// The highest number given out per agent type, so a new subagent takes a fresh one.
    pub(super) counters: DashMap<String, u32>,
}

/// What a resume keeps of an agent that ended for good: its result, not its conversation.
#[derive(Debug)]
pub(super) struct Ended {
    /// Why it stopped.
    pub(super) stop: StopKind,
    /// Its final answer.
    pub(super) text: String,
    /// The tokens it used.
    pub(super) usage: Usage,
}

impl Lineage {
    /// Counts the path `at` as taken: new subagents never reuse its number.
    pub(super) fn taken(&self, at: &AgentPath) {
        if let Some(n) = at.ordinal() {
            let mut c = self.counters.entry(at.agent_type().to_owned()).or_insert(0);
            *c = (*c).max(n);
        }
    }

    /// The next number for a subagent of type `agent_type`.
    pub(super) fn next(&self, agent_type: &str) -> u32 {
        let mut c = self.counters.entry(agent_type.to_owned()).or_insert(0);
        *c += 1;
        *c
    }
}

impl RunContext {
    /// The context of the run `id`, made of `parts`, `team` and whether it is a team run,
    /// its long answers kept in `results`.
    pub(super) fn new(
        id: String,
        parts: RunParts,
        team: Arc<Team>,
        teams_on: bool,
        results: Arc<Path>,
    ) -> Self {
        Self {
            id,
            dir: parts.dir,
            journal: parts.journal,
            transcript: parts.transcript,
            team,
            teams_on,
            answer: parts.answer,
            results,
            lineage: parts.lineage,
        }
    }

    /// Appends a step to the run's journal, if it has one.
    pub(super) async fn journal(&self, step: Step) {
        if let Some(journal) = &self.journal {
            if let Err(e) = journal.append(&step).await {
                crate::record::failure::log_unjournaled(None, &e);
            }
        }
    }

    /// What the transcript of the agent at `path` holds from earlier parts of the run.
    pub(super) fn earlier(&self, path: &AgentPath) -> Earlier {
        self.transcript
            .as_ref()
            .map_or_else(Earlier::default, |t| t.earlier(path))
    }

    /// The path of the subagent that `parent`'s call `call` started before a resume.
    pub(super) fn resumed_child(&self, parent: &AgentPath, call: &str) -> Option<AgentPath> {
        self.lineage
            .children
            .get(&(parent.clone(), call.to_owned()))
            .map(|c| c.value().clone())
    }

    /// The tokens the agents below `path` rebuilt from the journal used before the resume
    /// (those not yet reached again), which count against `path`'s token limit.
    ///
    /// Team members below it (at `members`) and their subtrees are left out: live, they
    /// charge the run's budget, not their starter's. Left out by path, so it does not
    /// matter whether a restarted member has taken its state back yet.
    pub(super) fn earlier_tokens_below(&self, path: &AgentPath, members: &[AgentPath]) -> u64 {
        let below = |p: &AgentPath| p != path && p.is_within(path);
        let members: Vec<&AgentPath> = members.iter().filter(|m| below(m)).collect();
        self.lineage
            .resumed
            .iter()
            .filter(|e| below(e.key()) && !members.iter().any(|m| e.key().is_within(m)))
            .map(|e| e.value().usage.total())
            .sum()
    }

    /// Takes the result of the agent at `path`, if the resume kept it as one that ended for
    /// good.
    pub(super) fn take_ended(&self, path: &AgentPath) -> Option<Ended> {
        self.lineage.ended.remove(path).map(|(_, e)| e)
    }

    /// Takes the agent at `path` rebuilt from the journal, if it still waits to go on.
    pub(super) fn take_resumed(&self, path: &AgentPath) -> Option<AgentState> {
        self.lineage.resumed.remove(path).map(|(_, s)| s)
    }
}

/// Opens the transcript of the run in `dir`: a resume reads what its agents wrote before
/// from it, and its agents go on writing to it. `None` (with a warning) when it cannot be.
pub(super) fn open_transcript(dir: &RunDir) -> Option<Arc<RunTranscript>> {
    match RunTranscript::open(dir) {
        Ok(t) => Some(Arc::new(t)),
        Err(e) => {
            tracing::warn!("could not open {}: {e}", dir.transcript_file().display());
            None
        }
    }
}
