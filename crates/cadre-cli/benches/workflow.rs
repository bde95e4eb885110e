//! Workflow benchmark: `cadre workflow run` over N items (default 10,000) at concurrency C
//! (default 256), the real binary against the test kit's mock Messages API on 127.0.0.1,
//! which answers every request after L ms (default 50) with the item's typed answer.
//!
//! Two sections, each printing figures (never asserting on them):
//!
//! - `run`: the whole workflow. It prints the wall time against the ideal (⌈N/C⌉ × L: every
//!   slot always busy, nothing but the model's latency), cadre's peak memory and its CPU per
//!   item. Goals: wall ≤ 1.1 × ideal, peak ≤ 300 MiB.
//! - `resume`: the same workflow killed with SIGKILL once half its items have finished, then
//!   `cadre resume`: how many items finished before the kill were asked of the model again
//!   (goal 0), how many were in flight at the kill (asked again by design: their requests
//!   had no answer journaled), whether every item completed, and the resume's own peak
//!   memory (it runs under a child of this benchmark's of its own, whose children are the
//!   resume alone).
//!
//! Run: `cargo bench -p cadre-cli --bench workflow`. CADRE_BENCH_SECTIONS takes a comma list
//! of `run`, `resume` (default both); CADRE_BENCH_ITEMS, CADRE_BENCH_CONCURRENCY and
//! CADRE_BENCH_LATENCY_MS change N, C and L; CADRE_BENCH_BIN runs another `cadre` binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The mock server runs in this process, on the same cores as the `cadre` it answers: with
// the allocator cadre itself uses, its own work takes less of the time measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use cadre_testkit::{Match, MockServer, Reply};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cadre_bin() -> PathBuf {
    std::env::var_os("CADRE_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cadre")))
}

/// The benchmark's shape: items, concurrency and the model's latency.
#[derive(Clone, Copy)]
struct Shape {
    items: usize,
    concurrency: usize,
    latency: Duration,
}

impl Shape {
    /// The wall time if every slot were always busy and only the model took time.
    fn ideal(self) -> Duration {
        self.latency * u32::try_from(self.items.div_ceil(self.concurrency)).unwrap()
    }
}

/// A project with the workflow `bench.yaml` and its `items.jsonl`.
fn project(shape: Shape) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    let workflow = format!(
        r#"name: bench
input: items.jsonl
key: id
map:
  agent: explore
  prompt: "Label item-{{{{ item.n }}}}: {{{{ item.title }}}}"
  output_schema: {{type: object, properties: {{label: {{type: string}}}}, required: [label], additionalProperties: false}}
  concurrency: {}
"#,
        shape.concurrency
    );
    std::fs::write(dir.path().join("bench.yaml"), workflow).unwrap();
    let mut lines = String::new();
    for n in 0..shape.items {
        lines.push_str(
            &json!({"id": format!("i{n}"), "n": n, "title": format!("issue {n}")}).to_string(),
        );
        lines.push('\n');
    }
    std::fs::write(dir.path().join("items.jsonl"), lines).unwrap();
    dir
}

/// A mock that answers every request with a label after the latency; `spare` replies more
/// than there are items, for requests asked again.
async fn mock(shape: Shape, spare: usize) -> MockServer {
    let server = MockServer::start().await;
    let reply = Reply::text(r#"{"label": "bug"}"#).delay(shape.latency);
    server.route(Match::Any, vec![reply; shape.items + spare]);
    server.allow_unused_replies();
    server
}

/// `cadre` in `dir` against `server`, with an empty home and no output kept.
fn cadre(dir: &Path, home: &Path, server: &MockServer, args: &[&str]) -> Command {
    cadre_testkit::bench::cadre_command(&cadre_bin(), dir, home, &server.uri(), args)
}

/// CPU time (user and system) and peak resident memory (KiB) of the children this process
/// has waited for.
fn children_usage() -> (Duration, i64) {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).unwrap())
            + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap())
    };
    (tv(u.user_time()) + tv(u.system_time()), u.max_rss())
}

/// The first argument that makes this binary run the command after it, then print its exit
/// code and peak resident memory (KiB): a process whose only child is that command.
const MEASURE: &str = "--measure-child";

/// `command` run under a child of this binary (see [`MEASURE`]), so that its peak memory is
/// its own, not that of an earlier child of this process: its exit code and peak KiB.
fn measured(command: &Command) -> (Option<i32>, i64) {
    let mut wrapper = Command::new(std::env::current_exe().unwrap());
    wrapper
        .arg(MEASURE)
        .arg(command.get_program())
        .args(command.get_args());
    if let Some(dir) = command.get_current_dir() {
        wrapper.current_dir(dir);
    }
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapper.env(key, value),
            None => wrapper.env_remove(key),
        };
    }
    let out = wrapper.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let (code, peak) = text.trim().split_once(' ').unwrap();
    (code.parse().ok(), peak.parse().unwrap())
}

/// Runs `args` (a program and its arguments) without output, and prints its exit code and
/// peak resident memory in KiB: the [`MEASURE`] side of [`measured`].
fn measure_child(args: &[String]) {
    let status = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let (_, peak_kib) = children_usage();
    let code = status.code().map_or("-1".to_owned(), |c| c.to_string());
    println!("{code} {peak_kib}");
}

/// The run folder of the project in `dir`, once the run has made it.
fn run_dir(dir: &Path) -> Option<PathBuf> {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join(".cadre/runs"))
        .ok()?
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(runs.len() <= 1, "{runs:?}");
    runs.into_iter().next()
}

/// The item numbers whose results file line says `completed`.
fn completed(dir: &Path) -> BTreeSet<usize> {
    let Some(run) = run_dir(dir) else {
        return BTreeSet::new();
    };
    let text = std::fs::read_to_string(run.join("results.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["outcome"] == "completed")
        .filter_map(|v| v["key"].as_str()?.strip_prefix('i')?.parse().ok())
        .collect()
}

/// How many requests the mock received for each item, by item number.
fn asked(server: &MockServer) -> BTreeMap<usize, usize> {
    let mut by_item = BTreeMap::new();
    for r in server.requests() {
        let text = r.body.to_string();
        let n = text.find("item-").and_then(|at| {
            let digits: String = text[at + 5..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        });
        if let Some(n) = n {
            *by_item.entry(n).or_insert(0) += 1;
        }
    }
    by_item
}

async fn bench_run(shape: Shape) {
    let dir = project(shape);
    let home = tempfile::tempdir().unwrap();
    let server = mock(shape, 0).await;
    let mut command = cadre(
        dir.path(),
        home.path(),
        &server,
        &["workflow", "run", "bench.yaml"],
    );
    let (wall, cpu, peak_kib, status) = tokio::task::spawn_blocking(move || {
        let (cpu, _) = children_usage();
        let start = Instant::now();
        let status = command.status().unwrap();
        let wall = start.elapsed();
        let (after, peak) = children_usage();
        (wall, after - cpu, peak, status)
    })
    .await
    .unwrap();
    let done = completed(dir.path()).len();
    let ideal = shape.ideal();
    println!(
        "workflow run items={} concurrency={} latency={} ms: exit {} completed {done} requests {} wall {:.0} ms ideal {:.0} ms ratio {:.2} (goal <= 1.1) peak {:.1} MiB (goal <= 300) cpu {:.0} ms cpu/item {:.3} ms",
        shape.items,
        shape.concurrency,
        shape.latency.as_millis(),
        status.code().unwrap_or(-1),
        server.requests().len(),
        wall.as_secs_f64() * 1000.0,
        ideal.as_secs_f64() * 1000.0,
        wall.as_secs_f64() / ideal.as_secs_f64(),
        peak_kib as f64 / 1024.0,
        cpu.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0 / shape.items as f64,
    );
}

async fn bench_resume(shape: Shape) {
    let dir = project(shape);
    let home = tempfile::tempdir().unwrap();
    let server = mock(shape, shape.concurrency * 2).await;
    let mut child = cadre(
        dir.path(),
        home.path(),
        &server,
        &["workflow", "run", "bench.yaml"],
    )
    .spawn()
    .unwrap();
    // Killed once the results file shows half the items done (the file lags the journal by a
    // line or two, which only makes the count of in-flight items larger).
    while completed(dir.path()).len() < shape.items / 2 {
        if child.try_wait().unwrap().is_some() {
            panic!("the workflow ended before half its items were done");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before_kill = asked(&server);
    let finished_at_kill = completed(dir.path());
    let run = run_dir(dir.path()).expect("the run made its folder");
    let id = run.file_name().unwrap().to_str().unwrap().to_owned();
    let (code, peak_kib) = tokio::task::spawn_blocking({
        let command = cadre(dir.path(), home.path(), &server, &["resume", &id]);
        move || measured(&command)
    })
    .await
    .unwrap();
    let after = asked(&server);
    let asked_again = |items: &mut dyn Iterator<Item = &usize>| {
        items
            .filter(|n| {
                after.get(n).copied().unwrap_or(0) > before_kill.get(n).copied().unwrap_or(0)
            })
            .count()
    };
    let rerun_finished = asked_again(&mut finished_at_kill.iter());
    let in_flight: Vec<usize> = before_kill
        .keys()
        .filter(|n| !finished_at_kill.contains(n))
        .copied()
        .collect();
    let rerun_in_flight = asked_again(&mut in_flight.iter());
    println!(
        "workflow resume items={} killed with {} done: exit {} completed {} finished-before-kill asked again {rerun_finished} (goal 0) in flight at the kill {} asked again {rerun_in_flight} resume peak {:.1} MiB",
        shape.items,
        finished_at_kill.len(),
        code.unwrap_or(-1),
        completed(dir.path()).len(),
        in_flight.len(),
        peak_kib as f64 / 1024.0,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(MEASURE) {
        measure_child(&args[1..]);
        return;
    }
    bench();
}

#[tokio::main]
async fn bench() {
    let shape = Shape {
        items: env_usize("CADRE_BENCH_ITEMS", 10_000),
        concurrency: env_usize("CADRE_BENCH_CONCURRENCY", 256),
        latency: Duration::from_millis(env_usize("CADRE_BENCH_LATENCY_MS", 50) as u64),
    };
    let sections = std::env::var("CADRE_BENCH_SECTIONS").unwrap_or_else(|_| "run,resume".into());
    for section in sections.split(',').map(str::trim) {
        match section {
            "run" => bench_run(shape).await,
            "resume" => bench_resume(shape).await,
            other => panic!("unknown section {other:?}: run, resume"),
        }
    }
}
