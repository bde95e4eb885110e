//! The `cadre` command.

#[macro_use]
mod macros;

mod agents;
mod approve;
mod args;
mod config;
mod display;
mod doctor;
mod engine;
mod exit;
mod interactive;
mod logging;
mod mcp;
mod project;
mod run;
mod runs;
mod runs_html;
mod sessions;
mod settings;
mod signals;
mod skills;
mod worker_cmd;

use args::{Cli, Command};
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = parse(Cli::command().get_matches()).unwrap_or_else(|e| e.exit());
    logging::init_logging(cli.verbose, cli.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("cadre: could not start the async runtime: {e}");
            return exit::Code::Config.into();
        }
    };
    if let Some(Command::Completions { shell }) = cli.command {
        return completions(shell).into();
    }
    let command = match cli.command {
        Some(command) => command,
        None => match default_command() {
            Ok(command) => command,
            Err(code) => return code.into(),
        },
    };
    let result = runtime.block_on(async {
        match command {
            Command::Chat(cmd) => interactive::chat(*cmd, cli.directory).await,
            Command::Run(cmd) => run::run_cmd(*cmd, cli.directory, cli.quiet).await,
            Command::Resume(cmd) => run::resume_cmd(*cmd, cli.directory, cli.quiet).await,
            Command::Doctor => Ok(doctor::doctor(cli.directory)),
            Command::Config(cmd) => config::config(cmd, cli.directory),
            Command::Agents(cmd) => {
                run::workspace_root(cli.directory).and_then(|root| agents::agents(cmd, &root))
            }
            Command::Skills(cmd) => {
                run::workspace_root(cli.directory).and_then(|root| skills::skills(cmd, &root))
            }
            Command::Runs(cmd) => match run::workspace_root(cli.directory) {
                Ok(root) => runs::runs(cmd, &root).await,
                Err(e) => Err(e),
            },
            Command::Mcp(cmd) => match run::workspace_root(cli.directory) {
                Ok(root) => mcp::mcp(cmd, &root).await,
                Err(e) => Err(e),
            },
            Command::Worker(mut cmd) => {
                cmd.verbose = cli.verbose;
                exec_worker(&cmd)
            }
            Command::Completions { shell } => Ok(completions(shell)),
        }
    });
    match result {
        Ok(code) => code.into(),
        Err(err) => {
            errln!("cadre: {err:#}");
            exit::classify(&err).into()
        }
    }
}

/// `cadre` alone: an interactive session on a terminal, the help otherwise.
fn default_command() -> Result<Command, exit::Code> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        errln!("cadre: no command given; `cadre run TASK` runs a task, and `cadre` on a terminal opens an interactive session (see `cadre --help`)");
        return Err(exit::Code::Config);
    }
    // The global options given (-C, -v) stay; `chat` brings its defaults.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    argv.push("chat".into());
    match Cli::command().try_get_matches_from(argv).and_then(parse) {
        Ok(Cli {
            command: Some(command),
            ..
        }) => Ok(command),
        _ => Err(exit::Code::Config),
    }
}

/// `cadre completions SHELL`: the completion script on stdout.
fn completions(shell: clap_complete::Shell) -> exit::Code {
    use clap::CommandFactory;
    // Written whole at the end: the generator panics on a write error, a buffer has none.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "cadre", &mut script);
    let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
    exit::Code::Done
}

/// The command line from clap's matches, with what the run options' matches say was given
/// (a flag, the environment) noted, so settings files fill only the rest.
fn parse(matches: ArgMatches) -> Result<Cli, clap::Error> {
    let mut cli = Cli::from_arg_matches(&matches)?;
    let mut leaf = &matches;
    while let Some((_, sub)) = leaf.subcommand() {
        leaf = sub;
    }
    let args = match &mut cli.command {
        Some(Command::Run(cmd)) => Some(&mut cmd.args),
        Some(Command::Chat(cmd)) => Some(&mut cmd.args),
        Some(Command::Resume(cmd)) => Some(&mut cmd.args),
        Some(Command::Config(args::ConfigCommand::Show(cmd))) => Some(&mut cmd.args),
        _ => None,
    };
    if let Some(args) = args {
        args.given = settings::Given::from_matches(leaf);
    }
    Ok(cli)
}

/// `cadre worker`: hands the parsed options to the `cadre-worker` program beside this one,
/// which takes this process's place (the same pid, signals and output).
fn exec_worker(cmd: &args::WorkerCmd) -> anyhow::Result<exit::Code> {
    use std::os::unix::process::CommandExt;
    let program = std::env::current_exe()?.with_file_name("cadre-worker");
    if !program.is_file() {
        return Err(exit::ConfigError(format!(
            "`cadre worker` runs the cadre-worker program, and there is none at {} (`cargo install --path crates/cadre-cli` installs both)",
            program.display()
        ))
        .into());
    }
    let options = serde_json::to_string(cmd)?;
    let err = std::process::Command::new(&program)
        .env(worker_cmd::OPTIONS_ENV, options)
        .exec();
    Err(exit::ConfigError(format!("cannot run {}: {err}", program.display())).into())
}
