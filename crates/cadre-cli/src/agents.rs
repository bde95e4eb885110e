//! `cadre agents list|show|check`.

use crate::args::{AgentsCommand, AgentsDirArg};
use crate::exit::{Code, ConfigError};
use anyhow::Result;
use cadre_core::{Problem, Registry};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How wide the tools column of `cadre agents list` is; longer lists are cut.
const TOOLS_WIDTH: usize = 44;

/// The registry for a project at `root`: shipped types, then the user's, the project's and
/// any `--agents-dir` folders, nearer winning.
pub fn load_registry(root: &Path, extra: &[PathBuf]) -> Result<Registry> {
    crate::run::require_dirs(extra, "--agents-dir")?;
    Ok(load_registry_from(root, extra, true))
}

/// Like [`load_registry`]; without the user's own folders when `include_user` is false.
pub fn load_registry_from(root: &Path, extra: &[PathBuf], include_user: bool) -> Registry {
    let home = crate::run::user_home(include_user);
    let mut dirs = Registry::standard_dirs(root, home.as_deref());
    dirs.extend(extra.iter().cloned());
    Registry::load(&dirs)
}

/// Runs one `cadre agents` command.
pub fn agents(cmd: AgentsCommand, root: &Path) -> Result<Code> {
    match cmd {
        AgentsCommand::List(AgentsDirArg { agents_dir }) => {
            let reg = load_registry(root, &agents_dir)?;
            crate::run::print_problems(reg.problems());
            // Every column as wide as its longest entry, but a tool list is cut: the
            // description column stays in place and lines are cut to the terminal's width.
            let name_width = reg
                .all()
                .map(|s| s.name.chars().count())
                .max()
                .unwrap_or(0)
                .max(4);
            let mut text = format!(
                "{:<name_width$} {:<9} {:<9} {:<TOOLS_WIDTH$} description\n",
                "name", "mode", "access", "tools"
            );
            for s in reg.all() {
                let mode = format!("{:?}", s.mode).to_lowercase();
                let access = if s.read_only { "read-only" } else { "writes" };
                let desc = first_sentence(&s.description);
                let tools = crate::display::truncate(&s.tools.join(","), TOOLS_WIDTH);
                let _ = writeln!(
                    text,
                    "{:<name_width$} {mode:<9} {access:<9} {tools:<TOOLS_WIDTH$} {desc}",
                    s.name
                );
            }
            out!(
                "{}",
                crate::display::fit_lines(&text, crate::display::stdout_width())
            );
            if !reg.problems().is_empty() {
                errln!(
                    "\n{} problem(s) in agent files; run `cadre agents check` to see them",
                    reg.problems().len()
                );
            }
            Ok(Code::Done)
        }
        AgentsCommand::Show { name, dirs } => {
            let reg = load_registry(root, &dirs.agents_dir)?;
            crate::run::print_problems(reg.problems());
            let spec = reg.get(&name).ok_or_else(|| {
                let known: Vec<&str> = reg.all().map(|s| s.name.as_str()).collect();
                ConfigError(format!(
                    "there is no agent type {name:?}; the types are: {}",
                    known.join(", ")
                ))
            })?;
            // Shipped types have no file: they are compiled in.
            let source = spec
                .source
                .as_ref()
                .map_or("(shipped with cadre)".into(), |p| p.display().to_string());
            outln!("# from {source}");
            out!(
                "{}",
                cadre_core::definitions::yaml::to_string(spec).unwrap_or_default()
            );
            Ok(Code::Done)
        }
        AgentsCommand::Check { dirs, strict } => {
            let reg = load_registry(root, &dirs.agents_dir)?;
            let ok = format!("{} agent types OK", reg.all().count());
            Ok(check_report(reg.problems(), strict, &ok))
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

/// The first sentence of a description, for one-line listings.
pub(crate) fn first_sentence(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    }
}
