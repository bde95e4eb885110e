//! A glob of files as items: each file `{path, name, text}`, found by a walk from the
//! glob's literal prefix in file-name order, so positions are the same on every run.

use super::item::{BadItem, Raw};
use crate::error::WorkflowError;
use serde_json::json;
use std::path::{Component, Path, PathBuf};

/// Whether a path component holds glob syntax.
fn is_pattern(part: &str) -> bool {
    part.contains(['*', '?', '[', '{'])
}

/// The folder to walk: the leading components of `pattern` that hold no glob syntax.
fn walk_root(pattern: &Path) -> PathBuf {
    let mut root = PathBuf::new();
    for component in pattern.components() {
        if let Component::Normal(part) = component {
            if part.to_str().is_none_or(is_pattern) {
                break;
            }
        }
        root.push(component);
    }
    // A pattern naming one file: walk its folder.
    if root == pattern {
        root.pop();
    }
    root
}

/// The files the glob `path` (`written` as given) matches, one item each, named relative
/// to `base`.
pub(crate) fn glob(
    path: &Path,
    written: &str,
    base: &Path,
) -> Result<impl Iterator<Item = Raw> + Send, WorkflowError> {
    let pattern = path.to_string_lossy().into_owned();
    let matcher = globset::GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map_err(|source| WorkflowError::BadGlob {
            pattern: written.to_owned(),
            source,
        })?
        .compile_matcher();
    let root = walk_root(path);
    let base = base.to_path_buf();
    let walk = ignore::WalkBuilder::new(&root)
        .standard_filters(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    Ok(walk
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter(move |e| matcher.is_match(e.path()))
        .map(move |e| item(e.path(), &base)))
}

/// The item of the file at `path`, named relative to `base`.
fn item(path: &Path, base: &Path) -> Raw {
    let text = std::fs::read_to_string(path).map_err(|source| {
        let path = path.to_path_buf();
        (None, BadItem::File { path, source })
    })?;
    let shown = path.strip_prefix(base).unwrap_or(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((
        None,
        json!({"path": shown.to_string_lossy(), "name": name, "text": text}),
    ))
}
