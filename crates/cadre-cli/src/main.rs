//! The `cadre` command.

/// `println!` that ignores a closed pipe (`cadre … | head` must not crash).
macro_rules! outln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that ignores a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod agents;
mod approve;
mod args;
mod display;
mod doctor;
mod exit;
mod interactive;
mod mcp;
mod run;
mod runs;
mod runs_html;
mod sessions;
mod skills;

use args::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cadre: could not start the async runtime: {e}");
            return exit::Code::Config.into();
        }
    };
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
            Command::Doctor => Ok(doctor::doctor()),
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
        }
    });
    match result {
        Ok(code) => code.into(),
        Err(err) => {
            eprintln!("cadre: {err:#}");
            exit::classify(&err).into()
        }
    }
}

/// `cadre` alone: an interactive session on a terminal, the help otherwise.
fn default_command() -> Result<Command, exit::Code> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        eprintln!("cadre: no command given; `cadre run TASK` runs a task, and `cadre` on a terminal opens an interactive session (see `cadre --help`)");
        return Err(exit::Code::Config);
    }
    // The global options given (-C, -v) stay; `chat` brings its defaults.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    argv.push("chat".into());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Some(command),
            ..
        }) => Ok(command),
        _ => Err(exit::Code::Config),
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        // Retries are already shown by the display; the log repeats them only with -v.
        (false, 0) => "warn,cadre_model::retry=error",
        (false, 1) => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}
