//! Traces and metrics out of the process: when the standard `OTEL_*` variables (or the
//! `[telemetry]` table of the settings, which they win over) ask for it, the spans the
//! library crates emit (see `cadre_core::semconv`) go to an OTLP collector, and metrics
//! derived from them too.
//!
//! Traces are exported when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set or `OTEL_TRACES_EXPORTER=otlp`; metrics when
//! `OTEL_METRICS_EXPORTER=otlp`; neither with `OTEL_SDK_DISABLED=true`. Over
//! `http/protobuf` (the default), `http/json` or `grpc`. Endpoint, headers and timeout
//! come from the same variables, the resource's attributes from `OTEL_RESOURCE_ATTRIBUTES`
//! and `OTEL_SERVICE_NAME` (`cadre` when neither names one). Spans wait in the SDK's
//! bounded batch queue and go out from its own thread, with the blocking HTTP client (the
//! async one would need a tokio runtime on that thread); grpc runs on a small runtime of
//! its own. At exit the queue gets at most 0.8 s, whatever `OTEL_BSP_EXPORT_TIMEOUT` says
//! (it bounds each export); a collector that cannot be reached is one warning, and the run
//! goes on.

use cadre_core::semconv::RecordContent;
use vars::var;

mod config;
#[cfg(feature = "otel")]
mod metrics;
#[cfg(feature = "otel")]
mod otlp;
mod table;
mod vars;

#[cfg(feature = "otel")]
pub use otlp::{in_callers_trace, layer, shutdown};
pub use table::configure_from_settings;

/// What content the run's spans carry: prompts with `OTEL_LOG_USER_PROMPTS=1`, tool inputs
/// and results with `OTEL_LOG_TOOL_DETAILS=1` (Claude Code's names), each piece cut to
/// `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` bytes when that is set.
pub fn record_content() -> RecordContent {
    config::content_from(var)
}

/// Without the `otel` feature: nothing to export, nothing to flush.
#[cfg(not(feature = "otel"))]
pub fn shutdown() {}

/// Without the `otel` feature: no trace to join.
#[cfg(not(feature = "otel"))]
pub fn in_callers_trace<F: std::future::Future>(work: F) -> F {
    work
}
