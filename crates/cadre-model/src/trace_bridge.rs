//! What cadre's spans need of an OpenTelemetry layer beyond `tracing`'s fields: an attribute
//! that is a list of strings (`gen_ai.response.finish_reasons`), a link to a span named by a
//! W3C `traceparent` (a team message's sender), and a parent named by one (a delegated
//! call's caller, on another machine).
//!
//! The library crates know no OpenTelemetry: the program that installs an exporter says
//! here how these are done (with the `otel` feature, [`otel::install`] does it for
//! `tracing-opentelemetry`). With nothing installed each is skipped, at the cost of one
//! check, and a list falls back to a plain field (see [`record_strings`]).

use std::sync::OnceLock;
use tracing::Span;

/// How a program's OpenTelemetry layer does what `tracing` fields cannot.
#[derive(Debug, Clone, Copy)]
pub struct Bridge {
    /// Sets the attribute `key` of a span to a list of strings.
    pub strings: fn(&Span, &'static str, &[&str]),
    /// Adds to a span a link to the span a W3C `traceparent` names.
    pub link: fn(&Span, &str),
    /// Makes the span a W3C `traceparent` names the parent of a span not yet entered.
    pub parent: fn(&Span, &str),
}

/// The bridge a program installed, if any.
static BRIDGE: OnceLock<Bridge> = OnceLock::new();

/// Installs how spans get what `tracing` fields cannot give; the first call wins.
pub fn set_bridge(bridge: Bridge) {
    let _ = BRIDGE.set(bridge);
}

/// Sets `key` of `span` to `values` as a list of strings and returns true; false (nothing
/// done) when no bridge is installed, so the caller can record a plain field instead.
pub fn record_strings(span: &Span, key: &'static str, values: &[&str]) -> bool {
    match BRIDGE.get() {
        Some(bridge) => {
            (bridge.strings)(span, key, values);
            true
        }
        None => false,
    }
}

/// Links `span` to the span `traceparent` names, when a bridge is installed.
pub fn link(span: &Span, traceparent: &str) {
    if let Some(bridge) = BRIDGE.get() {
        (bridge.link)(span, traceparent);
    }
}

/// Makes the span `traceparent` names the parent of `span` (not yet entered), when a
/// bridge is installed.
pub fn set_parent(span: &Span, traceparent: &str) {
    if let Some(bridge) = BRIDGE.get() {
        (bridge.parent)(span, traceparent);
    }
}

/// The span context a W3C `traceparent` (`00-{trace id}-{span id}-{flags}`) names, in
/// parts: its trace id, span id and flags; `None` when it is not one.
pub fn parse_traceparent(traceparent: &str) -> Option<(u128, u64, u8)> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if version != "00" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let span = u64::from_str_radix(span, 16).ok().filter(|s| *s != 0)?;
    Some((trace, span, u8::from_str_radix(flags, 16).ok()?))
}

/// The bridge for `tracing-opentelemetry`'s layer.
#[cfg(feature = "otel")]
pub mod otel {
    use super::{parse_traceparent, set_bridge, Bridge};
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry::{Array, StringValue, Value};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    /// Installs the bridge for a `tracing-opentelemetry` layer (a program's exporter, or
    /// a test's in-memory one).
    pub fn install() {
        set_bridge(Bridge {
            strings,
            link,
            parent,
        });
    }

    /// The current span's W3C `traceparent`, when it is being traced: what a program hands
    /// `cadre_tools::trace_context::set_traceparent_source`.
    pub fn current_traceparent() -> Option<String> {
        let cx = Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
    }

    /// A remote span's context from its `traceparent`.
    fn remote(traceparent: &str) -> Option<SpanContext> {
        let (trace, span, flags) = parse_traceparent(traceparent)?;
        Some(SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::new(flags),
            true,
            TraceState::default(),
        ))
    }

    fn strings(span: &Span, key: &'static str, values: &[&str]) {
        let values: Vec<StringValue> = values.iter().map(|v| (*v).to_owned().into()).collect();
        span.set_attribute(key, Value::Array(Array::String(values)));
    }

    fn link(span: &Span, traceparent: &str) {
        if let Some(cx) = remote(traceparent) {
            span.add_link(cx);
        }
    }

    fn parent(span: &Span, traceparent: &str) {
        if let Some(cx) = remote(traceparent) {
            // Refused only once the span has started: then it keeps its own parent.
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(cx));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_in_parts_and_a_bad_one_refused() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_traceparent(tp),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1))
        );
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }
}
