//! `cadre doctor`: what the sandbox can enforce on this machine, and what the project holds.

use crate::common::exit::Code;
use crate::common::project::{project_root, user_dir, Found, ROOT_MARKERS};
use cadre_core::definitions::instructions::Origin;
use cadre_core::Instructions;
use cadre_tools::landlock_status;
use std::path::PathBuf;

/// Prints the kernel's Landlock ABI and what read-only and writing agents are held to, then
/// the project root, its instruction files and its settings files.
pub fn doctor(directory: Option<PathBuf>) -> Code {
    let s = landlock_status();
    let yes = |b: bool| if b { "enforced" } else { "NOT enforced" };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    outln!("kernel            {}", kernel.trim());
    outln!(
        "landlock ABI      {}",
        if s.abi == 0 {
            "none (Landlock missing or disabled)".into()
        } else {
            s.abi.to_string()
        }
    );
    outln!("file writes       {}  (read-only agents: only their private $TMPDIR; others: the workspace too)", yes(s.fs_write_restriction));
    outln!(
        "network (TCP)     {}  (for agent types with network: false)",
        yes(s.tcp_restriction)
    );
    outln!(
        "signals, sockets  {}  (abstract Unix sockets and signals scoped to the command)",
        yes(s.ipc_scoping)
    );
    outln!(
        "chmod/chown/xattr {}  (read-only agents, seccomp)",
        yes(s.metadata_restriction)
    );
    outln!("never enforced    reads; timestamps of existing files; UDP; Unix sockets with a path");
    outln!("MCP tools         outside the sandbox: they run in the server's process, so read-only agent types get them only when their type names them (tools: [mcp__<server>] or mcp_servers)");
    outln!("\n{}", s.summary);
    if !s.fs_write_restriction {
        outln!("\nbash is refused for read-only agents here; `cadre run --allow-unsandboxed-bash` runs it without a sandbox.");
    }
    outln!();
    project(directory);
    Code::Done
}

/// The project root and how it was found, the instruction files with their sizes, and the
/// settings files.
fn project(directory: Option<PathBuf>) {
    let (root, found) = match project_root(directory) {
        Ok(r) => r,
        Err(e) => {
            outln!("project root      {}", e.report());
            return;
        }
    };
    let how = match found {
        Found::Flag => "given with -C".to_owned(),
        Found::Marker(m) => format!("the nearest folder with {m}"),
        Found::Current => format!(
            "the current folder: no folder above it has {}",
            ROOT_MARKERS.join(", ")
        ),
    };
    outln!(
        "project root      {}  ({how}; tools cannot leave it)",
        root.display()
    );
    let user_dir = user_dir(true);
    let instructions = Instructions::load(&root, user_dir.as_deref());
    if instructions.files().is_empty() {
        outln!("instructions      none (AGENTS.md, CLAUDE.md or .claude/CLAUDE.md at the root; ~/.config/cadre/AGENTS.md)");
    }
    for (i, f) in instructions.files().iter().enumerate() {
        let what = match f.origin {
            Origin::User => "  (yours, every project)",
            Origin::Project => "",
            Origin::Import => "  (imported)",
        };
        outln!(
            "{:<17} {}  {}{what}",
            if i == 0 { "instructions" } else { "" },
            f.label,
            size(f.bytes)
        );
    }
    for p in instructions.problems() {
        outln!("                  {p}");
    }
    match crate::common::settings::files(&root, user_dir.as_deref()) {
        Ok(files) => {
            for (i, f) in files.iter().enumerate() {
                outln!(
                    "{:<17} {}  {}",
                    if i == 0 { "settings" } else { "" },
                    f.label,
                    if f.found { "(read)" } else { "(not found)" }
                );
            }
        }
        Err(e) => outln!("settings          {}", e.report()),
    }
}

/// A size in bytes as people read it.
fn size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}
