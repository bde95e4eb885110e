//! `write_file`: creates or replaces a whole file.

use super::file_io::{blocking, line_count, stamp_written, write_atomic};
use crate::{parse_input, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

/// Writes a whole file, creating folders as needed.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteFileTool;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> String {
        "Write a whole file in the workspace, replacing it if it exists and creating it (and \
         any missing parent folders) if not.\n\
         - `path` is relative to the workspace root (an absolute path must lie inside it; `..` \
         may not leave it).\n\
         - `content` is the complete new file text, written exactly as given (add the final \
         newline yourself if the file should end with one).\n\
         - To change part of an existing file, prefer edit_file: it is safer and cheaper than \
         rewriting everything, and it refuses to clobber changes made by others.\n\
         - The write is atomic: other readers see either the old or the new file."
            .to_string()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "File to write, relative to the workspace root."
                },
                "content": {
                    "type": "string",
                    "description": "The complete content of the file."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(self.name(), input)?;
        if ctx.read_only {
            return Err(ToolError::Refused(
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
        let (existed, stamp) = {
            let (abs, shown) = (abs.clone(), shown.clone());
            blocking(move || {
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
