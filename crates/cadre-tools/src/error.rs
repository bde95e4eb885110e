//! Why a tool call failed.

use std::path::PathBuf;

/// A tool failure; the agent loop turns it into an `is_error` result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The input did not match the schema (missing field, wrong type, …). Text for the
    /// model, which reads it as the call's result and corrects its call.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong with the input, for the model.
        message: String,
    },
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
    /// The call was refused for a stated reason (binary file, stale edit, not found, …).
    /// Text for the model, which reads it as the call's result and acts on it.
    #[error("{reason}")]
    Refused {
        /// Why, and what to do instead, for the model.
        reason: String,
    },
    /// The workspace root is not a folder.
    #[error("workspace root {} is not a folder", root.display())]
    NotAFolder {
        /// The root as resolved.
        root: PathBuf,
    },
    /// `bash` could not be sandboxed as its policy needs, so it was not run.
    #[error("bash could not be sandboxed, so it was not run: {0}")]
    Sandbox(#[source] crate::sandbox::SandboxError),
    /// The blocking task doing the file work panicked or was cancelled.
    #[error("internal error: file task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The call ran out of time.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl ToolError {
    /// A refusal for `reason`, told to the model.
    pub fn refused(reason: impl Into<String>) -> Self {
        Self::Refused {
            reason: reason.into(),
        }
    }

    /// Input that does not fit, `message` telling the model what is wrong.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::InvalidInput {
            message: message.into(),
        }
    }
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
