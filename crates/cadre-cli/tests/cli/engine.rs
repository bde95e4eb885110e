//! `cadre worker` and `cadre run --engine restate`: a real Restate server, HAProxy in front
//! of two worker replicas, and the mock model server.

use super::engine_fleet::{finish, gather_stderr, Fleet, WorkerProc};
use super::*;
use cadre_testkit::restate::{engine_or_skip, RestateServer};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

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
            Reply::tool_uses(
                calls
                    .iter()
                    .map(|(id, v)| (id.as_str(), "Task", v.clone()))
                    .collect(),
            )
            .usage(100, 10, 0, 0),
            Reply::text("ALL PARTS DONE").usage(100, 10, 0, 0),
        ],
    );
    for i in 1..=n {
        server.route(
            Match::FirstUserContains(format!("PART-{i}:")),
            // A little latency, so that subagents' requests overlap as real ones do.
            vec![
                Reply::tool_use(
                    &format!("toolu_bash_{i}"),
                    "bash",
                    json!({"command": command(i)}),
                )
                .delay(Duration::from_millis(50)),
                Reply::text(&format!("part {i} done"))
                    .usage(50, 5, 0, 0)
                    .delay(Duration::from_millis(50)),
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_fan_out_in_the_workers_folder_completes_on_both_replicas() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 8, "explore", |_| "echo looked".into());
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let out = fleet
        .run(
            dir.path(),
            &["--output-format", "json", "FAN-OUT over eight parts"],
        )
        .await;
    assert_eq!(
        out.code,
        0,
        "stdout: {}\nstderr: {}\n{}",
        out.stdout,
        out.stderr,
        fleet.restate.log()
    );
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
    assert!(mock
        .requests()
        .iter()
        .all(|r| r.header("x-api-key") == Some("sk-worker-secret")));
    assert!(!out.stdout.contains("sk-worker-secret") && !out.stderr.contains("sk-worker-secret"));
    drop(fleet);
}

/// A gate holding each subagent's second request (the first after its tool ran).
fn second_requests(mock: &MockServer) -> cadre_testkit::Gate {
    mock.gate(Match::Custom(std::sync::Arc::new(|b: &Value| {
        first_user(b).starts_with("PART-") && b["messages"].as_array().is_some_and(|m| m.len() >= 3)
    })))
}

/// The id of the one run in `dir`'s run folder.
fn run_id(dir: &Path) -> String {
    let runs: Vec<_> = std::fs::read_dir(dir.join(".cadre/runs"))
        .unwrap()
        .collect();
    assert_eq!(runs.len(), 1);
    runs[0]
        .as_ref()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned()
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
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_replica_killed_mid_fan_out_repeats_no_completed_request_and_no_write() {
    if engine_or_skip() {
        kill_mid_fan_out(false).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn in_a_repository_a_replica_killed_mid_fan_out_leaves_each_branch_with_its_write_once() {
    if engine_or_skip() {
        kill_mid_fan_out(true).await;
    }
}

/// Eight writing subagents, one replica killed while each waits for its second answer.
/// In a repository (`git`), each writes `log.txt` in its own worktree and its branch is
/// pushed back; else all write `log-N.txt` in the workers' shared folder.
async fn kill_mid_fan_out(git: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    if git {
        cadre_testkit::git::init_repo(dir.path());
        fan_out_routes(&mock, 8, "code", |_| "echo once >> log.txt".into());
    } else {
        fan_out_routes(&mock, 8, "code", |i| format!("echo once >> log-{i}.txt"));
    }
    // Each subagent's second request waits here: by then its write is journaled.
    let gate = second_requests(&mock);
    let folder = dir.path().to_str().unwrap().to_owned();
    let extra: &[&str] = if git { &[] } else { &["--workspace", &folder] };
    let mut fleet = Fleet::start(&mock.uri(), extra).await;
    let ingress = fleet.restate.ingress_url();
    let cwd = dir.path().to_path_buf();
    let run = tokio::spawn(async move {
        let args = [
            "run",
            "--engine",
            "restate",
            "--restate-url",
            &ingress,
            "--output-format",
            "json",
            "FAN-OUT over eight parts",
        ];
        cadre_env(&cwd, &[], &args).await
    });
    assert!(
        gate.wait_for(8, Duration::from_secs(60)).await,
        "only {} subagents reached their second request\n{}",
        gate.waiting(),
        fleet.restate.log()
    );
    // Kill a replica that holds some of them: the roster names the worker of each.
    let ingress = cadre_engine::client::Ingress::new(&fleet.restate.ingress_url()).unwrap();
    let id = run_id(dir.path());
    let mut roster = Vec::new();
    for _ in 0..100 {
        roster = ingress.roster(&id).await.unwrap();
        if roster
            .iter()
            .filter(|p| p.path != "main" && p.turn >= 1)
            .count()
            == 8
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held_by = |w: &str| {
        roster
            .iter()
            .filter(|p| p.path != "main" && p.worker == w)
            .count()
    };
    let (victim, name) = if held_by("w1") > 0 {
        (0, "w1")
    } else {
        (1, "w2")
    };
    let lost = held_by(name);
    assert!(lost > 0, "no worker holds a subagent: {roster:?}");
    fleet.workers[victim].kill();
    // The mock lets go of the dead replica's requests before the gate opens, so no
    // scripted reply is handed to a client that is gone.
    for _ in 0..100 {
        if gate.waiting() == 8 - lost {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        gate.waiting(),
        8 - lost,
        "the mock still holds the killed replica's requests"
    );
    gate.open();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run did not end after the kill")
        .unwrap();
    assert_eq!(
        out.code, 0,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
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
        .map(|r| {
            format!(
                "{} ({} messages, completed: {})",
                first_user(&r.body),
                r.messages().len(),
                r.completed
            )
        })
        .collect();
    let twice = completed.values().filter(|n| **n > 1).count();
    let restate: Vec<String> = fleet
        .restate
        .log()
        .split("\n20")
        .filter(|l| l.contains(" WARN ") && !l.contains("octocrab"))
        .map(|l| l.chars().take(1500).collect())
        .collect();
    let invocations = if twice > 0 {
        fleet
            .restate
            .admin_request(
                reqwest::Method::POST,
                "/query",
                Some(json!({"query": "SELECT id, target, status, retry_count, last_failure, last_attempt_server FROM sys_invocation"})),
            )
            .await
            .map(|v| v.to_string())
            .unwrap_or_else(|e| e.to_string())
    } else {
        String::new()
    };
    assert_eq!(
        twice,
        0,
        "completed requests sent twice; the requests in order:\n{}\ninvocations: {invocations}\nthe mock's violations: {:?}\nworkers: {}\nhaproxy: {}\nRestate's warnings:\n{}",
        log.join("\n"),
        mock.take_violations(),
        ["w1", "w2"].map(|w| std::fs::read_to_string(fleet._home.path().join(format!("{w}.log"))).unwrap_or_default()).join("\n"),
        fleet.proxy.log(),
        restate.join("\n")
    );
    if git {
        let id = run_id(dir.path());
        let listed = cadre_testkit::git::git(
            dir.path(),
            &["branch", "--list", "--format=%(refname:short)", "cadre/*"],
        );
        let branches: Vec<&str> = listed.lines().collect();
        let expected: Vec<String> = (1..=8).map(|i| format!("cadre/{id}/code-{i}")).collect();
        assert_eq!(branches, expected, "{}", v["answer"]);
        for branch in branches {
            let log = cadre_testkit::git::git(dir.path(), &["show", &format!("{branch}:log.txt")]);
            assert_eq!(
                log,
                "once\n",
                "{branch}'s write ran {} times",
                log.lines().count()
            );
        }
        // The person's own checkout is untouched: the writes are on the branches.
        assert!(!dir.path().join("log.txt").exists());
    } else {
        for i in 1..=8 {
            let log = std::fs::read_to_string(dir.path().join(format!("log-{i}.txt"))).unwrap();
            assert_eq!(
                log,
                "once\n",
                "subagent {i}'s write ran {} times",
                log.lines().count()
            );
        }
    }
}

/// `cadre run --engine restate …` in `dir` as a child process (to signal or kill it).
fn spawn_client(dir: &Path, ingress: &str, home: &Path, args: &[&str]) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .args(["run", "--engine", "restate", "--restate-url", ingress])
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Whether run `id`'s roster lists its primary agent (an agent leaves it when it ends).
async fn main_listed(ingress: &cadre_engine::client::Ingress, id: &str) -> bool {
    let roster = ingress.roster(id).await.unwrap();
    roster.iter().any(|p| p.path == "main")
}

/// Whether process `pid` has a TCP connection established to `port`, as `/proc` shows it:
/// the socket inodes among its open files, looked up in the kernel's TCP tables.
fn connected_to(pid: u32, port: u16) -> bool {
    const ESTABLISHED: &str = "01";
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let sockets: Vec<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        text.lines().skip(1).any(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote_port = cols
                .get(2)
                .and_then(|remote| remote.rsplit_once(':'))
                .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok());
            remote_port == Some(port)
                && cols.get(3) == Some(&ESTABLISHED)
                && cols
                    .get(9)
                    .is_some_and(|inode| sockets.iter().any(|s| s == inode))
        })
    })
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_writing_tool_cut_off_by_a_crash_is_reported_interrupted_not_run_again() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 1, "code", |_| {
        "echo started >> marks.txt && sleep 20".into()
    });
    let folder = dir.path().to_str().unwrap().to_owned();
    let mut fleet = Fleet::start(&mock.uri(), &["--workspace", &folder]).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_client(
        dir.path(),
        &fleet.restate.ingress_url(),
        home.path(),
        &["--output-format", "json", "FAN-OUT in one part"],
    );
    let marks = dir.path().join("marks.txt");
    for _ in 0..300 {
        if marks.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marks.exists(), "the command never started");
    let ingress = cadre_engine::client::Ingress::new(&fleet.restate.ingress_url()).unwrap();
    let roster = ingress.roster(&run_id(dir.path())).await.unwrap();
    let running = roster
        .iter()
        .find(|p| p.path == "main/code#1")
        .map(|p| p.worker.clone())
        .unwrap_or_else(|| panic!("the subagent is not in the roster: {roster:?}"));
    fleet.workers[usize::from(running == "w2")].kill();
    let out = finish(client).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap(),
        "started\n",
        "the command ran again"
    );
    let told = mock
        .requests()
        .into_iter()
        .find(|r| first_user(&r.body).starts_with("PART-1") && r.messages().len() == 3)
        .expect("the subagent never asked again");
    assert!(
        told.last_user_text()
            .contains("interrupted: cadre stopped while `bash` was running"),
        "{}",
        told.last_user_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn ctrl_c_cancels_the_run_on_the_engine_and_exits_130() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    mock.allow_unused_replies();
    fan_out_routes(&mock, 2, "explore", |_| "echo looked".into());
    let gate = second_requests(&mock);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_client(
        dir.path(),
        &fleet.restate.ingress_url(),
        home.path(),
        &["FAN-OUT in two parts"],
    );
    assert!(gate.wait_for(2, Duration::from_secs(60)).await);
    let ingress = cadre_engine::client::Ingress::new(&fleet.restate.ingress_url()).unwrap();
    let id = run_id(dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !main_listed(&ingress, &id).await {
        assert!(
            Instant::now() < deadline,
            "the primary agent never showed in the roster"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(client.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // The cancel has reached the primary agent once it has left the roster. The requests in
    // flight then finish (a running step is not interrupted); nothing comes after them.
    while main_listed(&ingress, &id).await {
        assert!(
            Instant::now() < deadline,
            "the cancel never stopped the primary agent"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.open();
    let out = finish(client).await;
    assert_eq!(out.code, 130, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("cancelling run"), "{}", out.stderr);
    assert!(!out.stdout.contains("ALL PARTS DONE"), "{}", out.stdout);
    let mains = mock
        .requests()
        .iter()
        .filter(|r| first_user(&r.body).starts_with("FAN-OUT"))
        .count();
    assert_eq!(mains, 1, "the primary agent asked again after the cancel");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn resume_attaches_to_an_engine_run_whose_client_was_killed() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 2, "explore", |_| "echo looked".into());
    let gate = second_requests(&mock);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let mut client = spawn_client(
        dir.path(),
        &fleet.restate.ingress_url(),
        home.path(),
        &["FAN-OUT in two parts"],
    );
    assert!(gate.wait_for(2, Duration::from_secs(60)).await);
    client.kill().unwrap();
    client.wait().unwrap();
    let id = run_id(dir.path());
    // The run was submitted an hour ago, as its folder says: the resumed client counts
    // that hour, though it was not there.
    let note = dir.path().join(format!(".cadre/runs/{id}/engine.json"));
    let mut meta: Value = serde_json::from_str(&std::fs::read_to_string(&note).unwrap()).unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    meta["submitted_ms"] = json!(now_ms - 3_600_000);
    std::fs::write(&note, meta.to_string()).unwrap();
    let prefix = &id[..id.len() - 2];
    let resume_home = tempfile::tempdir().unwrap();
    let resumed = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .args(["resume", prefix])
        .current_dir(dir.path())
        .env("HOME", resume_home.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("CADRE_MODEL")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run goes on only once `cadre resume` follows it.
    let ingress = fleet.restate.ingress_addr().port();
    wait_for("cadre resume to reach the engine", || {
        connected_to(resumed.id(), ingress)
    })
    .await;
    gate.open();
    let out = finish(resumed).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("ALL PARTS DONE"), "{}", out.stdout);
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(format!(".cadre/runs/{id}/summary.json")))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        summary["usage"]["agents"].as_array().unwrap().len(),
        3,
        "{summary}"
    );
    // Its time is the run's, from its submission, not the resumed client's alone.
    let elapsed = summary["elapsed_ms"].as_u64().unwrap();
    assert!(elapsed >= 3_600_000, "{elapsed} ms: {summary}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn the_runs_limits_hold_across_workers() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Slots: eight subagents on two workers, two model requests in flight at most.
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 8, "explore", |_| "echo looked".into());
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    // Two subagents' requests must overlap once: the slots are two, not one.
    mock.hold_until_waiting(
        Match::FirstUserContains("PART-".into()),
        2,
        Duration::from_secs(30),
    );
    let out = fleet
        .run(
            dir.path(),
            &[
                "--max-parallel",
                "2",
                "--output-format",
                "json",
                "FAN-OUT over eight parts",
            ],
        )
        .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        mock.max_in_flight(),
        2,
        "the slots did not hold across the workers"
    );
    // One token budget for the tree: the primary's first answer spends it.
    let mock = MockServer::start().await;
    mock.allow_unused_replies();
    fan_out_routes(&mock, 8, "explore", |_| "echo looked".into());
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let out = fleet
        .run(
            dir.path(),
            &[
                "--budget-tokens",
                "50",
                "--output-format",
                "json",
                "FAN-OUT over eight parts",
            ],
        )
        .await;
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["stop"], json!({"kind": "budget"}), "{v}");
    assert_eq!(
        mock.requests().len(),
        1,
        "requests were sent past the budget"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn one_worker_that_registers_itself_serves_a_run() {
    if !engine_or_skip() {
        return;
    }
    // The README's three commands on one machine: a server, `cadre worker --register`, a run.
    let dir = tempfile::tempdir().unwrap();
    cadre_testkit::git::init_repo(dir.path());
    let mock = MockServer::start().await;
    mock.route(Match::Any, vec![Reply::text("hello from the fleet")]);
    let restate = RestateServer::start().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let admin = restate.admin_url();
    let cache = home.path().join("cache");
    let _worker = WorkerProc::start(
        "solo",
        &mock.uri(),
        home.path(),
        &["--register", &admin, "--cache-dir", cache.to_str().unwrap()],
    );
    let mut registered = false;
    for _ in 0..100 {
        let deployments = restate.deployments().await.unwrap().to_string();
        if deployments.contains("CadreAgent") {
            registered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(registered, "the worker did not register itself");
    let ingress = restate.ingress_url();
    let out = cadre_env(
        dir.path(),
        &[],
        &[
            "run",
            "--engine",
            "restate",
            "--restate-url",
            &ingress,
            "say hello",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), "hello from the fleet");
    // The run's id comes first, in text mode as in json.
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("cadre: run ") && first.contains("on the engine at"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("solo"),
        "the usage table names no worker: {}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn outside_git_a_worker_without_a_folder_fails_the_run_and_says_why() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    mock.allow_unused_replies();
    mock.route(Match::Any, vec![Reply::text("never")]);
    let fleet = Fleet::start(&mock.uri(), &[]).await;
    let out = fleet.run(dir.path(), &["say hello"]).await;
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.stderr.contains("--workspace DIR"), "{}", out.stderr);
    assert!(mock.requests().is_empty());
}

/// Routes a run whose task holds `marker`: the primary agent runs `command` with bash,
/// then answers `<marker> over`.
fn one_command_route(mock: &MockServer, marker: &str, command: &str) {
    mock.route(
        Match::FirstUserContains(marker.into()),
        vec![
            Reply::tool_use(
                &format!("toolu_{marker}"),
                "bash",
                json!({"command": command}),
            ),
            Reply::text(&format!("{marker} over")),
        ],
    );
}

/// What the model was told of the command of run `marker` (its tool result).
fn told(mock: &MockServer, marker: &str) -> String {
    mock.requests()
        .into_iter()
        .find(|r| first_user(&r.body).contains(marker) && r.messages().len() == 3)
        .map(|r| r.last_user_text())
        .unwrap_or_else(|| panic!("run {marker} never sent its tool result"))
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn permission_rules_from_every_source_hold_on_the_engine() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().to_str().unwrap().to_owned();
    let mock = MockServer::start().await;
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let junk = dir.path().join("junk.txt");
    let project = dir.path().join("cadre.toml");
    let user = home.path().join(".config/cadre/config.toml");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    write_file(
        &dir.path().join(".cadre/agents/guard.yaml"),
        "name: guard\ndescription: A primary agent that may not delete.\nmode: primary\ntools: [\"*\"]\npermissions:\n  deny: [\"Bash(rm:*)\"]\nprompt: You guard the files.\n",
    );
    // (marker, project settings, user settings, flags, what the model must be told)
    let cases: [(&str, &str, &str, &[&str], &str); 7] = [
        (
            "PROJECT-DENY",
            "[permissions]\ndeny = [\"Bash(rm:*)\"]\n",
            "",
            &[],
            "denied by rule Bash(rm:*) (from settings)",
        ),
        (
            "USER-DENY",
            "",
            "[permissions]\ndeny = [\"Bash(rm:*)\"]\n",
            &[],
            "denied by rule Bash(rm:*) (from settings)",
        ),
        (
            "FLAG-DENY",
            "",
            "",
            &["--deny", "Bash(rm:*)"],
            "denied by rule Bash(rm:*) (from --deny)",
        ),
        (
            "AGENT-DENY",
            "",
            "",
            &["--agent", "guard"],
            "denied by rule Bash(rm:*) (from agent type guard)",
        ),
        (
            "FLAG-MODE",
            "",
            "",
            &["--permission-mode", "deny-writes"],
            "denied by permission mode deny-writes",
        ),
        (
            "PLAN-MODE",
            "",
            "",
            &["--permission-mode", "plan"],
            // Plan mode offers no changing tool at all: the call finds no such tool.
            "unknown tool `bash`",
        ),
        (
            "FILE-MODE",
            "[permissions]\nmode = \"deny-writes\"\n",
            "",
            &[],
            "denied by permission mode deny-writes",
        ),
    ];
    for (marker, in_project, in_user, flags, expected) in cases {
        one_command_route(&mock, marker, "rm -f junk.txt");
        std::fs::write(&junk, "keep me").unwrap();
        std::fs::write(&project, in_project).unwrap();
        std::fs::write(&user, in_user).unwrap();
        let ingress = fleet.restate.ingress_url();
        let mut args = vec!["run", "--engine", "restate", "--restate-url", &ingress];
        args.extend_from_slice(flags);
        let task = format!("{marker}: tidy up");
        args.push(&task);
        let out = cadre_env(dir.path(), &[("HOME", &home_dir)], &args).await;
        assert_eq!(out.code, 0, "{marker}: {}\n{}", out.stdout, out.stderr);
        assert!(
            junk.exists(),
            "{marker}: the rule did not hold on the engine"
        );
        let told = told(&mock, marker);
        assert!(told.contains(expected), "{marker}: {told}");
    }
    // Allow rules travel too: with one, the same mode lets the command run.
    one_command_route(&mock, "FLAG-ALLOW", "rm -f junk.txt");
    std::fs::write(&project, "").unwrap();
    std::fs::write(&user, "").unwrap();
    let out = fleet
        .run(
            dir.path(),
            &[
                "--permission-mode",
                "deny-writes",
                "--allow",
                "Bash(rm:*)",
                "FLAG-ALLOW: tidy up",
            ],
        )
        .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!junk.exists(), "the allow rule did not reach the engine");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn an_untrusted_project_types_allow_rules_do_not_loosen_the_users_mode_on_the_engine() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().to_str().unwrap().to_owned();
    let mock = MockServer::start().await;
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "keep me").unwrap();
    // The user denies writes; the project's primary type, not trusted, allows every command.
    write_file(
        &home.path().join(".claude/settings.json"),
        &json!({"permissions": {"defaultMode": "dontAsk"}}).to_string(),
    );
    write_file(
        &dir.path().join("agents/loose.yaml"),
        "name: loose\ndescription: Loose.\nmode: primary\ntools: [bash]\npermissions:\n  allow: [\"Bash\"]\nprompt: Do it.\n",
    );
    one_command_route(&mock, "LOOSE", "rm -f junk.txt");
    let ingress = fleet.restate.ingress_url();
    let args = [
        "run",
        "--engine",
        "restate",
        "--restate-url",
        &ingress,
        "--agent",
        "loose",
        "LOOSE: tidy up",
    ];
    let out = cadre_env(dir.path(), &[("HOME", &home_dir)], &args).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        junk.exists(),
        "the untrusted project's allow rule loosened deny-writes on the engine"
    );
    assert!(
        told(&mock, "LOOSE").contains("denied by permission mode deny-writes"),
        "{}",
        told(&mock, "LOOSE")
    );
    // The items left out are named, as on a local run.
    assert!(
        out.stderr
            .contains("permissions.allow Bash (agent type loose): loosens your mode (deny-writes)"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn settings_the_engine_cannot_honour_refuse_the_run_with_exit_2_naming_them() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().to_str().unwrap().to_owned();
    let mock = MockServer::start().await;
    mock.allow_unused_replies();
    mock.route(Match::Any, vec![Reply::text("never")]);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let server = r#"{"mcpServers": {"files": {"command": "true"}}}"#;
    let typed = "name: linked\ndescription: Uses a server.\nmode: all\nmcp_servers:\n  - own: {command: \"true\"}\nprompt: p\n";
    // The user's own agent type: a project's, untrusted, would have its servers left out.
    let agent_file = home.path().join(".config/cadre/agents/linked.yaml");
    let user_mcp = home.path().join(".config/cadre/mcp.json");
    std::fs::create_dir_all(user_mcp.parent().unwrap()).unwrap();
    // (what is set up, flags, what the refusal must name)
    let cases: [(&str, &[&str], &str); 5] = [
        (".mcp.json", &[], "MCP server files (from"),
        ("user mcp.json", &[], "mcp.json)"),
        ("agent type", &[], "agent type linked"),
        (
            "ask flag",
            &["--permission-mode", "ask"],
            "permission mode ask",
        ),
        ("ask in cadre.toml", &[], "permission mode ask"),
    ];
    for (case, flags, named) in cases {
        let _ = std::fs::remove_file(dir.path().join(".mcp.json"));
        let _ = std::fs::remove_file(&user_mcp);
        let _ = std::fs::remove_file(&agent_file);
        let _ = std::fs::remove_file(dir.path().join("cadre.toml"));
        match case {
            ".mcp.json" => std::fs::write(dir.path().join(".mcp.json"), server).unwrap(),
            "user mcp.json" => std::fs::write(&user_mcp, server).unwrap(),
            "agent type" => write_file(&agent_file, typed),
            "ask in cadre.toml" => std::fs::write(
                dir.path().join("cadre.toml"),
                "[permissions]\nmode = \"ask\"\n",
            )
            .unwrap(),
            _ => {}
        }
        let ingress = fleet.restate.ingress_url();
        let mut args = vec!["run", "--engine", "restate", "--restate-url", &ingress];
        args.extend_from_slice(flags);
        args.push("say hello");
        let out = cadre_env(dir.path(), &[("HOME", &home_dir)], &args).await;
        assert_eq!(out.code, 2, "{case}: {}\n{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("the engine cannot honour") && out.stderr.contains(named),
            "{case}: {}",
            out.stderr
        );
    }
    assert!(
        mock.requests().is_empty(),
        "a refused run reached the model"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn an_engine_run_says_its_id_is_listed_and_resume_finds_it_without_one() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 2, "explore", |_| "echo looked".into());
    let gate = second_requests(&mock);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_client(
        dir.path(),
        &fleet.restate.ingress_url(),
        home.path(),
        &["--output-format", "json", "FAN-OUT in two parts"],
    );
    assert!(gate.wait_for(2, Duration::from_secs(60)).await);
    let id = run_id(dir.path());
    // The roster counts turns as a local run does: each subagent is in its second.
    let ingress = cadre_engine::client::Ingress::new(&fleet.restate.ingress_url()).unwrap();
    let mut roster = Vec::new();
    for _ in 0..100 {
        roster = ingress.roster(&id).await.unwrap();
        if roster
            .iter()
            .filter(|p| p.path != "main" && p.turn == 2)
            .count()
            == 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let turns: Vec<(String, u32)> = roster
        .iter()
        .map(|p| (p.path.to_string(), p.turn))
        .collect();
    assert!(
        turns.iter().any(|(p, t)| p == "main" && *t == 1)
            && turns.iter().filter(|(p, t)| p != "main" && *t == 2).count() == 2,
        "{turns:?}"
    );
    let mut client = client;
    client.kill().unwrap();
    let killed = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&killed.stderr);
    assert!(
        stderr.contains(&format!("run {id} on the engine")),
        "the client did not say the run's id: {stderr}"
    );
    // The run the client left is listed, and `cadre resume` with no id follows it.
    let listed = cadre_env(dir.path(), &[], &["runs", "list"]).await;
    let line = listed
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("the engine run is not listed: {}", listed.stdout));
    assert!(line.contains("on engine"), "{line}");
    assert!(line.contains("FAN-OUT in two parts"), "{line}");
    // Rules cannot be changed on the way: the workers keep the ones the run started with.
    let changed = cadre_env(dir.path(), &[], &["resume", &id, "--deny", "Bash(rm:*)"]).await;
    assert_eq!(changed.code, 2, "{}", changed.stderr);
    assert!(
        changed.stderr.contains("keeps the rules it started with"),
        "{}",
        changed.stderr
    );
    let resumed = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .args(["resume", "--output-format", "json"])
        .current_dir(dir.path())
        .env("HOME", home.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let port = fleet.restate.ingress_addr().port();
    wait_for("cadre resume to reach the engine", || {
        connected_to(resumed.id(), port)
    })
    .await;
    gate.open();
    let out = finish(resumed).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("ALL PARTS DONE"), "{}", out.stdout);
    let listed = cadre_env(dir.path(), &[], &["runs", "list", "--json"]).await;
    let runs: Value = serde_json::from_str(listed.stdout.trim()).unwrap();
    assert_eq!(runs[0]["id"], id.as_str(), "{runs}");
    assert_eq!(runs[0]["outcome"], "completed", "{runs}");
    assert_eq!(runs[0]["engine"], true, "{runs}");
    // The run folder holds each agent's transcript, with times, as a local run's does.
    let folder = dir.path().join(format!(".cadre/runs/{id}"));
    for agent in ["main", "main/explore#1", "main/explore#2"] {
        let text = cadre_testkit::transcript::text_of(&folder, agent);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(lines.len() >= 4, "{agent}: {text}");
        assert!(lines.iter().all(|l| l["t"].is_string()), "{agent}: {text}");
    }
    let show = cadre_env(dir.path(), &[], &["runs", "show", &id]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("FAN-OUT in two parts"),
        "{}",
        show.stdout
    );
    let page = dir.path().join("run.html");
    let html = cadre_env(
        dir.path(),
        &[],
        &["runs", "show", &id, "--html", page.to_str().unwrap()],
    )
    .await;
    assert_eq!(html.code, 0, "{}", html.stderr);
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(page.contains("title=\"turn 1 ·"), "the lanes are empty");
    assert!(!page.contains("carry no times"));
}

#[tokio::test]
async fn worker_register_names_the_admin_api_when_restate_is_down() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin = format!("http://127.0.0.1:{port}");
    let out = cadre_env(
        dir.path(),
        &[("ANTHROPIC_API_KEY", "sk-test")],
        &["worker", "--listen", "127.0.0.1:0", "--register", &admin],
    )
    .await;
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&format!("admin API at {admin}")) && !out.stderr.contains("ingress"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn record_and_replay_are_refused_on_the_engine_for_what_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.jsonl");
    std::fs::write(&cassette, "").unwrap();
    let cassette = cassette.to_str().unwrap();
    // Refused before the engine is reached: nothing need listen at the ingress.
    let ingress = "http://127.0.0.1:9";
    let says_why = |out: &Output| {
        assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains(
                "--record/--replay: the workers send the model requests, not this process"
            ) && !out.stderr.contains("terminal"),
            "{}",
            out.stderr
        );
    };
    for flag in ["--record", "--replay"] {
        let out = cadre_env(
            dir.path(),
            &[("ANTHROPIC_API_KEY", "sk-test")],
            &[
                "run",
                "--engine",
                "restate",
                "--restate-url",
                ingress,
                flag,
                cassette,
                "say hello",
            ],
        )
        .await;
        says_why(&out);
    }
    // `cadre resume` of an engine run refuses them too, instead of leaving them unused.
    let run = "20260101-000000-1";
    write_file(
        &dir.path().join(format!(".cadre/runs/{run}/engine.json")),
        &json!({
            "run": run,
            "invocation": "inv_1",
            "ingress": ingress,
            "agent": "general",
            "model": "claude-sonnet-5-5",
            "task": "say hello",
        })
        .to_string(),
    );
    for flag in ["--record", "--replay"] {
        let out = cadre_env(
            dir.path(),
            &[("ANTHROPIC_API_KEY", "sk-test")],
            &["resume", run, flag, cassette],
        )
        .await;
        says_why(&out);
    }
}

/// Answers of the worker at `addr` to a request sent straight to it, as anyone who reaches
/// its port could: (status of `/discover`, status of an invocation).
async fn straight_to(addr: SocketAddr, headers: &[(&str, &str)]) -> (u16, u16) {
    let client = cadre_testkit::http_client_builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut statuses = Vec::new();
    for (path, body) in [("discover", ""), ("invoke/CadreAgent/run", "{}")] {
        let mut request = client
            .post(format!("http://{addr}/{path}"))
            .header("content-type", "application/vnd.restate.invocation.v5")
            .header("accept", "application/vnd.restate.endpointmanifest.v3+json")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        statuses.push(request.send().await.unwrap().status().as_u16());
    }
    (statuses[0], statuses[1])
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_worker_with_an_identity_key_serves_only_what_restate_signed() {
    use cadre_testkit::restate::{TEST_IDENTITY_KEY, TEST_PUBLIC_PEM};
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    cadre_testkit::git::init_repo(dir.path());
    let home = tempfile::tempdir().unwrap();
    let public = home.path().join("restate.pub");
    std::fs::write(&public, TEST_PUBLIC_PEM).unwrap();
    let public = public.to_str().unwrap();
    let mock = MockServer::start().await;
    mock.route(Match::Any, vec![Reply::text("hello, signed")]);
    // Straight to the worker: unsigned, or signed by a key it does not know, nothing runs.
    let worker = WorkerProc::start(
        "keyed",
        &mock.uri(),
        home.path(),
        &["--identity-key-file", public],
    );
    assert_eq!(straight_to(worker.addr, &[]).await, (401, 401));
    let forged = [
        ("x-restate-signature-scheme", "v1"),
        ("x-restate-jwt-v1", "eyJhbGciOiJFZERTQSJ9.e30.c2lnbmF0dXJl"),
    ];
    assert_eq!(straight_to(worker.addr, &forged).await, (401, 401));
    let unsigned = [("x-restate-signature-scheme", "unsigned")];
    assert_eq!(straight_to(worker.addr, &unsigned).await, (401, 401));
    // Without a key, the same worker would have answered.
    let open = WorkerProc::start("open", &mock.uri(), home.path(), &[]);
    assert_eq!(straight_to(open.addr, &[]).await.0, 200);
    drop(open);
    // A Restate server that does not sign cannot register it.
    let unsigned = RestateServer::start().await.unwrap();
    assert!(
        unsigned
            .register(&format!("http://{}/", worker.addr))
            .await
            .is_err(),
        "an unsigned server registered a worker with a key"
    );
    drop(worker);
    // The server signing with the private key: the worker (its key now the logged form,
    // from the environment) registers itself and runs the run.
    let restate = RestateServer::start_signing().await.unwrap();
    assert!(
        restate.log().contains(TEST_IDENTITY_KEY),
        "{}",
        restate.log()
    );
    let admin = restate.admin_url();
    let cache = home.path().join("cache");
    let log = std::fs::File::create(home.path().join("signed.log")).unwrap();
    let mut signed = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .args(["worker", "--listen", "127.0.0.1:0", "--name", "signed"])
        .args(["--register", &admin, "--cache-dir", cache.to_str().unwrap()])
        .env("CADRE_IDENTITY_KEY", TEST_IDENTITY_KEY)
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", mock.uri())
        .env("ANTHROPIC_API_KEY", "sk-worker-secret")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(signed.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    wait_for("the signed worker to register", || {
        std::fs::read_to_string(home.path().join("signed.log"))
            .unwrap_or_default()
            .contains("registered")
    })
    .await;
    let out = cadre_env(
        dir.path(),
        &[],
        &[
            "run",
            "--engine",
            "restate",
            "--restate-url",
            &restate.ingress_url(),
            "say hello",
        ],
    )
    .await;
    let _ = signed.kill();
    let _ = signed.wait();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), "hello, signed");
}

/// What the workers would refuse is refused before the repository is touched: a run that
/// never started leaves no `refs/cadre/RUN/base` behind.
#[tokio::test]
async fn a_refused_engine_run_leaves_no_ref_in_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join(".cadre/agents/linked.yaml"),
        "name: linked\ndescription: Uses a server.\nmode: all\nmcp_servers:\n  - own: {command: \"true\"}\nprompt: p\n",
    );
    cadre_testkit::git::init_repo(dir.path());
    // Nothing listens there: the refusal comes before any connection. The project is
    // trusted for the run, so its agent type's server is in effect (and so refused).
    let out = cadre_env(
        dir.path(),
        &[("ANTHROPIC_API_KEY", "k")],
        &[
            "run",
            "--trust-project",
            "--engine",
            "restate",
            "--restate-url",
            "http://127.0.0.1:9",
            "say hello",
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("agent type linked names MCP servers"),
        "{}",
        out.stderr
    );
    let refs = cadre_testkit::git::git(dir.path(), &["for-each-ref", "refs/cadre"]);
    assert_eq!(refs.trim(), "", "a refused run left a ref");
}

/// An identity key typed on the command line is the one used, even where the environment
/// names a key file (here one that holds a private key, which would be refused).
#[tokio::test]
async fn a_workers_identity_key_on_the_command_line_beats_a_key_file_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("restate.pem");
    std::fs::write(&private, cadre_testkit::restate::TEST_PRIVATE_PEM).unwrap();
    let (line, said) = worker_until_listening(
        dir.path(),
        "0.0.0.0:0",
        &["--identity-key", cadre_testkit::restate::TEST_IDENTITY_KEY],
        &[("CADRE_IDENTITY_KEY_FILE", private.to_str().unwrap())],
    );
    // Listening, and with a key: no warning of serving anyone.
    assert!(line.contains("listening on"), "{line}\n{said}");
    assert!(!said.contains("WARNING"), "{said}");
}

#[tokio::test]
async fn a_worker_beyond_loopback_without_a_key_warns_and_a_bad_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("restate.pem");
    std::fs::write(&private, cadre_testkit::restate::TEST_PRIVATE_PEM).unwrap();
    // A private key where the public one belongs: refused before anything listens.
    let out = cadre_env(
        dir.path(),
        &[("ANTHROPIC_API_KEY", "sk-test")],
        &[
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--identity-key-file",
            private.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("private key") && out.stdout.is_empty(),
        "{}",
        out.stderr
    );
    // Listening on every address with no key: a warning, before it serves anything.
    let (_, said) = worker_until_listening(dir.path(), "0.0.0.0:0", &[], &[]);
    assert!(
        said.contains("WARNING") && said.contains("without an identity key"),
        "{said}"
    );
    // On loopback, no warning.
    let (_, said) = worker_until_listening(dir.path(), "127.0.0.1:0", &[], &[]);
    assert!(
        !said.contains("WARNING"),
        "a loopback worker warned: {said}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_worker_refuses_a_call_with_hooks_however_it_was_sent() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    mock.allow_unused_replies();
    mock.route(Match::Any, vec![Reply::text("never")]);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let ingress = cadre_engine::client::Ingress::new(&fleet.restate.ingress_url()).unwrap();
    let pwned = dir.path().join("PWNED");
    let hooked = json!({
        "name": "main",
        "description": "hooked",
        "prompt": "p",
        "hooks": [{
            "event": "SessionStart",
            "command": format!("touch {}", pwned.display()),
            "timeout_secs": 5,
            "source": "a call sent straight to the ingress",
        }],
    });
    let plain = json!({"name": "main", "description": "plain", "prompt": "p"});
    let with_server = json!({
        "name": "main", "description": "served", "prompt": "p",
        "mcp_servers": ["files"],
    });
    // (the agent's own type, the run's types, permission mode, what the refusal names)
    let cases = [
        (
            hooked.clone(),
            vec![plain.clone()],
            "auto",
            "agent type main has hooks (SessionStart)",
        ),
        (
            plain.clone(),
            vec![
                plain.clone(),
                json!({"name": "helper", "description": "h", "prompt": "p", "hooks": hooked["hooks"]}),
            ],
            "auto",
            "agent type helper has hooks",
        ),
        (
            with_server.clone(),
            vec![plain.clone()],
            "auto",
            "names MCP servers",
        ),
        (
            plain.clone(),
            vec![plain.clone()],
            "ask",
            "permission mode ask",
        ),
    ];
    for (i, (spec, agents, mode, named)) in cases.into_iter().enumerate() {
        let call: cadre_engine::wire::AgentCall = serde_json::from_value(json!({
            "run": format!("20260101-000000-{i}"),
            "agent": {
                "path": "main", "depth": 0, "spec": spec, "model": "claude-sonnet-5-5",
                "description": "d", "prompt": "say hello",
            },
            "settings": {
                "workspace": {"kind": "local"},
                "agents": agents.into_iter().map(|a| json!({"spec": a})).collect::<Vec<_>>(),
                "max_parallel": 1, "max_depth": 1, "max_fanout": 1, "max_tokens": 100,
                "context_tokens": 1000, "permissions": {"mode": mode},
            },
        }))
        .unwrap();
        let id = ingress.submit(&call).await.unwrap();
        let refused = ingress.attach(&id).await.unwrap_err().to_string();
        assert!(
            refused.contains("cannot honour") && refused.contains(named),
            "case {i}: {refused}"
        );
    }
    assert!(!pwned.exists(), "the worker ran a hook it was sent");
    assert!(
        mock.requests().is_empty(),
        "a refused call reached the model"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn worker_register_pointed_at_the_ingress_says_to_use_the_admin_api() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let restate = RestateServer::start().await.unwrap();
    let ingress = restate.ingress_url();
    let out = cadre_env(
        dir.path(),
        &[("ANTHROPIC_API_KEY", "sk-test")],
        &["worker", "--listen", "127.0.0.1:0", "--register", &ingress],
    )
    .await;
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("is Restate's ingress, not its admin API")
            && out.stderr.contains("9070"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn engine_runs_in_a_fresh_clone_warn_of_uncommitted_changes_only_when_there_are_some() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    cadre_testkit::git::init_repo(dir.path());
    let mock = MockServer::start().await;
    mock.route(Match::Any, vec![Reply::text("hello"); 3]);
    let fleet = Fleet::start(&mock.uri(), &[]).await;
    let warned = |out: &Output| out.stderr.contains("uncommitted changes");
    for attempt in 0..2 {
        let out = fleet.run(dir.path(), &["say hello"]).await;
        assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
        assert!(!warned(&out), "run {attempt}: {}", out.stderr);
    }
    assert!(dir.path().join(".cadre/.gitignore").is_file());
    let status = cadre_testkit::git::git(
        dir.path(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    assert_eq!(status.trim(), "", "cadre's files show in git status");
    // A change of the user's own is still pointed out.
    std::fs::write(dir.path().join("notes.txt"), "mine\n").unwrap();
    let out = fleet.run(dir.path(), &["say hello"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(warned(&out), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_run_whose_worker_cannot_be_reached_says_why_while_it_waits() {
    if !engine_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let folder = dir.path().to_str().unwrap().to_owned();
    let mock = MockServer::start().await;
    mock.route(Match::Any, vec![Reply::text("reached at last")]);
    let restate = RestateServer::start().await.unwrap();
    let mut worker = WorkerProc::start("gone", &mock.uri(), home.path(), &["--workspace", &folder]);
    let addr = worker.addr;
    restate.register(&format!("http://{addr}/")).await.unwrap();
    worker.kill();
    let mut client = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .args([
            "run",
            "--engine",
            "restate",
            "--restate-url",
            &restate.ingress_url(),
        ])
        .args(["--restate-admin-url", &restate.admin_url(), "say hello"])
        .current_dir(dir.path())
        .env("HOME", home.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = gather_stderr(&mut client);
    let named = format!("cadre: waiting: Restate cannot reach http://{addr}/ (");
    wait_for("the client to say why the run waits", || {
        said.lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with(&named) && l.contains("try"))
    })
    .await;
    // The worker comes back on the same address: the run goes on and ends.
    let _back = WorkerProc::start_on(
        &addr.to_string(),
        "back",
        &mock.uri(),
        home.path(),
        &["--workspace", &folder],
    );
    let out = finish(client).await;
    let said = said.lock().unwrap().join("\n");
    assert_eq!(out.code, 0, "{}\n{said}", out.stdout);
    assert_eq!(out.stdout.trim(), "reached at last");
    assert!(!said.contains("cannot reach Restate"), "{said}");
}

#[tokio::test]
async fn a_worker_exports_as_the_users_telemetry_table_says_and_cadre_builds_no_exporter_first() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join(".config/cadre/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    // Metrics asked for by the user's table alone; a protocol no exporter speaks, so each
    // process that builds exporters says so on stderr.
    std::fs::write(&config, "[telemetry]\nmetrics = true\n").unwrap();
    let env = [
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
    ];
    let (line, said) = worker_until_listening(dir.path(), "127.0.0.1:0", &[], &env);
    assert!(line.contains("listening on"), "{line}\n{said}");
    // The worker's own: traces from the environment, metrics from the table. None from
    // `cadre worker` before it became the worker.
    assert_eq!(said.matches("traces are not exported").count(), 1, "{said}");
    assert_eq!(
        said.matches("metrics are not exported").count(),
        1,
        "{said}"
    );
}

/// Starts `cadre worker --listen LISTEN ARGS` with `env` (and no identity key from the
/// environment), waits for the first line it prints (its address, once it listens), stops
/// it, and returns that line and what it wrote to stderr.
fn worker_until_listening(
    dir: &Path,
    listen: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (String, String) {
    let log = dir.join("worker.log");
    let mut worker = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
        .args(["worker", "--listen", listen])
        .args(args)
        .envs(env.iter().copied())
        .env("HOME", dir)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env_remove("CADRE_IDENTITY_KEY")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(worker.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = worker.kill();
    let _ = worker.wait();
    (line, std::fs::read_to_string(&log).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_fan_out_across_both_workers_is_one_trace_under_its_task_calls() {
    use super::traces::Collector;
    use opentelemetry_proto::tonic::trace::v1::Span;
    if !engine_or_skip() {
        return;
    }
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    fan_out_routes(&mock, 8, "explore", |_| "echo looked".into());
    let folder = dir.path().to_str().unwrap().to_owned();
    // The workers export as soon as a span ends: they are killed, not stopped, at the end.
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let extra = ["--workspace", &folder, "--allow-unsandboxed-bash"];
    let fleet = Fleet::start_with(&mock.uri(), &extra, &env).await;
    let out = fleet
        .run(
            dir.path(),
            &["--output-format", "json", "FAN-OUT over eight parts"],
        )
        .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, fleet.restate.log());
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let workers: std::collections::BTreeSet<&str> = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["path"] != "main")
        .map(|a| a["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers.len(), 2, "{v}");

    // Every agent's span and every `Task` call's, from both workers.
    let named =
        |spans: &[Span], name: &str| spans.iter().filter(|s| s.name.starts_with(name)).count();
    wait_for("the workers' spans", || {
        let spans = collector.spans();
        named(&spans, "invoke_agent ") >= 9 && named(&spans, "execute_tool Task") >= 8
    })
    .await;
    let spans = collector.spans();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let names: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{} {} {}<-{}",
                s.name,
                hex(&s.trace_id),
                hex(&s.span_id),
                hex(&s.parent_span_id)
            )
        })
        .collect();
    // One trace across both workers, its root the primary's agent span.
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|s| &s.trace_id == trace), "{names:?}");
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "{names:?}");
    assert_eq!(roots[0].name, "invoke_agent main");
    // Each subagent's span, on whichever worker ran it, is the child of its `Task` call.
    let tasks: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "execute_tool Task")
        .collect();
    assert_eq!(tasks.len(), 8, "{names:?}");
    let subagents: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent explore")
        .collect();
    assert_eq!(subagents.len(), 8, "{names:?}");
    for sub in subagents {
        let parents = tasks
            .iter()
            .filter(|t| t.span_id == sub.parent_span_id)
            .count();
        assert_eq!(parents, 1, "{names:?}");
    }
    for task in tasks {
        assert_eq!(task.parent_span_id, roots[0].span_id);
    }
    drop(fleet);
}
