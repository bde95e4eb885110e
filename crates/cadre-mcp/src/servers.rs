//! The MCP servers of one run: each configured server is started the first time an agent
//! that may use it is built, once, and shared by every such agent until the run ends.

use crate::config::{McpConfig, ServerConfig};
use crate::server::{McpError, Server, Timeouts};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

type Slot = Arc<OnceCell<Result<Arc<Server>, McpError>>>;

/// The run's MCP servers.
pub struct McpServers {
    config: McpConfig,
    cwd: PathBuf,
    timeouts: Timeouts,
    slots: Mutex<HashMap<String, Slot>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers")
            .field("servers", &self.config.servers.keys())
            .finish()
    }
}

impl Default for McpServers {
    fn default() -> Self {
        Self::new(
            McpConfig::default(),
            PathBuf::from("."),
            Timeouts::default(),
        )
    }
}

impl McpServers {
    /// The servers of `config`; stdio servers run in `cwd` (the workspace) unless their
    /// configuration names another folder. Nothing starts yet.
    pub fn new(config: McpConfig, cwd: PathBuf, timeouts: Timeouts) -> Self {
        Self {
            config,
            cwd,
            timeouts,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration they come from.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// The configured servers' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.config.servers.keys().map(String::as_str).collect()
    }

    /// The server `name`, started on first use; a failed start is remembered, so agents
    /// built later do not wait for it again.
    pub async fn get(&self, name: &str) -> Result<Arc<Server>, McpError> {
        let Some(config) = self.config.servers.get(name) else {
            return Err(McpError::Unknown {
                name: name.to_owned(),
                known: self.names().join(", "),
            });
        };
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.entry(name.to_owned()).or_default().clone()
        };
        let file = self.config.sources.get(name).cloned();
        slot.get_or_init(|| self.start_from(name, config, file.as_deref()))
            .await
            .clone()
    }

    /// Starts a server that belongs to one agent alone (an agent type's inline server,
    /// written in `file`); the caller stops it with [`Server::shutdown`] when the agent
    /// ends. Its variables are expanded as the configuration's
    /// [`Expansion`](crate::config::Expansion) lets a server of `file` read them.
    pub async fn start_from(
        &self,
        name: &str,
        config: &ServerConfig,
        file: Option<&std::path::Path>,
    ) -> Result<Arc<Server>, McpError> {
        let expansion = &self.config.expansion;
        let expanded = config.expanded(&|k| expansion.lookup(file, k));
        tracing::debug!(target: "cadre::mcp", "starting MCP server {name}: {}", expanded.summary());
        Server::start(name, &expanded, &self.cwd, self.timeouts)
            .await
            .map(Arc::new)
    }

    /// Stops every server that was started.
    pub async fn shutdown(&self) {
        let slots: Vec<Slot> = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        for slot in slots {
            if let Some(Ok(server)) = slot.get() {
                server.shutdown().await;
            }
        }
    }
}
