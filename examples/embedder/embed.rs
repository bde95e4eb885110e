//! cadre embedded with one dependency on cadre (`cadre-core`) beside tokio: an agent type
//! made in code with the builder, the run's events read as they stream, the answer and its
//! cost at the end. The README's and `docs/library.md`'s example, as a program.
//!
//! `ANTHROPIC_API_KEY=… cargo run -p cadre-embedder --example embed` (it talks to the API).

use cadre_core::{AgentSpec, AnthropicConfig, Event, Mode, Orchestrator};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An agent type defined in code: a read-only reviewer the primary agent may delegate to.
    let reviewer = AgentSpec::builder("reviewer")
        .description("Reviews a change for bugs; read-only.")
        .mode(Mode::Subagent)
        .tools(["read_file", "grep"])
        .read_only(true)
        .prompt("You review code. Report real bugs only, with file and line.")
        .build();
    let orchestrator = Orchestrator::builder()
        .anthropic(AnthropicConfig::from_env()?)
        .workspace(".")
        .agent(reviewer)
        .build()?;
    // Your own UI on the run's events: one line per tool call (no `futures` needed).
    let mut events = orchestrator.events();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let Event::ToolCall { agent, name, .. } = event {
                eprintln!("{agent}: {name}");
            }
        }
    });
    let (outcome, summary) = orchestrator.run("main", "Review the last commit").await?;
    println!(
        "{}\n{} tokens",
        outcome.text,
        summary.usage.total.usage.total()
    );
    Ok(())
}
