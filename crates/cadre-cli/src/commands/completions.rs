//! `cadre completions SHELL`: the shell completion script on stdout.

use crate::args::Cli;
use crate::common::exit::Code;
use clap::CommandFactory;

/// Prints the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Code {
    // Written whole at the end: the generator panics on a write error, a buffer has none.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "cadre", &mut script);
    let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
    Code::Done
}
