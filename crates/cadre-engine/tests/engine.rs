//! Integration tests of cadre-engine.

/// Clone caches, checkouts and writer worktrees against a real bare repository.
mod workspace {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use cadre_engine::workspace::{CloneCache, WorkspaceError};
    use cadre_testkit::git::{git, init_repo};
    use cadre_tools::git::GitError;
    use cadre_tools::Finished;
    use tempfile::TempDir;

    /// A bare repository seeded with one commit on `main`.
    struct Origin {
        _dir: TempDir,
        /// The bare repository's folder.
        bare: PathBuf,
        /// Its URL: the folder's path.
        url: String,
        /// The seeded commit.
        sha: String,
        /// Where the tests put their caches.
        scratch: PathBuf,
    }

    impl Origin {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let seed = dir.path().join("seed");
            std::fs::create_dir_all(seed.join("src")).unwrap();
            std::fs::write(seed.join("README.md"), "hello\n").unwrap();
            std::fs::write(seed.join("src/lib.rs"), "pub fn one() -> u32 { 1 }\n").unwrap();
            init_repo(&seed);
            let sha = git(&seed, &["rev-parse", "HEAD"]).trim().to_string();
            let bare = dir.path().join("origin.git");
            git(dir.path(), &["init", "-q", "--bare", "origin.git"]);
            git(
                &seed,
                &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
            );
            let scratch = dir.path().join("scratch");
            std::fs::create_dir_all(&scratch).unwrap();
            Origin {
                url: bare.to_str().unwrap().to_string(),
                bare,
                sha,
                scratch,
                _dir: dir,
            }
        }

        /// A cache of its own: another worker.
        fn worker(&self, name: &str) -> CloneCache {
            CloneCache::new(self.scratch.join(name))
        }

        /// The refs of the bare repository, `<sha> <name>` per line.
        fn refs(&self) -> Vec<String> {
            git(
                &self.bare,
                &["for-each-ref", "--format=%(objectname) %(refname)"],
            )
            .lines()
            .map(str::to_string)
            .collect()
        }

        /// The id `name` has in the bare repository, if any.
        fn ref_id(&self, name: &str) -> Option<String> {
            self.refs().iter().find_map(|line| {
                let (sha, refname) = line.split_once(' ')?;
                (refname == name).then(|| sha.to_string())
            })
        }
    }

    fn head(dir: &Path) -> String {
        git(dir, &["rev-parse", "HEAD"]).trim().to_string()
    }

    fn status(dir: &Path) -> String {
        git(dir, &["status", "--porcelain", "--untracked-files=all"])
    }

    #[tokio::test]
    async fn read_only_gives_the_commit_files_and_is_shared() {
        let origin = Origin::new();
        let cache = origin.worker("w1");

        let one = cache.read_only(&origin.url, &origin.sha).await.unwrap();
        assert!(one.starts_with(cache.root()), "{}", one.display());
        assert_eq!(
            std::fs::read_to_string(one.join("src/lib.rs")).unwrap(),
            "pub fn one() -> u32 { 1 }\n"
        );
        assert_eq!(
            std::fs::read_to_string(one.join("README.md")).unwrap(),
            "hello\n"
        );
        assert_eq!(head(&one), origin.sha);
        assert_eq!(status(&one), "");

        // A marker only a reused folder would still hold.
        std::fs::write(one.join("marker"), "x").unwrap();
        let two = cache.read_only(&origin.url, &origin.sha).await.unwrap();
        assert_eq!(one, two);
        assert!(two.join("marker").exists());

        // The same through a file:// URL: another clone, the same files.
        let url = format!("file://{}", origin.url);
        let three = cache.read_only(&url, &origin.sha).await.unwrap();
        assert_ne!(three, one);
        assert_eq!(head(&three), origin.sha);
        assert!(three.join("src/lib.rs").is_file());

        // Nothing was pushed.
        assert_eq!(origin.refs().len(), 1, "{:?}", origin.refs());
    }

    #[tokio::test]
    async fn a_checkout_removed_behind_the_cache_is_made_again() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let one = cache.read_only(&origin.url, &origin.sha).await.unwrap();
        std::fs::remove_dir_all(&one).unwrap();
        let two = cache.read_only(&origin.url, &origin.sha).await.unwrap();
        assert_eq!(one, two);
        assert!(two.join("README.md").is_file());
    }

    #[tokio::test]
    async fn a_writer_is_on_its_own_branch_at_base() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code#2")
            .await
            .unwrap();
        assert_eq!(tree.branch(), "cadre/run1/code-2");
        assert_eq!(tree.base(), origin.sha);
        assert_eq!(tree.wip_ref(), "refs/cadre/run1/wip/code-2");
        assert_eq!(
            git(tree.path(), &["symbolic-ref", "HEAD"]).trim(),
            "refs/heads/cadre/run1/code-2"
        );
        assert_eq!(head(tree.path()), origin.sha);
        assert!(tree.path().join("src/lib.rs").is_file());

        // Another writer of the run: a folder and branch of its own.
        let other = cache
            .writer(&origin.url, &origin.sha, "run1", "main/review")
            .await
            .unwrap();
        assert_ne!(other.path(), tree.path());
        assert_eq!(other.branch(), "cadre/run1/review");
    }

    #[tokio::test]
    async fn a_writer_asked_for_again_on_one_worker_is_reused() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let first = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        std::fs::write(first.path().join("draft.txt"), "unsaved\n").unwrap();
        let again = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        assert_eq!(again.path(), first.path());
        assert_eq!(
            std::fs::read_to_string(again.path().join("draft.txt")).unwrap(),
            "unsaved\n"
        );
    }

    #[tokio::test]
    async fn a_replay_on_one_worker_clears_a_stale_index_lock() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        // A `git add` that died with its worker leaves this behind.
        let lock = git(tree.path(), &["rev-parse", "--git-path", "index.lock"]);
        let lock = tree.path().join(lock.trim());
        std::fs::write(&lock, "").unwrap();
        std::fs::write(tree.path().join("new.txt"), "new\n").unwrap();
        assert!(tree.checkpoint("blocked").await.is_err());

        let replay = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        assert!(!lock.exists());
        let sha = replay.checkpoint("after the replay").await.unwrap();
        assert_eq!(
            git(&origin.bare, &["show", &format!("{sha}:new.txt")]),
            "new\n"
        );
    }

    #[tokio::test]
    async fn no_hook_of_the_clone_runs() {
        use std::os::unix::fs::PermissionsExt;
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let repo = cache.repo(&origin.url, &origin.sha).await.unwrap();
        let ran = origin.scratch.join("hook-ran");
        let hooks = repo.join("hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        for hook in [
            "post-checkout",
            "pre-commit",
            "commit-msg",
            "reference-transaction",
            "pre-push",
        ] {
            let file = hooks.join(hook);
            std::fs::write(
                &file,
                format!("#!/bin/sh\necho {hook} >> '{}'\nexit 1\n", ran.display()),
            )
            .unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // The hooks are live for a plain git.
        let probe = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["update-ref", "refs/probe", &origin.sha])
            .output()
            .unwrap();
        assert!(!probe.status.success());
        std::fs::remove_file(&ran).unwrap();

        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        std::fs::write(tree.path().join("new.txt"), "new\n").unwrap();
        tree.checkpoint("one").await.unwrap();
        assert!(matches!(
            tree.finish("done").await.unwrap(),
            Finished::Committed { .. }
        ));
        cache.read_only(&origin.url, &origin.sha).await.unwrap();
        assert!(!ran.exists(), "{}", std::fs::read_to_string(&ran).unwrap());
    }

    #[tokio::test]
    async fn checkpoint_pushes_a_wip_ref_holding_the_change() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        std::fs::write(tree.path().join("new.txt"), "new file\n").unwrap();
        std::fs::write(tree.path().join("README.md"), "changed\n").unwrap();

        let sha = tree.checkpoint("after write_file").await.unwrap();
        assert_ne!(sha, origin.sha);
        assert_eq!(head(tree.path()), sha);
        assert_eq!(
            origin.ref_id("refs/cadre/run1/wip/code").as_deref(),
            Some(sha.as_str())
        );
        assert_eq!(
            git(&origin.bare, &["show", &format!("{sha}:new.txt")]),
            "new file\n"
        );
        assert_eq!(
            git(&origin.bare, &["show", &format!("{sha}:README.md")]),
            "changed\n"
        );
        assert_eq!(
            git(
                &origin.bare,
                &["log", "-1", "--format=%an <%ae>|%cn|%s", &sha]
            )
            .trim(),
            "cadre <cadre@localhost>|cadre|after write_file"
        );
        assert_eq!(
            git(&origin.bare, &["rev-parse", &format!("{sha}^")]).trim(),
            origin.sha
        );

        // Nothing new: the same commit, pushed again (here, after the ref was lost).
        git(
            &origin.bare,
            &["update-ref", "-d", "refs/cadre/run1/wip/code"],
        );
        let again = tree.checkpoint("nothing new").await.unwrap();
        assert_eq!(again, sha);
        assert_eq!(
            origin.ref_id("refs/cadre/run1/wip/code").as_deref(),
            Some(sha.as_str())
        );
    }

    #[tokio::test]
    async fn another_worker_restores_the_checkpoint() {
        let origin = Origin::new();
        let first = origin.worker("w1");
        let tree = first
            .writer(&origin.url, &origin.sha, "run1", "main/code#2")
            .await
            .unwrap();
        std::fs::write(tree.path().join("new.txt"), "step one\n").unwrap();
        std::fs::remove_file(tree.path().join("README.md")).unwrap();
        tree.checkpoint("one").await.unwrap();
        std::fs::write(tree.path().join("new.txt"), "step two\n").unwrap();
        let sha = tree.checkpoint("two").await.unwrap();
        // The first worker dies here.
        drop(tree);

        let second = origin.worker("w2");
        let replay = second
            .writer(&origin.url, &origin.sha, "run1", "main/code#2")
            .await
            .unwrap();
        assert_eq!(replay.branch(), "cadre/run1/code-2");
        assert_eq!(head(replay.path()), origin.sha);
        assert!(!replay.path().join("new.txt").exists());
        // Debris of the replayed steps goes too.
        std::fs::write(replay.path().join("half-written.txt"), "?").unwrap();

        replay.restore(&sha).await.unwrap();
        assert_eq!(head(replay.path()), sha);
        assert_eq!(status(replay.path()), "");
        assert_eq!(
            std::fs::read_to_string(replay.path().join("new.txt")).unwrap(),
            "step two\n"
        );
        assert!(!replay.path().join("README.md").exists());
        assert!(!replay.path().join("half-written.txt").exists());
        assert!(replay.path().join("src/lib.rs").is_file());
        assert_eq!(
            git(
                replay.path(),
                &["rev-parse", "refs/heads/cadre/run1/code-2"]
            )
            .trim(),
            sha
        );

        // Already there: nothing to do.
        replay.restore(&sha).await.unwrap();
        assert_eq!(head(replay.path()), sha);

        // A change made since the checkpoint is undone by restoring it.
        std::fs::write(replay.path().join("new.txt"), "lost step\n").unwrap();
        replay.restore(&sha).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(replay.path().join("new.txt")).unwrap(),
            "step two\n"
        );
    }

    #[tokio::test]
    async fn restoring_a_commit_the_repository_lacks_is_commit_not_found() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        let missing = "0123456789abcdef0123456789abcdef01234567";
        let err = tree.restore(missing).await.unwrap_err();
        assert!(
            matches!(&err, WorkspaceError::CommitNotFound { commit, .. } if commit == missing),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn finish_pushes_the_branch_and_removes_the_wip_ref() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        let path = tree.path().to_path_buf();
        std::fs::write(path.join("new.txt"), "new\n").unwrap();
        tree.checkpoint("one").await.unwrap();
        assert!(origin.ref_id("refs/cadre/run1/wip/code").is_some());
        // Left after the last checkpoint: finish commits it.
        std::fs::write(path.join("src/lib.rs"), "pub fn two() -> u32 { 2 }\n").unwrap();

        let finished = tree.finish("code: done").await.unwrap();
        let Finished::Committed { branch, diffstat } = finished else {
            panic!("expected Committed, got {finished:?}");
        };
        assert_eq!(branch, "cadre/run1/code");
        assert!(diffstat.contains("new.txt"), "{diffstat}");
        assert!(diffstat.contains("src/lib.rs"), "{diffstat}");
        assert!(diffstat.contains("2 files changed"), "{diffstat}");

        let pushed = origin.ref_id("refs/heads/cadre/run1/code").unwrap();
        assert_eq!(
            git(&origin.bare, &["show", &format!("{pushed}:new.txt")]),
            "new\n"
        );
        assert_eq!(
            git(&origin.bare, &["show", &format!("{pushed}:src/lib.rs")]),
            "pub fn two() -> u32 { 2 }\n"
        );
        assert_eq!(
            git(&origin.bare, &["log", "-1", "--format=%s", &pushed]).trim(),
            "code: done"
        );
        assert_eq!(origin.ref_id("refs/cadre/run1/wip/code"), None);
        assert!(!path.exists(), "{}", path.display());
    }

    #[tokio::test]
    async fn a_replay_that_finishes_again_pushes_the_branch_again() {
        let origin = Origin::new();
        let first = origin.worker("w1");
        let tree = first
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        std::fs::write(tree.path().join("new.txt"), "new\n").unwrap();
        let sha = tree.checkpoint("one").await.unwrap();
        assert!(matches!(
            tree.finish("done").await.unwrap(),
            Finished::Committed { .. }
        ));

        // The worker died before the finish was recorded: another replays from the checkpoint.
        let second = origin.worker("w2");
        let replay = second
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        replay.restore(&sha).await.unwrap();
        let again = replay.finish("done again").await.unwrap();
        assert!(matches!(again, Finished::Committed { .. }), "{again:?}");
        let pushed = origin.ref_id("refs/heads/cadre/run1/code").unwrap();
        assert_eq!(
            git(&origin.bare, &["show", &format!("{pushed}:new.txt")]),
            "new\n"
        );
    }

    #[tokio::test]
    async fn an_unchanged_finish_pushes_nothing() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let tree = cache
            .writer(&origin.url, &origin.sha, "run1", "main/code")
            .await
            .unwrap();
        let path = tree.path().to_path_buf();
        // A checkpoint with nothing changed still pushes the wip ref, at base.
        let sha = tree.checkpoint("nothing").await.unwrap();
        assert_eq!(sha, origin.sha);
        assert_eq!(
            origin.ref_id("refs/cadre/run1/wip/code").as_deref(),
            Some(sha.as_str())
        );

        assert_eq!(tree.finish("done").await.unwrap(), Finished::Unchanged);
        assert_eq!(
            origin.refs(),
            vec![format!("{} refs/heads/main", origin.sha)],
            "only the seeded branch is left"
        );
        assert!(!path.exists(), "{}", path.display());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_repo_calls_for_one_url_succeed() {
        let origin = Origin::new();
        // Two caches on one root stand for two worker processes sharing it: they share
        // only the file lock.
        let one = Arc::new(origin.worker("shared"));
        let two = Arc::new(origin.worker("shared"));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let cache = if i % 2 == 0 { one.clone() } else { two.clone() };
            let url = origin.url.clone();
            let sha = origin.sha.clone();
            tasks.push(tokio::spawn(async move {
                let repo = cache.repo(&url, &sha).await?;
                let ro = cache.read_only(&url, &sha).await?;
                Ok::<_, WorkspaceError>((repo, ro))
            }));
        }
        let mut seen = Vec::new();
        for task in tasks {
            seen.push(task.await.unwrap().unwrap());
        }
        let (repo, ro) = &seen[0];
        assert!(seen.iter().all(|s| s == &seen[0]), "{seen:?}");
        assert_eq!(git(repo, &["cat-file", "-t", &origin.sha]).trim(), "commit");
        assert_eq!(head(ro), origin.sha);
    }

    #[tokio::test]
    async fn an_unknown_commit_is_commit_not_found_and_a_branch_name_resolves() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let err = cache.repo(&origin.url, "no-such-branch").await.unwrap_err();
        assert!(
            matches!(err, WorkspaceError::CommitNotFound { .. }),
            "{err:?}"
        );
        // A branch name resolves to the commit it names, through the read-only checkout too.
        let ro = cache.read_only(&origin.url, "main").await.unwrap();
        assert_eq!(head(&ro), origin.sha);
        assert!(ro.ends_with(&origin.sha), "{}", ro.display());
    }

    #[tokio::test]
    async fn a_bad_run_id_or_url_is_refused_naming_the_cause() {
        let origin = Origin::new();
        let cache = origin.worker("w1");
        let err = cache
            .writer(&origin.url, &origin.sha, "../up", "main/code")
            .await
            .unwrap_err();
        assert!(
            matches!(err, WorkspaceError::InvalidRunId { .. }),
            "{err:?}"
        );

        let missing = origin.scratch.join("no-such-repo.git");
        let err = cache
            .repo(missing.to_str().unwrap(), &origin.sha)
            .await
            .unwrap_err();
        let WorkspaceError::Git(GitError::Failed { command, stderr }) = &err else {
            panic!("expected Git, got {err:?}");
        };
        assert!(command.contains("fetch"), "{command}");
        assert!(!stderr.is_empty());
    }
}
