//! Streamable HTTP: the same server at `/mcp`, on loopback unless told otherwise, behind a
//! bearer token: the one given, else a random one (none only with --no-token, on loopback).

use super::handler::{CadreServer, Shared};
use crate::common::exit::{CliError, Result};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;

/// Serves `/mcp` at `addr` until `stop_requested` resolves; `token`, when given, is
/// required of every request.
pub async fn serve(
    shared: Arc<Shared>,
    addr: SocketAddr,
    token: Option<String>,
    stop_requested: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::config_from(format!("cannot listen on {addr}"), e))?;
    let bound = listener.local_addr().unwrap_or(addr);
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shared.stopping.child_token());
    if !addr.ip().is_loopback() {
        // rmcp accepts only loopback Host headers by default (against DNS rebinding); off
        // loopback the bearer token is what keeps strangers out.
        config = config.disable_allowed_hosts();
    }
    let stopping = shared.stopping.clone();
    let service: StreamableHttpService<CadreServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(CadreServer::new(shared.clone())),
            Default::default(),
            config,
        );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(token) = token {
        router = router.layer(axum::middleware::from_fn_with_state(
            Arc::new(token),
            require_token,
        ));
    }
    // Said on stderr, so a client (or a test) that asked for port 0 learns the port.
    errln!("cadre: serving MCP at http://{bound}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            tokio::select! {
                () = stop_requested => {}
                () = stopping.cancelled() => {}
            }
            // The calls in flight are cancelled now, so their responses end and the open
            // connections close: shutting down gracefully does not wait for whole runs.
            stopping.cancel();
        })
        .await
        .map_err(|e| CliError::config_from("the HTTP server failed", e))
}

/// The token HTTP clients must send at `addr`: `given`, else none with `no_token` (only on
/// loopback), else a random one, said on stderr for the person who started the server.
pub fn token_for(
    addr: SocketAddr,
    given: Option<String>,
    no_token: bool,
) -> Result<Option<String>> {
    if no_token {
        if !addr.ip().is_loopback() {
            return Err(CliError::config(format!(
                "--http {addr} is not a loopback address: anyone who reaches it could run agents in this project, so --no-token is refused there; give CADRE_MCP_TOKEN (or --token), which clients then send as `Authorization: Bearer TOKEN`"
            )));
        }
        if given.is_some() {
            return Err(CliError::config(
                "--no-token and a token (--token or CADRE_MCP_TOKEN) say opposite things; give one",
            ));
        }
        return Ok(None);
    }
    if given.is_some() {
        return Ok(given);
    }
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|e| CliError::config(format!("cannot make a random token: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    errln!("cadre: token: {token} (clients send `Authorization: Bearer TOKEN`; set CADRE_MCP_TOKEN to choose it, or --no-token on loopback for none)");
    Ok(Some(token))
}

/// Lets a request through only with `Authorization: Bearer TOKEN`.
async fn require_token(
    State(expected): State<Arc<String>>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    if given.is_some_and(|given| same(given.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "cadre mcp serve: this server needs `Authorization: Bearer TOKEN` (its --token)",
    )
        .into_response()
}

/// The credentials of an `Authorization` value of the `Bearer` scheme, whose name is
/// case-insensitive (RFC 7235).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("Bearer")
        .then(|| credentials.trim())
}

/// Whether `given` is `expected`, in a time that does not tell how much of it matched.
fn same(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    given.ct_eq(expected).into()
}
