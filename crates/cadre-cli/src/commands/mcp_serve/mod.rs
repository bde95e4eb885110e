//! `cadre mcp serve`: cadre as an MCP server. Each agent type a subagent may be is a tool
//! ([`tools`]); each call is a run of its own in the project, journaled and listed by
//! `cadre runs` like any other ([`call`]); the MCP side is [`handler`], over stdio or
//! streamable HTTP ([`http`]); every call's model requests share one limit ([`limit`]),
//! and Ctrl-C, SIGTERM or SIGHUP stops it.

mod call;
mod handler;
mod http;
mod limit;
mod tools;

use crate::args::{Engine, McpServeCmd, OutputFormat, RunArgs};
use crate::common::exit::{CliError, Code, Result};
use crate::common::session::Session;
use crate::common::signals;
use handler::{CadreServer, Shared};
use rmcp::ServiceExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tools::{agent_tools, ServerLimits};

/// Set in the environment of `cadre mcp serve` and so of everything its calls run (commands,
/// MCP servers): a server started there would run agents outside the call's limits.
pub const SERVED_ENV: &str = "CADRE_MCP_SERVED";

/// For `cadre mcp serve`: refuses to serve inside a served call (an agent reaching a child
/// server's tools would escape its call's turn, budget and permission limits), then marks
/// this process so its children are known to be inside one. Called before any thread starts.
pub fn mark_served(cli: &crate::args::Cli) -> Result<()> {
    if !matches!(
        cli.command,
        Some(crate::args::Command::Mcp(crate::args::McpCommand::Serve(_)))
    ) {
        return Ok(());
    }
    if std::env::var_os(SERVED_ENV).is_some() {
        return Err(CliError::config(format!(
            "cadre mcp serve is refused inside a call of another cadre mcp serve ({SERVED_ENV} is set): its agents would escape that call's limits"
        )));
    }
    std::env::set_var(SERVED_ENV, "1");
    Ok(())
}

/// How long calls still running when the server stops get to end as cancelled runs.
const GRACE: Duration = Duration::from_secs(20);

/// Serves the project's agent types as MCP tools until the client hangs up (stdio) or the
/// process is stopped (Ctrl-C, SIGTERM or SIGHUP).
pub async fn serve(cmd: McpServeCmd, directory: Option<PathBuf>) -> Result<Code> {
    // Watched from the start: a SIGHUP while the project loads must not end the process
    // with no say, nor one later leave the calls' commands running.
    let stop_requested = signals::stop_requested();
    let McpServeCmd {
        http,
        token,
        no_token,
        prefix,
        args,
    } = cmd;
    // An empty token (CADRE_MCP_TOKEN= in a script) would let anyone in: it is none.
    let token = token.filter(|t| !t.trim().is_empty());
    if args.engine == Engine::Restate {
        return Err(CliError::config(
            "cadre mcp serve runs each call here; --engine restate is not supported (run `cadre worker`s for the engine instead)",
        ));
    }
    refuse_run_only_flags(&args)?;
    let token = match http {
        Some(addr) => http::token_for(addr, token, no_token)?,
        None => None,
    };
    let limits = ServerLimits {
        max_turns: args.max_turns,
        budget_tokens: args.budget_tokens,
    };
    let max_parallel = args.max_parallel;
    let session = Session::prepare(args, directory, false)?.without_terminal();
    let tools = agent_tools(&session.registry, &prefix, &limits);
    if tools.is_empty() {
        errln!("cadre: warning: no agent type may be a subagent here, so no tool is served (see `cadre agents list`)");
    }
    let model = Arc::new(limit::SharedLimit::new(session.model(), max_parallel));
    let shared = Arc::new(Shared {
        session,
        model,
        tools,
        limits,
        tasks: rmcp::task_manager::TaskManager::new(),
        stopping: CancellationToken::new(),
        calls: tokio_util::task::TaskTracker::new(),
    });
    let Some(addr) = http else {
        let signalled = serve_stdio(shared.clone(), stop_requested).await?;
        stop(&shared).await;
        if signalled {
            // tokio reads stdin on a blocking thread that only a line or its end frees, and
            // the runtime waits for that thread when it is dropped: a server stopped by a
            // signal while its client still holds stdin open would never exit. Its calls
            // have ended and their runs are recorded, so it exits here.
            drop(shared);
            crate::common::telemetry::shutdown();
            std::process::exit(0);
        }
        return Ok(Code::Done);
    };
    let served = http::serve(shared.clone(), addr, token, stop_requested).await;
    stop(&shared).await;
    served.map(|()| Code::Done)
}

/// Refuses the options of `cadre run` that mean nothing to a server, naming the first
/// given: each call's type is its tool's, its output goes to the client, and a recording
/// or a team is one run's.
fn refuse_run_only_flags(args: &RunArgs) -> Result<()> {
    let given = [
        ("--agent", args.agent != "main"),
        ("--team", args.team),
        ("--max-messages", args.max_messages != 500),
        ("--record", args.record.is_some()),
        ("--replay", args.replay.is_some()),
        ("--output-format", args.output_format != OutputFormat::Text),
        ("--repo", args.repo.is_some()),
        ("--restate-admin-url", args.restate_admin_url.is_some()),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(CliError::config(format!(
            "cadre mcp serve does not take {flag}: it is an option of one run, and each call is a run of its tool's type whose answer goes to the client"
        ))),
        None => Ok(()),
    }
}

/// Serves one client over stdin and stdout until it hangs up (or the process is stopped:
/// then `true`).
async fn serve_stdio(
    shared: Arc<Shared>,
    stop_requested: impl std::future::Future<Output = ()>,
) -> Result<bool> {
    let service = CadreServer::new(shared)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::config_from("the MCP client did not start a session", e))?;
    tokio::select! {
        done = service.waiting() => {
            if let Err(e) = done {
                tracing::warn!("the MCP session ended: {e}");
            }
            Ok(false)
        }
        () = stop_requested => Ok(true),
    }
}

/// Cancels every call still running and gives them [`GRACE`] to end, so their runs record
/// the cancellation and their commands are stopped.
async fn stop(shared: &Shared) {
    shared.calls.close();
    shared.stopping.cancel();
    if tokio::time::timeout(GRACE, shared.calls.wait())
        .await
        .is_err()
    {
        errln!("cadre: some calls did not end in time; their runs are left unfinished (`cadre resume` carries one on)");
    }
    shared.tasks.shutdown();
}
