//! Metrics derived from the spans and events the library crates emit: a `tracing` layer
//! that records the GenAI client histograms when a `chat` span closes, counts the agents
//! whose `invoke_agent` span is open, and takes the queue depth a workflow reports as an
//! event. The library crates stay free of OpenTelemetry: an embedder's own subscriber can
//! derive the same from the same data.

use cadre_core::semconv::{
    CADRE_METRICS_TARGET, CADRE_WORKFLOW_ITEMS_QUEUED, CADRE_WORKFLOW_NAME, ERROR_TYPE,
    GEN_AI_AGENT_NAME, GEN_AI_OPERATION_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL, GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, GEN_AI_USAGE_INPUT_TOKENS, GEN_AI_USAGE_OUTPUT_TOKENS,
    OP_CHAT, OP_INVOKE_AGENT, SERVER_ADDRESS, SERVER_PORT, TARGET,
};
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};
use opentelemetry::KeyValue;
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// `gen_ai.client.token.usage`: input and output tokens per model request.
pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// `gen_ai.client.operation.duration`: seconds per model request.
pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// `gen_ai.token.type`: `input` or `output` on [`TOKEN_USAGE`].
const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
/// `cadre.token.type`: the kind of tokens on [`TOKENS_SPENT`]: `input`, `output`,
/// `cache_read` or `cache_creation` (the conventions' attribute knows only the first two).
const CADRE_TOKEN_TYPE: &str = "cadre.token.type";
/// cadre's own: the agents running now.
pub const AGENTS_RUNNING: &str = "cadre.agents.running";
/// cadre's own: a workflow's items waiting for an agent.
pub const ITEMS_QUEUED: &str = "cadre.workflow.items.queued";
/// cadre's own: the tokens spent so far, by kind (cadre has no prices: tokens are the
/// cost it can tell).
pub const TOKENS_SPENT: &str = "cadre.usage.tokens";

/// The conventions' advised buckets for token counts: powers of 4 up to 4^13.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// The conventions' advised buckets for durations in seconds: 0.01 doubling to 81.92.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// The instruments the layer records into.
pub struct Instruments {
    tokens: Histogram<u64>,
    duration: Histogram<f64>,
    agents: UpDownCounter<i64>,
    queued: Gauge<u64>,
    spent: Counter<u64>,
}

impl Instruments {
    /// The instruments, made by `meter`.
    pub fn new(meter: &Meter) -> Self {
        Self {
            tokens: meter
                .u64_histogram(TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            duration: meter
                .f64_histogram(OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            agents: meter
                .i64_up_down_counter(AGENTS_RUNNING)
                .with_unit("{agent}")
                .with_description("Agents running")
                .build(),
            queued: meter
                .u64_gauge(ITEMS_QUEUED)
                .with_unit("{item}")
                .with_description("Workflow items waiting for an agent")
                .build(),
            spent: meter
                .u64_counter(TOKENS_SPENT)
                .with_unit("{token}")
                .with_description("Tokens spent so far, cached input apart")
                .build(),
        }
    }
}

/// The layer deriving the metrics; give it only cadre's GenAI spans and its metrics
/// events (see [`TARGET`] and [`CADRE_METRICS_TARGET`]).
pub struct MetricsLayer {
    instruments: Instruments,
}

impl MetricsLayer {
    /// A layer recording into `instruments`.
    pub fn new(instruments: Instruments) -> Self {
        Self { instruments }
    }
}

/// What a `chat` span said, kept in its extensions until it closes.
#[derive(Default)]
struct Chat {
    started: Option<Instant>,
    provider: String,
    request_model: String,
    response_model: String,
    address: String,
    port: i64,
    input: Option<i64>,
    output: Option<i64>,
    cache_read: i64,
    cache_creation: i64,
    error: Option<String>,
}

impl Visit for Chat {
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            GEN_AI_PROVIDER_NAME => &mut self.provider,
            GEN_AI_REQUEST_MODEL => &mut self.request_model,
            GEN_AI_RESPONSE_MODEL => &mut self.response_model,
            SERVER_ADDRESS => &mut self.address,
            ERROR_TYPE => {
                self.error = Some(value.to_owned());
                return;
            }
            _ => return,
        };
        value.clone_into(slot);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            GEN_AI_USAGE_INPUT_TOKENS => self.input = Some(value),
            GEN_AI_USAGE_OUTPUT_TOKENS => self.output = Some(value),
            GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS => self.cache_read = value,
            GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS => self.cache_creation = value,
            SERVER_PORT => self.port = value,
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl Chat {
    /// The attributes both histograms carry, as the conventions list them.
    fn attributes(&self) -> Vec<KeyValue> {
        let mut out = vec![
            KeyValue::new(GEN_AI_OPERATION_NAME, OP_CHAT),
            KeyValue::new(GEN_AI_PROVIDER_NAME, self.provider.clone()),
            KeyValue::new(GEN_AI_REQUEST_MODEL, self.request_model.clone()),
        ];
        if !self.response_model.is_empty() {
            out.push(KeyValue::new(
                GEN_AI_RESPONSE_MODEL,
                self.response_model.clone(),
            ));
        }
        if !self.address.is_empty() {
            out.push(KeyValue::new(SERVER_ADDRESS, self.address.clone()));
            out.push(KeyValue::new(SERVER_PORT, self.port));
        }
        out
    }

    /// Records the request's duration, and its tokens when the API reported them.
    fn record(&self, into: &Instruments) {
        let mut attributes = self.attributes();
        let count = |n: i64| u64::try_from(n).unwrap_or_default();
        for (kind, tokens) in [("input", self.input), ("output", self.output)] {
            let Some(tokens) = tokens else { continue };
            let mut typed = attributes.clone();
            typed.push(KeyValue::new(GEN_AI_TOKEN_TYPE, kind));
            into.tokens.record(count(tokens), &typed);
        }
        self.spend(into);
        if let Some(error) = &self.error {
            attributes.push(KeyValue::new(ERROR_TYPE, error.clone()));
        }
        if let Some(started) = self.started {
            into.duration
                .record(started.elapsed().as_secs_f64(), &attributes);
        }
    }

    /// Adds the request's tokens to the running total, each kind apart (the conventions'
    /// input count includes the cached tokens; here they are told apart).
    fn spend(&self, into: &Instruments) {
        let count = |n: i64| u64::try_from(n).unwrap_or_default();
        let cached = self.cache_read + self.cache_creation;
        let kinds = [
            ("input", self.input.map(|i| i - cached)),
            ("output", self.output),
            ("cache_read", Some(self.cache_read)),
            ("cache_creation", Some(self.cache_creation)),
        ];
        for (kind, tokens) in kinds {
            match tokens.map(count) {
                Some(n) if n > 0 => into.spent.add(
                    n,
                    &[
                        KeyValue::new(CADRE_TOKEN_TYPE, kind),
                        KeyValue::new(GEN_AI_REQUEST_MODEL, self.request_model.clone()),
                    ],
                ),
                _ => {}
            }
        }
    }
}

/// An agent's type, kept on its span while it runs.
struct Running(String);

/// Reads one string field of a span's attributes.
struct OneField<'a> {
    name: &'a str,
    value: Option<String>,
}

impl Visit for OneField<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.name {
            self.value = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.name {
            self.value = Some(format!("{value:?}"));
        }
    }
}

/// A workflow's report of its queue: `cadre.workflow.items_queued = n` and, if given,
/// `cadre.workflow.name`.
#[derive(Default)]
struct QueueReport {
    queued: Option<u64>,
    workflow: Option<String>,
}

impl Visit for QueueReport {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == CADRE_WORKFLOW_ITEMS_QUEUED {
            self.queued = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == CADRE_WORKFLOW_ITEMS_QUEUED {
            self.queued = u64::try_from(value).ok();
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == CADRE_WORKFLOW_NAME {
            self.workflow = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == CADRE_WORKFLOW_NAME {
            self.workflow = Some(format!("{value:?}"));
        }
    }
}

impl<S> Layer<S> for MetricsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if meta.target() != TARGET {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        match meta.name() {
            OP_CHAT => {
                let mut chat = Chat {
                    started: Some(Instant::now()),
                    ..Chat::default()
                };
                attrs.record(&mut chat);
                span.extensions_mut().insert(chat);
            }
            OP_INVOKE_AGENT => {
                let mut name = OneField {
                    name: GEN_AI_AGENT_NAME,
                    value: None,
                };
                attrs.record(&mut name);
                let agent_type = name.value.unwrap_or_default();
                self.instruments
                    .agents
                    .add(1, &agent_attributes(&agent_type));
                span.extensions_mut().insert(Running(agent_type));
            }
            _ => {}
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(chat) = extensions.get_mut::<Chat>() {
            values.record(chat);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(chat) = extensions.remove::<Chat>() {
            chat.record(&self.instruments);
        }
        if let Some(Running(agent_type)) = extensions.remove::<Running>() {
            self.instruments
                .agents
                .add(-1, &agent_attributes(&agent_type));
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != CADRE_METRICS_TARGET {
            return;
        }
        let mut report = QueueReport::default();
        event.record(&mut report);
        if let Some(queued) = report.queued {
            let attributes: Vec<KeyValue> = report
                .workflow
                .map(|w| KeyValue::new(CADRE_WORKFLOW_NAME, w))
                .into_iter()
                .collect();
            self.instruments.queued.record(queued, &attributes);
        }
    }
}

/// What the agents-running counter is split by: the agent's type.
fn agent_attributes(agent_type: &str) -> [KeyValue; 2] {
    [
        KeyValue::new(GEN_AI_OPERATION_NAME, OP_INVOKE_AGENT),
        KeyValue::new(GEN_AI_AGENT_NAME, agent_type.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{
        AggregatedMetrics, Metric, MetricData, ResourceMetrics,
    };
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, SdkMeterProvider};
    use tracing_subscriber::layer::SubscriberExt as _;

    /// What `emit` makes of the metrics, through the layer, as the exporter was given them.
    fn metrics_of(emit: impl FnOnce()) -> Vec<ResourceMetrics> {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_periodic_exporter(exporter.clone())
            .build();
        let layer = MetricsLayer::new(Instruments::new(&provider.meter("test")));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        provider.force_flush().unwrap();
        exporter.get_finished_metrics().unwrap()
    }

    /// The metric `name` of what was exported.
    fn metric<'a>(exported: &'a [ResourceMetrics], name: &str) -> Option<&'a Metric> {
        exported
            .iter()
            .flat_map(|rm| rm.scope_metrics())
            .flat_map(|sm| sm.metrics())
            .find(|m| m.name() == name)
    }

    fn has<'a>(mut attributes: impl Iterator<Item = &'a KeyValue>, key: &str, value: &str) -> bool {
        attributes.any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
    }

    #[test]
    fn a_failed_request_is_timed_with_its_error_type_and_counts_no_tokens() {
        let metrics = metrics_of(|| {
            let url = reqwest::Url::parse("http://127.0.0.1:9/v1/messages").unwrap();
            let span = cadre_core::semconv::chat_span("anthropic", "m", &url);
            cadre_core::semconv::record_error(&span, "429", &"rate limited");
        });
        let duration = metric(&metrics, OPERATION_DURATION).expect("the duration");
        let AggregatedMetrics::F64(MetricData::Histogram(h)) = duration.data() else {
            panic!("{duration:?}");
        };
        let points: Vec<_> = h.data_points().collect();
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].count(), 1);
        assert!(has(points[0].attributes(), ERROR_TYPE, "429"));
        assert!(has(points[0].attributes(), GEN_AI_REQUEST_MODEL, "m"));
        assert!(metric(&metrics, TOKEN_USAGE).is_none());
    }

    #[test]
    fn a_workflows_queue_report_is_its_gauge() {
        let metrics = metrics_of(|| {
            cadre_core::semconv::report_items_queued("triage", 9);
            cadre_core::semconv::report_items_queued("triage", 7);
        });
        let queued = metric(&metrics, ITEMS_QUEUED).expect("the queue");
        let AggregatedMetrics::U64(MetricData::Gauge(g)) = queued.data() else {
            panic!("{queued:?}");
        };
        let points: Vec<_> = g.data_points().collect();
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].value(), 7);
        assert!(has(points[0].attributes(), CADRE_WORKFLOW_NAME, "triage"));
    }
}
