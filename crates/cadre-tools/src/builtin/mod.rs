//! The six built-in tools and the names they answer to.

mod bash;
mod edit_file;
mod file_io;
mod grep;
mod list_files;
mod read_file;
mod walk;
mod write_file;

pub use bash::{
    is_model_credential, is_secret_env, is_telemetry_env, telemetry_env_names, BashInput, BashTool,
};
pub use edit_file::{EditFileInput, EditFileTool};
pub use grep::{GrepInput, GrepTool};
pub use list_files::{ListFilesInput, ListFilesTool};
pub use read_file::{ReadFileInput, ReadFileTool};
pub use write_file::{WriteFileInput, WriteFileTool};

use crate::Tool;
use std::sync::Arc;

/// The names of the built-in tools, as the model sees them.
pub const BUILTIN_TOOL_NAMES: [&str; 6] = [
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "grep",
];

/// One instance of every built-in tool, in [`BUILTIN_TOOL_NAMES`] order.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(BashTool),
        Arc::new(ReadFileTool),
        Arc::new(WriteFileTool),
        Arc::new(EditFileTool),
        Arc::new(ListFilesTool),
        Arc::new(GrepTool),
    ]
}

/// Claude Code's names for the built-in tools, as (Claude Code, cadre), each tool's current
/// name before its older ones (`MultiEdit`, `LS`).
pub const CLAUDE_CODE_NAMES: [(&str, &str); 8] = [
    ("Bash", "bash"),
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "edit_file"),
    ("Glob", "list_files"),
    ("LS", "list_files"),
    ("Grep", "grep"),
];

/// The cadre name for a built-in tool name or a Claude Code alias (`Read` → `read_file`).
pub fn canonical_tool_name(name: &str) -> Option<&'static str> {
    CLAUDE_CODE_NAMES
        .iter()
        .find(|(claude, _)| *claude == name)
        .map(|(_, cadre)| *cadre)
        .or_else(|| BUILTIN_TOOL_NAMES.iter().copied().find(|n| *n == name))
}

/// Claude Code's current name for the built-in tool `name` (`read_file` → `Read`), if it
/// has a twin there.
pub fn claude_code_name(name: &str) -> Option<&'static str> {
    CLAUDE_CODE_NAMES
        .iter()
        .find(|(_, cadre)| *cadre == name)
        .map(|(claude, _)| *claude)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_tools() {
        let names: Vec<String> = builtin_tools()
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        assert_eq!(names, BUILTIN_TOOL_NAMES);
    }

    #[test]
    fn aliases_map() {
        assert_eq!(canonical_tool_name("Bash"), Some("bash"));
        assert_eq!(canonical_tool_name("MultiEdit"), Some("edit_file"));
        assert_eq!(canonical_tool_name("LS"), Some("list_files"));
        assert_eq!(canonical_tool_name("Glob"), Some("list_files"));
        assert_eq!(canonical_tool_name("grep"), Some("grep"));
        assert_eq!(canonical_tool_name("read_file"), Some("read_file"));
        assert_eq!(canonical_tool_name("WebFetch"), None);
        assert_eq!(canonical_tool_name("BASH"), None);
    }

    #[test]
    fn schemas_are_strict_objects() {
        for tool in builtin_tools() {
            let schema = tool.input_schema();
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert_eq!(schema["additionalProperties"], false, "{}", tool.name());
            let required = schema["required"].as_array().unwrap();
            for field in required {
                let field = field.as_str().unwrap();
                assert!(
                    schema["properties"].get(field).is_some(),
                    "{} requires undeclared {field}",
                    tool.name()
                );
            }
            assert!(tool.description().len() > 200, "{}", tool.name());
        }
    }
}
