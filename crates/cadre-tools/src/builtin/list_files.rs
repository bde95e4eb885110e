//! `list_files`: finds files by glob, honouring .gitignore.

use super::file_io::blocking;
use super::walk::{compile_glob, walker};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

/// Pattern used when the model gives none: everything.
const DEFAULT_PATTERN: &str = "**/*";
/// Most paths returned in one call.
const MAX_ENTRIES: usize = 1000;

/// Lists workspace files matching a glob.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListFilesTool;

/// What `list_files` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesInput {
    /// Glob such as `**/*.rs`.
    #[schemars(description = format!("Glob such as `**/*.rs` (default `{DEFAULT_PATTERN}`)."))]
    pub pattern: Option<String>,
    /// Folder to search in, relative to the workspace root (default: the root).
    pub path: Option<String>,
}

impl TypedTool for ListFilesTool {
    type Input = ListFilesInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "list_files"
    }

    fn description(&self) -> String {
        format!(
            "List files in the workspace whose paths match a glob, sorted by path. Use it to \
             explore the project layout or find files by name; use grep to search contents.\n\
             - `pattern` (default `{DEFAULT_PATTERN}`: everything, with folders shown ending in \
             `/`) is matched against paths relative to `path`. `*` stays within one folder, \
             `**` crosses folders, `{{a,b}}` and `[abc]` work: `**/*.rs`, `src/**/mod.rs`, \
             `*.{{toml,md}}`. A pattern without `/` matches file names at any depth (`*.rs` \
             finds every Rust file).\n\
             - `path` is a folder to search in, relative to the workspace root (default: the \
             root).\n\
             - Files ignored by .gitignore/.ignore, hidden files and .git are skipped.\n\
             - Returned paths are relative to the workspace root; at most {MAX_ENTRIES} are \
             shown, with a count of the rest."
        )
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: ListFilesInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let pattern = input
            .pattern
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_PATTERN.to_string());
        let show_dirs = pattern == DEFAULT_PATTERN;
        let filter = compile_glob(self.name(), &pattern)?;
        let dir = match input.path.as_deref().filter(|p| !p.trim().is_empty()) {
            Some(p) => ctx.workspace.resolve(p)?,
            None => ctx.workspace.root().to_path_buf(),
        };
        let shown_dir = ctx.workspace.display(&dir);
        if !dir.is_dir() {
            let why = if dir.exists() {
                "is a file, not a folder; use read_file to read it"
            } else {
                "does not exist"
            };
            return Err(ToolError::refused(format!("{shown_dir} {why}")));
        }
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        let mut paths = blocking(move || {
            let mut found = Vec::new();
            for entry in walker(&dir).build() {
                if cancel.is_cancelled() {
                    return Err(ToolError::Cancelled);
                }
                // Unreadable entries are skipped, as `find` would report and move on.
                let Ok(entry) = entry else { continue };
                if entry.depth() == 0 {
                    continue;
                }
                let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
                if is_dir && !show_dirs {
                    continue;
                }
                let Ok(rel) = entry.path().strip_prefix(&dir) else {
                    continue;
                };
                if !filter.matches(rel) {
                    continue;
                }
                let mut shown = workspace.display(entry.path());
                if is_dir {
                    shown.push('/');
                }
                found.push(shown);
            }
            Ok(found)
        })
        .await?;
        if paths.is_empty() {
            return Ok(ToolOutput::ok(format!(
                "no files match `{pattern}` under {shown_dir}"
            )));
        }
        paths.sort();
        let more = paths.len().saturating_sub(MAX_ENTRIES);
        paths.truncate(MAX_ENTRIES);
        let mut out = paths.join("\n");
        out.push('\n');
        if more > 0 {
            out.push_str(&format!(
                "[… and {more} more; narrow the pattern or path to see them]\n"
            ));
        }
        Ok(ToolOutput::ok(out))
    }
}
