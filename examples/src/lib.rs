//! Runnable examples of cadre used as a library.
//!
//! Each example is a function here (so the tests can run it offline) and a thin `main` in
//! `examples/*.rs`. With `ANTHROPIC_API_KEY` set they talk to the real API; without it they
//! replay the cassette shipped in `examples/cassettes/`. See `examples/README.md`.

pub mod delegation;
pub mod docs_qa;
pub mod model;
pub mod scripted;
pub mod team;
pub mod weather;

use std::path::PathBuf;

/// The task of the README's offline quick start (`cadre run --replay examples/cassettes/quickstart.jsonl`).
pub const QUICKSTART_TASK: &str =
    "Explain how todo stores its items, and plan how to add due dates.";

/// The folder of this crate (`examples/`), wherever the repository is.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cassette of the example called `name`.
pub fn cassette(name: &str) -> PathBuf {
    examples_dir()
        .join("cassettes")
        .join(format!("{name}.jsonl"))
}

/// The sample project the examples work on.
pub fn sample_project() -> PathBuf {
    examples_dir().join("sample-project")
}
