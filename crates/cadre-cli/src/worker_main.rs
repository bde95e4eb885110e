//! `cadre-worker`: the program behind `cadre worker`. It serves cadre's agents to a Restate
//! server; it is a program of its own so that `cadre` itself does not carry the Restate SDK.

#[macro_use]
#[allow(unused_macros)] // `out!` is for `cadre`'s listings.
mod macros;
mod exit;
mod logging;
mod signals;
mod worker_cmd;

use anyhow::Result;
use cadre_engine::client::Ingress;
use cadre_engine::Worker;
use cadre_tools::{SandboxMode, ToolLimits};
use clap::Parser;
use exit::{Code, ConfigError};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use worker_cmd::{live_model, ModelOptions, WorkerCmd, OPTIONS_ENV};

/// Serves cadre's agents to a Restate server (`cadre worker --help` says more).
#[derive(Debug, Parser)]
#[command(name = "cadre-worker", version)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(flatten)]
    cmd: WorkerCmd,
}

fn main() -> ExitCode {
    // `cadre worker` hands over what it parsed; run on its own, the program reads its flags.
    let cmd = match std::env::var(OPTIONS_ENV) {
        Ok(options) => match serde_json::from_str::<WorkerCmd>(&options) {
            Ok(cmd) => cmd,
            Err(e) => {
                errln!("cadre-worker: {OPTIONS_ENV} is not what cadre passes: {e}");
                return Code::Config.into();
            }
        },
        Err(_) => {
            let cli = Cli::parse();
            WorkerCmd {
                verbose: cli.verbose,
                ..cli.cmd
            }
        }
    };
    logging::init_logging(cmd.verbose, false);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("cadre: could not start the async runtime: {e}");
            return Code::Config.into();
        }
    };
    match runtime.block_on(worker(cmd)) {
        Ok(code) => code.into(),
        Err(err) => {
            errln!("cadre: {err:#}");
            exit::classify(&err).into()
        }
    }
}

/// `cadre worker`: serves the agent services until Ctrl-C or SIGTERM.
pub async fn worker(cmd: WorkerCmd) -> Result<Code> {
    let model = live_model(&ModelOptions {
        provider: cmd.provider,
        base_url: cmd.base_url.as_deref(),
        api_version: &cmd.api_version,
        max_retries: cmd.max_retries,
        request_timeout: cmd.request_timeout,
    })?;
    let listener = tokio::net::TcpListener::bind(cmd.listen)
        .await
        .map_err(|e| ConfigError(format!("cannot listen on {}: {e}", cmd.listen)))?;
    let addr = listener.local_addr()?;
    let name = cmd.name.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}:{}", host.trim(), addr.port())
    });
    let mut worker = Worker::new(&name, model).tool_limits(ToolLimits {
        bash_timeout: Duration::from_secs(cmd.bash_timeout),
        ..ToolLimits::default()
    });
    if cmd.allow_unsandboxed_bash {
        worker = worker.sandbox(SandboxMode::Unsandboxed);
    }
    if let Some(dir) = cmd.workspace {
        let dir = dir
            .canonicalize()
            .map_err(|e| ConfigError(format!("cannot use --workspace {}: {e}", dir.display())))?;
        worker = worker.workspace(dir);
    }
    if let Some(dir) = cmd.cache_dir {
        worker = worker.cache_dir(dir);
    }
    outln!("cadre worker {name} listening on http://{addr}/");
    let serving = tokio::spawn(cadre_engine::serve(Arc::new(worker), listener, stopped()));
    if let Some(admin) = &cmd.register {
        Ingress::register(admin, &format!("http://{addr}/"))
            .await
            .map_err(|e| ConfigError(format!("could not register with {admin}: {e}")))?;
        errln!("cadre: registered http://{addr}/ with {admin}");
    }
    let _ = serving.await;
    Ok(Code::Done)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stopped() {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = signals::sigterm() => {}
    }
}
