//! `cadre-worker`: the program behind `cadre worker`. It serves cadre's agents to a Restate
//! server; it is a program of its own so that `cadre` itself does not carry the Restate SDK.

use std::process::ExitCode;

fn main() -> ExitCode {
    cadre_cli::cadre_worker(cadre_cli::args::worker::worker_options())
}
