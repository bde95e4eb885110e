//! `cadre worker`'s options, shared by `cadre` and the `cadre-worker` program it hands them
//! to (so the `cadre` binary does not carry the Restate SDK), and the option parsers both use.

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The environment variable `cadre worker` hands its parsed options to `cadre-worker` in.
pub const OPTIONS_ENV: &str = "CADRE_WORKER_OPTIONS";

/// Which model API to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Provider {
    /// The Anthropic Messages API.
    Anthropic,
    /// An OpenAI-compatible Chat Completions server.
    Openai,
}

/// A parser of whole numbers from `min` (up to `max`) whose error names the valid range.
pub fn whole<T>(min: u64, max: Option<u64>) -> impl Fn(&str) -> Result<T, String> + Clone
where
    T: TryFrom<u64>,
{
    move |s: &str| {
        let range = match max {
            Some(max) => format!("the valid range is {min}..={max}"),
            None => format!("the valid range is {min}.. ({min} or more)"),
        };
        let n: u64 = s
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| format!("expected a whole number; {range}"))?;
        if n < min || max.is_some_and(|max| n > max) {
            return Err(format!("{n} is out of range; {range}"));
        }
        T::try_from(n).map_err(|_| format!("{n} is too large; {range}"))
    }
}

/// `cadre worker`.
#[derive(Debug, Args, Serialize, Deserialize)]
pub struct WorkerCmd {
    /// Where to serve the agent services (HTTP/2 without TLS, as Restate calls services);
    /// port 0 picks a free one. The address it listens on is printed on stdout. Beyond this
    /// machine, give it --identity-key too: whoever reaches the port runs agents here.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9080")]
    pub listen: std::net::SocketAddr,
    /// Serve only requests the Restate server signed: its request-identity public key,
    /// `publickeyv1_…` as the server logs it at start-up (docs/engine.md says how to make
    /// the key pair).
    #[arg(long, env = "CADRE_IDENTITY_KEY", value_name = "KEY")]
    pub identity_key: Option<String>,
    /// Like --identity-key (and before it), read from FILE: `publickeyv1_…`, or the PEM
    /// public key `openssl pkey -pubout` writes.
    #[arg(long, env = "CADRE_IDENTITY_KEY_FILE", value_name = "FILE")]
    pub identity_key_file: Option<PathBuf>,
    /// This worker's name in the live roster [default: the host name and the port].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The folder agents work in for runs that name no repository (every worker on one
    /// machine sharing it).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Where clones of runs' repositories are kept [default: $CADRE_CACHE, else
    /// ~/.cache/cadre].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Register this worker with the Restate server whose admin API is at URL
    /// (`http://127.0.0.1:9070`, not the ingress) once it listens. Behind a load balancer,
    /// register the balancer instead: `restate deployments register http://BALANCER/`.
    #[arg(long, value_name = "URL")]
    pub register: Option<String>,
    /// Which API to talk to: `anthropic` or `openai` (as for `cadre run`).
    #[arg(long, env = "CADRE_PROVIDER", value_enum, default_value_t = Provider::Anthropic)]
    pub provider: Provider,
    /// Base URL of the API [default: $ANTHROPIC_BASE_URL or https://api.anthropic.com;
    /// with --provider openai: $OPENAI_BASE_URL or https://api.openai.com/v1].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// How many times a transient API failure is retried.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = whole::<u32>(0, Some(100)), allow_negative_numbers = true)]
    pub max_retries: u32,
    /// How long a model request may wait for a byte of its answer, in seconds.
    #[arg(long, default_value_t = cadre_model::HttpOptions::default().idle_timeout.as_secs(), value_name = "SECS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub request_timeout: u64,
    /// The `anthropic-version` header to send.
    #[arg(long, default_value = "2026-10-21")]
    pub api_version: String,
    /// Timeout of a `bash` call when the model gives none, in seconds.
    #[arg(long, default_value_t = 120, value_name = "SECS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub bash_timeout: u64,
    /// Let read-only agents run `bash` without the Landlock sandbox.
    #[arg(long)]
    pub allow_unsandboxed_bash: bool,
    /// `-v` given to `cadre` (`cadre -v worker`), carried to `cadre-worker`.
    #[arg(skip)]
    pub verbose: u8,
}

impl WorkerCmd {
    /// An identity key given on the command line beats a key file only the environment
    /// names (`CADRE_IDENTITY_KEY_FILE`): what is typed is what is meant.
    pub fn prefer_command_line(&mut self, matches: &ArgMatches) {
        let from = |id| matches.value_source(id);
        if from("identity_key") == Some(ValueSource::CommandLine)
            && from("identity_key_file") == Some(ValueSource::EnvVariable)
        {
            self.identity_key_file = None;
        }
    }
}

/// Serves cadre's agents to a Restate server (`cadre worker --help` says more).
#[derive(Debug, Parser)]
#[command(name = "cadre-worker", version)]
pub struct WorkerCli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// The worker's options.
    #[command(flatten)]
    pub cmd: WorkerCmd,
}

/// The options `cadre-worker` runs with: what `cadre worker` handed over in
/// [`OPTIONS_ENV`], else its own command line; an error when the handed-over options do not
/// read.
pub fn worker_options() -> Result<WorkerCmd, serde_json::Error> {
    match std::env::var(OPTIONS_ENV) {
        Ok(options) => serde_json::from_str(&options),
        Err(_) => {
            let matches = WorkerCli::command().get_matches();
            let mut cli = WorkerCli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
            cli.cmd.prefer_command_line(&matches);
            Ok(WorkerCmd {
                verbose: cli.verbose,
                ..cli.cmd
            })
        }
    }
}
