//! The `cadre` command.

use std::process::ExitCode;

fn main() -> ExitCode {
    cadre_cli::cadre(cadre_cli::args::from_env())
}
