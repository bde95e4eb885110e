//! The folder every file tool is confined to, and turning model-given paths into paths inside it.

use crate::ToolError;
use std::path::{Component, Path, PathBuf};

/// Most symlinks followed while resolving one path, as the kernel's own limit (ELOOP).
const MAX_SYMLINK_HOPS: usize = 40;

/// The workspace root; every path a tool touches must resolve inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing folder (it is canonicalized).
    pub fn new(root: impl AsRef<Path>) -> Result<Workspace, ToolError> {
        let given = root.as_ref();
        let root = given.canonicalize().map_err(|source| ToolError::Io {
            path: given.display().to_string(),
            source,
        })?;
        if !root.is_dir() {
            return Err(ToolError::NotAFolder { root });
        }
        Ok(Workspace { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `path` (relative to the root, or absolute inside it) to an absolute path inside
    /// the root, following `..` and symlinks; the path need not exist yet.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.trim().is_empty() {
            return Err(ToolError::invalid_input("path is empty".to_string()));
        }
        if path.contains('\0') {
            return Err(ToolError::invalid_input(
                "path contains a NUL byte".to_string(),
            ));
        }
        let outside = || ToolError::OutsideWorkspace {
            path: path.to_string(),
            root: self.root.clone(),
        };
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        let resolved = resolve_existing_prefix(&joined, 0).ok_or_else(outside)?;
        if resolved.starts_with(&self.root) {
            Ok(resolved)
        } else {
            Err(outside())
        }
    }

    /// Resolves the absolute `path` as [`resolve`](Self::resolve) does, but inside `folder`
    /// instead of the root: for a folder outside the workspace that tools may read too.
    /// `folder` need not exist yet; `None` when the path is not inside it.
    pub fn resolve_in_folder(folder: &Path, path: &str) -> Option<PathBuf> {
        let given = Path::new(path);
        if !given.is_absolute() || path.contains('\0') {
            return None;
        }
        let folder = resolve_existing_prefix(folder, 0)?;
        let resolved = resolve_existing_prefix(given, 0)?;
        resolved.starts_with(&folder).then_some(resolved)
    }

    /// `abs` relative to the root for messages (`.` for the root itself); other paths as given.
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }
}

/// Canonicalizes the longest existing ancestor of the absolute `path` and appends the rest.
///
/// Returns `None` when the not-yet-existing rest holds a `..` (it cannot be resolved safely)
/// or when symlinks loop. A dangling symlink is followed by hand so that creating a file
/// through it cannot land outside the root unnoticed.
fn resolve_existing_prefix(path: &Path, hops: usize) -> Option<PathBuf> {
    if hops > MAX_SYMLINK_HOPS {
        return None;
    }
    let mut existing = path.to_path_buf();
    // Components not yet existing, innermost last once reversed.
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut out = canonical;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Some(out);
        }
        // A symlink whose target is missing: follow it ourselves, then re-resolve.
        if let Ok(meta) = existing.symlink_metadata() {
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&existing).ok()?;
                let base = existing.parent().unwrap_or(Path::new("/"));
                let mut next = base.join(target);
                for part in rest.iter().rev() {
                    next.push(part);
                }
                return resolve_existing_prefix(&next, hops + 1);
            }
        }
        match existing.components().next_back() {
            Some(Component::Normal(name)) => rest.push(name.to_os_string()),
            Some(Component::CurDir) => {}
            // `..` over a path that does not exist: refuse rather than guess.
            Some(Component::ParentDir) => return None,
            Some(Component::RootDir | Component::Prefix(_)) | None => return None,
        }
        if !existing.pop() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "fn a() {}\n").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, outside, ws)
    }

    #[test]
    fn new_rejects_missing_and_file_roots() {
        let (dir, _o, _ws) = setup();
        assert!(Workspace::new(dir.path().join("nope")).is_err());
        assert!(matches!(
            Workspace::new(dir.path().join("src/a.rs")),
            Err(ToolError::NotAFolder { .. })
        ));
    }

    #[test]
    fn relative_and_absolute_inside() {
        let (_d, _o, ws) = setup();
        let expected = ws.root().join("src/a.rs");
        assert_eq!(ws.resolve("src/a.rs").unwrap(), expected);
        assert_eq!(ws.resolve("./src/../src/a.rs").unwrap(), expected);
        let abs = expected.to_str().unwrap().to_string();
        assert_eq!(ws.resolve(&abs).unwrap(), expected);
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        assert_eq!(ws.display(&expected), "src/a.rs");
        assert_eq!(ws.display(ws.root()), ".");
    }

    #[test]
    fn a_readable_folder_outside_takes_absolute_paths_inside_it_only() {
        let (_d, outside, _ws) = setup();
        let folder = outside.path().join("results");
        let file = folder.join("a.md");
        let inside = file.to_str().unwrap();
        // The folder need not exist for its paths to resolve.
        assert!(Workspace::resolve_in_folder(&folder, inside).is_some());
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(&file, "x").unwrap();
        assert_eq!(
            Workspace::resolve_in_folder(&folder, inside),
            Some(file.canonicalize().unwrap())
        );
        let escape = format!("{}/../other.md", folder.display());
        assert_eq!(Workspace::resolve_in_folder(&folder, &escape), None);
        assert_eq!(Workspace::resolve_in_folder(&folder, "a.md"), None);
        symlink("/etc", folder.join("etc")).unwrap();
        let through = format!("{}/etc/passwd", folder.display());
        assert_eq!(Workspace::resolve_in_folder(&folder, &through), None);
    }

    #[test]
    fn dotdot_escape_refused() {
        let (_d, _o, ws) = setup();
        for p in ["..", "../x", "src/../../x", "src/../.."] {
            assert!(
                matches!(ws.resolve(p), Err(ToolError::OutsideWorkspace { .. })),
                "{p} should be refused"
            );
        }
    }

    #[test]
    fn absolute_outside_refused() {
        let (_d, outside, ws) = setup();
        assert!(matches!(
            ws.resolve("/etc/passwd"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        let p = outside.path().join("new.txt");
        assert!(matches!(
            ws.resolve(p.to_str().unwrap()),
            Err(ToolError::OutsideWorkspace { .. })
        ));
    }

    #[test]
    fn nonexistent_paths_resolve() {
        let (_d, _o, ws) = setup();
        assert_eq!(
            ws.resolve("new/dir/file.txt").unwrap(),
            ws.root().join("new/dir/file.txt")
        );
        // A `..` inside the part that does not exist yet cannot be checked, so it is refused.
        assert!(ws.resolve("new/../../x").is_err());
    }

    #[test]
    fn symlink_out_refused_symlink_in_allowed() {
        let (dir, outside, ws) = setup();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink(dir.path().join("src"), dir.path().join("in")).unwrap();
        assert!(matches!(
            ws.resolve("out"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            ws.resolve("out/new/file.txt"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        assert_eq!(ws.resolve("in/a.rs").unwrap(), ws.root().join("src/a.rs"));
        assert_eq!(ws.resolve("in/b.rs").unwrap(), ws.root().join("src/b.rs"));
    }

    #[test]
    fn dangling_symlink_followed() {
        let (dir, outside, ws) = setup();
        symlink(
            outside.path().join("missing.txt"),
            dir.path().join("dangle_out"),
        )
        .unwrap();
        symlink(
            dir.path().join("src/missing.txt"),
            dir.path().join("dangle_in"),
        )
        .unwrap();
        assert!(matches!(
            ws.resolve("dangle_out"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        assert_eq!(
            ws.resolve("dangle_in").unwrap(),
            ws.root().join("src/missing.txt")
        );
        symlink("loop", dir.path().join("loop")).unwrap();
        assert!(ws.resolve("loop").is_err());
    }

    #[test]
    fn empty_path_invalid() {
        let (_d, _o, ws) = setup();
        assert!(matches!(
            ws.resolve(""),
            Err(ToolError::InvalidInput { .. })
        ));
    }
}
