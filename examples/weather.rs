//! What to wear: a custom typed tool and an agent type defined in code, with the run's
//! events shown as they stream.
//!
//! `cargo run -p cadre-examples --example weather -- Paris` — offline from its cassette,
//! or against the real API when ANTHROPIC_API_KEY is set.

use cadre_core::Event;
use cadre_examples::{cassette, model, weather};
use futures::StreamExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let city = std::env::args().nth(1).unwrap_or_else(|| "Paris".into());
    let model = model::from_env_or_cassette(&cassette("weather"))?;
    // The agent needs no files: its workspace is an empty temporary folder.
    let scratch = tempfile::tempdir()?;
    let orchestrator = weather::orchestrator(model, scratch.path())?;
    // Your own UI on the run's events: here, one line per tool call.
    let mut events = orchestrator.events();
    let shown = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let Event::ToolCall {
                agent, name, input, ..
            } = event
            {
                eprintln!("[{agent}] {name} {input}");
            }
        }
    });
    let outcome = weather::what_to_wear(&orchestrator, &city).await?;
    shown.await?;
    println!("{}", outcome.text);
    eprintln!(
        "({}, {} turns, {} tool calls)",
        outcome.stop, outcome.turns, outcome.tool_calls
    );
    Ok(())
}
