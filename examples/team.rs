//! A team through the orchestrator: a lead, a coder and a reviewer who message each other.
//!
//! `cargo run -p cadre-examples --example team` — offline from its cassette, or live with
//! ANTHROPIC_API_KEY. It works on a fresh copy of `examples/sample-project`.

use cadre_examples::{cassette, delegation, model, sample_project, team};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let model = model::from_env_or_cassette(&cassette("team"))?;
    let project = delegation::fresh_copy(&sample_project())?;
    let (outcome, summary) = team::run(model, project.path(), team::TASK, true).await?;
    println!("{}\n", outcome.text);
    for a in &summary.usage.agents {
        println!(
            "{:<26} {:<8} {:>2} turns {:>3} tools {:>7} tokens  {}",
            a.path,
            a.agent_type,
            a.turns,
            a.tool_calls,
            a.usage.total(),
            a.stop.label()
        );
    }
    Ok(())
}
