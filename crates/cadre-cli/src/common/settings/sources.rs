//! Where the settings come from: cadre's files (the project's and the user's) and Claude
//! Code's beside them.

use super::file::{SettingsFile, Value, PROJECT_FILE, USER_FILE};
use crate::args::Source;
use crate::common::claude_settings::{self, ClaudeFile};
use crate::common::exit::CliError;
use crate::common::hooks::ConfiguredHooks;
use crate::common::table::{self, Project};
use cadre_core::{Hooks, PermissionMode};
use std::path::{Path, PathBuf};

/// cadre's settings files of a project: its own `cadre.toml` and the user's `config.toml`.
#[derive(Debug, Clone)]
pub struct CadreFiles {
    /// The project's `cadre.toml` (an empty one when it has none).
    pub project: SettingsFile,
    /// The user's `config.toml`, when their files are read.
    pub user: Option<SettingsFile>,
}

impl CadreFiles {
    /// The files, the project's first.
    pub fn iter(&self) -> impl Iterator<Item = &SettingsFile> {
        std::iter::once(&self.project).chain(&self.user)
    }

    /// The project's file (`project`), or the user's.
    fn of(&self, project: bool) -> Option<&SettingsFile> {
        if project {
            Some(&self.project)
        } else {
            self.user.as_ref()
        }
    }
}

/// Every hook of cadre's files `files` and Claude Code's `claude` (each with whether it is the project's; the local one first),
/// the user's apart from the project's, each in the order it is run.
pub fn configured_hooks(files: &CadreFiles, claude: &[(ClaudeFile, bool)]) -> ConfiguredHooks {
    let mut user = Hooks::default();
    let mut project = Hooks::default();
    for (f, _) in claude.iter().filter(|(_, p)| !p) {
        user = user.merged(&f.hooks);
    }
    if let Some(f) = &files.user {
        user = user.merged(&f.hooks);
    }
    for (f, _) in claude.iter().rev().filter(|(_, p)| *p) {
        project = project.merged(&f.hooks);
    }
    project = project.merged(&files.project.hooks);
    // The user's own file turns every hook off; a project's turns off only the project's.
    let disabled = |project: bool| {
        claude
            .iter()
            .find(|(f, p)| f.disable_all_hooks && *p == project)
            .map(|(f, _)| f.label.clone())
    };
    ConfiguredHooks {
        user,
        project,
        disabled_by: disabled(false),
        project_disabled_by: disabled(true),
        ..ConfiguredHooks::default()
    }
}

/// The user's Claude Code folder (`~/.claude`), beside their cadre folder `user_dir`
/// (`~/.config/cadre`).
pub fn user_claude_dir(user_dir: &Path) -> Option<PathBuf> {
    Some(user_dir.parent()?.parent()?.join(".claude"))
}

/// Claude Code's settings files for a project at `root`, the project's first (the local
/// one before the shared one); the user's beside `user_dir`, left out when `None`. Each is
/// returned with whether it is the project's.
pub fn claude_files(
    root: &Path,
    user_dir: Option<&Path>,
) -> Result<Vec<(ClaudeFile, bool)>, CliError> {
    let mut out = Vec::new();
    let user = user_dir
        .and_then(user_claude_dir)
        .map(|d| d.join("settings.json"));
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    for name in claude_settings::PROJECT_FILES.iter().rev() {
        let path = root.join(name);
        // Run in the home folder, the project's file is the user's own: read once, as theirs.
        if user.as_deref().is_some_and(|u| same(u, &path)) {
            continue;
        }
        let label = path.display().to_string();
        out.push((claude_settings::read(&path, label)?, true));
    }
    if let Some(path) = user {
        let label = format!("~/{}", claude_settings::USER_FILE);
        out.push((claude_settings::read(&path, label)?, false));
    }
    Ok(out)
}

/// The settings files for a project at `root`; the user's from `user_dir` (their
/// `~/.config/cadre`), left out when `None`.
pub fn files(root: &Path, user_dir: Option<&Path>) -> Result<CadreFiles, CliError> {
    let project = SettingsFile::read(
        &root.join(PROJECT_FILE),
        root.join(PROJECT_FILE).display().to_string(),
    )?;
    let user = user_dir
        .map(|dir| {
            SettingsFile::read(
                &dir.join(USER_FILE),
                format!("{}/{USER_FILE}", cadre_core::internal::USER_DIR_LABEL),
            )
        })
        .transpose()?;
    Ok(CadreFiles { project, user })
}

/// The user's settings file from `user_dir` alone, with no project's beside it (an empty
/// one): for what serves no project, as a worker.
pub fn user_files(user_dir: Option<&Path>) -> Result<CadreFiles, CliError> {
    let user = user_dir
        .map(|dir| {
            SettingsFile::read(
                &dir.join(USER_FILE),
                format!("{}/{USER_FILE}", cadre_core::internal::USER_DIR_LABEL),
            )
        })
        .transpose()?;
    Ok(CadreFiles {
        project: SettingsFile::empty(),
        user,
    })
}

/// Every settings file of a project, read once: cadre's and Claude Code's (each with whether it is the project's).
#[derive(Debug, Clone)]
pub struct Sources {
    /// cadre's files: the project's `cadre.toml` and the user's `config.toml`.
    pub files: CadreFiles,
    /// Claude Code's files, the project's first.
    pub claude: Vec<(ClaudeFile, bool)>,
}

impl Sources {
    /// Reads the settings files of the project at `root`; the user's from `user_dir`, left
    /// out when `None`.
    pub fn read(root: &Path, user_dir: Option<&Path>) -> Result<Self, CliError> {
        Ok(Self {
            files: files(root, user_dir)?,
            claude: claude_files(root, user_dir)?,
        })
    }

    /// Every hook they hold, the user's apart from the project's.
    pub fn hooks(&self) -> ConfiguredHooks {
        configured_hooks(&self.files, &self.claude)
    }

    /// What the project's `cadre.toml` sets that an untrusted project may not: each key, its
    /// value as text and where.
    pub fn project_gated(&self) -> Vec<(&'static str, String, Source)> {
        let project = &self.files.project;
        table::ROWS
            .iter()
            .filter(|r| r.project == Project::IfTrusted)
            .filter_map(|r| project.get(r.key).map(|(v, s)| (r.key, v.text(), s)))
            .collect()
    }

    /// The `mcp_config` file the settings name, for commands that take no other run options
    /// (`cadre mcp`): the project's (when `trusted`) before the user's.
    pub fn mcp_config(&self, trusted: bool) -> Option<PathBuf> {
        let project = trusted.then_some(&self.files.project);
        project
            .into_iter()
            .chain(&self.files.user)
            .find_map(|f| match f.get("mcp_config") {
                Some((Value::Text(p), _)) => Some(PathBuf::from(p)),
                _ => None,
            })
    }

    /// The variables the user lets a project's MCP servers read: `mcp.allow_env` in their
    /// own `config.toml` (a project's is never read).
    pub fn allow_env(&self) -> Vec<String> {
        match self
            .files
            .user
            .as_ref()
            .and_then(|f| f.get("mcp.allow_env"))
        {
            Some((Value::List(names), _)) => names.clone(),
            _ => Vec::new(),
        }
    }

    /// The permission mode the user's own files set, if they set one.
    pub fn users_mode(&self) -> Option<PermissionMode> {
        self.mode_of(false).map(|(mode, _)| mode)
    }

    /// The permission mode the project's files (`project`) or the user's set, and where:
    /// cadre's file first, then Claude Code's (the local one first).
    pub(super) fn mode_of(&self, project: bool) -> Option<(PermissionMode, Source)> {
        self.files
            .of(project)
            .and_then(cadre_mode)
            .or_else(|| self.claude_files(project).find_map(claude_mode))
    }

    /// The project's allow rules, each with where it is written.
    pub fn project_allow_rules(&self) -> Vec<(String, Source)> {
        self.rules_of("permissions.allow", true)
    }

    /// The rules of `key` (`permissions.allow` or `permissions.deny`) the project's files
    /// (`project`) or the user's hold, each with where: Claude Code's, then cadre's.
    pub(super) fn rules_of(&self, key: &str, project: bool) -> Vec<(String, Source)> {
        let mut out = Vec::new();
        let claude: Vec<&ClaudeFile> = self.claude_files(project).collect();
        for f in claude.into_iter().rev() {
            let list = if key == "permissions.allow" {
                &f.allow
            } else {
                &f.deny
            };
            out.extend(
                list.iter()
                    .map(|w| (w.rule.clone(), Source::File(f.label.clone(), w.line))),
            );
        }
        if let Some(f) = self.files.of(project) {
            if let Some((Value::List(list), source)) = f.get(key) {
                out.extend(list.iter().map(|r| (r.clone(), source.clone())));
            }
        }
        out
    }

    /// Claude Code's files of the project (`project`), or the user's, nearest first.
    fn claude_files(&self, project: bool) -> impl Iterator<Item = &ClaudeFile> {
        self.claude
            .iter()
            .filter(move |(_, p)| *p == project)
            .map(|(f, _)| f)
    }

    /// The `mcp_config` file the project's `cadre.toml` names, if it does.
    pub fn project_mcp_config(&self) -> Option<PathBuf> {
        match self.files.project.get("mcp_config") {
            Some((Value::Text(p), _)) => Some(PathBuf::from(p)),
            _ => None,
        }
    }
}

/// A cadre file's `permissions.mode`, and where.
fn cadre_mode(file: &SettingsFile) -> Option<(PermissionMode, Source)> {
    match file.get("permissions.mode") {
        Some((Value::Mode(mode), source)) => Some((*mode, source)),
        _ => None,
    }
}

/// A Claude Code file's `permissions.defaultMode`, and where.
fn claude_mode(file: &ClaudeFile) -> Option<(PermissionMode, Source)> {
    file.mode
        .map(|(mode, line)| (mode, Source::File(file.label.clone(), line)))
}
