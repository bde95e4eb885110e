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

/// Randomised input tests (proptest): every built-in tool, given any JSON, returns `Ok` or
/// an error that says what was wrong, never panics, never hangs and never touches anything
/// outside its temp workspace; `Workspace::resolve` never lets a path out.
///
/// Each property runs proptest's default number of cases (`PROPTEST_CASES`, else 256) and
/// prints how many ran. A longer run: `PROPTEST_CASES=5000 cargo test --release -p
/// cadre-tools fuzz`.
#[path = "tools/fuzz.rs"]
mod fuzz;

/// `Worktree` against the real `git` in temp repositories.
#[path = "tools/worktree.rs"]
mod worktree;

#[path = "tools/bash.rs"]
mod bash;
#[path = "tools/confinement.rs"]
mod confinement;
#[path = "tools/files.rs"]
mod files;
#[path = "tools/input.rs"]
mod input;
#[path = "tools/sandbox.rs"]
mod sandbox;
