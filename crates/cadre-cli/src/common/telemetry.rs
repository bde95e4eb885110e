//! Traces out of the process: when the standard `OTEL_*` variables ask for it, the spans
//! the library crates emit (see `cadre_core::semconv`) go to an OTLP collector.
//!
//! Exported when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set or `OTEL_TRACES_EXPORTER=otlp`, never with `OTEL_SDK_DISABLED=true`; over
//! `http/protobuf` (the default) or `http/json`. The exporter reads its endpoint, headers
//! and timeout from the same variables, the resource its attributes from
//! `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` (`cadre` when neither names one).
//! Spans wait in the SDK's bounded batch queue and go out from its own thread, with the
//! blocking HTTP client: the async one would need a tokio runtime on that thread. At exit
//! the queue gets at most 0.8 s, whatever `OTEL_BSP_EXPORT_TIMEOUT` says (it bounds each
//! export); a collector that cannot be reached is one warning, and the run goes on.

use cadre_core::semconv::RecordContent;

mod config;
#[cfg(feature = "otel")]
mod otlp;

#[cfg(feature = "otel")]
pub use otlp::{in_callers_trace, layer, shutdown};

/// What content the run's spans carry: prompts with `OTEL_LOG_USER_PROMPTS=1`, tool inputs
/// and results with `OTEL_LOG_TOOL_DETAILS=1` (Claude Code's names), each piece cut to
/// `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` bytes when that is set.
pub fn record_content() -> RecordContent {
    config::content_from(|name| std::env::var(name).ok())
}

/// Without the `otel` feature: nothing to export, nothing to flush.
#[cfg(not(feature = "otel"))]
pub fn shutdown() {}

/// Without the `otel` feature: no trace to join.
#[cfg(not(feature = "otel"))]
pub fn in_callers_trace<F: std::future::Future>(work: F) -> F {
    work
}
