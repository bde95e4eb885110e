//! Acts on the workspace.
//!
//! The [`Tool`] trait every tool implements, the [`Workspace`] every file tool is confined
//! to, the six built-in tools (`bash`, `read_file`, `write_file`, `edit_file`, `list_files`,
//! `grep`), output capping, the Landlock sandbox `bash` runs in, the shared state that
//! keeps concurrent writers honest, and the git worktree an isolated agent works in.
//! Nothing here knows about models or agents.

pub mod builtin;
pub mod context;
pub mod error;
pub mod git;
pub mod output;
pub mod sandbox;
pub mod trace_context;
pub mod typed;
pub mod workspace;
pub mod worktree;

pub use builtin::{
    builtin_tools, canonical_tool_name, claude_code_name, is_model_credential, is_secret_env,
    is_telemetry_env, telemetry_env_names, BUILTIN_TOOL_NAMES, CLAUDE_CODE_NAMES,
};
pub use context::{FileStamp, FileTracker, PathLocks, ToolContext, ToolLimits};
pub use error::ToolError;
pub use output::cap_output;
pub use sandbox::{
    landlock_status, Enforcement, Sandbox, SandboxError, SandboxMode, SandboxPolicy, SandboxStatus,
    ScratchDir,
};
/// The schema derive typed tools use, at the version cadre uses.
pub use schemars;
pub use typed::{input_schema_for, Json, TypedTool};
pub use workspace::Workspace;
pub use worktree::{agent_slug, Finished, Worktree, WorktreeError};

use async_trait::async_trait;
use serde_json::Value;

/// What a tool hands back to the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Whether this reports a failure (sent as `is_error: true`).
    pub is_error: bool,
    /// Images sent after the text (an MCP server's screenshot, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ToolImage>,
}

/// An image in a tool's result, sent to the model as an image block.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolImage {
    /// Its MIME type, such as `image/png`.
    pub media_type: String,
    /// Its bytes, base64-encoded.
    pub data: String,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// A failed result the model should read and act on.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            images: Vec::new(),
        }
    }
}

/// What a resumed run may do with a tool call that a crash cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rerun {
    /// Run it again: it only reads, so running it twice does no harm.
    Repeat,
    /// Never run it again: it may have changed something, so the model is told it was
    /// interrupted and checks for itself.
    Never,
    /// Call it again: it keeps steps of its own (a subagent) and picks up where it was, so
    /// it is never kept as one step of its caller.
    Resumes,
}

/// Something an agent can do.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model sees.
    fn name(&self) -> &str;
    /// What it does and when to use it, for the model.
    fn description(&self) -> String;
    /// JSON Schema of its input (an object schema).
    fn input_schema(&self) -> Value;
    /// Whether it never changes anything, so it may run beside other calls.
    fn is_read_only(&self) -> bool;
    /// Whether it may run at the same time as other calls of the same turn (default: when
    /// read-only). A tool that only delegates, like `Task`, says yes although it is not.
    fn runs_concurrently(&self) -> bool {
        self.is_read_only()
    }
    /// What a resumed run may do with a call of it that a crash cut short (default: repeat
    /// it when read-only, else report it as interrupted).
    fn rerun(&self) -> Rerun {
        if self.is_read_only() {
            Rerun::Repeat
        } else {
            Rerun::Never
        }
    }
    /// What a resumed run may do with this call, of `input` by the agent of `ctx`, if a
    /// crash cut it short: the tool's answer for the call (default: [`Tool::rerun`]). Only a
    /// tool the sandbox confines may answer [`Rerun::Repeat`] for a changing call because
    /// the agent is read-only, and only where the sandbox leaves it no way to change anything.
    fn rerun_call(&self, input: &Value, ctx: &ToolContext) -> Rerun {
        let _ = (input, ctx);
        self.rerun()
    }
    /// Runs it. Errors become `is_error` results for the model; they never crash the agent.
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// Decodes a tool's input, turning serde's complaint into a message the model can act on.
///
/// The input must be a JSON object: serde would otherwise take an array as the fields in
/// order (`["ls"]` as `{"command": "ls"}`) and answer anything else with "expected struct
/// Input", which tells the model nothing.
pub fn parse_input<T: serde::de::DeserializeOwned>(
    tool: &str,
    input: Value,
) -> Result<T, ToolError> {
    let kind = match &input {
        Value::Object(_) => {
            // The path names the field that was wrong (`path: invalid type: …`).
            return serde_path_to_error::deserialize(input).map_err(|e| {
                let at = e.path().to_string();
                let inner = e.into_inner();
                match at.as_str() {
                    "." | "" => ToolError::invalid_input(format!("{tool}: {inner}")),
                    _ => ToolError::invalid_input(format!("{tool}: field `{at}`: {inner}")),
                }
            });
        }
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    Err(ToolError::invalid_input(format!(
        "{tool}: the input must be a JSON object of named fields, not {kind}"
    )))
}
