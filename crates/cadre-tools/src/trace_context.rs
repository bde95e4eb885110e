//! The W3C trace context handed to the processes cadre starts (`bash`, hooks, stdio MCP
//! servers) as `TRACEPARENT`, so their own spans join the run's trace.
//!
//! The library crates know no OpenTelemetry: the program that installs a trace exporter
//! (the `cadre` binary) says here how to read the current span's context, and every place
//! that starts a process asks [`traceparent`]. With no source set, nothing is added.

use std::sync::OnceLock;

/// The environment variable a child process reads its parent trace context from.
pub const TRACEPARENT: &str = "TRACEPARENT";

/// How the current span's `traceparent` is read, once a program has said.
static SOURCE: OnceLock<fn() -> Option<String>> = OnceLock::new();

/// Sets how the current span's W3C `traceparent` (`00-{trace}-{span}-{flags}`) is read;
/// the first call wins.
pub fn set_traceparent_source(source: fn() -> Option<String>) {
    let _ = SOURCE.set(source);
}

/// The current span's `traceparent`, when a source is set and a span is being traced.
pub fn traceparent() -> Option<String> {
    SOURCE.get().and_then(|source| source())
}
