//! The model client a command talks to: a live provider from the options and the
//! environment, a recorder around it, or a replay of a cassette.

use crate::args::{Provider, RunArgs};
use crate::common::exit::{CliError, Result};
use cadre_model::{
    resolve_model_alias, AnthropicConfig, AnthropicModel, Model, OpenAiConfig, OpenAiModel,
    RecordingModel, ReplayModel,
};
use std::sync::Arc;
use std::time::Duration;

const NO_KEY: &str =
    "ANTHROPIC_API_KEY is not set. Create a key at https://console.anthropic.com/settings/keys, \
then run `export ANTHROPIC_API_KEY=sk-ant-...` (or put it before the command: \
`ANTHROPIC_API_KEY=sk-ant-... cadre run \"TASK\"`). To use a compatible server instead, \
also set ANTHROPIC_BASE_URL. Without a key: `--provider openai --model NAME` talks to a local \
server such as Ollama, and `--replay FILE` replays a recorded run offline.";

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
            let mut config = AnthropicConfig::from_env().map_err(|_| CliError::config(NO_KEY))?;
            if let Some(url) = options.base_url {
                url.clone_into(&mut config.base_url);
            }
            options.api_version.clone_into(&mut config.version);
            config.http.retry.max_retries = options.max_retries;
            config.http.idle_timeout = Duration::from_secs(options.request_timeout);
            config.http.traceparent = crate::common::telemetry::traceparent_to_model();
            Arc::new(AnthropicModel::new(config).map_err(CliError::invalid)?)
        }
        Provider::Openai => {
            // Local servers (Ollama, llama.cpp) need no key; hosted ones read OPENAI_API_KEY.
            let mut config = OpenAiConfig::from_env();
            if let Some(url) = options.base_url {
                url.clone_into(&mut config.base_url);
            }
            if !config.has_api_key() && config.base_url.contains("api.openai.com") {
                return Err(CliError::config(
                    "OPENAI_API_KEY is not set. Set it for api.openai.com, or point OPENAI_BASE_URL (or --base-url) at a local server such as http://localhost:11434/v1 (Ollama), which needs no key.",
                ));
            }
            config.http.retry.max_retries = options.max_retries;
            config.http.idle_timeout = Duration::from_secs(options.request_timeout);
            config.http.traceparent = crate::common::telemetry::traceparent_to_model();
            Arc::new(OpenAiModel::new(config).map_err(CliError::invalid)?)
        }
    })
}

/// The model id: --model (aliases resolved), else the provider's default.
pub fn model_id(args: &RunArgs) -> Result<String> {
    match (&args.model, args.provider) {
        (Some(m), _) => Ok(resolve_model_alias(m).to_owned()),
        (None, Provider::Anthropic) => Ok(cadre_model::DEFAULT_MODEL.to_owned()),
        (None, Provider::Openai) => Err(CliError::config(
            "--provider openai needs the server's model name: pass --model (for example --model qwen3:8b for Ollama, --model gpt-5 for OpenAI), set CADRE_MODEL, or put `model = \"NAME\"` in cadre.toml",
        )),
    }
}

/// The model client — a replay, or a live provider (wrapped in a recorder with --record) —
/// and the run id the cassette holds: a replay names its worktree branches as the recorded
/// run did, so its requests match the recording.
pub fn build_model(args: &RunArgs) -> Result<(Arc<dyn Model>, Option<String>)> {
    if let Some(cassette) = &args.replay {
        // The error names the cassette and what was being done with it.
        let replay = ReplayModel::open(cassette).map_err(CliError::invalid)?;
        if let Some(line) = replay.truncated_tail() {
            errln!("cadre: the cassette's last line ({line}) was cut short and is ignored");
        }
        let run_id = replay.recorded_run_id().map(str::to_owned);
        return Ok((Arc::new(replay), run_id));
    }
    let live = live_model(&ModelOptions {
        provider: args.provider,
        base_url: args.base_url.as_deref(),
        api_version: &args.api_version,
        max_retries: args.max_retries,
        request_timeout: args.request_timeout,
    })?;
    match &args.record {
        Some(cassette) => {
            let run_id = cadre_core::internal::new_run_id();
            let recorder = RecordingModel::create_for_run(cassette, live, Some(&run_id))
                .map_err(CliError::invalid)?;
            Ok((Arc::new(recorder), Some(run_id)))
        }
        None => Ok((live, None)),
    }
}
