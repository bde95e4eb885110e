//! `cadre config show|check`.

use crate::args::{ConfigCommand, RunArgs};
use crate::common::claude_settings::ClaudeFile;
use crate::common::definitions::load_registry_from;
use crate::common::exit::{Code, Result};
use crate::common::hooks;
use crate::common::project::{user_dir, workspace_root};
use crate::common::project_items::{self, hook_status, print_items, ProjectItems};
use crate::common::settings::{self, CadreFiles};
use crate::common::trust::State;
use std::path::{Path, PathBuf};

/// Runs one `cadre config` command.
pub fn config(cmd: ConfigCommand, directory: Option<PathBuf>) -> Result<Code> {
    let root = workspace_root(directory)?;
    let user_dir = user_dir(true);
    match cmd {
        ConfigCommand::Show(cmd) => show(cmd.args, &root, user_dir),
        ConfigCommand::Check => check(&root, user_dir.as_deref()),
    }
}

/// `cadre config show`: every setting as a run with `args` would see it, where each came
/// from, the hooks and the project's items.
fn show(mut args: RunArgs, root: &Path, user_dir: Option<PathBuf>) -> Result<Code> {
    // As a run would: a recording or a replay leaves out the user's own file.
    let portable = args.record.is_some() || args.replay.is_some();
    let user_dir = user_dir.filter(|_| !portable);
    let sources = settings::Sources::read(root, user_dir.as_deref())?;
    // As a run would see them: the agent types' own hooks and the project's items.
    let include_user = user_dir.is_some();
    let registry = load_registry_from(root, &args.dirs.agents_dir, include_user);
    let flags = (&args).into();
    let items = ProjectItems::gather(root, &sources, &registry, flags);
    let state = project_items::state(&items, root, flags);
    let trusted = matches!(state, None | Some(State::Trusted));
    let configured = sources.hooks().with_types(&registry, root);
    let loosens = project_items::loosened_mode(&sources, flags, &registry, root).is_some();
    let merged = settings::resolve_from(&mut args, sources, trusted, !trusted && loosens);
    merged
        .warnings()
        .for_each(|w| errln!("cadre: warning: {w}"));
    print_files(&merged.files);
    print_claude_files(merged.claude.iter());
    outln!();
    let width = merged
        .entries
        .iter()
        .map(|(k, v, _)| (k.len(), v.chars().count()))
        .fold((0, 0), |(a, b), (k, v)| (a.max(k), b.max(v)));
    for (key, value, source) in &merged.entries {
        outln!(
            "{key:<kw$}  {value:<vw$}  {source}",
            kw = width.0,
            vw = width.1.min(40)
        );
    }
    for line in &merged.left_out {
        outln!("left out: {line}");
    }
    outln!();
    let listed = hooks::listing(&configured, flags, &hook_status(state, flags));
    if listed.is_empty() {
        outln!("hooks  (none)");
    } else {
        outln!("hooks (event, matcher, whether it runs, file, command):");
        for line in listed {
            outln!("  {line}");
        }
    }
    outln!();
    print_items(&items, state, flags);
    Ok(Code::Done)
}

/// `cadre config check`: reads every settings file strictly (an unknown key is a problem).
fn check(root: &Path, user_dir: Option<&Path>) -> Result<Code> {
    // Strict: an unknown key is a problem here, not just a warning.
    let read = settings::files(root, user_dir)
        .and_then(|files| Ok((files, settings::claude_files(root, user_dir)?)));
    match read {
        Err(e) => {
            errln!("{}", e.report());
            Ok(Code::StoppedEarly)
        }
        Ok((files, claude)) => {
            print_files(&files);
            print_claude_files(claude.iter().map(|(f, _)| f));
            let unknown: Vec<&String> = files
                .iter()
                .flat_map(|f| &f.unknown)
                .chain(claude.iter().flat_map(|(f, _)| &f.warnings))
                .collect();
            for u in &unknown {
                errln!("{u}");
            }
            if unknown.is_empty() {
                outln!("\nthe settings are valid");
                Ok(Code::Done)
            } else {
                errln!("\n{} problem(s)", unknown.len());
                Ok(Code::StoppedEarly)
            }
        }
    }
}

/// One line per Claude Code settings file: read (for its hooks and permissions) or not.
fn print_claude_files<'a>(files: impl Iterator<Item = &'a ClaudeFile>) {
    for f in files {
        outln!(
            "{}  {}",
            f.label,
            if f.found {
                "(read: hooks, permissions)"
            } else {
                "(not found)"
            }
        );
    }
}

/// One line per settings file: found or not.
fn print_files(files: &CadreFiles) {
    for f in files.iter() {
        outln!(
            "{}  {}",
            f.label,
            if f.found { "(read)" } else { "(not found)" }
        );
    }
}
