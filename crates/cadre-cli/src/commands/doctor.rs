//! `cadre doctor`: what the sandbox can enforce on this machine, and what the project holds.

use crate::common::definitions::load_registry_from;
use crate::common::exit::Code;
use crate::common::hooks;
use crate::common::project::{project_root, user_dir, Found, ROOT_MARKERS};
use crate::common::project_items::{self, hook_status, ProjectItems};
use crate::common::settings;
use cadre_core::internal::Origin;
use cadre_core::Instructions;
use cadre_tools::landlock_status;
use std::path::PathBuf;

/// Prints the kernel's Landlock ABI and what read-only and writing agents are held to, then
/// the project root, its instruction files, its settings files and every hook.
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

/// The project root and how it was found, the instruction files with their sizes, the
/// settings files, and every hook with whether it runs.
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
    let read = settings::files(&root, user_dir.as_deref())
        .and_then(|files| Ok((files, settings::claude_files(&root, user_dir.as_deref())?)));
    let (files, claude) = match read {
        Ok(read) => read,
        Err(e) => {
            outln!("settings          {}", e.report());
            return;
        }
    };
    let labels = files
        .iter()
        .map(|f| (&f.label, f.found))
        .chain(claude.iter().map(|(f, _)| (&f.label, f.found)));
    for (i, (label, found)) in labels.enumerate() {
        outln!(
            "{:<17} {label}  {}",
            if i == 0 { "settings" } else { "" },
            if found { "(read)" } else { "(not found)" }
        );
    }
    let registry = load_registry_from(&root, &[], true);
    let sources = settings::Sources { files, claude };
    let flags = hooks::Flags::default();
    let items = ProjectItems::gather(&root, &sources, &registry, flags);
    let state = project_items::state(&items, &root, flags);
    let configured = sources.hooks().with_types(&registry, &root);
    let listed = hooks::listing(&configured, flags, &hook_status(state, flags));
    if listed.is_empty() {
        outln!("hooks             none (.claude/settings.json, .claude/settings.local.json, cadre.toml [hooks]; yours in ~/.claude/settings.json, ~/.config/cadre/config.toml)");
    }
    for (i, line) in listed.iter().enumerate() {
        outln!("{:<17} {line}", if i == 0 { "hooks" } else { "" });
    }
    outln!();
    project_items::print_items(&items, state, flags);
}

/// A size in bytes as people read it.
fn size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}
