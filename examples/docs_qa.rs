//! Questions answered from a project's docs folder only.
//!
//! `cargo run -p cadre-examples --example docs_qa -- "QUESTION"` — offline from its
//! cassette (which holds the default question), or live with ANTHROPIC_API_KEY.

use cadre_examples::{cassette, docs_qa, model, sample_project};

/// The question the shipped cassette answers.
const QUESTION: &str = "Where does todo store its items, and can I change the location?";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let question = std::env::args().nth(1).unwrap_or_else(|| QUESTION.into());
    let model = model::from_env_or_cassette(&cassette("docs_qa"))?;
    let outcome = docs_qa::ask(model, &sample_project().join("docs"), &question).await?;
    println!("{}", outcome.text);
    eprintln!(
        "({}, {} turns, {} tool calls)",
        outcome.stop, outcome.turns, outcome.tool_calls
    );
    Ok(())
}
