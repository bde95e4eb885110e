//! Which hooks run for a tool: matchers are written for Claude Code's tool names (`Bash`,
//! `Edit|Write`, `mcp__server__.*`), and match cadre's equivalents as well as cadre's own
//! names.

use crate::definitions::tools::{SKILL_TOOL, TASK_OUTPUT_TOOL, TASK_STOP_TOOL, TASK_TOOL};
use cadre_tools::CLAUDE_CODE_NAMES;
use regex::Regex;

/// A hook's matcher, ready to test names against.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    /// No matcher (or `""`, `*`): every name.
    All,
    /// Plain names separated by `|` (`Edit|Write`): those exactly, as Claude Code does.
    Names(Vec<String>),
    /// Any other text is a regular expression, found anywhere in the name.
    Regex(Regex),
}

impl Matcher {
    /// The matcher written as `written`; `None` when it is not a regular expression.
    pub(crate) fn new(written: Option<&str>) -> Option<Self> {
        let Some(m) = written
            .map(str::trim)
            .filter(|m| !m.is_empty() && *m != "*")
        else {
            return Some(Self::All);
        };
        if m.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            return Some(Self::Names(m.split('|').map(str::to_owned).collect()));
        }
        Regex::new(m).ok().map(Self::Regex)
    }

    /// Whether any of `names` (a tool's names, or an agent's type) matches.
    pub(crate) fn matches(&self, names: &[&str]) -> bool {
        match self {
            Self::All => true,
            Self::Names(list) => list.iter().any(|l| names.contains(&l.as_str())),
            Self::Regex(re) => names.iter().any(|n| re.is_match(n)),
        }
    }
}

/// Every name a matcher may use for the cadre tool `tool`: its own, and Claude Code's
/// current and older names for it (`Edit`, `MultiEdit`; `Agent` for `Task`).
pub(crate) fn names_of(tool: &str) -> ([&str; 3], usize) {
    let aliases = CLAUDE_CODE_NAMES
        .iter()
        .filter(|(_, cadre)| *cadre == tool)
        .map(|(claude, _)| *claude);
    let agent = (tool == TASK_TOOL).then_some("Agent");
    let mut names = [tool, "", ""];
    let mut n = 1;
    for alias in aliases.chain(agent).take(names.len() - 1) {
        names[n] = alias;
        n += 1;
    }
    (names, n)
}

/// The tools (by cadre's names, as permission rules write them) a `PreToolUse` hook with
/// matcher `written` guards: what must be refused when the hook cannot run, so no call it
/// would have checked runs unchecked. A matcher that is not a regular expression guards
/// every tool. MCP tools are not named: a run knows its servers only once they start.
pub fn guarded_tools(written: Option<&str>) -> Vec<&'static str> {
    let matcher = Matcher::new(written).unwrap_or(Matcher::All);
    cadre_tools::BUILTIN_TOOL_NAMES
        .iter()
        .chain(&[TASK_TOOL, SKILL_TOOL, TASK_OUTPUT_TOOL, TASK_STOP_TOOL])
        .copied()
        .filter(|tool| {
            let (names, n) = names_of(tool);
            matcher.matches(&names[..n])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_tools_are_those_the_matcher_names() {
        assert_eq!(guarded_tools(Some("Bash")), ["bash"]);
        assert_eq!(
            guarded_tools(Some("Edit|Write")),
            ["write_file", "edit_file"]
        );
        assert_eq!(guarded_tools(None).len(), 10);
        assert_eq!(guarded_tools(Some("(")).len(), 10);
        assert!(guarded_tools(Some("mcp__.*")).is_empty());
    }

    fn matches(matcher: &str, tool: &str) -> bool {
        let (names, n) = names_of(tool);
        Matcher::new(Some(matcher)).unwrap().matches(&names[..n])
    }

    #[test]
    fn claude_code_matchers_match_cadre_tools() {
        assert!(matches("Bash", "bash"));
        assert!(matches("bash", "bash"));
        assert!(matches("Edit|Write", "edit_file"));
        assert!(matches("Edit|Write", "write_file"));
        assert!(!matches("Edit|Write", "read_file"));
        assert!(matches("Read", "read_file"));
        assert!(matches("Grep", "grep"));
        assert!(matches("Glob", "list_files"));
        assert!(matches("MultiEdit", "edit_file"));
        assert!(matches("mcp__github__.*", "mcp__github__search"));
        assert!(!matches("mcp__github__.*", "mcp__gitlab__search"));
        assert!(matches("Notebook.*|Wri.*", "write_file"));
        assert!(matches("*", "anything"));
        assert!(matches("", "anything"));
        assert!(matches("Task", "Task"));
        assert!(matches("Agent", "Task"));
        // Plain names match whole names only, as in Claude Code.
        assert!(!matches("Edit", "MultiEditor"));
        assert!(!matches("Bas", "bash"));
    }

    #[test]
    fn a_bad_regular_expression_is_none() {
        assert!(Matcher::new(Some("(")).is_none());
        assert!(matches!(Matcher::new(None), Some(Matcher::All)));
    }
}
