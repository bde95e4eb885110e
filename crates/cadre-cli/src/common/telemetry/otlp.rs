//! The OTLP exporter behind the `otel` feature: the layer, its batch processor, and the
//! flush at exit.

use super::config::{wanted, Wanted};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use tracing::Subscriber;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// How long the last spans may take to leave when cadre exits.
const FLUSH_AT_EXIT: Duration = Duration::from_millis(800);

/// The provider whose queue [`shutdown`] flushes.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The layer that exports cadre's spans, when the environment asks for traces; `Err`
/// says why traces that were asked for cannot be exported.
pub fn layer<S>() -> Result<Option<Box<dyn Layer<S> + Send + Sync>>, String>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let json = match wanted(|name| std::env::var(name).ok()) {
        Wanted::Off => return Ok(None),
        Wanted::Export { json } => json,
        Wanted::Unsupported(why) => return Err(why),
    };
    let exporter = exporter(json)?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Counted {
            inner: BatchSpanProcessor::builder(exporter).build(),
        })
        .with_resource(resource())
        .build();
    let scope = InstrumentationScope::builder("cadre")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let _ = PROVIDER.set(provider);
    // What cadre starts gets the current span's context, so its own spans join the trace.
    cadre_tools::trace_context::set_traceparent_source(current_traceparent);
    // What cadre's spans need beyond fields: lists, links to messages' senders, parents.
    cadre_model::trace_bridge::otel::install();
    // cadre's GenAI spans, and the retries logged inside a request's span (its events).
    let wanted = Targets::new()
        .with_target(cadre_core::semconv::TARGET, tracing::Level::INFO)
        .with_target("cadre_model::retry", tracing::Level::WARN);
    Ok(Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // The GenAI attributes are what is wanted: no busy/idle timings (two clock reads
            // per poll), thread or source location on every span.
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(wanted)
            .boxed(),
    ))
}

/// Sends the spans still queued, waiting at most [`FLUSH_AT_EXIT`]; later spans are not
/// exported. `OTEL_BSP_EXPORT_TIMEOUT` bounds each export, not the exit: shared settings
/// set it to half a minute, which a collector that hangs would add to every run.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let wait = exit_wait(|name| std::env::var(name).ok());
        // A collector that refused was told once already; one that does not answer is
        // told here, once too.
        match provider.shutdown_with_timeout(wait) {
            Ok(()) => warn_dropped(),
            Err(OTelSdkError::AlreadyShutdown) => {}
            // The SDK folds a processor's timeout into a failure of its own.
            Err(e) => warn_once(&format!(
                "the last spans were not taken within {} ms ({e})",
                wait.as_millis()
            )),
        }
    }
}

/// How long the exit waits for the last spans: [`FLUSH_AT_EXIT`], or
/// `CADRE_OTEL_EXIT_WAIT_MS` milliseconds (for tests on a loaded machine).
fn exit_wait(var: impl Fn(&str) -> Option<String>) -> Duration {
    var(EXIT_WAIT_VAR)
        .and_then(|v| v.trim().parse().ok())
        .map_or(FLUSH_AT_EXIT, Duration::from_millis)
}

/// The variable that sets how long the exit waits for the last spans.
const EXIT_WAIT_VAR: &str = "CADRE_OTEL_EXIT_WAIT_MS";

/// Spans ended, and spans handed to the exporter: once the queue is flushed, the difference
/// is what the batch queue dropped when it was full.
static ENDED: AtomicU64 = AtomicU64::new(0);
/// See [`ENDED`].
static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// Tells on stderr how many spans the full batch queue dropped, if any did.
fn warn_dropped() {
    let dropped = ENDED
        .load(Ordering::Relaxed)
        .saturating_sub(EXPORTED.load(Ordering::Relaxed));
    if dropped > 0 {
        tracing::warn!(
            "{dropped} spans were not exported: more ended at once than the batch queue holds \
             (OTEL_BSP_MAX_QUEUE_SIZE, 2048 by default)"
        );
    }
}

/// The batch processor, counting the spans that end (see [`ENDED`]).
#[derive(Debug)]
struct Counted {
    inner: BatchSpanProcessor,
}

impl SpanProcessor for Counted {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        ENDED.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Whether a failure to export was told: once per run is enough.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Tells on stderr that traces could not be exported, and why, unless that was told.
fn warn_once(why: &dyn std::fmt::Display) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!("could not export traces (later failures are not told): {why}");
    }
}

/// The OTLP/HTTP exporter the variables describe, with cadre's TLS setup.
fn exporter(json: bool) -> Result<OneWarning, String> {
    let tls = cadre_model::tls_config().map_err(|e| e.to_string())?;
    let client = reqwest::blocking::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout())
        .build()
        .map_err(|e| e.to_string())?;
    let protocol = if json {
        Protocol::HttpJson
    } else {
        Protocol::HttpBinary
    };
    let inner = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(protocol)
        // Fewer and shorter retries than the exporter's own (up to about a second): a
        // collector that refuses is told well inside the second the exit may take.
        .with_retry_policy(
            RetryPolicy::default()
                .with_max_retries(2)
                .with_initial_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_millis(200)),
        )
        .build()
        .map_err(|e| e.to_string())?;
    Ok(OneWarning { inner })
}

/// The export timeout: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT`
/// in milliseconds, else the specification's 10 seconds.
fn timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The resource every span is of: what `OTEL_RESOURCE_ATTRIBUTES` and
/// `OTEL_SERVICE_NAME` say, and the service `cadre` when neither names one.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("cadre").build()
    }
}

/// The OTLP exporter, saying once on stderr when it could not export: the run goes on,
/// and a collector that is down is one warning, not one per batch.
#[derive(Debug)]
struct OneWarning {
    inner: opentelemetry_otlp::SpanExporter,
}

impl SpanExporter for OneWarning {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        EXPORTED.fetch_add(
            u64::try_from(batch.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            warn_once(e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The current span's W3C `traceparent`, when it is being exported.
fn current_traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// `work` as a child of the caller's trace, when `TRACEPARENT` (and `TRACESTATE`) name
/// one: the run's root span takes it as its parent.
pub fn in_callers_trace<F: std::future::Future>(work: F) -> opentelemetry::context::WithContext<F> {
    use opentelemetry::context::FutureExt as _;
    use opentelemetry::propagation::TextMapPropagator as _;
    let carrier: std::collections::HashMap<String, String> =
        [("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE")]
            .into_iter()
            .filter_map(|(key, var)| Some((key.to_owned(), std::env::var(var).ok()?)))
            .collect();
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    work.with_context(parent)
}
