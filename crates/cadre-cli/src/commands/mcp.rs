//! `cadre mcp list|check`: the configured MCP servers, started, and their tools.

use crate::args::McpCommand;
use crate::common::definitions::load_servers;
use crate::common::display::{first_sentence, truncate};
use crate::common::exit::{Code, Result};
use crate::common::project::user_dir;
use std::path::{Path, PathBuf};

/// Runs one `cadre mcp` command.
pub async fn mcp(cmd: McpCommand, root: &Path) -> Result<Code> {
    let (args, check) = match cmd {
        McpCommand::List(a) => (a, false),
        McpCommand::Check(a) => (a, true),
    };
    let mut args = args;
    if args.mcp_config.is_empty() {
        args.mcp_config.extend(crate::common::settings::mcp_config(
            root,
            user_dir(true).as_deref(),
        )?);
    }
    let servers = load_servers(root, &args, true)?;
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
        let source = config
            .sources
            .get(*name)
            .map(|p| display_path(p, root))
            .unwrap_or_default();
        let summary = config
            .servers
            .get(*name)
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
            }
            Err(e) => {
                failed += 1;
                let text = e.to_string();
                let text = if check {
                    text
                } else {
                    text.lines().next().unwrap_or_default().to_owned()
                };
                outln!("{name}  ({summary}; from {source})  FAILED: {text}");
            }
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

fn display_path(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .map(PathBuf::from)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
