use super::*;

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
        Err(ToolError::Refused { reason: msg }) => assert!(msg.contains(needle), "{msg}"),
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
        matches!(&unread, Err(ToolError::Refused { reason: m }) if m == "read f.txt with read_file before overwriting it"),
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
        matches!(&stale, Err(ToolError::Refused { reason: m }) if m.starts_with("f.txt changed since you last read it") && m.contains("before overwriting it")),
        "{stale:?}"
    );
    assert_eq!(env.read("f.txt"), "v2\n");
    // A change made by a command is caught too; after a fresh read the write goes through.
    env.ok("read_file", json!({"path": "f.txt"})).await;
    env.ok("bash", json!({"command": "echo v3 > f.txt"})).await;
    let stale = env
        .call("write_file", json!({"path": "f.txt", "content": "mine\n"}))
        .await;
    assert!(matches!(stale, Err(ToolError::Refused { .. })), "{stale:?}");
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
    let refused = |r: &Result<ToolOutput, ToolError>, what: &str| matches!(r, Err(ToolError::Refused { reason: m }) if m.starts_with(what) && m.contains("not a regular file"));
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
        matches!(&zero, Err(ToolError::Refused { reason: m }) if m.contains("not found") && m.contains("whitespace")),
        "{zero:?}"
    );
    let many = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 2"}),
        )
        .await;
    assert!(
        matches!(&many, Err(ToolError::Refused { reason: m }) if m.contains("3 times")),
        "{many:?}"
    );
    assert_eq!(env.read("f.txt"), "x = 1\nx = 1\nx = 1\n");
    let same = env
        .call(
            "edit_file",
            json!({"path": "f.txt", "old_string": "x = 1", "new_string": "x = 1"}),
        )
        .await;
    assert!(
        matches!(same, Err(ToolError::InvalidInput { .. })),
        "{same:?}"
    );
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
        matches!(&unread, Err(ToolError::Refused { reason: m }) if m == "read f.txt with read_file before editing it"),
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
        matches!(&stale, Err(ToolError::Refused { reason: m }) if m.contains("f.txt changed since you last read it")),
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
    assert!(matches!(stale, Err(ToolError::Refused { .. })), "{stale:?}");
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
                Err(ToolError::Refused { reason: m }) => {
                    assert!(m.contains("changed since"), "{m}")
                }
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
        matches!(&bad, Err(ToolError::InvalidInput { message: m }) if m.contains("regex")),
        "{bad:?}"
    );
}
