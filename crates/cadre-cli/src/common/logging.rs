//! Log output on stderr, for every binary of the package.

use cadre_core::semconv::TARGET as GEN_AI;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Logs to stderr: warnings by default, more with `-v`/`-vv`, errors only with `-q`; `RUST_LOG` overrides.
/// With `plain` and no `-v`, a warning reads as cadre's other messages (`cadre: warning: …`);
/// otherwise each line carries its time and level, as a log does. With `export`, cadre's
/// spans and metrics go out as the telemetry settings say.
pub fn init_logging(verbose: u8, quiet: bool, plain: bool, export: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        // Retries and a cassette's cut-off last line are already told in plain words; the
        // log repeats them only with -v.
        (false, 0) => "warn,cadre_model::retry=error,cadre_model::cassette=error",
        (false, 1) => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        // A closed stderr must not turn a log line into a panic.
        .log_internal_errors(false);
    let fmt = if plain && verbose == 0 {
        fmt.event_format(Plain).boxed()
    } else {
        fmt.boxed()
    };
    // The log's filter is its own: the trace exporter beside it takes cadre's spans
    // whatever the log shows. The GenAI spans stay out of the log unless `RUST_LOG` names
    // their target: each would be built and its fields (a prompt, when recorded) written
    // on every line logged inside it.
    // A directive of the filter itself, not a second filter beside it: the filter's level
    // hint stays what it says, which `tracing::enabled!` (the display's "is it -v?") reads.
    let spans_wanted = std::env::var("RUST_LOG").is_ok_and(|v| v.contains(GEN_AI));
    let filter = match format!("{GEN_AI}=off").parse() {
        Ok(off) if !spans_wanted => filter.add_directive(off),
        _ => filter,
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    #[cfg(feature = "otel")]
    if export {
        let (telemetry, why) = super::telemetry::layer();
        registry.with(telemetry).init();
        if let Some(why) = why {
            tracing::warn!("{why}");
        }
        return;
    }
    let _ = export;
    registry.init();
}

/// `cadre: warning: main: what happened`: a log line in the words of cadre's other messages.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            _ => "note",
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let agent = fields.agent.map(|a| a + ": ").unwrap_or_default();
        writeln!(
            writer,
            "cadre: {level}: {agent}{}{}",
            fields.message, fields.rest
        )
    }
}

/// An event's message, the agent it names, and its other fields as ` (name=value, …)`.
#[derive(Default)]
struct Fields {
    message: String,
    agent: Option<String>,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "agent" => self.agent = Some(format!("{value:?}")),
            name => {
                let sep = if self.rest.is_empty() { " (" } else { ", " };
                self.rest.truncate(self.rest.len().saturating_sub(1));
                let _ = write!(self.rest, "{sep}{name}={value:?})");
            }
        }
    }
}
