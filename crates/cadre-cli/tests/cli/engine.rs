//! `cadre worker` and `cadre run --engine restate`: a real Restate server, HAProxy in front
//! of two worker replicas, and the mock model server.

use super::*;
use cadre_testkit::restate::{engine_or_skip, Haproxy, RestateServer};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::collections::BTreeMap;
use std::time::Duration;

/// A `cadre worker` process, killed when dropped.
struct WorkerProc {
    child: Child,
    addr: SocketAddr,
}

impl WorkerProc {
    /// Starts `cadre worker --name NAME` on a free port, talking to the mock at `model`.
    fn start(name: &str, model: &str, home: &Path, extra: &[&str]) -> Self {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
            .args(["worker", "--listen", "127.0.0.1:0", "--name", name])
            .args(extra)
            .env("HOME", home)
            .env("ANTHROPIC_BASE_URL", model)
            .env("ANTHROPIC_API_KEY", "sk-worker-secret")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .rsplit("http://")
            .next()
            .unwrap()
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("no address in {line:?}: {e}"));
        Self { child, addr }
    }

    /// Kills it as a crash would.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Restate server, two workers behind HAProxy, registered.
struct Fleet {
    restate: RestateServer,
    workers: Vec<WorkerProc>,
    _proxy: Haproxy,
    _home: tempfile::TempDir,
}

impl Fleet {
    async fn start(model: &str, extra: &[&str]) -> Self {
        let home = tempfile::tempdir().unwrap();
        let restate = RestateServer::start().await.unwrap();
        let workers: Vec<WorkerProc> = ["w1", "w2"]
            .iter()
            .map(|n| {
                let cache = home.path().join(format!("cache-{n}"));
                let mut args = extra.to_vec();
                let cache = cache.to_str().unwrap().to_owned();
                args.extend(["--cache-dir", &cache]);
                WorkerProc::start(n, model, home.path(), &args)
            })
            .collect();
        let backends: Vec<(String, SocketAddr)> = workers
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("w{}", i + 1), w.addr))
            .collect();
        let proxy = Haproxy::start(&backends).unwrap();
        restate.register(&proxy.uri()).await.unwrap();
        Self {
            restate,
            workers,
            _proxy: proxy,
            _home: home,
        }
    }

    /// `cadre run --engine restate` in `dir`, with `args` after the engine flags.
    async fn run(&self, dir: &Path, args: &[&str]) -> Output {
        let ingress = self.restate.ingress_url();
        let mut all = vec!["run", "--engine", "restate", "--restate-url", &ingress];
        all.extend_from_slice(args);
        cadre_env(dir, &[], &all).await
    }
}

/// A primary agent that fans out `n` subagents of type `agent`, the `i`th running
/// `command(i)` with bash and answering; the primary answers once all are back.
fn fan_out_routes(server: &MockServer, n: usize, agent: &str, command: impl Fn(usize) -> String) {
    let calls: Vec<(String, Value)> = (1..=n)
        .map(|i| {
            (
                format!("toolu_task_{i}"),
                json!({"subagent_type": agent, "description": format!("part {i}"), "prompt": format!("PART-{i}: do your part")}),
            )
        })
        .collect();
    server.route(
        Match::FirstUserContains("FAN-OUT".into()),
        vec![
            Reply::tool_uses(calls.iter().map(|(id, v)| (id.as_str(), "Task", v.clone())).collect()),
            Reply::text("ALL PARTS DONE").usage(100, 10, 0, 0),
        ],
    );
    for i in 1..=n {
        server.route(
            Match::FirstUserContains(format!("PART-{i}:")),
            vec![
                Reply::tool_use(&format!("toolu_bash_{i}"), "bash", json!({"command": command(i)})),
                Reply::text(&format!("part {i} done")).usage(50, 5, 0, 0),
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_in_the_workers_folder_completes_on_both_replicas() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 8, "explore", |_| "echo looked".into());
    let folder = dir.path().to_str().unwrap().to_owned();
    let fleet = Fleet::start(&mock.uri(), &["--workspace", &folder, "--allow-unsandboxed-bash"]).await;
    let out = fleet
        .run(dir.path(), &["--output-format", "json", "FAN-OUT over eight parts"])
        .await;
    assert_eq!(out.code, 0, "stdout: {}\nstderr: {}\n{}", out.stdout, out.stderr, fleet.restate.log());
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["answer"], "ALL PARTS DONE");
    let agents = v["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 9, "{agents:?}");
    let workers: std::collections::BTreeSet<&str> = agents
        .iter()
        .filter(|a| a["path"] != "main")
        .map(|a| a["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers, ["w1", "w2"].into_iter().collect(), "{agents:?}");
    // The key stays with the workers: it reached the model, and nothing the client saw.
    assert!(mock.requests().iter().all(|r| r.header("x-api-key") == Some("sk-worker-secret")));
    assert!(!out.stdout.contains("sk-worker-secret") && !out.stderr.contains("sk-worker-secret"));
    drop(fleet);
}

/// The text of a request's first user message.
fn first_user(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_array()
        .and_then(|c| c.first())
        .and_then(|b| b["text"].as_str())
        .or_else(|| body["messages"][0]["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_fan_out_repeats_no_completed_request_and_no_write() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 8, "code", |i| format!("echo once >> log-{i}.txt"));
    // Each subagent's second request waits here: by then its write is journaled.
    let gate = mock.gate(Match::Custom(std::sync::Arc::new(|b: &Value| {
        first_user(b).starts_with("PART-") && b["messages"].as_array().is_some_and(|m| m.len() >= 3)
    })));
    let folder = dir.path().to_str().unwrap().to_owned();
    let mut fleet = Fleet::start(&mock.uri(), &["--workspace", &folder]).await;
    let ingress = fleet.restate.ingress_url();
    let cwd = dir.path().to_path_buf();
    let run = tokio::spawn(async move {
        let args = ["run", "--engine", "restate", "--restate-url", &ingress, "--output-format", "json", "FAN-OUT over eight parts"];
        cadre_env(&cwd, &[], &args).await
    });
    assert!(
        gate.wait_for(8, Duration::from_secs(60)).await,
        "only {} subagents reached their second request\n{}",
        gate.waiting(),
        fleet.restate.log()
    );
    fleet.workers[0].kill();
    gate.open();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run did not end after the kill")
        .unwrap();
    assert_eq!(out.code, 0, "stdout: {}\nstderr: {}", out.stdout, out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["answer"], "ALL PARTS DONE");
    assert_eq!(v["agents"].as_array().unwrap().len(), 9, "{}", v["agents"]);
    let requests = mock.requests();
    // The kill cut requests off mid-way: w1 held some of the gated ones.
    let cut = requests.iter().filter(|r| !r.completed).count();
    assert!(cut >= 1, "no request was cut off by the kill");
    let mut completed: BTreeMap<String, usize> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.completed) {
        *completed.entry(r.body.to_string()).or_default() += 1;
    }
    let log: Vec<String> = requests
        .iter()
        .map(|r| format!("{} ({} messages, completed: {})", first_user(&r.body), r.messages().len(), r.completed))
        .collect();
    let twice = completed.values().filter(|n| **n > 1).count();
    assert_eq!(twice, 0, "completed requests sent twice; the requests in order:\n{}", log.join("\n"));
    for i in 1..=8 {
        let log = std::fs::read_to_string(dir.path().join(format!("log-{i}.txt"))).unwrap();
        assert_eq!(log, "once\n", "subagent {i}'s write ran {} times", log.lines().count());
    }
}
