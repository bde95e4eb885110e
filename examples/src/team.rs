//! A team: a lead, a coder and a reviewer over the sample project. The lead starts the coder
//! as a named member; the coder starts the reviewer as one; the reviewer sends the coder its
//! findings by message, the lead asks the reviewer to check the fix, and the reviewer tells
//! the coder it approves — each message journaled, delivered once, between turns.

use cadre_core::{AgentOutcome, AgentSpec, Event, EventHandler, Mode, Orchestrator, RunSummary};
use cadre_model::Model;
use std::path::Path;
use std::sync::Arc;

/// The task the team example gives the lead.
pub const TASK: &str = "Add a `--due YYYY-MM-DD` option to `todo add`, stored with each \
item, and have the change reviewed before you answer.";

/// The coder: makes the change, and may start a reviewer (it lists `Task`).
pub fn coder() -> AgentSpec {
    AgentSpec::builder("coder")
        .description("Implements one change in the project and gets it reviewed by a reviewer member it starts.")
        .mode(Mode::Subagent)
        .tools([
            "read_file",
            "edit_file",
            "write_file",
            "list_files",
            "grep",
            "bash",
            "Task",
        ])
        .subagent_types(["explore"])
        .prompt("You implement the change you are given, then start a reviewer (Task with subagent_type explore and a name) and fix what it reports. Answer with what you changed.")
        .build()
}

/// Runs the shipped `lead` on `task` in `project`, printing the team's messages.
pub async fn run(
    model: Arc<dyn Model>,
    project: &Path,
    task: &str,
    verbose: bool,
) -> anyhow::Result<(AgentOutcome, RunSummary)> {
    let events: EventHandler = Arc::new(move |e| {
        if !verbose {
            return;
        }
        match e {
            Event::Started {
                agent, description, ..
            } => eprintln!("· {agent} started: {description}"),
            Event::Message {
                from,
                to,
                seq,
                text,
                notice,
                ..
            } => {
                let first = text.lines().next().unwrap_or_default();
                let kind = if notice { "notice" } else { "message" };
                eprintln!("· {from} → {to} {kind} #{seq}: {first}");
            }
            Event::Finished {
                agent, stop, turns, ..
            } => eprintln!("· {agent} {} after {turns} turns", stop.label()),
            _ => {}
        }
    });
    let orchestrator = Orchestrator::builder()
        .model(model)
        .workspace(project)
        .agent(coder())
        .on_event_handler(events)
        .build()?;
    Ok(orchestrator.run("lead", task).await?)
}
