//! `cadre agents list|show|check`.

use crate::args::{AgentsCommand, AgentsDirArg};
use crate::common::definitions::{check_report, load_registry, print_problems};
use crate::common::display::{fit_lines, one_line, stdout_width, truncate};
use crate::common::exit::{CliError, Code, Result};
use std::fmt::Write as _;
use std::path::Path;

/// How wide the tools column of `cadre agents list` is at least when lines must be cut.
const TOOLS_WIDTH: usize = 44;

/// Runs one `cadre agents` command.
pub fn agents(cmd: AgentsCommand, root: &Path) -> Result<Code> {
    match cmd {
        AgentsCommand::List(AgentsDirArg { agents_dir }) => {
            let reg = load_registry(root, &agents_dir)?;
            print_problems(reg.problems());
            // Every column as wide as its longest entry, but a tool list is cut: the
            // description column stays in place and lines are cut to the terminal's width.
            let name_width = reg
                .all()
                .map(|s| s.name.chars().count())
                .max()
                .unwrap_or(0)
                .max(4);
            // A tool list is cut only where the description would otherwise get fewer
            // than 40 columns of the width, and never below TOOLS_WIDTH.
            let width = stdout_width();
            let longest = reg
                .all()
                .map(|s| s.tools.join(",").chars().count())
                .max()
                .unwrap_or(0);
            let tools_width = match width {
                None => longest,
                Some(w) => longest.min(TOOLS_WIDTH.max(w.saturating_sub(name_width + 21 + 40))),
            }
            .max("tools".len());
            let mut text = format!(
                "{:<name_width$} {:<9} {:<9} {:<tools_width$} description\n",
                "name", "mode", "access", "tools"
            );
            for s in reg.all() {
                let mode = format!("{:?}", s.mode).to_lowercase();
                let access = if s.read_only { "read-only" } else { "writes" };
                let desc = one_line(&s.description);
                let tools = truncate(&s.tools.join(","), tools_width);
                let _ = writeln!(
                    text,
                    "{:<name_width$} {mode:<9} {access:<9} {tools:<tools_width$} {desc}",
                    s.name
                );
            }
            out!("{}", fit_lines(&text, width));
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
            print_problems(reg.problems());
            let spec = reg.get(&name).ok_or_else(|| {
                let known: Vec<&str> = reg.all().map(|s| s.name.as_str()).collect();
                CliError::config(format!(
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
                cadre_core::internal::yaml::to_string(spec).unwrap_or_default()
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
