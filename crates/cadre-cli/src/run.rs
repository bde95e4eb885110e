//! `cadre run`: the primary agent on one task.

use crate::args::RunArgs;
use crate::display::Display;
use crate::exit::{Code, ConfigError};
use anyhow::Result;
use cadre_core::{prompt, Agent, AgentConfig, Budget, Event, EventHandler, ToolSet};
use cadre_model::{resolve_model_alias, AnthropicConfig, AnthropicModel, Message, Model};
use cadre_tools::{builtin_tools, ToolContext, ToolLimits, Workspace};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const NO_KEY: &str =
    "ANTHROPIC_API_KEY is not set. Create a key at https://console.anthropic.com/settings/keys, \
then run `export ANTHROPIC_API_KEY=sk-ant-...` (or put it before the command: \
`ANTHROPIC_API_KEY=sk-ant-... cadre run \"TASK\"`). To use a compatible server instead, \
also set ANTHROPIC_BASE_URL.";

/// Runs the primary agent and prints what it does; returns the exit code.
pub async fn run(args: RunArgs, directory: Option<PathBuf>, quiet: bool) -> Result<Code> {
    let root = workspace_root(directory)?;
    let workspace = Workspace::new(&root)
        .map_err(|e| ConfigError(format!("cannot work in {}: {e}", root.display())))?;
    let model = build_model(&args)?;
    let model_id = resolve_model_alias(&args.model).to_owned();

    let cancel = CancellationToken::new();
    spawn_signal_watch(cancel.clone());

    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let events: EventHandler = Arc::new(move |e| {
        let _ = tx.send(e);
    });
    let mut display = Display::new(args.output_format, quiet);

    let mut ctx = ToolContext::new(Arc::new(workspace));
    ctx.cancel = cancel.clone();
    ctx.limits = ToolLimits {
        bash_timeout: Duration::from_secs(args.bash_timeout),
        ..ToolLimits::default()
    };
    let agent = Agent {
        config: AgentConfig {
            path: "main".into(),
            agent_type: "main".into(),
            model: model_id.clone(),
            system: prompt::main_system_prompt(&root.display().to_string()),
            max_tokens: args.max_tokens,
            max_turns: args.max_turns,
        },
        model,
        tools: ToolSet::new(builtin_tools()),
        ctx,
        budget: Budget::new(args.budget_tokens),
        events: events.clone(),
    };
    events(Event::Started {
        agent: "main".into(),
        agent_type: "main".into(),
        description: args.task.chars().take(60).collect(),
        model: model_id.clone(),
    });

    let started = Instant::now();
    let outcome = {
        let run = agent.run(vec![Message::user_text(&args.task)]);
        tokio::pin!(run);
        loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                Some(event) = rx.recv() => display.event(&event),
            }
        }
    };
    while let Ok(event) = rx.try_recv() {
        display.event(&event);
    }
    display.finish(&outcome, &model_id, started.elapsed());
    if let cadre_core::StopKind::ModelError(e) = &outcome.stop {
        if quiet || args.output_format != crate::args::OutputFormat::Text {
            eprintln!("cadre: {e}");
        }
    }
    Ok(Code::for_stop(&outcome.stop))
}

/// The folder to work in: `-C DIR` or the current one; a missing folder is a plain error.
fn workspace_root(directory: Option<PathBuf>) -> Result<PathBuf> {
    match directory {
        Some(dir) if !dir.is_dir() => {
            Err(ConfigError(format!("cannot use -C {}: no such folder", dir.display())).into())
        }
        Some(dir) => Ok(dir),
        None => std::env::current_dir()
            .map_err(|e| ConfigError(format!("cannot read the current folder: {e}")).into()),
    }
}

fn build_model(args: &RunArgs) -> Result<Arc<dyn Model>> {
    let key = std::env::var("ANTHROPIC_API_KEY").unwrap_or_default();
    if key.trim().is_empty() {
        return Err(ConfigError(NO_KEY.into()).into());
    }
    let mut config = AnthropicConfig::new(key.trim());
    config.base_url = args.base_url.clone();
    config.version = args.api_version.clone();
    config.retry.max_retries = args.max_retries;
    let model = AnthropicModel::new(config).map_err(|e| ConfigError(e.to_string()))?;
    Ok(Arc::new(model))
}

/// Cancels the run on Ctrl-C or SIGTERM; a second Ctrl-C exits at once.
fn spawn_signal_watch(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
        eprintln!("\ncadre: stopping every agent (Ctrl-C again to quit at once)");
        cancel.cancel();
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(Code::Cancelled as i32);
        }
    });
}
