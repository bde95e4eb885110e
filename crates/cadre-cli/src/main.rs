//! The `cadre` command.

use std::process::ExitCode;

// Agents allocate from many threads at once, where glibc's arenas contend.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Each agent waiting on the model holds a connection: allow as many as the system does.
    if let Err(e) = cadre_model::raise_open_file_limit() {
        eprintln!("cadre: could not raise the limit on open files: {e}");
    }
    cadre_cli::cadre()
}
