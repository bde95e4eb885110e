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
//! Run: `cargo bench -p cadre-core --bench fleet` (CADRE_BENCH_L_MS and CADRE_BENCH_K
//! change L and k; CADRE_BENCH_N takes a comma list of N).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use cadre_core::{Limits, Orchestrator, StopKind};
use cadre_model::{
    AnthropicConfig, AnthropicModel, ContentBlock, EventSink, Model, ModelError, Request, Response,
    RetryPolicy, Role, StopReason, Usage,
};
use cadre_testkit::{Match, MockServer, Reply};
use cadre_tools::Workspace;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Answers like the scenario above, after `latency`.
struct ScriptedModel {
    latency: Duration,
    n: usize,
    k: usize,
    ids: AtomicU64,
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
}

fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(u.user_time()) + tv(u.system_time())
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn run_once(model: Arc<dyn Model>, dir: &std::path::Path, max_parallel: usize) -> Figures {
    run_with(model, dir, max_parallel, None).await
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
        .limits(Limits {
            max_parallel,
            max_depth: 2,
            max_fanout: 10_000,
        });
    if let Some(runs_dir) = runs_dir {
        builder = builder.runs_dir(runs_dir);
    }
    let orchestrator = builder.build().unwrap();
    let cpu0 = cpu_time();
    let started = Instant::now();
    let (outcome, summary) = orchestrator.run("main", "Run the jobs").await.unwrap();
    let wall = started.elapsed();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", outcome.stop);
    Figures {
        wall,
        cpu: cpu_time() - cpu0,
        turns: summary.usage.total.turns,
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
    // The ideal is the critical path, or — when the limit is the bottleneck — the subagents'
    // N·k requests going through max_parallel slots, plus the primary agent's two.
    let waves = (n * k).div_ceil(max_parallel.max(1)).max(k) as u32;
    let critical = l * (waves + 2);
    let sequential = l * (n as u32 * k as u32 + 2);
    let overhead = f.wall.saturating_sub(critical);
    println!(
        "{label:<9} N={n:<5} wall {:>8.1} ms   ideal {:>7.1} ms ({:>5.2}×)   sequential {:>9.1} ms ({:>6.1}× faster)   overhead/turn {:>6.2} ms   cpu/turn {:>6.3} ms   peak {:>6.1} MiB",
        ms(f.wall),
        ms(critical),
        f.wall.as_secs_f64() / critical.as_secs_f64(),
        ms(sequential),
        sequential.as_secs_f64() / f.wall.as_secs_f64(),
        ms(overhead) / (f64::from(waves) + 2.0),
        ms(f.cpu) / f64::from(f.turns.max(1)),
        peak_rss_mib(),
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    println!(
        "fleet benchmark: L = {} ms per model response, k = {k} model turns per subagent, {} cores",
        l.as_millis(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("-- in process (mock Model), --max-parallel N");
    for &n in &ns {
        let model = Arc::new(ScriptedModel {
            latency: l,
            n,
            k,
            ids: AtomicU64::new(0),
        });
        let f = rt.block_on(run_once(model, dir.path(), n));
        report("in-proc", n, k, l, n, &f);
    }
    println!("-- in process, writing the run folder as `cadre run` does (transcripts + journal), --max-parallel N");
    for &n in &ns {
        let model = Arc::new(ScriptedModel {
            latency: l,
            n,
            k,
            ids: AtomicU64::new(0),
        });
        let runs = tempfile::tempdir().unwrap();
        let f = rt.block_on(run_with(model, dir.path(), n, Some(runs.path().to_owned())));
        report("journal", n, k, l, n, &f);
    }
    println!("-- in process, default --max-parallel 16 (requests queue for a slot; ideal = ceil(N·k/16)+2 responses)");
    for &n in ns.iter().filter(|&&n| n > 16) {
        let model = Arc::new(ScriptedModel {
            latency: l,
            n,
            k,
            ids: AtomicU64::new(0),
        });
        let f = rt.block_on(run_once(model, dir.path(), 16));
        report("in-proc16", n, k, l, 16, &f);
    }
    println!("-- loopback HTTP (real Anthropic client, SSE, mock server), --max-parallel N");
    for &n in &ns {
        let f = rt.block_on(async {
            let server = MockServer::start().await;
            http_replies(n, k, l, &server);
            let mut config = AnthropicConfig::new("bench-key-000000");
            config.base_url = server.uri();
            config.http.retry = RetryPolicy::none();
            let model: Arc<dyn Model> = Arc::new(AnthropicModel::new(config).unwrap());
            let f = run_once(model, dir.path(), n).await;
            assert!(server.violations().is_empty(), "{:?}", server.violations());
            f
        });
        report("http", n, k, l, n, &f);
    }
}
