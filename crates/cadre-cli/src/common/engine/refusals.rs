//! What an engine run cannot honour of what it is asked for: named and refused before the
//! run is submitted, so no run starts with a setting silently dropped.

use crate::args::RunArgs;
use crate::common::exit::{CliError, Result};
use crate::common::settings::Settings;
use cadre_core::{AgentSpec, Registry};
use cadre_mcp::McpConfig;
use std::path::Path;

/// Why an engine run takes no cassette: the model's replies come to the workers.
pub(super) const NO_CASSETTE: &str =
    "the workers send the model requests, not this process, so it has none to record or replay";

/// Takes away the hooks the workers cannot run from `registry`'s agent types (as a run
/// here would for an untrusted project's); returns a refusal for each type that had
/// hooks the run would otherwise keep. Hooks left out knowingly (--no-hooks,
/// disableAllHooks) are no reason to refuse: agent types then go to the workers without
/// theirs.
pub(super) fn hooks_for_workers(
    args: &RunArgs,
    settings: &Settings,
    registry: &mut Registry,
    root: &Path,
) -> Vec<String> {
    // Otherwise every hook is refused.
    let hooks_on = !args.no_hooks && settings.hooks.disabled_by.is_none();
    let hooked: Vec<AgentSpec> = registry
        .all()
        .filter(|s| hooks_on && !s.hooks.is_empty())
        .cloned()
        .collect();
    let configured = settings.hooks.clone().with_types(registry, root);
    crate::common::hooks::hooks_for_run(&configured, registry, root, args.into(), false);
    // Types whose hooks were just taken away (an untrusted project's) travel without them,
    // so the workers' check cannot see them: they are named here.
    hooked
        .iter()
        .filter(|s| {
            registry
                .get(&s.name)
                .is_some_and(|now| now.hooks.is_empty())
        })
        .map(type_hooks_line)
        .collect()
}

/// What this run asks for that the engine cannot honour and the call to the workers does
/// not show, one line each naming the setting and where it was given: what the call carries
/// (agent types' hooks and MCP servers, the permission mode, a team's lead) the workers'
/// own check ([`cadre_engine::unhonoured`]) names. Whatever shapes what agents may do is
/// either carried to the workers and enforced there or refused, so that no run starts with a
/// setting silently dropped.
pub(super) fn unhonoured(args: &RunArgs, settings: &Settings, mcp: &McpConfig) -> Vec<String> {
    // What the table of settings says the engine cannot honour, where it was set.
    let mut out = crate::common::settings::engine_refusals(settings.set());
    if args.record.is_some() || args.replay.is_some() {
        out.push(format!("--record/--replay: {NO_CASSETTE}"));
    }
    for (name, from) in mcp.servers.keys().map(|name| (name, mcp.sources.get(name))) {
        let from = from.map_or_else(String::new, |f| format!(" (from {})", f.display()));
        out.push(format!(
            "MCP server {name}{from}: the workers run no MCP servers"
        ));
    }
    // Teams run in one process: their messages and task list are not on the engine.
    if args.team {
        out.push("--team: teams run only in one process; the workers have no team messages or shared task list".to_owned());
    }
    // Hooks run where the agent acts, and the workers run none: refused, never skipped.
    if !args.no_hooks && settings.hooks.disabled_by.is_none() {
        let hooks = settings
            .hooks
            .user
            .all()
            .iter()
            .chain(settings.hooks.project.all());
        let mut files: Vec<(&str, Vec<&str>)> = Vec::new();
        for h in hooks {
            match files.iter_mut().find(|(f, _)| *f == h.source) {
                Some((_, events)) => events.push(h.event.name()),
                None => files.push((&h.source, vec![h.event.name()])),
            }
        }
        for (file, events) in files {
            out.push(format!(
                "hooks in {file} ({}): the workers run no hooks (--no-hooks leaves every hook out of a run)",
                events.join(", ")
            ));
        }
    }
    if args.allow_unsandboxed_bash {
        out.push(
            "--allow-unsandboxed-bash: each worker decides it (`cadre worker --allow-unsandboxed-bash`)"
                .to_owned(),
        );
    }
    out
}

/// The refusal of agent type `spec`'s hooks.
pub(super) fn type_hooks_line(spec: &AgentSpec) -> String {
    let from = spec
        .source
        .as_ref()
        .map_or_else(String::new, |f| format!(" ({})", f.display()));
    format!(
        "agent type {}{from} has hooks: the workers run no hooks (--no-hooks leaves every hook out of a run)",
        spec.name
    )
}

/// Refuses the run (exit 2) when the engine cannot honour some of what it asks for.
pub(super) fn refuse(unhonoured: &[String]) -> Result<()> {
    if unhonoured.is_empty() {
        return Ok(());
    }
    Err(CliError::config(format!(
        "the engine cannot honour {} of this run's settings, so it was not started (run it with --engine local, or leave them out):\n  {}",
        if unhonoured.len() == 1 { "one" } else { "some" },
        unhonoured.join("\n  ")
    )))
}
