//! Fleet benchmark in engine mode: the scenario of cadre-core's `fleet` bench, run as
//! Restate invocations on an in-process worker, beside the same scenario in process.
//!
//! A mock model answers every request after a fixed latency L. The primary agent sends N
//! `Task` calls in one turn; each `explore` subagent makes k model requests (k − 1
//! `list_files` calls, then its answer); the primary agent then answers. The ideal wall time
//! is the critical path, (k + 2)·L. For each N the bench prints the measured wall time, the
//! overhead per model turn on the critical path, CPU per model turn (this process, which is
//! the worker, and the Restate server), the Restate server's memory and this process's peak
//! memory — once in process (no Restate) and once through Restate.
//!
//! It needs `restate-server` (see `cadre_testkit::restate`; `CADRE_RESTATE_SERVER` names the
//! binary) and otherwise prints a note and exits.
//!
//! Run: `cargo bench -p cadre-engine --bench fleet_engine` (CADRE_BENCH_N takes a comma
//! list of N, default 8,64,256; CADRE_BENCH_L_MS and CADRE_BENCH_K change L and k;
//! CADRE_BENCH_TIMEOUT_S bounds one engine run, default 600; CADRE_BENCH_SQL, a query of
//! Restate's introspection tables such as `SELECT target, running_at, completed_at FROM
//! sys_invocation`, prints its JSON answer after each engine run).
//!
//! Every engine model turn also costs calls to the run's one `CadreRun` object (acquire,
//! release, progress), which Restate runs one at a time: at large N that object, not the
//! model, sets the wall time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use cadre_core::{DelegatedCall, Limits, Orchestrator, Registry, StopKind};
use cadre_engine::client::Ingress;
use cadre_engine::wire::{AgentCall, RunSettings, WireSpec, WorkspaceRef};
use cadre_engine::{serve, Worker};
use cadre_model::{
    ContentBlock, EventSink, Model, ModelError, Request, Response, Role, StopReason, Usage,
};
use cadre_testkit::bench::{cpu_time, reset_peak, status_mib, FleetLine};
use cadre_testkit::restate::{engine_or_skip, RestateServer};
use cadre_tools::Workspace;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MODEL: &str = "claude-sonnet-5-5";
const TASK: &str = "Run the jobs";

/// Answers like the scenario above, after `latency`. Its tool-use ids depend only on the
/// request (agent path, turn), never on a counter: a replayed invocation must send the
/// payloads its journal holds.
struct ScriptedModel {
    latency: Duration,
    n: usize,
    k: usize,
    /// Requests answered (a step run twice would show here).
    sends: AtomicU64,
    /// Subagents that were given their final answer.
    finished: AtomicU64,
}

impl ScriptedModel {
    fn new(latency: Duration, n: usize, k: usize) -> Arc<Self> {
        Arc::new(Self {
            latency,
            n,
            k,
            sends: AtomicU64::new(0),
            finished: AtomicU64::new(0),
        })
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn provider(&self) -> &str {
        "bench"
    }

    async fn send(&self, request: Request, _events: EventSink<'_>) -> Result<Response, ModelError> {
        tokio::time::sleep(self.latency).await;
        self.sends.fetch_add(1, Ordering::Relaxed);
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let (is_main, path) = match &request.origin {
            Some(o) => (o.agent_type == "main", o.path.clone()),
            None => (false, String::new()),
        };
        let tag: String = path
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let id = |i: usize| format!("toolu_{tag}_{turn}_{i}");
        let (content, stop) = match (is_main, turn) {
            (true, 0) => (
                (0..self.n)
                    .map(|i| {
                        ContentBlock::tool_use(
                            id(i),
                            "Task",
                            json!({"description": format!("job {i}"), "prompt": format!("Job {i}: list the files"), "subagent_type": "explore"}),
                        )
                    })
                    .collect(),
                StopReason::ToolUse,
            ),
            (false, t) if t + 1 < self.k => (
                vec![ContentBlock::tool_use(id(0), "list_files", json!({}))],
                StopReason::ToolUse,
            ),
            (false, _) => {
                self.finished.fetch_add(1, Ordering::Relaxed);
                (vec![ContentBlock::text("done")], StopReason::EndTurn)
            }
            (true, _) => (vec![ContentBlock::text("done")], StopReason::EndTurn),
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

/// What one run measured.
struct Figures {
    wall: Duration,
    /// CPU of this process (in process: the whole run; engine: the worker).
    cpu: Duration,
    /// CPU of the Restate server, in engine mode.
    restate_cpu: Option<Duration>,
    /// Model requests answered.
    sends: u64,
    /// This process's peak resident size during the run, in MiB.
    peak_mib: f64,
    /// Subagents that did not finish, and the first reason given.
    failed: (usize, Option<String>),
}

impl Figures {
    /// What `model` saw of a run of `n` subagents that ended with `stop` (`Err`: it did not
    /// end), as a failure count and its first reason.
    fn failed(
        model: &ScriptedModel,
        n: usize,
        stop: Result<&StopKind, String>,
    ) -> (usize, Option<String>) {
        let finished = usize::try_from(model.finished.load(Ordering::Relaxed)).unwrap_or(n);
        let mut failed = (n.saturating_sub(finished), None);
        if failed.0 > 0 {
            failed.1 = Some(format!(
                "{} of {n} subagents never gave their answer",
                failed.0
            ));
        }
        match stop {
            Ok(StopKind::Done) => {}
            Ok(stop) => {
                failed.0 += 1;
                failed.1 = Some(format!("the primary agent: {stop}"));
            }
            Err(why) => {
                failed.0 = failed.0.max(1);
                failed.1 = Some(why);
            }
        }
        failed
    }
}

/// User + system CPU of process `pid` (Linux reports it in ticks of 1/100 s).
fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 14th and 15th fields; here, after `)`, the 12th and 13th.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// The scenario in process, as cadre-core's `fleet` bench runs it.
async fn in_process(model: Arc<ScriptedModel>, dir: &std::path::Path, n: usize) -> Figures {
    let orchestrator = Orchestrator::builder()
        .workspace_handle(Arc::new(Workspace::new(dir).unwrap()))
        .model(model.clone())
        .model_id(MODEL)
        .limits(
            Limits::default()
                .max_parallel(n)
                .max_depth(2)
                .max_fanout(10_000),
        )
        .build()
        .unwrap();
    reset_peak();
    let cpu0 = cpu_time();
    let started = Instant::now();
    let stop = match orchestrator.run("main", TASK).await {
        Ok((outcome, _)) => Ok(outcome.stop),
        Err(e) => Err(e.to_string()),
    };
    let wall = started.elapsed();
    Figures {
        wall,
        cpu: cpu_time() - cpu0,
        restate_cpu: None,
        sends: model.sends.load(Ordering::Relaxed),
        peak_mib: status_mib("self", "VmHWM:"),
        failed: Figures::failed(&model, n, stop.as_ref().map_err(Clone::clone)),
    }
}

/// The primary agent's call, built as `cadre run --engine restate` builds it.
fn agent_call(run: String, n: usize) -> AgentCall {
    let registry = Registry::shipped();
    let spec = cadre_core::internal::primary_spec(&registry, "main")
        .unwrap()
        .clone();
    let wide = u32::try_from(n).unwrap().max(16);
    AgentCall {
        run,
        agent: DelegatedCall {
            path: cadre_core::AgentPath::primary(&spec.name),
            depth: 0,
            spec,
            model: MODEL.into(),
            description: TASK.into(),
            prompt: TASK.into(),
            trace: None,
            output_schema: None,
        },
        base: None,
        settings: RunSettings {
            workspace: WorkspaceRef::Local,
            agents: registry.all().map(WireSpec::new).collect(),
            max_parallel: wide,
            max_depth: 2,
            max_fanout: wide.max(10_000),
            budget_tokens: None,
            max_tokens: 1024,
            max_turns: None,
            context_tokens: 200_000,
            compact_at: None,
            permissions: Default::default(),
        },
    }
}

/// A Restate server with one in-process worker registered, whose model can be swapped
/// between runs.
struct Engine {
    restate: RestateServer,
    ingress: Ingress,
    model: Arc<Swap>,
    runs: AtomicU64,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _cache: tempfile::TempDir,
}

/// The worker's model: the current run's scripted model.
struct Swap(std::sync::Mutex<Arc<ScriptedModel>>);

#[async_trait]
impl Model for Swap {
    fn provider(&self) -> &str {
        "bench"
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        let model = self.0.lock().unwrap().clone();
        model.send(request, events).await
    }
}

impl Engine {
    async fn start(dir: &std::path::Path) -> Engine {
        let restate = RestateServer::start().await.unwrap();
        let model = Arc::new(Swap(std::sync::Mutex::new(ScriptedModel::new(
            Duration::ZERO,
            1,
            1,
        ))));
        let cache = tempfile::tempdir().unwrap();
        let worker = Worker::new("bench", model.clone())
            .workspace(dir)
            .cache_dir(cache.path());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(Arc::new(worker), listener, async move {
            let _ = stopped.await;
        }));
        restate
            .register(&format!("http://127.0.0.1:{port}/"))
            .await
            .unwrap();
        let ingress = Ingress::new(&restate.ingress_url()).unwrap();
        Engine {
            restate,
            ingress,
            model,
            runs: AtomicU64::new(0),
            stop: Some(stop),
            _cache: cache,
        }
    }

    async fn run(&self, model: Arc<ScriptedModel>, n: usize, timeout: Duration) -> Figures {
        *self.model.0.lock().unwrap() = model.clone();
        let pid = self.restate.pid().unwrap();
        // A fresh run id each time: the submission is keyed by it.
        let run = format!(
            "{}-bench{}",
            cadre_core::internal::new_run_id(),
            self.runs.fetch_add(1, Ordering::Relaxed)
        );
        let call = agent_call(run, n);
        reset_peak();
        let (cpu0, rcpu0) = (cpu_time(), process_cpu(pid));
        let started = Instant::now();
        let id = self.ingress.submit(&call).await.unwrap();
        // A run that does not end, or ends otherwise, is a figure, not a panic.
        let stop = match tokio::time::timeout(timeout, self.ingress.attach(&id)).await {
            Ok(Ok(report)) => Ok(report.stop),
            Ok(Err(e)) => Err(format!("the run's report: {e}")),
            Err(_) => {
                eprintln!(
                    "engine run N={n} not done after {timeout:?}; Restate log ends:\n{}",
                    tail(&self.restate.log(), 40)
                );
                Err(format!("not done after {timeout:?}"))
            }
        };
        let wall = started.elapsed();
        Figures {
            wall,
            cpu: cpu_time() - cpu0,
            restate_cpu: Some(process_cpu(pid) - rcpu0),
            sends: model.sends.load(Ordering::Relaxed),
            peak_mib: status_mib("self", "VmHWM:"),
            failed: Figures::failed(&model, n, stop.as_ref().map_err(Clone::clone)),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
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

/// One line of figures, in the shape of cadre-core's `fleet` bench, with the Restate
/// server's own figures after it.
fn row(label: &str, n: usize, k: usize, l: Duration, f: &Figures, restate: Option<u32>) {
    let turns = f.sends.max(1) as f64;
    let restate_cpu = f
        .restate_cpu
        .map_or("—".to_owned(), |c| format!("{:.3} ms", ms(c) / turns));
    let (rss, hwm) = restate.map_or(("—".to_owned(), "—".to_owned()), |pid| {
        let pid = pid.to_string();
        (
            format!("{:.1} MiB", status_mib(&pid, "VmRSS:")),
            format!("{:.1} MiB", status_mib(&pid, "VmHWM:")),
        )
    });
    let line = FleetLine {
        label: label.into(),
        n,
        k,
        latency: l,
        max_parallel: n,
        wall: f.wall,
        cpu: f.cpu,
        turns: f.sends,
        peak_mib: f.peak_mib,
        failed: f.failed.clone(),
        extra: vec![
            ("restate cpu/turn".into(), restate_cpu),
            ("restate rss".into(), rss),
            ("restate peak".into(), hwm),
            ("sends".into(), f.sends.to_string()),
        ],
        ..FleetLine::default()
    };
    println!("{line}");
}

fn main() {
    if !engine_or_skip() {
        return;
    }
    let l = Duration::from_millis(env_or("CADRE_BENCH_L_MS", 50));
    let k: usize = env_or("CADRE_BENCH_K", 3);
    let timeout = Duration::from_secs(env_or("CADRE_BENCH_TIMEOUT_S", 600));
    let ns: Vec<usize> = std::env::var("CADRE_BENCH_N")
        .unwrap_or_else(|_| "8,64,256".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    println!(
        "fleet benchmark, engine mode: L = {} ms per model response, k = {k} model turns per subagent, {} cores, one in-process worker",
        l.as_millis(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    rt.block_on(async {
        let started = Instant::now();
        let engine = Engine::start(&dir_path).await;
        let pid = engine.restate.pid();
        println!(
            "restate-server up and worker registered in {:.0} ms; its RSS {:.1} MiB",
            ms(started.elapsed()),
            status_mib(&pid.unwrap_or(0).to_string(), "VmRSS:")
        );
        // The first invocations pay for discovery and connection set-up.
        let warm = engine.run(ScriptedModel::new(l, 4, k), 4, timeout).await;
        println!("warm-up (engine, N=4): {:.1} ms", ms(warm.wall));
        println!("(ideal = critical path (k+2)·L; overhead/turn = (wall − ideal)/(k+2); cpu/turn and restate cpu/turn per model request; peak is this process's, the worker's in engine mode; restate peak is the server's high-water mark so far)");
        for &n in &ns {
            let f = in_process(ScriptedModel::new(l, n, k), &dir_path, n).await;
            row("in-proc", n, k, l, &f, None);
            let f = engine.run(ScriptedModel::new(l, n, k), n, timeout).await;
            row("engine", n, k, l, &f, pid);
            if let Ok(sql) = std::env::var("CADRE_BENCH_SQL") {
                let v = cadre_testkit::http_client()
                    .post(format!("{}query", engine.restate.admin_url()))
                    .header("accept", "application/json")
                    .json(&json!({ "query": sql }))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                println!("{v}");
            }
        }
    });
}
