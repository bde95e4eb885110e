//! The run's hooks: gathered from every settings file and agent type, and whether the
//! project's may run.
//!
//! The user's own hooks (`~/.claude/settings.json`, `~/.config/cadre/config.toml`, agent
//! types in `~/.claude/agents`, `~/.config/cadre/agents` or an `--agents-dir`) always run:
//! the user wrote or chose them. A project's (`.claude/settings.json`,
//! `.claude/settings.local.json`, `cadre.toml`, the `hooks:` of its agent files) are
//! commands someone else may have written, run with the user's rights: they run only in a
//! project the user trusts (see [`trust`](crate::common::trust)), or with `--trust-hooks`
//! for one run.

use crate::args::RunArgs;
use crate::common::exit::Result;
use crate::common::project::{user_dir, user_home};
use crate::common::trust::{State, Store};
use cadre_core::{AgentSpec, Hook, Hooks, Registry};
use sha2::{Digest, Sha256};
use std::io::IsTerminal;
use std::path::Path;

/// Every hook the settings files hold, the user's apart from the project's.
#[derive(Debug, Clone, Default)]
pub struct ConfiguredHooks {
    /// The user's own: `~/.claude/settings.json`, then `~/.config/cadre/config.toml`.
    pub user: Hooks,
    /// The project's: `.claude/settings.json`, `.claude/settings.local.json`, `cadre.toml`.
    pub project: Hooks,
    /// The file that says `disableAllHooks: true`, if one does: then none runs.
    pub disabled_by: Option<String>,
    /// The `hooks:` of agent types from the user's folders and `--agents-dir`.
    pub user_types: Hooks,
    /// The `hooks:` of the project's agent files.
    pub project_types: Hooks,
}

/// Whether agent type `spec` comes from the project's own agent folders (`.claude/agents`,
/// `agents`, `.cadre/agents` at `root`), rather than the user's or an `--agents-dir`.
pub fn is_project_type(spec: &AgentSpec, root: &Path) -> bool {
    let Some(dir) = spec.source.as_deref().and_then(Path::parent) else {
        return false;
    };
    // Run in the home folder, its `.claude/agents` is the user's own.
    let home = user_home(true).map(|h| h.join(".claude/agents"));
    if home.is_some_and(|h| h == dir) {
        return false;
    }
    [".claude/agents", "agents", ".cadre/agents"]
        .iter()
        .any(|d| dir == root.join(d))
}

impl ConfiguredHooks {
    /// These hooks and the agent types' own in `registry`, the project's apart.
    pub fn with_types(mut self, registry: &Registry, root: &Path) -> Self {
        for spec in registry.all().filter(|s| !s.hooks.is_empty()) {
            if is_project_type(spec, root) {
                self.project_types = self.project_types.merged(&spec.hooks);
            } else {
                self.user_types = self.user_types.merged(&spec.hooks);
            }
        }
        self
    }

    /// Every hook of the project, settings files' and agent files'.
    pub fn project_all(&self) -> Vec<Hook> {
        self.project
            .all()
            .iter()
            .chain(self.project_types.all())
            .cloned()
            .collect()
    }

    /// Whether no file holds a hook.
    pub fn is_empty(&self) -> bool {
        self.user.is_empty()
            && self.project.is_empty()
            && self.user_types.is_empty()
            && self.project_types.is_empty()
    }

    /// Whether the project holds none.
    fn project_is_empty(&self) -> bool {
        self.project.is_empty() && self.project_types.is_empty()
    }

    /// The fingerprint of the project's hooks, as the trust file remembers it: each hook's
    /// event, matcher, command, timeout and file (from the root `root`).
    pub fn fingerprint(&self, root: &Path) -> String {
        let prefix = format!("{}/", root.display());
        let mut hash = Sha256::new();
        for h in self.project_all() {
            let file = h.source.strip_prefix(&prefix).unwrap_or(&h.source);
            for part in [
                h.event.name(),
                h.matcher.as_deref().unwrap_or(""),
                &h.command,
                &h.timeout_secs.to_string(),
                file,
            ] {
                hash.update(part.as_bytes());
                hash.update([0]);
            }
            hash.update(b"\n");
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Whether the project's hooks run this time, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The project has none.
    NoHooks,
    /// `--no-hooks`: none runs.
    Off,
    /// A file says `disableAllHooks`.
    Disabled(String),
    /// `--trust-hooks`: this run only.
    TrustedForRun,
    /// The trust file says so (or says otherwise, or nothing).
    Stored(State),
}

impl Verdict {
    /// What `cadre config show` and `cadre doctor` say of a project hook.
    fn project_status(&self) -> String {
        match self {
            Self::NoHooks | Self::Stored(State::Trusted) => "runs (project trusted)".into(),
            Self::Off => "not run (--no-hooks)".into(),
            Self::Disabled(file) => format!("not run (disableAllHooks in {file})"),
            Self::TrustedForRun => "runs (--trust-hooks, this run only)".into(),
            Self::Stored(State::Declined) => {
                "not run: you declined it (`cadre trust` trusts it)".into()
            }
            Self::Stored(State::Changed) => {
                "not run until trusted again: changed since you answered (`cadre trust`)".into()
            }
            Self::Stored(State::Unknown) => {
                "not run until trusted: asked on a terminal, or `cadre trust`".into()
            }
        }
    }
}

/// The flags that decide about hooks for one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags {
    /// `--trust-hooks`.
    pub trust: bool,
    /// `--no-hooks`.
    pub off: bool,
}

impl From<&RunArgs> for Flags {
    fn from(args: &RunArgs) -> Self {
        Self {
            trust: args.trust_hooks,
            off: args.no_hooks,
        }
    }
}

/// What applies to the project's hooks under `flags`.
pub fn verdict(configured: &ConfiguredHooks, root: &Path, flags: Flags) -> Verdict {
    if flags.off {
        return Verdict::Off;
    }
    if let Some(file) = &configured.disabled_by {
        return Verdict::Disabled(file.clone());
    }
    if configured.project_is_empty() {
        return Verdict::NoHooks;
    }
    if flags.trust {
        return Verdict::TrustedForRun;
    }
    let store = Store::load(user_dir(true).as_deref());
    Verdict::Stored(store.state(root, &configured.fingerprint(root)))
}

/// The hooks a run in `root` runs: the user's, and the project's if it is trusted; agent
/// types in `registry` whose hooks do not run lose them. A project never answered for (or
/// whose hooks changed since) is asked about on a terminal, and the answer remembered;
/// without a terminal its hooks do not run, and one warning says so and how to trust it.
pub fn for_run(
    configured: &ConfiguredHooks,
    registry: &mut Registry,
    root: &Path,
    flags: Flags,
) -> Result<Hooks> {
    if configured.is_empty() {
        return Ok(Hooks::default());
    }
    let project = match verdict(configured, root, flags) {
        Verdict::Off | Verdict::Disabled(_) => {
            strip_types(registry, |_| true);
            return Ok(Hooks::default());
        }
        Verdict::NoHooks => false,
        Verdict::TrustedForRun | Verdict::Stored(State::Trusted) => true,
        Verdict::Stored(State::Declined) => {
            warn_untrusted(configured, "you declined to trust this project");
            false
        }
        Verdict::Stored(state) if can_ask() => {
            let trusted = ask(configured, root, state == State::Changed);
            let mut store = Store::load(user_dir(true).as_deref());
            store.set(root, trusted, &configured.fingerprint(root));
            if let Err(e) = store.save() {
                errln!("cadre: warning: {}", e.report());
            }
            trusted
        }
        Verdict::Stored(State::Changed) => {
            warn_untrusted(configured, "its hooks changed since you trusted it");
            false
        }
        Verdict::Stored(_) => {
            warn_untrusted(configured, "this project is not trusted");
            false
        }
    };
    if !project {
        strip_types(registry, |spec| is_project_type(spec, root));
    }
    Ok(if project {
        configured.user.merged(&configured.project)
    } else {
        configured.user.clone()
    })
}

/// Takes the hooks away from the agent types `which` picks, so their agents run none.
fn strip_types(registry: &mut Registry, which: impl Fn(&AgentSpec) -> bool) {
    let stripped: Vec<AgentSpec> = registry
        .all()
        .filter(|s| !s.hooks.is_empty() && which(s))
        .map(|s| AgentSpec {
            hooks: Hooks::default(),
            ..s.clone()
        })
        .collect();
    for spec in stripped {
        registry.insert(spec);
    }
}

/// Whether a person can answer: stdin and stderr (where the question goes) are terminals.
fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// The one line that says the project's hooks are not run, and how to run them.
fn warn_untrusted(configured: &ConfiguredHooks, why: &str) {
    errln!(
        "cadre: warning: the project's hooks are not run ({} in {}): {why}; `cadre trust` trusts it (or --trust-hooks, for one run)",
        count(configured.project_all().len()),
        files_of(&configured.project_all())
    );
}

/// Asks on the terminal whether the project's hooks may run; `changed`: they changed
/// since the last answer.
fn ask(configured: &ConfiguredHooks, root: &Path, changed: bool) -> bool {
    let what = if changed {
        "hooks that changed since you last answered"
    } else {
        "hooks"
    };
    errln!(
        "\ncadre: this project ({}) has {what}: commands run with your rights when agents act.",
        root.display()
    );
    for line in aligned(&rows(&configured.project_all(), None)) {
        errln!("  {line}");
    }
    err!("Run this project's hooks (remembered; `cadre trust --revoke` forgets it)? [y/N] ");
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        return false;
    }
    let yes = matches!(answer.trim().to_lowercase().as_str(), "y" | "yes");
    errln!(
        "{}",
        if yes {
            "cadre: the project's hooks will run"
        } else {
            "cadre: the project's hooks will not run (`cadre trust` trusts it later)"
        }
    );
    yes
}

/// `N hooks`.
fn count(n: usize) -> String {
    if n == 1 {
        "1 hook".into()
    } else {
        format!("{n} hooks")
    }
}

/// The files `hooks` came from, once each, in order.
fn files_of(hooks: &[Hook]) -> String {
    let mut files: Vec<&str> = Vec::new();
    for h in hooks {
        if !files.contains(&h.source.as_str()) {
            files.push(&h.source);
        }
    }
    files.join(", ")
}

/// One row per hook: event, matcher, whether it runs (when `status` says), file, command.
pub fn rows(hooks: &[Hook], status: Option<&str>) -> Vec<Vec<String>> {
    hooks
        .iter()
        .map(|h| {
            let mut row = vec![
                h.event.name().to_owned(),
                h.matcher.clone().unwrap_or_else(|| "*".into()),
            ];
            row.extend(status.map(str::to_owned));
            row.push(h.source.clone());
            row.push(h.command.clone());
            row
        })
        .collect()
}

/// Every hook as `cadre config show` and `cadre doctor` list it: event, matcher, whether
/// it will run and why, where it came from, and its command; columns aligned.
pub fn listing(configured: &ConfiguredHooks, root: &Path, flags: Flags) -> Vec<String> {
    let verdict = verdict(configured, root, flags);
    let user_status = match &verdict {
        Verdict::Off | Verdict::Disabled(_) => verdict.project_status(),
        _ => "runs (yours)".to_owned(),
    };
    let mut all = rows(configured.user.all(), Some(&user_status));
    all.extend(rows(configured.user_types.all(), Some(&user_status)));
    all.extend(rows(
        &configured.project_all(),
        Some(&verdict.project_status()),
    ));
    aligned(&all)
}

/// Rows as lines, every column but the last padded to its widest cell.
pub fn aligned(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, cell) in r.iter().enumerate() {
                if i + 1 == r.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprint_follows_the_project_hooks_only() {
        let root = Path::new("/p");
        let hooks = |cmd: &str| {
            Hooks::from_json(
                &json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": cmd}]}]}),
                "/p/.claude/settings.json",
            )
            .0
        };
        let a = ConfiguredHooks {
            project: hooks("guard.sh"),
            ..ConfiguredHooks::default()
        };
        let mut b = a.clone();
        b.user = hooks("mine.sh");
        assert_eq!(a.fingerprint(root), b.fingerprint(root));
        b.project = hooks("guard.sh --lenient");
        assert_ne!(a.fingerprint(root), b.fingerprint(root));
        // The same project seen through another path to its root.
        let mut c = a.clone();
        c.project = Hooks::from_json(
            &json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "guard.sh"}]}]}),
            "/q/.claude/settings.json",
        )
        .0;
        assert_eq!(a.fingerprint(root), c.fingerprint(Path::new("/q")));
    }

    #[test]
    fn aligned_pads_all_but_the_last_column() {
        let lines = aligned(&[
            vec!["Stop".into(), "*".into(), "x".into()],
            vec!["PreToolUse".into(), "Bash".into(), "y".into()],
        ]);
        assert_eq!(lines, ["Stop        *     x", "PreToolUse  Bash  y"]);
    }
}
