//! Shared test kit for cadre's integration tests.
//!
//! [`MockServer`] is a local stand-in for the Anthropic Messages API (`POST /v1/messages`)
//! that answers with scripted [`Reply`]s, streamed as real SSE when the request asks for it.
//! It records every request ([`Captured`]), checks each against the API's request rules
//! ([`protocol::check_request`]) and can inject faults: HTTP errors, in-stream errors,
//! truncated, dropped or stalled streams, delays, and a barrier that holds requests until
//! enough run concurrently. The same replies are served in the OpenAI Chat Completions
//! dialect on `POST /v1/chat/completions` ([`openai`]); `GET /v1/models` and `GET /props`
//! answer what a test sets ([`MockServer::set_models`], [`MockServer::set_props`]).
//!
//! It compacts long conversations as the API does ([`compaction`]): past a request's
//! `compact_20260112` trigger it answers with a signed `compaction` block first, and it
//! checks that every block comes back unaltered. It checks `output_config` (effort, and an
//! answer schema in the subset structured outputs accept: [`output_config`]), and on request
//! counts prompt-cache reads and writes as the API does ([`cache`],
//! [`MockServer::simulate_prompt_cache`]).
//!
//! [`mcp`] holds a real MCP server (the `cadre-test-mcp` binary, over stdio or streamable
//! HTTP) for testing MCP clients: [`mcp_server_binary`] finds it, [`McpHttpServer`] runs it.
//!
//! [`restate`] runs a Restate server and an HAProxy in front of worker replicas for the
//! engine's tests; a [`Gate`] ([`MockServer::gate`]) holds model requests until the test
//! lets them go, and [`Captured::completed`] tells whether a reply's body fully went out.
//! [`prereq`] finds the outside programs some tests need, for those tests and for the build
//! scripts that mark them ignored where a program is missing. [`bench`] holds what the fleet
//! benchmarks measure and the line they print it in; [`hooks`], hook scripts as Claude Code
//! users write them for the hook tests; [`transcript`], an agent's lines of a run's
//! transcript.
//!
//! ```no_run
//! # async fn demo() {
//! use cadre_testkit::{Match, MockServer, Reply};
//! let server = MockServer::start().await;
//! server.route(Match::Any, vec![Reply::text("hello")]);
//! // point the client at server.uri() and run it; when `server` is dropped it fails the
//! // test on any protocol violation or scripted reply nobody requested.
//! # }
//! ```

pub mod bench;
pub mod cache;
pub mod compaction;
pub mod git;
pub mod hooks;
pub mod mcp;
pub mod openai;
pub mod output_config;
pub mod prereq;
pub mod protocol;
pub mod reply;
pub mod restate;
pub mod server;
pub mod sse;
pub mod transcript;

pub use mcp::{mcp_server_binary, McpHttpServer};
pub use protocol::check_request;
pub use reply::{Block, Reply, Usage};
pub use server::{content_text, Captured, Gate, InfoRequest, Match, MockServer};

/// A reqwest client builder for tests. cadre builds reqwest without a crypto provider of its
/// own, so the ring provider is installed process-wide first (harmless when one already is).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// A reqwest client for tests with reqwest's defaults (see [`http_client_builder`]).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
