//! Running the `git` binary the way every part of cadre does.
//!
//! Each command gets `GIT_TERMINAL_PROMPT=0` (nobody is there to type a password) and none
//! of git's repository-selecting variables (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`,
//! …), so a cadre started from a git hook or a shell that set them still acts on the
//! repository it names with `-C`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

/// Variables that would point git at another repository, index or object store: the list
/// `git rev-parse --local-env-vars` prints, which git itself clears when it switches
/// repositories.
pub const REPOSITORY_ENV: &[&str] = &[
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
];

/// One git command, with the environment every command of cadre gets.
#[derive(Debug)]
pub struct Git {
    cmd: Command,
    /// The command as shown in errors.
    shown: Vec<String>,
}

/// A finished git command.
#[derive(Debug)]
pub struct GitOutput {
    /// How it exited.
    pub status: std::process::ExitStatus,
    /// What it printed on stdout.
    pub stdout: Vec<u8>,
    /// What it printed on stderr, trimmed.
    pub stderr: String,
    /// The command as it was run, for errors.
    pub command: String,
}

/// A git command that could not be run or failed, or a folder for git that could not be
/// made.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The `git` binary could not be started.
    #[error("`{command}` could not be run: {source}")]
    Spawn {
        /// The command as it was to be run.
        command: String,
        /// What starting it failed with.
        source: std::io::Error,
    },
    /// The command failed.
    #[error("`{command}` failed: {stderr}")]
    Failed {
        /// The command as it was run.
        command: String,
        /// What git printed on stderr (trimmed), or its exit status when it printed nothing.
        stderr: String,
    },
    /// A folder could not be made.
    #[error("{}: {source}", path.display())]
    Io {
        /// The folder involved.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

impl Git {
    /// `git -C dir`.
    pub fn new(dir: &Path) -> Self {
        Self::with_program(OsStr::new("git"), dir)
    }

    /// `program -C dir`: [`new`](Self::new) with another binary (tests use a missing one).
    pub fn with_program(program: &OsStr, dir: &Path) -> Self {
        let mut cmd = Command::new(program);
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in REPOSITORY_ENV {
            cmd.env_remove(var);
        }
        // git runs the user's hooks: cadre's telemetry settings are not theirs.
        for name in crate::telemetry_env_names(std::env::vars_os()) {
            cmd.env_remove(name);
        }
        let git = Self {
            cmd,
            shown: vec![program.to_string_lossy().into_owned()],
        };
        git.arg("-C").arg(dir)
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        let arg = arg.as_ref();
        self.shown.push(arg.to_string_lossy().into_owned());
        self.cmd.arg(arg);
        self
    }

    /// Adds arguments.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        for arg in args {
            self = self.arg(arg);
        }
        self
    }

    /// Sets an environment variable for the command.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Runs it, whatever it exits with.
    pub async fn output(mut self) -> Result<GitOutput, GitError> {
        let command = self.shown.join(" ");
        match self.cmd.output().await {
            Ok(out) => Ok(GitOutput {
                status: out.status,
                stdout: out.stdout,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                command,
            }),
            Err(source) => Err(GitError::Spawn { command, source }),
        }
    }

    /// Runs it and returns its stdout, trimmed; failing is an error.
    pub async fn run(self) -> Result<String, GitError> {
        let out = self.output().await?;
        if out.status.success() {
            Ok(out.stdout_trimmed())
        } else {
            Err(out.failure())
        }
    }

    /// Adds `rev-parse --verify --quiet <name>^{commit}` and runs it: the full id of the
    /// commit `name` names, or `None` when it names none.
    pub async fn resolve(self, name: &str) -> Result<Option<String>, GitError> {
        // No ref or commit id starts with `-`, and git would read it as an option.
        if name.starts_with('-') {
            return Ok(None);
        }
        let out = self
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{name}^{{commit}}"))
            .output()
            .await?;
        match out.status.code() {
            Some(0) => Ok(Some(out.stdout_trimmed())),
            // `--verify --quiet` answers 1, saying nothing, for a name that is no commit here.
            Some(1) => Ok(None),
            _ => Err(out.failure()),
        }
    }

    /// Adds `diff --cached --quiet` and runs it: whether anything is staged.
    pub async fn has_staged(self) -> Result<bool, GitError> {
        let out = self.args(["diff", "--cached", "--quiet"]).output().await?;
        match out.status.code() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(out.failure()),
        }
    }

    /// Adds `status --porcelain` and runs it: whether nothing differs from HEAD, new files
    /// included even where the user's config hides untracked files from status.
    pub async fn is_clean(self) -> Result<bool, GitError> {
        let status = self
            .args(["status", "--porcelain", "--untracked-files=normal"])
            .run()
            .await?;
        Ok(status.is_empty())
    }

    /// Adds `diff --stat` and runs it: the diffstat from `from` to `to`, trimmed.
    pub async fn diffstat(self, from: &str, to: &str) -> Result<String, GitError> {
        self.args(["diff", "--stat", "--no-color", from, to])
            .run()
            .await
    }
}

impl GitOutput {
    /// The error for this command, which failed.
    pub fn failure(self) -> GitError {
        GitError::Failed {
            stderr: self.failure_text(),
            command: self.command,
        }
    }

    /// Stdout as text, trimmed.
    pub fn stdout_trimmed(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }

    /// What to say when it failed: its stderr, or its exit status when it printed nothing.
    pub fn failure_text(&self) -> String {
        if self.stderr.is_empty() {
            self.status.to_string()
        } else {
            self.stderr.clone()
        }
    }
}

/// Why `path` is not a worktree of its own on `branch`, or `None` when it is. An agent that
/// removed its `.git` would otherwise have git find a repository above it, and `add -A`
/// would stage that one.
pub async fn not_intact(path: &Path, branch: &str) -> Option<String> {
    if !tokio::fs::try_exists(path.join(".git"))
        .await
        .unwrap_or(false)
    {
        return Some("it has no .git, so git would find the repository above it".to_string());
    }
    let top = match Git::new(path)
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .await
    {
        Ok(out) if out.status.success() => out.stdout_trimmed(),
        Ok(out) => return Some(out.failure_text()),
        Err(e) => return Some(e.to_string()),
    };
    if !same_dir(Path::new(&top), path) {
        return Some(format!("git finds the repository at {top}"));
    }
    let head = match Git::new(path)
        .args(["symbolic-ref", "-q", "HEAD"])
        .output()
        .await
    {
        Ok(out) if out.status.success() => out.stdout_trimmed(),
        _ => String::new(),
    };
    if head != format!("refs/heads/{branch}") {
        let now = if head.is_empty() {
            "a detached HEAD"
        } else {
            head.as_str()
        };
        return Some(format!("it is on {now}"));
    }
    None
}

/// Whether two paths name the same existing folder.
pub fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `mkdir -p`.
pub async fn create_dir_all(dir: &Path) -> Result<(), GitError> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|source| GitError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Whether `run_id` can be part of a branch name and of a folder name: ASCII letters,
/// digits, `.`, `_` and `-`, not starting with `.` or `-`, no `..`, not ending in `.` or
/// `.lock`.
pub fn is_valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && !run_id.starts_with(['.', '-'])
        && !run_id.ends_with('.')
        && !run_id.ends_with(".lock")
        && !run_id.contains("..")
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_and_its_hooks_get_no_telemetry_settings() {
        // A name no other test reads or sets.
        let name = "OTEL_CADRE_GIT_TEST_ENDPOINT";
        std::env::set_var(name, "http://127.0.0.1:1");
        let git = Git::new(Path::new("."));
        std::env::remove_var(name);
        let removed = git
            .cmd
            .as_std()
            .get_envs()
            .any(|(n, v)| n == name && v.is_none());
        assert!(removed);
    }
}
