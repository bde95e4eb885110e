//! Walking the workspace the way `rg` does, and glob filters, shared by `list_files` and `grep`.

use crate::ToolError;
use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// A walk of `dir` that skips hidden files, `.git` and whatever .gitignore/.ignore exclude.
pub(crate) fn walker(dir: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(dir);
    builder
        .hidden(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .ignore(true)
        .parents(true)
        // Honour .gitignore even when the workspace is not (yet) a git repository.
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_name(|a, b| a.cmp(b));
    builder
}

/// A compiled glob; one without `/` matches file names at any depth, like .gitignore and `rg -g`.
#[derive(Debug)]
pub(crate) struct GlobFilter {
    matcher: GlobMatcher,
    name_only: bool,
}

impl GlobFilter {
    /// Whether `rel` (relative to the searched folder) matches.
    pub(crate) fn matches(&self, rel: &Path) -> bool {
        if self.name_only {
            rel.file_name().is_some_and(|n| self.matcher.is_match(n))
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// Most compiled globs kept; past it the cache starts again (models reuse a handful).
const KEPT_GLOBS: usize = 256;

/// `pattern` compiled, reporting a bad glob as invalid input to `tool`. Compiled once and
/// shared: building a glob's matcher costs far more than the walk of a small folder, and
/// thousands of agents ask for the same few patterns.
pub(crate) fn compile_glob(tool: &str, pattern: &str) -> Result<Arc<GlobFilter>, ToolError> {
    static KEPT: OnceLock<Mutex<HashMap<String, Arc<GlobFilter>>>> = OnceLock::new();
    let kept = KEPT.get_or_init(Mutex::default);
    if let Some(filter) = kept.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(filter.clone());
    }
    // Compiled outside the lock; a bad glob is not kept, so its error names each tool.
    let filter = Arc::new(build_glob(tool, pattern)?);
    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() >= KEPT_GLOBS {
        kept.clear();
    }
    kept.insert(pattern.to_owned(), filter.clone());
    Ok(filter)
}

/// Compiles `pattern` (see [`compile_glob`]).
fn build_glob(tool: &str, pattern: &str) -> Result<GlobFilter, ToolError> {
    // A leading `./` or `/` means "from the searched folder", which is where matching starts anyway.
    let trimmed = pattern.trim_start_matches("./").trim_start_matches('/');
    let glob = GlobBuilder::new(trimmed)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolError::invalid_input(format!("{tool}: invalid glob `{pattern}`: {e}")))?;
    Ok(GlobFilter {
        matcher: glob.compile_matcher(),
        name_only: !trimmed.contains('/'),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_semantics() {
        let rs = compile_glob("t", "*.rs").unwrap();
        assert!(rs.matches(Path::new("a.rs")));
        assert!(rs.matches(Path::new("src/deep/a.rs")));
        assert!(!rs.matches(Path::new("a.rsx")));
        let src = compile_glob("t", "src/*.rs").unwrap();
        assert!(src.matches(Path::new("src/a.rs")));
        assert!(!src.matches(Path::new("src/x/a.rs")));
        let all = compile_glob("t", "**/*.{toml,md}").unwrap();
        assert!(all.matches(Path::new("Cargo.toml")));
        assert!(all.matches(Path::new("a/b/README.md")));
        assert!(matches!(
            compile_glob("t", "a[b"),
            Err(ToolError::InvalidInput { .. })
        ));
    }
}
