use cadre_tools::worktree::{branches, delete_branches};
use cadre_tools::{agent_slug, Finished, Worktree, WorktreeError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs git in `dir`, isolated from the caller's repository variables; fails the test
/// when git fails or is missing.
fn git_output(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap_or_else(|e| panic!("git is needed for these tests and could not run: {e}"))
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A repository with `README.md` committed; `root()` is its (canonical) top folder.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    /// A repository with no commit, its identity configured locally.
    fn empty() -> Self {
        let repo = Self::bare_init();
        git(&repo.root(), &["config", "user.name", "Test User"]);
        git(&repo.root(), &["config", "user.email", "test@example.com"]);
        repo
    }

    /// `git init` and nothing else.
    fn bare_init() -> Self {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q"]);
        Self { dir }
    }

    fn new() -> Self {
        let repo = Self::empty();
        repo.write("README.md", "hello\n");
        repo.commit_all("init");
        repo
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn write(&self, rel: &str, content: &str) {
        write(&self.root(), rel, content);
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).unwrap()
    }

    fn commit_all(&self, message: &str) {
        git(&self.root(), &["add", "-A"]);
        git(&self.root(), &["commit", "-q", "-m", message]);
    }

    fn status(&self) -> String {
        git(&self.root(), &["status", "--porcelain"])
    }

    fn show(&self, branch: &str, file: &str) -> String {
        git(&self.root(), &["show", &format!("{branch}:{file}")])
    }

    /// Every local branch, `cadre/…` or not.
    fn all_branches(&self) -> Vec<String> {
        git(&self.root(), &["branch", "--format=%(refname:short)"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn write(dir: &Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

async fn create(root: &Path, run: &str, agent: &str) -> Worktree {
    Worktree::create(root, run, agent)
        .await
        .unwrap_or_else(|e| panic!("create {run} {agent}: {e}"))
}

#[tokio::test]
async fn a_worktree_whose_git_was_removed_or_that_switched_branch_commits_nothing() {
    let repo = Repo::new();
    // The person's own uncommitted work in the main checkout.
    repo.write("README.md", "edited by the person\n");
    let before = repo.status();
    let log = || git(&repo.root(), &["log", "--all", "--oneline"]);
    let commits = log();
    let wt = create(&repo.root(), "r1", "main/code#1").await;
    std::fs::remove_file(wt.path.join(".git")).unwrap();
    write(&wt.path, "new.txt", "x\n");
    let path = wt.path.clone();
    match wt.finish("m").await {
        Err(WorktreeError::NotIntact { why, .. }) => {
            assert!(why.contains("repository"), "{why}")
        }
        other => panic!("expected NotIntact, got {other:?}"),
    }
    assert_eq!(repo.status(), before, "the main checkout was staged");
    assert_eq!(log(), commits, "something was committed");
    assert!(
        path.exists(),
        "the folder must stay for a person to look at"
    );

    let wt = create(&repo.root(), "r2", "main/code#1").await;
    git(&wt.path, &["switch", "-q", "-c", "elsewhere"]);
    write(&wt.path, "new.txt", "x\n");
    match wt.finish("m").await {
        Err(WorktreeError::NotIntact { why, .. }) => {
            assert!(why.contains("elsewhere"), "{why}")
        }
        other => panic!("expected NotIntact, got {other:?}"),
    }
    assert_eq!(log(), commits);
}

async fn committed(wt: Worktree, message: &str) -> (String, String) {
    match wt.finish(message).await {
        Ok(Finished::Committed { branch, diffstat }) => (branch, diffstat),
        other => panic!("expected Committed, got {other:?}"),
    }
}

#[test]
fn agent_slugs() {
    assert_eq!(agent_slug("main/code#2"), "code-2");
    assert_eq!(agent_slug("main/review#1/Code Review#10"), "code-review-10");
    assert_eq!(agent_slug("code"), "code");
    assert_eq!(agent_slug("main/--x__y--"), "x-y");
    assert_eq!(agent_slug("main/"), "agent");
    assert_eq!(agent_slug("main/café#3"), "caf-3");
}

#[tokio::test]
async fn finish_commits_changes_on_the_branch_and_leaves_the_main_checkout_alone() {
    let repo = Repo::new();
    let root = repo.root();
    // Unstaged and untracked changes in the main checkout are fine and stay out.
    repo.write("README.md", "edited in main\n");
    repo.write("scratch.txt", "untracked\n");
    let status_before = repo.status();

    let wt = create(&root, "20261201-101500-1234", "main/code#2").await;
    assert_eq!(wt.branch, "cadre/20261201-101500-1234/code-2");
    assert_eq!(
        wt.path,
        root.join(".cadre/worktrees/20261201-101500-1234/code-2")
    );
    assert_eq!(wt.workspace(), wt.path);
    assert_eq!(wt.repo(), root);
    assert_eq!(wt.base(), git(&root, &["rev-parse", "HEAD"]).trim());
    assert_eq!(
        std::fs::read_to_string(wt.path.join("README.md")).unwrap(),
        "hello\n",
        "the worktree starts from HEAD"
    );
    assert!(!wt.path.join("scratch.txt").exists());
    assert_eq!(
        repo.status(),
        status_before,
        "a live worktree does not show in the main checkout's status"
    );

    write(&wt.path, "src/new.txt", "from the agent\n");
    write(&wt.path, "README.md", "hello\nagain\n");
    let path = wt.path.clone();
    let base = wt.base().to_string();
    let (branch, diffstat) = committed(wt, "code#2: add new.txt").await;

    assert_eq!(branch, "cadre/20261201-101500-1234/code-2");
    assert!(diffstat.contains("src/new.txt"), "{diffstat}");
    assert!(diffstat.contains("README.md"), "{diffstat}");
    assert!(diffstat.contains("2 files changed"), "{diffstat}");
    assert_eq!(repo.show(&branch, "src/new.txt"), "from the agent\n");
    assert_eq!(repo.show(&branch, "README.md"), "hello\nagain\n");
    assert_eq!(
        git(&root, &["log", "-1", "--format=%s", &branch]).trim(),
        "code#2: add new.txt"
    );
    assert_eq!(
        git(&root, &["rev-parse", &format!("{branch}^")]).trim(),
        base,
        "one commit on top of the base"
    );

    assert_eq!(repo.read("README.md"), "edited in main\n");
    assert!(!root.join("src/new.txt").exists());
    assert_eq!(repo.status(), status_before);
    assert!(!path.exists(), "the worktree folder is gone");
    assert!(!root.join(".cadre/worktrees/20261201-101500-1234").exists());
    assert!(!git(&root, &["worktree", "list"]).contains("code-2"));
    assert_eq!(
        branches(&root, "20261201-101500-1234").await.unwrap(),
        vec![branch]
    );
}

#[tokio::test]
async fn finish_without_changes_leaves_no_branch_and_no_folder() {
    let repo = Repo::new();
    let root = repo.root();
    let wt = create(&root, "run-1", "main/explore#1").await;
    let path = wt.path.clone();
    assert!(path.join("README.md").exists());

    assert_eq!(wt.finish("nothing").await.unwrap(), Finished::Unchanged);
    assert!(branches(&root, "run-1").await.unwrap().is_empty());
    assert_eq!(repo.all_branches().len(), 1, "{:?}", repo.all_branches());
    assert!(!path.exists());
    assert!(!root.join(".cadre/worktrees/run-1").exists());
    assert_eq!(repo.status(), "");
}

#[tokio::test]
async fn commits_the_agent_made_itself_count_as_changes() {
    let repo = Repo::new();
    let root = repo.root();
    let wt = create(&root, "run-1", "main/code").await;
    write(&wt.path, "done.txt", "committed by the agent\n");
    git(&wt.path, &["add", "done.txt"]);
    git(&wt.path, &["commit", "-q", "-m", "agent's own commit"]);

    let (branch, diffstat) = committed(wt, "unused").await;
    assert!(diffstat.contains("done.txt"), "{diffstat}");
    assert_eq!(repo.show(&branch, "done.txt"), "committed by the agent\n");
    assert_eq!(
        git(&root, &["log", "-1", "--format=%s", &branch]).trim(),
        "agent's own commit",
        "no empty commit on top"
    );
}

#[tokio::test]
async fn new_files_count_even_when_status_hides_untracked_files() {
    let repo = Repo::new();
    let root = repo.root();
    git(&root, &["config", "status.showUntrackedFiles", "no"]);
    let wt = create(&root, "run-1", "main/code").await;
    write(&wt.path, "brand-new.txt", "new\n");
    let (branch, diffstat) = committed(wt, "new file").await;
    assert!(diffstat.contains("brand-new.txt"), "{diffstat}");
    assert_eq!(repo.show(&branch, "brand-new.txt"), "new\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_agents_of_a_run_get_their_own_branches() {
    let repo = Repo::new();
    let root = repo.root();
    let (one, two) = tokio::join!(
        Worktree::create(&root, "run-1", "main/code#1"),
        Worktree::create(&root, "run-1", "main/code#2"),
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_ne!(one.path, two.path);
    write(&one.path, "shared.txt", "version one\n");
    write(&two.path, "shared.txt", "version two\n");

    let (one, two) = tokio::join!(one.finish("one"), two.finish("two"));
    let (Ok(Finished::Committed { branch: b1, .. }), Ok(Finished::Committed { branch: b2, .. })) =
        (one, two)
    else {
        panic!("expected two commits");
    };
    assert_eq!(b1, "cadre/run-1/code-1");
    assert_eq!(b2, "cadre/run-1/code-2");
    assert_eq!(
        branches(&root, "run-1").await.unwrap(),
        vec![b1.clone(), b2.clone()]
    );
    assert_eq!(repo.show(&b1, "shared.txt"), "version one\n");
    assert_eq!(repo.show(&b2, "shared.txt"), "version two\n");
    assert!(!root.join("shared.txt").exists());
    assert!(!root.join(".cadre/worktrees/run-1").exists());
    assert_eq!(repo.status(), "");
}

#[tokio::test]
async fn outside_a_repository_is_not_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let err = Worktree::create(dir.path(), "run-1", "main/code")
        .await
        .unwrap_err();
    let WorktreeError::NotARepository { dir: reported } = &err else {
        panic!("expected NotARepository, got {err:?}");
    };
    assert_eq!(reported, dir.path());
    let message = err.to_string();
    assert!(message.contains("git init"), "{message}");
    assert!(message.contains("drop isolation"), "{message}");

    // Inside `.git` there is a repository but no work tree.
    let repo = Repo::new();
    let err = Worktree::create(&repo.root().join(".git"), "run-1", "main/code")
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorktreeError::NotARepository { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_repository_without_commits_is_no_commit() {
    let repo = Repo::empty();
    repo.write("a.txt", "a\n");
    let err = Worktree::create(&repo.root(), "run-1", "main/code")
        .await
        .unwrap_err();
    assert!(matches!(err, WorktreeError::NoCommit { .. }), "{err:?}");
    assert!(err.to_string().contains("git commit"), "{err}");
    assert!(!repo.root().join(".cadre").exists());
}

#[tokio::test]
async fn staged_changes_are_dirty_index() {
    let repo = Repo::new();
    let root = repo.root();
    repo.write("README.md", "staged\n");
    git(&root, &["add", "README.md"]);

    let err = Worktree::create(&root, "run-1", "main/code")
        .await
        .unwrap_err();
    assert!(matches!(err, WorktreeError::DirtyIndex { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("unstage"), "{message}");
    assert!(message.contains("commit"), "{message}");
    assert!(branches(&root, "run-1").await.unwrap().is_empty());
    assert!(!root.join(".cadre").exists());
}

#[tokio::test]
async fn invalid_run_ids_are_refused() {
    let repo = Repo::new();
    for run in ["", "../escape", "a/b", ".hidden"] {
        let err = Worktree::create(&repo.root(), run, "main/code")
            .await
            .unwrap_err();
        assert!(
            matches!(err, WorktreeError::InvalidRunId { .. }),
            "{run}: {err:?}"
        );
    }
    assert!(!repo.root().join(".cadre").exists());
    assert_eq!(repo.all_branches().len(), 1);
}

#[tokio::test]
async fn a_workspace_subfolder_maps_into_the_worktree() {
    let repo = Repo::new();
    let root = repo.root();
    repo.write("crates/app/src/lib.rs", "pub fn app() {}\n");
    repo.commit_all("app");

    let wt = create(&root.join("crates/app"), "run-1", "main/code").await;
    assert_eq!(wt.path, root.join(".cadre/worktrees/run-1/code"));
    assert_eq!(wt.workspace(), wt.path.join("crates/app"));
    assert_eq!(
        std::fs::read_to_string(wt.workspace().join("src/lib.rs")).unwrap(),
        "pub fn app() {}\n"
    );
    write(&wt.workspace(), "src/more.rs", "pub fn more() {}\n");
    let (branch, diffstat) = committed(wt, "more").await;
    assert!(diffstat.contains("crates/app/src/more.rs"), "{diffstat}");
    assert_eq!(
        repo.show(&branch, "crates/app/src/more.rs"),
        "pub fn more() {}\n"
    );

    // A folder holding only untracked files is not checked out, yet must exist.
    repo.write("fresh/notes.txt", "untracked\n");
    let wt = create(&root.join("fresh"), "run-2", "main/code").await;
    assert_eq!(wt.workspace(), wt.path.join("fresh"));
    assert!(wt.workspace().is_dir());
    assert!(!wt.workspace().join("notes.txt").exists());
    assert_eq!(wt.finish("empty").await.unwrap(), Finished::Unchanged);
}

#[tokio::test]
async fn discard_removes_the_worktree_and_branch_whatever_they_hold() {
    let repo = Repo::new();
    let root = repo.root();
    let wt = create(&root, "run-1", "main/code").await;
    write(&wt.path, "work.txt", "thrown away\n");
    let path = wt.path.clone();
    wt.discard().await.unwrap();
    assert!(!path.exists());
    assert!(branches(&root, "run-1").await.unwrap().is_empty());
    assert_eq!(repo.all_branches().len(), 1);
    assert_eq!(repo.status(), "");
}

#[tokio::test]
async fn delete_branches_clears_one_run_and_leaves_the_others() {
    let repo = Repo::new();
    let root = repo.root();

    let done = create(&root, "r1", "main/code#1").await;
    write(&done.path, "a.txt", "a\n");
    committed(done, "a").await;
    // Dropped without finishing, as after a crash: its worktree stays on disk.
    let left = create(&root, "r1", "main/code#2").await;
    write(&left.path, "b.txt", "b\n");
    let left_path = left.path.clone();
    drop(left);
    // A run whose id starts like the other's.
    let other = create(&root, "r10", "main/code#1").await;
    write(&other.path, "c.txt", "c\n");
    committed(other, "c").await;

    assert_eq!(
        delete_branches(&root, "r1").await.unwrap(),
        vec!["cadre/r1/code-1", "cadre/r1/code-2"]
    );
    assert!(branches(&root, "r1").await.unwrap().is_empty());
    assert_eq!(
        branches(&root, "r10").await.unwrap(),
        vec!["cadre/r10/code-1"]
    );
    assert_eq!(repo.show("cadre/r10/code-1", "c.txt"), "c\n");
    assert!(!left_path.exists());
    assert!(!root.join(".cadre/worktrees/r1").exists());
    let list = git(&root, &["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("worktree ").count(), 1, "{list}");

    // Nothing left: nothing to delete.
    assert!(delete_branches(&root, "r1").await.unwrap().is_empty());
}

#[tokio::test]
async fn finish_commits_without_a_configured_identity() {
    // No identity in the repository's own config (the machine's may have one).
    let repo = Repo::bare_init();
    let root = repo.root();
    repo.write("README.md", "hello\n");
    git(&root, &["add", "-A"]);
    git(
        &root,
        &[
            "-c",
            "user.name=Setup",
            "-c",
            "user.email=setup@example.com",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    );
    let local_name = git_output(&root, &["config", "--local", "--get", "user.name"]);
    assert!(!local_name.status.success());

    let wt = create(&root, "run-1", "main/code").await;
    write(&wt.path, "x.txt", "x\n");
    let (branch, _) = committed(wt, "x").await;

    let author = git(&root, &["log", "-1", "--format=%an <%ae>", &branch]);
    let name = git_output(&root, &["config", "--get", "user.name"]);
    let email = git_output(&root, &["config", "--get", "user.email"]);
    let expected_name = if name.status.success() {
        String::from_utf8(name.stdout).unwrap().trim().to_string()
    } else {
        "cadre".to_string()
    };
    let expected_email = if email.status.success() {
        String::from_utf8(email.stdout).unwrap().trim().to_string()
    } else {
        "cadre@localhost".to_string()
    };
    assert_eq!(author.trim(), format!("{expected_name} <{expected_email}>"));
    // The user's config is untouched.
    let local_name = git_output(&root, &["config", "--local", "--get", "user.name"]);
    assert!(!local_name.status.success());
}

#[tokio::test]
async fn a_left_over_branch_is_taken_up_again_or_refused_naming_the_fix() {
    let repo = Repo::new();
    let base = git(&repo.root(), &["rev-parse", "HEAD"]).trim().to_owned();
    // A run killed while its agent worked: the worktree is left, with the agent's write.
    let wt = create(&repo.root(), "r1", "main/code#1").await;
    write(&wt.path, "note.txt", "written before the kill\n");
    let path = wt.path.clone();
    drop(wt);
    let again = create(&repo.root(), "r1", "main/code#1").await;
    assert_eq!(again.path, path);
    assert_eq!(again.base(), base);
    assert_eq!(
        std::fs::read_to_string(path.join("note.txt")).unwrap(),
        "written before the kill\n"
    );
    let (branch, _) = committed(again, "m").await;
    assert_eq!(branch, "cadre/r1/code-1");
    // The branch stands and its folder is gone: it is checked out again.
    let again = create(&repo.root(), "r1", "main/code#1").await;
    assert!(again.path.join("note.txt").is_file());
    assert_eq!(again.base(), base);
    // A folder that is no longer its checkout is not taken over: the fix is named.
    std::fs::remove_file(again.path.join(".git")).unwrap();
    drop(again);
    let refused = Worktree::create(&repo.root(), "r1", "main/code#1").await;
    match refused {
        Err(e @ WorktreeError::Leftover { .. }) => {
            assert!(
                e.to_string().contains("cadre runs branches r1 --delete"),
                "{e}"
            )
        }
        other => panic!("expected Leftover, got {other:?}"),
    }
}
