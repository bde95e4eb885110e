//! Which model an example talks to: the real API with a key, else its cassette.

use anyhow::{Context, Result};
use cadre_model::{AnthropicConfig, AnthropicModel, Model, RecordingModel, ReplayModel};
use std::path::Path;
use std::sync::Arc;

/// With `ANTHROPIC_API_KEY` set: the Anthropic API (and, with `CADRE_RECORD=1`, the run is
/// recorded over `cassette`). Without a key: the recorded replies in `cassette`, no network.
pub fn from_env_or_cassette(cassette: &Path) -> Result<Arc<dyn Model>> {
    let key = std::env::var("ANTHROPIC_API_KEY").unwrap_or_default();
    if key.trim().is_empty() {
        eprintln!("(no ANTHROPIC_API_KEY: replaying {})", cassette.display());
        let replay = ReplayModel::open(cassette)
            .with_context(|| format!("cannot open the cassette {}", cassette.display()))?;
        return Ok(Arc::new(replay));
    }
    let mut config = AnthropicConfig::new(key.trim());
    if let Ok(url) = std::env::var("ANTHROPIC_BASE_URL") {
        config.base_url = url;
    }
    let live: Arc<dyn Model> = Arc::new(AnthropicModel::new(config)?);
    if std::env::var("CADRE_RECORD").is_ok_and(|v| v == "1") {
        eprintln!("(recording to {})", cassette.display());
        return Ok(Arc::new(RecordingModel::create(cassette, live)?));
    }
    Ok(live)
}
