//! What the `OTEL_*` variables ask of traces and of the content spans carry.

use cadre_core::semconv::RecordContent;

/// What content spans carry, from the variables `var` gives.
pub(super) fn content_from(var: impl Fn(&str) -> Option<String>) -> RecordContent {
    let on = |name: &str| var(name).is_some_and(|v| is_true(&v));
    let max_bytes = var("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(RecordContent::DEFAULT_MAX_BYTES);
    RecordContent {
        prompts: on("OTEL_LOG_USER_PROMPTS"),
        tool_details: on("OTEL_LOG_TOOL_DETAILS"),
        max_bytes,
    }
}

/// Whether a variable's value says yes (`1`, `true`, `yes`, `on`).
pub(super) fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// How OTLP is spoken to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) enum Protocol {
    /// OTLP/HTTP with protobuf bodies (the default).
    HttpProtobuf,
    /// OTLP/HTTP with JSON bodies.
    HttpJson,
    /// OTLP/gRPC.
    Grpc,
}

/// What the settings ask of one signal (traces or metrics).
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) enum Wanted {
    /// Nothing is exported.
    Off,
    /// The signal goes out over OTLP.
    Export(Protocol),
    /// Export was asked for in a way this build cannot do; the reason.
    Unsupported(String),
}

/// One kind of telemetry, as the `OTEL_*` variables name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) enum Signal {
    /// Spans.
    Traces,
    /// Histograms, counters and gauges.
    Metrics,
}

impl Signal {
    /// `TRACES` or `METRICS`, as in `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
    pub(super) fn upper(self) -> &'static str {
        match self {
            Self::Traces => "TRACES",
            Self::Metrics => "METRICS",
        }
    }

    /// The path an OTLP/HTTP collector takes the signal at (`v1/traces`).
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub(super) fn http_path(self) -> &'static str {
        match self {
            Self::Traces => "v1/traces",
            Self::Metrics => "v1/metrics",
        }
    }
}

/// What the variables `var` gives ask of traces.
#[cfg(test)]
fn wanted(var: impl Fn(&str) -> Option<String>) -> Wanted {
    wanted_signal(Signal::Traces, var)
}

/// What the variables `var` gives ask of `signal`. Traces go out when an endpoint is set
/// or `OTEL_TRACES_EXPORTER=otlp`; metrics only with `OTEL_METRICS_EXPORTER=otlp` (as
/// Claude Code does); nothing with `OTEL_SDK_DISABLED=true`.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) fn wanted_signal(signal: Signal, var: impl Fn(&str) -> Option<String>) -> Wanted {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| is_true(&v)) {
        return Wanted::Off;
    }
    let upper = signal.upper();
    let asked = match set(&format!("OTEL_{upper}_EXPORTER")) {
        Some(exporter) => exporter.trim().eq_ignore_ascii_case("otlp"),
        None if signal == Signal::Traces => {
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
                || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        }
        None => false,
    };
    if !asked {
        return Wanted::Off;
    }
    let protocol = set(&format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL"))
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    match protocol.trim() {
        "http/protobuf" => Wanted::Export(Protocol::HttpProtobuf),
        "http/json" => Wanted::Export(Protocol::HttpJson),
        "grpc" => Wanted::Export(Protocol::Grpc),
        other => Wanted::Unsupported(format!(
            "the OTLP protocol {other:?} is not one of http/protobuf, http/json and grpc"
        )),
    }
}

/// Where `signal` goes: `OTEL_EXPORTER_OTLP_{SIGNAL}_ENDPOINT` as it is, else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (with the signal's path for OTLP/HTTP), else the
/// specification's default on localhost; `None` when no variable names one.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) fn endpoint(
    signal: Signal,
    protocol: Protocol,
    var: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if let Some(own) = set(&format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.upper())) {
        return Some(own.trim().to_owned());
    }
    let base = set("OTEL_EXPORTER_OTLP_ENDPOINT")?;
    let base = base.trim();
    Some(match protocol {
        Protocol::Grpc => base.to_owned(),
        _ => format!("{}/{}", base.trim_end_matches('/'), signal.http_path()),
    })
}

/// The `key=value,…` pairs of a variable like `OTEL_EXPORTER_OTLP_HEADERS`, each part
/// percent-decoded as the specification says; a part without `=` is skipped.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) fn pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k.trim()), decode(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// `text` with each `%XX` turned into its byte (left as written when not valid UTF-8).
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map_or_else(|_| text.to_owned(), |t| t.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn exported_only_when_asked_and_not_disabled() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(wanted(vars(&[])), Wanted::Off);
        let proto = Wanted::Export(Protocol::HttpProtobuf);
        assert_eq!(wanted(vars(&[endpoint])), proto);
        assert_eq!(
            wanted(vars(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://x/v1/traces"
            )])),
            proto
        );
        assert_eq!(wanted(vars(&[("OTEL_TRACES_EXPORTER", "otlp")])), proto);
        assert_eq!(
            wanted(vars(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")])),
            Wanted::Off
        );
        assert_eq!(
            wanted(vars(&[endpoint, ("OTEL_SDK_DISABLED", "true")])),
            Wanted::Off
        );
        assert_eq!(
            wanted(vars(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
            ])),
            Wanted::Export(Protocol::HttpJson)
        );
        assert_eq!(
            wanted(vars(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Wanted::Export(Protocol::Grpc)
        );
        assert!(matches!(
            wanted(vars(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")])),
            Wanted::Unsupported(_)
        ));
    }

    #[test]
    fn metrics_only_when_their_exporter_is_otlp() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let metrics = |pairs: &[(&str, &str)]| wanted_signal(Signal::Metrics, vars(pairs));
        assert_eq!(metrics(&[endpoint]), Wanted::Off);
        let on = ("OTEL_METRICS_EXPORTER", "otlp");
        assert_eq!(
            metrics(&[endpoint, on]),
            Wanted::Export(Protocol::HttpProtobuf)
        );
        assert_eq!(
            metrics(&[on, ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")]),
            Wanted::Export(Protocol::Grpc)
        );
        assert_eq!(metrics(&[on, ("OTEL_SDK_DISABLED", "true")]), Wanted::Off);
    }

    #[test]
    fn endpoints_take_the_signals_path_over_http_only() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/");
        let http = Protocol::HttpProtobuf;
        assert_eq!(endpoint(Signal::Traces, http, vars(&[])), None);
        assert_eq!(
            endpoint(Signal::Metrics, http, vars(&[base])).as_deref(),
            Some("http://c:4318/v1/metrics")
        );
        assert_eq!(
            endpoint(Signal::Traces, Protocol::Grpc, vars(&[base])).as_deref(),
            Some("http://c:4318/")
        );
        let own = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t/x");
        assert_eq!(
            endpoint(Signal::Traces, http, vars(&[base, own])).as_deref(),
            Some("http://t/x")
        );
    }

    #[test]
    fn header_pairs_are_split_and_decoded() {
        assert_eq!(
            pairs("api-key=a%20b, x=1,broken"),
            [("api-key".into(), "a b".into()), ("x".into(), "1".into())]
        );
    }

    #[test]
    fn content_only_when_asked() {
        assert_eq!(content_from(vars(&[])), RecordContent::default());
        let asked = content_from(vars(&[
            ("OTEL_LOG_USER_PROMPTS", "1"),
            ("OTEL_LOG_TOOL_DETAILS", "true"),
            ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100"),
        ]));
        assert!(asked.prompts && asked.tool_details);
        assert_eq!(asked.max_bytes, 100);
        assert!(!content_from(vars(&[("OTEL_LOG_USER_PROMPTS", "0")])).prompts);
    }
}
