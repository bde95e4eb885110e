//! `cadre worker`'s options and how a model client is made from options like them — shared
//! by `cadre` and the `cadre-worker` program it hands the worker to, so the `cadre` binary
//! does not carry the Restate SDK (and local runs start as fast as before).

use crate::exit::ConfigError;
use anyhow::Result;
use cadre_model::{AnthropicConfig, AnthropicModel, Model, OpenAiConfig, OpenAiModel};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The environment variable `cadre worker` hands its parsed options to `cadre-worker` in.
pub const OPTIONS_ENV: &str = "CADRE_WORKER_OPTIONS";

const NO_KEY: &str =
    "ANTHROPIC_API_KEY is not set. Create a key at https://console.anthropic.com/settings/keys, \
then run `export ANTHROPIC_API_KEY=sk-ant-...` (or put it before the command: \
`ANTHROPIC_API_KEY=sk-ant-... cadre run \"TASK\"`). To use a compatible server instead, \
also set ANTHROPIC_BASE_URL. Without a key: `--provider openai --model NAME` talks to a local \
server such as Ollama, and `--replay FILE` replays a recorded run offline.";

/// Which model API to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Provider {
    /// The Anthropic Messages API.
    Anthropic,
    /// An OpenAI-compatible Chat Completions server.
    Openai,
}

/// A parser of whole numbers from `min` (up to `max`) whose error names the valid range.
pub(crate) fn whole<T>(min: u64, max: Option<u64>) -> impl Fn(&str) -> Result<T, String> + Clone
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
    /// port 0 picks a free one. The address it listens on is printed on stdout.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9080")]
    pub listen: std::net::SocketAddr,
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
    /// (`http://127.0.0.1:9070`) once it listens. Behind a load balancer, register the
    /// balancer instead: `restate deployments register http://BALANCER/`.
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

/// How to reach the model API (the key and base URL come from the environment).
pub struct ModelOptions<'a> {
    /// Which API.
    pub provider: Provider,
    /// `--base-url`, overriding the environment's.
    pub base_url: Option<&'a str>,
    /// The `anthropic-version` header.
    pub api_version: &'a str,
    /// Retries of transient failures.
    pub max_retries: u32,
    /// Seconds a request may wait for a byte of its answer.
    pub request_timeout: u64,
}

/// A live client of the model API; fails, in plain words, without the key it needs.
pub fn live_model(options: &ModelOptions<'_>) -> Result<Arc<dyn Model>> {
    Ok(match options.provider {
        Provider::Anthropic => {
            // The key and base URL are read in one place, the provider's own.
            let mut config = AnthropicConfig::from_env().map_err(|_| ConfigError(NO_KEY.into()))?;
            if let Some(url) = options.base_url {
                url.clone_into(&mut config.base_url);
            }
            options.api_version.clone_into(&mut config.version);
            config.http.retry.max_retries = options.max_retries;
            config.http.idle_timeout = Duration::from_secs(options.request_timeout);
            Arc::new(AnthropicModel::new(config).map_err(|e| ConfigError(e.to_string()))?)
        }
        Provider::Openai => {
            // Local servers (Ollama, llama.cpp) need no key; hosted ones read OPENAI_API_KEY.
            let mut config = OpenAiConfig::from_env();
            if let Some(url) = options.base_url {
                url.clone_into(&mut config.base_url);
            }
            if !config.has_api_key() && config.base_url.contains("api.openai.com") {
                return Err(ConfigError(
                    "OPENAI_API_KEY is not set. Set it for api.openai.com, or point OPENAI_BASE_URL (or --base-url) at a local server such as http://localhost:11434/v1 (Ollama), which needs no key.".into(),
                )
                .into());
            }
            config.http.retry.max_retries = options.max_retries;
            config.http.idle_timeout = Duration::from_secs(options.request_timeout);
            Arc::new(OpenAiModel::new(config).map_err(|e| ConfigError(e.to_string()))?)
        }
    })
}
