//! Every built-in tool, driven through the `Tool` trait on real temp folders.

// Test helpers outside `#[test]` fns fail loudly on purpose, as the tests themselves do.
#![allow(clippy::unwrap_used, clippy::panic)]

use cadre_tools::{
    builtin_tools, FileTracker, Tool, ToolContext, ToolError, ToolLimits, ToolOutput, Workspace,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Env {
    dir: tempfile::TempDir,
    ctx: ToolContext,
}

impl Env {
    fn new() -> Self {
        Self::with_limits(ToolLimits::default())
    }

    fn with_limits(limits: ToolLimits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(Workspace::new(dir.path()).unwrap());
        let mut ctx = ToolContext::new(workspace);
        ctx.limits = limits;
        Self { dir, ctx }
    }

    fn root(&self) -> PathBuf {
        self.ctx.workspace.root().to_path_buf()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    async fn call(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        call_with(&self.ctx, tool, input).await
    }

    async fn ok(&self, tool: &str, input: Value) -> String {
        let out = self.call(tool, input.clone()).await.unwrap_or_else(|e| {
            panic!("{tool} {input} failed: {e}");
        });
        assert!(!out.is_error, "{tool} {input} is_error: {}", out.content);
        out.content
    }
}

fn tool(name: &str) -> Arc<dyn Tool> {
    builtin_tools()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap()
}

async fn call_with(ctx: &ToolContext, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
    tool(name).call(input, ctx).await
}

/// Whether `pid` is gone (a zombie awaiting its new parent counts as gone: it runs no more).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

async fn assert_gone_soon(pid: i32) {
    let start = Instant::now();
    while !process_gone(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "process {pid} still alive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_pid(env: &Env, rel: &str) -> i32 {
    env.read(rel).trim().parse().unwrap()
}

// ---------------------------------------------------------------- bash

#[tokio::test]
async fn bash_output_and_exit_code() {
    let env = Env::new();
    let out = env
        .call(
            "bash",
            json!({"command": "echo a; echo b >&2; echo c; exit 3"}),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.content, "a\nb\nc\n[exit code 3]");

    let pwd = env
        .ok("bash", json!({"command": "pwd", "description": "where"}))
        .await;
    assert_eq!(pwd.trim(), env.root().to_str().unwrap());

    let quiet = env.ok("bash", json!({"command": "true"})).await;
    assert_eq!(quiet, "(no output)");
}

#[tokio::test]
async fn bash_runs_for_read_only_agents() {
    let mut env = Env::new();
    env.ctx.read_only = true;
    assert_eq!(env.ok("bash", json!({"command": "echo ok"})).await, "ok\n");
}

#[tokio::test]
async fn bash_timeout_kills_grandchildren() {
    let env = Env::new();
    let start = Instant::now();
    let out = env
        .call(
            "bash",
            json!({
                "command": "echo started; sleep 30 & echo $! > pid1; \
                            bash -c 'sleep 31 & echo $! > pid2; wait' & wait",
                "timeout_ms": 700
            }),
        )
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(out.is_error);
    assert!(out.content.starts_with("started\n"), "{}", out.content);
    assert!(
        out.content.contains("timed out after 700ms"),
        "{}",
        out.content
    );
    assert_gone_soon(read_pid(&env, "pid1")).await;
    assert_gone_soon(read_pid(&env, "pid2")).await;
}

#[tokio::test]
async fn bash_timeout_capped_by_max() {
    let limits = ToolLimits {
        bash_max_timeout: Duration::from_millis(300),
        ..ToolLimits::default()
    };
    let env = Env::with_limits(limits);
    let start = Instant::now();
    let out = env
        .call("bash", json!({"command": "sleep 20", "timeout_ms": 100000}))
        .await
        .unwrap();
    assert!(out.is_error && out.content.contains("timed out"));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn bash_background_child_does_not_hold_the_call() {
    let env = Env::new();
    let start = Instant::now();
    let out = env
        .ok(
            "bash",
            json!({"command": "sleep 100 & echo $! > pid; echo hi"}),
        )
        .await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out, "hi\n");
    assert_gone_soon(read_pid(&env, "pid")).await;
}

#[tokio::test]
async fn bash_cancel_kills_the_group() {
    let env = Env::new();
    let ctx = env.ctx.clone();
    let task = tokio::spawn(async move {
        call_with(
            &ctx,
            "bash",
            json!({"command": "sleep 30 & echo $! > pid; wait"}),
        )
        .await
    });
    let pid_file = env.path("pid");
    let start = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.ctx.cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
    assert_gone_soon(read_pid(&env, "pid")).await;
}

#[tokio::test]
async fn bash_output_capped() {
    let limits = ToolLimits {
        max_output_bytes: 2000,
        ..ToolLimits::default()
    };
    let env = Env::with_limits(limits);
    let out = env.ok("bash", json!({"command": "seq 1 100000"})).await;
    assert!(out.len() <= 2000, "{} bytes", out.len());
    assert!(out.starts_with("1\n2\n3\n"));
    assert!(out.ends_with("99999\n100000\n"));
    assert!(out.contains("cut from the middle"));
}

// ---------------------------------------------------------------- read_file

#[tokio::test]
async fn read_file_offset_and_limit() {
    let env = Env::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    env.write("f.txt", &text);
    let all = env.ok("read_file", json!({"path": "f.txt"})).await;
    assert_eq!(all.lines().count(), 10);
    assert!(all.starts_with("     1\tline 1\n"));
    assert!(all.ends_with("    10\tline 10\n"));
    let part = env
        .ok(
            "read_file",
            json!({"path": "f.txt", "offset": 4, "limit": 3}),
        )
        .await;
    assert_eq!(
        part,
        "     4\tline 4\n     5\tline 5\n     6\tline 6\n\
         [showing lines 4–6 of 10; use offset 7 to read more]\n"
    );
    let past = env
        .call("read_file", json!({"path": "f.txt", "offset": 50}))
        .await
        .unwrap();
    assert!(past.is_error && past.content.contains("past the end"));
}

#[tokio::test]
async fn read_file_refuses_binary_non_utf8_huge_and_folders() {
    let limits = ToolLimits {
        max_read_bytes: 100,
        ..ToolLimits::default()
    };
    let env = Env::with_limits(limits);
    env.write("bin", b"abc\0def");
    env.write("latin1", b"caf\xe9\n");
    env.write("big", "x".repeat(101));
    env.write("dir/inner", "x");
    let refused = |r: Result<ToolOutput, ToolError>, needle: &str| match r {
        Err(ToolError::Refused(msg)) => assert!(msg.contains(needle), "{msg}"),
        other => panic!("expected refusal with {needle}, got {other:?}"),
    };
    refused(
        env.call("read_file", json!({"path": "bin"})).await,
        "binary",
    );
    refused(
        env.call("read_file", json!({"path": "latin1"})).await,
        "UTF-8",
    );
    refused(env.call("read_file", json!({"path": "big"})).await, "limit");
    refused(
        env.call("read_file", json!({"path": "dir"})).await,
        "list_files",
    );
    let missing = env.call("read_file", json!({"path": "nope"})).await;
    assert!(matches!(missing, Err(ToolError::Io { .. })), "{missing:?}");
}

// ---------------------------------------------------------------- write_file

#[tokio::test]
async fn write_file_creates_folders_and_overwrites() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let out = env
        .ok(
            "write_file",
            json!({"path": "a/b/c.txt", "content": "one\ntwo\n"}),
        )
        .await;
    assert_eq!(out, "wrote 2 lines (8 bytes) to a/b/c.txt (new file)");
    assert_eq!(env.read("a/b/c.txt"), "one\ntwo\n");

    let script = env.path("a/b/c.txt");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env
        .ok(
            "write_file",
            json!({"path": "a/b/c.txt", "content": "three"}),
        )
        .await;
    assert!(out.contains("overwrote"), "{out}");
    assert_eq!(env.read("a/b/c.txt"), "three");
    let mode = std::fs::metadata(&script).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    // No temp files left beside it.
    assert_eq!(std::fs::read_dir(env.path("a/b")).unwrap().count(), 1);
}

// ---------------------------------------------------------------- edit_file

#[tokio::test]
async fn edit_file_unique_match() {
    let env = Env::new();
    env.write("src/a.rs", "fn a() {\n    1\n}\n");
    env.ok("read_file", json!({"path": "src/a.rs"})).await;
    let out = env
        .ok(
            "edit_file",
            json!({"path": "src/a.rs", "old_string": "    1\n", "new_string": "    2\n"}),
        )
        .await;
    assert_eq!(env.read("src/a.rs"), "fn a() {\n    2\n}\n");
    assert!(
        out.contains("-    1\n") && out.contains("+    2\n"),
        "{out}"
    );
    // The agent's own edit keeps its view fresh: a second edit needs no re-read.
    env.ok(
        "edit_file",
        json!({"path": "src/a.rs", "old_string": "fn a", "new_string": "fn b"}),
    )
    .await;
    assert_eq!(env.read("src/a.rs"), "fn b() {\n    2\n}\n");
}

#[tokio::test]
async fn edit_file_zero_and_many_matches() {
    let env = Env::new();
    env.write("f.txt", "x = 1\nx = 1\nx = 1\n");
    env.ok("read_file", json!({"path": "f.txt"})).await;
    let zero = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "y = 1", "new_string": "y = 2"}),
        )
        .await;
    assert!(
        matches!(&zero, Err(ToolError::Refused(m)) if m.contains("not found") && m.contains("whitespace")),
        "{zero:?}"
    );
    let many = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 2"}),
        )
        .await;
    assert!(
        matches!(&many, Err(ToolError::Refused(m)) if m.contains("3 times")),
        "{many:?}"
    );
    assert_eq!(env.read("f.txt"), "x = 1\nx = 1\nx = 1\n");
    let same = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 1"}),
        )
        .await;
    assert!(matches!(same, Err(ToolError::InvalidInput(_))), "{same:?}");
    let out = env
        .ok(
            "edit_file",
            json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}),
        )
        .await;
    assert!(out.contains("replaced 3 occurrences"), "{out}");
    assert_eq!(env.read("f.txt"), "x = 2\nx = 2\nx = 2\n");
}

#[tokio::test]
async fn edit_file_requires_a_fresh_read() {
    let env = Env::new();
    env.write("f.txt", "alpha\n");
    let unread = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "alpha", "new_string": "beta"}),
        )
        .await;
    assert!(
        matches!(&unread, Err(ToolError::Refused(m)) if m == "read f.txt with read_file before editing it"),
        "{unread:?}"
    );
    env.ok("read_file", json!({"path": "f.txt"})).await;
    let seen_mtime = std::fs::metadata(env.path("f.txt"))
        .unwrap()
        .modified()
        .unwrap();
    // Another agent (own tracker, same locks) rewrites the file...
    let mut other = env.ctx.clone();
    other.files = Arc::new(FileTracker::default());
    call_with(
        &other,
        "write_file",
        json!({"path": "f.txt", "content": "alpha gamma\n"}),
    )
    .await
    .unwrap();
    // ...within the same mtime tick (as on a coarse-clock file system): only content tells.
    std::fs::File::options()
        .write(true)
        .open(env.path("f.txt"))
        .unwrap()
        .set_modified(seen_mtime)
        .unwrap();
    let stale = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "alpha", "new_string": "beta"}),
        )
        .await;
    assert!(
        matches!(&stale, Err(ToolError::Refused(m)) if m.contains("f.txt changed since you last read it")),
        "{stale:?}"
    );
    assert_eq!(env.read("f.txt"), "alpha gamma\n");
    // A change made by a command is caught as well.
    env.ok("read_file", json!({"path": "f.txt"})).await;
    env.ok("bash", json!({"command": "echo more >> f.txt"}))
        .await;
    let stale = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "gamma", "new_string": "delta"}),
        )
        .await;
    assert!(matches!(stale, Err(ToolError::Refused(_))), "{stale:?}");
    env.ok("read_file", json!({"path": "f.txt"})).await;
    env.ok(
        "edit_file",
        json!({"path": "f.txt", "old_string": "gamma", "new_string": "delta"}),
    )
    .await;
    assert_eq!(env.read("f.txt"), "alpha delta\nmore\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_edits_lose_no_update() {
    let env = Env::new();
    env.write("log.txt", "start\nEND\n");
    let agents: Vec<ToolContext> = (0..8)
        .map(|_| {
            let mut ctx = env.ctx.clone();
            ctx.files = Arc::new(FileTracker::default());
            ctx
        })
        .collect();
    let mut pending: Vec<usize> = (0..8).collect();
    let mut order = Vec::new();
    while !pending.is_empty() {
        for &i in &pending {
            let out = call_with(&agents[i], "read_file", json!({"path": "log.txt"}))
                .await
                .unwrap();
            assert!(!out.is_error);
        }
        let mut set = tokio::task::JoinSet::new();
        for &i in &pending {
            let ctx = agents[i].clone();
            set.spawn(async move {
                let input = json!({
                    "path": "log.txt",
                    "old_string": "END\n",
                    "new_string": format!("agent {i}\nEND\n"),
                });
                (i, call_with(&ctx, "edit_file", input).await)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (i, result) = joined.unwrap();
            match result {
                Ok(out) if !out.is_error => winners.push(i),
                Err(ToolError::Refused(m)) => assert!(m.contains("changed since"), "{m}"),
                other => panic!("agent {i}: {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one edit per read round");
        order.push(winners[0]);
        pending.retain(|i| *i != winners[0]);
    }
    let expected: String = std::iter::once("start\n".to_string())
        .chain(order.iter().map(|i| format!("agent {i}\n")))
        .chain(std::iter::once("END\n".to_string()))
        .collect();
    assert_eq!(env.read("log.txt"), expected);
}

// ---------------------------------------------------------------- list_files

#[tokio::test]
async fn list_files_respects_gitignore() {
    let env = Env::new();
    env.write(".gitignore", "target/\n*.log\n");
    env.write("a.rs", "");
    env.write("README.md", "");
    env.write("src/b.rs", "");
    env.write("src/deep/c.rs", "");
    env.write("target/x.rs", "");
    env.write("debug.log", "");
    env.write(".hidden/h.rs", "");
    env.write(".git/config", "");

    let all = env.ok("list_files", json!({})).await;
    assert_eq!(
        all,
        "README.md\na.rs\nsrc/\nsrc/b.rs\nsrc/deep/\nsrc/deep/c.rs\n"
    );
    let rs = env.ok("list_files", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(rs, "a.rs\nsrc/b.rs\nsrc/deep/c.rs\n");
    let by_name = env.ok("list_files", json!({"pattern": "*.rs"})).await;
    assert_eq!(by_name, rs);
    let sub = env
        .ok("list_files", json!({"pattern": "*.rs", "path": "src/deep"}))
        .await;
    assert_eq!(sub, "src/deep/c.rs\n");
    let none = env.ok("list_files", json!({"pattern": "*.py"})).await;
    assert!(none.starts_with("no files match"), "{none}");
}

#[tokio::test]
async fn list_files_caps_entries() {
    let env = Env::new();
    for i in 0..1005 {
        env.write(&format!("f{i:04}.txt"), "");
    }
    let out = env.ok("list_files", json!({"pattern": "*.txt"})).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1001);
    assert_eq!(lines[0], "f0000.txt");
    assert_eq!(lines[999], "f0999.txt");
    assert!(lines[1000].contains("and 5 more"), "{}", lines[1000]);
}

// ---------------------------------------------------------------- grep

#[tokio::test]
async fn grep_with_context_and_glob() {
    let env = Env::new();
    env.write(
        "src/a.rs",
        "one\nneedle here\nthree\nfour\nfive\nsix\nNeedle again\n",
    );
    env.write("notes.txt", "needle in text\n");
    env.write("bin.rs", b"needle\0binary");
    env.write("ignored/x.rs", "needle\n");
    env.write(".gitignore", "ignored/\n");

    let out = env
        .ok(
            "grep",
            json!({"pattern": "needle", "glob": "*.rs", "context": 1}),
        )
        .await;
    assert_eq!(
        out,
        "src/a.rs-1-one\nsrc/a.rs:2:needle here\nsrc/a.rs-3-three\n"
    );
    let ci = env
        .ok(
            "grep",
            json!({"pattern": "needle", "case_insensitive": true, "path": "src"}),
        )
        .await;
    assert_eq!(ci, "src/a.rs:2:needle here\nsrc/a.rs:7:Needle again\n");
    let all = env.ok("grep", json!({"pattern": "needle"})).await;
    assert_eq!(all, "notes.txt:1:needle in text\nsrc/a.rs:2:needle here\n");
    let one = env
        .ok(
            "grep",
            json!({"pattern": "e", "path": "src/a.rs", "max_results": 2}),
        )
        .await;
    assert!(
        one.starts_with("src/a.rs:1:one\nsrc/a.rs:2:needle here\n[stopped after 2"),
        "{one}"
    );

    let none = env
        .call("grep", json!({"pattern": "absent"}))
        .await
        .unwrap();
    assert!(!none.is_error && none.content.starts_with("no matches"));
    let bad = env.call("grep", json!({"pattern": "(unclosed"})).await;
    assert!(
        matches!(&bad, Err(ToolError::InvalidInput(m)) if m.contains("regex")),
        "{bad:?}"
    );
}

// ---------------------------------------------------------------- confinement

#[tokio::test]
async fn paths_cannot_escape_the_workspace() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), env.path("link")).unwrap();
    let abs_secret = outside.path().join("secret.txt");
    let escapes = [
        "../secret.txt".to_string(),
        format!(
            "../{}/secret.txt",
            outside.path().file_name().unwrap().to_str().unwrap()
        ),
        abs_secret.to_str().unwrap().to_string(),
        "link/secret.txt".to_string(),
    ];
    for path in &escapes {
        let inputs = [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": path, "old_string": "secret", "new_string": "pwned"}),
            ),
            ("list_files", json!({"path": path})),
            ("grep", json!({"pattern": "secret", "path": path})),
        ];
        for (name, input) in inputs {
            let result = env.call(name, input).await;
            assert!(
                matches!(result, Err(ToolError::OutsideWorkspace { .. })),
                "{name} {path}: {result:?}"
            );
        }
    }
    for dir in ["link", "../"] {
        let result = env.call("list_files", json!({"path": dir})).await;
        assert!(matches!(result, Err(ToolError::OutsideWorkspace { .. })));
    }
    assert_eq!(
        std::fs::read_to_string(&abs_secret).unwrap(),
        "secret\n",
        "nothing outside was changed"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    // The walk does not follow the symlink out either.
    let listed = env.ok("list_files", json!({})).await;
    assert!(!listed.contains("secret"), "{listed}");
    let grepped = env.ok("grep", json!({"pattern": "secret"})).await;
    assert!(grepped.starts_with("no matches"), "{grepped}");
}

// ---------------------------------------------------------------- input decoding

#[tokio::test]
async fn invalid_input_is_reported() {
    let env = Env::new();
    let cases = [
        ("bash", json!({}), "command"),
        ("bash", json!({"command": ["ls"]}), "string"),
        ("bash", json!({"command": "ls", "timeout_ms": "5s"}), "u64"),
        ("read_file", json!({}), "path"),
        ("read_file", json!({"path": 5}), "string"),
        ("read_file", json!({"path": "f", "offset": -1}), "-1"),
        ("read_file", json!({"file_path": "f"}), "file_path"),
        ("write_file", json!({"path": "f"}), "content"),
        (
            "edit_file",
            json!({"path": "f", "old_string": "a"}),
            "new_string",
        ),
        (
            "edit_file",
            json!({"path": "f", "old_string": "a", "new_string": "b", "replace_all": "yes"}),
            "bool",
        ),
        ("list_files", json!({"pattern": 3}), "string"),
        ("grep", json!({"path": "src"}), "pattern"),
        ("grep", json!({"pattern": "x", "context": "2"}), "u64"),
    ];
    for (name, input, needle) in cases {
        match env.call(name, input.clone()).await {
            Err(ToolError::InvalidInput(msg)) => {
                assert!(msg.starts_with(name), "{msg}");
                assert!(msg.contains(needle), "{name} {input}: {msg}");
            }
            other => panic!("{name} {input}: expected InvalidInput, got {other:?}"),
        }
    }
    assert!(!Path::new(&env.path("f")).exists());
    drop(env.dir);
}
