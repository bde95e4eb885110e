//! `cadre mcp list|check`, and the MCP configuration every command reads.

use crate::args::{McpArgs, McpCommand};
use crate::exit::{Code, ConfigError};
use anyhow::Result;
use cadre_mcp::{McpConfig, McpServers, Timeouts};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The MCP servers for a project at `root`: `~/.config/cadre/mcp.json` (unless
/// `include_user` is false), the project's `.mcp.json`, then each `--mcp-config` file.
pub fn load_servers(root: &Path, args: &McpArgs, include_user: bool) -> Result<McpServers> {
    if let Some(missing) = args.mcp_config.iter().find(|f| !f.is_file()) {
        return Err(ConfigError(format!(
            "cannot use --mcp-config {}: no such file",
            missing.display()
        ))
        .into());
    }
    let home = crate::run::user_home(include_user);
    let mut files = McpConfig::standard_files(root, home.as_deref());
    files.extend(args.mcp_config.iter().cloned());
    let config = McpConfig::load(&files, &args.mcp_config);
    let timeouts = Timeouts {
        call: Duration::from_secs(args.mcp_timeout.max(1)),
        ..Timeouts::default()
    };
    Ok(McpServers::new(config, root.to_path_buf(), timeouts))
}

/// Runs one `cadre mcp` command.
pub async fn mcp(cmd: McpCommand, root: &Path) -> Result<Code> {
    let (args, check) = match cmd {
        McpCommand::List(a) => (a, false),
        McpCommand::Check(a) => (a, true),
    };
    let mut args = args;
    if args.mcp_config.is_empty() {
        let user_dir = crate::run::user_home(true).map(|h| h.join(".config/cadre"));
        args.mcp_config
            .extend(crate::settings::mcp_config(root, user_dir.as_deref())?);
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
                        let first = first_sentence(&tool.description);
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

/// The first sentence (or line) of `text`, at most 100 characters.
fn first_sentence(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let end = line.find(". ").map_or(line.len(), |i| i + 1);
    let sentence = &line[..end];
    match sentence.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &sentence[..i]),
        None => sentence.to_owned(),
    }
}
