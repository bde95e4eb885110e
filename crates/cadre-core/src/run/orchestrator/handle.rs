//! What the orchestrator hands around for one agent: its handle (path, depth, model,
//! workspace, running calls), a `Task` call as it is run, and how an agent starts.

use super::run_context::RunContext;
use crate::run::answer::AnswerSchema;
use crate::run::background::Background;
use crate::run::budget::Budget;
use crate::run::fork::ForkBase;
use crate::run::state::AgentState;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::limits::AgentLimits;
use cadre_tools::Workspace;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One `Task` call, as the orchestrator runs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskCall<'a> {
    /// The type of subagent to start.
    pub subagent_type: &'a str,
    /// What it is asked to do, in a few words.
    pub description: &'a str,
    /// Its first user message.
    pub prompt: &'a str,
    /// The `tool_use` id of the call (a resumed run finds the subagent by it).
    pub call: &'a str,
    /// Whether the call returned at once and the subagent runs in the background.
    pub background: bool,
    /// The schema the subagent's answer must match, given by the call.
    pub answer: Option<&'a AnswerSchema>,
    /// The conversation a fork starts from (`subagent_type: "fork"`).
    pub fork: Option<&'a Arc<ForkBase>>,
    /// Limits the call sets (a `Task` call's `limits`, a workflow item's): they may only
    /// tighten those of the subagent's type.
    pub limits: Option<&'a AgentLimits>,
}

/// The running agent's handle: its path, depth, model and workspace, the `Task` calls it has
/// running, the subagents it started in the background and the run it belongs to. Its
/// `Task` tools hold a clone.
#[derive(Clone)]
pub struct AgentHandle {
    /// The run it belongs to, handed down from the run's start to every subagent.
    pub(crate) run: Arc<RunContext>,
    /// The agent's path.
    pub path: AgentPath,
    /// Its depth (0 for the primary agent).
    pub depth: u32,
    /// Its model id, which its subagent types that say `inherit` take.
    pub model: String,
    /// `Task` calls of this parent running now.
    pub(super) running: Arc<AtomicU32>,
    /// The subagents it started in the background.
    pub(crate) background: Arc<Background>,
    /// The folder its tools are confined to: the run's workspace, or the worktree of an
    /// isolated subagent (whose own subagents work there too).
    pub(crate) workspace: Arc<Workspace>,
    /// Its name in the run's team, when it is a member (the primary agent, or a subagent
    /// started with a name).
    pub(crate) member: Option<String>,
    /// The schema its answer must match, when its caller gave one (its type's own is used
    /// otherwise).
    pub(crate) answer: Option<AnswerSchema>,
    /// The conversation it was forked from, when it is a fork.
    pub(crate) fork: Option<Arc<ForkBase>>,
    /// Its limits: its caller's until it starts, then those it runs under (its type's,
    /// tightened by its caller's).
    pub(crate) limits: AgentLimits,
    /// The budget its tokens count against: its own below its parent's once it has limits,
    /// its parent's before; `None` is the run's.
    pub(crate) budget: Option<Budget>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle")
            .field("path", &self.path)
            .field("depth", &self.depth)
            .field("model", &self.model)
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

impl AgentHandle {
    /// The handle of a new agent of `run` at `path`, `depth` deep, talking to `model` in
    /// `workspace`.
    pub(crate) fn new(
        run: Arc<RunContext>,
        path: AgentPath,
        depth: u32,
        model: String,
        workspace: Arc<Workspace>,
    ) -> Self {
        Self {
            run,
            path,
            depth,
            model,
            running: Arc::default(),
            background: Arc::default(),
            workspace,
            member: None,
            answer: None,
            fork: None,
            limits: AgentLimits::default(),
            budget: None,
        }
    }

    /// The same handle without its background subagents, for a task that must not keep
    /// them alive.
    pub(crate) fn detached(&self) -> Self {
        Self {
            background: Arc::default(),
            ..self.clone()
        }
    }

    /// Counts one more `Task` call of this agent running until the guard is dropped;
    /// returns how many ran before it.
    pub(crate) fn one_more_call(&self) -> (u32, Release<'_>) {
        let before = self.running.fetch_add(1, Ordering::SeqCst);
        (before, Release(&self.running))
    }
}

/// Decrements a running-call counter when dropped, however the call ends.
pub(crate) struct Release<'a>(&'a AtomicU32);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How an agent starts: on a fresh prompt, or from its journal.
pub(crate) enum Start<'a> {
    /// A new conversation on this prompt.
    Fresh(&'a str),
    /// The conversation rebuilt from the journal.
    Resume(Box<AgentState>),
}
