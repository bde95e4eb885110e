//! Delegation: the primary agent sends explore and plan subagents at once, then a code
//! subagent, through the orchestrator — cadre as a library in a few lines.

use cadre_core::{AgentOutcome, Event, EventHandler, Orchestrator, RunSummary};
use cadre_model::Model;
use std::path::Path;
use std::sync::Arc;

/// The task the delegation example gives the primary agent.
pub const TASK: &str = "Add a `--priority` option (low, normal, high; default normal) to \
`todo add`, stored with each item. Research the CLI and the storage first, then plan, then \
implement it.";

/// Runs the primary agent `main` on `task` in `project`, printing subagent events.
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
            Event::ToolCall {
                agent, name, input, ..
            } => eprintln!("· {agent} {}", cadre_core::describe_call(&name, &input)),
            Event::Finished {
                agent, stop, turns, ..
            } => eprintln!("· {agent} {} after {turns} turns", stop.label()),
            _ => {}
        }
    });
    let orchestrator = Orchestrator::builder()
        .model(model)
        .workspace(project)
        .on_event_handler(events)
        .build()?;
    Ok(orchestrator.run("main", task).await?)
}

/// Copies the sample project into a fresh temporary folder, so the code subagent's edits
/// never touch the repository (and every run starts from the same files).
pub fn fresh_copy(from: &Path) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    copy_tree(from, dir.path())?;
    Ok(dir)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
