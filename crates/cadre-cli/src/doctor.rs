//! `cadre doctor`: what the sandbox can enforce on this machine.

use crate::exit::Code;
use cadre_tools::landlock_status;

/// Prints the kernel's Landlock ABI and what read-only and writing agents are held to.
pub fn doctor() -> Code {
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
    Code::Done
}
