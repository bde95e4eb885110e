//! `read_file`: shows a text file with line numbers and remembers what was seen.

use super::file_io::{blocking, read_text};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

/// Lines shown when the model gives no `limit`.
const DEFAULT_LIMIT: u64 = 2000;
/// Longest line shown whole; longer ones are truncated.
const MAX_LINE_CHARS: usize = 2000;

/// Reads a UTF-8 text file, numbered like `cat -n`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadFileTool;

/// What `read_file` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// File to read, relative to the workspace root.
    pub path: String,
    /// 1-based line number to start at (default 1).
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Most lines to show.
    #[schemars(range(min = 1), description = format!("Most lines to show (default {DEFAULT_LIMIT})."))]
    pub limit: Option<u64>,
}

impl TypedTool for ReadFileTool {
    type Input = ReadFileInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> String {
        format!(
            "Read a UTF-8 text file from the workspace. Output is numbered like `cat -n`: the \
             line number, a tab, then the line. The numbers and tab are not part of the file, so \
             leave them out of edit_file's old_string.\n\
             - `path` is relative to the workspace root (an absolute path must lie inside it; \
             `..` may not leave it).\n\
             - Shows up to {DEFAULT_LIMIT} lines from `offset` (1-based line number, default 1); \
             for long files, read more with a later `offset`, or pass `limit`.\n\
             - Lines longer than {MAX_LINE_CHARS} characters are truncated.\n\
             - Refuses folders (use list_files), binary files, non-UTF-8 files and files over \
             the size limit (use grep, or bash with `sed -n`, for those).\n\
             - You must read a file before editing it with edit_file; if the file changes \
             afterwards (another agent or a command), read it again."
        )
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: ReadFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let limit = input.limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 {
            return Err(ToolError::invalid_input(
                "read_file: limit must be at least 1".to_string(),
            ));
        }
        // Line 0 does not exist; take it as "from the start" rather than fail.
        let offset = input.offset.unwrap_or(1).max(1);
        let abs = ctx.resolve_for_reading(&input.path)?;
        let shown = ctx.workspace.display(&abs);
        let max_read = ctx.limits.max_read_bytes;
        let file = {
            let (abs, shown) = (abs.clone(), shown.clone());
            blocking(move || read_text(&abs, &shown, max_read)).await?
        };
        ctx.files.record_stamp(&abs, file.stamp);
        Ok(render(
            &file.text,
            &shown,
            offset,
            limit,
            ctx.limits.max_output_bytes,
        ))
    }
}

/// The numbered slice of `text`, within `max_bytes`, with a note when lines remain.
fn render(text: &str, shown: &str, offset: u64, limit: u64, max_bytes: usize) -> ToolOutput {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total == 0 {
        return ToolOutput::ok(format!("[{shown} is empty]"));
    }
    let start = usize::try_from(offset - 1).unwrap_or(usize::MAX);
    if start >= total {
        return ToolOutput::error(format!(
            "{shown} has {total} lines; offset {offset} is past the end"
        ));
    }
    let end = usize::try_from(limit)
        .map(|l| start.saturating_add(l))
        .unwrap_or(usize::MAX)
        .min(total);
    let mut out = String::new();
    let mut shown_end = start;
    for (i, line) in lines[start..end].iter().enumerate() {
        let number = start + i + 1;
        let row = format!("{number:>6}\t{}\n", truncate_line(line));
        // Stop at a whole line once over budget; the note tells the model where to go on.
        if out.len() + row.len() > max_bytes && number > start + 1 {
            break;
        }
        out.push_str(&row);
        shown_end = number;
    }
    if shown_end < total {
        out.push_str(&format!(
            "[showing lines {}–{shown_end} of {total}; use offset {} to read more]\n",
            start + 1,
            shown_end + 1
        ));
    }
    ToolOutput::ok(out)
}

fn truncate_line(line: &str) -> std::borrow::Cow<'_, str> {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => line.into(),
        Some((cut, _)) => {
            let more = line[cut..].chars().count();
            format!("{}… [line truncated: {more} more chars]", &line[..cut]).into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_numbers_and_notes() {
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        let out = render(&text, "f", 3, 2, 10_000);
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "     3\tl3\n     4\tl4\n[showing lines 3–4 of 10; use offset 5 to read more]\n"
        );
        let all = render(&text, "f", 1, 2000, 10_000);
        assert!(!all.content.contains("showing"));
        assert!(render(&text, "f", 11, 5, 10_000).is_error);
    }

    #[test]
    fn render_respects_byte_budget() {
        let text: String = (1..=100).map(|i| format!("line number {i}\n")).collect();
        let out = render(&text, "f", 1, 2000, 200);
        assert!(out.content.contains("use offset"));
        assert!(out.content.len() < 300);
    }

    #[test]
    fn long_lines_truncated() {
        let line = "x".repeat(MAX_LINE_CHARS + 5);
        let t = truncate_line(&line);
        assert!(t.ends_with("[line truncated: 5 more chars]"));
    }
}
