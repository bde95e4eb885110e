//! Fleet benchmark: how close N concurrent subagents get to the ideal wall time.
//!
//! A mock model answers every request after a fixed latency L. The primary agent sends N
//! `Task` calls in one turn; each subagent makes k model requests (k − 1 `list_files` calls,
//! then its answer); the primary agent then answers. The ideal wall time is the critical
//! path, (k + 2)·L; run one after another it would take (N·k + 2)·L. The benchmark prints
//! both beside the measured time, the orchestration overhead per model turn on the critical
//! path, CPU time per model turn, and the process's peak memory — in process (a `Model`
//! implementation) and over loopback HTTP (the real Anthropic client against the test
//! kit's mock server).
//!
//! Each line ends with what one waiting (idle) agent costs in memory and what each further
//! turn adds to it, estimated from the resident size when the N-th subagent makes its first
//! and its last request (in process only), and how many subagents failed (with the first
//! reason); a failure is a figure, not a panic. The peak is each run's own.
//!
//! Run: `cargo bench -p cadre-core --bench fleet` (CADRE_BENCH_L_MS and CADRE_BENCH_K
//! change L and k; CADRE_BENCH_N takes a comma list of N; CADRE_BENCH_SECTIONS a comma list
//! of `in-proc`, `journal`, `in-proc16`, `http`, default all). With CADRE_BENCH_TRACES=1
//! the spans are on: the OpenTelemetry layer takes them, as the `cadre` binary's does when
//! exporting, into the SDK's batch processor and an exporter that drops them, so the CPU
//! per turn is read with tracing on.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use cadre_core::{Limits, Orchestrator, StopKind};
use cadre_model::{
    AnthropicConfig, AnthropicModel, ContentBlock, EventSink, Model, ModelError, Request, Response,
    RetryPolicy, Role, StopReason, Usage,
};
use cadre_testkit::bench::{cpu_time, reset_peak, resident_bytes, status_mib, FleetLine};
use cadre_testkit::{Match, MockServer, Reply};
use cadre_tools::Workspace;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// As the `cadre` binary does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers like the scenario above, after `latency`.
struct ScriptedModel {
    latency: Duration,
    n: usize,
    k: usize,
    ids: AtomicU64,
    /// Requests seen per subagent turn, and the resident size when the N-th arrived.
    seen: Mutex<Vec<(usize, Option<u64>)>>,
}

impl ScriptedModel {
    fn new(latency: Duration, n: usize, k: usize) -> Self {
        Self {
            latency,
            n,
            k,
            ids: AtomicU64::new(0),
            seen: Mutex::new(vec![(0, None); k]),
        }
    }

    /// Resident bytes when every subagent had made its first request, and its last.
    fn resident_at(&self) -> (Option<u64>, Option<u64>) {
        let seen = self.seen.lock().unwrap();
        (seen[0].1, seen[self.k - 1].1)
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn provider(&self) -> &str {
        "bench"
    }

    async fn send(&self, request: Request, _events: EventSink<'_>) -> Result<Response, ModelError> {
        tokio::time::sleep(self.latency).await;
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let is_main = request
            .origin
            .as_ref()
            .is_some_and(|o| o.agent_type == "main");
        if !is_main && turn < self.k {
            let mut seen = self.seen.lock().unwrap();
            seen[turn].0 += 1;
            if seen[turn].0 == self.n {
                seen[turn].1 = Some(resident_bytes());
            }
        }
        let id = || format!("toolu_{}", self.ids.fetch_add(1, Ordering::Relaxed));
        let (content, stop) = match (is_main, turn) {
            (true, 0) => (
                (0..self.n)
                    .map(|i| {
                        ContentBlock::tool_use(
                            id(),
                            "Task",
                            json!({"description": format!("job {i}"), "prompt": format!("Job {i}: list the files"), "subagent_type": "explore"}),
                        )
                    })
                    .collect(),
                StopReason::ToolUse,
            ),
            (false, t) if t + 1 < self.k => {
                (vec![ContentBlock::tool_use(id(), "list_files", json!({}))], StopReason::ToolUse)
            }
            _ => (vec![ContentBlock::text("done")], StopReason::EndTurn),
        };
        Ok(Response {
            id: "msg_bench".into(),
            model: request.model,
            role: Role::Assistant,
            content,
            stop_reason: Some(stop),
            stop_sequence: None,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                ..Usage::default()
            },
        })
    }
}

struct Figures {
    wall: Duration,
    cpu: Duration,
    turns: u32,
    /// Resident bytes before the run, and when all subagents were at their first and last turn.
    resident: (u64, Option<u64>, Option<u64>),
    /// Subagents that did not finish, and the first reason given.
    failed: (usize, Option<String>),
}

async fn run_once(model: Arc<dyn Model>, dir: &std::path::Path, max_parallel: usize) -> Figures {
    run_with(model, dir, max_parallel, None).await
}

/// Runs the scripted model in process and adds what it saw of memory.
async fn run_scripted(
    model: Arc<ScriptedModel>,
    dir: &std::path::Path,
    max_parallel: usize,
    runs_dir: Option<std::path::PathBuf>,
) -> Figures {
    let mut f = run_with(model.clone(), dir, max_parallel, runs_dir).await;
    let (first, last) = model.resident_at();
    f.resident.1 = first;
    f.resident.2 = last;
    f
}

/// One run; with `runs_dir`, as `cadre run` does it: a transcript per agent and the journal.
async fn run_with(
    model: Arc<dyn Model>,
    dir: &std::path::Path,
    max_parallel: usize,
    runs_dir: Option<std::path::PathBuf>,
) -> Figures {
    let mut builder = Orchestrator::builder()
        .workspace_handle(Arc::new(Workspace::new(dir).unwrap()))
        .model(model)
        .model_id("claude-sonnet-5-5")
        .limits(
            Limits::default()
                .max_parallel(max_parallel)
                .max_depth(2)
                .max_fanout(10_000),
        );
    if let Some(runs_dir) = runs_dir {
        builder = builder.runs_dir(runs_dir);
    }
    let orchestrator = builder.build().unwrap();
    reset_peak();
    let resident = resident_bytes();
    let cpu0 = cpu_time();
    let started = Instant::now();
    let (outcome, summary) = orchestrator.run("main", "Run the jobs").await.unwrap();
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu0;
    // A subagent that failed comes back to the primary as an error result.
    let mut failed = (0, None);
    for block in outcome.history.iter().flat_map(|m| &m.content) {
        if let ContentBlock::ToolResult(r) = block {
            if r.is_error {
                failed.0 += 1;
                failed.1.get_or_insert_with(|| {
                    r.content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.as_str()),
                            _ => None,
                        })
                        .collect::<String>()
                });
            }
        }
    }
    if outcome.stop != StopKind::Done {
        failed.0 += 1;
        failed
            .1
            .get_or_insert(format!("the primary agent: {}", outcome.stop));
    }
    Figures {
        wall,
        cpu,
        turns: summary.usage.total.turns,
        resident: (resident, None, None),
        failed,
    }
}

fn http_replies(n: usize, k: usize, latency: Duration, server: &MockServer) {
    let tasks: Vec<(String, String, serde_json::Value)> = (0..n)
        .map(|i| {
            (
                format!("toolu_t{i}"),
                "Task".to_owned(),
                json!({"description": format!("job {i}"), "prompt": format!("Job {i}: list the files"), "subagent_type": "explore"}),
            )
        })
        .collect();
    server.route(
        Match::FirstUserContains("Run the jobs".into()),
        vec![
            Reply::tool_uses(
                tasks
                    .iter()
                    .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
                    .collect(),
            )
            .delay(latency),
            Reply::text("done").delay(latency),
        ],
    );
    for i in 0..n {
        let mut replies: Vec<Reply> = (0..k.saturating_sub(1))
            .map(|t| {
                Reply::tool_use(&format!("toolu_{i}_{t}"), "list_files", json!({})).delay(latency)
            })
            .collect();
        replies.push(Reply::text("done").delay(latency));
        server.route(Match::FirstUserContains(format!("Job {i}:")), replies);
    }
}

fn report(label: &str, n: usize, k: usize, l: Duration, max_parallel: usize, f: &Figures) {
    report_with(label, n, k, l, max_parallel, f, Vec::new());
}

/// [`report`], with figures of the section's own after the common ones.
fn report_with(
    label: &str,
    n: usize,
    k: usize,
    l: Duration,
    max_parallel: usize,
    f: &Figures,
    extra: Vec<(String, String)>,
) {
    let kib = |b: u64| b as f64 / 1024.0;
    let (before, first, last) = f.resident;
    let line = FleetLine {
        label: label.into(),
        n,
        k,
        latency: l,
        max_parallel,
        wall: f.wall,
        cpu: f.cpu,
        turns: f.turns.into(),
        peak_mib: status_mib("self", "VmHWM:"),
        idle_kib: first.map(|m| kib(m.saturating_sub(before)) / n as f64),
        per_turn_kib: match (first, last) {
            (Some(a), Some(b)) if k > 1 => Some(kib(b.saturating_sub(a)) / (n * (k - 1)) as f64),
            _ => None,
        },
        failed: f.failed.clone(),
        extra,
    };
    println!("{line}");
}

/// Exports nothing: the benchmark measures making and batching spans, not a network.
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(
        &self,
        _batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// Installs the OpenTelemetry layer over cadre's spans for the whole process, as the
/// `cadre` binary does when it exports; the provider is kept until the end.
fn trace_spans() -> opentelemetry_sdk::trace::SdkTracerProvider {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let wanted = tracing_subscriber::filter::Targets::new()
        .with_target(cadre_core::semconv::TARGET, tracing::Level::INFO);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("cadre-bench"))
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_filter(wanted);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
    // What the binary installs beside its layer (a chat span's finish reasons as a list).
    cadre_model::trace_bridge::otel::install();
    cadre_tools::trace_context::set_traceparent_source(
        cadre_model::trace_bridge::otel::current_traceparent,
    );
    println!("traces on: the OpenTelemetry layer and batch processor, spans dropped at export");
    provider
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing else either.
    let l = Duration::from_millis(env_or("CADRE_BENCH_L_MS", 50));
    let k: usize = env_or("CADRE_BENCH_K", 3);
    let ns: Vec<usize> = std::env::var("CADRE_BENCH_N")
        .unwrap_or_else(|_| "1,4,16,64,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let sections: Vec<String> = std::env::var("CADRE_BENCH_SECTIONS")
        .unwrap_or_else(|_| "in-proc,journal,in-proc16,http".into())
        .split(',')
        .map(|s| s.trim().to_owned())
        .collect();
    let section = |name: &str| sections.iter().any(|s| s == name);
    let traces = std::env::var("CADRE_BENCH_TRACES").is_ok_and(|v| v == "1");
    let _provider = traces.then(trace_spans);
    // As the `cadre` binary does.
    let nofile = cadre_model::raise_open_file_limit().unwrap_or(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    println!(
        "fleet benchmark: L = {} ms per model response, k = {k} model turns per subagent, {} cores, {nofile} descriptors, {} HTTP connections",
        l.as_millis(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        cadre_model::connection_limit(),
    );
    // CPU per turn in process, by N, for the run folder's section to be read against.
    let mut in_proc = std::collections::HashMap::new();
    if section("in-proc") {
        println!("-- in process (mock Model), --max-parallel N");
        for &n in &ns {
            let model = Arc::new(ScriptedModel::new(l, n, k));
            let f = rt.block_on(run_scripted(model, dir.path(), n, None));
            report("in-proc", n, k, l, n, &f);
            in_proc.insert(n, f.cpu.as_secs_f64() / f64::from(f.turns.max(1)));
        }
    }
    if section("journal") {
        println!("-- in process, writing the run folder as `cadre run` does (transcripts + journal), --max-parallel N; `vs in-proc`: its CPU per turn against that section's");
        for &n in &ns {
            let model = Arc::new(ScriptedModel::new(l, n, k));
            let runs = tempfile::tempdir().unwrap();
            let f = rt.block_on(run_scripted(
                model,
                dir.path(),
                n,
                Some(runs.path().to_owned()),
            ));
            let per_turn = f.cpu.as_secs_f64() / f64::from(f.turns.max(1));
            let extra = in_proc
                .get(&n)
                .map(|base| {
                    vec![(
                        "vs in-proc".to_owned(),
                        format!("{:+.0}%", (per_turn / base - 1.0) * 100.0),
                    )]
                })
                .unwrap_or_default();
            report_with("journal", n, k, l, n, &f, extra);
        }
    }
    if section("in-proc16") {
        println!("-- in process, default --max-parallel 16 (requests queue for a slot; ideal = ceil(N·k/16)+2 responses)");
        for &n in ns.iter().filter(|&&n| n > 16) {
            let model = Arc::new(ScriptedModel::new(l, n, k));
            let f = rt.block_on(run_scripted(model, dir.path(), 16, None));
            report("in-proc16", n, k, l, 16, &f);
        }
    }
    if section("http") {
        println!("-- loopback HTTP (real Anthropic client, SSE, mock server), --max-parallel N");
        for &n in &ns {
            let f = rt.block_on(async {
                let server = MockServer::start().await;
                http_replies(n, k, l, &server);
                let mut config = AnthropicConfig::new("bench-key-000000");
                config.base_url = server.uri();
                config.http.retry = RetryPolicy::none();
                let model: Arc<dyn Model> = Arc::new(AnthropicModel::new(config).unwrap());
                let mut f = run_once(model, dir.path(), n).await;
                // What the server saw go wrong, and replies never asked for, are failures too:
                // reported as figures, so the server must not panic over them when dropped.
                server.allow_unused_replies();
                let violations = server.take_violations();
                let unasked = server.pending_replies();
                if f.failed.0 == 0 && (unasked > 0 || !violations.is_empty()) {
                    f.failed = (
                        unasked.max(1),
                        Some(format!(
                            "{unasked} scripted replies never asked for; {violations:?}"
                        )),
                    );
                }
                f
            });
            report("http", n, k, l, n, &f);
        }
    }
}
