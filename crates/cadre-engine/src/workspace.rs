//! The git checkouts agents work in on a worker.
//!
//! A run names a repository (a URL, or an absolute path) and a commit. Each worker keeps
//! a [`CloneCache`]: one bare clone per repository under `<root>/repos/`, fetched on demand
//! so it holds the commits asked for. Read-only agents share a detached checkout of the
//! commit (`<root>/checkouts/`); a writing agent gets a [`WriterTree`], a worktree on its own
//! branch `cadre/<run>/<slug>` (the branch a local run's
//! [`Worktree`](cadre_tools::Worktree) makes), under `<root>/worktrees/`.
//!
//! A worker can die mid-agent and the agent be replayed elsewhere, so the writer's files
//! travel through the repository: [`WriterTree::checkpoint`] commits everything and
//! force-pushes it to `refs/cadre/<run>/wip/<slug>`, [`WriterTree::restore`] brings a
//! tree (on any worker) back to such a checkpoint, and [`WriterTree::finish`] pushes the
//! branch and drops the wip ref.
//!
//! Git runs as a subprocess with no hooks, no signing, no automatic gc (which could repack
//! under another command) and a fixed identity, so a checkpoint means the same thing on
//! every worker. Commands that change a clone's shared state (fetching, adding and
//! removing worktrees, deleting branches) take the clone's lock: an async mutex for the
//! agents of this process and an advisory file lock for other processes sharing the root.

mod error;
mod lock;

pub use error::WorkspaceError;

use lock::{Locks, RepoLock};
use std::path::{Path, PathBuf};

use cadre_tools::git::{create_dir_all, is_valid_run_id, not_intact, same_dir, Git, GitError};
use cadre_tools::worktree::{branch_name, commit, remove};
use cadre_tools::{agent_slug, Finished};
use sha2::{Digest, Sha256};

/// Settings every git command here gets, before its subcommand.
///
/// No hooks or fsmonitor (nobody is there to act on them, and a repository's config must
/// not run programs on a worker), no signing (no keys on workers), no automatic gc or
/// maintenance (it would repack while another agent's command reads the clone).
const GIT_SETTINGS: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// The identity of every commit cadre makes here, whatever the worker's git config says.
const IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "cadre"),
    ("GIT_AUTHOR_EMAIL", "cadre@localhost"),
    ("GIT_COMMITTER_NAME", "cadre"),
    ("GIT_COMMITTER_EMAIL", "cadre@localhost"),
];

/// Where fetched commits are kept in a clone, so they stay reachable.
const CACHE_REFS: &str = "refs/cadre-cache";

/// A worker's cache of clones, one per repository URL, under `root`.
#[derive(Debug, Clone)]
pub struct CloneCache {
    root: PathBuf,
    locks: Locks,
}

impl CloneCache {
    /// A cache under `root` (made when first used; a relative root is taken from the
    /// current directory now).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        Self {
            root,
            locks: Locks::default(),
        }
    }

    /// The default root: `$CADRE_CACHE` or the user's cache dir (`$XDG_CACHE_HOME/cadre` or `~/.cache/cadre`).
    pub fn default_root() -> PathBuf {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(root) = var("CADRE_CACHE") {
            return PathBuf::from(root);
        }
        // The XDG spec says to ignore a relative XDG_CACHE_HOME.
        if let Some(xdg) = var("XDG_CACHE_HOME").map(PathBuf::from) {
            if xdg.is_absolute() {
                return xdg.join("cadre");
            }
        }
        match var("HOME") {
            Some(home) => PathBuf::from(home).join(".cache").join("cadre"),
            None => std::env::temp_dir().join("cadre-cache"),
        }
    }

    /// The cache's root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The local clone of `url` (under root/repos/<sha256(url) hex, short>), fetched so that it holds `commit`.
    ///
    /// `commit` is a commit id (a full one is fetched alone when the server allows it), or
    /// the name of a branch or tag of the repository (all of which are then fetched).
    pub async fn repo(&self, url: &str, commit: &str) -> Result<PathBuf, WorkspaceError> {
        let (repo, _, _lock) = self.fetched(url, commit).await?;
        Ok(repo)
    }

    /// A shared detached checkout of `commit`, for read-only agents (made once per commit, reused, never written by cadre).
    pub async fn read_only(&self, url: &str, commit: &str) -> Result<PathBuf, WorkspaceError> {
        let key = url_key(url);
        let dir = self.root.join("checkouts").join(&key);
        // The common case, a checkout made earlier, needs no lock.
        if is_full_id(commit) && is_checkout_of(&dir.join(commit), commit).await {
            return Ok(dir.join(commit));
        }
        let (repo, sha, _lock) = self.fetched(url, commit).await?;
        let path = dir.join(&sha);
        if is_checkout_of(&path, &sha).await {
            return Ok(path);
        }
        // Made aside and moved into place, so a checkout cut short by a crash is never
        // taken for a finished one.
        let partial = dir.join(format!("{sha}.partial"));
        discard_tree(&repo, &path).await?;
        discard_tree(&repo, &partial).await?;
        prune(&repo).await?;
        create_dir_all(&dir).await?;
        git(&repo)
            .args(["worktree", "add", "--quiet", "--detach"])
            .arg(&partial)
            .arg(&sha)
            .run()
            .await?;
        git(&repo)
            .args(["worktree", "move"])
            .arg(&partial)
            .arg(&path)
            .run()
            .await?;
        Ok(path)
    }

    /// A worktree for the writing agent `agent` (its path in the agent tree, e.g. `main/code#2`) of run `run`, on branch `cadre/<run>/<slug>` starting at `base`. If the worktree already exists on this worker (a replay), it is reused.
    ///
    /// A reused worktree keeps whatever it holds; [`WriterTree::restore`] brings it to the
    /// last checkpoint. When the branch exists in the clone but its folder is gone, the
    /// folder is checked out again from the branch.
    pub async fn writer(
        &self,
        url: &str,
        base: &str,
        run_id: &str,
        agent: &str,
    ) -> Result<WriterTree, WorkspaceError> {
        if !is_valid_run_id(run_id) {
            return Err(WorkspaceError::InvalidRunId {
                run_id: run_id.to_string(),
            });
        }
        let (repo, base, _lock) = self.fetched(url, base).await?;
        let slug = agent_slug(agent);
        let branch = branch_name(run_id, &slug);
        let run_dir = self.root.join("worktrees").join(url_key(url)).join(run_id);
        let tree = WriterTree {
            path: run_dir.join(&slug),
            branch,
            base,
            url: url.to_string(),
            repo,
            wip_ref: format!("refs/cadre/{run_id}/wip/{slug}"),
            cache_ref: format!("{CACHE_REFS}/wip/{run_id}/{slug}"),
            locks: self.locks.clone(),
        };
        if tree.check_intact().await.is_ok() {
            // A replay: no git of the agent's is still at work on this tree, so an index
            // lock left by one that died with its worker is stale, and would fail every
            // later `git add`.
            let lock = git(&tree.path)
                .args(["rev-parse", "--git-path", "index.lock"])
                .run()
                .await?;
            remove_file_if_any(&tree.path.join(lock)).await?;
            return Ok(tree);
        }
        discard_tree(&tree.repo, &tree.path).await?;
        prune(&tree.repo).await?;
        create_dir_all(&run_dir).await?;
        let has_branch = git(&tree.repo)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{}", tree.branch))
            .output()
            .await?
            .status
            .success();
        let add = git(&tree.repo).args(["worktree", "add", "--quiet"]);
        let add = if has_branch {
            add.arg(&tree.path).arg(&tree.branch)
        } else {
            add.args(["-b", &tree.branch])
                .arg(&tree.path)
                .arg(&tree.base)
        };
        add.run().await?;
        Ok(tree)
    }

    /// The clone of `url`, holding `commit`; the commit's full id; the clone's lock, held.
    async fn fetched(
        &self,
        url: &str,
        commit: &str,
    ) -> Result<(PathBuf, String, RepoLock), WorkspaceError> {
        let key = url_key(url);
        let repos = self.root.join("repos");
        let repo = repos.join(&key);
        let lock = self.locks.lock(&self.root, &key).await?;

        // A clone is usable once `git init` finished; one cut short is made again.
        if !is_bare_repo(&repo).await {
            remove_dir_all(&repo).await?;
            create_dir_all(&repos).await?;
            git(&repos)
                .args(["init", "--quiet", "--bare"])
                .arg(&repo)
                .run()
                .await?;
        }
        if let Some(sha) = git(&repo).resolve(commit).await? {
            return Ok((repo, sha, lock));
        }
        if is_full_id(commit) {
            // Servers may refuse a want of an unadvertised commit; the fallback covers it.
            let _ = fetch(
                &repo,
                url,
                &[&format!("+{commit}:{CACHE_REFS}/commits/{commit}")],
            )
            .await;
            if let Some(sha) = git(&repo).resolve(commit).await? {
                return Ok((repo, sha, lock));
            }
        }
        // Every branch and tag, under CACHE_REFS.
        let heads = format!("+refs/heads/*:{CACHE_REFS}/heads/*");
        let tags = format!("+refs/tags/*:{CACHE_REFS}/tags/*");
        fetch(&repo, url, &[&heads, &tags]).await?;
        // A branch or tag name: fetched again on every call, so it means what it means now.
        for name in [
            commit.to_string(),
            format!("{CACHE_REFS}/heads/{commit}"),
            format!("{CACHE_REFS}/tags/{commit}"),
        ] {
            if let Some(sha) = git(&repo).resolve(&name).await? {
                return Ok((repo, sha, lock));
            }
        }
        Err(WorkspaceError::CommitNotFound {
            url: url.to_string(),
            commit: commit.to_string(),
        })
    }
}

/// A writing agent's worktree on one worker.
#[derive(Debug)]
#[must_use = "the worktree stays on this worker until `finish`"]
pub struct WriterTree {
    path: PathBuf,
    branch: String,
    /// The full id of the commit the branch starts at.
    base: String,
    url: String,
    /// The clone the worktree belongs to.
    repo: PathBuf,
    /// The checkpoint ref on the repository, `refs/cadre/<run>/wip/<slug>`.
    wip_ref: String,
    /// Where a fetched checkpoint is kept in the clone.
    cache_ref: String,
    locks: Locks,
}

impl WriterTree {
    /// The worktree's folder, where the agent works.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its branch, `cadre/<run>/<slug>`.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The full id of the commit the branch started at.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The ref checkpoints are pushed to, `refs/cadre/<run>/wip/<slug>`.
    pub fn wip_ref(&self) -> &str {
        &self.wip_ref
    }

    /// Commits every change (untracked files included; fixed identity, no hooks, no signing) and force-pushes it to `refs/cadre/<run>/wip/<slug>` on the repository; returns the commit id (the current HEAD when nothing changed, still pushed).
    pub async fn checkpoint(&self, message: &str) -> Result<String, WorkspaceError> {
        self.check_intact().await?;
        let head = self.commit_all(message, "checkpoint").await?;
        push(&self.repo, &self.url, &format!("{head}:{}", self.wip_ref)).await?;
        Ok(head)
    }

    /// Makes the tree exactly `sha` (fetching the wip ref / the sha from the repository when this clone lacks it), so a replay on another worker continues on the same files. No-op when HEAD is `sha` and the tree is clean.
    ///
    /// The branch is moved to `sha`. Files the repository ignores are left alone: they
    /// are never part of a checkpoint, and a replay on the same worker keeps its build
    /// outputs.
    pub async fn restore(&self, sha: &str) -> Result<(), WorkspaceError> {
        self.check_intact().await?;
        let head = self.head().await?;
        if head == sha && git(&self.path).is_clean().await? {
            return Ok(());
        }
        if git(&self.repo).resolve(sha).await?.is_none() {
            let _lock = self.locks.lock_repo(&self.repo).await?;
            let _ = fetch(
                &self.repo,
                &self.url,
                &[&format!("+{}:{}", self.wip_ref, self.cache_ref)],
            )
            .await;
            if git(&self.repo).resolve(sha).await?.is_none() && is_full_id(sha) {
                let _ = fetch(
                    &self.repo,
                    &self.url,
                    &[&format!("+{sha}:{CACHE_REFS}/commits/{sha}")],
                )
                .await;
            }
            if git(&self.repo).resolve(sha).await?.is_none() {
                return Err(WorkspaceError::CommitNotFound {
                    url: self.url.clone(),
                    commit: sha.to_string(),
                });
            }
        }
        git(&self.path)
            .args(["reset", "--quiet", "--hard", sha])
            .run()
            .await?;
        // -ff: nested repositories the agent made are not part of the checkpoint either.
        git(&self.path).args(["clean", "-ffdq"]).run().await?;
        Ok(())
    }

    /// Commits what is left, and if the branch moved from `base` pushes `cadre/<run>/<slug>` to the repository (force: a replay may push again) and reports `cadre_tools::Finished::Committed { branch, diffstat }` (diffstat as the local Worktree::finish makes it); else `Finished::Unchanged`. Deletes the wip ref on the repository and removes the local worktree either way.
    pub async fn finish(self, message: &str) -> Result<Finished, WorkspaceError> {
        self.check_intact().await?;
        let head = self.commit_all(message, "work").await?;
        let finished = if head == self.base {
            Finished::Unchanged
        } else {
            push(
                &self.repo,
                &self.url,
                &format!("{head}:refs/heads/{}", self.branch),
            )
            .await?;
            let diffstat = git(&self.path).diffstat(&self.base, &head).await?;
            Finished::Committed {
                branch: self.branch.clone(),
                diffstat,
            }
        };

        // Deleting a ref the repository lacks is an error, so look first.
        // (ls-remote matches patterns by their tail, so the name is compared whole.)
        let listed = git(&self.repo)
            .args(["ls-remote", &self.url, &self.wip_ref])
            .run()
            .await?;
        if listed
            .lines()
            .any(|line| line.split('\t').nth(1) == Some(self.wip_ref.as_str()))
        {
            push(&self.repo, &self.url, &format!(":{}", self.wip_ref)).await?;
        }

        let _lock = self.locks.lock_repo(&self.repo).await?;
        // The work is on the repository now; the clone keeps only what runs fetch.
        remove(|| git(&self.repo), &self.path, Some(&self.branch)).await?;
        git(&self.repo)
            .args(["update-ref", "-d", &self.cache_ref])
            .run()
            .await?;
        Ok(finished)
    }

    /// Stages everything and commits it when anything is staged; returns HEAD's id.
    async fn commit_all(&self, message: &str, what: &str) -> Result<String, WorkspaceError> {
        git(&self.path).args(["add", "--all"]).run().await?;
        if git(&self.path).has_staged().await? {
            let mut identity = git(&self.path);
            for (key, value) in IDENTITY {
                identity = identity.env(key, value);
            }
            commit(identity, message, what, &self.branch).await?;
        }
        self.head().await
    }

    /// HEAD's commit id.
    async fn head(&self) -> Result<String, WorkspaceError> {
        Ok(git(&self.path)
            .args(["rev-parse", "--verify", "HEAD"])
            .run()
            .await?)
    }

    /// Fails unless the folder is still this worktree, on its branch: an agent that removed
    /// its `.git` would otherwise have git look for a repository above it.
    async fn check_intact(&self) -> Result<(), WorkspaceError> {
        match not_intact(&self.path, &self.branch).await {
            None => Ok(()),
            Some(why) => Err(WorkspaceError::NotIntact {
                path: self.path.clone(),
                branch: self.branch.clone(),
                why,
            }),
        }
    }
}

/// The folder name of a repository URL's clone: the start of its SHA-256, in hex.
fn url_key(url: &str) -> String {
    Sha256::digest(url.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `commit` is a full commit id (SHA-1 or SHA-256), which a fetch can ask for.
fn is_full_id(commit: &str) -> bool {
    matches!(commit.len(), 40 | 64) && commit.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `git -C dir -c …`, with [`GIT_SETTINGS`].
fn git(dir: &Path) -> Git {
    let mut git = Git::new(dir);
    for setting in GIT_SETTINGS {
        git = git.arg("-c").arg(setting);
    }
    git
}

/// Fetches `refspecs` from `url` into `repo`.
async fn fetch(repo: &Path, url: &str, refspecs: &[&str]) -> Result<(), WorkspaceError> {
    git(repo)
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            url,
        ])
        .args(refspecs)
        .run()
        .await?;
    Ok(())
}

/// Force-pushes `refspec` from `repo` to `url`.
///
/// To the URL rather than a configured remote, so pushing writes no remote-tracking ref
/// in the clone and needs no lock.
async fn push(repo: &Path, url: &str, refspec: &str) -> Result<(), WorkspaceError> {
    git(repo)
        .args(["push", "--quiet", "--force", "--no-verify", url, refspec])
        .run()
        .await?;
    Ok(())
}

/// Whether `repo` is a bare repository of its own.
async fn is_bare_repo(repo: &Path) -> bool {
    if !tokio::fs::try_exists(repo.join("HEAD"))
        .await
        .unwrap_or(false)
    {
        return false;
    }
    let answer = git(repo)
        .args(["rev-parse", "--is-bare-repository", "--absolute-git-dir"])
        .run()
        .await;
    match answer {
        Ok(answer) => {
            let mut lines = answer.lines();
            lines.next() == Some("true")
                && lines.next().is_some_and(|d| same_dir(Path::new(d), repo))
        }
        Err(_) => false,
    }
}

/// Whether `path` is a checkout of its own whose HEAD is `sha`.
async fn is_checkout_of(path: &Path, sha: &str) -> bool {
    if !tokio::fs::try_exists(path.join(".git"))
        .await
        .unwrap_or(false)
    {
        return false;
    }
    match git(path)
        .args(["rev-parse", "--show-toplevel", "HEAD"])
        .run()
        .await
    {
        Ok(answer) => {
            let mut lines = answer.lines();
            lines
                .next()
                .is_some_and(|top| same_dir(Path::new(top), path))
                && lines.next() == Some(sha)
        }
        Err(_) => false,
    }
}

/// Removes a worktree of `repo` at `path`, registered or not, if anything is there.
async fn discard_tree(repo: &Path, path: &Path) -> Result<(), WorkspaceError> {
    if tokio::fs::symlink_metadata(path).await.is_err() {
        return Ok(());
    }
    // Fails when git no longer knows it as a worktree; removing the folder is what counts.
    let _ = git(repo)
        .args(["worktree", "remove", "--force", "--force"])
        .arg(path)
        .run()
        .await;
    remove_dir_all(path).await
}

/// `git worktree prune`: forgets worktrees whose folder is gone, so their branch and path
/// can be checked out again.
async fn prune(repo: &Path) -> Result<(), WorkspaceError> {
    git(repo).args(["worktree", "prune"]).run().await?;
    Ok(())
}

/// `rm -f`.
async fn remove_file_if_any(path: &Path) -> Result<(), WorkspaceError> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WorkspaceError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// `rm -rf`, quiet when there is nothing.
async fn remove_dir_all(dir: &Path) -> Result<(), WorkspaceError> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A file where a folder should be.
        Err(_) if dir.is_file() => {
            tokio::fs::remove_file(dir)
                .await
                .map_err(|source| WorkspaceError::Io {
                    path: dir.to_path_buf(),
                    source,
                })
        }
        Err(source) => Err(WorkspaceError::Io {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

impl From<GitError> for WorkspaceError {
    fn from(e: GitError) -> Self {
        match e {
            GitError::Spawn { command, source } => WorkspaceError::GitMissing { command, source },
            e => WorkspaceError::Git(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_keys_are_short_hex_and_differ() {
        let a = url_key("file:///srv/a.git");
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, url_key("file:///srv/b.git"));
        assert_eq!(a, url_key("file:///srv/a.git"));
    }

    #[test]
    fn full_ids_are_forty_or_sixty_four_hex_digits() {
        assert!(is_full_id(&"a".repeat(40)));
        assert!(is_full_id(&"0".repeat(64)));
        assert!(!is_full_id("abc123"));
        assert!(!is_full_id("main"));
        assert!(!is_full_id(&"g".repeat(40)));
    }

    /// Workers run these on spawned tasks.
    #[test]
    fn futures_are_send() {
        fn send<T: Send>(_: &T) {}
        let cache = CloneCache::new("cache");
        send(&cache.repo("u", "c"));
        send(&cache.read_only("u", "c"));
        send(&cache.writer("u", "c", "r", "main/code"));
    }
}
