//! Every setting of a run, declared once: the flag and environment variable that give it,
//! whether the settings files may, whether a project the user has not trusted may, and
//! whether a run on the engine honours it. The settings files' keys, what the command line
//! gave, what an untrusted project's files are refused, and the engine's refusal list are
//! all read from [`ROWS`]; a test walks every flag of `cadre run` and every key and finds
//! its row, so a new one cannot be forgotten by any of them.

/// Whether a project's own files may set a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Project {
    /// Always: it cannot run a command, reach a host or weaken a rule.
    May,
    /// Only once the user trusts the project: it runs a command or reaches a host.
    IfTrusted,
    /// Only to make it stricter than the user's own (the permission mode).
    Tighten,
    /// Freely where it loosens nothing; where the user's mode is stricter than auto, only
    /// once the project is trusted (allow rules: they would let held-back calls through).
    IfTrustedWhereLoosening,
    /// Never: only the user's own files (it decides what the project may do).
    Never,
    /// Not a setting of the files: the command line alone gives it.
    NotInFiles,
}

/// What a run on the engine (`--engine restate`) does with a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Carried to the workers and applied there.
    Honoured,
    /// Used by this process alone (where to submit, how to print).
    Client,
    /// Checked item by item by the engine's own refusal list (hooks, MCP servers, teams).
    Listed,
    /// Not honoured: a run that sets it is refused, for this reason.
    Refused(&'static str),
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Its name: the dotted key in the settings files, else the flag's clap id.
    pub key: &'static str,
    /// The clap id of the flag of `cadre run` that gives it, if one does.
    pub flag: Option<&'static str>,
    /// The environment variable clap reads for it (or, for a telemetry setting, the
    /// `OTEL_*` variable that gives it), if any.
    pub env: Option<&'static str>,
    /// Whether a project's files may set it.
    pub project: Project,
    /// What the engine does with it.
    pub engine: Engine,
}

const fn row(
    key: &'static str,
    flag: Option<&'static str>,
    project: Project,
    engine: Engine,
) -> Row {
    Row {
        key,
        flag,
        env: None,
        project,
        engine,
    }
}

/// A row of the `[telemetry]` table: given by the environment variable `env` too (which
/// wins), used by this process alone (each worker exports its own).
const fn telemetry(key: &'static str, env: &'static str, project: Project) -> Row {
    Row {
        env: Some(env),
        ..row(key, None, project, Engine::Client)
    }
}

const WORKER_MODEL: &str =
    "each worker talks to the model with its own settings (`cadre worker --base-url`, --max-retries, --request-timeout, --api-version, --provider)";

/// Every setting and every flag of `cadre run`.
pub const ROWS: &[Row] = &[
    Row {
        env: Some("CADRE_PROVIDER"),
        ..row(
            "provider",
            Some("provider"),
            Project::May,
            Engine::Refused(WORKER_MODEL),
        )
    },
    Row {
        env: Some("CADRE_MODEL"),
        ..row("model", Some("model"), Project::May, Engine::Honoured)
    },
    row(
        "base_url",
        Some("base_url"),
        Project::IfTrusted,
        Engine::Refused(WORKER_MODEL),
    ),
    row(
        "mcp_config",
        Some("mcp_config"),
        Project::IfTrusted,
        Engine::Listed,
    ),
    // What servers may read, not a server: the servers themselves are checked one by one.
    row("mcp.allow_env", None, Project::Never, Engine::Listed),
    row(
        "limits.max_parallel",
        Some("max_parallel"),
        Project::May,
        Engine::Honoured,
    ),
    row(
        "limits.max_depth",
        Some("max_depth"),
        Project::May,
        Engine::Honoured,
    ),
    row(
        "limits.max_turns",
        Some("max_turns"),
        Project::May,
        Engine::Honoured,
    ),
    row(
        "limits.budget_tokens",
        Some("budget_tokens"),
        Project::May,
        Engine::Honoured,
    ),
    row(
        "limits.max_tokens",
        Some("max_tokens"),
        Project::May,
        Engine::Honoured,
    ),
    row(
        "limits.context_tokens",
        Some("context_tokens"),
        Project::May,
        Engine::Honoured,
    ),
    row(
        "compaction.compact_at",
        Some("compact_at"),
        Project::May,
        Engine::Honoured,
    ),
    // Telemetry (`[telemetry]`): what the OTEL_* variable of each says wins over the files.
    // Where spans go and what they carry reaches a host, carries a secret or sends content
    // out: a project sets those only once trusted.
    telemetry(
        "telemetry.endpoint",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        Project::IfTrusted,
    ),
    telemetry(
        "telemetry.protocol",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        Project::May,
    ),
    telemetry(
        "telemetry.headers",
        "OTEL_EXPORTER_OTLP_HEADERS",
        Project::IfTrusted,
    ),
    telemetry("telemetry.service_name", "OTEL_SERVICE_NAME", Project::May),
    telemetry(
        "telemetry.resource_attributes",
        "OTEL_RESOURCE_ATTRIBUTES",
        Project::May,
    ),
    telemetry(
        "telemetry.log_user_prompts",
        "OTEL_LOG_USER_PROMPTS",
        Project::IfTrusted,
    ),
    telemetry(
        "telemetry.log_tool_details",
        "OTEL_LOG_TOOL_DETAILS",
        Project::IfTrusted,
    ),
    telemetry("telemetry.metrics", "OTEL_METRICS_EXPORTER", Project::May),
    telemetry(
        "telemetry.traceparent_to_model",
        "CADRE_OTEL_TRACEPARENT_TO_MODEL",
        Project::IfTrusted,
    ),
    row(
        "permissions.mode",
        Some("permission_mode"),
        Project::Tighten,
        Engine::Listed,
    ),
    row(
        "permissions.allow",
        Some("allow"),
        Project::IfTrustedWhereLoosening,
        Engine::Honoured,
    ),
    row(
        "permissions.deny",
        Some("deny"),
        Project::May,
        Engine::Honoured,
    ),
    row("hooks", None, Project::IfTrusted, Engine::Listed),
    // The project's MCP servers: `.mcp.json`, and agent files' inline servers.
    row("mcp_servers", None, Project::IfTrusted, Engine::Listed),
    row(
        "engine",
        Some("engine"),
        Project::NotInFiles,
        Engine::Client,
    ),
    Row {
        env: Some("CADRE_RESTATE_URL"),
        ..row(
            "restate_url",
            Some("restate_url"),
            Project::NotInFiles,
            Engine::Client,
        )
    },
    Row {
        env: Some("CADRE_RESTATE_ADMIN_URL"),
        ..row(
            "restate_admin_url",
            Some("restate_admin_url"),
            Project::NotInFiles,
            Engine::Client,
        )
    },
    row("repo", Some("repo"), Project::NotInFiles, Engine::Client),
    row(
        "agent",
        Some("agent"),
        Project::NotInFiles,
        Engine::Honoured,
    ),
    row("team", Some("team"), Project::NotInFiles, Engine::Listed),
    row(
        "max_messages",
        Some("max_messages"),
        Project::NotInFiles,
        Engine::Listed,
    ),
    row(
        "no_transcripts",
        Some("no_transcripts"),
        Project::NotInFiles,
        Engine::Refused("the workers keep the run's record in Restate and the run folder here"),
    ),
    row(
        "agents_dir",
        Some("agents_dir"),
        Project::NotInFiles,
        Engine::Honoured,
    ),
    row(
        "skills_dir",
        Some("skills_dir"),
        Project::NotInFiles,
        Engine::Refused("the workers load skills from the checkout's own folders only"),
    ),
    row(
        "mcp_timeout",
        Some("mcp_timeout"),
        Project::NotInFiles,
        Engine::Refused("the workers run no MCP servers"),
    ),
    row(
        "max_retries",
        Some("max_retries"),
        Project::NotInFiles,
        Engine::Refused(WORKER_MODEL),
    ),
    row(
        "request_timeout",
        Some("request_timeout"),
        Project::NotInFiles,
        Engine::Refused(WORKER_MODEL),
    ),
    row(
        "api_version",
        Some("api_version"),
        Project::NotInFiles,
        Engine::Refused(WORKER_MODEL),
    ),
    row(
        "bash_timeout",
        Some("bash_timeout"),
        Project::NotInFiles,
        Engine::Refused("each worker sets it (`cadre worker --bash-timeout`)"),
    ),
    row(
        "output_format",
        Some("output_format"),
        Project::NotInFiles,
        Engine::Client,
    ),
    row(
        "record",
        Some("record"),
        Project::NotInFiles,
        Engine::Listed,
    ),
    row(
        "replay",
        Some("replay"),
        Project::NotInFiles,
        Engine::Listed,
    ),
    row(
        "allow_unsandboxed_bash",
        Some("allow_unsandboxed_bash"),
        Project::NotInFiles,
        Engine::Listed,
    ),
    row(
        "trust_project",
        Some("trust_project"),
        Project::NotInFiles,
        Engine::Client,
    ),
    // Refused when given: its message names --trust-project.
    row(
        "trust_hooks",
        Some("trust_hooks"),
        Project::NotInFiles,
        Engine::Client,
    ),
    row(
        "no_hooks",
        Some("no_hooks"),
        Project::NotInFiles,
        Engine::Listed,
    ),
    // What `cadre run` itself takes besides the run's options.
    row("task", Some("task"), Project::NotInFiles, Engine::Honoured),
    row(
        "task_file",
        Some("task_file"),
        Project::NotInFiles,
        Engine::Honoured,
    ),
    row(
        "continue_last",
        Some("continue_last"),
        Project::NotInFiles,
        Engine::Client,
    ),
    row(
        "resume",
        Some("resume"),
        Project::NotInFiles,
        Engine::Client,
    ),
    // Global options.
    row(
        "directory",
        Some("directory"),
        Project::NotInFiles,
        Engine::Client,
    ),
    row(
        "verbose",
        Some("verbose"),
        Project::NotInFiles,
        Engine::Client,
    ),
    row("quiet", Some("quiet"), Project::NotInFiles, Engine::Client),
];

/// Rows of what a project supplies in files of their own rather than as keys of
/// `cadre.toml` (its `[hooks]` table aside).
const NOT_KEYS: [&str; 2] = ["hooks", "mcp_servers"];

/// The row of `key`.
pub fn row_of(key: &str) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.key == key)
}

/// The keys the settings files may hold, in the table's order.
pub fn file_keys() -> impl Iterator<Item = &'static str> {
    ROWS.iter()
        .filter(|r| r.project != Project::NotInFiles && !NOT_KEYS.contains(&r.key))
        .map(|r| r.key)
}

/// The tables of the settings files (`[limits]`, …), from the dotted keys.
pub fn file_tables() -> Vec<&'static str> {
    let mut tables: Vec<&'static str> = file_keys()
        .filter_map(|k| k.split_once('.').map(|(t, _)| t))
        .collect();
    tables.dedup();
    tables
}

/// One line per kind of limit the table puts on a project's files, naming the settings of
/// each: what `cadre config show` and `cadre doctor` say of what a project may set.
pub fn project_limits() -> Vec<String> {
    let keys = |kind: Project| -> String {
        ROWS.iter()
            .filter(|r| r.project == kind)
            .map(|r| r.key)
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        format!(
            "only once the project is trusted: {}",
            keys(Project::IfTrusted)
        ),
        format!("only in your own files: {}", keys(Project::Never)),
        format!("only stricter than yours: {}", keys(Project::Tighten)),
        format!(
            "only once the project is trusted where your mode is stricter than auto: {}",
            keys(Project::IfTrustedWhereLoosening)
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Cli;
    use clap::CommandFactory;

    #[test]
    fn every_flag_and_every_key_has_one_row() {
        let cli = Cli::command();
        for name in ["run", "chat", "resume"] {
            let mut sub = cli
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no {name}"))
                .clone();
            sub.build();
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version" | "run_id") {
                    continue;
                }
                let rows: Vec<&Row> = ROWS.iter().filter(|r| r.flag == Some(id)).collect();
                assert_eq!(rows.len(), 1, "`cadre {name}` flag `{id}` needs one row");
                if let Some(env) = arg.get_env() {
                    assert_eq!(
                        rows[0].env.map(std::ffi::OsStr::new),
                        Some(env),
                        "flag `{id}` reads {env:?}: its row must say so"
                    );
                }
            }
        }
        for key in crate::common::settings::known_keys() {
            assert!(row_of(key).is_some(), "setting `{key}` has no row");
        }
        let mut keys: Vec<&str> = ROWS.iter().map(|r| r.key).collect();
        keys.sort_unstable();
        let before = keys.len();
        keys.dedup();
        assert_eq!(before, keys.len(), "a key has two rows");
    }
}
