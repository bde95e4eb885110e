//! One module per command of `cadre`, each built on [`crate::common`] alone: no command
//! borrows from another.

pub mod agents;
pub mod chat;
pub mod completions;
pub mod config;
pub mod doctor;
pub mod mcp;
pub mod mcp_serve;
pub mod resume;
pub mod run;
pub mod runs;
pub mod skills;
pub mod trust;
pub mod worker;
pub mod workflow;

use crate::args::{Cli, Command, McpCommand};
use crate::common::exit::{Code, Result};
use crate::common::project::workspace_root;
use clap::CommandFactory;

/// Runs the command `cli` names (`cadre` alone: [`default_command`]).
pub async fn dispatch(cli: Cli) -> Result<Code> {
    let Cli {
        directory,
        verbose,
        quiet,
        continue_last,
        command,
    } = cli;
    let command = match command {
        Some(command) => command,
        None => match default_command(continue_last) {
            Ok(command) => command,
            Err(code) => return Ok(code),
        },
    };
    match command {
        Command::Chat(cmd) => chat::chat(*cmd, directory).await,
        Command::Run(cmd) => run::run_cmd(*cmd, directory, quiet).await,
        Command::Resume(cmd) => resume::resume_cmd(*cmd, directory, quiet).await,
        Command::Doctor => Ok(doctor::doctor(directory)),
        Command::Config(cmd) => config::config(cmd, directory),
        Command::Trust(cmd) => trust::trust(&cmd, directory),
        Command::Agents(cmd) => agents::agents(cmd, &workspace_root(directory)?),
        Command::Skills(cmd) => skills::skills(cmd, &workspace_root(directory)?),
        Command::Workflow(cmd) => workflow::workflow(cmd, directory, quiet).await,
        Command::Runs(cmd) => runs::runs(cmd, &workspace_root(directory)?).await,
        Command::Mcp(McpCommand::Serve(cmd)) => mcp_serve::serve(*cmd, directory).await,
        Command::Mcp(McpCommand::List(args)) => {
            mcp::mcp(args, false, &workspace_root(directory)?).await
        }
        Command::Mcp(McpCommand::Check(args)) => {
            mcp::mcp(args, true, &workspace_root(directory)?).await
        }
        Command::Worker(mut cmd) => {
            cmd.verbose = verbose;
            worker::exec(&cmd)
        }
        Command::Completions { shell } => Ok(completions::completions(shell)),
    }
}

/// `cadre` alone: an interactive session on a terminal, the help otherwise. With
/// `-c`/`--continue`, the newest run goes on: in a session on a terminal, else with the
/// follow-up read from stdin.
fn default_command(continue_last: bool) -> std::result::Result<Command, Code> {
    use std::io::IsTerminal;
    let on_terminal = std::io::stdin().is_terminal();
    if !on_terminal && !continue_last {
        errln!("cadre: no command given; `cadre run TASK` runs a task, and `cadre` on a terminal opens an interactive session (see `cadre --help`)");
        return Err(Code::Config);
    }
    // The global options given (-C, -v, -c) stay; the command brings its defaults.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    argv.push(if on_terminal { "chat" } else { "run" }.into());
    match Cli::command()
        .try_get_matches_from(argv)
        .and_then(crate::args::parse)
    {
        Ok(Cli {
            command: Some(command),
            ..
        }) => Ok(command),
        _ => Err(Code::Config),
    }
}
