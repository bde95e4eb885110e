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

use cadre_core::semconv::{RecordContent, TraceparentSource};
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
pub use table::{configure_from_settings, configure_from_user_settings};

/// What content the run's spans carry: prompts with `OTEL_LOG_USER_PROMPTS=1`, tool inputs
/// and results with `OTEL_LOG_TOOL_DETAILS=1` (Claude Code's names), each piece cut to
/// `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` bytes when that is set.
pub fn record_content() -> RecordContent {
    config::content_from(var)
}

/// The source of the W3C `traceparent` header each model request carries (its `chat`
/// span's context), when traces are exported and `CADRE_OTEL_TRACEPARENT_TO_MODEL=1` (or
/// `traceparent_to_model = true` in the `[telemetry]` table) asks for it; off by default,
/// since a provider need not learn the run's ids.
pub fn traceparent_to_model() -> Option<TraceparentSource> {
    let asked = var("CADRE_OTEL_TRACEPARENT_TO_MODEL").is_some_and(|v| config::is_true(&v));
    #[cfg(feature = "otel")]
    return (asked && otlp::exporting_traces())
        .then_some(TraceparentSource(otlp::current_traceparent));
    #[cfg(not(feature = "otel"))]
    {
        let _ = asked;
        None
    }
}

/// Without the `otel` feature: nothing to export, nothing to flush.
#[cfg(not(feature = "otel"))]
pub fn shutdown() {}

/// Without the `otel` feature: no trace to join.
#[cfg(not(feature = "otel"))]
pub fn in_callers_trace<F: std::future::Future>(work: F) -> F {
    work
}
