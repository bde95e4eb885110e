//! What a workflow run shows and writes besides its run folder: `--output` (the result lines
//! again, or CSV), the live block (done / running / queued / failed, tokens, ETA), the
//! per-item events of stream-json, and the closing table summed per type.

use crate::args::OutputFormat;
use crate::common::display::{clock, human_tokens};
use cadre_core::workflow::{ItemResult, ItemStart};
use cadre_core::{RunSummary, Totals};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `--output FILE`: each result line again, as JSON Lines or, for a `.csv` file, CSV.
pub enum OutputFile {
    /// JSON Lines, as results.jsonl.
    Jsonl(File),
    /// CSV with a header row.
    Csv(Box<csv::Writer<File>>),
}

/// The CSV columns.
const CSV_HEADER: [&str; 8] = [
    "key",
    "outcome",
    "output",
    "error",
    "agent",
    "input_tokens",
    "output_tokens",
    "attempts",
];

impl OutputFile {
    /// Creates `path` (replacing it): CSV when it ends in `.csv`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = File::create(path)?;
        let csv = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        if !csv {
            return Ok(Self::Jsonl(file));
        }
        let mut writer = csv::Writer::from_writer(file);
        writer
            .write_record(CSV_HEADER)
            .map_err(std::io::Error::other)?;
        Ok(Self::Csv(Box::new(writer)))
    }

    /// Writes `r`'s line.
    pub fn write(&mut self, r: &ItemResult) -> std::io::Result<()> {
        match self {
            Self::Jsonl(file) => {
                let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
                line.push(b'\n');
                file.write_all(&line)
            }
            Self::Csv(writer) => {
                let output = match &r.output {
                    serde_json::Value::String(text) => text.clone(),
                    serde_json::Value::Null => String::new(),
                    other => other.to_string(),
                };
                let record = [
                    r.key.clone(),
                    r.outcome.clone(),
                    output,
                    r.error.clone().unwrap_or_default(),
                    r.agent
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    r.usage.input_tokens.to_string(),
                    r.usage.output_tokens.to_string(),
                    r.attempts.to_string(),
                ];
                writer
                    .write_record(&record)
                    .map_err(std::io::Error::other)?;
                writer.flush()
            }
        }
    }
}

/// How far the items are, as their results come in.
#[derive(Debug, Default)]
pub struct Progress {
    /// Items with a result.
    pub done: u64,
    /// Of those, failed ones.
    pub failed: u64,
    /// Of those, completed ones.
    pub completed: u64,
    /// Of those, ones that ran in this part of the run (for the ETA).
    pub ran_now: u64,
}

/// What each result is told to: `--output`, stream-json's per-item events, the progress.
pub struct ResultTeller {
    /// `--output`, if given.
    pub output: Option<OutputFile>,
    /// Whether each item is told on stdout as a stream-json event.
    pub stream: bool,
    /// The progress the live block shows.
    pub progress: Arc<Mutex<Progress>>,
}

impl ResultTeller {
    /// Tells of one item's result.
    pub fn tell(&mut self, r: &ItemResult) {
        if let Some(out) = &mut self.output {
            if let Err(e) = out.write(r) {
                errln!("cadre: warning: cannot write --output: {e}");
                self.output = None;
            }
        }
        if self.stream {
            let mut event = serde_json::to_value(r).unwrap_or_default();
            event["event"] = "item".into();
            outln!("{event}");
        }
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        p.done += 1;
        if r.is_failed() {
            p.failed += 1;
        }
        if r.is_completed() {
            p.completed += 1;
        }
        // Not by its usage: an item finished before a resume carries its earlier usage.
        if r.ran_now {
            p.ran_now += 1;
        }
    }
}

/// Tells on stdout, as a stream-json `{"event":"item_started",…}`, that an item's agent
/// starts: its key, call, attempt and agent path; or as `{"event":"item_retried",…}`
/// (with `failed`: why) that an attempt failed and the item is tried again.
pub fn tell_start(start: &ItemStart) {
    let mut event = serde_json::to_value(start).unwrap_or_default();
    event["event"] = match start.failed {
        Some(_) => "item_retried".into(),
        None => "item_started".into(),
    };
    outln!("{event}");
}

/// The live block of a workflow run: one line, redrawn (nothing when stderr is no terminal).
pub struct LiveBlock {
    bar: Option<ProgressBar>,
    name: String,
    total: u64,
}

impl LiveBlock {
    /// The block for the workflow `name` of `total` items, shown when `format` is text and
    /// not `quiet`.
    pub fn new(name: &str, total: u64, format: OutputFormat, quiet: bool) -> Self {
        let bar = (format == OutputFormat::Text && !quiet).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        });
        Self {
            bar,
            name: name.to_owned(),
            total,
        }
    }

    /// Redraws it: `running` items at work, `tokens` used, `elapsed` so far; reports the
    /// queue to the metrics.
    pub fn tick(&self, p: &Progress, running: u64, tokens: u64, elapsed: Duration) {
        let queued = self.total.saturating_sub(p.done + running);
        // The queue's gauge, when metrics are exported, whether or not the block is drawn.
        cadre_core::semconv::report_items_queued(&self.name, queued);
        let Some(bar) = &self.bar else {
            return;
        };
        let eta = match p.ran_now {
            0 => "–".to_owned(),
            n => {
                let per_item = elapsed.as_millis() as f64 / n as f64;
                clock((per_item * (queued + running) as f64) as u64)
            }
        };
        bar.set_message(format!(
            "workflow {} · {} done · {running} running · {queued} queued · {} failed · {} tokens · ETA {eta}",
            self.name,
            p.done,
            p.failed,
            human_tokens(tokens)
        ));
    }

    /// Says `line` on stderr above the block.
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| errln!("{line}")),
            None => errln!("{line}"),
        }
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the block away.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The closing table: per agent type, its agents, turns, tool calls and tokens, then the
/// total and the run's time.
pub fn type_table(summary: &RunSummary) -> String {
    let row = |name: &str, t: &Totals| {
        format!(
            "{name:<20} {:>7} {:>7} {:>7} {:>9} {:>9}",
            t.agents,
            t.turns,
            t.tool_calls,
            human_tokens(t.usage.input_tokens + t.usage.cache_read_input_tokens),
            human_tokens(t.usage.output_tokens)
        )
    };
    let mut lines = vec![format!(
        "{:<20} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "type", "agents", "turns", "tools", "input", "output"
    )];
    for (kind, t) in &summary.usage.by_type {
        lines.push(row(kind, t));
    }
    lines.push(row("total", &summary.usage.total));
    lines.push(format!("time {}", clock(summary.elapsed_ms)));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result line as results.jsonl has it, with its tokens.
    fn result(key: &str, tokens: u64) -> ItemResult {
        serde_json::from_value(serde_json::json!({
            "key": key,
            "outcome": "completed",
            "output": "x",
            "usage": {"input_tokens": tokens, "output_tokens": 0},
        }))
        .unwrap()
    }

    #[test]
    fn items_finished_before_a_resume_do_not_count_for_the_eta() {
        let progress = Arc::new(Mutex::new(Progress::default()));
        let mut teller = ResultTeller {
            output: None,
            stream: false,
            progress: progress.clone(),
        };
        // Found in the journal: its earlier usage, but nothing ran now.
        teller.tell(&result("a", 100));
        let p = progress.lock().unwrap();
        assert_eq!((p.done, p.completed, p.ran_now), (1, 1, 0));
    }
}
