//! `cadre worker`: this machine's agents served to a Restate server. `cadre` hands the
//! parsed options to the `cadre-worker` program beside it ([`exec`]), which serves them
//! ([`serve`]): only that program carries the Restate SDK.

use crate::args::worker::{WorkerCmd, OPTIONS_ENV};
use crate::common::exit::{CliError, Code, Result};
use crate::common::model::{live_model, ModelOptions};
use crate::common::signals::stop_requested;
use cadre_engine::client::Ingress;
use cadre_engine::Worker;
use cadre_tools::{SandboxMode, ToolLimits};
use std::sync::Arc;
use std::time::Duration;

/// `cadre worker`: runs the `cadre-worker` program beside this one with the parsed
/// options, in this process's place (the same pid, signals and output).
pub fn exec(cmd: &WorkerCmd) -> Result<Code> {
    use std::os::unix::process::CommandExt;
    let program = std::env::current_exe()?.with_file_name("cadre-worker");
    if !program.is_file() {
        return Err(CliError::config(format!(
            "`cadre worker` runs the cadre-worker program, and there is none at {} (`cargo install --path crates/cadre-cli` installs both)",
            program.display()
        )));
    }
    let options = serde_json::to_string(cmd)
        .map_err(|e| CliError::failed_from("cannot hand the options to cadre-worker", e))?;
    let err = std::process::Command::new(&program)
        .env(OPTIONS_ENV, options)
        .exec();
    Err(CliError::config_from(
        format!("cannot run {}", program.display()),
        err,
    ))
}

/// `cadre-worker`: serves the agent services until Ctrl-C, SIGTERM or SIGHUP.
pub async fn serve(cmd: WorkerCmd) -> Result<Code> {
    let model = live_model(&ModelOptions {
        provider: cmd.provider,
        base_url: cmd.base_url.as_deref(),
        api_version: &cmd.api_version,
        max_retries: cmd.max_retries,
        request_timeout: cmd.request_timeout,
    })?;
    let listener = tokio::net::TcpListener::bind(cmd.listen)
        .await
        .map_err(|e| CliError::config_from(format!("cannot listen on {}", cmd.listen), e))?;
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
        let dir = dir.canonicalize().map_err(|e| {
            CliError::config_from(format!("cannot use --workspace {}", dir.display()), e)
        })?;
        worker = worker.workspace(dir);
    }
    if let Some(dir) = cmd.cache_dir {
        worker = worker.cache_dir(dir);
    }
    if let Some(key) = identity_key(cmd.identity_key, cmd.identity_key_file.as_deref())? {
        worker = worker
            .identity_key(&key)
            .map_err(|e| CliError::config_from("cannot use the worker's identity key", e))?;
    }
    if !worker.verifies_identity() && !addr.ip().is_loopback() {
        errln!(
            "cadre: WARNING: listening on {addr} without an identity key: anyone who reaches this port can run agents here, with this worker's API key, files and commands. Give it the Restate server's public key (--identity-key or --identity-key-file; docs/engine.md)."
        );
    }
    outln!("cadre worker {name} listening on http://{addr}/");
    let serving = tokio::spawn(cadre_engine::serve(
        Arc::new(worker),
        listener,
        stop_requested(),
    ));
    if let Some(admin) = &cmd.register {
        Ingress::register(admin, &format!("http://{addr}/"))
            .await
            .map_err(|e| CliError::config_from(format!("could not register with {admin}"), e))?;
        errln!("cadre: registered http://{addr}/ with {admin}");
    }
    match serving.await {
        Ok(Ok(())) => Ok(Code::Done),
        Ok(Err(e)) => Err(CliError::config_from("cannot serve", e)),
        // The serving task panicked: the worker did not end as asked.
        Err(e) => Err(CliError::failed_from("the worker stopped serving", e)),
    }
}

/// The request-identity key from the file --identity-key-file names, else from
/// --identity-key (or `CADRE_IDENTITY_KEY`); `None` without either. (A file the environment
/// names was already dropped for a key given on the command line: see
/// [`WorkerCmd::prefer_command_line`](crate::args::WorkerCmd::prefer_command_line).)
fn identity_key(key: Option<String>, file: Option<&std::path::Path>) -> Result<Option<String>> {
    // The file is named on purpose; the key may come from the environment.
    match (key, file) {
        (key, None) => Ok(key),
        (_, Some(file)) => std::fs::read_to_string(file).map(Some).map_err(|e| {
            CliError::config_from(
                format!("cannot read --identity-key-file {}", file.display()),
                e,
            )
        }),
    }
}
