//! The OTLP exporter behind the `otel` feature: the layer, its batch processor, and the
//! flush at exit.

use super::config::{endpoint, pairs, wanted_signal, Protocol, Signal, Wanted};
use super::metrics::{Instruments, MetricsLayer};
use super::vars::{env_sets, var};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{RetryPolicy, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};
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
/// The metrics provider whose last readings [`shutdown`] sends.
static METERS: OnceLock<SdkMeterProvider> = OnceLock::new();

/// A boxed layer of the subscriber `S`.
type Boxed<S> = Box<dyn Layer<S> + Send + Sync>;

/// The layers that export cadre's spans and the metrics derived from them, when the
/// settings ask for either; and why what was asked for cannot be exported, if some cannot
/// (what can still is in the layer).
pub fn layer<S>() -> (Option<Boxed<S>>, Option<String>)
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let mut why = Vec::new();
    let traces = match traces_layer() {
        Ok(layer) => layer,
        Err(e) => {
            why.push(format!("traces are not exported: {e}"));
            None
        }
    };
    let metrics = match metrics_layer() {
        Ok(layer) => layer,
        Err(e) => {
            why.push(format!("metrics are not exported: {e}"));
            None
        }
    };
    let layers: Vec<Boxed<S>> = traces.into_iter().chain(metrics).collect();
    let layer = (!layers.is_empty()).then(|| layers.boxed());
    (layer, (!why.is_empty()).then(|| why.join("; ")))
}

/// The layer exporting cadre's spans, when traces are asked for.
fn traces_layer<S>() -> Result<Option<Boxed<S>>, String>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let protocol = match wanted_signal(Signal::Traces, var) {
        Wanted::Off => return Ok(None),
        Wanted::Export(protocol) => protocol,
        Wanted::Unsupported(why) => return Err(why),
    };
    let exporter = span_exporter(protocol)?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Counted {
            inner: BatchSpanProcessor::builder(exporter).build(),
        })
        .with_resource(resource())
        .build();
    let tracer = provider.tracer_with_scope(scope());
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

/// The layer deriving metrics from cadre's spans, when metrics are asked for.
fn metrics_layer<S>() -> Result<Option<Boxed<S>>, String>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let protocol = match wanted_signal(Signal::Metrics, var) {
        Wanted::Off => return Ok(None),
        Wanted::Export(protocol) => protocol,
        Wanted::Unsupported(why) => return Err(why),
    };
    let exporter = metric_exporter(protocol)?;
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource())
        .build();
    let instruments = Instruments::new(&provider.meter_with_scope(scope()));
    let _ = METERS.set(provider);
    let wanted = Targets::new()
        .with_target(cadre_core::semconv::TARGET, tracing::Level::INFO)
        .with_target(
            cadre_core::semconv::CADRE_METRICS_TARGET,
            tracing::Level::TRACE,
        );
    Ok(Some(
        MetricsLayer::new(instruments).with_filter(wanted).boxed(),
    ))
}

/// The instrumentation scope of everything cadre exports.
fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("cadre")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// Sends the spans still queued and the last metric readings, waiting at most
/// [`FLUSH_AT_EXIT`] for both; what is later is not exported. `OTEL_BSP_EXPORT_TIMEOUT`
/// bounds each export, not the exit: shared settings set it to half a minute, which a
/// collector that hangs would add to every run.
pub fn shutdown() {
    let wait = exit_wait(var);
    let deadline = std::time::Instant::now() + wait;
    // The metrics provider's shutdown waits up to five seconds whatever it is told: it runs
    // on a thread of its own, and the exit waits for it only until the deadline.
    let meters = METERS.get().map(|provider| {
        let (done, result) = std::sync::mpsc::channel();
        let provider = provider.clone();
        std::thread::spawn(move || {
            let _ = done.send(provider.shutdown());
        });
        result
    });
    if let Some(provider) = PROVIDER.get() {
        // A collector that refused was told once already; one that does not answer is
        // told here, once too.
        match provider.shutdown_with_timeout(wait) {
            Ok(()) => warn_dropped(),
            Err(OTelSdkError::AlreadyShutdown) => {}
            // The SDK folds a processor's timeout into a failure of its own.
            Err(e) => warn_once(
                "traces",
                &format!(
                    "the last spans were not taken within {} ms ({e})",
                    wait.as_millis()
                ),
            ),
        }
    }
    if let Some(result) = meters {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match result.recv_timeout(left) {
            Ok(Ok(()) | Err(OTelSdkError::AlreadyShutdown)) => {}
            Ok(Err(e)) => warn_once("metrics", &e),
            Err(_) => warn_once(
                "metrics",
                &format!(
                    "the last readings were not taken within {} ms",
                    wait.as_millis()
                ),
            ),
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

/// Whether a failure to export was told: once per run is enough, whichever signal.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Tells on stderr that `what` (traces, metrics) could not be exported, and why, unless a
/// failure was told already.
fn warn_once(what: &str, why: &dyn std::fmt::Display) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!("could not export {what} (later failures are not told): {why}");
    }
}

/// Fewer and shorter retries than the exporter's own (up to about a second): a collector
/// that refuses is told well inside the second the exit may take.
fn retry_policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_retries(2)
        .with_initial_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(200))
}

/// The blocking HTTP client the OTLP/HTTP exporters send with: cadre's TLS setup, and the
/// export timeout of `signal`.
fn http_client(signal: Signal) -> Result<reqwest::blocking::Client, String> {
    let tls = cadre_model::tls_config().map_err(|e| e.to_string())?;
    reqwest::blocking::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout(signal))
        .build()
        .map_err(|e| e.to_string())
}

/// The header pairs the settings give `signal`'s exporter when the environment gives none
/// (the exporter reads the environment's itself).
fn table_headers(signal: Signal) -> Option<std::collections::HashMap<String, String>> {
    let own = format!("OTEL_EXPORTER_OTLP_{}_HEADERS", signal.upper());
    if env_sets(&own) || env_sets("OTEL_EXPORTER_OTLP_HEADERS") {
        return None;
    }
    var(&own)
        .or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS"))
        .map(|h| pairs(&h).into_iter().collect())
}

/// Configures an exporter builder as the settings say for `signal`: its endpoint and timeout.
fn configured<B: WithExportConfig>(builder: B, signal: Signal, protocol: Protocol) -> B {
    let builder = builder.with_timeout(timeout(signal));
    match endpoint(signal, protocol, var) {
        Some(url) => builder.with_endpoint(url),
        None => builder,
    }
}

/// The OTLP span exporter the settings describe.
fn span_exporter(protocol: Protocol) -> Result<OneWarning, String> {
    use opentelemetry_otlp::SpanExporter as Otlp;
    let signal = Signal::Traces;
    let inner = match protocol {
        Protocol::Grpc => grpc(|| tonic_configured(Otlp::builder().with_tonic(), signal).build())?,
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            let b = http_configured(Otlp::builder().with_http(), signal, protocol)?;
            Exporter::Direct(b.build().map_err(|e| e.to_string())?)
        }
    };
    Ok(OneWarning { inner })
}

/// The OTLP metric exporter the settings describe.
fn metric_exporter(protocol: Protocol) -> Result<MetricsOneWarning, String> {
    use opentelemetry_otlp::MetricExporter as Otlp;
    let signal = Signal::Metrics;
    let inner = match protocol {
        Protocol::Grpc => grpc(|| tonic_configured(Otlp::builder().with_tonic(), signal).build())?,
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            let b = http_configured(Otlp::builder().with_http(), signal, protocol)?;
            Exporter::Direct(b.build().map_err(|e| e.to_string())?)
        }
    };
    Ok(MetricsOneWarning { inner })
}

/// Configures an HTTP exporter builder as the settings say for `signal`: endpoint,
/// timeout, client, protocol, retries and the table's headers.
fn http_configured<B: WithHttpConfig + WithExportConfig>(
    builder: B,
    signal: Signal,
    protocol: Protocol,
) -> Result<B, String> {
    let b = configured(builder, signal, protocol)
        .with_http_client(http_client(signal)?)
        .with_protocol(http_protocol(protocol))
        .with_retry_policy(retry_policy());
    Ok(match table_headers(signal) {
        Some(headers) => b.with_headers(headers),
        None => b,
    })
}

/// Configures a gRPC exporter builder as the settings say for `signal`: endpoint,
/// timeout, retries, the table's headers as metadata, and TLS with cadre's roots for an
/// `https` endpoint.
fn tonic_configured<B: WithTonicConfig + WithExportConfig>(builder: B, signal: Signal) -> B {
    let mut b = configured(builder, signal, Protocol::Grpc).with_retry_policy(retry_policy());
    if let Some(headers) = table_headers(signal) {
        b = b.with_metadata(metadata(headers));
    }
    let https = endpoint(signal, Protocol::Grpc, var).is_some_and(|e| e.starts_with("https:"));
    if https {
        b = b.with_tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots());
    }
    b
}

/// The OTLP/HTTP encoding of `protocol`.
fn http_protocol(protocol: Protocol) -> opentelemetry_otlp::Protocol {
    match protocol {
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
        _ => opentelemetry_otlp::Protocol::HttpBinary,
    }
}

/// Header pairs as gRPC metadata; a pair that is not a valid header is left out.
fn metadata(headers: std::collections::HashMap<String, String>) -> tonic::metadata::MetadataMap {
    use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            AsciiMetadataKey::from_bytes(k.as_bytes()),
            AsciiMetadataValue::try_from(v.as_str()),
        ) {
            map.insert(k, v);
        }
    }
    map
}

/// The tokio runtime the gRPC exporters run on: tonic needs a reactor, and the SDK's batch
/// processor and periodic reader export from plain threads of their own (the "no reactor
/// running" trap). One worker thread, made only when grpc is asked for, never dropped (a
/// runtime dropped at exit would wait for its tasks).
static GRPC_RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// An exporter built by `build` inside the gRPC runtime (its channel starts a task there).
fn grpc<E>(
    build: impl FnOnce() -> Result<E, opentelemetry_otlp::ExporterBuildError>,
) -> Result<Exporter<E>, String> {
    if GRPC_RUNTIME.get().is_none() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cadre-otlp-grpc")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let _ = GRPC_RUNTIME.set(runtime);
    }
    let handle = GRPC_RUNTIME
        .get()
        .map(|rt| rt.handle().clone())
        .ok_or("no runtime for grpc")?;
    let exporter = {
        let _inside = handle.enter();
        build().map_err(|e| e.to_string())?
    };
    Ok(Exporter::OnRuntime(exporter, handle))
}

/// An OTLP exporter, called directly (HTTP, blocking client) or on the gRPC runtime.
#[derive(Debug)]
enum Exporter<E> {
    /// Exports on the calling thread.
    Direct(E),
    /// Exports on the gRPC runtime, the calling thread waiting for it.
    OnRuntime(E, tokio::runtime::Handle),
}

impl<E> Exporter<E> {
    /// The exporter, whichever way it is called.
    fn inner(&self) -> &E {
        match self {
            Self::Direct(e) | Self::OnRuntime(e, _) => e,
        }
    }

    /// Runs `export` as this exporter must: on the runtime for grpc. The SDK calls from a
    /// thread of its own (never a runtime's), so blocking it on the runtime is sound.
    async fn run<F: std::future::Future<Output = OTelSdkResult>>(
        &self,
        export: F,
    ) -> OTelSdkResult {
        match self {
            Self::Direct(_) => export.await,
            Self::OnRuntime(_, handle) => handle.block_on(export),
        }
    }
}

/// The export timeout of `signal`: `OTEL_EXPORTER_OTLP_{SIGNAL}_TIMEOUT` or
/// `OTEL_EXPORTER_OTLP_TIMEOUT` in milliseconds, else the specification's 10 seconds.
fn timeout(signal: Signal) -> Duration {
    [
        format!("OTEL_EXPORTER_OTLP_{}_TIMEOUT", signal.upper()),
        "OTEL_EXPORTER_OTLP_TIMEOUT".to_owned(),
    ]
    .iter()
    .find_map(|name| var(name)?.trim().parse().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The resource every span and metric is of: what `OTEL_RESOURCE_ATTRIBUTES` and
/// `OTEL_SERVICE_NAME` say (the SDK reads them), then what the settings' table adds where
/// the environment is silent, and the service `cadre` when none names one.
fn resource() -> Resource {
    let env_attributes = std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    let env_keys: Vec<String> = pairs(&env_attributes).into_iter().map(|(k, _)| k).collect();
    let added: Vec<opentelemetry::KeyValue> = var("OTEL_RESOURCE_ATTRIBUTES")
        .filter(|_| env_attributes.trim().is_empty())
        .map(|a| pairs(&a))
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !env_keys.contains(k))
        .map(|(k, v)| opentelemetry::KeyValue::new(k, v))
        .collect();
    let named_by_env =
        env_sets("OTEL_SERVICE_NAME") || env_keys.iter().any(|k| k == "service.name");
    let named_by_table = added.iter().any(|kv| kv.key.as_str() == "service.name");
    let builder = Resource::builder().with_attributes(added);
    match var("OTEL_SERVICE_NAME") {
        _ if named_by_env => builder.build(),
        Some(name) => builder.with_service_name(name).build(),
        None if named_by_table => builder.build(),
        None => builder.with_service_name("cadre").build(),
    }
}

/// The OTLP span exporter, saying once on stderr when it could not export: the run goes on,
/// and a collector that is down is one warning, not one per batch.
#[derive(Debug)]
struct OneWarning {
    inner: Exporter<opentelemetry_otlp::SpanExporter>,
}

impl SpanExporter for OneWarning {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        EXPORTED.fetch_add(
            u64::try_from(batch.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let result = self.inner.run(self.inner.inner().export(batch)).await;
        if let Err(e) = &result {
            warn_once("traces", e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.inner().shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.inner().force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        match &mut self.inner {
            Exporter::Direct(e) | Exporter::OnRuntime(e, _) => e.set_resource(resource),
        }
    }
}

/// The OTLP metric exporter, saying once on stderr when it could not export.
#[derive(Debug)]
struct MetricsOneWarning {
    inner: Exporter<opentelemetry_otlp::MetricExporter>,
}

impl PushMetricExporter for MetricsOneWarning {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.run(self.inner.inner().export(metrics)).await;
        if let Err(e) = &result {
            warn_once("metrics", e);
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.inner().force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.inner().shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.inner().temporality()
    }
}

/// Whether spans are being exported.
pub fn exporting_traces() -> bool {
    PROVIDER.get().is_some()
}

/// The current span's W3C `traceparent`, when it is being exported.
pub fn current_traceparent() -> Option<String> {
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
