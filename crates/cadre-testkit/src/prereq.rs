//! The outside programs some tests need, found one way by those tests and by the build
//! scripts that mark them ignored where a program is missing.
//!
//! A build script includes this file with `#[path]` (it uses only `std`) and calls [`emit`]:
//! each [`Prereq`] becomes a cfg (`has_restate`, …), set where the program is found or where
//! its `CADRE_REQUIRE_*` variable asks for its tests anyway (`.ci/run` sets them all, so
//! there a missing program fails its tests instead of hiding them). A test carries
//! `#[cfg_attr(not(has_restate), ignore = "needs …")]`, so `cargo test` lists it as ignored
//! with the reason, and still checks at run time in case the program went away since.
//!
//! ```text
//! // build.rs
//! #[path = "../cadre-testkit/src/prereq.rs"]
//! mod prereq;
//! fn main() {
//!     prereq::emit(&[prereq::CHROMIUM]);
//! }
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where `.ci/run` installs the Restate server from npm, relative to the workspace root.
pub const NPM_RESTATE: &str = "target/npm-restate";

/// The native server inside [`NPM_RESTATE`]; the package's own `restate-server` is a node
/// wrapper, and killing the wrapper would leave the server running.
const NPM_RESTATE_SERVER: &str =
    "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server";

/// Where `.ci/run` installs the published filesystem MCP server, relative to the workspace
/// root.
pub const NPM_MCP: &str = "target/npm-mcp";

/// The server's command inside [`NPM_MCP`].
const NPM_MCP_SERVER: &str = "node_modules/.bin/mcp-server-filesystem";

/// Where `.ci/run` installs the MCP Inspector (a published MCP client) from npm, relative
/// to the workspace root.
pub const NPM_INSPECTOR: &str = "target/npm-inspector";

/// The Inspector's command inside [`NPM_INSPECTOR`].
const NPM_INSPECTOR_BIN: &str = "node_modules/.bin/mcp-inspector";

/// Something some tests need, and how to find it.
#[derive(Clone, Copy, Debug)]
pub struct Prereq {
    /// The cfg a build script sets where it is found or required, e.g. `has_restate`.
    pub cfg: &'static str,
    /// The variable that makes its tests run, and fail, where it is missing.
    pub require_env: &'static str,
    /// Where it is, if anywhere.
    pub find: fn() -> Option<PathBuf>,
    /// The npm prefix it is installed into, relative to the workspace root; `None` for a
    /// program looked for on `PATH`.
    pub npm_prefix: Option<&'static str>,
    /// Other variables the search reads, so that changing one re-runs it.
    pub env: &'static [&'static str],
    /// Folders searched besides `PATH`.
    pub dirs: &'static [&'static str],
}

/// The Restate server (see [`restate_server_binary`]).
pub const RESTATE: Prereq = Prereq {
    cfg: "has_restate",
    require_env: "CADRE_REQUIRE_RESTATE",
    find: restate_server_binary,
    npm_prefix: Some(NPM_RESTATE),
    env: &["CADRE_RESTATE_SERVER"],
    dirs: &[],
};

/// HAProxy, which the engine tests put in front of worker replicas; required with Restate.
pub const HAPROXY: Prereq = Prereq {
    cfg: "has_haproxy",
    require_env: "CADRE_REQUIRE_RESTATE",
    find: haproxy_binary,
    npm_prefix: None,
    env: &[],
    dirs: &[DEBIAN_SBIN],
};

/// A headless Chromium, which runs the script of `cadre runs show --html`'s page.
pub const CHROMIUM: Prereq = Prereq {
    cfg: "has_chromium",
    require_env: "CADRE_REQUIRE_CHROMIUM",
    find: chromium_binary,
    npm_prefix: None,
    env: &[],
    dirs: &[],
};

/// The published filesystem MCP server from npm.
pub const NPM_MCP_FILESYSTEM: Prereq = Prereq {
    cfg: "has_npm_mcp",
    require_env: "CADRE_REQUIRE_NPM_MCP",
    find: npm_mcp_server,
    npm_prefix: Some(NPM_MCP),
    env: &[],
    dirs: &[],
};

/// The MCP Inspector from npm, whose `--cli` mode is a published MCP client.
pub const MCP_INSPECTOR: Prereq = Prereq {
    cfg: "has_mcp_inspector",
    require_env: "CADRE_REQUIRE_MCP_INSPECTOR",
    find: mcp_inspector,
    npm_prefix: Some(NPM_INSPECTOR),
    env: &[],
    dirs: &[],
};

/// A mount namespace of the test's own where a small file system can be mounted and fill
/// up, for the tests of a full disk: `unshare`, with a user namespace where the user is not
/// root (see [`mount_namespace`]).
pub const TMPFS_MOUNT: Prereq = Prereq {
    cfg: "has_tmpfs_mount",
    require_env: "CADRE_REQUIRE_TMPFS_MOUNT",
    find: unshare_that_mounts,
    npm_prefix: None,
    env: &[],
    dirs: &[],
};

/// The command line prefix that runs a command in a mount namespace of its own where it may
/// mount a tmpfs: `unshare --user --map-root-user --mount` (no root needed where user
/// namespaces are allowed), else `unshare --mount` (root); `None` where neither mounts one.
/// The namespace's mounts end with it and are never seen outside.
pub fn mount_namespace() -> Option<Vec<String>> {
    let unshare = on_path("unshare")?;
    let probe = std::env::temp_dir().join(format!("cadre-tmpfs-probe-{}", std::process::id()));
    std::fs::create_dir_all(&probe).ok()?;
    let flags: [&[&str]; 2] = [&["--user", "--map-root-user", "--mount"], &["--mount"]];
    let works = flags.into_iter().find(|flags| {
        std::process::Command::new(&unshare)
            .args(*flags)
            .args(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&probe)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    let _ = std::fs::remove_dir(&probe);
    let flags = works?;
    let mut prefix = vec![unshare.to_string_lossy().into_owned()];
    prefix.extend(flags.iter().map(|f| (*f).to_owned()));
    Some(prefix)
}

/// `unshare`, where it can give a command a tmpfs of its own ([`mount_namespace`]).
fn unshare_that_mounts() -> Option<PathBuf> {
    mount_namespace().and_then(|prefix| prefix.into_iter().next().map(PathBuf::from))
}

/// Where Debian installs HAProxy, often not on a user's `PATH`.
const DEBIAN_SBIN: &str = "/usr/sbin";

/// The native `restate-server` binary: `$CADRE_RESTATE_SERVER`, else the npm install under
/// the workspace's [`NPM_RESTATE`], else `restate-server` on `PATH`.
pub fn restate_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CADRE_RESTATE_SERVER") {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let npm = workspace_root().join(NPM_RESTATE).join(NPM_RESTATE_SERVER);
    if npm.is_file() {
        return Some(npm);
    }
    on_path("restate-server")
}

/// The `haproxy` binary: on `PATH`, else Debian's `/usr/sbin/haproxy`.
pub fn haproxy_binary() -> Option<PathBuf> {
    on_path("haproxy").or_else(|| {
        let debian = Path::new(DEBIAN_SBIN).join("haproxy");
        debian.is_file().then_some(debian)
    })
}

/// Debian's `chromium` (or `chromium-browser`) on `PATH`.
pub fn chromium_binary() -> Option<PathBuf> {
    on_path("chromium").or_else(|| on_path("chromium-browser"))
}

/// The filesystem MCP server installed under the workspace's [`NPM_MCP`].
pub fn npm_mcp_server() -> Option<PathBuf> {
    let bin = workspace_root().join(NPM_MCP).join(NPM_MCP_SERVER);
    bin.is_file().then_some(bin)
}

/// The MCP Inspector installed under the workspace's [`NPM_INSPECTOR`].
pub fn mcp_inspector() -> Option<PathBuf> {
    let bin = workspace_root().join(NPM_INSPECTOR).join(NPM_INSPECTOR_BIN);
    bin.is_file().then_some(bin)
}

/// Whether `var` asks for tests to run where their program is missing: set, and neither
/// empty nor `0`.
pub fn required(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
}

/// For a test: where `prereq` is; where it is missing, `None` after a note on stderr (the
/// test returns early), or a panic when its tests are [`required`].
#[allow(clippy::panic)] // Test helper: failing the test is its purpose when CI requires it.
pub fn find_or_skip(prereq: &Prereq, install: &str) -> Option<PathBuf> {
    let found = (prereq.find)();
    if found.is_none() {
        let var = prereq.require_env;
        if required(var) {
            panic!("{var} is set but {} is missing; {install}", prereq.cfg);
        }
        eprintln!("note: test skipped, {} is missing; {install}", prereq.cfg);
    }
    found
}

/// The workspace root: two levels above the manifest of the crate this is compiled in
/// (every crate is `crates/<name>`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .map_or_else(|| manifest.join("../.."), Path::to_path_buf)
}

/// `name` in a folder on `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// For a build script: declares each prerequisite's cfg and sets it where the program is
/// found or [`required`]; tells cargo what to watch, so that installing a program later (or
/// setting a variable) re-runs the detection and the tests stop being ignored.
///
/// Cargo re-runs a build script on every build while a watched path is missing, so only
/// paths that exist are watched: the program where found; else the folders it would be
/// installed into, an npm prefix being created empty for the purpose.
pub fn emit(prereqs: &[Prereq]) {
    println!("cargo::rerun-if-env-changed=PATH");
    let mut watch = BTreeSet::new();
    for prereq in prereqs {
        println!("cargo::rustc-check-cfg=cfg({})", prereq.cfg);
        println!("cargo::rerun-if-env-changed={}", prereq.require_env);
        for var in prereq.env {
            println!("cargo::rerun-if-env-changed={var}");
        }
        let found = (prereq.find)();
        match (&found, prereq.npm_prefix) {
            (Some(path), _) => {
                watch.insert(path.clone());
            }
            (None, Some(prefix)) => {
                let dir = workspace_root().join(prefix);
                if std::fs::create_dir_all(&dir).is_ok() {
                    watch.insert(dir);
                }
            }
            (None, None) => watch.extend(search_dirs(prereq.dirs)),
        }
        if found.is_some() || required(prereq.require_env) {
            println!("cargo::rustc-cfg={}", prereq.cfg);
        }
    }
    for path in watch {
        println!("cargo::rerun-if-changed={}", path.display());
    }
}

/// The folders a program on `PATH` (or in `extra`) would appear in: absolute, existing, and
/// outside the workspace, whose build output changes on every build.
fn search_dirs(extra: &[&str]) -> Vec<PathBuf> {
    let root = workspace_root();
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .filter(|dir| dir.is_absolute() && dir.is_dir() && !dir.starts_with(&root))
        .collect()
}
