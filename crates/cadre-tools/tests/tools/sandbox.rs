use super::*;

// ---------------------------------------------------------------- sandbox

/// Whether this kernel can confine read-only agents; prints what it enforces either way.
///
/// Set `CADRE_REQUIRE_LANDLOCK=1` to make a machine without Landlock fail instead of skip.
fn landlock_or_skip(test: &str) -> bool {
    let status = landlock_status();
    eprintln!("[{test}] {}", status.summary);
    if status.fs_write_restriction {
        return true;
    }
    assert!(
        std::env::var_os("CADRE_REQUIRE_LANDLOCK").is_none(),
        "CADRE_REQUIRE_LANDLOCK is set but {}",
        status.summary
    );
    eprintln!("[{test}] SKIPPED: this kernel cannot enforce the read-only sandbox");
    false
}

fn have(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One entry of a folder snapshot.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir { mode: u32 },
    File { mode: u32, bytes: Vec<u8> },
    Symlink { target: PathBuf },
    Other { mode: u32 },
}

/// Every path under `root` (symlinks not followed) with its kind, mode and content.
fn snapshot_into(map: &mut BTreeMap<String, Entry>, label: &str, root: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return;
    };
    let mode = meta.permissions().mode();
    let entry = if meta.file_type().is_symlink() {
        Entry::Symlink {
            target: std::fs::read_link(root).unwrap(),
        }
    } else if meta.is_dir() {
        Entry::Dir { mode }
    } else if meta.is_file() {
        Entry::File {
            mode,
            bytes: std::fs::read(root).unwrap_or_else(|e| format!("<{e}>").into_bytes()),
        }
    } else {
        Entry::Other { mode }
    };
    let is_dir = matches!(entry, Entry::Dir { .. });
    map.insert(label.to_string(), entry);
    if is_dir {
        let mut children: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        children.sort();
        for name in children {
            let child_label = format!("{label}/{}", name.to_string_lossy());
            snapshot_into(map, &child_label, &root.join(name));
        }
    }
}

static FIXTURE_SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A workspace with files, a subfolder, a git repo and a symlink out; a folder outside it;
/// and a path directly in the shared temp folder that must never appear.
struct Fixture {
    env: Env,
    outside: tempfile::TempDir,
    /// `$TMPDIR` for unsandboxed control runs (sandboxed runs get their own).
    control_tmp: tempfile::TempDir,
    tmp_target: PathBuf,
}

impl Fixture {
    fn new(read_only: bool, sandbox: SandboxMode) -> Self {
        let mut env = Env::new();
        env.ctx.read_only = read_only;
        env.ctx.sandbox = sandbox;
        let outside = tempfile::tempdir().unwrap();
        let seq = FIXTURE_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp_target =
            std::env::temp_dir().join(format!("cadre-redteam-{}-{seq}.txt", std::process::id()));
        env.write("README.md", "hello\n");
        env.write("src/lib.rs", "pub fn f() {}\n");
        env.write("src/nested/deep.txt", "deep\n");
        env.write("script.sh", "#!/bin/sh\necho hi\n");
        std::fs::set_permissions(env.path("script.sh"), Permissions::from_mode(0o755)).unwrap();
        std::fs::write(outside.path().join("victim.txt"), "outside\n").unwrap();
        std::fs::create_dir(outside.path().join("home")).unwrap();
        std::fs::write(outside.path().join("home/.profile"), "profile\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), env.path("link_out")).unwrap();
        if have("git") {
            let git = |args: &[&str]| {
                let status = std::process::Command::new("git")
                    .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                    .args(args)
                    .current_dir(env.root())
                    .stdout(std::process::Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success(), "git {args:?}");
            };
            git(&["init", "-q"]);
            git(&["add", "-A"]);
            git(&["commit", "-q", "-m", "init"]);
        }
        Self {
            env,
            outside,
            control_tmp: tempfile::tempdir().unwrap(),
            tmp_target,
        }
    }

    fn snapshot(&self) -> BTreeMap<String, Entry> {
        let mut map = BTreeMap::new();
        snapshot_into(&mut map, "ws", &self.env.root());
        snapshot_into(&mut map, "outside", self.outside.path());
        snapshot_into(&mut map, "tmp-target", &self.tmp_target);
        map
    }

    fn expand(&self, command: &str) -> String {
        command
            .replace("{WS}", self.env.root().to_str().unwrap())
            .replace("{OUT}", self.outside.path().to_str().unwrap())
            .replace("{TMP}", self.tmp_target.to_str().unwrap())
    }

    /// Runs `command` with bash; the tool itself must not fail (the command may).
    async fn bash(&self, command: &str) -> ToolOutput {
        let mut command = self.expand(command);
        if self.env.ctx.sandbox == SandboxMode::Unsandboxed {
            command = format!(
                "export TMPDIR='{}'; {command}",
                self.control_tmp.path().display()
            );
        }
        self.env
            .call("bash", json!({ "command": command }))
            .await
            .unwrap_or_else(|e| panic!("bash {command:?} failed to run: {e}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.tmp_target);
    }
}

enum Needs {
    Nothing,
    Program(&'static str),
}

/// Ways to change the workspace or the world outside it, each a real write when unsandboxed.
fn write_attempts() -> Vec<(&'static str, Needs, &'static str)> {
    use Needs::{Nothing, Program};
    vec![
        ("> redirection", Nothing, "echo pwned > README.md"),
        (">> append", Nothing, "echo pwned >> README.md"),
        (": > truncating redirection", Nothing, ": > README.md"),
        (
            "<> read-write fd",
            Nothing,
            "exec 3<>README.md; echo pwned >&3",
        ),
        ("new file", Nothing, "echo pwned > new.txt"),
        ("here-doc", Nothing, "cat > heredoc.txt <<'EOF'\npwned\nEOF"),
        ("touch", Nothing, "touch touched.txt"),
        ("cp new", Nothing, "cp README.md copy.md"),
        ("cp over", Nothing, "cp src/lib.rs README.md"),
        ("mv", Nothing, "mv README.md moved.md"),
        ("mv folder", Nothing, "mv src/nested nested"),
        ("mv into $TMPDIR", Nothing, "mv README.md \"$TMPDIR/\""),
        ("rm", Nothing, "rm README.md"),
        ("rm -rf", Nothing, "rm -rf src"),
        ("ln -s", Nothing, "ln -s README.md link.md"),
        (
            "hard link into $TMPDIR then write",
            Nothing,
            "ln README.md \"$TMPDIR/hard\"; echo pwned > \"$TMPDIR/hard\"",
        ),
        ("mkdir", Nothing, "mkdir newdir"),
        ("mkfifo", Nothing, "mkfifo fifo"),
        ("sed -i", Nothing, "sed -i 's/hello/pwned/' README.md"),
        ("tee", Nothing, "echo pwned | tee README.md"),
        (
            "dd of=",
            Nothing,
            "dd if=/dev/zero of=README.md bs=1 count=3 conv=notrunc",
        ),
        ("truncate", Nothing, "truncate -s 0 README.md"),
        ("chmod", Nothing, "chmod 000 README.md"),
        ("chmod -x", Nothing, "chmod -x script.sh"),
        ("install", Nothing, "install -m 644 README.md installed.md"),
        (
            "through /proc/self/cwd",
            Nothing,
            "echo pwned > /proc/self/cwd/README.md",
        ),
        (
            "through /proc/self/root",
            Nothing,
            "echo pwned > /proc/self/root{WS}/README.md",
        ),
        (
            "through a symlink out of the workspace",
            Nothing,
            "echo pwned > link_out/victim.txt; echo pwned > link_out/created.txt",
        ),
        ("outside folder", Nothing, "echo pwned > {OUT}/victim.txt"),
        ("cp to outside", Nothing, "cp README.md {OUT}/stolen.md"),
        ("rm outside", Nothing, "rm {OUT}/victim.txt"),
        (
            "$HOME",
            Nothing,
            "export HOME={OUT}/home; echo pwned >> ~/.profile; echo x > ~/.newrc",
        ),
        (
            "/tmp outside the private folder",
            Nothing,
            "echo pwned > {TMP}",
        ),
        (
            "git commit",
            Program("git"),
            "git -c user.name=x -c user.email=x@example.com commit -q --allow-empty -m pwned",
        ),
        (
            "git checkout -b",
            Program("git"),
            "git checkout -q -b pwned",
        ),
        ("git config", Program("git"), "git config user.name pwned"),
        (
            "python open(..., 'w')",
            Program("python3"),
            "python3 -c \"open('README.md', 'w').write('pwned')\"",
        ),
        (
            "python os.chmod",
            Program("python3"),
            "python3 -c \"import os; os.chmod('script.sh', 0o600)\"",
        ),
        (
            "perl open",
            Program("perl"),
            "perl -e 'open(my $f, \">>\", \"README.md\") or die \"$!\"; print $f \"pwned\"'",
        ),
    ]
}

#[tokio::test]
#[cfg_attr(
    not(has_landlock),
    ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
)]
async fn bash_read_only_agent_cannot_write() {
    if !landlock_or_skip("bash_read_only_agent_cannot_write") {
        return;
    }
    let mut tried = 0;
    for (name, needs, command) in write_attempts() {
        if let Needs::Program(program) = needs {
            if !have(program) {
                eprintln!("skipping {name:?}: {program} is not installed");
                continue;
            }
        }
        // Control: without the sandbox the command really writes, so a pass below means
        // the sandbox stopped it.
        let control = Fixture::new(false, SandboxMode::Unsandboxed);
        let before = control.snapshot();
        let out = control.bash(command).await;
        assert_ne!(
            before,
            control.snapshot(),
            "control run of {name:?} wrote nothing: {}",
            out.content
        );

        let fixture = Fixture::new(true, SandboxMode::Landlock);
        let before = fixture.snapshot();
        let out = fixture.bash(command).await;
        let after = fixture.snapshot();
        assert!(
            before == after,
            "read-only bash managed {name:?}\noutput: {}\nbefore: {before:?}\nafter: {after:?}",
            out.content
        );
        eprintln!("blocked {name:?}: {}", out.content.replace('\n', " | "));
        tried += 1;
    }
    assert!(tried >= 20, "only {tried} attempts ran");
}

#[tokio::test]
#[cfg_attr(
    not(has_landlock),
    ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
)]
async fn bash_read_only_agent_can_use_its_tmpdir() {
    if !landlock_or_skip("bash_read_only_agent_can_use_its_tmpdir") {
        return;
    }
    let fixture = Fixture::new(true, SandboxMode::Landlock);
    let before = fixture.snapshot();
    let out = fixture
        .bash(
            "cd \"$TMPDIR\" && echo scratch > a && mkdir -p d/e && mv a d/e/b && cat d/e/b \
             && ln -s d/e/b l && : > l && rm -r d l && echo quiet > /dev/null \
             && head -c 3 /dev/zero | wc -c && cat {WS}/README.md && echo \"$TMPDIR\"",
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines[..3], ["scratch", "3", "hello"], "{}", out.content);
    let tmpdir = PathBuf::from(lines[3]);
    assert_eq!(tmpdir.parent(), Some(std::env::temp_dir().as_path()));
    assert!(tmpdir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("cadre-sandbox-"));
    assert!(
        !tmpdir.exists(),
        "the scratch folder is removed after the call"
    );
    assert_eq!(before, fixture.snapshot());
}

#[tokio::test]
#[cfg_attr(
    not(has_landlock),
    ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
)]
async fn bash_writing_agent_writes_only_in_the_workspace() {
    if !landlock_or_skip("bash_writing_agent_writes_only_in_the_workspace") {
        return;
    }
    let fixture = Fixture::new(false, SandboxMode::Landlock);
    let out = fixture
        .bash(
            "echo new > in.txt && mkdir -p d/e && mv in.txt d/e/ && sed -i s/hello/bye/ \
             README.md && rm src/lib.rs && chmod 600 script.sh && echo tmp > \"$TMPDIR/t\" \
             && cat \"$TMPDIR/t\"",
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(out.content, "tmp\n");
    assert_eq!(fixture.env.read("d/e/in.txt"), "new\n");
    assert_eq!(fixture.env.read("README.md"), "bye\n");
    assert!(!fixture.env.path("src/lib.rs").exists());
    if have("git") {
        let out = fixture
            .bash("git -c user.name=x -c user.email=x@example.com commit -qam edit && echo ok")
            .await;
        assert_eq!(out.content, "ok\n", "git works for writers");
    }

    let outside_before = {
        let mut map = BTreeMap::new();
        snapshot_into(&mut map, "outside", fixture.outside.path());
        snapshot_into(&mut map, "tmp-target", &fixture.tmp_target);
        map
    };
    for command in [
        "echo pwned > {OUT}/victim.txt",
        "echo pwned > {OUT}/new.txt",
        "rm {OUT}/victim.txt",
        "echo pwned > link_out/victim.txt",
        "echo pwned >> {OUT}/home/.profile",
        "echo pwned > {TMP}",
        "mv README.md {OUT}/",
        "cp README.md {OUT}/copy.md",
        "ln -s /etc/passwd {OUT}/link",
    ] {
        let out = fixture.bash(command).await;
        assert!(out.is_error, "{command}: {}", out.content);
        let mut now = BTreeMap::new();
        snapshot_into(&mut now, "outside", fixture.outside.path());
        snapshot_into(&mut now, "tmp-target", &fixture.tmp_target);
        assert!(outside_before == now, "writer escaped with {command:?}");
    }
    assert!(fixture.env.path("README.md").exists());
}

#[tokio::test]
#[cfg_attr(
    not(has_landlock),
    ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
)]
async fn bash_network_can_be_denied() {
    if !landlock_or_skip("bash_network_can_be_denied") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    for read_only in [true, false] {
        let mut fixture = Fixture::new(read_only, SandboxMode::Landlock);
        fixture.env.ctx.allow_network = true;
        let out = fixture.bash(&connect).await;
        assert_eq!(out.content, "connected\n", "read_only={read_only}");

        fixture.env.ctx.allow_network = false;
        if landlock_status().tcp_restriction {
            let out = fixture.bash(&connect).await;
            assert!(out.is_error, "read_only={read_only}: {}", out.content);
            assert!(!out.content.contains("connected"), "{}", out.content);
            assert!(out.content.contains("Permission denied"), "{}", out.content);
        } else {
            assert!(
                std::env::var_os("CADRE_REQUIRE_LANDLOCK").is_none(),
                "CADRE_REQUIRE_LANDLOCK is set but Landlock ABI < 4 cannot deny TCP"
            );
            eprintln!("NOTE: Landlock ABI < 4 cannot deny TCP; the deny half is skipped");
        }
    }
}

#[tokio::test]
async fn bash_read_only_sandbox_can_be_opted_out_of() {
    let fixture = Fixture::new(true, SandboxMode::Unsandboxed);
    let out = fixture.bash("echo changed > README.md && echo ok").await;
    assert_eq!(out.content, "ok\n");
    assert_eq!(fixture.env.read("README.md"), "changed\n");
}

fn status_field(path: &str, key: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap()
}

/// Landlock and the seccomp filter bind only the short-lived spawning thread: cadre's own
/// threads, new threads and later unsandboxed children can still write anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_landlock),
    ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
)]
async fn bash_sandbox_leaves_cadre_unrestricted() {
    if !landlock_or_skip("bash_sandbox_leaves_cadre_unrestricted") {
        return;
    }
    let fixture = Fixture::new(true, SandboxMode::Landlock);
    for _ in 0..4 {
        let out = fixture.bash("grep NoNewPrivs /proc/self/status").await;
        assert_eq!(out.content.split_whitespace().nth(1), Some("1"));
        assert!(fixture.bash("echo x > {OUT}/nope").await.is_error);
    }
    let outside = fixture.outside.path().to_path_buf();
    std::fs::write(outside.join("from-test-thread"), "ok").unwrap();
    assert_eq!(status_field("/proc/thread-self/status", "NoNewPrivs:"), "0");
    assert_eq!(status_field("/proc/thread-self/status", "Seccomp:"), "0");
    // Every worker and a fresh blocking thread.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let dir = outside.clone();
        tasks.push(tokio::spawn(async move {
            std::fs::write(dir.join(format!("from-task-{i}")), "ok").unwrap();
            status_field("/proc/thread-self/status", "NoNewPrivs:")
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), "0");
    }
    let dir = outside.clone();
    tokio::task::spawn_blocking(move || std::fs::write(dir.join("from-blocking"), "ok"))
        .await
        .unwrap()
        .unwrap();
    let dir = outside.clone();
    std::thread::spawn(move || std::fs::write(dir.join("from-thread"), "ok"))
        .join()
        .unwrap()
        .unwrap();
    // A later unsandboxed child is not confined either.
    let mut free = Fixture::new(true, SandboxMode::Unsandboxed);
    free.outside = tempfile::tempdir_in(&outside).unwrap();
    let out = free
        .bash("echo ok > {OUT}/from-child && cat {OUT}/from-child")
        .await;
    assert_eq!(out.content, "ok\n");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        // victim.txt, home, nope-free: test thread, 8 tasks, blocking, thread, free's folder
        2 + 1 + 8 + 1 + 1 + 1
    );
}
