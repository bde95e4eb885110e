//! One running MCP server: started over stdio or streamable HTTP, its tools listed once, and
//! each call bounded by a timeout so a crashed or hung server becomes an error, not a stall.
//! Each call is a `tools/call {tool}` span (CLIENT) as the MCP conventions name it, whose
//! context goes to the server in the request's `params._meta` (and, over HTTP, as the
//! `traceparent` header too).

use crate::config::ServerConfig;
use crate::result::to_output;
use crate::traced_http::TracedClient;
use cadre_model::semconv::{
    int, SpanName, CADRE_MCP_SERVER, ERROR_TYPE, GEN_AI_OPERATION_NAME, GEN_AI_TOOL_NAME,
    MCP_METHOD_NAME, MCP_TOOLS_CALL, NETWORK_TRANSPORT, OP_EXECUTE_TOOL, OTEL_KIND, OTEL_NAME,
    OTEL_STATUS_CODE, SERVER_ADDRESS, SERVER_PORT, TARGET,
};
use cadre_tools::ToolOutput;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, MetaObject,
    RequestMetaObject,
};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument, Span};

/// The variables a stdio server inherits from cadre's environment; everything else it gets
/// comes from its configuration, so no API key reaches it unless the user passes it.
pub const BASE_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "USER", "TMPDIR"];
/// How much of a server's stderr is kept to explain a failure.
const STDERR_TAIL_BYTES: usize = 4096;

/// Why a server could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// No server of that name is configured.
    #[error("no MCP server named {name:?} is configured; the servers are: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// It did not start or did not complete the MCP handshake.
    #[error(
        "MCP server {server:?} did not start: {message}{}",
        stderr_note(stderr)
    )]
    Start {
        /// The server.
        server: String,
        /// What went wrong.
        message: String,
        /// The end of what it wrote to stderr.
        stderr: String,
        /// The error underneath, when there is one (shared: a failed start is handed to
        /// every agent that asks for the server).
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
}

/// An error beneath a failed start.
type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// Why a start failed: what to say, and the error underneath when there is one.
type Failure = (String, Option<Cause>);

/// Turns an error into a [`Failure`] worded by `message`, keeping the error.
fn caused<E: std::error::Error + Send + Sync + 'static>(
    message: impl FnOnce(&E) -> String,
) -> impl FnOnce(E) -> Failure {
    move |e| (message(&e), Some(Arc::new(e)))
}

fn stderr_note(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!("\nits stderr ends with:\n{stderr}")
    }
}

/// Timeouts for starting servers and for each tool call.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Start-up and handshake.
    pub start: Duration,
    /// One tool call, unless the server's configuration sets its own.
    pub call: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            start: Duration::from_secs(30),
            call: Duration::from_secs(120),
        }
    }
}

/// A tool a server offers, as it described it.
#[derive(Debug, Clone)]
pub struct RemoteTool {
    /// Its name on the server.
    pub name: String,
    /// Its description (or title), possibly empty.
    pub description: String,
    /// Its input JSON Schema.
    pub input_schema: Value,
    /// Whether the server says it changes nothing (`readOnlyHint`).
    pub read_only: bool,
}

/// A started MCP server.
pub struct Server {
    name: String,
    peer: Peer<RoleClient>,
    service: Mutex<Option<RunningService<RoleClient, ClientConfig>>>,
    tools: Vec<RemoteTool>,
    stderr: Arc<Mutex<String>>,
    call_timeout: Duration,
    reached: Reached,
}

/// How a server is reached, as its calls' spans say it.
#[derive(Debug, Clone)]
struct Reached {
    /// `pipe` (stdio) or `tcp` (HTTP).
    transport: &'static str,
    /// An HTTP server's host and port.
    address: Option<(String, u16)>,
}

impl Reached {
    fn of(config: &ServerConfig) -> Self {
        match config {
            ServerConfig::Stdio { .. } => Self {
                transport: "pipe",
                address: None,
            },
            ServerConfig::Http { url, .. } => Self {
                transport: "tcp",
                address: reqwest::Url::parse(url)
                    .ok()
                    .and_then(|u| Some((u.host_str()?.to_owned(), u.port_or_known_default()?))),
            },
        }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("name", &self.name).finish()
    }
}

impl Server {
    /// Starts the server `name` from `config` (variables already expanded), with `cwd` as a
    /// stdio server's working folder unless it names its own, and lists its tools.
    pub async fn start(
        name: &str,
        config: &ServerConfig,
        cwd: &Path,
        timeouts: Timeouts,
    ) -> Result<Self, McpError> {
        let stderr = Arc::new(Mutex::new(String::new()));
        let fail = |(message, source): Failure, stderr: &Arc<Mutex<String>>| McpError::Start {
            server: name.to_owned(),
            message,
            stderr: stderr.lock().map(|s| s.clone()).unwrap_or_default(),
            source,
        };
        let handshake = connect(name, config, cwd, &stderr);
        let service = match tokio::time::timeout(timeouts.start, handshake).await {
            Ok(Ok(service)) => service,
            Ok(Err(failure)) => {
                settle_stderr().await;
                return Err(fail(failure, &stderr));
            }
            Err(_) => {
                return Err(fail(
                    (
                        format!("no MCP handshake within {} s", timeouts.start.as_secs_f64()),
                        None,
                    ),
                    &stderr,
                ))
            }
        };
        let peer = service.peer().clone();
        let listed = match tokio::time::timeout(timeouts.start, peer.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                settle_stderr().await;
                let failure = caused(|e| format!("listing its tools failed: {e}"))(e);
                return Err(fail(failure, &stderr));
            }
            Err(_) => {
                return Err(fail(
                    ("it did not list its tools in time".into(), None),
                    &stderr,
                ))
            }
        };
        let tools = listed.into_iter().map(remote_tool).collect();
        Ok(Self {
            name: name.to_owned(),
            peer,
            service: Mutex::new(Some(service)),
            tools,
            stderr,
            call_timeout: config.timeout().unwrap_or(timeouts.call),
            reached: Reached::of(config),
        })
    }

    /// Its name in the configuration.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tools it offers.
    pub fn tools(&self) -> &[RemoteTool] {
        &self.tools
    }

    /// The end of what it has written to stderr.
    pub fn stderr_tail(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Calls `tool` with `arguments`. A server error, a crash or a timeout comes back as an
    /// `is_error` output that names the server, so the run goes on.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let span = self.call_span(tool);
        let (out, error) = self
            .call_here(tool, arguments, cancel)
            .instrument(span.clone())
            .await;
        if let Some(kind) = error.or(out.is_error.then_some("tool_error")) {
            if !span.is_disabled() {
                span.record(OTEL_STATUS_CODE, "error");
                span.record(ERROR_TYPE, kind);
            }
        }
        out
    }

    /// The `tools/call {tool}` span (CLIENT) of a call of `tool`, child of the current span
    /// (the call's `execute_tool`). Its arguments and result are content, recorded (when
    /// asked) on that span, not here.
    fn call_span(&self, tool: &str) -> Span {
        let span = tracing::info_span!(
            target: TARGET,
            "tools/call",
            { OTEL_NAME } = %SpanName(MCP_TOOLS_CALL, tool),
            { OTEL_KIND } = "client",
            { OTEL_STATUS_CODE } = Empty,
            { MCP_METHOD_NAME } = MCP_TOOLS_CALL,
            { GEN_AI_OPERATION_NAME } = OP_EXECUTE_TOOL,
            { GEN_AI_TOOL_NAME } = tool,
            { CADRE_MCP_SERVER } = self.name.as_str(),
            { NETWORK_TRANSPORT } = self.reached.transport,
            { SERVER_ADDRESS } = Empty,
            { SERVER_PORT } = Empty,
            { ERROR_TYPE } = Empty,
        );
        if let Some((host, port)) = &self.reached.address {
            if !span.is_disabled() {
                span.record(SERVER_ADDRESS, host.as_str());
                span.record(SERVER_PORT, int(u64::from(*port)));
            }
        }
        span
    }

    /// [`call`](Self::call) inside its span: the output, and the `error.type` of a call
    /// that brought no result.
    async fn call_here(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> (ToolOutput, Option<&'static str>) {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map);
        }
        // The call's span is the server's parent, as the MCP conventions propagate it.
        if let Some(tp) = cadre_tools::trace_context::traceparent() {
            let mut meta = MetaObject::new();
            meta.set_traceparent(tp);
            params.meta = Some(RequestMetaObject(meta));
        }
        // Dropping the request (timeout, cancel) tells the server it was cancelled.
        let call = tokio::time::timeout(self.call_timeout, self.peer.call_tool(params));
        let result = tokio::select! {
            r = call => r,
            () = cancel.cancelled() => {
                let out = ToolOutput::error(format!("cancelled while MCP server {:?} was running {tool}", self.name));
                return (out, Some("cancelled"));
            }
        };
        match result {
            Ok(Ok(result)) => (to_output(&self.name, result), None),
            Ok(Err(e)) => {
                settle_stderr().await;
                let gone = self.peer.is_transport_closed();
                let what = if gone {
                    "the server stopped (crashed or exited) during the call".to_owned()
                } else {
                    e.to_string()
                };
                let out = ToolOutput::error(format!(
                    "MCP server {:?} failed on {tool}: {what}{}",
                    self.name,
                    stderr_note(&self.stderr_tail())
                ));
                (
                    out,
                    Some(if gone {
                        "transport_closed"
                    } else {
                        error_type(&e)
                    }),
                )
            }
            Err(_) => {
                let out = ToolOutput::error(format!(
                    "MCP server {:?} did not answer {tool} within {} s; the call was cancelled",
                    self.name,
                    self.call_timeout.as_secs_f64()
                ));
                (out, Some("timeout"))
            }
        }
    }

    /// Closes the connection and stops the server (its whole process group, for stdio).
    pub async fn shutdown(&self) {
        let service = self.service.lock().ok().and_then(|mut s| s.take());
        if let Some(service) = service {
            let _ = service.cancel().await;
        }
    }
}

/// The `error.type` of a call that failed: the JSON-RPC error code, as the MCP conventions
/// say, or what kind of failure it was.
fn error_type(e: &ServiceError) -> &'static str {
    match e {
        ServiceError::McpError(data) => jsonrpc_code(data.code.0),
        ServiceError::TransportSend(_) | ServiceError::TransportClosed => "transport_closed",
        ServiceError::Timeout { .. } => "timeout",
        ServiceError::Cancelled { .. } => "cancelled",
        _ => "_OTHER",
    }
}

/// A JSON-RPC error code as text, for the few the protocol defines.
fn jsonrpc_code(code: i32) -> &'static str {
    match code {
        -32700 => "-32700",
        -32600 => "-32600",
        -32601 => "-32601",
        -32602 => "-32602",
        -32603 => "-32603",
        -32002 => "-32002",
        _ => "_OTHER",
    }
}

/// A running MCP client connection.
type Service = RunningService<RoleClient, ClientConfig>;

/// Connects to the server `name` as `config` says (a stdio server started in its own
/// folder, else `cwd`), its stderr's tail kept in `stderr`; up to the MCP handshake.
async fn connect(
    name: &str,
    config: &ServerConfig,
    cwd: &Path,
    stderr: &Arc<Mutex<String>>,
) -> Result<Service, Failure> {
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("cadre", env!("CARGO_PKG_VERSION")),
    );
    match config {
        ServerConfig::Stdio {
            command,
            args,
            env,
            cwd: own_cwd,
            ..
        } => {
            let cwd = own_cwd.as_deref().unwrap_or(cwd);
            let stdio = Stdio { command, args, env };
            connect_stdio(name, info, &stdio, cwd, stderr).await
        }
        ServerConfig::Http { url, headers, .. } => connect_http(info, url, headers).await,
    }
}

/// What starts a stdio server.
struct Stdio<'a> {
    command: &'a str,
    args: &'a [String],
    env: &'a BTreeMap<String, String>,
}

/// Starts the stdio server `name` in `cwd` with only [`BASE_ENV`] and its own variables,
/// its stderr's tail kept in `stderr`, and shakes hands with it.
async fn connect_stdio(
    name: &str,
    info: ClientConfig,
    stdio: &Stdio<'_>,
    cwd: &Path,
    stderr: &Arc<Mutex<String>>,
) -> Result<Service, Failure> {
    let command = stdio.command;
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(stdio.args).env_clear().current_dir(cwd);
    for key in BASE_ENV {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(stdio.env);
    // Its spans, if it makes any, join the run's trace under the agent that started it.
    if let Some(tp) = cadre_tools::trace_context::traceparent() {
        cmd.env(cadre_tools::trace_context::TRACEPARENT, tp);
    }
    // Its own process group, killed whole: `npx` and shell wrappers start children that
    // would otherwise outlive the run.
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let (transport, child_stderr) = TokioChildProcess::builder(wrap)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(caused(|e| format!("cannot run {command:?}: {e}")))?;
    if let Some(err) = child_stderr {
        tokio::spawn(keep_tail(name.to_owned(), err, stderr.clone()));
    }
    info.serve(transport).await.map_err(caused(|e| {
        format!("it exited or closed its output before the MCP handshake ({e})")
    }))
}

/// Connects to the streamable-HTTP server at `url` with `headers`, retrying a few times
/// only, and shakes hands with it.
async fn connect_http(
    info: ClientConfig,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<Service, Failure> {
    let mut custom = std::collections::HashMap::new();
    for (k, v) in headers {
        let key = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(caused(|e| format!("bad header name {k:?}: {e}")))?;
        let value = reqwest::header::HeaderValue::from_str(v)
            .map_err(caused(|e| format!("bad value for header {k:?}: {e}")))?;
        custom.insert(key, value);
    }
    let client = http_client().map_err(|e| (format!("cannot set up HTTP: {e}"), Some(e)))?;
    let mut http = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
    // rmcp's default reconnects forever: a crashed server would hold every call until its
    // timeout. A few quick tries, then the call fails.
    let mut backoff = ExponentialBackoff::default();
    backoff.max_times = Some(3);
    backoff.base_duration = Duration::from_millis(200);
    backoff.max_delay = Some(Duration::from_secs(2));
    http.retry_config = Arc::new(backoff);
    let transport = StreamableHttpClientTransport::with_client(TracedClient(client), http);
    info.serve(transport)
        .await
        .map_err(caused(|e| format!("{e}")))
}

/// A tool as the server lists it, as cadre offers it.
fn remote_tool(t: rmcp::model::Tool) -> RemoteTool {
    RemoteTool {
        description: t
            .description
            .as_deref()
            .map(str::to_owned)
            .or(t.title.clone())
            .unwrap_or_default(),
        input_schema: Value::Object((*t.input_schema).clone()),
        read_only: t
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false),
        name: t.name.into_owned(),
    }
}

/// Gives a just-failed child a moment to finish writing stderr before it is quoted.
async fn settle_stderr() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Keeps the last bytes of a server's stderr, and logs each line at debug level.
async fn keep_tail(server: String, stderr: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(target: "cadre::mcp", "{server}: {line}");
        if let Ok(mut t) = tail.lock() {
            t.push_str(&line);
            t.push('\n');
            if t.len() > STDERR_TAIL_BYTES {
                let mut cut = t.len() - STDERR_TAIL_BYTES;
                while !t.is_char_boundary(cut) {
                    cut += 1;
                }
                t.drain(..cut);
            }
        }
    }
}

/// An HTTP client for MCP servers, set up as every client of cadre is.
fn http_client() -> Result<reqwest::Client, Cause> {
    cadre_model::http_client_builder()
        .map_err(|e| Arc::new(e) as Cause)?
        .build()
        .map_err(|e| Arc::new(e) as Cause)
}
