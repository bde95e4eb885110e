//! MCP server configuration in Claude Code's `.mcp.json` format:
//! `{"mcpServers": {"name": {"command", "args", "env"} | {"type": "http", "url", "headers"}}}`.
//!
//! Values may use `${VAR}` and `${VAR:-default}`, expanded from cadre's environment when a
//! server starts, so a secret can be passed to one server by name without being written down.
//! Which variables may be read is the user's to say ([`Expansion`]): the servers of the
//! user's own files read any; every other server (a project's `.mcp.json`, an agent file's
//! inline server) only those the user allows, and never the model API's credentials.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerConfig {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment given to it on top of a minimal base (PATH, HOME, LANG).
        env: BTreeMap<String, String>,
        /// Its working folder; the workspace when absent.
        cwd: Option<PathBuf>,
        /// Per-call timeout, overriding the run's.
        timeout: Option<Duration>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// Its URL.
        url: String,
        /// Headers sent with every request (an `Authorization` header, say).
        headers: BTreeMap<String, String>,
        /// Per-call timeout, overriding the run's.
        timeout: Option<Duration>,
    },
}

impl ServerConfig {
    /// The per-call timeout the configuration sets, if any.
    pub fn timeout(&self) -> Option<Duration> {
        match self {
            Self::Stdio { timeout, .. } | Self::Http { timeout, .. } => *timeout,
        }
    }

    /// One line saying what it runs or where it is, for listings.
    pub fn summary(&self) -> String {
        match self {
            Self::Stdio { command, args, .. } => {
                let mut s = command.clone();
                for a in args {
                    s.push(' ');
                    s.push_str(a);
                }
                s
            }
            Self::Http { url, .. } => url.clone(),
        }
    }

    /// [`summary`](Self::summary) with what else shapes what it runs or sends: its
    /// environment (`NODE_OPTIONS=--require ./x.js` makes an innocent `npx` run anything),
    /// its working folder, and the names of the headers it sends.
    pub fn described(&self) -> String {
        let mut extra = Vec::new();
        match self {
            Self::Stdio { env, cwd, .. } => {
                if !env.is_empty() {
                    let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    extra.push(format!("env {}", vars.join(" ")));
                }
                if let Some(cwd) = cwd {
                    extra.push(format!("cwd {}", cwd.display()));
                }
            }
            Self::Http { headers, .. } => {
                if !headers.is_empty() {
                    let names: Vec<&str> = headers.keys().map(String::as_str).collect();
                    extra.push(format!("headers {}", names.join(" ")));
                }
            }
        }
        if extra.is_empty() {
            self.summary()
        } else {
            format!("{} ({})", self.summary(), extra.join("; "))
        }
    }

    /// Reads one server entry of an `mcpServers` map. Unknown keys are ignored (Claude Code
    /// writes a few of its own); a missing `command`/`url` or an unknown `type` is an error.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let raw: RawServer = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        let timeout = raw.timeout.map(Duration::from_secs_f64);
        let kind = raw
            .kind
            .as_deref()
            .unwrap_or(if raw.url.is_some() { "http" } else { "stdio" });
        match kind {
            "stdio" => {
                let command = raw
                    .command
                    .filter(|c| !c.trim().is_empty())
                    .ok_or("a stdio server needs `command` (the program to run)")?;
                Ok(Self::Stdio {
                    command,
                    args: raw.args,
                    env: raw.env,
                    cwd: raw.cwd,
                    timeout,
                })
            }
            "http" | "streamable-http" | "streamableHttp" => {
                let url = raw
                    .url
                    .filter(|u| !u.trim().is_empty())
                    .ok_or("an http server needs `url`")?;
                Ok(Self::Http {
                    url,
                    headers: raw.headers,
                    timeout,
                })
            }
            "sse" => Err(
                "the legacy `sse` transport is not supported; most servers also serve streamable HTTP: use `\"type\": \"http\"` with its URL"
                    .into(),
            ),
            other => Err(format!(
                "unknown server type {other:?}; expected \"stdio\" or \"http\""
            )),
        }
    }

    /// This configuration with `${VAR}` and `${VAR:-default}` expanded by `lookup`.
    pub fn expanded(&self, lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let x = |s: &String| expand(s, lookup);
        let map = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.clone(), x(v))).collect();
        match self {
            Self::Stdio {
                command,
                args,
                env,
                cwd,
                timeout,
            } => Self::Stdio {
                command: x(command),
                args: args.iter().map(x).collect(),
                env: map(env),
                cwd: cwd.clone(),
                timeout: *timeout,
            },
            Self::Http {
                url,
                headers,
                timeout,
            } => Self::Http {
                url: x(url),
                headers: map(headers),
                timeout: *timeout,
            },
        }
    }
}

impl ServerConfig {
    /// The names of the variables its values read (`${NAME}`, `${NAME:-default}`), once
    /// each, in order.
    pub fn variables(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut note = |text: &str| {
            let mut rest = text;
            while let Some(start) = rest.find("${") {
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else { break };
                let inner = &after[..end];
                let name = inner.split_once(":-").map_or(inner, |(n, _)| n).to_owned();
                if !names.contains(&name) {
                    names.push(name);
                }
                rest = &after[end + 1..];
            }
        };
        match self {
            Self::Stdio {
                command, args, env, ..
            } => {
                note(command);
                args.iter().for_each(|a| note(a));
                env.values().for_each(|v| note(v));
            }
            Self::Http { url, headers, .. } => {
                note(url);
                headers.values().for_each(|v| note(v));
            }
        }
        names
    }
}

/// The model API's credentials: never expanded into a server the user did not write.
pub const MODEL_CREDENTIALS: [&str; 4] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
];

/// Which environment variables `${VAR}` may read, by where a server was defined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansion {
    /// Files whose servers read any variable: the user's own.
    pub open_files: Vec<PathBuf>,
    /// Folders whose files' servers read any variable: the user's own folders of agent
    /// files, whose types' inline servers are the user's.
    pub open_dirs: Vec<PathBuf>,
    /// What every other server may read: the user's allow-list (the model API's
    /// credentials never, even when listed).
    pub allowed: BTreeSet<String>,
}

impl Expansion {
    /// The value of `name` for a server defined in `file` (`None`: not a file's, such as an
    /// agent file's inline server), if it may read it.
    pub fn lookup(&self, file: Option<&Path>, name: &str) -> Option<String> {
        self.allows(file, name)
            .then(|| std::env::var(name).ok())
            .flatten()
    }

    /// Whether a server defined in `file` may read the variable `name`.
    pub fn allows(&self, file: Option<&Path>, name: &str) -> bool {
        let open = file.is_some_and(|f| {
            self.open_files.iter().any(|o| o == f)
                || f.parent()
                    .is_some_and(|d| self.open_dirs.iter().any(|o| o == d))
        });
        open || (self.allowed.contains(name) && !MODEL_CREDENTIALS.contains(&name))
    }
}

#[derive(Deserialize)]
struct RawServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    timeout: Option<f64>,
}

/// Expands `${VAR}` and `${VAR:-default}`; an unset variable without a default becomes empty.
fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let value = lookup(name).filter(|v| !v.is_empty() || default.is_none());
        out.push_str(&value.unwrap_or_else(|| default.unwrap_or_default().to_owned()));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A problem met reading MCP configuration; the other servers still load.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigProblem {
    /// The file.
    pub file: PathBuf,
    /// The server it concerns, when one.
    pub server: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.server {
            Some(s) => write!(f, "{}: server {s:?}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// The MCP servers of a run, by name, and where each was defined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpConfig {
    /// The servers, by name.
    pub servers: BTreeMap<String, ServerConfig>,
    /// The file each server came from.
    pub sources: BTreeMap<String, PathBuf>,
    /// What could not be read.
    pub problems: Vec<ConfigProblem>,
    /// Which variables their `${VAR}` may read; by default none.
    pub expansion: Expansion,
}

impl McpConfig {
    /// The files searched for a project at `root`, farthest first: the user's
    /// `~/.config/cadre/mcp.json`, then the project's `.mcp.json` (Claude Code's file).
    pub fn standard_files(root: &Path, home: Option<&Path>) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let Some(home) = home {
            files.push(home.join(".config/cadre/mcp.json"));
        }
        files.push(root.join(".mcp.json"));
        files
    }

    /// Reads `files` in order; a later file's server replaces an earlier one of the same
    /// name. A missing file is skipped unless it is in `required` (named on the command line).
    pub fn load(files: &[PathBuf], required: &[PathBuf]) -> Self {
        let mut config = Self::default();
        for file in files {
            match std::fs::read_to_string(file) {
                Ok(text) => config.add_text(file, &text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required.contains(file) => {}
                Err(e) => config.problems.push(ConfigProblem {
                    file: file.clone(),
                    server: None,
                    message: format!("cannot read: {e}"),
                }),
            }
        }
        config
    }

    /// Adds the servers of one file's text.
    pub fn add_text(&mut self, file: &Path, text: &str) {
        let problem = |server: Option<&str>, message: String| ConfigProblem {
            file: file.to_path_buf(),
            server: server.map(str::to_owned),
            message,
        };
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                self.problems.push(problem(
                    None,
                    format!(
                        "not valid JSON (line {}, column {}): {e}",
                        e.line(),
                        e.column()
                    ),
                ));
                return;
            }
        };
        // Claude Code's file wraps the map in `mcpServers`; a bare map is accepted too.
        let servers = match value.get("mcpServers") {
            Some(Value::Object(map)) => map.clone(),
            Some(_) => {
                self.problems.push(problem(
                    None,
                    "`mcpServers` must be an object of servers by name".into(),
                ));
                return;
            }
            None => match value {
                Value::Object(map) if map.values().all(Value::is_object) => map,
                _ => {
                    self.problems.push(problem(
                        None,
                        "expected {\"mcpServers\": {\"name\": {\"command\": …} | {\"type\": \"http\", \"url\": …}}}".into(),
                    ));
                    return;
                }
            },
        };
        for (name, entry) in servers {
            match ServerConfig::from_json(&entry) {
                Ok(server) => {
                    self.sources.insert(name.clone(), file.to_path_buf());
                    self.servers.insert(name, server);
                }
                Err(message) => self.problems.push(problem(Some(&name), message)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_claude_codes_format() {
        let mut c = McpConfig::default();
        c.add_text(
            Path::new(".mcp.json"),
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server"], "env": {"A": "1"}},
                "web": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
                "old": {"type": "sse", "url": "http://x"},
                "bad": {"args": []}
            }}"#,
        );
        assert_eq!(c.servers.len(), 2, "{:?}", c.problems);
        assert!(
            matches!(&c.servers["fs"], ServerConfig::Stdio { command, args, .. } if command == "npx" && args.len() == 2)
        );
        assert_eq!(c.problems.len(), 2);
        assert!(c
            .problems
            .iter()
            .any(|p| p.server.as_deref() == Some("old") && p.message.contains("sse")));
        assert!(c
            .problems
            .iter()
            .any(|p| p.server.as_deref() == Some("bad") && p.message.contains("command")));
        let web = c.servers["web"].expanded(&|k| (k == "TOKEN").then(|| "t0k".to_owned()));
        assert!(
            matches!(web, ServerConfig::Http { headers, .. } if headers["Authorization"] == "Bearer t0k")
        );
    }

    #[test]
    fn only_the_users_own_files_read_any_variable() {
        let expansion = Expansion {
            open_files: vec![PathBuf::from("mine.json")],
            open_dirs: vec![PathBuf::from("home/agents")],
            allowed: ["ALLOWED".to_owned(), "ANTHROPIC_API_KEY".to_owned()]
                .into_iter()
                .collect(),
        };
        let mine = Some(Path::new("mine.json"));
        let theirs = Some(Path::new(".mcp.json"));
        assert!(expansion.allows(mine, "ANYTHING"));
        assert!(expansion.allows(mine, "ANTHROPIC_API_KEY"));
        assert!(!expansion.allows(theirs, "ANYTHING"));
        assert!(!expansion.allows(None, "ANYTHING"));
        assert!(expansion.allows(theirs, "ALLOWED"));
        assert!(!expansion.allows(theirs, "ANTHROPIC_API_KEY"));
        assert!(!Expansion::default().allows(theirs, "ALLOWED"));
        assert!(expansion.allows(Some(Path::new("home/agents/a.md")), "ANYTHING"));
        assert!(!expansion.allows(Some(Path::new("project/agents/a.md")), "ANYTHING"));
        let web = ServerConfig::from_json(
            &serde_json::json!({"url": "http://h/${A}", "headers": {"x": "${B:-d} ${A}"}}),
        )
        .unwrap();
        assert_eq!(web.variables(), ["A", "B"]);
    }

    #[test]
    fn expands_variables_with_defaults() {
        let lookup = |k: &str| (k == "SET").then(|| "yes".to_owned());
        assert_eq!(
            expand("a ${SET} ${UNSET:-dflt} ${UNSET}.", &lookup),
            "a yes dflt ."
        );
        assert_eq!(expand("${SET:-no}", &lookup), "yes");
        assert_eq!(expand("open ${brace", &lookup), "open ${brace");
    }

    #[test]
    fn later_files_win_and_broken_files_say_where() {
        let mut c = McpConfig::default();
        c.add_text(
            Path::new("a.json"),
            r#"{"mcpServers": {"s": {"command": "one"}}}"#,
        );
        c.add_text(Path::new("b.json"), r#"{"s": {"command": "two"}}"#);
        assert_eq!(c.servers["s"].summary(), "two");
        assert_eq!(c.sources["s"], Path::new("b.json"));
        c.add_text(Path::new("c.json"), "{\n  oops");
        assert!(c.problems[0]
            .to_string()
            .starts_with("c.json: not valid JSON (line 2"));
    }
}
