//! What a person sees: the primary agent's streamed answer, a live line per running
//! subagent, and the closing usage table; or JSON for programs.

mod event_line;
mod text;

pub use text::{
    clock, first_sentence, fit_lines, human_tokens, one_line, printable, shown_path, stdout_width,
    truncate,
};

use crate::args::OutputFormat;
use cadre_core::{AgentOutcome, AgentPath, Event, RosterEntry, RunSummary, StopKind, Totals};
use event_line::{hook_line, log_line};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Renders events as they arrive and the roster on each tick.
pub struct Display {
    format: OutputFormat,
    quiet: bool,
    /// The primary agent's path: its text is the answer, streamed to stdout.
    primary: AgentPath,
    /// The redrawn live block, when stderr is a terminal.
    live: Option<ProgressBar>,
    /// Whether the last thing printed to stdout ended a line.
    at_line_start: bool,
    /// Whether stdout is a terminal: only then does a log line on stderr end the answer's
    /// open line first (both show on one screen); a piped answer is never broken by one.
    stdout_tty: bool,
    /// Whether the primary agent started a new turn since its last text.
    new_turn: bool,
    /// Answer text not yet printed because its line has not ended (live mode only).
    pending: String,
    /// Whether the primary agent's current attempt has printed text (a retry repeats it).
    printed_this_turn: bool,
    /// Whether any of the answer was printed yet: a resumed or continued run starts at a
    /// later turn, and its first text needs no gap before it.
    printed_any: bool,
    header: String,
    /// Whether a question to the person holds the terminal; events wait in `queued`.
    paused: bool,
    queued: Vec<Event>,
    /// A team lead's answers: streamed once, not again each time the team wakes it.
    lead: LeadTurns,
}

/// What the display knows of a team lead's turns: once it has answered and waits for its
/// team, the turns its members' messages wake it for are not streamed as answers again;
/// the run's final answer is printed at the end if it differs from the one streamed.
#[derive(Default)]
struct LeadTurns {
    /// The text the primary agent streamed in its current turn.
    turn_text: String,
    /// Whether its current turn called a tool (then it was no answer).
    turn_had_tool: bool,
    /// Whether team messages were given to it since its current turn began.
    given: bool,
    /// The answer it streamed before its team woke it, once it did.
    answered: Option<String>,
}

impl LeadTurns {
    /// Notes `event`; true when it is primary text to hold back.
    fn hold(&mut self, event: &Event, primary: &AgentPath) -> bool {
        if event.agent() != primary {
            return false;
        }
        match event {
            // It answered and waits for its team.
            Event::Idle { .. } if self.answered.is_none() => {
                self.answered = Some(std::mem::take(&mut self.turn_text));
            }
            Event::Delivered { .. } => self.given = true,
            Event::ToolCall { .. } => self.turn_had_tool = true,
            Event::Turn { .. } => {
                // A turn of text alone, followed by messages and another turn: it had
                // answered, and the messages woke it (without waiting, so without `Idle`).
                let answer = !self.turn_had_tool && self.given && !self.turn_text.is_empty();
                if answer && self.answered.is_none() {
                    self.answered = Some(std::mem::take(&mut self.turn_text));
                }
                self.turn_text.clear();
                self.turn_had_tool = false;
                self.given = false;
            }
            Event::Text { delta, .. } => {
                if self.answered.is_some() {
                    return true;
                }
                self.turn_text.push_str(delta);
            }
            _ => {}
        }
        false
    }

    /// The final answer still to print: the run's answer, when the team woke the lead
    /// after it streamed another.
    fn unshown(&self, answer: &str) -> Option<String> {
        let streamed = self.answered.as_deref()?;
        let answer = answer.trim();
        (!answer.is_empty() && answer != streamed.trim()).then(|| answer.to_owned())
    }
}

impl Display {
    /// A display for `format`; `quiet` keeps only the answer.
    pub fn new(format: OutputFormat, quiet: bool, primary: &str, header: String) -> Self {
        let redraw = format == OutputFormat::Text && !quiet && std::io::stderr().is_terminal();
        let live = redraw.then(|| {
            let pb = ProgressBar::new_spinner();
            pb.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            pb.enable_steady_tick(Duration::from_millis(120));
            pb
        });
        Self {
            format,
            quiet,
            primary: AgentPath::primary(primary),
            live,
            at_line_start: true,
            stdout_tty: std::io::stdout().is_terminal(),
            new_turn: false,
            pending: String::new(),
            printed_this_turn: false,
            printed_any: false,
            header,
            paused: false,
            queued: Vec::new(),
            lead: LeadTurns::default(),
        }
    }

    /// Stops drawing while a question holds the terminal; returns the live block, to be
    /// hidden while the question is open.
    pub fn pause(&mut self) -> Option<ProgressBar> {
        // The model's text before the call it asks about is read before the question.
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending) + "\n";
            match &self.live {
                Some(pb) => pb.suspend(|| write_stdout(&line)),
                None => write_stdout(&line),
            }
            self.at_line_start = true;
        }
        self.paused = true;
        self.live.clone()
    }

    /// Draws again, first what happened meanwhile.
    pub fn resume(&mut self) {
        self.paused = false;
        for event in std::mem::take(&mut self.queued) {
            self.event(&event);
        }
    }

    /// Shows a line of cadre's own (a signal received) on stderr, above the live block.
    pub fn note(&mut self, text: &str) {
        match self.live.as_ref().filter(|_| !self.paused) {
            // The terminal echoed `^C` inside the block, which is redrawn over it.
            Some(pb) => pb.suspend(|| errln!("{text}")),
            // Elsewhere the line may follow the echo or a partial line of the answer.
            None => errln!("\n{text}"),
        }
    }

    /// Shows one event.
    pub fn event(&mut self, event: &Event) {
        if self.paused {
            self.queued.push(event.clone());
            return;
        }
        match self.format {
            OutputFormat::Json => {}
            OutputFormat::StreamJson => {
                if let Ok(line) = serde_json::to_string(event) {
                    outln!("{line}");
                }
            }
            OutputFormat::Text if self.quiet => {}
            OutputFormat::Text => self.text_event(event),
        }
    }

    fn text_event(&mut self, event: &Event) {
        if self.lead.hold(event, &self.primary) {
            return;
        }
        self.end_pending_line_on_move(event);
        if let Event::Turn { agent, turn } = event {
            self.new_turn |= *agent == self.primary && *turn > 1 && self.printed_any;
            if *agent == self.primary {
                self.printed_this_turn = false;
            }
        }
        if let Event::Retrying { agent, .. } = event {
            if *agent == self.primary {
                self.note_restart();
            }
        }
        if let Event::Text { agent, delta } = event {
            if *agent == self.primary {
                self.stream_answer(delta);
            }
            return;
        }
        // A hook that blocked, refused or failed is always told; every hook run with -v.
        if let Event::Hook { .. } = event {
            if let Some(line) = hook_line(event) {
                if self.live.is_none() {
                    self.end_open_line();
                }
                self.tell(&line);
            }
            return;
        }
        if let Some(line) = self.failure_line(event) {
            self.tell(&line);
            return;
        }
        // With a live block the roster says it all; without one, each step is a log line.
        if self.live.is_some() {
            return;
        }
        if let Some(line) = log_line(event, &self.primary) {
            self.end_open_line();
            errln!("· {line}");
        }
    }

    /// The primary agent moved on (to its tools or next turn): shows its unfinished line.
    fn end_pending_line_on_move(&mut self, event: &Event) {
        if matches!(event, Event::ToolCall { .. } | Event::Turn { .. })
            && *event.agent() == self.primary
            && !self.pending.is_empty()
        {
            let line = std::mem::take(&mut self.pending) + "\n";
            if let Some(pb) = &self.live {
                pb.suspend(|| write_stdout(&line));
            }
            self.at_line_start = true;
        }
    }

    /// The primary agent's attempt is retried: the failed attempt's text is already out, so
    /// says that what follows replaces it.
    fn note_restart(&mut self) {
        if !std::mem::take(&mut self.printed_this_turn) {
            return;
        }
        let note = "\n[the connection broke; the answer starts again]\n";
        match &self.live {
            Some(pb) => {
                let text = std::mem::take(&mut self.pending) + note;
                pb.suspend(|| write_stdout(&text));
            }
            None => write_stdout(note),
        }
        self.at_line_start = true;
    }

    /// Streams a piece of the primary agent's answer to stdout.
    fn stream_answer(&mut self, delta: &str) {
        self.printed_this_turn = true;
        self.printed_any = true;
        // Text of a later turn starts a new paragraph.
        let gap = match (std::mem::take(&mut self.new_turn), self.at_line_start) {
            (true, false) => "\n\n",
            (true, true) => "\n",
            _ => "",
        };
        self.at_line_start = delta.ends_with('\n');
        match &self.live {
            // The live block redraws below the cursor: hand it whole lines only, keeping a
            // partial line until it ends (or the run does).
            Some(pb) => {
                self.pending.push_str(gap);
                self.pending.push_str(delta);
                if let Some(end) = self.pending.rfind('\n') {
                    let lines: String = self.pending.drain(..=end).collect();
                    pb.suspend(|| write_stdout(&lines));
                }
            }
            None => write_stdout(&format!("{gap}{delta}")),
        }
    }

    /// The line of a failure no other line tells of: a subagent that failed says why in
    /// full (its parent may only pass on a summary); a `Task` call that failed started no
    /// agent, so with a live block no row tells of it.
    fn failure_line(&self, event: &Event) -> Option<String> {
        match event {
            Event::Finished { agent, stop, .. }
                if *agent != self.primary
                    && matches!(stop, StopKind::ModelError(_) | StopKind::Other(_)) =>
            {
                Some(format!("{agent} failed: {stop}"))
            }
            Event::ToolResult {
                agent,
                name,
                is_error: true,
                summary,
                ..
            } if self.live.is_some() && name == "Task" => {
                Some(format!("{agent} Task failed: {summary}"))
            }
            _ => None,
        }
    }

    /// Tells `line` on stderr, above the live block when there is one.
    fn tell(&self, line: &str) {
        match &self.live {
            Some(pb) => pb.suspend(|| errln!("· {line}")),
            None => errln!("· {line}"),
        }
    }

    /// Ends the answer's open line on a terminal before a log line goes to stderr.
    fn end_open_line(&mut self) {
        if self.stdout_tty && !self.at_line_start {
            outln!();
            self.at_line_start = true;
        }
    }

    /// Redraws the live block from the roster (no-op unless stderr is a terminal).
    pub fn tick(&mut self, roster: &[RosterEntry], done: usize, tokens: u64, elapsed: Duration) {
        let Some(pb) = self.live.as_ref().filter(|_| !self.paused) else {
            return;
        };
        // Rows are cut to the terminal's width: a wrapped row would break the redraw. One
        // column is kept free (a full row moves some terminals' cursor on).
        let width = usize::from(console::Term::stderr().size().1).saturating_sub(1);
        let primary = &self.primary;
        let subagents: Vec<&RosterEntry> = roster.iter().filter(|e| e.path != *primary).collect();
        // Team members that answered and wait for a message are not running.
        let idle = subagents.iter().filter(|e| e.waiting).count();
        let waiting = if idle > 0 {
            format!(" · {idle} waiting")
        } else {
            String::new()
        };
        // The first row follows the spinner and its space.
        let mut text = truncate(
            &format!(
                "{} · {} running{waiting} · {done} done{:>10} tok · {}",
                self.header,
                subagents.len() - idle,
                human_tokens(tokens),
                clock(u64::try_from(elapsed.as_millis()).unwrap_or(0)),
            ),
            width.saturating_sub(2),
        );
        let main = roster.iter().find(|e| e.path == *primary);
        // In a team run the primary agent is a member too: its row says when it waits
        // for the team and what waits for it.
        let team_run = subagents.iter().any(|e| e.member.is_some());
        // The members' names make one column, so their states line up whatever the names.
        let name_width = subagents
            .iter()
            .filter_map(|e| e.member.as_deref())
            .map(|n| n.chars().count())
            .chain(main.map(|m| m.path.as_str().chars().count()))
            .max()
            .unwrap_or(0);
        if let Some(main) = main {
            if team_run {
                text.push('\n');
                text.push_str(&member_row(main, main.path.as_str(), width, name_width));
            } else if subagents.is_empty() {
                let doing = main.current_tool.as_deref().unwrap_or("thinking");
                let row = format!("  turn {}  {doing}", main.turn);
                text.push('\n');
                text.push_str(&truncate(&row, width));
            }
        }
        for e in subagents.iter().take(20) {
            text.push('\n');
            match &e.member {
                Some(member) => text.push_str(&member_row(e, member, width, name_width)),
                None => text.push_str(&subagent_row(e, width)),
            }
        }
        if subagents.len() > 20 {
            text.push_str(&format!("\n  … and {} more", subagents.len() - 20));
        }
        pb.set_message(text);
    }

    /// Prints the end of the run: the answer where it was not streamed, and usage;
    /// `run_dir` is the run's folder as shown to the person.
    pub fn finish(
        &mut self,
        outcome: &AgentOutcome,
        summary: &RunSummary,
        model: &str,
        run_dir: Option<&std::path::Path>,
    ) {
        // A question still open (the run was given up meanwhile) holds the live block:
        // it is let go, not cleared, so ending never waits for an answer.
        if self.paused {
            self.live = None;
        }
        self.resume();
        if let Some(pb) = self.live.take() {
            pb.finish_and_clear();
        }
        if !self.pending.is_empty() {
            write_stdout(&std::mem::take(&mut self.pending));
        }
        match self.format {
            OutputFormat::Json => outln!("{}", result_json(outcome, summary, model)),
            OutputFormat::StreamJson => {
                let mut v = result_json(outcome, summary, model);
                v["event"] = "result".into();
                outln!("{v}");
            }
            // A failed run has no answer: nothing, not an empty line.
            OutputFormat::Text if self.quiet => {
                let answer = outcome.text.trim_end();
                if !answer.is_empty() {
                    outln!("{answer}");
                }
            }
            OutputFormat::Text => {
                if let Some(answer) = self.lead.unshown(&outcome.text) {
                    let gap = if self.at_line_start { "\n" } else { "\n\n" };
                    write_stdout(&format!("{gap}{answer}"));
                    self.at_line_start = false;
                }
                if !self.at_line_start {
                    outln!();
                }
                if !outcome.stop.is_done() {
                    errln!("cadre: {}", outcome.stop);
                }
                errln!("\n{}", usage_table(summary));
                if let Some(dir) = run_dir {
                    errln!("transcripts: {}/", dir.display());
                }
            }
        }
    }
}

/// A subagent's row of the live block, cut to `width`:
/// `  reviewer    check the parser   turn 3   Read src/lib.rs   1.2k tok`.
fn subagent_row(e: &RosterEntry, width: usize) -> String {
    // A narrow terminal shortens the description first, then the tool: the turn and
    // the tokens always show. Fixed: the indent, the name, " turn NNN " and " NNNNNNN tok".
    let room = width.saturating_sub(2 + 12 + 10 + 12);
    let description_width = room.saturating_sub(31).clamp(room.min(8), 32);
    let tool_width = room.saturating_sub(description_width + 1).min(30);
    let name = e.path.name();
    // A background subagent is marked: its parent is not waiting for it.
    let description = if e.background {
        format!("[bg] {}", e.description)
    } else {
        e.description.clone()
    };
    let rest = format!(
        " {:<description_width$} turn {:<3} {:<tool_width$} {:>7} tok",
        truncate(&description, description_width),
        e.turn,
        truncate(e.current_tool.as_deref().unwrap_or("thinking"), tool_width),
        human_tokens(e.tokens),
    );
    // Cut before painting, so the colour codes do not count as width.
    let name = truncate(&format!("{name:<12}"), width.saturating_sub(2));
    let rest = truncate(&rest, width.saturating_sub(2 + name.chars().count()));
    // The live block exists only on a terminal, so colour codes are safe here.
    let name = paint(&name, e.color.as_deref());
    format!("  {name}{rest}")
}

/// One team member's row of the live block, cut to `width`, its name in a column
/// `name_width` wide (at most [`NAME_COLUMN`]):
/// `  beta (code) · waiting · 2 unread   turn 3   what it is doing   1.2k tok`.
fn member_row(e: &RosterEntry, name: &str, width: usize, name_width: usize) -> String {
    let mut state = format!(" ({}) · ", e.agent_type);
    state.push_str(if e.waiting { "waiting" } else { "working" });
    if e.unread > 0 {
        state.push_str(&format!(" · {} unread", e.unread));
    }
    // A waiting member does nothing: what it was last asked says more.
    let doing = if e.waiting {
        e.description.as_str()
    } else {
        e.current_tool.as_deref().unwrap_or("thinking")
    };
    let rest = format!(
        " turn {:<3} {:<30} {:>7} tok",
        e.turn,
        truncate(doing, 30),
        human_tokens(e.tokens),
    );
    // The name and its state come first and are cut last; the colour goes on the name
    // alone, after cutting, so its codes do not count as width.
    let room = width.saturating_sub(2);
    let column = name_width.clamp(1, NAME_COLUMN).min(room);
    let name = truncate(name, column);
    let pad = " ".repeat(column.saturating_sub(name.chars().count()));
    let used = name.chars().count() + pad.len();
    let state = truncate(&format!("{state:<30}"), room.saturating_sub(used));
    let rest = truncate(&rest, room.saturating_sub(used + state.chars().count()));
    format!("  {}{pad}{state}{rest}", paint(&name, e.color.as_deref()))
}

/// The widest a member name's column gets in the live block.
const NAME_COLUMN: usize = 24;

fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The one-object result printed by `--output-format json`.
fn result_json(outcome: &AgentOutcome, summary: &RunSummary, model: &str) -> serde_json::Value {
    serde_json::json!({
        "answer": outcome.text,
        // The same shape as in stream-json's events and summary.json.
        "stop": serde_json::to_value(&outcome.stop).unwrap_or_default(),
        "outcome": outcome.stop.outcome(),
        "stop_detail": outcome.stop.to_string(),
        "model": model,
        "turns": outcome.turns,
        "tool_calls": outcome.tool_calls,
        "usage": outcome.usage,
        "run_id": summary.run_id,
        "elapsed_ms": summary.elapsed_ms,
        "agents": summary.usage.agents,
        "by_type": summary.usage.by_type,
        "total": summary.usage.total,
    })
}

/// `text` in the ANSI colour named by an agent type's `color` (Claude Code's names);
/// unchanged for no colour or a name it does not know.
fn paint(text: &str, color: Option<&str>) -> String {
    let code = match color.map(str::to_ascii_lowercase).as_deref() {
        Some("red") => "31",
        Some("green") => "32",
        Some("yellow") => "33",
        Some("blue") => "34",
        Some("purple" | "magenta") => "35",
        Some("cyan") => "36",
        Some("orange") => "38;5;208",
        Some("pink") => "38;5;213",
        _ => return text.to_owned(),
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

fn input_column(t: &Totals) -> String {
    let input = t.usage.total_input();
    let cached = (t.usage.cache_read_input_tokens * 100)
        .checked_div(input)
        .unwrap_or(0);
    format!("{} ({cached}%)", human_tokens(input))
}

/// Compactions and their tokens: `2 · 61.0k`, or `-`.
fn compaction_column(t: &Totals) -> String {
    let c = t.usage.compaction;
    if c.count == 0 {
        "-".into()
    } else {
        format!("{} · {}", c.count, human_tokens(c.total()))
    }
}

/// The closing table: one row per agent, one per type when there are several, the total.
/// A `compacted` column (how many compactions, their tokens) appears when any agent had one.
pub fn usage_table(summary: &RunSummary) -> String {
    let report = &summary.usage;
    let compacted = report.total.usage.compaction.count > 0;
    let row = |name: &str, kind: &str, t: &Totals, time: &str, outcome: &str| {
        let extra = if compacted {
            format!(" {:>11}", compaction_column(t))
        } else {
            String::new()
        };
        format!(
            "{name:<16} {kind:<9} {:>5} {:>5} {:>15} {:>7}{extra} {time:>6}  {outcome}",
            t.turns,
            t.tool_calls,
            input_column(t),
            human_tokens(t.usage.output_tokens),
        )
    };
    let extra = if compacted {
        format!(" {:>11}", "compacted")
    } else {
        String::new()
    };
    let mut lines = vec![format!(
        "{:<16} {:<9} {:>5} {:>5} {:>15} {:>7}{extra} {:>6}  outcome",
        "agent", "type", "turns", "tools", "input (cached)", "output", "time"
    )];
    for a in &report.agents {
        // A member is known by its name.
        let name = a.member.clone().unwrap_or_else(|| a.path.name().to_owned());
        let t = Totals {
            agents: 1,
            turns: a.turns,
            tool_calls: a.tool_calls,
            usage: a.usage,
        };
        let mut outcome = a.stop.label().to_owned();
        // An engine run names the worker that ran the agent's last step.
        if let Some(worker) = &a.worker {
            outcome.push_str(&format!(" on {worker}"));
        }
        lines.push(row(
            &name,
            &a.agent_type,
            &t,
            &clock(a.elapsed_ms),
            &outcome,
        ));
    }
    if report.by_type.len() > 1 {
        for (kind, t) in &report.by_type {
            lines.push(row(&format!("{kind} ×{}", t.agents), "(type)", t, "", ""));
        }
    }
    lines.push(row(
        "total",
        "",
        &report.total,
        &clock(summary.elapsed_ms),
        "",
    ));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters_not_bytes() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdef", 4), "abc…");
        let cjk = "調査対象のファイルを全部読んで要約する作業です";
        let cut = truncate(cjk, 5);
        assert_eq!(cut.chars().count(), 5);
        assert!(cut.ends_with('…'));
    }

    fn entry(waiting: bool, unread: u32) -> RosterEntry {
        RosterEntry {
            path: "main/code#2".into(),
            agent_type: "code".into(),
            description: "Review the parser".into(),
            turn: 3,
            current_tool: Some("grep parse".into()),
            tokens: 1234,
            usage: Default::default(),
            color: None,
            background: false,
            member: Some("beta".into()),
            waiting,
            unread,
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn member_rows_name_type_state_and_unread_within_the_width() {
        let row = member_row(&entry(true, 2), "beta", 100, 4);
        assert!(
            row.starts_with("  beta (code) · waiting · 2 unread "),
            "{row:?}"
        );
        // Waiting, it shows what it was last asked; working, what it does.
        assert!(row.contains("Review the parser"), "{row:?}");
        let working = member_row(&entry(false, 0), "beta", 100, 4);
        assert!(
            working.starts_with("  beta (code) · working "),
            "{working:?}"
        );
        assert!(!working.contains("unread"), "{working:?}");
        assert!(working.contains("grep parse") && working.contains("1.2k tok"));
        for width in 0..140 {
            for e in [entry(true, 12), entry(false, 0)] {
                let row = member_row(&e, "a-rather-long-member-name_0123456789", width, 36);
                assert!(row.chars().count() <= width.max(2), "{width}: {row:?}");
            }
        }
    }

    #[test]
    fn member_rows_keep_their_columns_whatever_the_names() {
        let names = ["al", "bartholomew", "main"];
        let width = names.iter().map(|n| n.len()).max().unwrap();
        let at = |row: &str, what: &str| row.find(what).unwrap_or_else(|| panic!("{row:?}"));
        let rows: Vec<String> = names
            .iter()
            .map(|n| member_row(&entry(false, 0), n, 120, width))
            .collect();
        for row in &rows {
            assert_eq!(at(row, "(code)"), at(&rows[0], "(code)"), "{rows:#?}");
            assert_eq!(at(row, "turn"), at(&rows[0], "turn"), "{rows:#?}");
            assert_eq!(at(row, "tok"), at(&rows[0], "tok"), "{rows:#?}");
        }
    }

    #[test]
    fn agent_colours_are_claude_codes_names() {
        assert_eq!(paint("explore", Some("blue")), "\x1b[34mexplore\x1b[0m");
        assert_eq!(paint("a", Some("Purple")), paint("a", Some("magenta")));
        assert_eq!(paint("a", Some("orange")), "\x1b[38;5;208ma\x1b[0m");
        assert_eq!(paint("plain", None), "plain");
        assert_eq!(paint("plain", Some("chartreuse")), "plain");
    }
}
