//! What to wear: an agent with one custom tool.
//!
//! `cargo run -p cadre-examples --example weather -- Paris` — offline from its cassette,
//! or against the real API when ANTHROPIC_API_KEY is set.

use cadre_examples::{cassette, model, weather};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let city = std::env::args().nth(1).unwrap_or_else(|| "Paris".into());
    let model = model::from_env_or_cassette(&cassette("weather"))?;
    let outcome = weather::what_to_wear(model, &city).await?;
    println!("{}", outcome.text);
    eprintln!(
        "({}, {} turns, {} tool calls)",
        outcome.stop, outcome.turns, outcome.tool_calls
    );
    Ok(())
}
