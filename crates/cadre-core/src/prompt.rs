//! System prompts: an agent type's own prompt plus what every agent of its kind must know.

use crate::spec::AgentSpec;

/// Appended to every subagent's prompt: the one fact it must not forget.
pub const SUBAGENT_NOTE: &str = "You are a subagent. Only your final message reaches the agent \
that called you; it sees none of your tool calls or intermediate text. Make that final message \
complete and self-contained.";

/// Appended to every agent's prompt: where it works. The folder's absolute path is left out
/// on purpose, so the prompt (and a recorded run) is the same on every machine.
pub const ENVIRONMENT_NOTE: &str = "You work in the project folder, which is your working \
directory: give paths relative to it. Tools cannot reach files outside it.";

/// The system prompt of an agent of type `spec`.
pub fn system_prompt(spec: &AgentSpec, is_subagent: bool) -> String {
    let mut prompt = spec.prompt.trim_end().to_owned();
    prompt.push_str("\n\n");
    prompt.push_str(ENVIRONMENT_NOTE);
    if spec.read_only {
        prompt.push_str(" You are read-only: you must not change any file, and the sandbox refuses writes outside your private temporary folder ($TMPDIR).");
    }
    if is_subagent {
        prompt.push_str("\n\n");
        prompt.push_str(SUBAGENT_NOTE);
    }
    prompt
}
