//! The run's hooks: gathered from every settings file and agent type, and whether the
//! project's may run.
//!
//! The user's own hooks (`~/.claude/settings.json`, `~/.config/cadre/config.toml`, agent
//! types in `~/.claude/agents`, `~/.config/cadre/agents` or an `--agents-dir`) always run:
//! the user wrote or chose them. A project's (`.claude/settings.json`,
//! `.claude/settings.local.json`, `cadre.toml`, the `hooks:` of its agent files) are
//! commands someone else may have written, run with the user's rights: they run only in a
//! project the user trusts (see `cadre trust`), or with `--trust-project`
//! for one run. `disableAllHooks` in a project's file turns off the project's hooks alone;
//! only the user's own file can turn off theirs.

use crate::args::RunArgs;
use crate::common::display::printable;
use crate::common::project::user_home;
use cadre_core::{AgentSpec, Hook, Hooks, Registry};
use std::path::Path;

/// Every hook the settings files hold, the user's apart from the project's.
#[derive(Debug, Clone, Default)]
pub struct ConfiguredHooks {
    /// The user's own: `~/.claude/settings.json`, then `~/.config/cadre/config.toml`.
    pub user: Hooks,
    /// The project's: `.claude/settings.json`, `.claude/settings.local.json`, `cadre.toml`.
    pub project: Hooks,
    /// The user's own file that says `disableAllHooks: true`, if one does: then none runs.
    pub disabled_by: Option<String>,
    /// The project's file that says `disableAllHooks: true`, if one does: then the
    /// project's hooks do not run (the user's still do).
    pub project_disabled_by: Option<String>,
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
}

/// The flags that decide about hooks for one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags {
    /// `--trust-project`: the project is trusted for this run.
    pub trust: bool,
    /// `--no-hooks`.
    pub off: bool,
    /// `--permission-mode`: the user's own mode for this run, which a project's allow rules
    /// may loosen only once it is trusted.
    pub mode: Option<cadre_core::PermissionMode>,
}

impl From<&RunArgs> for Flags {
    fn from(args: &RunArgs) -> Self {
        Self {
            trust: args.trust_project,
            off: args.no_hooks,
            mode: args.permission_mode,
        }
    }
}

impl ConfiguredHooks {
    /// Why the user's own hooks do not run, if they do not.
    fn user_off(&self, flags: Flags) -> Option<String> {
        if flags.off {
            return Some("not run (--no-hooks)".into());
        }
        self.disabled_by
            .as_ref()
            .map(|file| format!("not run (disableAllHooks in {file})"))
    }

    /// Why the project's hooks do not run whatever its trust, if they do not: `--no-hooks`,
    /// or `disableAllHooks` in the user's file or in one of the project's (which turns off
    /// the project's alone, never the user's).
    pub fn project_off(&self, flags: Flags) -> Option<String> {
        self.project_off_by(flags)
            .map(|why| format!("not run ({why})"))
    }

    /// What turns the project's hooks off whatever its trust, if anything does:
    /// `--no-hooks`, or `disableAllHooks in FILE`.
    pub fn project_off_by(&self, flags: Flags) -> Option<String> {
        if flags.off {
            return Some("--no-hooks".into());
        }
        self.disabled_by
            .as_ref()
            .or(self.project_disabled_by.as_ref())
            .map(|file| format!("disableAllHooks in {file}"))
    }
}

/// The hooks a run in `root` runs: the user's (unless turned off), and the project's when
/// it is `trusted` and they are not turned off. Agent types in `registry` whose hooks do
/// not run lose them.
pub fn hooks_for_run(
    configured: &ConfiguredHooks,
    registry: &mut Registry,
    root: &Path,
    flags: Flags,
    trusted: bool,
) -> Hooks {
    announce_off(configured, flags);
    if configured.user_off(flags).is_some() {
        strip_types(registry, |_| true);
        return Hooks::default();
    }
    let project = trusted && configured.project_off(flags).is_none();
    if !project {
        strip_types(registry, |spec| is_project_type(spec, root));
        return configured.user.clone();
    }
    configured.user.merged(&configured.project)
}

/// Says on stderr (even under `-q`: it is why a guard does not run) which configured hooks a
/// file turns off; `--no-hooks` is the user's own word for this run and needs no note.
fn announce_off(configured: &ConfiguredHooks, flags: Flags) {
    if flags.off {
        return;
    }
    if let Some(file) = &configured.disabled_by {
        if !configured.is_empty() {
            errln!("cadre: no hook runs: disableAllHooks in {file}");
        }
        return;
    }
    if let Some(file) = &configured.project_disabled_by {
        if !configured.project_all().is_empty() {
            errln!(
                "cadre: the project's hooks do not run: disableAllHooks in {file} (your own still do)"
            );
        }
    }
}

/// Takes the hooks away from the agent types `which` picks, so their agents run none.
fn strip_types(registry: &mut Registry, which: impl Fn(&AgentSpec) -> bool) {
    let stripped: Vec<AgentSpec> = registry
        .all()
        .filter(|s| !s.hooks.is_empty() && which(s))
        .map(|s| {
            let mut s = s.clone();
            s.hooks = Hooks::default();
            s
        })
        .collect();
    for spec in stripped {
        registry.insert(spec);
    }
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
/// it will run and why (the project's by `project`, what its trust says), where it came
/// from, and its command; columns aligned.
pub fn listing(configured: &ConfiguredHooks, flags: Flags, project: &str) -> Vec<String> {
    let user_status = configured
        .user_off(flags)
        .unwrap_or_else(|| "runs (yours)".to_owned());
    let project_status = configured
        .project_off(flags)
        .unwrap_or_else(|| project.to_owned());
    let mut all = rows(configured.user.all(), Some(&user_status));
    all.extend(rows(configured.user_types.all(), Some(&user_status)));
    all.extend(rows(&configured.project_all(), Some(&project_status)));
    aligned(&all)
}

/// Rows as lines, every column but the last padded to its widest cell; what the cells hold
/// comes from files anyone may write, so their control characters are shown escaped.
pub fn aligned(rows: &[Vec<String>]) -> Vec<String> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c)).collect())
        .collect();
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

    #[test]
    fn aligned_pads_all_but_the_last_column() {
        let lines = aligned(&[
            vec!["Stop".into(), "*".into(), "x".into()],
            vec!["PreToolUse".into(), "Bash".into(), "y".into()],
        ]);
        assert_eq!(lines, ["Stop        *     x", "PreToolUse  Bash  y"]);
    }
}
