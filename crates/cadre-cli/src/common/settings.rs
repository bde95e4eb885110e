//! Settings files: `cadre.toml` at the project root and `~/.config/cadre/config.toml`; and
//! the `permissions` and `hooks` of Claude Code's settings files beside them (see
//! [`claude_settings`](crate::common::claude_settings)).
//!
//! Precedence, highest first: a flag given on the command line, the environment
//! (`CADRE_MODEL`, `CADRE_PROVIDER`, `ANTHROPIC_BASE_URL`/`OPENAI_BASE_URL`), the project's
//! file, the user's file, cadre's defaults. A flag counts only when it was given (clap's
//! defaults never hide a file's value). Reading is forgiving: an unknown key is a warning;
//! a bad value is an error naming `file:line`. A `[hooks]` table holds hooks in Claude
//! Code's shape (`[[hooks.PreToolUse]]`, `matcher`, `hooks = [{type, command, timeout}]`).

use crate::args::{parse_compact_at, Provider, RunArgs, Source};
use crate::common::claude_settings::{self, read_if_present, ClaudeFile};
use crate::common::exit::CliError;
use crate::common::hooks::ConfiguredHooks;
use crate::common::table::{self, Project};
use cadre_core::definitions::hooks::{HooksCheck, HOOK_REFUSED};
use cadre_core::{Hooks, PermissionMode, PermissionSettings};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// The project's settings file, at its root.
pub const PROJECT_FILE: &str = "cadre.toml";

/// The user's settings file, in their cadre folder (`~/.config/cadre/`).
pub const USER_FILE: &str = "config.toml";

/// Every setting a file may hold, by its dotted name, as the table of settings declares.
pub fn known_keys() -> impl Iterator<Item = &'static str> {
    table::file_keys()
}

/// One value as a file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Text(String),
    Number(u64),
    CompactAt(Option<u64>),
    List(Vec<String>),
    Mode(PermissionMode),
}

/// One settings file, read.
#[derive(Debug, Clone)]
pub struct SettingsFile {
    /// How it is named in messages.
    pub label: String,
    /// Whether it exists.
    pub found: bool,
    values: BTreeMap<&'static str, (Value, usize)>,
    /// Keys cadre does not know and hooks it cannot run, as warnings (`file:line: …`).
    pub unknown: Vec<String>,
    /// Its `[hooks]` table, each hook naming this file as its source.
    pub hooks: Hooks,
}

impl SettingsFile {
    /// Reads `path`, named `label` in messages. A missing file is an empty one; a file
    /// that is not TOML, or a value of the wrong kind, is an error naming the line.
    pub fn read(path: &Path, label: String) -> Result<Self, CliError> {
        let mut file = Self {
            label,
            found: false,
            values: BTreeMap::new(),
            unknown: Vec::new(),
            hooks: Hooks::default(),
        };
        let Some(text) = read_if_present(path, &file.label)? else {
            return Ok(file);
        };
        file.found = true;
        let doc = DeTable::parse(&text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(&text, s.start));
            CliError::config(format!(
                "{}:{line}: not valid TOML: {}",
                file.label,
                e.message().trim()
            ))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        file.walk(doc.get_ref(), "", &text, dir)?;
        if let Some((key, _)) = doc.get_ref().get_key_value("hooks") {
            check_hooks(&file.label, &text)?;
            file.read_hooks(&text, line_of(&text, key.span().start))?;
        }
        Ok(file)
    }

    /// Reads the `[hooks]` table (at `line`) as Claude Code's `hooks` object; a table that
    /// cannot be read refuses the file (a guard fails closed).
    fn read_hooks(&mut self, text: &str, line: usize) -> Result<(), CliError> {
        // Read again as plain data: the table has Claude Code's JSON shape.
        let doc: serde_json::Value = toml::from_str(text).map_err(|e| {
            CliError::config(format!(
                "{}:{line}: {HOOK_REFUSED}: {}",
                self.label,
                e.message().trim()
            ))
        })?;
        let (hooks, warnings) = Hooks::from_json(&doc["hooks"], &self.label);
        self.hooks = hooks;
        let label = &self.label;
        self.unknown
            .extend(warnings.into_iter().map(|w| format!("{label}:{line}: {w}")));
        Ok(())
    }

    fn walk(
        &mut self,
        table: &DeTable,
        prefix: &str,
        text: &str,
        dir: &Path,
    ) -> Result<(), CliError> {
        for (key, value) in table.iter() {
            let line = line_of(text, key.span().start);
            // Liberal: `max-parallel` is `max_parallel`, `Model` is `model`.
            let name = key.get_ref().trim().to_lowercase().replace('-', "_");
            // Read whole by `read_hooks`, under this exact name alone; another spelling would
            // be a guard read by no one, so it refuses the file.
            if prefix.is_empty() && name == "hooks" {
                if key.get_ref() == "hooks" {
                    continue;
                }
                return Err(CliError::config(format!(
                    "{}:{line}: {HOOK_REFUSED}: `{}` is not read: the table of hooks is spelled `hooks`",
                    self.label,
                    key.get_ref()
                )));
            }
            let full = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}.{name}")
            };
            if let DeValue::Table(inner) = value.get_ref() {
                if prefix.is_empty() && table::file_tables().contains(&full.as_str()) {
                    self.walk(inner, &full, text, dir)?;
                    continue;
                }
            }
            // A limit or compact_at at the top level is taken as if in its table.
            let canonical = known_keys().find(|k| {
                *k == full
                    || (prefix.is_empty()
                        && k.split_once('.')
                            .is_some_and(|(t, n)| n == full && t != "permissions"))
            });
            let Some(key) = canonical else {
                self.unknown.push(format!(
                    "{}:{line}: unknown setting `{full}` ignored (known: {})",
                    self.label,
                    known_keys().collect::<Vec<_>>().join(", ")
                ));
                continue;
            };
            let line = line_of(text, value.span().start);
            let parsed = parse_value(key, value.get_ref(), dir)
                .map_err(|e| CliError::config(format!("{}:{line}: {key} {e}", self.label)))?;
            self.values.insert(key, (parsed, line));
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<(&Value, Source)> {
        self.values
            .get(key)
            .map(|(v, line)| (v, Source::File(self.label.clone(), *line)))
    }
}

/// Refuses a file whose `[hooks]` hold an entry that cannot load, naming its line and
/// column: a guard that cannot load must not let the command it guards through.
fn check_hooks(label: &str, text: &str) -> Result<(), CliError> {
    toml::from_str::<HooksCheck>(text).map(|_| ()).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        let line = line_of(text, at);
        let start = text
            .get(..at)
            .and_then(|t| t.rfind('\n'))
            .map_or(0, |i| i + 1);
        let column = text.get(start..at).map_or(0, |t| t.chars().count()) + 1;
        CliError::config(format!(
            "{label}:{line}:{column}: {HOOK_REFUSED}: {}",
            e.message().trim()
        ))
    })
}

/// The 1-based line of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at).map_or(0, |t| t.matches('\n').count()) + 1
}

/// What a TOML value says, as text for messages.
fn shown(value: &DeValue) -> String {
    match value {
        DeValue::String(s) => format!("{s:?}"),
        DeValue::Integer(i) => i.to_string(),
        DeValue::Float(f) => f.to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => d.to_string(),
        DeValue::Array(_) => "a list".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// A whole number, written as a TOML integer or (liberally) as a string of digits.
fn number(value: &DeValue) -> Option<u64> {
    match value {
        DeValue::Integer(i) => u64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok(),
        DeValue::String(s) => s.trim().replace(['_', ','], "").parse().ok(),
        _ => None,
    }
}

/// A permission rule, refused here (where the file and line are known) when it is not one.
fn checked_rule(rule: &str) -> Result<String, String> {
    cadre_core::Rule::parse(rule)
        .map(|_| rule.trim().to_owned())
        .map_err(|e| e.why)
}

/// Checks and converts the value of `key`; the error reads after "`file:line: key`".
fn parse_value(key: &str, value: &DeValue, dir: &Path) -> Result<Value, String> {
    let text = || match value {
        DeValue::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(format!("must be a non-empty string, not {}", shown(value))),
    };
    match key {
        "model" | "base_url" => text().map(Value::Text),
        "permissions.mode" => text()?.parse().map(Value::Mode),
        "provider" => {
            let p = text()?.to_lowercase();
            if matches!(p.as_str(), "anthropic" | "openai") {
                Ok(Value::Text(p))
            } else {
                Err(format!(
                    "must be \"anthropic\" or \"openai\", not {}",
                    shown(value)
                ))
            }
        }
        "mcp_config" => {
            let path = dir.join(text()?);
            if path.is_file() {
                Ok(Value::Text(path.to_string_lossy().into_owned()))
            } else {
                Err(format!("names {}: no such file", path.display()))
            }
        }
        "compaction.compact_at" => {
            let written = match value {
                DeValue::Boolean(false) => "off".to_owned(),
                DeValue::String(s) => s.to_string(),
                _ => number(value).map(|n| n.to_string()).ok_or_else(|| {
                    format!(
                        "must be a number of input tokens or \"off\", not {}",
                        shown(value)
                    )
                })?,
            };
            parse_compact_at(&written).map(|c| Value::CompactAt(c.0))
        }
        "mcp.allow_env" => match value {
            DeValue::Array(items) => items
                .iter()
                .map(|item| match item.get_ref() {
                    DeValue::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                    other => Err(format!(
                        "must be a list of environment variable names; {} is not one",
                        shown(other)
                    )),
                })
                .collect::<Result<_, _>>()
                .map(Value::List),
            other => Err(format!(
                "must be a list of environment variable names, not {}",
                shown(other)
            )),
        },
        "permissions.allow" | "permissions.deny" => match value {
            // Liberal: one rule may be written without the list around it.
            DeValue::String(s) => Ok(Value::List(vec![checked_rule(s)?])),
            DeValue::Array(items) => items
                .iter()
                .map(|item| match item.get_ref() {
                    DeValue::String(s) => checked_rule(s),
                    other => Err(format!(
                        "must be a list of strings; {} is not one",
                        shown(other)
                    )),
                })
                .collect::<Result<_, _>>()
                .map(Value::List),
            other => Err(format!("must be a list of strings, not {}", shown(other))),
        },
        _ => {
            let (least, most) = match key {
                "limits.max_depth" => (0, u64::from(u32::MAX)),
                "limits.max_turns" | "limits.max_tokens" => (1, u64::from(u32::MAX)),
                _ => (1, u64::MAX),
            };
            match number(value) {
                Some(n) if (least..=most).contains(&n) => Ok(Value::Number(n)),
                _ => Err(format!(
                    "must be a whole number from {least} to {most}, not {}",
                    shown(value)
                )),
            }
        }
    }
}

/// The settings of one command, merged, with where each came from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The files looked at, the project's first.
    pub files: Vec<SettingsFile>,
    /// Each setting's value as shown, and where it came from, in the table's order.
    pub entries: Vec<(String, String, Source)>,
    /// The `[permissions]` tables and Claude Code's `permissions`, merged.
    pub permissions: PermissionSettings,
    /// The Claude Code settings files looked at, the project's first.
    pub claude: Vec<ClaudeFile>,
    /// Every hook configured, the user's and the project's (trusted or not).
    pub hooks: ConfiguredHooks,
    /// The variables the user lets a project's MCP servers read (`mcp.allow_env` in their
    /// own config.toml).
    pub allow_env: Vec<String>,
    /// What the project's files set and this run leaves out, one line each: settings an
    /// untrusted project may not set, a mode looser than the user's.
    pub left_out: Vec<String>,
    /// Which settings the command line gave, and how.
    pub given: crate::args::Given,
}

impl Settings {
    /// Unknown keys and what was repaired or dropped, as warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &String> {
        self.files
            .iter()
            .flat_map(|f| f.unknown.iter())
            .chain(self.claude.iter().flat_map(|f| f.warnings.iter()))
    }

    /// Each setting and where it was set: by the command line, or by a file.
    pub fn set(&self) -> impl Iterator<Item = (&str, &Source)> {
        let given = self.given.all().map(|(k, s)| -> (&str, &Source) { (k, s) });
        given.chain(
            self.entries
                .iter()
                .filter(|(_, _, s)| matches!(s, Source::File(..)))
                .map(|(k, _, s)| (k.as_str(), s)),
        )
    }
}

/// What an engine run cannot honour of what `set` says was set (each setting's key and
/// where), one line each.
pub fn engine_refusals<'a>(set: impl IntoIterator<Item = (&'a str, &'a Source)>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, source) in set {
        let Some(row) = table::row_of(key) else {
            continue;
        };
        let table::Engine::Refused(why) = row.engine else {
            continue;
        };
        // What the user's own environment says is where the client runs, not a choice for
        // this run: a variable like ANTHROPIC_BASE_URL is the workers' to set for themselves.
        let given = match source {
            Source::Flag => row
                .flag
                .map_or_else(|| key.to_owned(), |f| format!("--{}", f.replace('_', "-"))),
            Source::File(file, line) => format!("{key} ({file}:{line})"),
            Source::Env(_) | Source::Default => continue,
        };
        let line = format!("{given}: {why}");
        if !out.contains(&line) {
            out.push(line);
        }
    }
    out
}

/// Every hook of cadre's files `files` (the project's first, as [`files`] lists them) and
/// Claude Code's `claude` (each with whether it is the project's; the local one first),
/// the user's apart from the project's, each in the order it is run.
pub fn configured_hooks(files: &[SettingsFile], claude: &[(ClaudeFile, bool)]) -> ConfiguredHooks {
    let (cadre_project, cadre_user) = files.split_at(files.len().min(1));
    let mut user = Hooks::default();
    let mut project = Hooks::default();
    for (f, _) in claude.iter().filter(|(_, p)| !p) {
        user = user.merged(&f.hooks);
    }
    for f in cadre_user {
        user = user.merged(&f.hooks);
    }
    for (f, _) in claude.iter().rev().filter(|(_, p)| *p) {
        project = project.merged(&f.hooks);
    }
    for f in cadre_project {
        project = project.merged(&f.hooks);
    }
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
pub fn files(root: &Path, user_dir: Option<&Path>) -> Result<Vec<SettingsFile>, CliError> {
    let mut files = vec![SettingsFile::read(
        &root.join(PROJECT_FILE),
        root.join(PROJECT_FILE).display().to_string(),
    )?];
    if let Some(dir) = user_dir {
        files.push(SettingsFile::read(
            &dir.join(USER_FILE),
            format!(
                "{}/{USER_FILE}",
                cadre_core::definitions::instructions::USER_DIR_LABEL
            ),
        )?);
    }
    Ok(files)
}

/// Every settings file of a project, read once: cadre's (the project's first, as [`files`]
/// lists them) and Claude Code's (each with whether it is the project's).
#[derive(Debug, Clone)]
pub struct Sources {
    /// cadre's files: the project's `cadre.toml`, then the user's `config.toml`.
    pub files: Vec<SettingsFile>,
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
        let Some(project) = self.files.first() else {
            return Vec::new();
        };
        table::ROWS
            .iter()
            .filter(|r| r.project == Project::IfTrusted)
            .filter_map(|r| project.get(r.key).map(|(v, s)| (r.key, v.text(), s)))
            .collect()
    }

    /// The `mcp_config` file the settings name, for commands that take no other run options
    /// (`cadre mcp`): the project's (when `trusted`) before the user's.
    pub fn mcp_config(&self, trusted: bool) -> Option<PathBuf> {
        let skip = usize::from(!trusted);
        self.files
            .iter()
            .skip(skip)
            .find_map(|f| match f.get("mcp_config") {
                Some((Value::Text(p), _)) => Some(PathBuf::from(p)),
                _ => None,
            })
    }

    /// The variables the user lets a project's MCP servers read: `mcp.allow_env` in their
    /// own `config.toml` (a project's is never read).
    pub fn allow_env(&self) -> Vec<String> {
        match self.files.get(1).and_then(|f| f.get("mcp.allow_env")) {
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
    fn mode_of(&self, project: bool) -> Option<(PermissionMode, Source)> {
        self.cadre_files(project)
            .iter()
            .find_map(cadre_mode)
            .or_else(|| self.claude_files(project).find_map(claude_mode))
    }

    /// The project's allow rules, each with where it is written.
    pub fn project_allow_rules(&self) -> Vec<(String, Source)> {
        self.rules_of("permissions.allow", true)
    }

    /// The rules of `key` (`permissions.allow` or `permissions.deny`) the project's files
    /// (`project`) or the user's hold, each with where: Claude Code's, then cadre's.
    fn rules_of(&self, key: &str, project: bool) -> Vec<(String, Source)> {
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
        for f in self.cadre_files(project) {
            if let Some((Value::List(list), source)) = f.get(key) {
                out.extend(list.iter().map(|r| (r.clone(), source.clone())));
            }
        }
        out
    }

    /// cadre's file of the project (`project`), or the user's.
    fn cadre_files(&self, project: bool) -> &[SettingsFile] {
        let (of_project, of_user) = self.files.split_at(self.files.len().min(1));
        if project {
            of_project
        } else {
            of_user
        }
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
        match self.files.first()?.get("mcp_config") {
            Some((Value::Text(p), _)) => Some(PathBuf::from(p)),
            _ => None,
        }
    }
}

impl Value {
    /// The value as text, for listings.
    fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Number(n) => n.to_string(),
            Self::CompactAt(c) => c.map_or_else(|| "off".to_owned(), |n| n.to_string()),
            Self::List(l) => l.join(", "),
            Self::Mode(m) => m.to_string(),
        }
    }
}

/// Fills every option of `args` that was not given on the command line or by the
/// environment from the settings files `sources`; what an untrusted project may not set is
/// left out unless `trusted`. Returns the merged settings.
pub fn resolve_from(
    args: &mut RunArgs,
    sources: Sources,
    trusted: bool,
    allow_barred: bool,
) -> Settings {
    let files = &sources.files;
    let given = std::mem::take(&mut args.given);
    let barred = |key: &str| match table::row_of(key).map_or(Project::May, |r| r.project) {
        Project::IfTrusted => !trusted,
        Project::Never => true,
        _ => false,
    };
    // What a project may never set is named here; what needs trust is named with the
    // project's other items (see `project_items`).
    let left_out: Vec<String> = files
        .first()
        .into_iter()
        .flat_map(|project| {
            table::ROWS
                .iter()
                .filter(|r| r.project == Project::Never)
                .filter_map(|r| project.get(r.key).map(|(v, s)| (r.key, v, s)))
        })
        .map(|(key, v, s)| {
            format!(
                "{key} = {:?} ({s}): only your own config.toml may set it",
                v.text()
            )
        })
        .collect();
    let mut entries = Vec::new();
    let mut allow_env = Vec::new();
    // In the table's order (the provider first: the model's default and the base URL's
    // variable depend on it). The permissions are merged apart: their rules add up.
    for key in known_keys().filter(|k| !k.starts_with("permissions.")) {
        let env = (key == "base_url")
            .then(|| env_base_url(args.provider))
            .flatten();
        let source = match (given.source(key), env) {
            (Some(source), _) => source,
            (None, Some((_, var))) => Source::Env(var.to_owned()),
            // The first file (the project's) wins over the next (the user's), where the
            // table lets the project set the key.
            (None, None) => files
                .iter()
                .enumerate()
                .filter(|(i, _)| *i > 0 || !barred(key))
                .find_map(|(_, f)| f.get(key))
                .map_or(Source::Default, |(value, source)| {
                    apply(key, value, args, &mut allow_env);
                    source
                }),
        };
        entries.push((key.to_owned(), shown_setting(key, args, &allow_env), source));
    }
    let mut left_out = left_out;
    let permissions = merged_permissions(&sources, allow_barred, &mut entries, &mut left_out);
    let Sources { files, claude } = sources;
    let hooks = configured_hooks(&files, &claude);
    Settings {
        files,
        entries,
        permissions,
        claude: claude.into_iter().map(|(f, _)| f).collect(),
        hooks,
        allow_env,
        left_out,
        given,
    }
}

/// The base URL the environment gives for `provider`, and its variable.
fn env_base_url(provider: Provider) -> Option<(String, &'static str)> {
    let var = match provider {
        Provider::Anthropic => "ANTHROPIC_BASE_URL",
        Provider::Openai => "OPENAI_BASE_URL",
    };
    std::env::var(var)
        .ok()
        .filter(|u| !u.is_empty())
        .map(|u| (u, var))
}

/// Sets the option of `args` the setting `key` stands for to a file's `value`.
fn apply(key: &str, value: &Value, args: &mut RunArgs, allow_env: &mut Vec<String>) {
    let whole = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    match (key, value) {
        ("provider", Value::Text(p)) => {
            args.provider = if p == "openai" {
                Provider::Openai
            } else {
                Provider::Anthropic
            };
        }
        ("model", Value::Text(m)) => args.model = Some(m.clone()),
        ("base_url", Value::Text(u)) => args.base_url = Some(u.clone()),
        ("mcp_config", Value::Text(p)) => args.mcp.mcp_config = vec![PathBuf::from(p)],
        ("mcp.allow_env", Value::List(names)) => allow_env.clone_from(names),
        ("limits.max_parallel", Value::Number(n)) => {
            args.max_parallel = usize::try_from(*n).unwrap_or(usize::MAX);
        }
        ("limits.max_depth", Value::Number(n)) => args.max_depth = whole(*n),
        ("limits.max_turns", Value::Number(n)) => args.max_turns = Some(whole(*n)),
        ("limits.budget_tokens", Value::Number(n)) => args.budget_tokens = Some(*n),
        ("limits.max_tokens", Value::Number(n)) => args.max_tokens = whole(*n),
        ("limits.context_tokens", Value::Number(n)) => args.context_tokens = Some(*n),
        ("compaction.compact_at", Value::CompactAt(c)) => args.compact_at.0 = *c,
        _ => {}
    }
}

/// The value of the setting `key` as `cadre config show` shows it, once applied.
fn shown_setting(key: &str, args: &RunArgs, allow_env: &[String]) -> String {
    let or = |n: Option<u64>, none: &str| n.map_or_else(|| none.to_owned(), |n| n.to_string());
    match key {
        "provider" => format!("{:?}", args.provider).to_lowercase(),
        "model" => match (&args.model, args.provider) {
            (Some(m), _) => cadre_model::resolve_model_alias(m).to_owned(),
            (None, Provider::Anthropic) => cadre_model::DEFAULT_MODEL.to_owned(),
            (None, Provider::Openai) => "(none: give --model)".to_owned(),
        },
        "base_url" => match (&args.base_url, env_base_url(args.provider)) {
            (Some(url), _) => url.clone(),
            (None, Some((url, _))) => url,
            (None, None) => match args.provider {
                Provider::Anthropic => cadre_model::anthropic::DEFAULT_BASE_URL.to_owned(),
                Provider::Openai => cadre_model::openai::OPENAI_DEFAULT_BASE_URL.to_owned(),
            },
        },
        "mcp_config" if args.mcp.mcp_config.is_empty() => "(none)".to_owned(),
        "mcp_config" => args
            .mcp
            .mcp_config
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        "mcp.allow_env" if allow_env.is_empty() => "(none)".to_owned(),
        "mcp.allow_env" => allow_env.join(", "),
        "limits.max_parallel" => args.max_parallel.to_string(),
        "limits.max_depth" => args.max_depth.to_string(),
        "limits.max_turns" => or(args.max_turns.map(u64::from), "(the agent type's)"),
        "limits.budget_tokens" => or(args.budget_tokens, "(unlimited)"),
        "limits.max_tokens" => args.max_tokens.to_string(),
        "limits.context_tokens" => or(args.context_tokens, "(the model's)"),
        "compaction.compact_at" => or(args.compact_at.0, "off"),
        _ => String::new(),
    }
}

/// The permission mode and rules of every file, with an entry for each. Rules add up, the
/// user's first; the mode is the user's, or the project's where it is stricter: a project
/// may tighten the user's mode, never loosen it (a looser one goes to `left_out`).
///
/// A project's allow rules loosen what the user's own mode holds back: where the caller
/// says so (`allow_barred`: the project is not trusted and the user holds some agent to a
/// mode stricter than `auto`, see `project_items::loosened_mode`), they go to `left_out` too.
fn merged_permissions(
    sources: &Sources,
    allow_barred: bool,
    entries: &mut Vec<(String, String, Source)>,
    left_out: &mut Vec<String>,
) -> PermissionSettings {
    let mut permissions = PermissionSettings::default();
    let user_mode = sources.mode_of(false);
    let project_mode = sources.mode_of(true);
    let mode = match (user_mode, project_mode) {
        (Some((user, from)), Some((project, at))) if project.stricter(user) != project => {
            left_out.push(format!(
                "permissions.mode = \"{project}\" ({at}): a project may only tighten your mode ({user}, {from})"
            ));
            Some((user, from))
        }
        (user, project) => project.or(user),
    };
    match mode {
        Some((mode, source)) => {
            entries.push(("permissions.mode".into(), mode.to_string(), source));
            permissions.mode = Some(mode);
        }
        None => entries.push(("permissions.mode".into(), "auto".into(), Source::Default)),
    }
    for (key, rules) in [
        ("permissions.allow", &mut permissions.allow),
        ("permissions.deny", &mut permissions.deny),
    ] {
        // Rules add up: the user's first, then the project's.
        let mut written = sources.rules_of(key, false);
        let mut project = sources.rules_of(key, true);
        // Named with the project's other items (see `project_items`).
        if allow_barred && key == "permissions.allow" {
            project.clear();
        }
        written.extend(project);
        for (rule, source) in written {
            entries.push((key.to_owned(), rule.clone(), source));
            rules.push(rule);
        }
        if rules.is_empty() {
            entries.push((key.to_owned(), "(none)".into(), Source::Default));
        }
    }
    permissions
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read_err(text: &str) -> String {
        read(text).unwrap_err().report()
    }

    fn read(text: &str) -> Result<SettingsFile, CliError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROJECT_FILE);
        std::fs::write(&path, text).unwrap();
        SettingsFile::read(&path, "cadre.toml".into())
    }

    #[test]
    fn every_file_key_is_applied_and_shown() {
        // A sample value for each key; a new row needs one here, and arms in `apply` and
        // `shown_setting`, or this fails.
        let sample = |key: &str| {
            match key {
            "provider" => "\"openai\"",
            "model" => "\"sample-model\"",
            "base_url" => "\"http://127.0.0.1:9\"",
            "mcp_config" => "\"servers.json\"",
            "mcp.allow_env" => "[\"SAMPLE\"]",
            "compaction.compact_at" => "123456",
            k if k.starts_with("limits.") => "7",
            other => panic!("no sample value for `{other}`: add one here, and its arms in apply and shown_setting"),
        }
        };
        let keys: Vec<&str> = known_keys()
            .filter(|k| !k.starts_with("permissions."))
            .collect();
        let mut text = String::new();
        let mut table = "";
        for key in &keys {
            let (t, name) = key.split_once('.').unwrap_or(("", key));
            if t != table {
                text.push_str(&format!("[{t}]\n"));
                table = t;
            }
            text.push_str(&format!("{name} = {}\n", sample(key)));
        }
        let shown = |config: &str| {
            let root = tempfile::tempdir().unwrap();
            let user = tempfile::tempdir().unwrap();
            std::fs::write(user.path().join(USER_FILE), config).unwrap();
            std::fs::write(user.path().join("servers.json"), "{}").unwrap();
            let sources = Sources::read(root.path(), Some(user.path())).unwrap();
            let cli = crate::args::parse(
                <crate::args::Cli as clap::CommandFactory>::command()
                    .get_matches_from(["cadre", "run", "task"]),
            )
            .unwrap();
            let Some(crate::args::Command::Run(mut cmd)) = cli.command else {
                panic!("not a run");
            };
            resolve_from(&mut cmd.args, sources, true, false).entries
        };
        let (set, default) = (shown(&text), shown(""));
        for key in keys {
            let entry = |entries: &[(String, String, Source)]| {
                entries
                    .iter()
                    .find(|(k, _, _)| k == key)
                    .cloned()
                    .unwrap_or_else(|| panic!("`{key}` has no entry"))
            };
            let (_, value, source) = entry(&set);
            assert!(matches!(source, Source::File(..)), "`{key}`: {source:?}");
            assert_ne!(value, entry(&default).1, "`{key}` is read but not applied");
        }
    }

    #[test]
    fn loose_spellings_are_read() {
        let f = read("Max-Parallel = \"4\"\ncompact_at = false\n[limits]\ncontext_tokens = 200_000\n[permissions]\nallow = \"Bash(ls:*)\"\n[extra]\nx = 1\n").unwrap();
        assert_eq!(f.values["limits.max_parallel"], (Value::Number(4), 1));
        assert_eq!(
            f.values["compaction.compact_at"],
            (Value::CompactAt(None), 2)
        );
        assert_eq!(f.values["limits.context_tokens"].0, Value::Number(200_000));
        assert_eq!(
            f.values["permissions.allow"].0,
            Value::List(vec!["Bash(ls:*)".into()])
        );
        assert_eq!(f.unknown.len(), 1, "{:?}", f.unknown);
        assert!(f.unknown[0].starts_with("cadre.toml:7: unknown setting `extra`"));
    }

    #[test]
    fn a_hooks_table_reads_as_claude_codes_hooks_object() {
        let f = read("model = \"sonnet\"\n\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{ type = \"command\", command = \"guard.sh\", timeout = 0 }]\n").unwrap();
        let hooks = f.hooks.all();
        assert_eq!(hooks.len(), 1, "{hooks:?}");
        assert_eq!(hooks[0].event, cadre_core::HookEvent::PreToolUse);
        assert_eq!(hooks[0].matcher.as_deref(), Some("Bash"));
        assert_eq!(hooks[0].command, "guard.sh");
        assert_eq!(
            hooks[0].timeout_secs,
            cadre_core::definitions::hooks::DEFAULT_HOOK_TIMEOUT_SECS
        );
        assert_eq!(hooks[0].source, "cadre.toml");
        // Not an unknown setting; its one repair is named with the table's line.
        assert_eq!(f.unknown.len(), 1, "{:?}", f.unknown);
        assert!(
            f.unknown[0].starts_with("cadre.toml:3: a `PreToolUse` hook's timeout 0 ignored"),
            "{:?}",
            f.unknown
        );
        assert_eq!(f.values["model"].0, Value::Text("sonnet".into()));
        // An entry that cannot load refuses the file, at its place.
        let e = read_err("model = \"x\"\n[[hooks.Whenever]]\nhooks = []\n");
        assert!(e.starts_with("cadre.toml:2:"), "{e}");
        assert!(e.contains("unknown hook event `Whenever`"), "{e}");
        let e = read_err("[[hooks.Stop]]\nmatcher = \"(\"\nhooks = []\n");
        assert!(
            e.starts_with("cadre.toml:2:11: a hook entry cannot load: matcher"),
            "{e}"
        );
    }

    #[test]
    fn the_engine_refuses_what_it_cannot_honour_when_given() {
        let flag = Source::Flag;
        let file = Source::File("cadre.toml".into(), 3);
        let env = Source::Env("ANTHROPIC_BASE_URL".into());
        let lines = engine_refusals([
            ("skills_dir", &flag),
            ("bash_timeout", &flag),
            ("model", &flag),
            ("base_url", &file),
            ("provider", &env),
        ]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("--skills-dir: "), "{lines:?}");
        assert!(lines[1].starts_with("--bash-timeout: "), "{lines:?}");
        assert!(
            lines[2].starts_with("base_url (cadre.toml:3): "),
            "{lines:?}"
        );
    }

    #[test]
    fn bad_values_name_the_line() {
        let e = read_err("\n[limits]\nmax_turns = -1\n");
        assert!(
            e.starts_with("cadre.toml:3: limits.max_turns must be a whole number from 1 to"),
            "{e}"
        );
        let e = read_err("[permissions]\ndeny = [1]\n");
        assert_eq!(
            e,
            "cadre.toml:2: permissions.deny must be a list of strings; 1 is not one"
        );
        let e = read_err("model = \n");
        assert!(e.starts_with("cadre.toml:1: not valid TOML"), "{e}");
        // Permission modes and rules are checked where the file and line are known.
        let e = read_err("[permissions]\nmode = \"sometimes\"\n");
        assert!(e.starts_with("cadre.toml:2: permissions.mode "), "{e}");
        let e = read_err("[permissions]\nallow = [\"Teleport(x)\"]\n");
        assert!(e.starts_with("cadre.toml:2: permissions.allow "), "{e}");
    }
}
