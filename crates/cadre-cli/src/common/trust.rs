//! Which projects the user trusts: `~/.config/cadre/trusted.json`, one entry per project,
//! keyed by the canonical path of its root.
//!
//! An entry remembers the answer (trusted or declined) together with one fingerprint of
//! everything the project supplies that can run a command, reach a host or weaken a rule,
//! as it was when the answer was given (gathered by the `project_items` module).
//! What changes afterwards (a pull that adds a hook or an MCP server, an edit) is not covered
//! by the old answer: cadre asks again on a terminal; without one, the project's items are
//! left out, and a run that would lose the project's hooks that way is refused. The scripts a
//! hook command names are not part of the fingerprint: like the rest of the project's code,
//! they are the project's to change. An entry written before the fingerprint covered more
//! than hooks counts as changed.

use crate::common::exit::{CliError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The trust file's name, in the user's cadre folder.
pub const TRUST_FILE: &str = "trusted.json";

/// One project's remembered answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Whether its items may be used.
    pub trusted: bool,
    /// The fingerprint of its items when the answer was given; `None` in an entry written
    /// before it covered more than hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<String>,
    /// The fingerprint of its hooks alone, as entries written before kept it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hooks: String,
    /// When the answer was given, in seconds since the Unix epoch.
    #[serde(default)]
    pub at: u64,
}

/// What the trust file says of a project's items as they are now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Trusted with exactly these items.
    Trusted,
    /// Declined with exactly these items.
    Declined,
    /// Answered for other items than these: the answer no longer holds; `trusted`: the
    /// old answer was yes.
    Changed {
        /// Whether the old answer trusted it.
        trusted: bool,
    },
    /// Never answered.
    Unknown,
}

/// The trust file, read.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Store {
    /// Each project's answer, by the canonical path of its root.
    #[serde(default)]
    pub projects: BTreeMap<String, Entry>,
    /// Where it is kept; `None`: nowhere (no home folder), so nothing is remembered.
    #[serde(skip)]
    path: Option<PathBuf>,
}

impl Store {
    /// Reads the trust file in `user_dir` (`~/.config/cadre`). A missing file trusts
    /// nothing; a damaged one trusts nothing either, with a warning (never an error: it only
    /// ever withholds hooks).
    pub fn load(user_dir: Option<&Path>) -> Self {
        let Some(path) = user_dir.map(|d| d.join(TRUST_FILE)) else {
            return Self::default();
        };
        let mut store = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                errln!(
                    "cadre: warning: {} ignored ({e}): no project is trusted until `cadre trust` writes it again",
                    path.display()
                );
                Self::default()
            }),
            Err(_) => Self::default(),
        };
        store.path = Some(path);
        store
    }

    /// What the file says of the project at `root` with items of fingerprint `items`.
    pub fn state(&self, root: &Path, items: &str) -> State {
        match self.projects.get(&key(root)) {
            None => State::Unknown,
            Some(e) if e.items.as_deref() != Some(items) => State::Changed { trusted: e.trusted },
            Some(e) if e.trusted => State::Trusted,
            Some(_) => State::Declined,
        }
    }

    /// Remembers the answer for the project at `root` with items of fingerprint `items`.
    pub fn set(&mut self, root: &Path, trusted: bool, items: &str) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.projects.insert(
            key(root),
            Entry {
                trusted,
                items: Some(items.to_owned()),
                hooks: String::new(),
                at,
            },
        );
    }

    /// Forgets the answer for the project at `root`; whether there was one.
    pub fn remove(&mut self, root: &Path) -> bool {
        self.projects.remove(&key(root)).is_some()
    }

    /// Writes the file (through a temporary file, so a crash never leaves half of it).
    pub fn save(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Err(CliError::config(
                "cannot remember trust: HOME is not set, so there is no ~/.config/cadre",
            ));
        };
        let failed = |e: std::io::Error| {
            CliError::failed_from(format!("cannot write {}", path.display()), e)
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| CliError::failed_from("cannot encode the trust file", e))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n").map_err(failed)?;
        std::fs::rename(&tmp, path).map_err(failed)
    }
}

/// The key of the project at `root`: its canonical path, so `-C` through a symbolic link or
/// with `..` names the same project.
pub fn key(root: &Path) -> String {
    std::fs::canonicalize(root)
        .unwrap_or_else(|_| root.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_hold_for_the_hooks_they_were_given_for() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        std::fs::create_dir_all(&project).unwrap();
        let user = dir.path().join("cfg");
        let mut store = Store::load(Some(&user));
        assert_eq!(store.state(&project, "h1"), State::Unknown);
        store.set(&project, true, "h1");
        store.save().unwrap();
        let store = Store::load(Some(&user));
        assert_eq!(store.state(&project, "h1"), State::Trusted);
        // The same folder by another path.
        assert_eq!(store.state(&project.join("../p"), "h1"), State::Trusted);
        assert_eq!(
            store.state(&project, "h2"),
            State::Changed { trusted: true }
        );
        let mut store = store;
        store.set(&project, false, "h2");
        assert_eq!(store.state(&project, "h2"), State::Declined);
        assert!(store.remove(&project));
        assert_eq!(store.state(&project, "h2"), State::Unknown);
        // An entry from before the fingerprint covered more than hooks: changed.
        let old = format!(
            "{{\"projects\": {{{:?}: {{\"trusted\": true, \"hooks\": \"h1\"}}}}}}",
            key(&project)
        );
        std::fs::write(user.join(TRUST_FILE), old).unwrap();
        assert_eq!(
            Store::load(Some(&user)).state(&project, "h1"),
            State::Changed { trusted: true }
        );
        std::fs::write(user.join(TRUST_FILE), "{not json").unwrap();
        assert!(Store::load(Some(&user)).projects.is_empty());
    }
}
