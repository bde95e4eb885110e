//! `cadre trust [DIR] [--revoke | --list]`: whether a project's commands and endpoints (its
//! hooks, MCP servers, `base_url`) may be used.

use crate::args::TrustCmd;
use crate::common::exit::{Code, Result};
use crate::common::hooks::aligned;
use crate::common::project::{user_dir, workspace_root};
use crate::common::project_items::of_project;
use crate::common::trust::{key, State, Store};
use std::path::{Path, PathBuf};

/// Trusts the project (its items as they are now), forgets the answer, or lists answers.
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
            outln!("forgot the answer for {shown}: its hooks and servers are left out until it is trusted again");
        } else {
            outln!("{shown} was never answered for: its hooks and servers are left out until it is trusted");
        }
        return Ok(Code::Done);
    }
    let items = of_project(&root)?;
    store.set(&root, true, &items.fingerprint());
    store.save()?;
    if items.items.is_empty() {
        outln!("trusted {shown}; it has no hooks, MCP servers or endpoints now, and any added later are asked about again");
    } else {
        outln!(
            "trusted {shown}: its {} used in its runs, as they are now (if they change, cadre asks again):",
            match items.items.len() {
                1 => "item is".to_owned(),
                n => format!("{n} items are"),
            }
        );
        for line in items.lines() {
            outln!("  {line}");
        }
    }
    Ok(Code::Done)
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
            let now = match of_project(root) {
                _ if !root.is_dir() => "(the folder is gone)".to_owned(),
                Err(e) => format!("(its settings cannot be read: {})", e.report()),
                Ok(items) => match store.state(root, &items.fingerprint()) {
                    State::Changed { .. } => {
                        "(changed since: left out until answered again)".to_owned()
                    }
                    _ => {
                        let n = items.items.len();
                        format!("({n} item{})", if n == 1 { "" } else { "s" })
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
