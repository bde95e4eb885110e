//! Session benchmark: what the real `cadre` binary costs as a conversation and the runs
//! folder grow, against the test kit's mock Messages API on 127.0.0.1.
//!
//! Three sections, each printing figures (never asserting on them):
//!
//! - `loop`: one `cadre run` whose agent makes T turns (default 300), each reading a file of
//!   20 KB, with compaction off, so every request carries a longer history. It prints cadre's own CPU per turn
//!   (the child process's, not the mock's) over the first and the last third of the turns:
//!   a turn that copies the whole history costs more the longer it is.
//! - `runs-list`: `cadre runs list --limit N` over N runs (default 1,000), once with runs of
//!   one short turn and once with runs of K turns of 20 KB each (default 10), listed twice
//!   (the first listing may leave an index behind for the next), then `cadre runs list`
//!   (20 rows): a listing that reads whole journals costs more the bigger the runs are.
//! - `chat`: `cadre chat` fed M messages on its standard input (default 200), each answered
//!   with 10 KB of text; it prints cadre's CPU per message over the first and the last
//!   third of the messages.
//!
//! Run: `cargo bench -p cadre-cli --bench sessions`. CADRE_BENCH_SECTIONS takes a comma
//! list of `loop`, `runs-list`, `chat` (default all); CADRE_BENCH_TURNS, CADRE_BENCH_RUNS,
//! CADRE_BENCH_RUN_TURNS and CADRE_BENCH_MESSAGES change T, N, K and M; CADRE_BENCH_BIN
//! runs another `cadre` binary (an older build, to compare).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use cadre_testkit::{Match, MockServer, Reply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of each tool result and of each file a run reads.
const RESULT_BYTES: usize = 20_000;

/// Bytes of each chat answer.
const ANSWER_BYTES: usize = 10_000;

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

/// `cadre` in `dir` against `server`, with an empty home and no output kept.
fn cadre(dir: &Path, home: &Path, server: &MockServer, args: &[&str]) -> Command {
    cadre_testkit::bench::cadre_command(&cadre_bin(), dir, home, &server.uri(), args)
}

/// CPU time (user and system) of the children this process has waited for.
fn children_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).unwrap())
            + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap())
    };
    tv(u.user_time()) + tv(u.system_time())
}

/// CPU time process `pid` has used so far, from `/proc/PID/stat` (10 ms steps).
fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start with the state.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime (fields 14 and 15) in USER_HZ, which Linux fixes at 100.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Runs `command` to its end; returns its wall time and CPU time.
fn measure(mut command: Command) -> (Duration, Duration) {
    let cpu = children_cpu();
    let start = Instant::now();
    let status = command.status().unwrap();
    assert!(status.success(), "cadre failed: {status}");
    (start.elapsed(), children_cpu() - cpu)
}

/// A text of `bytes` bytes in lines, different for each `seed`.
fn filler(seed: usize, bytes: usize) -> String {
    let line = format!("line of filler text for item {seed:>6}, to make the history long\n");
    line.repeat(bytes / line.len() + 1)[..bytes].to_owned()
}

/// Writes `f0.txt` … into `dir`, `n` files of [`RESULT_BYTES`].
fn write_files(dir: &Path, n: usize) {
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i}.txt")), filler(i, RESULT_BYTES)).unwrap();
    }
}

/// Replies for an agent that reads `f0.txt` … `f{turns-2}.txt`, one a turn, then answers.
fn reading_replies(turns: usize) -> Vec<Reply> {
    let mut replies: Vec<Reply> = (0..turns.saturating_sub(1))
        .map(|i| {
            Reply::tool_use(
                &format!("r{i}"),
                "read_file",
                json!({"path": format!("f{i}.txt")}),
            )
        })
        .collect();
    replies.push(Reply::text("read them all"));
    replies
}

/// How many messages a request body carries.
fn messages_in(body: &Value) -> usize {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// A matcher that notes cadre's CPU time (process `pid`) at each request, by its number of
/// messages, and matches every request.
fn cpu_probe(pid: Arc<AtomicU32>, seen: Arc<Mutex<Vec<(usize, Duration)>>>) -> Match {
    Match::Custom(Arc::new(move |body: &Value| {
        let pid = pid.load(Ordering::SeqCst);
        if pid != 0 {
            seen.lock()
                .unwrap()
                .push((messages_in(body), process_cpu(pid)));
        }
        true
    }))
}

/// Per-step CPU over the first and last thirds of `seen` (CPU at each step, in order).
fn thirds(seen: &[(usize, Duration)]) -> (f64, f64) {
    let n = seen.len();
    let third = (n / 3).max(1);
    let per = |from: usize, to: usize| {
        let to = to.min(n - 1);
        if to <= from {
            return 0.0;
        }
        (seen[to].1 - seen[from].1).as_secs_f64() * 1000.0 / (to - from) as f64
    };
    (per(0, third), per(n - 1 - third, n - 1))
}

/// Runs `command` to its end, its pid in `pid` for the CPU probe, `input` (if any) on its
/// standard input; its wall time and CPU.
async fn measured(
    mut command: Command,
    pid: Arc<AtomicU32>,
    input: Option<String>,
) -> (Duration, Duration) {
    if input.is_some() {
        command.stdin(Stdio::piped());
    }
    tokio::task::spawn_blocking(move || {
        let before = children_cpu();
        let start = Instant::now();
        let mut child = command.spawn().unwrap();
        pid.store(child.id(), Ordering::SeqCst);
        if let Some(input) = input {
            let mut stdin = child.stdin.take().unwrap();
            std::io::Write::write_all(&mut stdin, input.as_bytes()).unwrap();
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "{command:?} failed: {status}");
        (start.elapsed(), children_cpu() - before)
    })
    .await
    .unwrap()
}

/// Wall, CPU, CPU per `step` over the whole run and its first and last thirds, and the
/// requests the mock saw.
fn figures(
    wall: Duration,
    cpu: Duration,
    server: &MockServer,
    seen: &Mutex<Vec<(usize, Duration)>>,
    step: &str,
) -> String {
    let requests = server.requests().len();
    let (first, last) = thirds(&seen.lock().unwrap());
    format!(
        "wall {:.0} ms cpu {:.0} ms cpu/{step} {:.2} ms first-third cpu/{step} {first:.2} ms last-third cpu/{step} {last:.2} ms requests {requests}",
        wall.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0 / requests.max(1) as f64,
    )
}

async fn bench_loop(turns: usize) {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    write_files(dir.path(), turns);
    let server = MockServer::start().await;
    let pid = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    server.route(cpu_probe(pid.clone(), seen.clone()), reading_replies(turns));
    let max_turns = (turns + 10).to_string();
    let command = cadre(
        dir.path(),
        home.path(),
        &server,
        // Not compacted: every request carries the whole history, as the turns grow.
        &[
            "run",
            "--compact-at",
            "off",
            "--max-turns",
            &max_turns,
            "Read the files one by one.",
        ],
    );
    let (wall, cpu) = measured(command, pid, None).await;
    println!(
        "loop turns={turns} result={}KB {}",
        RESULT_BYTES / 1000,
        figures(wall, cpu, &server, &seen, "turn"),
    );
}

/// Makes one run of `turns` turns in a fresh workspace and returns its runs folder.
async fn template_run(turns: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    write_files(dir.path(), turns);
    let server = MockServer::start().await;
    server.route(Match::Any, reading_replies(turns));
    let command = cadre(
        dir.path(),
        home.path(),
        &server,
        &["run", "Read the files."],
    );
    tokio::task::spawn_blocking(move || measure(command))
        .await
        .unwrap();
    let runs = dir.path().join(".cadre/runs");
    (dir, runs)
}

/// Copies every file of `from` into `to` (a run folder holds files only, and `results/`).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

async fn bench_runs_list(runs: usize, turns: usize) {
    let server = MockServer::start().await;
    for turns in [1, turns] {
        let (template, runs_dir) = template_run(turns).await;
        let original = std::fs::read_dir(&runs_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        let id = original.file_name().unwrap().to_string_lossy().into_owned();
        let size: u64 = std::fs::read_dir(&original)
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        let workspace = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let all = workspace.path().join(".cadre/runs");
        for i in 0..runs {
            copy_dir(&original, &all.join(format!("{id}-{i:04}")));
        }
        drop(template);
        let limit = runs.to_string();
        let list = |args: &[&str]| cadre(workspace.path(), home.path(), &server, args);
        let mut figures = Vec::new();
        // The first listing may leave something behind (an index) that the next one reads.
        for args in [
            &["runs", "list", "--limit", &limit][..],
            &["runs", "list", "--limit", &limit][..],
            &["runs", "list"][..],
        ] {
            let command = list(args);
            let (wall, cpu) = tokio::task::spawn_blocking(move || measure(command))
                .await
                .unwrap();
            figures.push(format!(
                "wall {:.0} ms cpu {:.0} ms",
                wall.as_secs_f64() * 1000.0,
                cpu.as_secs_f64() * 1000.0
            ));
        }
        println!(
            "runs-list runs={runs} run-turns={turns} run-size={}KB list-all (first) {} list-all (again) {} list-20 {}",
            size / 1024,
            figures[0],
            figures[1],
            figures[2],
        );
    }
}

async fn bench_chat(messages: usize) {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    let pid = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let replies = (0..messages)
        .map(|i| Reply::text(&filler(i, ANSWER_BYTES)))
        .collect();
    server.route(cpu_probe(pid.clone(), seen.clone()), replies);
    let max_turns = (messages + 10).to_string();
    let command = cadre(
        dir.path(),
        home.path(),
        &server,
        &["chat", "--max-turns", &max_turns],
    );
    let lines: String = (0..messages)
        .map(|i| format!("message number {i}: go on\n"))
        .collect();
    let (wall, cpu) = measured(command, pid, Some(lines)).await;
    println!(
        "chat messages={messages} answer={}KB {}",
        ANSWER_BYTES / 1000,
        figures(wall, cpu, &server, &seen, "message"),
    );
}

#[tokio::main]
async fn main() {
    let sections =
        std::env::var("CADRE_BENCH_SECTIONS").unwrap_or_else(|_| "loop,runs-list,chat".into());
    let wanted = |s: &str| sections.split(',').any(|w| w.trim() == s);
    println!("cadre binary: {}", cadre_bin().display());
    if wanted("loop") {
        bench_loop(env_usize("CADRE_BENCH_TURNS", 300)).await;
    }
    if wanted("runs-list") {
        bench_runs_list(
            env_usize("CADRE_BENCH_RUNS", 1000),
            env_usize("CADRE_BENCH_RUN_TURNS", 10),
        )
        .await;
    }
    if wanted("chat") {
        bench_chat(env_usize("CADRE_BENCH_MESSAGES", 200)).await;
    }
}
