//! The `cadre` command and the `cadre-worker` program, as a library both binaries call.
//!
//! `args` holds the command line, `commands` one module per command, and `common` what
//! the commands share; modules depend downward only (commands → common → args), and no
//! command borrows from another. All of it is private to the crate: the binaries need
//! [`cadre`] and [`cadre_worker`] alone.

#[macro_use]
pub(crate) mod common;

pub(crate) mod args;
pub(crate) mod commands;

use args::worker::{WorkerCmd, OPTIONS_ENV};
use args::Cli;
use common::exit::{Code, Result};
use std::future::Future;
use std::process::ExitCode;

/// Runs `cadre` on the process's command line; its exit code.
pub fn cadre() -> ExitCode {
    let cli: Cli = args::from_env();
    // `cadre worker` becomes `cadre-worker`, which exports on its own: nothing is set up
    // here for the moment before the exec.
    let export = !matches!(cli.command, Some(args::Command::Worker(_)));
    if export {
        // The `[telemetry]` table, before the exporters start with the logging.
        common::telemetry::configure_from_settings(cli.directory.clone(), cli.run_args());
    }
    common::logging::init_logging(cli.verbose, cli.quiet, true, export);
    // Before the runtime starts its threads, so setting the variable races no reader.
    if let Err(err) = commands::mcp_serve::mark_served(&cli) {
        errln!("cadre: {}", err.report());
        return err.code().into();
    }
    let code = block_on(common::telemetry::in_callers_trace(commands::dispatch(cli)));
    common::telemetry::shutdown();
    code
}

/// Runs `cadre-worker` with the options `cadre` passed it (or its own command line); its
/// exit code.
pub fn cadre_worker() -> ExitCode {
    let options: std::result::Result<WorkerCmd, serde_json::Error> = args::worker::worker_options();
    let cmd = match options {
        Ok(cmd) => cmd,
        Err(e) => {
            errln!("cadre-worker: {OPTIONS_ENV} is not what cadre passes: {e}");
            return Code::Config.into();
        }
    };
    // The user's own `[telemetry]` table: a worker serves no project of its own.
    common::telemetry::configure_from_user_settings();
    common::logging::init_logging(cmd.verbose, false, false, true);
    let code = block_on(commands::worker::serve(cmd));
    // The spans of the worker's calls still queued go out too.
    common::telemetry::shutdown();
    code
}

/// Runs `work` on a multi-threaded runtime; an error is told on stderr and its kind is the
/// exit code.
fn block_on(work: impl Future<Output = Result<Code>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("cadre: could not start the async runtime: {e}");
            return Code::Failed.into();
        }
    };
    match runtime.block_on(work) {
        Ok(code) => code.into(),
        Err(err) => {
            errln!("cadre: {}", err.report());
            err.code().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Every module of the library (`commands::runs::view`) and its source before its tests.
    fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let join = |name: &str| match (prefix, name) {
                ("", name) => name.to_owned(),
                (prefix, "mod") => prefix.to_owned(),
                (prefix, name) => format!("{prefix}::{name}"),
            };
            if path.is_dir() {
                modules(&path, &join(&stem), out);
            } else if !["main", "worker_main", "lib"].contains(&stem.as_str()) {
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap().to_owned();
                out.insert(join(&stem), code);
            }
        }
    }

    /// The modules each module uses: through `crate::…` and `super::…` paths, and the
    /// submodules it declares.
    fn edges(modules: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (name, code) in modules {
            let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
            let mut paths: Vec<String> = Vec::new();
            for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_owned())] {
                for (at, _) in code.match_indices(prefix) {
                    let rest = &code[at + prefix.len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == ':'))
                        .unwrap_or(rest.len());
                    let path = rest[..end].trim_end_matches(':');
                    paths.push(if base.is_empty() {
                        path.to_owned()
                    } else {
                        format!("{base}::{path}")
                    });
                }
            }
            for line in code.lines() {
                let line = line.trim().trim_start_matches("pub ");
                if let Some(child) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
                    paths.push(format!("{name}::{child}"));
                }
            }
            for mut path in paths {
                // The module a path leads into: its longest prefix that is a module.
                while !modules.contains_key(path.as_str()) {
                    match path.rsplit_once("::") {
                        Some((up, _)) => path = up.to_owned(),
                        None => break,
                    }
                }
                if let Some((used, _)) = modules.get_key_value(path.as_str()) {
                    if used != name {
                        edges.entry(name).or_default().insert(used);
                    }
                }
            }
        }
        edges
    }

    #[test]
    fn modules_depend_one_way_and_commands_not_on_each_other() {
        let mut found = BTreeMap::new();
        modules(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            "",
            &mut found,
        );
        let edges = edges(&found);
        assert!(edges["common::session"].contains("common::exit"));
        // A command is `commands::X` and what lies under it.
        fn command(module: &str) -> Option<&str> {
            module.strip_prefix("commands::")?.split("::").next()
        }
        for (from, to) in edges
            .iter()
            .flat_map(|(f, ts)| ts.iter().map(move |t| (*f, *t)))
        {
            if let (Some(a), Some(b)) = (command(from), command(to)) {
                assert_eq!(
                    a, b,
                    "the command module {from} uses another command's {to}"
                );
            }
            assert!(
                !(from.starts_with("common") && to.starts_with("commands")),
                "{from} (shared) uses the command module {to}"
            );
        }
        // No circle: a depth-first walk never comes back to a module on its own path.
        fn walk<'a>(
            at: &'a str,
            edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) {
            if let Some(i) = path.iter().position(|m| *m == at) {
                panic!(
                    "a circle of modules: {}",
                    path[i..].join(" → ") + " → " + at
                );
            }
            if !done.insert(at) {
                return;
            }
            path.push(at);
            for next in edges.get(at).into_iter().flatten() {
                walk(next, edges, path, done);
            }
            path.pop();
        }
        let mut done = BTreeSet::new();
        for module in found.keys() {
            walk(module, &edges, &mut Vec::new(), &mut done);
        }
    }
}
