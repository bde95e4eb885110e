//! The settings merged into a command's options: a flag or the environment first, then
//! the project's file, the user's, cadre's defaults.

use super::file::{known_keys, SettingsFile, Value};
use super::sources::{configured_hooks, CadreFiles, Sources};
use crate::args::{Given, Provider, RunArgs, Source};
use crate::common::claude_settings::ClaudeFile;
use crate::common::hooks::ConfiguredHooks;
use crate::common::table::{self, Project};
use cadre_core::PermissionSettings;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The settings of one command, merged, with where each came from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// cadre's files looked at: the project's and the user's.
    pub files: CadreFiles,
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

/// Fills every option of `args` that was not given on the command line or by the
/// environment from the settings files `sources`; what an untrusted project may not set is
/// left out unless `trusted`. Returns the merged settings.
pub fn resolve_from(
    args: &mut RunArgs,
    sources: Sources,
    trusted: bool,
    allow_barred: bool,
) -> Settings {
    let given = std::mem::take(&mut args.given);
    let mut left_out = never_from_project(&sources.files);
    let (mut entries, allow_env) = applied_settings(args, &given, &sources.files, trusted);
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

/// What the project's file sets that a project may never set, one line each. (What needs
/// trust is named with the project's other items: see `project_items`.)
fn never_from_project(files: &CadreFiles) -> Vec<String> {
    table::ROWS
        .iter()
        .filter(|r| r.project == Project::Never)
        .filter_map(|r| files.project.get(r.key).map(|(v, s)| (r.key, v, s)))
        .map(|(key, v, s)| {
            format!(
                "{key} = {:?} ({s}): only your own config.toml may set it",
                v.text()
            )
        })
        .collect()
}

/// Applies to `args` each setting (but the permissions) that neither the command line
/// (`given`) nor the environment gave, from `files`; returns an entry for each (its value
/// as shown and where it came from) and the variables MCP servers may read.
fn applied_settings(
    args: &mut RunArgs,
    given: &Given,
    files: &CadreFiles,
    trusted: bool,
) -> (Vec<(String, String, Source)>, Vec<String>) {
    let mut entries = Vec::new();
    let mut allow_env = Vec::new();
    // In the table's order (the provider first: the model's default and the base URL's
    // variable depend on it). The permissions are merged apart: their rules add up.
    for key in known_keys().filter(|k| !k.starts_with("permissions.")) {
        if key.starts_with("telemetry.") {
            entries.push(telemetry_entry(key, files, trusted));
            continue;
        }
        let env = (key == "base_url")
            .then(|| env_base_url(args.provider))
            .flatten();
        let source = match (given.source(key), env) {
            (Some(source), _) => source,
            (None, Some((_, var))) => Source::Env(var.to_owned()),
            (None, None) => match file_value(files, key, trusted) {
                Some((value, source)) => {
                    apply(key, value, args, &mut allow_env);
                    source
                }
                None => Source::Default,
            },
        };
        entries.push((key.to_owned(), shown_setting(key, args, &allow_env), source));
    }
    (entries, allow_env)
}

/// The entry of a `[telemetry]` setting: its variable's value when the environment sets it
/// (that wins), else the files'. Headers show their names alone: their values are secrets.
fn telemetry_entry(key: &str, files: &CadreFiles, trusted: bool) -> (String, String, Source) {
    let var = table::row_of(key).and_then(|r| r.env);
    let from_env = var.and_then(|v| {
        let value = std::env::var(v).ok().filter(|x| !x.trim().is_empty())?;
        Some((value, Source::Env(v.to_owned())))
    });
    let (value, source) = match from_env {
        Some(found) => found,
        None => match telemetry_files(files, trusted, env_sends_telemetry())
            .into_iter()
            .find(|(k, _, _)| *k == key)
        {
            Some((_, value, source)) => (value.text(), source),
            None => return (key.to_owned(), "(none)".to_owned(), Source::Default),
        },
    };
    (key.to_owned(), shown_value(key, &value), source)
}

/// A setting's value as it may be shown: the headers' names alone (their values are
/// secrets), every other value as it is.
pub fn shown_value(key: &str, value: &str) -> String {
    if key != "telemetry.headers" {
        return value.to_owned();
    }
    value
        .split(',')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| format!("{}=…", k.trim())))
        .collect::<Vec<_>>()
        .join(",")
}

/// The values the `[telemetry]` tables of `files` give, by the variable each stands for
/// (`telemetry.endpoint` as `OTEL_EXPORTER_OTLP_ENDPOINT`), as that variable would hold
/// it; what an untrusted project may not set is left out unless `trusted`. Where telemetry
/// goes is one file's whole (see [`telemetry_files`]); the environment's variables that
/// name a collector or its headers keep a project's from being used.
pub fn telemetry_values(files: &CadreFiles, trusted: bool) -> BTreeMap<&'static str, String> {
    telemetry_values_with(files, trusted, env_sends_telemetry())
}

/// [`telemetry_values`], `env_sends` saying whether the environment names a collector or
/// headers for one.
pub(super) fn telemetry_values_with(
    files: &CadreFiles,
    trusted: bool,
    env_sends: bool,
) -> BTreeMap<&'static str, String> {
    telemetry_files(files, trusted, env_sends)
        .into_iter()
        .filter_map(|(key, value, _)| {
            let text = match (key, value) {
                ("telemetry.metrics", Value::Flag(on)) => if *on { "otlp" } else { "none" }.into(),
                (_, value) => value.text(),
            };
            Some((table::row_of(key)?.env?, text))
        })
        .collect()
}

/// The variables that name where telemetry goes, or the headers it carries there.
const DESTINATION_VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
];

/// Whether the environment names a collector, or headers for one.
fn env_sends_telemetry() -> bool {
    DESTINATION_VARS
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| !x.trim().is_empty()))
}

/// The settings that say where telemetry goes: taken together from one file, so that a
/// collector only ever gets the headers written beside it.
const DESTINATION: &[&str] = &[
    "telemetry.endpoint",
    "telemetry.headers",
    "telemetry.protocol",
];

/// Each `[telemetry]` setting `files` give, its value and where. The user's file comes
/// first: a project's only fills what it leaves unset (where the table lets the project,
/// `trusted` or not, set the key), and never turns off or redirects what the user set up.
/// Where telemetry goes (its endpoint, headers and protocol) comes whole from one file: the
/// user's when it names an endpoint, else the project's when it does, else the user's. A
/// project's endpoint is used only where the table lets the project (`trusted`) set it and
/// the environment (`env_sends`) names no collector or headers: the exporter adds the
/// environment's headers, the user's secrets, to whatever endpoint it is given. The
/// project's `metrics` counts only with its own endpoint: it does not send to a default
/// collector the user never asked for.
fn telemetry_files(
    files: &CadreFiles,
    trusted: bool,
    env_sends: bool,
) -> Vec<(&'static str, &Value, Source)> {
    let project_may = |key: &str| !env_sends && may_set(key, trusted);
    let is_project = |f: &SettingsFile| std::ptr::eq(f, &files.project);
    let users_first = || files.user.iter().chain(std::iter::once(&files.project));
    let sender = users_first()
        .filter(|f| !is_project(f) || project_may("telemetry.endpoint"))
        .find(|f| f.has("telemetry.endpoint"))
        .or(files.user.as_ref());
    let project_sends = sender.is_some_and(is_project);
    table::ROWS
        .iter()
        .filter(|r| r.key.starts_with("telemetry."))
        .filter_map(|r| {
            let (value, source) = if DESTINATION.contains(&r.key) {
                sender?.get(r.key)?
            } else {
                users_first()
                    .filter(|f| !is_project(f) || may_set(r.key, trusted))
                    .filter(|f| !is_project(f) || r.key != "telemetry.metrics" || project_sends)
                    .find_map(|f| f.get(r.key))?
            };
            Some((r.key, value, source))
        })
        .collect()
}

/// Whether a project (`trusted` or not) may set `key`, as the table says.
fn may_set(key: &str, trusted: bool) -> bool {
    match table::row_of(key).map_or(Project::May, |r| r.project) {
        Project::IfTrusted => trusted,
        Project::Never => false,
        _ => true,
    }
}

/// The value `files` give the setting `key`, and where: the project's file wins over the
/// user's, where the table lets the project (`trusted` or not) set the key.
fn file_value<'a>(files: &'a CadreFiles, key: &str, trusted: bool) -> Option<(&'a Value, Source)> {
    let project = may_set(key, trusted).then_some(&files.project);
    project
        .into_iter()
        .chain(&files.user)
        .find_map(|f| f.get(key))
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
