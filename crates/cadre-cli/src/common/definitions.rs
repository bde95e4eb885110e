//! What a project defines, loaded the same way for every command: agent types, skills and
//! MCP servers, and the problems met loading them.

use crate::args::McpArgs;
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::{require_dirs, user_home};
use cadre_core::{Problem, Registry, SkillSet};
use cadre_mcp::{McpConfig, McpServers, Timeouts};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The registry for a project at `root`: shipped types, then the user's, the project's and
/// any `--agents-dir` folders, nearer winning.
pub fn load_registry(root: &Path, extra: &[PathBuf]) -> Result<Registry> {
    require_dirs(extra, "--agents-dir")?;
    Ok(load_registry_from(root, extra, true))
}

/// Like [`load_registry`]; without the user's own folders when `include_user` is false.
pub fn load_registry_from(root: &Path, extra: &[PathBuf], include_user: bool) -> Registry {
    let home = user_home(include_user);
    let mut dirs = Registry::standard_dirs(root, home.as_deref());
    dirs.extend(extra.iter().cloned());
    Registry::load(&dirs)
}

/// The skills for a project at `root`: the user's, the project's and any `--skills-dir`
/// folders, nearer winning. Only front matter is read.
pub fn load_skills(root: &Path, extra: &[PathBuf]) -> Result<SkillSet> {
    require_dirs(extra, "--skills-dir")?;
    Ok(load_skills_from(root, extra, true))
}

/// Like [`load_skills`]; without the user's own folders when `include_user` is false.
pub fn load_skills_from(root: &Path, extra: &[PathBuf], include_user: bool) -> SkillSet {
    let home = user_home(include_user);
    let mut dirs = SkillSet::standard_dirs(root, home.as_deref());
    dirs.extend(extra.iter().cloned());
    SkillSet::load(&dirs)
}

/// The MCP servers for a project at `root`: `~/.config/cadre/mcp.json` (unless
/// `include_user` is false), the project's `.mcp.json`, then each `--mcp-config` file; the
/// servers of every file read any `${VAR}` (for commands that start what the user asks).
pub fn load_servers(root: &Path, args: &McpArgs, include_user: bool) -> Result<McpServers> {
    let mut config = read_servers(root, args, include_user, true)?;
    config.expansion.open_files = config.sources.values().cloned().collect();
    Ok(McpServers::new(config, root.to_path_buf(), timeouts(args)))
}

/// The MCP servers of a run in `root`, as [`load_servers`] finds them, but the project's
/// (its `.mcp.json`, and an `mcp_config` file its `cadre.toml` named, `project_config`)
/// only when `trusted`. The servers of the user's own files read any `${VAR}`; the
/// project's only those `allow_env` names, and never the model API's credentials; so do the
/// inline servers of agent types, but for those in the user's own folders and `agents_dir`.
pub fn load_run_servers(
    root: &Path,
    args: &McpArgs,
    include_user: bool,
    trusted: bool,
    project_config: Option<&Path>,
    allow_env: &[String],
    agents_dir: &[PathBuf],
) -> Result<McpServers> {
    let mut config = read_servers(root, args, include_user, trusted)?;
    // The user's own agent folders: their types' inline servers are the user's too.
    let project_dirs = [".claude/agents", "agents", ".cadre/agents"].map(|d| root.join(d));
    config.expansion.open_dirs = Registry::standard_dirs(root, user_home(include_user).as_deref())
        .into_iter()
        .filter(|d| !project_dirs.contains(d))
        .chain(agents_dir.iter().cloned())
        .collect();
    let project_json = root.join(".mcp.json");
    let home = user_home(include_user);
    config.expansion.open_files = McpConfig::standard_files(root, home.as_deref())
        .into_iter()
        .chain(args.mcp_config.iter().cloned())
        .filter(|f| *f != project_json && Some(f.as_path()) != project_config)
        .collect();
    config.expansion.allowed = allow_env.iter().cloned().collect();
    Ok(McpServers::new(config, root.to_path_buf(), timeouts(args)))
}

/// The MCP configuration of the standard files and `--mcp-config`; the project's
/// `.mcp.json` only when `with_project`.
fn read_servers(
    root: &Path,
    args: &McpArgs,
    include_user: bool,
    with_project: bool,
) -> Result<McpConfig> {
    if let Some(missing) = args.mcp_config.iter().find(|f| !f.is_file()) {
        return Err(CliError::config(format!(
            "cannot use --mcp-config {}: no such file",
            missing.display()
        )));
    }
    let home = user_home(include_user);
    let project_json = root.join(".mcp.json");
    let mut files: Vec<PathBuf> = McpConfig::standard_files(root, home.as_deref())
        .into_iter()
        .filter(|f| with_project || *f != project_json)
        .collect();
    files.extend(args.mcp_config.iter().cloned());
    Ok(McpConfig::load(&files, &args.mcp_config))
}

/// The timeouts of MCP calls `args` sets.
fn timeouts(args: &McpArgs) -> Timeouts {
    Timeouts {
        call: Duration::from_secs(args.mcp_timeout.max(1)),
        ..Timeouts::default()
    }
}

/// Refuses the run (exit 2) when an agent file's hook entry cannot load: its guard must
/// not be left out silently.
pub fn refuse_unloadable_hooks(registry: &Registry) -> Result<()> {
    let refused: Vec<String> = registry.refused_hooks().map(ToString::to_string).collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(CliError::config(refused.join("\n")))
}

/// Prints each problem met loading agent types or skills on stderr, once: a warning says
/// what was repaired, an error that the file was skipped.
pub fn print_problems(problems: &[Problem]) {
    for p in problems {
        if p.warning {
            errln!("cadre: {p}");
        } else {
            errln!("cadre: skipped: {p}");
        }
    }
}

/// Prints the problems `cadre … check` found and returns its exit code: 1 on any error;
/// warnings are worth reading, not failing on, unless `strict` makes each one an error.
pub fn check_report(problems: &[Problem], strict: bool, ok: &str) -> Code {
    for p in problems {
        let p = Problem {
            warning: p.warning && !strict,
            ..p.clone()
        };
        outln!("{p}");
    }
    let errors = problems.iter().filter(|p| !p.warning || strict).count();
    let warnings = problems.len() - errors;
    if errors == 0 {
        let note = if warnings > 0 {
            format!(", {warnings} warning(s)")
        } else {
            String::new()
        };
        outln!("{ok}{note}");
        Code::Done
    } else {
        outln!("{errors} error(s)");
        Code::StoppedEarly
    }
}

/// What is said when no skill was found: where they were looked for (the user's own
/// folders too, when `include_user`).
pub fn no_skills_found(root: &Path, skills_dir: &[PathBuf], include_user: bool) -> String {
    let home = user_home(include_user);
    let mut searched = SkillSet::standard_dirs(root, home.as_deref());
    searched.extend(skills_dir.iter().cloned());
    let list: Vec<String> = searched.iter().map(|d| d.display().to_string()).collect();
    format!("no skills found; searched: {}", list.join(", "))
}
