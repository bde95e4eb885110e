//! Hook scripts as Claude Code users write them (`.claude/hooks/*.sh`, reading their JSON
//! input with `jq`), and the processes they leave behind, for the hook tests of every crate.

use std::path::Path;

/// Fails loudly when `jq` is missing: hook scripts written for Claude Code read their input
/// with it (`.ci/run` installs it).
pub fn require_jq() {
    let found = std::process::Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "the hook tests' scripts need `jq` on PATH, as Claude Code users' do (apt-get install jq; .ci/run installs it)"
    );
}

/// Writes the executable shell script `.claude/hooks/NAME` in the project `dir`; returns the
/// command a settings file gives for it.
#[allow(clippy::panic)] // Test helper: a test cannot go on without its script.
pub fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let hooks = dir.join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap_or_else(|e| panic!("{}: {e}", hooks.display()));
    let file = hooks.join(name);
    std::fs::write(&file, format!("#!/bin/sh\n{body}\n"))
        .and_then(|()| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    format!("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/{name}")
}

/// Whether the process `pid` is gone: no longer there, or a zombie left for a reaper (it
/// runs nothing and holds nothing).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_runs_and_a_finished_process_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(dir.path(), "hi.sh", "echo hi");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("CLAUDE_PROJECT_DIR", dir.path())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        assert!(!gone(i32::try_from(std::process::id()).unwrap()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        child.wait().unwrap();
        assert!(gone(pid));
    }
}
