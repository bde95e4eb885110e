//! `write_file`: creates a file, or replaces a whole file the agent has read.

use super::file_io::{
    blocking, ensure_not_special, io_error, line_count, read_unchanged, require_seen,
    stamp_written, write_atomic,
};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

/// Writes a whole file, creating folders as needed.
///
/// Creating a file needs nothing more; replacing an existing one needs the agent to have
/// read (or written) it, and the file to be unchanged since, as `edit_file` does, so one
/// agent never silently clobbers another's change.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteFileTool;

/// What `write_file` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// File to write, relative to the workspace root.
    pub path: String,
    /// The complete content of the file.
    pub content: String,
}

impl TypedTool for WriteFileTool {
    type Input = WriteFileInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> String {
        "Write a whole file in the workspace, creating it (and any missing parent folders) if \
         it does not exist, or replacing it if it does.\n\
         - Replacing an existing file requires that you read it with read_file first (writing \
         it yourself counts too), and that it has not changed since; otherwise the write is \
         refused: read it again, then write. Creating a new file needs no read.\n\
         - `path` is relative to the workspace root (an absolute path must lie inside it; `..` \
         may not leave it).\n\
         - `content` is the complete new file text, written exactly as given (add the final \
         newline yourself if the file should end with one).\n\
         - To change part of an existing file, prefer edit_file: it is safer and cheaper than \
         rewriting everything.\n\
         - The write is atomic: other readers see either the old or the new file."
            .to_string()
    }

    fn is_read_only(&self) -> bool {
        false
    }

    async fn run(&self, input: WriteFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if ctx.read_only {
            return Err(ToolError::refused(
                "this agent is read-only; it may not write files".to_string(),
            ));
        }
        let abs = ctx.workspace.resolve(&input.path)?;
        let shown = ctx.workspace.display(&abs);
        let lock = ctx.locks.lock_for(&abs);
        let _guard = lock.lock().await;
        let content = input.content;
        let lines = line_count(&content);
        let bytes = content.len();
        // Looked up under the lock, like everything below, so no other writer slips in.
        let seen = ctx.files.stamp(&abs);
        let max_read = ctx.limits.max_read_bytes;
        let (existed, stamp) = {
            let (abs, shown) = (abs.clone(), shown.clone());
            blocking(move || {
                if exists(&abs, &shown)? {
                    let seen = require_seen(seen, &shown, "overwriting")?;
                    read_unchanged(&abs, &shown, max_read, &seen, "overwriting")?;
                }
                let existed = write_atomic(&abs, &shown, content.as_bytes())?;
                Ok((existed, stamp_written(&abs, &shown, content.as_bytes())?))
            })
            .await?
        };
        ctx.files.record_stamp(&abs, stamp);
        let what = if existed {
            "overwrote the existing file"
        } else {
            "new file"
        };
        Ok(ToolOutput::ok(format!(
            "wrote {lines} lines ({bytes} bytes) to {shown} ({what})"
        )))
    }
}

/// Whether `abs` exists as a file to overwrite; folders and special files are refused.
fn exists(abs: &std::path::Path, shown: &str) -> Result<bool, ToolError> {
    match std::fs::metadata(abs) {
        Ok(meta) if meta.is_dir() => Err(ToolError::refused(format!(
            "{shown} is a folder; give a file path"
        ))),
        Ok(meta) => ensure_not_special(shown, meta.file_type()).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(shown, e)),
    }
}
