//! Delegation through the orchestrator: explore and plan subagents at once, then a coder.
//!
//! `cargo run -p cadre-examples --example delegation` — offline from its cassette, or live
//! with ANTHROPIC_API_KEY. It works on a fresh copy of `examples/sample-project`.

use cadre_examples::{cassette, delegation, model, sample_project};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let model = model::from_env_or_cassette(&cassette("delegation"))?;
    let project = delegation::fresh_copy(&sample_project())?;
    let (outcome, summary) = delegation::run(model, project.path(), delegation::TASK, true).await?;
    println!("{}\n", outcome.text);
    for a in &summary.usage.agents {
        println!(
            "{:<22} {:<8} {:>2} turns {:>3} tools {:>7} tokens  {}",
            a.path,
            a.agent_type,
            a.turns,
            a.tool_calls,
            a.usage.total(),
            a.stop.label()
        );
    }
    println!(
        "changed cli.py:\n{}",
        std::fs::read_to_string(project.path().join("src/todo/cli.py"))?
    );
    Ok(())
}
