//! The line an event gets on stderr when no live block shows the run: a subagent started
//! or finished, a tool called or failed, a retry, a compaction, a team's message or task.

use super::text::{clock, human_tokens, truncate};
use cadre_core::{describe_call, AgentPath, Event};

/// The log line of `event`, or `None` for an event that gets none; `primary` is the
/// primary agent's path (its start and end are the run's own).
pub(super) fn log_line(event: &Event, primary: &AgentPath) -> Option<String> {
    step_line(event, primary).or_else(|| team_line(event))
}

/// The line of an agent's step: a subagent started or finished, a tool called or failed, a
/// compaction, a retry.
fn step_line(event: &Event, primary: &AgentPath) -> Option<String> {
    let line = match event {
        Event::Started {
            agent,
            description,
            background,
            ..
        } if *agent != *primary => {
            let bg = if *background {
                " in the background"
            } else {
                ""
            };
            format!("{agent} started{bg}: {description}")
        }
        Event::ToolCall {
            agent, name, input, ..
        } => {
            format!("{agent} {}", describe_call(name, input))
        }
        Event::ToolResult {
            agent,
            name,
            is_error: true,
            summary,
            ..
        } => {
            // A tool's own error already starts with "NAME failed: ".
            let why = summary
                .strip_prefix(name.as_str())
                .and_then(|s| s.strip_prefix(" failed: "))
                .unwrap_or(summary);
            format!("{agent} {name} failed: {why}")
        }
        Event::Compacted { agent, by, usage } => format!(
            "{agent} compacted its conversation (summarised by {by}, {} tok)",
            human_tokens(usage.total())
        ),
        Event::Retrying {
            agent,
            attempt,
            wait_ms,
            reason,
        } => format!(
            "{agent} retry {attempt} in {:.1}s: {reason}",
            *wait_ms as f64 / 1000.0
        ),
        Event::Finished {
            agent,
            stop,
            turns,
            usage,
            elapsed_ms,
            ..
        } if *agent != *primary => {
            format!(
                "{agent} {} · {turns} turns · {} tok · {}",
                stop.label(),
                human_tokens(usage.total()),
                clock(*elapsed_ms)
            )
        }
        _ => return None,
    };
    Some(line)
}

/// The line of a team's message or task change.
fn team_line(event: &Event) -> Option<String> {
    let line = match event {
        // cadre's own idle notices would only repeat the members' answers.
        Event::Message {
            from,
            to,
            seq,
            text,
            notice: false,
            ..
        } => format!(
            "{from} → {to} #{seq}: {}",
            truncate(
                text.lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .unwrap_or_default(),
                60
            )
        ),
        Event::TaskChanged {
            id,
            subject,
            status,
            owner,
            ..
        } => {
            let owner = owner
                .as_deref()
                .map(|o| format!(" ({o})"))
                .unwrap_or_default();
            format!("task #{id} {status}{owner}: {}", truncate(subject, 60))
        }
        _ => return None,
    };
    Some(line)
}

/// The line a hook run gets on stderr: `main hook PreToolUse [Bash] guard.sh: blocked: why
/// (12 ms)`. Without `-v`, only for a hook that changed what happens (blocked, denied, asked,
/// stopped, cancelled): one that went as expected needs no line, and a failing one is
/// already a warning of the run's.
pub(super) fn hook_line(event: &Event) -> Option<String> {
    let Event::Hook {
        agent,
        hook_event,
        command,
        matcher,
        duration_ms,
        outcome,
        ..
    } = event
    else {
        return None;
    };
    let notable = !outcome.is_failure()
        && !matches!(
            outcome,
            cadre_core::HookOutcome::Ok { .. } | cadre_core::HookOutcome::Allowed { .. }
        );
    if !notable && !tracing::enabled!(tracing::Level::INFO) {
        return None;
    }
    let matcher = matcher
        .as_deref()
        .map(|m| format!(" [{m}]"))
        .unwrap_or_default();
    let took = if *duration_ms < 1000 {
        format!("{duration_ms} ms")
    } else {
        format!("{:.1} s", *duration_ms as f64 / 1000.0)
    };
    // Its stderr may span lines: the line stays one.
    let outcome = outcome
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    Some(format!(
        "{agent} hook {hook_event}{matcher} {}: {} ({took})",
        truncate(command, 60),
        truncate(&outcome, 200)
    ))
}
