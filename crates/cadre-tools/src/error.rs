//! Why a tool call failed.

use std::path::PathBuf;

/// A tool failure; the agent loop turns it into an `is_error` result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The input did not match the schema (missing field, wrong type, …).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A path resolved outside the workspace.
    ///
    /// The message names only the path the model gave, never the root: the root is this
    /// machine's absolute path, which must not reach the model or recorded cassettes.
    #[error("{path} is outside the workspace; only paths inside it may be used")]
    OutsideWorkspace {
        /// The path as the model gave it.
        path: String,
        /// The workspace root (for logs; not part of the message).
        root: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The call was refused for a stated reason (binary file, stale edit, sandbox, …).
    #[error("{0}")]
    Refused(String),
    /// The call ran out of time.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_workspace_message_hides_the_root() {
        let e = ToolError::OutsideWorkspace {
            path: "../secret.txt".to_string(),
            root: PathBuf::from("/home/someone/project"),
        };
        assert_eq!(
            e.to_string(),
            "../secret.txt is outside the workspace; only paths inside it may be used"
        );
    }
}
