//! `cadre mcp list|check`: the configured MCP servers, started, and their tools.
//! (`cadre mcp serve`, the other way round, is a command of its own.)

use crate::args::McpArgs;
use crate::common::definitions::{load_registry_from, load_run_servers};
use crate::common::display::{first_sentence, truncate};
use crate::common::exit::{Code, Result};
use crate::common::hooks::Flags;
use crate::common::project::user_dir;
use crate::common::project_items::{self, ProjectItems};
use crate::common::settings::Sources;
use crate::common::trust::State;
use cadre_mcp::{McpConfig, McpError, McpServers, Server};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Runs `cadre mcp list`, or `cadre mcp check` when `check`.
pub async fn mcp(args: McpArgs, check: bool, root: &Path) -> Result<Code> {
    let servers = servers_of(root, args)?;
    let config = servers.config();
    for p in &config.problems {
        errln!("cadre: {p}");
    }
    if config.servers.is_empty() {
        outln!("no MCP servers configured: cadre reads the project's .mcp.json, ~/.config/cadre/mcp.json and --mcp-config FILE");
        return Ok(if check && !config.problems.is_empty() {
            Code::StoppedEarly
        } else {
            Code::Done
        });
    }
    let names = servers.names();
    // Start them all at once: a slow server should not hold up the others.
    let started = futures::future::join_all(names.iter().map(|n| servers.get(n))).await;
    let mut failed = 0;
    for (name, result) in names.iter().zip(started) {
        if !print_server(name, result, config, root, check) {
            failed += 1;
        }
    }
    servers.shutdown().await;
    if failed > 0 {
        errln!(
            "cadre: {failed} of {} MCP server(s) failed to start",
            names.len()
        );
    }
    let broken = failed > 0 || (check && !config.problems.is_empty());
    Ok(if broken {
        Code::StoppedEarly
    } else {
        Code::Done
    })
}

/// The configured servers, not started: the project's only once it is trusted, as listing
/// them must not run a command a repository just cloned chose.
fn servers_of(root: &Path, mut args: McpArgs) -> Result<McpServers> {
    let sources = Sources::read(root, user_dir(true).as_deref())?;
    let registry = load_registry_from(root, &[], true);
    let flags = Flags::default();
    let items = ProjectItems::gather(root, &sources, &registry, flags);
    let trusted = match project_items::state(&items, root, flags) {
        None | Some(State::Trusted) => true,
        Some(_) => {
            project_items::left_out(&items, "this project is not trusted");
            false
        }
    };
    let project_config = sources.project_mcp_config();
    if args.mcp_config.is_empty() {
        args.mcp_config.extend(sources.mcp_config(trusted));
    }
    load_run_servers(
        root,
        &args,
        true,
        trusted,
        project_config.as_deref(),
        &sources.allow_env(),
        &[],
    )
}

/// Prints the line of server `name` (and, for `list`, its tools) as it `result`ed from
/// starting; true when it started.
fn print_server(
    name: &str,
    result: std::result::Result<Arc<Server>, McpError>,
    config: &McpConfig,
    root: &Path,
    check: bool,
) -> bool {
    let source = config
        .sources
        .get(name)
        .map(|p| display_path(p, root))
        .unwrap_or_default();
    let summary = config
        .servers
        .get(name)
        .map(|c| c.summary())
        .unwrap_or_default();
    match result {
        Ok(server) => {
            outln!(
                "{name}  ({summary}; from {source})  {} tools",
                server.tools().len()
            );
            if !check {
                for tool in server.tools() {
                    let first = truncate(first_sentence(&tool.description), 101);
                    outln!("  {:<40} {first}", cadre_mcp::tool_name(name, &tool.name));
                }
            }
            true
        }
        Err(e) => {
            let text = e.to_string();
            let text = if check {
                text
            } else {
                text.lines().next().unwrap_or_default().to_owned()
            };
            outln!("{name}  ({summary}; from {source})  FAILED: {text}");
            false
        }
    }
}

fn display_path(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .map(PathBuf::from)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
