//! Real git repositories in temp folders, for tests of worktree isolation.

use std::path::Path;
use std::process::Command;

/// Runs `git -C dir ARGS` and returns its stdout; fails the test when git fails or is missing.
#[allow(clippy::panic)] // Test helper: failing the test is its purpose.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap_or_else(|e| panic!("git is needed for these tests and could not run: {e}"));
    if !out.status.success() {
        panic!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `dir` a repository with a local identity, and commits what it holds (an empty
/// commit when it holds nothing).
pub fn init_repo(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.name", "Tester"]);
    git(dir, &["config", "user.email", "tester@example.com"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "init"]);
}
