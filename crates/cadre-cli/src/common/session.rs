//! `cadre run`: the primary agent on one task, with every subagent it delegates to.

use crate::agents::load_registry_from;
use crate::args::{ResumeCmd, RunArgs, RunCmd};
use crate::display::Display;
use crate::exit::{Code, ConfigError};
use crate::skills::load_skills_from;
use crate::worker_cmd::Provider;
pub use crate::worker_cmd::{live_model, ModelOptions};
use anyhow::Result;
use cadre_core::{Limits, Orchestrator, RunError, StopKind};
use cadre_model::{resolve_model_alias, Model, RecordingModel, ReplayModel};
use cadre_tools::{SandboxMode, ToolLimits, Workspace};
use futures::StreamExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Prints each problem met loading agent types or skills on stderr, once: a warning says
/// what was repaired, an error that the file was skipped.
pub fn print_problems(problems: &[cadre_core::Problem]) {
    for p in problems {
        if p.warning {
            errln!("cadre: {p}");
        } else {
            errln!("cadre: skipped: {p}");
        }
    }
}

/// What the primary agent is asked to do.
pub enum Job {
    /// A new run on this task.
    Fresh(String),
    /// Carry on the killed run in this folder.
    Resume(PathBuf),
    /// Continue the finished run in this folder with this follow-up.
    Continue(PathBuf, String),
}

/// `cadre run`: a new run, or a follow-up to a finished one (`--continue`, `--resume`).
pub async fn run_cmd(cmd: RunCmd, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let RunCmd {
        task,
        task_file,
        continue_last,
        resume,
        mut args,
    } = cmd;
    let task = read_task(task, task_file.as_deref())?;
    if args.engine == crate::args::Engine::Restate {
        if continue_last || resume.is_some() {
            return Err(ConfigError(
                "--continue and --resume take a local run; an engine run is carried on with `cadre resume RUN_ID`".into(),
            )
            .into());
        }
        return crate::engine::run(args, task, directory, quiet).await;
    }
    let root = workspace_root(directory.clone())?;
    let job = match (continue_last, resume) {
        (false, None) => Job::Fresh(task),
        (true, _) => {
            let dir = crate::sessions::newest(&root, true)?.ok_or_else(|| {
                ConfigError(
                    "--continue: no finished run with a journal in .cadre/runs/ of this workspace"
                        .into(),
                )
            })?;
            Job::Continue(dir, task)
        }
        (false, Some(id)) => Job::Continue(crate::sessions::find(&root, &id)?, task),
    };
    if let Job::Continue(dir, _) = &job {
        args.agent = crate::sessions::primary_type(dir)?;
    }
    run(args, job, directory, quiet).await
}

/// The task: TASK itself, or read from `--task-file`, or from stdin for `-` (or no TASK
/// when stdin is not a terminal). A blank task is a usage error.
fn read_task(task: Option<String>, file: Option<&std::path::Path>) -> Result<String> {
    use std::io::{IsTerminal, Read};
    let from_stdin = || -> Result<String> {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| ConfigError(format!("cannot read the task from stdin: {e}")))?;
        Ok(text)
    };
    let (text, from) = match (task, file) {
        (_, Some(file)) => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                ConfigError(format!("cannot read --task-file {}: {e}", file.display()))
            })?;
            (text, format!("--task-file {}", file.display()))
        }
        (Some(task), None) if task == "-" => (from_stdin()?, "stdin".to_owned()),
        (Some(task), None) => (task, "TASK".to_owned()),
        (None, None) if std::io::stdin().is_terminal() => {
            return Err(ConfigError(
                "no task given: pass it as TASK, `-` to read it from stdin, or --task-file FILE (`cadre chat` talks interactively)".into(),
            )
            .into())
        }
        (None, None) => (from_stdin()?, "stdin".to_owned()),
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(ConfigError(format!(
            "the task is empty ({from}); say what the agent should do"
        ))
        .into());
    }
    Ok(text.to_owned())
}

/// `cadre resume [RUN_ID]`: carries on a killed run (default: the newest unfinished one).
pub async fn resume_cmd(cmd: ResumeCmd, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let ResumeCmd { run_id, mut args } = cmd;
    let root = workspace_root(directory.clone())?;
    if let Some(dir) = run_id
        .as_deref()
        .and_then(|id| crate::engine::find(&root, id))
    {
        return crate::engine::resume(&dir, &args, quiet).await;
    }
    if args.engine == crate::args::Engine::Restate {
        return Err(ConfigError(
            "--engine restate: `cadre resume RUN_ID` follows an engine run again by its id (the run named is not one)".into(),
        )
        .into());
    }
    let dir = match run_id {
        Some(id) => crate::sessions::find(&root, &id)?,
        None => crate::sessions::newest(&root, false)?.ok_or_else(|| {
            ConfigError("no unfinished run with a journal in .cadre/runs/ of this workspace; `cadre run --continue TASK` continues a finished one".into())
        })?,
    };
    args.agent = crate::sessions::primary_type(&dir)?;
    run(args, Job::Resume(dir), directory, quiet).await
}

/// Runs the primary agent and prints what it does; returns the exit code.
pub async fn run(args: RunArgs, job: Job, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let session = Session::prepare(args, directory, quiet)?;
    Ok(session.turn(&job, quiet, Signals::Process).await?.code)
}

/// How Ctrl-C is handled during a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signals {
    /// Ctrl-C or SIGTERM cancels the run; a second Ctrl-C exits at once (`cadre run`).
    Process,
    /// Ctrl-C cancels this turn and every subagent it started, nothing more (interactive).
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
    asks: Option<tokio::sync::Mutex<mpsc::UnboundedReceiver<crate::approve::Ask>>>,
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
        let user_dir = user_home(include_user).map(|h| h.join(".config/cadre"));
        let settings = crate::settings::resolve(&mut args, &root, user_dir.as_deref())?;
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
        if let Err(e) = crate::project::write_gitignore(&root) {
            errln!("cadre: warning: cannot write .cadre/.gitignore: {e}");
        }
        let workspace = Workspace::new(&root)
            .map_err(|e| ConfigError(format!("cannot work in {}: {e}", root.display())))?;
        require_dirs(&args.dirs.agents_dir, "--agents-dir")?;
        require_dirs(&args.skills.skills_dir, "--skills-dir")?;
        let registry = load_registry_from(&root, &args.dirs.agents_dir, include_user);
        let skills = load_skills_from(&root, &args.skills.skills_dir, include_user);
        let mcp = crate::mcp::load_servers(&root, &args.mcp, include_user)?;
        if !quiet {
            for p in &mcp.config().problems {
                errln!("cadre: skipped: {p}");
            }
            print_problems(registry.problems());
            print_problems(skills.problems());
        }
        cadre_core::primary_spec(&registry, &args.agent).map_err(|e| match e {
            RunError::UnknownAgent { .. } => ConfigError(format!("{e} (see `cadre agents list`)")),
            e => ConfigError(e.to_string()),
        })?;
        let model_id = model_id(&args)?;
        let (model, run_id) = build_model(&args)?;
        let (permissions, asks) =
            crate::approve::permissions(&args, &settings.permissions, crate::approve::can_ask())?;
        Ok(Self {
            permissions,
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
        })
    }

    /// A fresh orchestrator for one turn (its own cancel token and usage).
    pub fn orchestrator(&self) -> Result<Arc<Orchestrator>> {
        let args = &self.args;
        let mut builder = Orchestrator::builder()
            .workspace_handle(self.workspace.clone())
            .model(self.model.clone())
            .model_id(&self.model_id)
            .registry(self.registry.clone())
            .skills(self.skills.clone())
            .mcp(self.mcp.clone())
            .instructions(self.instructions.clone())
            .limits(Limits {
                max_parallel: args.max_parallel.max(1),
                max_depth: args.max_depth,
                ..Limits::default()
            })
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
        if !args.no_transcripts {
            builder = builder.runs_dir(self.root.join(".cadre").join("runs"));
        }
        if args.allow_unsandboxed_bash {
            builder = builder.sandbox(SandboxMode::Unsandboxed);
        }
        builder
            .permissions(self.permissions.clone())
            .build()
            .map_err(|e| ConfigError(e.to_string()).into())
    }

    /// Runs one job with the live display.
    pub async fn turn(&self, job: &Job, quiet: bool, signals: Signals) -> Result<Turn> {
        let args = &self.args;
        let orchestrator = self.orchestrator()?;
        let mut events = orchestrator.events();
        let turn_cancel = CancellationToken::new();
        // Cancelled by a second Ctrl-C: stop waiting for the agents at all.
        let quit = CancellationToken::new();
        match signals {
            Signals::Process => spawn_signal_watch(orchestrator.cancel_token(), quit.clone()),
            Signals::Turn => {
                let cancel = orchestrator.cancel_token();
                let done = turn_cancel.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {
                            errln!("\ncadre: cancelling this turn");
                            cancel.cancel();
                        }
                        () = done.cancelled() => {}
                    }
                });
            }
        }
        let _stop_watch = turn_cancel.clone().drop_guard();
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
            let run = async {
                match job {
                    Job::Fresh(task) => orchestrator.run(&args.agent, task).await,
                    Job::Resume(dir) => orchestrator.resume(dir, None).await,
                    Job::Continue(dir, task) => orchestrator.resume(dir, Some(task)).await,
                }
            };
            tokio::pin!(run);
            loop {
                tokio::select! {
                    result = &mut run => break Some(result),
                    () = quit.cancelled() => break None,
                    Some(ask) = next_ask(&mut asks), if answering.is_none() => {
                        answering = Some(crate::approve::start(ask, display.pause()));
                    }
                    _ = answered(&mut answering), if answering.is_some() => {
                        answering = None;
                        display.resume();
                    }
                    Some(event) = events.next() => display.event(&event),
                    _ = ticker.tick() => display.tick(
                        &orchestrator.roster(),
                        orchestrator.usage().agents.len(),
                        orchestrator.tokens_used(),
                        started.elapsed(),
                    ),
                }
            }
        };
        while let Some(event) = events.try_next() {
            display.event(&event);
        }
        let (outcome, summary) = match result {
            Some(result) => result.map_err(|e| ConfigError(e.to_string()))?,
            // The run's future is dropped above: its commands' process groups are killed
            // and sandbox folders removed as their owners drop; the summary is what ended.
            None => {
                let task = match job {
                    Job::Fresh(t) | Job::Continue(_, t) => t.as_str(),
                    Job::Resume(_) => "",
                };
                let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let summary = orchestrator.abandon(task, elapsed);
                let outcome = cadre_core::AgentOutcome {
                    text: String::new(),
                    stop: StopKind::Cancelled,
                    turns: 0,
                    tool_calls: 0,
                    usage: Default::default(),
                    history: Vec::new(),
                };
                (outcome, summary)
            }
        };
        let run_dir = orchestrator.run_dir().map(|d| shown_path(d.path()));
        display.finish(&outcome, &summary, &self.model_id, run_dir.as_deref());
        if let StopKind::ModelError(e) = &outcome.stop {
            if quiet || args.output_format != crate::args::OutputFormat::Text {
                errln!("cadre: {e}");
            }
        }
        Ok(Turn {
            code: Code::for_stop(&outcome.stop),
            dir: orchestrator.run_dir().map(|d| d.path().to_path_buf()),
            summary,
        })
    }
}

impl Session {
    /// Compacts the conversation of the run in `dir` now; returns what it cost.
    pub async fn compact(&self, dir: &std::path::Path) -> Result<cadre_model::Usage> {
        let orchestrator = self.orchestrator()?;
        orchestrator
            .compact(dir)
            .await
            .map_err(|e| ConfigError(e.to_string()).into())
    }
}

/// The next question for the person, if the session has a terminal to ask on.
async fn next_ask(
    asks: &mut Option<tokio::sync::MutexGuard<'_, mpsc::UnboundedReceiver<crate::approve::Ask>>>,
) -> Option<crate::approve::Ask> {
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

/// `path` as a person would type it from where cadre was started: relative to the current
/// folder when inside it, else as it is.
pub(crate) fn shown_path(path: &std::path::Path) -> PathBuf {
    let inside = std::env::current_dir().ok().and_then(|cwd| {
        path.strip_prefix(cwd)
            .ok()
            .map(std::path::Path::to_path_buf)
    });
    match inside {
        Some(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
        Some(rel) => rel,
        None => path.to_path_buf(),
    }
}

/// Fails unless every folder given with `flag` exists: a typo must not pass silently.
pub fn require_dirs(dirs: &[PathBuf], flag: &str) -> Result<()> {
    match dirs.iter().find(|d| !d.is_dir()) {
        Some(d) => {
            Err(ConfigError(format!("cannot use {flag} {}: no such folder", d.display())).into())
        }
        None => Ok(()),
    }
}

/// The user's home folder, whose agent and skill folders are loaded unless `include_user`
/// is false (a replay must not depend on them).
pub fn user_home(include_user: bool) -> Option<PathBuf> {
    include_user
        .then(|| std::env::var_os("HOME").map(PathBuf::from))
        .flatten()
}

/// The folder to work in: `-C DIR`, else the project root found from the current folder
/// up (see [`crate::project::find_root`]); a missing folder is a plain error.
pub fn workspace_root(directory: Option<PathBuf>) -> Result<PathBuf> {
    project_root(directory).map(|(root, _)| root)
}

/// [`workspace_root`], and how it was found.
pub fn project_root(directory: Option<PathBuf>) -> Result<(PathBuf, crate::project::Found)> {
    use crate::project::Found;
    match directory {
        Some(dir) if dir.exists() && !dir.is_dir() => Err(ConfigError(format!(
            "cannot use -C {}: it is a file, not a folder",
            dir.display()
        ))
        .into()),
        Some(dir) if !dir.is_dir() => {
            Err(ConfigError(format!("cannot use -C {}: no such folder", dir.display())).into())
        }
        Some(dir) => Ok((dir, Found::Flag)),
        None => {
            let cwd = std::env::current_dir()
                .map_err(|e| ConfigError(format!("cannot read the current folder: {e}")))?;
            Ok(crate::project::find_root(&cwd, user_home(true).as_deref()))
        }
    }
}

/// With --record or --replay, says which of the user's own files exist and are not read.
fn note_left_out() {
    let Some(home) = user_home(true) else {
        return;
    };
    let left: Vec<String> = [
        ".claude/agents",
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

/// The model id: --model (aliases resolved), else the provider's default.
pub(crate) fn model_id(args: &RunArgs) -> Result<String> {
    match (&args.model, args.provider) {
        (Some(m), _) => Ok(resolve_model_alias(m).to_owned()),
        (None, Provider::Anthropic) => Ok(cadre_model::DEFAULT_MODEL.to_owned()),
        (None, Provider::Openai) => Err(ConfigError(
            "--provider openai needs the server's model name: pass --model (for example --model qwen3:8b for Ollama, --model gpt-5 for OpenAI), set CADRE_MODEL, or put `model = \"NAME\"` in cadre.toml".into(),
        )
        .into()),
    }
}

/// The model client — a replay, or a live provider (wrapped in a recorder with --record) —
/// and the run id the cassette holds: a replay names its worktree branches as the recorded
/// run did, so its requests match the recording.
fn build_model(args: &RunArgs) -> Result<(Arc<dyn Model>, Option<String>)> {
    if let Some(cassette) = &args.replay {
        let replay = ReplayModel::open(cassette)
            .map_err(|e| ConfigError(format!("cannot replay {}: {e}", cassette.display())))?;
        if let Some(line) = replay.truncated_tail() {
            errln!("cadre: the cassette's last line ({line}) was cut short and is ignored");
        }
        let run_id = replay.recorded_run_id().map(str::to_owned);
        return Ok((Arc::new(replay), run_id));
    }
    let live = live_model(&ModelOptions {
        provider: args.provider,
        base_url: args.base_url.as_deref(),
        api_version: &args.api_version,
        max_retries: args.max_retries,
        request_timeout: args.request_timeout,
    })?;
    match &args.record {
        Some(cassette) => {
            let run_id = cadre_core::record::transcript::new_run_id();
            let recorder =
                RecordingModel::create_for_run(cassette, live, Some(&run_id)).map_err(|e| {
                    ConfigError(format!("cannot record to {}: {e}", cassette.display()))
                })?;
            Ok((Arc::new(recorder), Some(run_id)))
        }
        None => Ok((live, None)),
    }
}

/// Cancels the run on Ctrl-C or SIGTERM; a second Ctrl-C cancels `quit`, and the run is
/// given up at once (its agents' commands killed, what can be written written).
fn spawn_signal_watch(cancel: CancellationToken, quit: CancellationToken) {
    tokio::spawn(async move {
        let terminated = crate::signals::sigterm();
        let by = tokio::select! {
            _ = tokio::signal::ctrl_c() => "Ctrl-C; Ctrl-C again quits at once",
            () = terminated => "SIGTERM; Ctrl-C quits at once",
        };
        errln!("\ncadre: stopping every agent ({by})");
        cancel.cancel();
        if tokio::signal::ctrl_c().await.is_ok() {
            errln!("cadre: quitting now");
            quit.cancel();
        }
    });
}
