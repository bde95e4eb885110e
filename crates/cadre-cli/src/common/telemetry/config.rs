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
fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// What the environment asks of traces.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) enum Wanted {
    /// Nothing is exported.
    Off,
    /// Spans go out over OTLP/HTTP, as protobuf or JSON.
    Export {
        /// JSON rather than protobuf.
        json: bool,
    },
    /// Export was asked for in a way this build cannot do; the reason.
    Unsupported(String),
}

/// What the variables `var` gives ask of traces.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) fn wanted(var: impl Fn(&str) -> Option<String>) -> Wanted {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| is_true(&v)) {
        return Wanted::Off;
    }
    let asked = match set("OTEL_TRACES_EXPORTER") {
        Some(exporter) => exporter.trim().eq_ignore_ascii_case("otlp"),
        None => {
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
                || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        }
    };
    if !asked {
        return Wanted::Off;
    }
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    match protocol.trim() {
        "http/protobuf" => Wanted::Export { json: false },
        "http/json" => Wanted::Export { json: true },
        other => Wanted::Unsupported(format!(
            "the OTLP protocol {other:?} is not built in; use http/protobuf or http/json"
        )),
    }
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
        assert_eq!(wanted(vars(&[endpoint])), Wanted::Export { json: false });
        assert_eq!(
            wanted(vars(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://x/v1/traces"
            )])),
            Wanted::Export { json: false }
        );
        assert_eq!(
            wanted(vars(&[("OTEL_TRACES_EXPORTER", "otlp")])),
            Wanted::Export { json: false }
        );
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
            Wanted::Export { json: true }
        );
        assert!(matches!(
            wanted(vars(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Wanted::Unsupported(_)
        ));
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
