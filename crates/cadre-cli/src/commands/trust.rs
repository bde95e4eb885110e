//! `cadre trust [DIR] [--revoke | --list]`: whether a project's hooks may run.

use crate::args::TrustCmd;
use crate::common::definitions::load_registry_from;
use crate::common::exit::{Code, Result};
use crate::common::hooks::{aligned, rows, ConfiguredHooks};
use crate::common::project::{user_dir, workspace_root};
use crate::common::settings;
use crate::common::trust::{key, State, Store};
use std::path::{Path, PathBuf};

/// Trusts the project (its hooks as they are now), forgets the answer, or lists answers.
pub fn trust(cmd: &TrustCmd, directory: Option<PathBuf>) -> Result<Code> {
    let mut store = Store::load(user_dir(true).as_deref());
    if cmd.list {
        list(&store);
        return Ok(Code::Done);
    }
    let root = workspace_root(cmd.dir.clone().or(directory))?;
    let shown = key(&root);
    if cmd.revoke {
        if store.remove(&root) {
            store.save()?;
            outln!("forgot the answer for {shown}: its hooks do not run until it is trusted again");
        } else {
            outln!("{shown} was never answered for: its hooks do not run until it is trusted");
        }
        return Ok(Code::Done);
    }
    let hooks = project_hooks(&root)?;
    store.set(&root, true, &hooks.fingerprint(&root));
    store.save()?;
    let all = hooks.project_all();
    if all.is_empty() {
        outln!("trusted {shown}; it has no hooks now, and hooks added later are asked about again");
    } else {
        outln!(
            "trusted {shown}: its {} run in its runs, as they are now (if they change, cadre asks again):",
            if all.len() == 1 {
                "hook".to_owned()
            } else {
                format!("{} hooks", all.len())
            }
        );
        for line in aligned(&rows(&all, None)) {
            outln!("  {line}");
        }
    }
    Ok(Code::Done)
}

/// The hooks of the project at `root` alone (not the user's): its settings files' and its
/// agent files'.
fn project_hooks(root: &Path) -> Result<ConfiguredHooks> {
    let files = settings::files(root, None)?;
    let claude = settings::claude_files(root, None)?;
    let registry = load_registry_from(root, &[], false);
    Ok(settings::configured_hooks(&files, &claude).with_types(&registry, root))
}

/// Every project answered for, and whether the answer still holds.
fn list(store: &Store) {
    if store.projects.is_empty() {
        outln!("no project answered for yet: `cadre trust [DIR]` trusts one");
        return;
    }
    let rows: Vec<Vec<String>> = store
        .projects
        .iter()
        .map(|(path, entry)| {
            let root = Path::new(path);
            let answer = if entry.trusted { "trusted" } else { "declined" };
            let now = match project_hooks(root) {
                _ if !root.is_dir() => "(the folder is gone)".to_owned(),
                Err(e) => format!("(its settings cannot be read: {})", e.report()),
                Ok(h) => match store.state(root, &h.fingerprint(root)) {
                    State::Changed => {
                        "(its hooks changed since: not run until answered again)".to_owned()
                    }
                    _ => {
                        let n = h.project_all().len();
                        format!("({n} hook{})", if n == 1 { "" } else { "s" })
                    }
                },
            };
            vec![path.clone(), answer.to_owned(), now]
        })
        .collect();
    for line in aligned(&rows) {
        outln!("{line}");
    }
}
