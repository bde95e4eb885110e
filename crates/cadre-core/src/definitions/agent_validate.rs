//! The checks of an agent type no parser makes: its name, description, prompt, model,
//! limits and tool names.

use crate::definitions::problem::{check_name, locate, Problem, Report};
use crate::definitions::spec::{valid_model, AgentSpec, CompactAt, LISTED_DESCRIPTION_CHARS};
use crate::definitions::tools::is_mcp_name;
use std::path::Path;

impl AgentSpec {
    /// Checks the fields a parser cannot: name, description, prompt, model and tools.
    /// `known_tool` says whether a tool name exists. A tool it does not know (and that is
    /// no MCP tool) and an unusual name or long description are warnings.
    pub fn validate(
        &self,
        file: &Path,
        text: &str,
        known_tool: &dyn Fn(&str) -> bool,
    ) -> Vec<Problem> {
        let mut problems = Vec::new();
        let at = |key: &str, needle: Option<&str>| locate(text, key, needle);
        let mut report = Report {
            file,
            at: &at,
            problems: &mut problems,
        };
        check_texts(self, &mut report);
        check_model_and_limits(self, &mut report);
        check_tool_names(self, known_tool, &mut report);
        problems
    }
}

/// Checks its name, description and prompt.
fn check_texts(spec: &AgentSpec, report: &mut Report) {
    match check_name(&spec.name) {
        Err(msg) => report.push(false, "name", Some(&spec.name), msg),
        Ok(Some(msg)) => report.push(true, "name", Some(&spec.name), msg),
        Ok(None) => {}
    }
    if spec.description.trim().is_empty() {
        report.push(
            false,
            "description",
            None,
            "missing description: say what this agent is for, so a parent can choose it".into(),
        );
    }
    let chars = spec.description.trim().chars().count();
    if chars > LISTED_DESCRIPTION_CHARS {
        report.push(true, "description", None, format!(
            "description is {chars} characters; it is shortened to {LISTED_DESCRIPTION_CHARS} where it is listed to a parent"
        ));
    }
    if spec.prompt.trim().is_empty() {
        report.push(
            false,
            "prompt",
            None,
            "missing prompt: the agent's system prompt is required".into(),
        );
    }
}

/// Checks its model, its `compact_at`, its `limits` and its `max_turns`.
fn check_model_and_limits(spec: &AgentSpec, report: &mut Report) {
    if !valid_model(&spec.model) {
        report.push(false, "model", Some(&spec.model), format!(
            "unknown model {:?}: expected inherit, opus, sonnet, haiku or a full model id such as claude-sonnet-5-5",
            spec.model
        ));
    }
    if let Some(CompactAt::Tokens(n)) = spec.compact_at {
        if n < cadre_model::MIN_COMPACT_AT {
            report.push(
                true,
                "compact_at",
                None,
                format!("compact_at {n} is below the API's minimum of 50000; 50000 is used"),
            );
        }
    }
    for zero in spec.limits.zeros() {
        report.push(
            false,
            "limits",
            Some(zero),
            format!("limits.{zero} must be above 0 (leave it out for no limit)"),
        );
    }
    if spec.max_turns == 0 {
        report.push(
            false,
            "max_turns",
            None,
            "max_turns must be at least 1".into(),
        );
    }
}

/// Warns of each name in `tools` and `disallowed_tools` that is no tool `known_tool` knows
/// and no MCP tool.
fn check_tool_names(spec: &AgentSpec, known_tool: &dyn Fn(&str) -> bool, report: &mut Report) {
    for (key, list) in [
        ("tools", &spec.tools),
        ("disallowed_tools", &spec.disallowed_tools),
    ] {
        for tool in list {
            if tool != "*" && !is_mcp_name(tool) && !known_tool(tool) {
                report.push(
                    true,
                    key,
                    Some(tool),
                    format!("unknown tool {tool:?} in {key}"),
                );
            }
        }
    }
}
