//! A local run: the orchestrator built from the options, the project's definitions and the
//! model, and each turn of the primary agent followed with the live display — for `cadre
//! run`, `cadre resume` and every message of `cadre chat`.

use crate::args::{OutputFormat, RunArgs};
use crate::common::definitions::{load_run_servers, load_skills_from, print_problems};
use crate::common::display::{shown_path, Display};
use crate::common::exit::{CliError, Code, Result};
use crate::common::hooks::hooks_for_run;
use crate::common::model::{build_model, model_id};
use crate::common::permissions::{self, Ask};
use crate::common::project::{require_dirs, user_dir, user_home, workspace_root};
use crate::common::project_items;
use crate::common::run_folders::open_run;
use crate::common::signals::{self, Ending};
use cadre_core::JournaledRun;
use cadre_core::{Conversation, Limits, Orchestrator, RunDir, RunError, StopKind};
use cadre_model::Model;
use cadre_tools::{SandboxMode, ToolLimits, Workspace};
use futures::StreamExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::SignalKind;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// What the primary agent is asked to do.
pub enum Job<'a> {
    /// A new run on this task.
    Fresh(String),
    /// Carry on this killed run.
    Resume(JournaledRun),
    /// Continue this finished run with this follow-up.
    Continue(JournaledRun, String),
    /// Send this message to a conversation kept open between messages (`cadre chat`).
    Say(&'a mut Conversation, String),
}

impl Job<'_> {
    /// The task or follow-up it gives (none to carry on a killed run).
    fn task(&self) -> &str {
        match self {
            Job::Fresh(t) | Job::Continue(_, t) | Job::Say(_, t) => t,
            Job::Resume(_) => "",
        }
    }
}

/// Runs the primary agent of `session` and prints what it does; returns the exit code.
pub async fn run(session: Session, job: Job<'_>, quiet: bool) -> Result<Code> {
    let endings = signals::watch_endings();
    Ok(session
        .turn(job, quiet, Signals::Process, endings)
        .await?
        .code)
}

/// How Ctrl-C is handled during a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signals {
    /// Ctrl-C, SIGTERM or SIGHUP cancels the run; a second one gives it up at once (`cadre run`).
    Process,
    /// Ctrl-C cancels this turn and every subagent it started, nothing more; SIGTERM or
    /// SIGHUP cancels it too, a second gives it up at once, and the session ends after it
    /// (interactive).
    Turn,
}

/// Everything a run needs that stays the same from one turn to the next.
pub struct Session {
    /// The workspace folder.
    pub root: PathBuf,
    /// The options it was started with.
    pub args: RunArgs,
    /// The agent types.
    pub registry: cadre_core::Registry,
    workspace: Arc<Workspace>,
    skills: Arc<cadre_core::SkillSet>,
    mcp: Arc<cadre_mcp::McpServers>,
    model: Arc<dyn Model>,
    /// The model id of the primary agent.
    pub model_id: String,
    /// The run id a recording notes in its cassette, or a replay takes from it.
    run_id: Option<String>,
    /// The project's instructions, read once for every agent of every turn.
    instructions: Arc<cadre_core::Instructions>,
    /// The permission mode and rules, and what the person allowed for the session.
    permissions: cadre_core::Permissions,
    /// Questions for the person at the terminal, when there is one (`ask` mode).
    asks: Option<tokio::sync::Mutex<mpsc::UnboundedReceiver<Ask>>>,
    /// The hooks that run: the user's, and the project's when it is trusted.
    hooks: cadre_core::Hooks,
    /// The spec the primary agent runs under instead of the registry's type of its name
    /// (a served call's), which its subagents keep.
    primary: Option<cadre_core::AgentSpec>,
    /// The saved workflows the `Workflow` tool offers, when they are offered.
    workflows: Option<Arc<dyn cadre_core::workflow::SavedWorkflows>>,
}

/// Refuses a primary agent type the registry does not have, pointing at the listing.
fn check_primary(registry: &cadre_core::Registry, agent: &str) -> Result<()> {
    cadre_core::internal::primary_spec(registry, agent).map_err(|e| match e {
        RunError::UnknownAgent { .. } => CliError::config(format!("{e} (see `cadre agents list`)")),
        e => e.into(),
    })?;
    Ok(())
}

impl Session {
    /// Loads agent types, skills and MCP configuration and builds the model client; checks
    /// that `args.agent` may run as the primary agent.
    pub fn prepare(mut args: RunArgs, directory: Option<PathBuf>, quiet: bool) -> Result<Self> {
        let root = workspace_root(directory)?;
        // A cassette must replay the same on every machine: recording and replaying both
        // leave out everything of the user's own (~/.config/cadre, ~/.claude): settings,
        // instructions, agent types, skills, MCP servers.
        let portable = args.record.is_some() || args.replay.is_some();
        let include_user = !portable;
        let user_dir = user_dir(include_user);
        // A straight line: read every settings file and the definitions, decide the
        // project's trust once, then use what it allows.
        require_dirs(&args.skills.skills_dir, "--skills-dir")?;
        let project_items::Decided {
            settings,
            mut registry,
            trusted,
            project_mcp_config,
        } = project_items::decide_run(&mut args, &root, user_dir.as_deref(), include_user)?;
        let flags = (&args).into();
        let instructions = cadre_core::Instructions::load(&root, user_dir.as_deref());
        if !quiet {
            settings
                .warnings()
                .for_each(|w| errln!("cadre: warning: {w}"));
            print_problems(instructions.problems());
            if portable {
                note_left_out();
            }
        }
        if let Err(e) = RunDir::write_gitignore(&root) {
            errln!("cadre: warning: cannot write .cadre/.gitignore: {e}");
        }
        let workspace = Workspace::new(&root)
            .map_err(|e| CliError::config_from(format!("cannot work in {}", root.display()), e))?;
        let skills = load_skills_from(&root, &args.skills.skills_dir, include_user);
        let mcp = load_run_servers(
            &root,
            &args.mcp,
            include_user,
            trusted,
            project_mcp_config.as_deref(),
            &settings.allow_env,
            &args.dirs.agents_dir,
        )?;
        if !quiet {
            for p in &mcp.config().problems {
                errln!("cadre: skipped: {p}");
            }
            print_problems(registry.problems());
            print_problems(skills.problems());
        }
        let configured = settings.hooks.clone().with_types(&registry, &root);
        let hooks = hooks_for_run(&configured, &mut registry, &root, flags, trusted);
        check_primary(&registry, &args.agent)?;
        let model_id = model_id(&args)?;
        let (model, run_id) = build_model(&args)?;
        let (permissions, asks) =
            permissions::permissions(&args, &settings.permissions, permissions::can_ask())?;
        Ok(Self {
            permissions,
            hooks,
            asks: asks.map(tokio::sync::Mutex::new),
            run_id,
            instructions: Arc::new(instructions),
            root,
            args,
            registry,
            workspace: Arc::new(workspace),
            skills: Arc::new(skills),
            mcp: Arc::new(mcp),
            model,
            model_id,
            primary: None,
            workflows: None,
        })
    }

    /// The same session with no one to ask: a call `ask` mode would ask about is denied
    /// with a message saying there is no terminal (for a server, whose stdin is no person).
    pub fn without_terminal(mut self) -> Self {
        self.permissions.approver = None;
        self.asks = None;
        self
    }

    /// The same session with its primary agent run under `spec` (see
    /// [`OrchestratorBuilder::primary`](cadre_core::OrchestratorBuilder::primary)).
    pub fn with_primary(mut self, spec: cadre_core::AgentSpec) -> Self {
        self.primary = Some(spec);
        self
    }

    /// The same session whose primary agent (and any agent whose type lists `Workflow`) may
    /// start the saved workflows of `saved`.
    pub fn with_workflows(mut self, saved: Arc<dyn cadre_core::workflow::SavedWorkflows>) -> Self {
        self.workflows = Some(saved);
        self
    }

    /// The model client every turn talks to.
    pub fn model(&self) -> Arc<dyn Model> {
        self.model.clone()
    }

    /// A fresh orchestrator for one turn (its own cancel token and usage).
    pub fn orchestrator(&self) -> Result<Arc<Orchestrator>> {
        Ok(self.builder().build()?)
    }

    /// The builder of [`orchestrator`](Self::orchestrator), for a caller that changes some
    /// of it (another model client, a type of its own) before building.
    pub fn builder(&self) -> cadre_core::OrchestratorBuilder {
        let args = &self.args;
        let mut builder = Orchestrator::builder()
            .workspace_handle(self.workspace.clone())
            .model(self.model.clone())
            .model_id(&self.model_id)
            .registry(self.registry.clone())
            .skills(self.skills.clone())
            .mcp(self.mcp.clone())
            .instructions(self.instructions.clone())
            .record_content(super::telemetry::record_content())
            .limits(
                Limits::default()
                    .max_parallel(args.max_parallel.max(1))
                    .max_depth(args.max_depth),
            )
            .max_tokens(args.max_tokens)
            .compact_at(args.compact_at.0)
            .tool_limits(ToolLimits {
                bash_timeout: Duration::from_secs(args.bash_timeout),
                ..ToolLimits::default()
            });
        if let Some(n) = args.budget_tokens {
            builder = builder.budget_tokens(n);
        }
        if let Some(n) = args.context_tokens {
            builder = builder.context_tokens(n);
        }
        if let Some(n) = args.max_turns {
            builder = builder.max_turns(n);
        }
        if let Some(id) = &self.run_id {
            builder = builder.run_id(id);
        }
        if args.team {
            builder =
                builder.team(cadre_core::TeamLimits::default().max_messages(args.max_messages));
        }
        if !args.no_transcripts {
            builder = builder.runs_dir(RunDir::runs_root(&self.root));
        }
        if args.allow_unsandboxed_bash {
            builder = builder.sandbox(SandboxMode::Unsandboxed);
        }
        if let Some(spec) = &self.primary {
            builder = builder.primary(spec.clone());
        }
        if let Some(saved) = &self.workflows {
            builder = builder.workflows(saved.clone());
        }
        builder
            .permissions(self.permissions.clone())
            .hooks(self.hooks.clone())
    }

    /// Runs one job with the live display; `endings` (from [`signals::watch_endings`]) says
    /// when SIGTERM or SIGHUP asks the process to end.
    pub async fn turn(
        &self,
        job: Job<'_>,
        quiet: bool,
        signals: Signals,
        endings: watch::Receiver<Option<Ending>>,
    ) -> Result<Turn> {
        let args = &self.args;
        let orchestrator = self.orchestrator()?;
        let mut events = orchestrator.events();
        let task = job.task().to_owned();
        let TurnWatch {
            quit,
            mut notes,
            ended,
            _stop_watch,
        } = watch_turn(&orchestrator, signals, endings);
        let header = format!("cadre · {} · {}", args.agent, self.model_id);
        let mut display = Display::new(args.output_format, quiet, &args.agent, header);
        let started = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        // Questions for the person, one at a time; the display pauses while one is open.
        let mut asks = match &self.asks {
            Some(asks) => Some(asks.lock().await),
            None => None,
        };
        let mut answering: Option<tokio::sync::oneshot::Receiver<()>> = None;
        let result = {
            let run = run_job(&orchestrator, job, &args.agent, &task);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    result = &mut run => break Some(result),
                    () = quit.cancelled() => break None,
                    Some(note) = notes.recv() => display.note(note),
                    Some(ask) = next_ask(&mut asks), if answering.is_none() => {
                        // What the agent said before asking is shown before the question.
                        while let Some(event) = events.try_next() {
                            display.event(&event);
                        }
                        answering = Some(permissions::start(ask, display.pause()));
                    }
                    _ = answered(&mut answering), if answering.is_some() => {
                        answering = None;
                        display.resume();
                    }
                    Some(event) = events.next() => display.event(&event),
                    _ = ticker.tick() => display.tick(
                        &orchestrator.roster(),
                        orchestrator.finished_count(),
                        orchestrator.tokens_used(),
                        started.elapsed(),
                    ),
                }
            }
        };
        show_the_rest(&mut display, &mut events, &mut notes);
        let (outcome, summary) = match result {
            Some(result) => result?,
            None => abandoned(&orchestrator, &task, started),
        };
        let run_dir = orchestrator.run_dir().map(|d| shown_path(d.path()));
        display.finish(&outcome, &summary, &self.model_id, run_dir.as_deref());
        let tell = quiet || args.output_format != OutputFormat::Text;
        tell_model_error(&outcome.stop, tell, &orchestrator);
        let code = match ended.get() {
            Some(Ending::HungUp) => Code::HungUp,
            _ => Code::for_stop(&outcome.stop),
        };
        Ok(Turn {
            code,
            dir: orchestrator.run_dir().map(|d| d.path().to_path_buf()),
            summary,
        })
    }
}

impl Session {
    /// Compacts the conversation of the run in `dir` now; returns what it cost.
    pub async fn compact(&self, dir: &std::path::Path) -> Result<cadre_model::Usage> {
        let orchestrator = self.orchestrator()?;
        Ok(orchestrator.compact(open_run(dir)?).await?)
    }
}

/// Runs `job` on `orchestrator`: a new run of `agent` on `task`, a killed run carried on,
/// or a finished one continued with `task`.
async fn run_job(
    orchestrator: &Arc<Orchestrator>,
    job: Job<'_>,
    agent: &str,
    task: &str,
) -> std::result::Result<(cadre_core::AgentOutcome, cadre_core::RunSummary), RunError> {
    match job {
        Job::Fresh(_) => orchestrator.run(agent, task).await,
        Job::Resume(run) => orchestrator.resume(run, None).await,
        Job::Continue(run, _) => orchestrator.resume(run, Some(task)).await,
        Job::Say(conversation, _) => orchestrator.converse(conversation, agent, task).await,
    }
}

/// Shows the events and notes that came after the turn's last tick.
fn show_the_rest(
    display: &mut Display,
    events: &mut cadre_core::EventStream,
    notes: &mut mpsc::UnboundedReceiver<&'static str>,
) {
    while let Some(event) = events.try_next() {
        display.event(&event);
    }
    while let Ok(note) = notes.try_recv() {
        display.note(note);
    }
}

/// What a turn's signal watch gives the turn: its quit, its notes and the ending it saw;
/// the watch stops when `_stop_watch` drops.
struct TurnWatch {
    /// Cancelled by a second Ctrl-C: stop waiting for the agents at all.
    quit: CancellationToken,
    /// What the watch has to say, shown through the display.
    notes: mpsc::UnboundedReceiver<&'static str>,
    /// The signal that ended the process's run, if one did (its exit code says which).
    ended: Arc<std::sync::OnceLock<Ending>>,
    /// Stops the watch when the turn is over.
    _stop_watch: tokio_util::sync::DropGuard,
}

/// Starts the signal watch of a turn of `orchestrator` (see [`spawn_signal_watch`]).
fn watch_turn(
    orchestrator: &Orchestrator,
    signals: Signals,
    endings: watch::Receiver<Option<Ending>>,
) -> TurnWatch {
    let turn_cancel = CancellationToken::new();
    // Cancelled by a second Ctrl-C: stop waiting for the agents at all.
    let quit = CancellationToken::new();
    // What the signal watch has to say goes through the display, which clears its live
    // block around it: written straight to the terminal, it would break the redraw.
    let (notes_tx, notes) = mpsc::unbounded_channel::<&'static str>();
    // The signal that ended the process's run, if one did (its exit code says which).
    let ended = Arc::new(std::sync::OnceLock::new());
    spawn_signal_watch(
        signals,
        Watched {
            cancel: orchestrator.cancel_token(),
            quit: quit.clone(),
            done: turn_cancel.clone(),
            notes: notes_tx,
            ended: ended.clone(),
        },
        endings,
    );

    TurnWatch {
        quit,
        notes,
        ended,
        _stop_watch: turn_cancel.drop_guard(),
    }
}

/// The outcome and summary of a turn given up (its run's future dropped: its commands'
/// process groups are killed and sandbox folders removed as their owners drop): what ended.
fn abandoned(
    orchestrator: &Orchestrator,
    task: &str,
    started: Instant,
) -> (cadre_core::AgentOutcome, cadre_core::RunSummary) {
    let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let summary = orchestrator.abandon(task, elapsed);
    let outcome = cadre_core::AgentOutcome::new("", StopKind::Cancelled);
    (outcome, summary)
}

/// When the turn stopped on a model error, tells of it (said here when the display did
/// not, `tell`) and how to send the failed request again: the journal keeps the
/// conversation.
fn tell_model_error(stop: &StopKind, tell: bool, orchestrator: &Orchestrator) {
    let StopKind::ModelError(e) = stop else {
        return;
    };
    if tell {
        errln!("cadre: {e}");
    }
    if let Some(dir) = orchestrator.run_dir() {
        errln!(
            "cadre: once the API answers again, `cadre resume {}` sends the request again",
            dir.id()
        );
    }
}

/// The next question for the person, if the session has a terminal to ask on.
async fn next_ask(
    asks: &mut Option<tokio::sync::MutexGuard<'_, mpsc::UnboundedReceiver<Ask>>>,
) -> Option<Ask> {
    match asks {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves once the open question is answered.
async fn answered(answering: &mut Option<tokio::sync::oneshot::Receiver<()>>) {
    match answering {
        Some(done) => {
            let _ = done.await;
        }
        None => std::future::pending().await,
    }
}

/// What one turn left.
pub struct Turn {
    /// The exit code it stands for.
    pub code: Code,
    /// Its run folder, if transcripts are written.
    pub dir: Option<PathBuf>,
    /// Its summary (usage covers the whole run, earlier turns too).
    pub summary: cadre_core::RunSummary,
}

/// With --record or --replay, says which of the user's own files exist and are not read.
fn note_left_out() {
    let Some(home) = user_home(true) else {
        return;
    };
    let left: Vec<String> = [
        ".claude/agents",
        ".claude/settings.json",
        ".config/cadre/agents",
        ".config/cadre/skills",
        ".config/cadre/mcp.json",
        ".config/cadre/config.toml",
        ".config/cadre/AGENTS.md",
    ]
    .iter()
    .filter(|p| home.join(p).exists())
    .map(|p| format!("~/{p}"))
    .collect();
    if !left.is_empty() {
        errln!(
            "cadre: not read while recording or replaying, so the cassette replays the same everywhere: {} (put what the run needs in the project, or pass --agents-dir / --skills-dir)",
            left.join(", ")
        );
    }
}

/// What the signal watch of one turn acts on.
struct Watched {
    /// Cancels the turn's agents.
    cancel: CancellationToken,
    /// Gives the turn up at once (its agents' commands killed, what can be written written).
    quit: CancellationToken,
    /// Cancelled when the turn is over: the watch stops.
    done: CancellationToken,
    /// What the watch has to say, shown through the display.
    notes: mpsc::UnboundedSender<&'static str>,
    /// The SIGTERM or SIGHUP that stopped the turn, if one did.
    ended: Arc<std::sync::OnceLock<Ending>>,
}

/// Cancels the turn on Ctrl-C, SIGTERM or SIGHUP (the latter two kept in `ended`, also
/// when one came just before the turn began); a second SIGTERM or SIGHUP gives the turn up
/// at once, and so does a second Ctrl-C with [`Signals::Process`]. Ctrl-C is watched from
/// before this returns, so none is lost before the task first runs.
fn spawn_signal_watch(
    signals: Signals,
    watched: Watched,
    mut endings: watch::Receiver<Option<Ending>>,
) {
    let mut interrupts = tokio::signal::unix::signal(SignalKind::interrupt()).ok();
    if let Some(ending) = *endings.borrow_and_update() {
        watched.stop(ending);
    }
    tokio::spawn(async move {
        let mut interrupted = false;
        loop {
            tokio::select! {
                Some(()) = next_interrupt(&mut interrupts) => {
                    if watched.interrupt(signals, interrupted) {
                        return;
                    }
                    interrupted = true;
                }
                Ok(()) = endings.changed() => {
                    if let Some(ending) = *endings.borrow_and_update() {
                        watched.stop(ending);
                    }
                }
                () = watched.done.cancelled() => return,
            }
        }
    });
}

impl Watched {
    /// SIGTERM or SIGHUP: the first stops the agents, a second gives the turn up.
    fn stop(&self, ending: Ending) {
        if self.ended.set(ending).is_ok() {
            let _ = self.notes.send(stopping_note(ending));
            self.cancel.cancel();
        } else {
            let _ = self.notes.send("cadre: quitting now");
            self.quit.cancel();
        }
    }

    /// Ctrl-C (`again` when one came before); true when the turn is given up.
    fn interrupt(&self, signals: Signals, again: bool) -> bool {
        let note = match (signals, again) {
            (Signals::Process, false) => {
                Some("cadre: stopping every agent (Ctrl-C; Ctrl-C again quits at once)")
            }
            (Signals::Process, true) => {
                let _ = self.notes.send("cadre: quitting now");
                self.quit.cancel();
                return true;
            }
            (Signals::Turn, false) => Some("cadre: cancelling this turn"),
            (Signals::Turn, true) => None,
        };
        if let Some(note) = note {
            let _ = self.notes.send(note);
        }
        self.cancel.cancel();
        false
    }
}

/// The next Ctrl-C; `None` when it cannot be watched.
async fn next_interrupt(interrupts: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match interrupts {
        Some(s) => s.recv().await,
        None => None,
    }
}

/// What is said when `ending` stops every agent.
fn stopping_note(ending: Ending) -> &'static str {
    match ending {
        Ending::Terminated => {
            "cadre: stopping every agent (SIGTERM; a second SIGTERM quits at once)"
        }
        Ending::HungUp => "cadre: stopping every agent (SIGHUP: the terminal closed)",
    }
}
