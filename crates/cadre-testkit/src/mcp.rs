//! A real MCP server for tests, built on the official Rust SDK (`rmcp`).
//!
//! The `cadre-test-mcp` binary serves [`TestMcpServer`] over stdio (no arguments) or
//! streamable HTTP (`--http 127.0.0.1:0`, path `/mcp`). Its tools:
//!
//! | tool | arguments | result |
//! |------|-----------|--------|
//! | `echo` | `{text: string}` | text `echo: <text>` |
//! | `add` | `{a: integer, b: integer}` | text with the sum, e.g. `5` |
//! | `image` | `{}` | text `a red pixel`, then a 1×1 PNG image (`image/png`) |
//! | `env` | `{name: string}` | text: that variable's value in the server, or `(unset)` |
//! | `env_names` | `{}` | text: the sorted names of the server's variables, one a line |
//! | `fail` | `{message: string}` | `isError: true` with the message as text |
//! | `crash` | `{}` | `crashing on purpose` on stderr, then exit code 3, no answer |
//! | `hang` | `{}` | never answers |
//!
//! With a `hang` call pending, closing stdin ends the process only after rmcp's drain
//! timeout (about 5 s); kill it for a quick end.
//!
//! Flags: `--name NAME` (server name in `initialize`, default `cadre-test`), `--log FILE`
//! (appends `start <pid>` at start-up and `call <tool> <json args>` per call, then
//! `meta-traceparent <tool> <value>` when the call's `params._meta` carries a trace context
//! and `header-traceparent <tool> <value>` when its HTTP request did), and
//! `--fail-start MESSAGE` (prints the message to stderr and exits 1 without serving).
//!
//! Tests in other crates find the binary with [`mcp_server_binary`] and run an HTTP
//! instance with [`McpHttpServer`].
//!
//! Note for HTTP clients: when the server dies mid-call, rmcp's streamable HTTP client
//! with its default retry policy keeps reconnecting forever, so the pending call never
//! fails; bound `retry_config` to see the error.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;

/// Server name reported in `initialize` unless `--name` says otherwise.
pub const DEFAULT_SERVER_NAME: &str = "cadre-test";

/// Name of the test MCP server binary target.
pub const MCP_SERVER_BIN: &str = "cadre-test-mcp";

/// Base64 of a valid 1×1 PNG holding one red pixel (RGB 255,0,0).
pub const RED_PIXEL_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC";

/// How long [`McpHttpServer::spawn`] waits for the `listening` line.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of one [`TestMcpServer`].
#[derive(Debug, Clone)]
pub struct McpServerOptions {
    /// Server name reported in `initialize`.
    pub name: String,
    /// File to append `start` / `call` lines to.
    pub log: Option<PathBuf>,
}

impl Default for McpServerOptions {
    fn default() -> Self {
        McpServerOptions {
            name: DEFAULT_SERVER_NAME.to_owned(),
            log: None,
        }
    }
}

/// Appends one line to the event log, if there is one.
///
/// Opened per line in append mode so that several server processes can share one log
/// and every line is on disk as soon as it is written.
fn log_line(log: Option<&Path>, line: &str) {
    let Some(path) = log else { return };
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        eprintln!("cadre-test-mcp: cannot write log {}: {e}", path.display());
    }
}

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to send back.
    text: String,
}

/// Arguments of `add`.
#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    /// First addend.
    a: i64,
    /// Second addend.
    b: i64,
}

/// Arguments of `env`.
#[derive(Debug, Deserialize, JsonSchema)]
struct EnvArgs {
    /// Name of the environment variable to read.
    name: String,
}

/// Arguments of `fail`.
#[derive(Debug, Deserialize, JsonSchema)]
struct FailArgs {
    /// Text of the error result.
    message: String,
}

/// The test MCP server: the tools listed in the [module docs](self).
///
/// Usable in-process too (`TestMcpServer::new(..).serve(transport)`), but `crash` then
/// ends the test process itself.
#[derive(Debug, Clone)]
pub struct TestMcpServer {
    tool_router: ToolRouter<TestMcpServer>,
    options: Arc<McpServerOptions>,
}

impl TestMcpServer {
    /// A server with these settings (writes no `start` line; [`run_cli`] does).
    pub fn new(options: McpServerOptions) -> TestMcpServer {
        TestMcpServer {
            tool_router: TestMcpServer::tool_router(),
            options: Arc::new(options),
        }
    }
}

#[tool_router]
impl TestMcpServer {
    /// Sends the text back.
    #[tool(description = "Echo the text back, prefixed with 'echo: '.")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        format!("echo: {}", args.text)
    }

    /// Adds two integers (widened so that no input overflows).
    #[tool(description = "Add two integers and return the sum as text.")]
    async fn add(&self, Parameters(args): Parameters<AddArgs>) -> String {
        (i128::from(args.a) + i128::from(args.b)).to_string()
    }

    /// A text block and an image block in one result.
    #[tool(description = "Return a caption and a 1x1 red PNG image.")]
    async fn image(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::text("a red pixel"),
            ContentBlock::image(RED_PIXEL_PNG_BASE64, "image/png"),
        ])
    }

    /// Reads the server process's environment, to check what a client passed on.
    #[tool(
        description = "Return the value of an environment variable of the server, or '(unset)'."
    )]
    async fn env(&self, Parameters(args): Parameters<EnvArgs>) -> String {
        match std::env::var_os(&args.name) {
            Some(value) => value.to_string_lossy().into_owned(),
            None => "(unset)".to_owned(),
        }
    }

    /// Lists the server's environment, to check that a client passed nothing extra.
    #[tool(
        description = "Return the sorted names of the server's environment variables, one per line."
    )]
    async fn env_names(&self) -> String {
        let mut names: Vec<String> = std::env::vars_os()
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.join("\n")
    }

    /// A tool-level error (`isError: true`), not a protocol error.
    #[tool(description = "Return a tool error result with the given message.")]
    async fn fail(&self, Parameters(args): Parameters<FailArgs>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(args.message)])
    }

    /// Ends the whole process mid-call, as a crashing server would.
    #[tool(description = "Exit the server process with code 3 without answering.")]
    async fn crash(&self) -> String {
        eprintln!("crashing on purpose");
        std::process::exit(3)
    }

    /// Never answers, for client timeouts and cancellation.
    #[tool(description = "Never answer (sleeps for an hour).")]
    async fn hang(&self) -> String {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        "woke up".to_owned()
    }
}

impl ServerHandler for TestMcpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new(self.options.name.clone(), env!("CARGO_PKG_VERSION")),
        )
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Logged before running, so that `crash` and `hang` calls are recorded too.
        let args = serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
        let log = self.options.log.as_deref();
        log_line(log, &format!("call {} {args}", request.name));
        // The trace context the client sent: in `_meta`, and over HTTP as a header.
        // (rmcp hands a request's `_meta` to the handler in its context.)
        let meta = context
            .meta
            .0
            .get_traceparent()
            .or_else(|| request.meta.as_ref()?.0.get_traceparent());
        if let Some(tp) = meta {
            log_line(log, &format!("meta-traceparent {} {tp}", request.name));
        }
        let header = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("traceparent")?.to_str().ok());
        if let Some(tp) = header {
            log_line(log, &format!("header-traceparent {} {tp}", request.name));
        }
        self.tool_router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        Ok(rmcp::model::ListToolsResult::with_all_items(
            self.tool_router.list_all(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tool_router.get(name).cloned()
    }
}

/// Serves one MCP session over this process's stdin and stdout until the client hangs up.
pub async fn serve_stdio(options: McpServerOptions) -> io::Result<()> {
    let service = TestMcpServer::new(options)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(io::Error::other)?;
    service.waiting().await.map_err(io::Error::other)?;
    Ok(())
}

/// Serves streamable HTTP at `/mcp` on `listener` until the process ends.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    options: McpServerOptions,
) -> io::Result<()> {
    let options = Arc::new(options);
    let service: StreamableHttpService<TestMcpServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(TestMcpServer::new((*options).clone())),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, router).await
}

/// Parsed command line of `cadre-test-mcp`.
#[derive(Debug, Default)]
struct Cli {
    http: Option<SocketAddr>,
    fail_start: Option<String>,
    options: McpServerOptions,
}

fn parse_cli(args: impl IntoIterator<Item = String>) -> Result<Cli, String> {
    let mut cli = Cli::default();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--http" => {
                let addr = value()?;
                cli.http = Some(addr.parse().map_err(|e| format!("--http {addr}: {e}"))?);
            }
            "--name" => cli.options.name = value()?,
            "--log" => cli.options.log = Some(PathBuf::from(value()?)),
            "--fail-start" => cli.fail_start = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(cli)
}

/// Runs the `cadre-test-mcp` command line (arguments without the program name).
pub fn run_cli(args: impl IntoIterator<Item = String>) -> ExitCode {
    let cli = match parse_cli(args) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("cadre-test-mcp: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(message) = cli.fail_start {
        eprintln!("{message}");
        return ExitCode::from(1);
    }
    log_line(
        cli.options.log.as_deref(),
        &format!("start {}", std::process::id()),
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cadre-test-mcp: no runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.http {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await?;
                let bound = listener.local_addr()?;
                let mut stdout = io::stdout().lock();
                writeln!(stdout, "listening http://{bound}/mcp")?;
                stdout.flush()?;
                drop(stdout);
                serve_http(listener, cli.options).await
            }
            None => serve_stdio(cli.options).await,
        }
    });
    // A stdin read or a `hang` call may still be pending; do not wait for them.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cadre-test-mcp: {e}");
            ExitCode::from(1)
        }
    }
}

/// Path of the built `cadre-test-mcp` binary, building it first if it is missing.
///
/// `cargo test --workspace` builds every member's binaries before running tests, so the
/// binary normally sits next to the test executable's `deps` folder
/// (`target/<profile>/cadre-test-mcp`). If it is absent (e.g. `cargo test -p cadre-core`),
/// it is built with `cargo build -p cadre-testkit --bin cadre-test-mcp` into the same
/// target folder, once per process. Panics if that fails (a test helper).
pub fn mcp_server_binary() -> PathBuf {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BINARY.get_or_init(find_or_build_binary) {
        Ok(path) => path.clone(),
        Err(e) => fail_loudly(&format!(
            "{e}; run `cargo build -p cadre-testkit --bins` first"
        )),
    }
}

#[allow(clippy::panic)] // Test helper: a test cannot go on without its server.
fn fail_loudly(message: &str) -> ! {
    panic!("{message}")
}

fn find_or_build_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
    // target/<profile>/deps/<test> → target/<profile>; a binary run directly lives in
    // target/<profile> itself.
    let mut profile_dir = exe
        .parent()
        .ok_or("current executable has no folder")?
        .to_path_buf();
    if profile_dir
        .file_name()
        .is_some_and(|name| name == "deps" || name == "examples")
    {
        profile_dir.pop();
    }
    let file_name = format!("{MCP_SERVER_BIN}{}", std::env::consts::EXE_SUFFIX);
    let mut candidates = vec![profile_dir.join(&file_name)];
    // With a separate build-dir the tests run from there, but binaries land in the target dir.
    if let (Some(target_dir), Some(profile)) = (
        std::env::var_os("CARGO_TARGET_DIR"),
        profile_dir.file_name(),
    ) {
        candidates.push(Path::new(&target_dir).join(profile).join(&file_name));
    }
    let present = |candidates: &[PathBuf]| candidates.iter().find(|c| c.is_file()).cloned();
    if let Some(binary) = present(&candidates) {
        return Ok(binary);
    }
    build_binary(&profile_dir)?;
    present(&candidates)
        .ok_or_else(|| format!("{} is missing after the build", candidates[0].display()))
}

/// Builds the binary with cargo, into the target folder the running tests came from.
fn build_binary(profile_dir: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "-p",
            "cadre-testkit",
            "--bin",
            MCP_SERVER_BIN,
        ])
        .arg("--manifest-path")
        .arg(&manifest);
    let profile = profile_dir
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    match profile.as_str() {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    if std::env::var_os("CARGO_TARGET_DIR").is_none() {
        if let Some(target_dir) = profile_dir.parent() {
            command.env("CARGO_TARGET_DIR", target_dir);
        }
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo to build {MCP_SERVER_BIN}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "building {MCP_SERVER_BIN} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A `cadre-test-mcp --http` process on 127.0.0.1; killed when dropped.
#[derive(Debug)]
pub struct McpHttpServer {
    child: Child,
    url: String,
}

impl McpHttpServer {
    /// Starts the binary with `--http 127.0.0.1:0` plus `args` and waits for its address.
    ///
    /// Panics if it does not print its `listening` line in time (a test helper).
    pub fn spawn(args: &[&str]) -> McpHttpServer {
        match McpHttpServer::try_spawn(args) {
            Ok(server) => server,
            Err(e) => fail_loudly(&format!("{MCP_SERVER_BIN} --http did not start: {e}")),
        }
    }

    /// Like [`McpHttpServer::spawn`], returning the error instead of panicking.
    pub fn try_spawn(args: &[&str]) -> Result<McpHttpServer, String> {
        let mut child = Command::new(mcp_server_binary())
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {MCP_SERVER_BIN}: {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            return Err("no stdout pipe".to_owned());
        };
        // A thread reads the line so that the wait can time out.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep draining so that the server never writes into a closed pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(LISTEN_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                let status = match child.wait() {
                    Ok(status) => status.to_string(),
                    Err(e) => format!("unknown ({e})"),
                };
                return Err(format!("no listening line ({other:?}); {status}"));
            }
        };
        match line.strip_prefix("listening ") {
            Some(url) => Ok(McpHttpServer {
                url: url.to_owned(),
                child,
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("unexpected first line {line:?}"))
            }
        }
    }

    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server (if still running) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `timeout` for the server to exit by itself; its status, if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return None,
            }
        }
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.kill();
    }
}
