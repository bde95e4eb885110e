//! Log output on stderr, for every binary of the package.

use tracing_subscriber::EnvFilter;

/// Logs to stderr: warnings by default, more with `-v`/`-vv`, errors only with `-q`; `RUST_LOG` overrides.
pub fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        // Retries and a cassette's cut-off last line are already told in plain words; the
        // log repeats them only with -v.
        (false, 0) => "warn,cadre_model::retry=error,cadre_model::cassette=error",
        (false, 1) => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        // A closed stderr must not turn a log line into a panic.
        .log_internal_errors(false)
        .init();
}
