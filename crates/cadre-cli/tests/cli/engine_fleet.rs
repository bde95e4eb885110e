//! The fleet the engine tests run on: a real Restate server, HAProxy in front of two
//! `cadre worker` replicas, registered; shared by `cadre run --engine restate`'s tests and
//! those of workflows on the engine.

use super::*;
use cadre_testkit::restate::{Haproxy, RestateServer};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A `cadre worker` process, killed when dropped.
pub(super) struct WorkerProc {
    pub(super) child: Child,
    pub(super) addr: SocketAddr,
}

impl WorkerProc {
    /// Starts `cadre worker --name NAME` on a free port, talking to the mock at `model`.
    pub(super) fn start(name: &str, model: &str, home: &Path, extra: &[&str]) -> Self {
        Self::start_on("127.0.0.1:0", name, model, home, extra)
    }

    /// Starts `cadre worker --name NAME` listening on `listen`.
    pub(super) fn start_on(
        listen: &str,
        name: &str,
        model: &str,
        home: &Path,
        extra: &[&str],
    ) -> Self {
        Self::spawn(listen, name, model, home, extra, &[])
    }

    /// [`Self::start_on`], with the variables `env` besides.
    pub(super) fn spawn(
        listen: &str,
        name: &str,
        model: &str,
        home: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let log = std::fs::File::create(home.join(format!("{name}.log"))).unwrap();
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadre"))
            .args(["-v", "worker", "--listen", listen, "--name", name])
            .args(extra)
            .env("HOME", home)
            .env("ANTHROPIC_BASE_URL", model)
            .env("ANTHROPIC_API_KEY", "sk-worker-secret")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(log)
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
    pub(super) fn kill(&mut self) {
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
pub(super) struct Fleet {
    pub(super) restate: RestateServer,
    pub(super) workers: Vec<WorkerProc>,
    pub(super) proxy: Haproxy,
    pub(super) _home: tempfile::TempDir,
}

impl Fleet {
    pub(super) async fn start(model: &str, extra: &[&str]) -> Self {
        Self::start_with(model, extra, &[]).await
    }

    /// [`Self::start`], its workers given the variables `env` besides.
    pub(super) async fn start_with(model: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let home = tempfile::tempdir().unwrap();
        let restate = RestateServer::start().await.unwrap();
        let workers: Vec<WorkerProc> = ["w1", "w2"]
            .iter()
            .map(|n| {
                let cache = home.path().join(format!("cache-{n}"));
                let mut args = extra.to_vec();
                let cache = cache.to_str().unwrap().to_owned();
                args.extend(["--cache-dir", &cache]);
                WorkerProc::spawn("127.0.0.1:0", n, model, home.path(), &args, env)
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
            proxy,
            _home: home,
        }
    }

    /// A fleet whose workers share the folder `dir` (runs outside git work there).
    pub(super) async fn in_folder(model: &str, dir: &Path) -> Self {
        let folder = dir.to_str().unwrap().to_owned();
        Self::start(model, &["--workspace", &folder, "--allow-unsandboxed-bash"]).await
    }

    /// `cadre run --engine restate` in `dir`, with `args` after the engine flags.
    pub(super) async fn run(&self, dir: &Path, args: &[&str]) -> Output {
        let ingress = self.restate.ingress_url();
        let mut all = vec!["run", "--engine", "restate", "--restate-url", &ingress];
        all.extend_from_slice(args);
        cadre_env(dir, &[], &all).await
    }
}

/// Waits for `child` to end (at most a minute) and returns its exit code, stdout, stderr.
pub(super) async fn finish(child: Child) -> Output {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("the client did not end")
    .unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Lines a child writes on stderr, gathered as they come.
pub(super) fn gather_stderr(child: &mut Child) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}
