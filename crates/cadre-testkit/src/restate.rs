//! A Restate server and an HAProxy in front of workers, for tests of cadre's engine mode.
//!
//! [`restate_server_binary`] and [`haproxy_binary`] find the programs; a test calls
//! [`engine_or_skip`] first, which skips it (with a note) where they are missing, or fails
//! it when `CADRE_REQUIRE_RESTATE` is set (CI installs both). [`RestateServer`] runs one
//! single-node server on free ports with its data in a temporary folder; [`Haproxy`] balances
//! h2c across worker replicas, retrying a request on another replica when one is gone.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use cadre_testkit::restate::{engine_or_skip, Haproxy, RestateServer};
//! if !engine_or_skip() {
//!     return Ok(());
//! }
//! let restate = RestateServer::start().await?;
//! let workers = [("w1".to_owned(), "127.0.0.1:9081".parse().unwrap())];
//! let proxy = Haproxy::start(&workers)?;
//! restate.register(&proxy.uri()).await?;
//! // call services at restate.ingress_url()
//! # Ok(())
//! # }
//! ```

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::prereq;

/// How long [`RestateServer::start`] waits for both health endpoints.
const RESTATE_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long [`Haproxy::start`] waits for its port and stats socket.
const HAPROXY_START_TIMEOUT: Duration = Duration::from_secs(20);

/// Set (to anything but `0`) to fail, not skip, engine tests whose programs are missing.
pub const REQUIRE_ENV: &str = prereq::RESTATE.require_env;

pub use crate::prereq::{haproxy_binary, restate_server_binary};

/// `Ok` when both the Restate server and HAProxy are found, else what is missing and how to
/// install it.
pub fn engine_available() -> Result<(), String> {
    let mut missing = Vec::new();
    if let (None, Some(set)) = (
        restate_server_binary(),
        std::env::var_os("CADRE_RESTATE_SERVER"),
    ) {
        missing.push(format!(
            "restate-server (CADRE_RESTATE_SERVER={} is not a file)",
            PathBuf::from(set).display()
        ));
    } else if restate_server_binary().is_none() {
        missing.push(format!(
            "restate-server (set CADRE_RESTATE_SERVER, or `npm install --prefix {} \
             @restatedev/restate-server@1.7.12`)",
            prereq::NPM_RESTATE
        ));
    }
    if haproxy_binary().is_none() {
        missing.push("haproxy (apt-get install haproxy)".to_owned());
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing: {}", missing.join("; ")))
    }
}

/// Whether an engine test can run: `true` when [`engine_available`]; otherwise prints a
/// note and returns `false` (the test returns early), or panics when `CADRE_REQUIRE_RESTATE`
/// is set, so CI cannot skip it by accident.
///
/// Engine tests are also marked ignored where the programs were missing at build time
/// (see [`crate::prereq`]); this is the check for a program gone since.
#[allow(clippy::panic)] // Test helper: failing the test is its purpose when CI requires it.
pub fn engine_or_skip() -> bool {
    match engine_available() {
        Ok(()) => true,
        Err(message) => {
            if prereq::required(REQUIRE_ENV) {
                panic!("{REQUIRE_ENV} is set but the engine test cannot run: {message}; .ci/run installs both");
            }
            eprintln!("note: engine test skipped: {message}");
            false
        }
    }
}

/// `N` distinct free TCP ports on 127.0.0.1, all bound at once so none repeats. They are
/// free when asked; the program binds them a moment later (a lost race is retried).
fn free_addrs<const N: usize>() -> io::Result<[SocketAddr; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<io::Result<Vec<_>>>()?;
    let mut addrs = [SocketAddr::from(([127, 0, 0, 1], 0)); N];
    for (addr, listener) in addrs.iter_mut().zip(&listeners) {
        *addr = listener.local_addr()?;
    }
    Ok(addrs)
}

/// How many times a start is tried when another process took a port first.
const START_ATTEMPTS: usize = 3;

/// Whether a start-up error is a port taken by someone else between pick and bind.
fn lost_port_race(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::AddrInUse
}

/// The error for a program that exited during start-up; `AddrInUse` when its log says a
/// port was taken, so the caller retries on new ports.
fn exited_early(program: &str, status: std::process::ExitStatus, log: &Path) -> io::Error {
    let tail = tail(log, 40);
    let lower = tail.to_lowercase();
    // Restate says "Address in use (os error 98)", HAProxy "cannot bind socket (Address
    // already in use)".
    let kind = if lower.contains("address in use") || lower.contains("address already in use") {
        io::ErrorKind::AddrInUse
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(
        kind,
        format!("{program} exited during start-up ({status}); its log ends:\n{tail}"),
    )
}

/// The last `lines` lines of a file, for error messages.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts `cmd` in its own process group with stdout and stderr appended to `log`.
fn spawn_logged(cmd: &mut Command, log: &Path) -> io::Result<Child> {
    let out = File::options().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
}

/// SIGKILLs the child's whole process group and reaps the child.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // Already gone is fine: there is nothing left to stop.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A single-node Restate server on free ports, its data in a temporary folder.
///
/// Its own process group, SIGKILLed on drop; stdout and stderr go to [`log`](Self::log).
#[derive(Debug)]
pub struct RestateServer {
    child: Option<Child>,
    dir: TempDir,
    ingress: SocketAddr,
    admin: SocketAddr,
    node: SocketAddr,
    client: reqwest::Client,
    /// Signs its requests to services with [`TEST_PRIVATE_PEM`].
    signing: bool,
}

/// An Ed25519 private key for tests (made with `openssl genpkey -algorithm ed25519`): a
/// server from [`RestateServer::start_signing`] signs its requests with it.
pub const TEST_PRIVATE_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIOLOzYndzcbcmn5FSNIHVJyfx3QTclNO2Bf7libn71E+\n-----END PRIVATE KEY-----\n";

/// The public half of [`TEST_PRIVATE_PEM`], as `openssl pkey -pubout` writes it.
pub const TEST_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAtHIij5wFhN99aCfqfCDg4O0etVkkf6z/RcupuMZToaw=\n-----END PUBLIC KEY-----\n";

/// The public half of [`TEST_PRIVATE_PEM`] as Restate logs it (`kid`).
pub const TEST_IDENTITY_KEY: &str = "publickeyv1_D9PKycNmspfFmatGP6QYENBmFPd1oZgRGrSB4yZVnd2T";

impl RestateServer {
    /// Starts the server found by [`restate_server_binary`] and waits (up to 60 s) until its
    /// admin `/health` and ingress `/restate/health` answer 200.
    pub async fn start() -> io::Result<RestateServer> {
        Self::start_with(false).await
    }

    /// Like [`start`](Self::start), signing every request it sends to services with
    /// [`TEST_PRIVATE_PEM`] (Restate's request identity), so that only workers given
    /// [`TEST_IDENTITY_KEY`] or none serve it.
    pub async fn start_signing() -> io::Result<RestateServer> {
        Self::start_with(true).await
    }

    async fn start_with(signing: bool) -> io::Result<RestateServer> {
        let dir = tempfile::Builder::new().prefix("cadre-restate").tempdir()?;
        let client = crate::http_client_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(io::Error::other)?;
        let [ingress, admin, node] = free_addrs()?;
        let mut server = RestateServer {
            child: None,
            dir,
            ingress,
            admin,
            node,
            client,
            signing,
        };
        let mut attempt = 1;
        loop {
            match server.launch().await {
                Err(e) if lost_port_race(&e) && attempt < START_ATTEMPTS => {
                    attempt += 1;
                    [server.ingress, server.admin, server.node] = free_addrs()?;
                    // What it recorded names the old addresses.
                    match std::fs::remove_dir_all(server.data_dir()) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                        _ => {}
                    }
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(server),
            }
        }
    }

    /// Runs the binary on this server's ports and data folder, then waits until healthy.
    async fn launch(&mut self) -> io::Result<()> {
        let binary = restate_server_binary().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "restate-server binary not found")
        })?;
        let mut cmd = Command::new(&binary);
        // The caller's own Restate settings must not leak into the test's server.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("RESTATE_") {
                cmd.env_remove(name);
            }
        }
        cmd.arg("--base-dir")
            .arg(self.data_dir())
            .args(["--no-logo", "--listen-mode", "tcp"])
            .env("RESTATE_NODE_NAME", "cadre-test")
            .env("RESTATE_BIND_ADDRESS", self.node.to_string())
            .env(
                "RESTATE_ADVERTISED_ADDRESS",
                format!("http://{}/", self.node),
            )
            .env("RESTATE_ADMIN__BIND_ADDRESS", self.admin.to_string())
            .env(
                "RESTATE_ADMIN__ADVERTISED_ADMIN_ENDPOINT",
                format!("http://{}/", self.admin),
            )
            .env("RESTATE_INGRESS__BIND_ADDRESS", self.ingress.to_string())
            .env(
                "RESTATE_INGRESS__ADVERTISED_INGRESS_ENDPOINT",
                format!("http://{}/", self.ingress),
            )
            // No telemetry. (Its one version check at start-up has no switch; offline it
            // logs a connect error and the server carries on.)
            .env("RESTATE_DISABLE_TELEMETRY", "true")
            .env("RESTATE_LOG_DISABLE_ANSI_CODES", "true")
            // Fewer partitions start faster and use less memory; one node needs no more.
            .env("RESTATE_DEFAULT_NUM_PARTITIONS", "4")
            .env("RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE", "256MiB");
        if self.signing {
            let key = self.dir.path().join("identity.pem");
            std::fs::write(&key, TEST_PRIVATE_PEM)?;
            cmd.env(
                "RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE",
                key,
            );
        }
        let log = self.log_path();
        // Held by `self` at once, so a start abandoned midway still kills it on drop.
        self.child = Some(spawn_logged(&mut cmd, &log)?);
        let started = Instant::now();
        loop {
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                self.child = None;
                return Err(exited_early("restate-server", status, &log));
            }
            if self.healthy().await {
                return Ok(());
            }
            if started.elapsed() > RESTATE_START_TIMEOUT {
                self.kill();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "restate-server not healthy after {RESTATE_START_TIMEOUT:?}; its log ends:\n{}",
                        tail(&log, 40)
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn healthy(&self) -> bool {
        for url in [
            format!("{}health", self.admin_url()),
            format!("{}restate/health", self.ingress_url()),
        ] {
            let ok = self
                .client
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if !ok {
                return false;
            }
        }
        true
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("restate.log")
    }

    /// Everything the server wrote to stdout and stderr so far (all its runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The ingress base URL, `http://127.0.0.1:PORT/` (services are called at
    /// `{ingress_url}Service/handler`).
    pub fn ingress_url(&self) -> String {
        format!("http://{}/", self.ingress)
    }

    /// The admin API base URL, `http://127.0.0.1:PORT/`.
    pub fn admin_url(&self) -> String {
        format!("http://{}/", self.admin)
    }

    /// The ingress address (`127.0.0.1:PORT`).
    pub fn ingress_addr(&self) -> SocketAddr {
        self.ingress
    }

    /// The admin API address (`127.0.0.1:PORT`).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The process id of the running server (`None` after [`kill`](Self::kill)).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Registers (or, forcibly, re-registers) the deployment at `uri`, e.g. an [`Haproxy`]'s
    /// [`uri`](Haproxy::uri): `POST /deployments`. Returns the admin API's answer; a non-2xx
    /// status is an error carrying the body.
    pub async fn register(&self, uri: &str) -> io::Result<Value> {
        self.admin_request(
            reqwest::Method::POST,
            "deployments",
            Some(json!({"uri": uri, "force": true})),
        )
        .await
    }

    /// The registered deployments: `GET /deployments`.
    pub async fn deployments(&self) -> io::Result<Value> {
        self.admin_request(reqwest::Method::GET, "deployments", None)
            .await
    }

    /// One admin API call; a non-2xx status is an error with the answer's body.
    pub async fn admin_request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> io::Result<Value> {
        let url = format!("{}{}", self.admin_url(), path.trim_start_matches('/'));
        let mut request = self.client.request(method.clone(), &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(io::Error::other)?;
        let status = response.status();
        let text = response.text().await.map_err(io::Error::other)?;
        if !status.is_success() {
            return Err(io::Error::other(format!(
                "{method} {url}: {status}: {text}"
            )));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| io::Error::other(format!("{url}: {e}: {text}")))
    }

    /// SIGKILLs the server (its whole process group), as a crash would; the data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(&mut child);
        }
    }

    /// Kills the server if it runs, then starts it again on the same ports and data, and
    /// waits until healthy: what it had durably recorded survives.
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.launch().await
    }
}

impl Drop for RestateServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// HAProxy balancing h2c round-robin across worker replicas, for Restate to call them.
///
/// Each backend is TCP-checked every 500 ms (one failure marks it down, one success up);
/// a request whose replica refuses the connection is retried (3 times) on another one.
/// Its own process group, SIGKILLed on drop.
#[derive(Debug)]
pub struct Haproxy {
    child: Child,
    dir: TempDir,
    addr: SocketAddr,
}

impl Haproxy {
    /// Writes the configuration and starts `haproxy` on a free port of 127.0.0.1, waiting
    /// (up to 20 s) until the port and the stats socket accept connections. `backends` are `(name, address)`.
    pub fn start(backends: &[(String, SocketAddr)]) -> io::Result<Haproxy> {
        let mut attempt = 1;
        loop {
            match Haproxy::try_start(backends) {
                Err(e) if lost_port_race(&e) && attempt < START_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    fn try_start(backends: &[(String, SocketAddr)]) -> io::Result<Haproxy> {
        let binary = haproxy_binary()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "haproxy binary not found"))?;
        let dir = tempfile::Builder::new().prefix("cadre-haproxy").tempdir()?;
        let [addr] = free_addrs()?;
        let config = dir.path().join("haproxy.cfg");
        let stats = dir.path().join("stats.sock");
        std::fs::write(&config, haproxy_config(addr, backends, &stats))?;
        let log = dir.path().join("haproxy.log");
        let mut cmd = Command::new(binary);
        cmd.arg("-db").arg("-f").arg(&config);
        let mut child = spawn_logged(&mut cmd, &log)?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(exited_early("haproxy", status, &log));
            }
            // Ready once it serves both the port and the stats socket it binds next to it.
            if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
                && UnixStream::connect(&stats).is_ok()
            {
                return Ok(Haproxy { child, dir, addr });
            }
            if started.elapsed() > HAPROXY_START_TIMEOUT {
                kill_group(&mut child);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "haproxy not serving its port and stats socket after {HAPROXY_START_TIMEOUT:?}; its log ends:\n{}",
                        tail(&log, 40)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URI, `http://127.0.0.1:PORT/`, to register with Restate.
    pub fn uri(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Everything HAProxy wrote so far, one line per request among it.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default()
    }

    /// Each backend's name and check status as HAProxy sees it now (`UP`, `DOWN`, …), from
    /// its stats socket: for a test that waits until a stopped replica is marked down.
    pub fn backend_status(&self) -> io::Result<Vec<(String, String)>> {
        let mut socket = UnixStream::connect(self.dir.path().join("stats.sock"))?;
        socket.set_read_timeout(Some(Duration::from_secs(5)))?;
        socket.write_all(b"show stat\n")?;
        let mut csv = String::new();
        socket.read_to_string(&mut csv)?;
        let mut lines = csv.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let column = |name: &str| header.iter().position(|h| *h == name);
        let (Some(px), Some(sv), Some(st)) = (column("pxname"), column("svname"), column("status"))
        else {
            return Err(io::Error::other(format!("unexpected stats: {csv}")));
        };
        Ok(lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| {
                f.get(px) == Some(&"workers")
                    && !matches!(f.get(sv), Some(&"BACKEND") | Some(&"FRONTEND") | None)
            })
            .filter_map(|f| Some(((*f.get(sv)?).to_owned(), (*f.get(st)?).to_owned())))
            .collect())
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// The sample configuration shipped in `docs/haproxy.cfg`, which the tests run, so that the
/// sample is known to work.
const SAMPLE_CONFIG: &str = include_str!("../../../docs/haproxy.cfg");

/// The configuration: the shipped sample, with its `bind` address and its `server` lines
/// replaced by the test's, and a stats socket added (h2c in and out, round-robin, TCP
/// checks, retries on another replica).
fn haproxy_config(addr: SocketAddr, backends: &[(String, SocketAddr)], stats: &Path) -> String {
    let mut cfg = String::new();
    for line in SAMPLE_CONFIG.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("server ") || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("bind ") {
            let options = rest.split_once(' ').map_or("", |(_, o)| o);
            cfg.push_str(&format!("    bind {addr} {options}\n"));
            continue;
        }
        cfg.push_str(line);
        cfg.push('\n');
        if trimmed == "global" {
            cfg.push_str(&format!(
                "    stats socket {} mode 600 level admin\n",
                stats.display()
            ));
        }
    }
    for (name, server) in backends {
        cfg.push_str(&format!(
            "    server {name} {server} proto h2 check inter 500ms fall 1 rise 1\n"
        ));
    }
    cfg
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn exit_status(code: i32) -> std::process::ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        std::process::ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn a_taken_port_is_told_apart_from_other_start_failures() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        for (text, taken) in [
            (
                "Failed: [http-ingress-server] failed binding to address '127.0.0.1:18087': \
                 Address in use (os error 98)",
                true,
            ),
            (
                "[ALERT] Binding [h.cfg:8] for frontend f: cannot bind socket (Address already \
                 in use) for [127.0.0.1:18443]",
                true,
            ),
            ("error: invalid configuration", false),
        ] {
            std::fs::write(&log, text).unwrap();
            let e = exited_early("prog", exit_status(1), &log);
            assert_eq!(lost_port_race(&e), taken, "{text}");
            assert!(e.to_string().contains(text), "{e}");
            assert!(
                e.to_string().starts_with("prog exited during start-up"),
                "{e}"
            );
        }
    }

    #[test]
    fn free_addrs_are_distinct() {
        let addrs: [SocketAddr; 3] = free_addrs().unwrap();
        assert_ne!(addrs[0], addrs[1]);
        assert_ne!(addrs[1], addrs[2]);
        assert_ne!(addrs[0], addrs[2]);
        assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() != 0));
    }

    #[test]
    fn haproxy_config_speaks_h2c_both_ways_and_checks_every_server() {
        let cfg = haproxy_config(
            "127.0.0.1:7000".parse().unwrap(),
            &[
                ("w1".to_owned(), "127.0.0.1:7001".parse().unwrap()),
                ("w2".to_owned(), "127.0.0.1:7002".parse().unwrap()),
            ],
            Path::new("stats.sock"),
        );
        for line in [
            "mode http",
            "option redispatch",
            "retries 3",
            "timeout client 10m",
            "timeout server 10m",
            "bind 127.0.0.1:7000 proto h2",
            "balance roundrobin",
            "server w1 127.0.0.1:7001 proto h2 check inter 500ms fall 1 rise 1",
            "server w2 127.0.0.1:7002 proto h2 check inter 500ms fall 1 rise 1",
            "stats socket stats.sock mode 600 level admin",
        ] {
            assert!(cfg.lines().any(|l| l.trim() == line), "{line}:\n{cfg}");
        }
        // The sample's own addresses are gone.
        assert!(!cfg.contains("10.0.0.") && !cfg.contains(":9090"), "{cfg}");
    }
}
