//! What a person sees: streamed answer text, a live line for the running tool, and the
//! closing usage table; or JSON for programs.

use crate::args::OutputFormat;
use cadre_core::{AgentOutcome, Event};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Renders events as they arrive.
pub struct Display {
    format: OutputFormat,
    quiet: bool,
    spinner: Option<ProgressBar>,
    /// Whether the last thing printed to stdout ended a line.
    at_line_start: bool,
}

impl Display {
    /// A display for `format`; `quiet` keeps only the answer.
    pub fn new(format: OutputFormat, quiet: bool) -> Self {
        let live = format == OutputFormat::Text && !quiet && std::io::stderr().is_terminal();
        let spinner = live.then(|| {
            let pb = ProgressBar::new_spinner();
            pb.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            pb.enable_steady_tick(Duration::from_millis(100));
            pb.set_message("thinking");
            pb
        });
        Self {
            format,
            quiet,
            spinner,
            at_line_start: true,
        }
    }

    /// Shows one event.
    pub fn event(&mut self, event: &Event) {
        match self.format {
            OutputFormat::Json => {}
            OutputFormat::StreamJson => print_json_line(&serde_json::to_value(event)),
            OutputFormat::Text if self.quiet => {}
            OutputFormat::Text => self.text_event(event),
        }
    }

    fn text_event(&mut self, event: &Event) {
        match event {
            Event::Text { delta, .. } => {
                self.at_line_start = delta.ends_with('\n');
                let write = || {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(delta.as_bytes());
                    let _ = out.flush();
                };
                match &self.spinner {
                    Some(pb) => pb.suspend(write),
                    None => write(),
                }
            }
            Event::ToolCall { name, input, .. } => {
                self.status(&format!("{name} {}", describe_input(input)));
            }
            Event::ToolResult {
                name,
                is_error: true,
                summary,
                ..
            } => {
                self.status(&format!("{name} failed: {summary}"));
            }
            Event::Retrying {
                attempt,
                wait_ms,
                reason,
                ..
            } => {
                self.status(&format!(
                    "retry {attempt} in {:.1}s: {reason}",
                    *wait_ms as f64 / 1000.0
                ));
            }
            Event::Turn { turn, .. } if *turn > 1 => self.status("thinking"),
            _ => {}
        }
    }

    /// Updates the live line, or logs a plain line when stderr is not a terminal.
    fn status(&mut self, line: &str) {
        match &self.spinner {
            Some(pb) => pb.set_message(line.to_owned()),
            None => {
                if !self.at_line_start {
                    println!();
                    self.at_line_start = true;
                }
                eprintln!("· {line}");
            }
        }
    }

    /// Prints the end of the run: the answer where it was not streamed, and usage.
    pub fn finish(&mut self, outcome: &AgentOutcome, model: &str, elapsed: Duration) {
        if let Some(pb) = self.spinner.take() {
            pb.finish_and_clear();
        }
        match self.format {
            OutputFormat::Json => print_json_line(&Ok(result_json(outcome, model, elapsed))),
            OutputFormat::StreamJson => {
                let mut v = result_json(outcome, model, elapsed);
                v["event"] = "result".into();
                print_json_line(&Ok(v));
            }
            OutputFormat::Text => {
                if self.quiet {
                    println!("{}", outcome.text.trim_end());
                } else {
                    if !self.at_line_start {
                        println!();
                    }
                    if !outcome.stop.is_done() {
                        eprintln!("cadre: {}", outcome.stop);
                    }
                    eprintln!("{}", usage_table(outcome, elapsed));
                }
            }
        }
    }
}

fn print_json_line(v: &Result<serde_json::Value, serde_json::Error>) {
    if let Ok(v) = v {
        println!("{v}");
    }
}

/// The one-object result printed by `--output-format json`.
pub fn result_json(outcome: &AgentOutcome, model: &str, elapsed: Duration) -> serde_json::Value {
    serde_json::json!({
        "answer": outcome.text,
        "stop": outcome.stop.label(),
        "stop_detail": outcome.stop.to_string(),
        "model": model,
        "turns": outcome.turns,
        "tool_calls": outcome.tool_calls,
        "usage": outcome.usage,
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    })
}

/// A one-line description of a tool input for the live line.
fn describe_input(input: &serde_json::Value) -> String {
    let pick = ["command", "path", "pattern", "description"]
        .iter()
        .find_map(|k| input.get(*k).and_then(|v| v.as_str()));
    let s = pick.map(str::to_owned).unwrap_or_else(|| input.to_string());
    let line = s.lines().next().unwrap_or_default();
    match line.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_owned(),
    }
}

/// Token counts in a short human form: 950, 12.4k, 3.1M.
pub fn human_tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn usage_table(outcome: &AgentOutcome, elapsed: Duration) -> String {
    let u = &outcome.usage;
    let input = u.total_input();
    let cached = (u.cache_read_input_tokens * 100)
        .checked_div(input)
        .unwrap_or(0);
    let secs = elapsed.as_secs();
    format!(
        "\n{:<10} {:>5} {:>5} {:>15} {:>7} {:>6}  {}\n{:<10} {:>5} {:>5} {:>15} {:>7} {:>6}  {}",
        "agent",
        "turns",
        "tools",
        "input (cached)",
        "output",
        "time",
        "outcome",
        "main",
        outcome.turns,
        outcome.tool_calls,
        format!("{} ({cached}%)", human_tokens(input)),
        human_tokens(u.output_tokens),
        format!("{}:{:02}", secs / 60, secs % 60),
        outcome.stop.label(),
    )
}
