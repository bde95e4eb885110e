//! A git worktree of its own for a subagent (`isolation: worktree`).
//!
//! [`Worktree::create`] checks out the main checkout's `HEAD` into
//! `<repo top>/.cadre/worktrees/<run id>/<agent slug>` on a new branch
//! `cadre/<run id>/<agent slug>`; the agent works there, and [`Worktree::finish`] commits
//! what it changed on that branch and removes the folder (or removes both when nothing
//! changed). [`branches`] and [`delete_branches`] list and clear what a run left behind.
//!
//! Everything runs the real `git` binary through [`crate::git::Git`]: each command gets
//! `GIT_TERMINAL_PROMPT=0` and none of git's repository-selecting variables (`GIT_DIR`,
//! `GIT_WORK_TREE`, `GIT_INDEX_FILE`, …), so a cadre started from a git hook or a shell
//! that set them still acts on the repository of the workspace.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tokio::sync::Mutex;

use crate::git::{create_dir_all, is_valid_run_id, Git, GitError};

/// Serialises the git commands that change the shared repository.
///
/// Worktrees of one repository share its `.git`: creating a worktree, committing, deleting
/// a branch or pruning take lock files there (`config`, `packed-refs`, ref locks,
/// `worktrees/`), and git fails rather than waits when another git holds one. Agents of a
/// run start and finish concurrently, so this process takes turns; read-only commands
/// (`status`, `diff`, `rev-parse`, `for-each-ref`) run freely. A git run outside cadre
/// meanwhile can still collide; that surfaces as [`WorktreeError::Git`].
static REPO_LOCK: Mutex<()> = Mutex::const_new(());

/// The identity a commit gets when git has none configured, so `finish` works on a fresh
/// machine without touching the user's git config.
const FALLBACK_IDENTITY: [(&str, &str); 2] =
    [("user.name", "cadre"), ("user.email", "cadre@localhost")];

/// Why a worktree could not be created, finished or cleared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorktreeError {
    /// The `git` binary could not be run.
    #[error(
        "isolation: worktree needs git, which could not be run ({source}); \
         install git or drop isolation from the agent type"
    )]
    GitMissing {
        /// What starting `git` failed with.
        source: std::io::Error,
    },
    /// The workspace is not inside a git work tree.
    #[error(
        "{} is not inside a git work tree, and isolation: worktree needs one; \
         run `git init` and commit, or drop isolation from the agent type",
        dir.display()
    )]
    NotARepository {
        /// The workspace folder that was given.
        dir: PathBuf,
    },
    /// The repository has no commit for a worktree to start from.
    #[error(
        "the git repository {} has no commit yet, and isolation: worktree starts from HEAD; \
         commit once (`git add -A && git commit -m init`), or drop isolation from the agent type",
        repo.display()
    )]
    NoCommit {
        /// The repository's top folder.
        repo: PathBuf,
    },
    /// The main checkout has staged changes, which a worktree started from HEAD would miss.
    #[error(
        "the git repository {} has staged changes, which an isolated agent's worktree \
         (started from HEAD) would not see; commit them or unstage them \
         (`git restore --staged .`) first",
        repo.display()
    )]
    DirtyIndex {
        /// The repository's top folder.
        repo: PathBuf,
    },
    /// The run id cannot be part of a branch name and a folder name.
    #[error(
        "run id {run_id:?} cannot name a branch: use ASCII letters, digits, '.', '_' and '-', \
         not starting with '.' or '-'"
    )]
    InvalidRunId {
        /// The run id as given.
        run_id: String,
    },
    /// The worktree is no longer the agent's checkout of its branch (its `.git` was
    /// removed, or it switched branches): nothing is committed or removed, so neither the
    /// main checkout nor another branch is touched.
    #[error(
        "the worktree {path} is no longer a checkout of {branch} ({why}); nothing was committed or removed: look at it, then `git worktree remove --force` it"
    )]
    NotIntact {
        /// The worktree folder.
        path: PathBuf,
        /// The branch it should be on.
        branch: String,
        /// What was found instead.
        why: String,
    },
    /// The agent's branch is left from an earlier part of the run and cannot be taken up.
    #[error(
        "the branch {branch} is left from an earlier part of run {run_id} and cannot be taken up again ({source}); `cadre runs branches {run_id} --delete` removes what the run left (its work on the branch with it)"
    )]
    Leftover {
        /// The branch.
        branch: String,
        /// The run.
        run_id: String,
        /// Why it cannot be taken up.
        source: Box<WorktreeError>,
    },
    /// A git command failed, or a folder for it could not be made.
    #[error(transparent)]
    Git(GitError),
    /// The worktrees' `.gitignore` could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The folder or file involved.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// How [`Worktree::finish`] left things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Nothing changed: the worktree and its branch are gone.
    Unchanged,
    /// The work is committed on `branch`; the worktree folder is gone, the branch stays.
    Committed {
        /// The branch holding the work, e.g. `cadre/20261201-101500-1234/code-2`.
        branch: String,
        /// `git diff --stat` from the starting commit to the branch, trimmed.
        diffstat: String,
    },
}

/// A subagent's own checkout of the repository, on its own branch.
///
/// It starts from the main checkout's `HEAD`: unstaged and untracked changes there are
/// allowed and simply not part of it (staged ones are refused, see
/// [`WorktreeError::DirtyIndex`]). It stays on disk until [`finish`](Self::finish) or
/// [`discard`](Self::discard); [`delete_branches`] clears one that was dropped instead.
#[derive(Debug)]
#[must_use = "the worktree stays on disk until `finish` or `discard`"]
pub struct Worktree {
    /// The worktree's top folder, `<repo top>/.cadre/worktrees/<run id>/<slug>`.
    pub path: PathBuf,
    /// Its branch, `cadre/<run id>/<slug>`.
    pub branch: String,
    /// The main checkout's top folder.
    repo: PathBuf,
    /// The commit id of the `HEAD` it started from.
    base: String,
    /// Where the workspace sits below the repository's top ("" when at the top).
    prefix: PathBuf,
}

impl Worktree {
    /// Checks out `HEAD` of `workspace_root`'s repository for one agent of a run.
    ///
    /// `agent` is an agent path like `main/code#2`; its last segment names the branch
    /// `cadre/<run_id>/code-2` and the folder (see [`agent_slug`]).
    pub async fn create(
        workspace_root: &Path,
        run_id: &str,
        agent: &str,
    ) -> Result<Worktree, WorktreeError> {
        check_run_id(run_id)?;
        let (repo, prefix) = locate(workspace_root).await?;

        let Some(base) = Git::new(&repo).resolve("HEAD").await? else {
            return Err(WorktreeError::NoCommit { repo });
        };
        if Git::new(&repo).has_staged().await? {
            return Err(WorktreeError::DirtyIndex { repo });
        }

        let slug = agent_slug(agent);
        let branch = branch_name(run_id, &slug);
        let worktrees = repo.join(".cadre").join("worktrees");
        let path = worktrees.join(run_id).join(&slug);
        create_dir_all(&worktrees.join(run_id)).await?;
        ignore_all(&worktrees).await?;

        let refname = format!("refs/heads/{branch}");
        let base = if Git::new(&repo).resolve(&refname).await?.is_some() {
            // The branch is this agent's from an earlier part of the same run (a resumed
            // run): it goes on where it was, with what it wrote, instead of failing.
            match Self::reopen(&repo, &path, &branch).await {
                Ok(base) => base,
                Err(source) => {
                    return Err(WorktreeError::Leftover {
                        branch,
                        run_id: run_id.to_owned(),
                        source: Box::new(source),
                    })
                }
            }
        } else {
            // The commit id rather than `HEAD`, so the branch starts exactly at `base` even
            // if the main checkout moves meanwhile.
            run_locked(
                Git::new(&repo)
                    .args(["worktree", "add", "--quiet", "-b", &branch])
                    .arg(&path)
                    .arg(&base),
            )
            .await?;
            base
        };

        let worktree = Worktree {
            path,
            branch,
            repo,
            base,
            prefix,
        };
        // A workspace folder holding no tracked file is not checked out; the agent's tools
        // still need it to exist.
        create_dir_all(&worktree.workspace()).await?;
        Ok(worktree)
    }

    /// Takes up the left-over worktree at `path` on `branch` (checking the branch out there
    /// again when the folder is gone); returns the commit the branch started from.
    async fn reopen(repo: &Path, path: &Path, branch: &str) -> Result<String, WorktreeError> {
        if crate::git::not_intact(path, branch).await.is_some() {
            if tokio::fs::try_exists(path).await.unwrap_or(false) {
                return Err(WorktreeError::NotIntact {
                    path: path.to_path_buf(),
                    branch: branch.to_owned(),
                    why: "it is left from an earlier part of the run".to_owned(),
                });
            }
            prune(repo).await?;
            run_locked(
                Git::new(repo)
                    .args(["worktree", "add", "--quiet"])
                    .arg(path)
                    .arg(branch),
            )
            .await?;
        }
        // Where the branch left the main line: the commit it was made at.
        Ok(Git::new(repo)
            .args(["merge-base", "HEAD", branch])
            .run()
            .await?)
    }

    /// The agent's workspace: the folder of the worktree matching the given workspace root.
    pub fn workspace(&self) -> PathBuf {
        if self.prefix.as_os_str().is_empty() {
            self.path.clone()
        } else {
            self.path.join(&self.prefix)
        }
    }

    /// The main checkout's top folder.
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// The commit id the worktree started from.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Commits what changed on the branch and removes the worktree (and branch if unchanged).
    ///
    /// Files the repository ignores do not count as changes and are removed with the
    /// folder. Commits the agent made itself count, provided it left the worktree on its
    /// branch.
    pub async fn finish(self, message: &str) -> Result<Finished, WorktreeError> {
        self.check_intact().await?;
        if Git::new(&self.path).is_clean().await? {
            let head = Git::new(&self.path)
                .args(["rev-parse", "--verify", "HEAD"])
                .run()
                .await?;
            if head == self.base {
                self.remove(true).await?;
                return Ok(Finished::Unchanged);
            }
        } else {
            run_locked(Git::new(&self.path).args(["add", "-A"])).await?;
            let mut identity = Git::new(&self.path);
            for (key, value) in FALLBACK_IDENTITY {
                if !configured(&self.path, key).await? {
                    identity = identity.arg("-c").arg(format!("{key}={value}"));
                }
            }
            let _turn = REPO_LOCK.lock().await;
            commit(identity, message, "work", &self.branch).await?;
        }
        let diffstat = Git::new(&self.path).diffstat(&self.base, "HEAD").await?;
        let branch = self.branch.clone();
        self.remove(false).await?;
        Ok(Finished::Committed { branch, diffstat })
    }

    /// Fails unless the folder is still this worktree, on its branch: an agent that removed
    /// its `.git` would otherwise have git find the main repository above it, and `add -A`
    /// would stage the person's own checkout.
    async fn check_intact(&self) -> Result<(), WorktreeError> {
        match crate::git::not_intact(&self.path, &self.branch).await {
            None => Ok(()),
            Some(why) => Err(WorktreeError::NotIntact {
                path: self.path.clone(),
                branch: self.branch.clone(),
                why,
            }),
        }
    }

    /// Removes the worktree and its branch, whatever they hold.
    pub async fn discard(self) -> Result<(), WorktreeError> {
        self.remove(true).await
    }

    /// Removes the worktree folder (and the branch when `branch` is true).
    async fn remove(self, branch: bool) -> Result<(), WorktreeError> {
        let branch = branch.then_some(self.branch.as_str());
        let _turn = REPO_LOCK.lock().await;
        remove(|| Git::new(&self.repo), &self.path, branch).await?;
        Ok(())
    }
}

/// The branches run `run_id` left in the repository holding `workspace_root`, sorted.
pub async fn branches(workspace_root: &Path, run_id: &str) -> Result<Vec<String>, WorktreeError> {
    check_run_id(run_id)?;
    let (repo, _) = locate(workspace_root).await?;
    run_branches(&repo, run_id).await
}

/// Removes every worktree and branch run `run_id` left; returns the deleted branches.
pub async fn delete_branches(
    workspace_root: &Path,
    run_id: &str,
) -> Result<Vec<String>, WorktreeError> {
    check_run_id(run_id)?;
    let (repo, _) = locate(workspace_root).await?;
    let run_dir = repo.join(".cadre").join("worktrees").join(run_id);

    // Forget worktrees whose folder is already gone, so only live ones are listed.
    prune(&repo).await?;
    let list = Git::new(&repo)
        .args(["worktree", "list", "--porcelain"])
        .output()
        .await?;
    if !list.status.success() {
        return Err(list.failure().into());
    }
    for line in list.stdout.split(|&b| b == b'\n') {
        let Some(path) = line.strip_prefix(b"worktree ") else {
            continue;
        };
        let path = Path::new(OsStr::from_bytes(path));
        if path.starts_with(&run_dir) {
            run_locked(
                Git::new(&repo)
                    .args(["worktree", "remove", "--force"])
                    .arg(path),
            )
            .await?;
        }
    }

    let branches = run_branches(&repo, run_id).await?;
    for branch in &branches {
        run_locked(Git::new(&repo).args(["branch", "--quiet", "-D", branch])).await?;
    }
    prune(&repo).await?;
    let _ = tokio::fs::remove_dir(&run_dir).await;
    Ok(branches)
}

/// The slug of an agent path's last segment: `main/code#2` → `code-2`.
///
/// ASCII letters and digits are kept (lowercased); every other run of characters becomes
/// one `-`. A segment with none left is `agent`.
pub fn agent_slug(agent: &str) -> String {
    let last = agent.rsplit('/').next().unwrap_or(agent);
    let mut slug = String::with_capacity(last.len());
    for c in last.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    if slug.is_empty() {
        slug.push_str("agent");
    }
    slug
}

/// The branch of agent `slug` of run `run_id`: `cadre/<run id>/<slug>`.
pub fn branch_name(run_id: &str, slug: &str) -> String {
    format!("cadre/{run_id}/{slug}")
}

/// Commits what is staged in the worktree `git` runs in (with the identity it carries),
/// with `message`, or `cadre: <what> of <branch>` when that is blank.
///
/// No hooks: nobody is left to act on a failing pre-commit or commit-msg hook, and the
/// commit only preserves the agent's work on its branch.
pub async fn commit(git: Git, message: &str, what: &str, branch: &str) -> Result<(), GitError> {
    let message = match message.trim() {
        "" => format!("cadre: {what} of {branch}"),
        _ => message.to_string(),
    };
    git.args(["commit", "--quiet", "--no-verify", "-m", &message])
        .run()
        .await?;
    Ok(())
}

/// Removes the worktree at `path` from the repository `repo` runs git in, whatever it holds,
/// and `branch` with it when given; then the run's folder above it, unless another agent of
/// the run still has its worktree there.
pub async fn remove(
    repo: impl Fn() -> Git,
    path: &Path,
    branch: Option<&str>,
) -> Result<(), GitError> {
    repo()
        .args(["worktree", "remove", "--force"])
        .arg(path)
        .run()
        .await?;
    if let Some(branch) = branch {
        repo()
            .args(["branch", "--quiet", "-D", branch])
            .run()
            .await?;
    }
    if let Some(run_dir) = path.parent() {
        // Fails, as wanted, while another agent of the run still has its worktree there.
        let _ = tokio::fs::remove_dir(run_dir).await;
    }
    Ok(())
}

/// Refuses run ids git would reject in a branch name or that could leave the worktrees folder.
fn check_run_id(run_id: &str) -> Result<(), WorktreeError> {
    if is_valid_run_id(run_id) {
        Ok(())
    } else {
        Err(WorktreeError::InvalidRunId {
            run_id: run_id.to_string(),
        })
    }
}

/// The repository's top folder and where `dir` sits below it.
async fn locate(dir: &Path) -> Result<(PathBuf, PathBuf), WorktreeError> {
    // English messages, to tell "no repository" from other failures (such as git's
    // `safe.directory` refusal, whose own advice the user needs).
    let inside = Git::new(dir)
        .env("LC_ALL", "C")
        .args(["rev-parse", "--is-inside-work-tree"])
        .output()
        .await?;
    let not_a_repository = || WorktreeError::NotARepository {
        dir: dir.to_path_buf(),
    };
    if !inside.status.success() {
        return Err(if inside.stderr.contains("not a git repository") {
            not_a_repository()
        } else {
            inside.failure().into()
        });
    }
    // "false" inside a `.git` folder or a bare repository.
    if inside.stdout_trimmed() != "true" {
        return Err(not_a_repository());
    }

    let out = Git::new(dir)
        .args(["rev-parse", "--show-toplevel", "--show-prefix"])
        .output()
        .await?;
    if !out.status.success() {
        return Err(out.failure().into());
    }
    let mut lines = out.stdout.split(|&b| b == b'\n');
    let top = lines.next().unwrap_or_default();
    if top.is_empty() {
        return Err(not_a_repository());
    }
    let prefix = lines.next().unwrap_or_default();
    let prefix = prefix.strip_suffix(b"/").unwrap_or(prefix);
    Ok((
        PathBuf::from(OsStr::from_bytes(top)),
        PathBuf::from(OsStr::from_bytes(prefix)),
    ))
}

/// The branches of run `run_id`, sorted.
async fn run_branches(repo: &Path, run_id: &str) -> Result<Vec<String>, WorktreeError> {
    // Full ref names: `%(refname:short)` would say `heads/…` if a tag had the same name.
    let refs = Git::new(repo)
        .args([
            "for-each-ref",
            "--format=%(refname)",
            &format!("refs/heads/cadre/{run_id}/"),
        ])
        .run()
        .await?;
    let mut branches: Vec<String> = refs
        .lines()
        .filter_map(|r| r.strip_prefix("refs/heads/"))
        .map(str::to_string)
        .collect();
    branches.sort();
    Ok(branches)
}

/// `git worktree prune`.
async fn prune(repo: &Path) -> Result<(), WorktreeError> {
    run_locked(Git::new(repo).args(["worktree", "prune"])).await?;
    Ok(())
}

/// Whether git config (any level) gives `key` a non-empty value in `dir`.
async fn configured(dir: &Path, key: &str) -> Result<bool, WorktreeError> {
    let out = Git::new(dir)
        .args(["config", "--get", key])
        .output()
        .await?;
    match out.status.code() {
        Some(0) => Ok(!out.stdout_trimmed().is_empty()),
        // 1: the key is not set.
        Some(1) => Ok(false),
        _ => Err(out.failure().into()),
    }
}

/// Keeps the worktrees out of the main checkout's `git status` and `git add -A` (which
/// would add them as embedded repositories) and out of cadre's file tools: a `.gitignore`
/// that ignores everything, itself included, so the user's files need no change.
async fn ignore_all(worktrees: &Path) -> Result<(), WorktreeError> {
    let file = worktrees.join(".gitignore");
    if tokio::fs::try_exists(&file).await.unwrap_or(false) {
        return Ok(());
    }
    tokio::fs::write(
        &file,
        "# Worktrees of cadre agents (isolation: worktree); this file ignores itself too.\n*\n",
    )
    .await
    .map_err(|source| WorktreeError::Io { path: file, source })
}

/// [`Git::run`], holding [`REPO_LOCK`]: for commands that change the repository.
async fn run_locked(git: Git) -> Result<String, GitError> {
    let _turn = REPO_LOCK.lock().await;
    git.run().await
}

impl From<GitError> for WorktreeError {
    fn from(e: GitError) -> Self {
        match e {
            GitError::Spawn { source, .. } => WorktreeError::GitMissing { source },
            e => WorktreeError::Git(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_git_is_git_missing() {
        let err = Git::with_program(OsStr::new("cadre-test-no-such-git"), Path::new("."))
            .args(["status"])
            .run()
            .await
            .map_err(WorktreeError::from)
            .err();
        let Some(err @ WorktreeError::GitMissing { .. }) = err else {
            panic!("expected GitMissing, got {err:?}");
        };
        let message = err.to_string();
        assert!(message.contains("install git"), "{message}");
        assert!(message.contains("drop isolation"), "{message}");
    }

    /// The orchestrator runs these on spawned tasks.
    #[test]
    fn futures_are_send() {
        fn send<T: Send>(_: &T) {}
        let dir = Path::new(".");
        send(&Worktree::create(dir, "r", "main/code"));
        send(&branches(dir, "r"));
        send(&delete_branches(dir, "r"));
    }

    #[test]
    fn run_ids_that_cannot_name_a_branch_are_refused() {
        for ok in ["20261201-101500-1234", "r1", "a.b_c"] {
            assert!(check_run_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "../x", "a/b", ".x", "-x", "a..b", "x.lock", "x.", "a b", "a~1",
        ] {
            assert!(
                matches!(check_run_id(bad), Err(WorktreeError::InvalidRunId { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_failure_without_stderr_names_the_exit_status() {
        use crate::git::GitOutput;
        use std::os::unix::process::ExitStatusExt;
        let out = GitOutput {
            status: std::process::ExitStatus::from_raw(1 << 8),
            stdout: Vec::new(),
            stderr: String::new(),
            command: "git -C . status".to_string(),
        };
        assert_eq!(
            out.failure().to_string(),
            "`git -C . status` failed: exit status: 1"
        );
    }
}
