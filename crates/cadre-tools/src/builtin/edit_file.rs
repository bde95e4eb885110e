//! `edit_file`: replaces an exact string in a file the agent has read, refusing stale edits.

use super::file_io::{
    blocking, decode_text, io_error, read_unchanged, require_seen, stamp_written, write_atomic,
};
use crate::context::FileStamp;
use crate::{cap_output, ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::Path;

/// Most bytes of diff shown after an edit; the model already knows what it asked for.
const MAX_DIFF_BYTES: usize = 8_000;

/// Replaces `old_string` with `new_string` in a file, once or everywhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct EditFileTool;

/// What `edit_file` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// File to edit, relative to the workspace root.
    pub path: String,
    /// Exact text to replace (unique in the file unless replace_all).
    pub old_string: String,
    /// Text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

impl TypedTool for EditFileTool {
    type Input = EditFileInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> String {
        "Edit a text file by replacing an exact string. Returns a unified diff of the change.\n\
         - Read the file with read_file first; the edit is refused if you have not, or if the \
         file changed since you last read it (then read it again and redo the edit).\n\
         - `old_string` must match the file exactly, including whitespace and indentation, and \
         must not include the line-number prefix read_file shows (number + tab).\n\
         - `old_string` must occur exactly once unless `replace_all` is true; if it occurs \
         several times, include more surrounding lines to make it unique.\n\
         - `new_string` replaces it and must differ from it; an empty `new_string` deletes it.\n\
         - To create a file or rewrite all of it, use write_file.\n\
         - `path` is relative to the workspace root (an absolute path must lie inside it)."
            .to_string()
    }

    fn is_read_only(&self) -> bool {
        false
    }

    async fn run(&self, input: EditFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if input.old_string.is_empty() {
            return Err(ToolError::invalid_input(
                "edit_file: old_string is empty; to create or rewrite a file use write_file"
                    .to_string(),
            ));
        }
        if input.old_string == input.new_string {
            return Err(ToolError::invalid_input(
                "edit_file: old_string and new_string are identical; nothing would change"
                    .to_string(),
            ));
        }
        if ctx.read_only {
            return Err(ToolError::refused(
                "this agent is read-only; it may not edit files".to_string(),
            ));
        }
        let abs = ctx.workspace.resolve(&input.path)?;
        let shown = ctx.workspace.display(&abs);
        // Held across read, check and write so no other writer slips in between.
        let lock = ctx.locks.lock_for(&abs);
        let _guard = lock.lock().await;

        let exists = tokio::fs::try_exists(&abs)
            .await
            .map_err(|e| io_error(&shown, e))?;
        if !exists {
            return Err(ToolError::refused(format!(
                "{shown} does not exist; use write_file to create it"
            )));
        }
        let seen = require_seen(ctx.files.stamp(&abs), &shown, "editing")?;
        let max_read = ctx.limits.max_read_bytes;
        let (abs2, shown2) = (abs.clone(), shown.clone());
        let edited = blocking(move || apply(&abs2, &shown2, max_read, &seen, &input)).await?;
        ctx.files.record_stamp(&abs, edited.stamp);
        let diff = similar::TextDiff::from_lines(&edited.before, &edited.after)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{shown}"), &format!("b/{shown}"))
            .to_string();
        let noun = if edited.count == 1 {
            "occurrence"
        } else {
            "occurrences"
        };
        Ok(ToolOutput::ok(format!(
            "edited {shown}: replaced {} {noun}\n{}",
            edited.count,
            cap_output(&diff, ctx.limits.max_output_bytes.min(MAX_DIFF_BYTES))
        )))
    }
}

struct Edited {
    before: String,
    after: String,
    count: usize,
    stamp: FileStamp,
}

/// Reads, checks freshness and uniqueness, replaces and writes; runs under the path lock.
fn apply(
    abs: &Path,
    shown: &str,
    max_read: u64,
    seen: &FileStamp,
    input: &EditFileInput,
) -> Result<Edited, ToolError> {
    let current = read_unchanged(abs, shown, max_read, seen, "editing")?;
    let before = decode_text(current, shown)?.text;
    let (mut old, mut new) = (input.old_string.clone(), input.new_string.clone());
    let mut count = before.matches(old.as_str()).count();
    // Models write `\n`; a CRLF file needs `\r\n`, so retry with the file's own line endings.
    if count == 0 && before.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
        old = old.replace('\n', "\r\n");
        new = new.replace('\n', "\r\n");
        count = before.matches(old.as_str()).count();
    }
    if count == 0 {
        return Err(ToolError::refused(format!(
            "old_string was not found in {shown}. It must match exactly, including whitespace, \
             indentation and line breaks (and without read_file's line-number prefix); read the \
             file again and copy the text exactly"
        )));
    }
    if count > 1 && !input.replace_all {
        return Err(ToolError::refused(format!(
            "old_string occurs {count} times in {shown}; add surrounding lines to make it \
             unique, or set replace_all to true to replace every occurrence"
        )));
    }
    let after = if input.replace_all {
        before.replace(old.as_str(), &new)
    } else {
        before.replacen(old.as_str(), &new, 1)
    };
    write_atomic(abs, shown, after.as_bytes())?;
    let stamp = stamp_written(abs, shown, after.as_bytes())?;
    Ok(Edited {
        before,
        after,
        count,
        stamp,
    })
}
