//! Reading a run folder's transcript as the tests check it: `transcript.jsonl` holds every
//! agent's lines, each naming its agent.

use std::path::Path;

/// The lines of the run transcript in the run folder `run` that belong to the agent at
/// `agent` (`main/explore#1`), in order; none when the file is missing.
pub fn lines_of(run: &Path, agent: &str) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(run.join("transcript.jsonl")) else {
        return Vec::new();
    };
    text.lines()
        .filter(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .is_ok_and(|v| v["agent"].as_str() == Some(agent))
        })
        .map(str::to_owned)
        .collect()
}

/// [`lines_of`] as one text, each line ended.
pub fn text_of(run: &Path, agent: &str) -> String {
    lines_of(run, agent).into_iter().map(|l| l + "\n").collect()
}
