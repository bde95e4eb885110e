//! Every built-in tool, driven through the `Tool` trait on real temp folders.

// Test helpers outside `#[test]` fns fail loudly on purpose, as the tests themselves do.
#![allow(clippy::unwrap_used, clippy::panic)]

use cadre_tools::{
    builtin_tools, landlock_status, FileTracker, SandboxMode, Tool, ToolContext, ToolError,
    ToolLimits, ToolOutput, Workspace,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;
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

#[tokio::test]
async fn write_file_creates_new_files_without_a_read() {
    let env = Env::new();
    let out = env
        .ok("write_file", json!({"path": "new.txt", "content": "hi\n"}))
        .await;
    assert_eq!(out, "wrote 1 lines (3 bytes) to new.txt (new file)");
    assert_eq!(env.read("new.txt"), "hi\n");
    // Writing it counts as having seen it: an edit right after needs no read.
    env.ok(
        "edit_file",
        json!({"path": "new.txt", "old_string": "hi", "new_string": "hello"}),
    )
    .await;
    assert_eq!(env.read("new.txt"), "hello\n");
}

#[tokio::test]
async fn write_file_refuses_to_overwrite_an_unread_file() {
    let env = Env::new();
    env.write("f.txt", "theirs\n");
    let unread = env
        .call("write_file", json!({"path": "f.txt", "content": "mine\n"}))
        .await;
    assert!(
        matches!(&unread, Err(ToolError::Refused(m)) if m == "read f.txt with read_file before overwriting it"),
        "{unread:?}"
    );
    assert_eq!(env.read("f.txt"), "theirs\n");
}

#[tokio::test]
async fn write_file_overwrites_a_file_it_has_read() {
    let env = Env::new();
    env.write("f.txt", "old\n");
    env.ok("read_file", json!({"path": "f.txt"})).await;
    let out = env
        .ok("write_file", json!({"path": "f.txt", "content": "new\n"}))
        .await;
    assert_eq!(
        out,
        "wrote 1 lines (4 bytes) to f.txt (overwrote the existing file)"
    );
    assert_eq!(env.read("f.txt"), "new\n");
    // Its own write keeps its view fresh: a second overwrite needs no re-read.
    env.ok("write_file", json!({"path": "f.txt", "content": "newer\n"}))
        .await;
    assert_eq!(env.read("f.txt"), "newer\n");
}

#[tokio::test]
async fn write_file_refuses_to_clobber_a_change_made_since_the_read() {
    let env = Env::new();
    env.write("f.txt", "v1\n");
    env.ok("read_file", json!({"path": "f.txt"})).await;
    let seen_mtime = std::fs::metadata(env.path("f.txt"))
        .unwrap()
        .modified()
        .unwrap();
    // Another agent (own tracker, same locks) reads and rewrites it...
    let mut other = env.ctx.clone();
    other.files = Arc::new(FileTracker::default());
    call_with(&other, "read_file", json!({"path": "f.txt"}))
        .await
        .unwrap();
    let theirs = call_with(
        &other,
        "write_file",
        json!({"path": "f.txt", "content": "v2\n"}),
    )
    .await
    .unwrap();
    assert!(!theirs.is_error, "{}", theirs.content);
    // ...within the same mtime tick, so only the content tells.
    std::fs::File::options()
        .write(true)
        .open(env.path("f.txt"))
        .unwrap()
        .set_modified(seen_mtime)
        .unwrap();
    let stale = env
        .call("write_file", json!({"path": "f.txt", "content": "mine\n"}))
        .await;
    assert!(
        matches!(&stale, Err(ToolError::Refused(m)) if m.starts_with("f.txt changed since you last read it") && m.contains("before overwriting it")),
        "{stale:?}"
    );
    assert_eq!(env.read("f.txt"), "v2\n");
    // A change made by a command is caught too; after a fresh read the write goes through.
    env.ok("read_file", json!({"path": "f.txt"})).await;
    env.ok("bash", json!({"command": "echo v3 > f.txt"})).await;
    let stale = env
        .call("write_file", json!({"path": "f.txt", "content": "mine\n"}))
        .await;
    assert!(matches!(stale, Err(ToolError::Refused(_))), "{stale:?}");
    env.ok("read_file", json!({"path": "f.txt"})).await;
    env.ok("write_file", json!({"path": "f.txt", "content": "mine\n"}))
        .await;
    assert_eq!(env.read("f.txt"), "mine\n");
}

// ---------------------------------------------------------------- special files

/// Runs a file tool with a deadline, so a tool that blocks on a FIFO fails instead of hanging.
async fn call_soon(env: &Env, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
    tokio::time::timeout(Duration::from_secs(5), env.call(tool, input.clone()))
        .await
        .unwrap_or_else(|_| panic!("{tool} {input} hung"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_refuse_named_pipes_and_sockets() {
    use nix::sys::stat::Mode;
    let env = Env::new();
    nix::unistd::mkfifo(&env.path("pipe"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    std::os::unix::fs::symlink(env.path("pipe"), env.path("link-to-pipe")).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(env.path("sock")).unwrap();
    let refused = |r: &Result<ToolOutput, ToolError>, what: &str| matches!(r, Err(ToolError::Refused(m)) if m.starts_with(what) && m.contains("not a regular file"));
    for (path, what) in [
        ("pipe", "pipe is a named pipe"),
        ("link-to-pipe", "pipe is a named pipe"),
        ("sock", "sock is a socket"),
    ] {
        let read = call_soon(&env, "read_file", json!({"path": path})).await;
        assert!(refused(&read, what), "read_file {path}: {read:?}");
        let write = call_soon(&env, "write_file", json!({"path": path, "content": "x"})).await;
        assert!(refused(&write, what), "write_file {path}: {write:?}");
    }
    // A file the agent read and that was then swapped for a pipe: edit_file must not hang.
    env.write("f.txt", "text\n");
    env.ok("read_file", json!({"path": "f.txt"})).await;
    std::fs::remove_file(env.path("f.txt")).unwrap();
    nix::unistd::mkfifo(&env.path("f.txt"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    let edit = call_soon(
        &env,
        "edit_file",
        json!({"path": "f.txt", "old_string": "text", "new_string": "more"}),
    )
    .await;
    assert!(refused(&edit, "f.txt is a named pipe"), "{edit:?}");
    let write = call_soon(&env, "write_file", json!({"path": "f.txt", "content": "x"})).await;
    assert!(refused(&write, "f.txt is a named pipe"), "{write:?}");
    let meta = std::fs::symlink_metadata(env.path("f.txt")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()));
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
    // Another agent (own tracker, same locks) reads and rewrites the file...
    let mut other = env.ctx.clone();
    other.files = Arc::new(FileTracker::default());
    call_with(&other, "read_file", json!({"path": "f.txt"}))
        .await
        .unwrap();
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
    // The message names the path as given, never this machine's workspace root.
    let root = env.root().to_str().unwrap().to_string();
    for name in ["read_file", "list_files", "grep"] {
        let input = match name {
            "grep" => json!({"pattern": "x", "path": "../secret.txt"}),
            _ => json!({"path": "../secret.txt"}),
        };
        let shown = env.call(name, input).await.unwrap_err().to_string();
        assert_eq!(
            shown,
            "../secret.txt is outside the workspace; only paths inside it may be used"
        );
        assert!(!shown.contains(&root), "{shown}");
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
        // serde would take an array as the fields in order; found by `fuzz`.
        (
            "bash",
            json!(["true"]),
            "must be a JSON object of named fields, not an array",
        ),
        (
            "read_file",
            json!(null),
            "must be a JSON object of named fields, not null",
        ),
        ("write_file", json!("f"), "not a string"),
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

/// Randomised input tests (proptest): every built-in tool, given any JSON, returns `Ok` or
/// an error that says what was wrong, never panics, never hangs and never touches anything
/// outside its temp workspace; `Workspace::resolve` never lets a path out.
///
/// Each property runs proptest's default number of cases (`PROPTEST_CASES`, else 256) and
/// prints how many ran. A longer run: `PROPTEST_CASES=5000 cargo test --release -p
/// cadre-tools fuzz`.
mod fuzz {
    use cadre_tools::{builtin_tools, Tool, ToolContext, ToolError, ToolLimits, Workspace};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    use serde_json::{json, Map, Value};
    use std::collections::BTreeMap;
    use std::path::{Component, Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn check<S: Strategy>(
        name: &str,
        strategy: S,
        test: impl Fn(S::Value) -> Result<(), TestCaseError>,
    ) {
        let mut runner = TestRunner::new(Config {
            // Failures print the shrunk input; no regression files in the source tree.
            failure_persistence: None,
            ..Config::default()
        });
        let ran = AtomicU32::new(0);
        let started = Instant::now();
        let result = runner.run(&strategy, |v| {
            ran.fetch_add(1, Ordering::Relaxed);
            test(v)
        });
        eprintln!(
            "fuzz::{name}: {} cases in {:.2?}",
            ran.load(Ordering::Relaxed),
            started.elapsed()
        );
        if let Err(e) = result {
            panic!("fuzz::{name} failed: {e}");
        }
    }

    /// A temp folder holding the workspace `ws/` (a few files, symlinks in and out, a
    /// dangling one and a loop) and a sibling `outside/` nothing may touch.
    struct Sandbox {
        _dir: tempfile::TempDir,
        top: PathBuf,
        root: PathBuf,
        outside: PathBuf,
    }

    impl Sandbox {
        fn new() -> Self {
            use std::os::unix::fs::symlink;
            let dir = tempfile::tempdir().unwrap();
            let top = dir.path().canonicalize().unwrap();
            let root = top.join("ws");
            let outside = top.join("outside");
            for d in [
                &root,
                &outside,
                &root.join("src/deep"),
                &outside.join("sub"),
            ] {
                std::fs::create_dir_all(d).unwrap();
            }
            std::fs::write(root.join("a.txt"), "hello\nworld\nhello again\n").unwrap();
            std::fs::write(root.join("src/lib.rs"), "fn main() {}\n// TODO\n").unwrap();
            std::fs::write(root.join("src/deep/ünï.md"), "# title\n\ntext\n").unwrap();
            std::fs::write(root.join("bin.dat"), [0u8, 159, 146, 150, 0, 1]).unwrap();
            std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
            std::fs::write(outside.join("secret.txt"), "do not touch\n").unwrap();
            std::fs::write(outside.join("sub/x.txt"), "nor this\n").unwrap();
            symlink(&outside, root.join("out")).unwrap();
            symlink(outside.join("secret.txt"), root.join("secret")).unwrap();
            symlink(root.join("src"), root.join("in")).unwrap();
            symlink(outside.join("missing.txt"), root.join("dangle_out")).unwrap();
            symlink("loop", root.join("loop")).unwrap();
            Self {
                _dir: dir,
                top,
                root,
                outside,
            }
        }

        /// Every path under the temp folder but outside the workspace, with its bytes (or
        /// symlink target).
        fn snapshot_outside(&self) -> BTreeMap<PathBuf, Vec<u8>> {
            fn walk(p: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
                if p == skip {
                    return;
                }
                let meta = std::fs::symlink_metadata(p).unwrap();
                let body = if meta.file_type().is_symlink() {
                    std::fs::read_link(p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes()
                } else if meta.is_dir() {
                    for e in std::fs::read_dir(p).unwrap() {
                        walk(&e.unwrap().path(), skip, out);
                    }
                    b"<dir>".to_vec()
                } else {
                    std::fs::read(p).unwrap()
                };
                out.insert(p.to_path_buf(), body);
            }
            let mut out = BTreeMap::new();
            walk(&self.top, &self.root, &mut out);
            out
        }
    }

    /// Short strings of any characters.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![3 => "(?s).{0,12}", 1 => "[a-z_./]{0,10}"]
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(text(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Model-given paths: the workspace's files, pieces of its names joined every which
    /// way, absolute paths in and out of it, NUL bytes, unicode, and very long ones (up to
    /// `depth` folders deep).
    fn path(root: &Path, outside: &Path, depth: usize) -> BoxedStrategy<String> {
        let files = prop::sample::select(
            &[
                "a.txt",
                "src/lib.rs",
                "in/lib.rs",
                "./src/../a.txt",
                "src/deep/ünï.md",
                "bin.dat",
                "new.txt",
                "src/new.rs",
                "src",
                ".",
                "secret",
                "out/secret.txt",
            ][..],
        )
        .prop_map(str::to_owned);
        let part = prop_oneof![
            6 => prop::sample::select(&[
                ".", "..", "", "a.txt", "src", "lib.rs", "deep", "ünï.md", "bin.dat", "out",
                "in", "secret", "dangle_out", "loop", "new", "new.txt", "ws", "outside",
                "secret.txt", "x\0y", " ", "~", "*", "\u{202e}",
            ][..])
            .prop_map(str::to_owned),
            1 => text(),
            1 => "[a-z]{250,260}",
        ];
        let joined = (
            prop::sample::select(vec![
                String::new(),
                "/".to_owned(),
                format!("{}/", root.display()),
                format!("{}/", outside.display()),
                format!("{}/../", root.display()),
            ]),
            prop::collection::vec(part, 0..6),
            prop_oneof![Just("/"), Just("//"), Just("/./")],
        )
            .prop_map(|(start, parts, sep)| format!("{start}{}", parts.join(sep)));
        prop_oneof![
            10 => files,
            6 => joined,
            1 => text(),
            1 => (1..depth).prop_map(|n| "a/".repeat(n)),
            1 => (1usize..200).prop_map(|n| "../".repeat(n)),
            1 => (5000usize..20000).prop_map(|n| "x".repeat(n)),
        ]
        .boxed()
    }

    #[test]
    fn workspace_resolve_stays_inside() {
        let sb = Sandbox::new();
        let ws = Workspace::new(&sb.root).unwrap();
        check(
            "workspace_resolve_stays_inside",
            path(&sb.root, &sb.outside, 3000),
            |p| {
                let started = Instant::now();
                let out = ws.resolve(&p);
                prop_assert!(
                    started.elapsed() < Duration::from_secs(2),
                    "resolving took {:?}",
                    started.elapsed()
                );
                match out {
                    Ok(abs) => {
                        prop_assert!(abs.starts_with(ws.root()), "{p:?} resolved to {abs:?}");
                        prop_assert!(
                            abs.components()
                                .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
                            "{p:?} resolved to {abs:?}"
                        );
                    }
                    Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
                }
                Ok(())
            },
        );
    }

    /// What a field of a tool's input holds.
    #[derive(Clone, Copy)]
    enum Kind {
        Path,
        Str,
        U64,
        Bool,
        Regex,
        Glob,
        Command,
    }

    /// A command built from a safe alphabet: it prints at most a word and changes nothing.
    fn safe_command() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("".to_owned()),
            Just("   ".to_owned()),
            "[A-Za-z0-9_.,-]{0,12}".prop_map(|w| format!("echo {w}")),
            "[A-Za-z0-9_.,-]{0,12}".prop_map(|w| format!("printf %s {w}")),
        ]
    }

    fn is_safe_command(c: &str) -> bool {
        let word = |w: &str| {
            w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.,-".contains(c))
        };
        c.trim().is_empty()
            || c == "true"
            || c == "false"
            || c.strip_prefix("echo ").is_some_and(word)
            || c.strip_prefix("printf %s ").is_some_and(word)
    }

    fn value_of(kind: Kind, root: &Path, outside: &Path) -> BoxedStrategy<Value> {
        let s = |st: BoxedStrategy<String>| st.prop_map(Value::String).boxed();
        match kind {
            Kind::Path => s(path(root, outside, 100)),
            Kind::Str => s(prop_oneof![
                1 => text(),
                1 => prop::sample::select(&["hello", "world", "\n", "fn", "TODO", "again"][..]).prop_map(str::to_owned),
            ]
            .boxed()),
            Kind::U64 => prop_oneof![
                3 => (0u64..4).prop_map(Value::from),
                1 => (0u64..3000).prop_map(Value::from),
                1 => any::<u64>().prop_map(Value::from),
                1 => Just(Value::from(u64::MAX)),
            ]
            .boxed(),
            Kind::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
            Kind::Regex => s(prop_oneof![
                2 => text(),
                3 => prop::sample::select(&[
                    "hello", "(?i)WORLD", "a|b", "[", "(", "\\", "x{100000}", ".*", "^", "$",
                    "\\bfn\\b", "(a+)+$", "\\p{Greek}", "(?-u)\\xff", "", "\n",
                ][..])
                .prop_map(str::to_owned),
            ]
            .boxed()),
            Kind::Glob => s(prop_oneof![
                2 => text(),
                3 => prop::sample::select(&[
                    "*", "**/*.rs", "{a,b}", "[", "**", "src/**", "*.{txt,md}", "\\", "[!a]",
                    "../*", "/etc/*", "{", "***", "",
                ][..])
                .prop_map(str::to_owned),
            ]
            .boxed()),
            Kind::Command => s(safe_command().boxed()),
        }
    }

    /// Inputs for a tool with `fields`: mostly the right keys (each maybe missing, maybe of
    /// the wrong type), plus objects of random keys, plus values that are not objects.
    fn input(fields: &[(&'static str, Kind)], root: &Path, outside: &Path) -> BoxedStrategy<Value> {
        let parts: Vec<_> = fields
            .iter()
            .map(|&(name, kind)| {
                let value = prop_oneof![
                    12 => value_of(kind, root, outside),
                    1 => arb_json(),
                ];
                prop::option::weighted(0.9, value).prop_map(move |v| (name, v))
            })
            .collect();
        let names: Vec<&'static str> = fields.iter().map(|f| f.0).collect();
        let shaped = (parts, prop::option::weighted(0.05, (text(), arb_json()))).prop_map(
            |(parts, junk)| {
                let mut obj: Map<String, Value> = parts
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.to_owned(), v?)))
                    .collect();
                if let Some((k, v)) = junk {
                    obj.insert(k, v);
                }
                Value::Object(obj)
            },
        );
        let key = prop_oneof![prop::sample::select(names).prop_map(str::to_owned), text()];
        let random = prop::collection::btree_map(key, arb_json(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()));
        prop_oneof![
            10 => shaped,
            1 => random,
            1 => arb_json().prop_filter("not an object", |v| !v.is_object()),
        ]
        .boxed()
    }

    /// Runs one tool on random inputs in a temp workspace shared by all cases (so reads
    /// make later edits possible), then checks nothing outside the workspace changed.
    fn fuzz_tool(name: &str, fields: &[(&'static str, Kind)]) {
        let sb = Sandbox::new();
        let before = sb.snapshot_outside();
        let tool: Arc<dyn Tool> = builtin_tools()
            .into_iter()
            .find(|t| t.name() == name)
            .unwrap();
        let reader: Arc<dyn Tool> = builtin_tools()
            .into_iter()
            .find(|t| t.name() == "read_file")
            .unwrap();
        let mut ctx = ToolContext::new(Arc::new(Workspace::new(&sb.root).unwrap()));
        ctx.limits = ToolLimits {
            bash_timeout: Duration::from_secs(5),
            bash_max_timeout: Duration::from_secs(5),
            max_output_bytes: 2_000,
            max_read_bytes: 1 << 20,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let ok = AtomicU32::new(0);
        let strategy = (
            input(fields, &sb.root, &sb.outside),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.5),
        );
        check(
            &format!("{name}_input"),
            strategy,
            |(mut input, read_only, read_first)| {
                if name == "bash" {
                    // Only commands from the safe alphabet ever run.
                    if let Some(Value::String(c)) = input.get_mut("command") {
                        if !is_safe_command(c) {
                            *c = "true".to_owned();
                        }
                    }
                }
                let mut ctx = ctx.clone();
                ctx.read_only = read_only;
                let out = rt.block_on(async {
                    if read_first {
                        // Lets edit_file get past "read it first" for this path.
                        if let Some(p) = input.get("path").filter(|p| p.is_string()) {
                            let _ = reader.call(json!({"path": p}), &ctx).await;
                        }
                    }
                    tokio::time::timeout(Duration::from_secs(20), tool.call(input.clone(), &ctx))
                        .await
                });
                let out =
                    out.map_err(|_| TestCaseError::fail(format!("{name} hung on {input}")))?;
                match out {
                    Ok(_) => {
                        prop_assert!(input.is_object(), "{name} accepted {input}");
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        let shown = e.to_string();
                        prop_assert!(
                            !shown.trim().is_empty(),
                            "{name} {input}: blank error {e:?}"
                        );
                        prop_assert!(
                            !shown.contains("internal error") && !shown.contains("panicked"),
                            "{name} {input}: {shown}"
                        );
                        if let ToolError::InvalidInput(m) = &e {
                            prop_assert!(!m.contains("struct Input"), "{name} {input}: {m}");
                        }
                        if !input.is_object() {
                            prop_assert!(
                                matches!(e, ToolError::InvalidInput(_)),
                                "{name} {input}: {e:?}"
                            );
                        }
                    }
                }
                Ok(())
            },
        );
        eprintln!(
            "fuzz::{name}_input: {} calls succeeded",
            ok.load(Ordering::Relaxed)
        );
        assert_eq!(
            sb.snapshot_outside(),
            before,
            "{name} changed something outside the workspace"
        );
    }

    #[test]
    fn bash_input() {
        // `command` only ever comes from the safe alphabet; the other fields are fuzzed.
        fuzz_tool(
            "bash",
            &[
                ("command", Kind::Command),
                ("timeout_ms", Kind::U64),
                ("description", Kind::Str),
            ],
        );
    }

    #[test]
    fn read_file_input() {
        fuzz_tool(
            "read_file",
            &[
                ("path", Kind::Path),
                ("offset", Kind::U64),
                ("limit", Kind::U64),
            ],
        );
    }

    #[test]
    fn write_file_input() {
        fuzz_tool(
            "write_file",
            &[("path", Kind::Path), ("content", Kind::Str)],
        );
    }

    #[test]
    fn edit_file_input() {
        fuzz_tool(
            "edit_file",
            &[
                ("path", Kind::Path),
                ("old_string", Kind::Str),
                ("new_string", Kind::Str),
                ("replace_all", Kind::Bool),
            ],
        );
    }

    #[test]
    fn list_files_input() {
        fuzz_tool(
            "list_files",
            &[("pattern", Kind::Glob), ("path", Kind::Path)],
        );
    }

    #[test]
    fn grep_input() {
        fuzz_tool(
            "grep",
            &[
                ("pattern", Kind::Regex),
                ("path", Kind::Path),
                ("glob", Kind::Glob),
                ("case_insensitive", Kind::Bool),
                ("context", Kind::U64),
                ("max_results", Kind::U64),
            ],
        );
    }
}

/// `Worktree` against the real `git` in temp repositories.
mod worktree {
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
        let (
            Ok(Finished::Committed { branch: b1, .. }),
            Ok(Finished::Committed { branch: b2, .. }),
        ) = (one, two)
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
                matches!(err, WorktreeError::InvalidRunId(_)),
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
}
