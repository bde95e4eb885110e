//! The real Anthropic client and an orchestrator pointed at the test kit's mock server,
//! shared by cadre-core's test binaries.

use cadre_model::{AnthropicConfig, AnthropicModel, RetryPolicy};
use cadre_testkit::MockServer;
use std::sync::Arc;
use std::time::Duration;

/// The real Anthropic client pointed at the mock, with `retries` quick retries.
pub fn mock_model(server: &MockServer, retries: u32) -> Arc<AnthropicModel> {
    let mut config = AnthropicConfig::new("test-key");
    config.base_url = server.uri();
    config.http.retry = RetryPolicy {
        max_retries: retries,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    Arc::new(AnthropicModel::new(config).unwrap())
}

/// An orchestrator working in `dir` through the mock (no retries, the shipped agent types,
/// default limits, no transcripts, events dropped).
pub fn mock_builder(server: &MockServer, dir: &std::path::Path) -> cadre_core::OrchestratorBuilder {
    cadre_core::Orchestrator::builder()
        .model(mock_model(server, 0))
        .model_id("claude-sonnet-5-5")
        .workspace(dir)
}
