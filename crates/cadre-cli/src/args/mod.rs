//! Command-line arguments.

mod definitions;
mod given;
mod runs;
pub mod worker;
pub mod workflow;

pub use definitions::{AgentsCommand, AgentsDirArg, SkillsCommand, SkillsDirArg};
pub use given::{Given, Source};
pub use runs::RunsCommand;
pub use worker::{whole, Provider, WorkerCmd};
pub use workflow::WorkflowCheckCmd;
use workflow::{parse_arg, RETRY_HELP, RUN_HELP};

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// What `cadre --help` says of how cadre ends.
const EXIT_CODES: &str = "Exit codes:
  0    the agent finished
  1    it stopped early (turn limit, token budget, time limit, refusal, max tokens,
       context full, a hook stopped it)
  2    bad usage or configuration (no key, bad folder or flag, unknown agent type)
  3    the model API failed
  4    cadre itself failed (a file it could not read or write, a run folder that
       filled up, a damaged run folder, the engine lost while following a run)
  129  the terminal closed (SIGHUP): every agent was stopped, as for Ctrl-C
  130  cancelled with Ctrl-C or SIGTERM";

/// cadre — a multi-agent orchestrator for coding work.
#[derive(Debug, Parser)]
#[command(name = "cadre", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    /// The workspace folder: the agents work there and their tools cannot leave it
    /// (default: the project root, the nearest folder from the current one up with .cadre/,
    /// .claude/, agents/ or .git; else the current folder). Paths given to other options
    /// (--replay, --record, --agents-dir, --skills-dir) stay relative to where you run cadre.
    #[arg(short = 'C', long = "directory", value_name = "DIR", global = true)]
    pub directory: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Print only the answer: no live display, no usage table.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Go on with the newest run of this project, as in Claude Code: `cadre -c` opens the
    /// conversation again on a terminal (`cadre chat --continue`), and without one takes
    /// the follow-up from stdin (`cadre run --continue`); before `run` or `chat`, their own
    /// --continue.
    #[arg(short = 'c', long = "continue")]
    pub continue_last: bool,
    /// What to do [default on a terminal: `chat`, an interactive session].
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// The run options of a command that runs agents (and so decides the project's trust).
    pub fn run_args(&self) -> Option<&RunArgs> {
        match &self.command {
            Some(Command::Run(cmd)) => Some(&cmd.args),
            Some(Command::Chat(cmd)) => Some(&cmd.args),
            Some(Command::Resume(cmd)) => Some(&cmd.args),
            Some(Command::Mcp(McpCommand::Serve(cmd))) => Some(&cmd.args),
            _ => None,
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the primary agent on a task in the current folder.
    Run(Box<RunCmd>),
    /// Talk to the primary agent: each message is one more turn of the same conversation
    /// (a run like any other: resumable and continuable). Ctrl-C cancels the current turn
    /// and every subagent it started; Ctrl-D or /exit leaves; /help lists the commands.
    /// This is what `cadre` with no command does on a terminal.
    Chat(Box<ChatCmd>),
    /// Carry on a run that was killed, crashed, filled its disk or stopped as the model API
    /// failed, from its journal: every agent that was running goes on; no journaled model
    /// request is sent again and no journaled tool call runs again (a call that may have
    /// changed something, cut off mid-call, is reported to the model as interrupted).
    Resume(Box<ResumeCmd>),
    /// Show what this machine enforces (the kernel's Landlock ABI and the sandbox rules),
    /// the project root, its instruction files, its settings files, and every hook with
    /// where it came from and whether it runs here (trusted or not).
    Doctor,
    /// Show or check the settings: cadre.toml at the project root and
    /// ~/.config/cadre/config.toml (flags > environment > project file > user file > defaults),
    /// and the permissions and hooks of Claude Code's .claude/settings.json,
    /// .claude/settings.local.json and ~/.claude/settings.json.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Trust a project, so its runs use what it supplies that runs a command or reaches a
    /// host: its hooks (.claude/settings.json, .claude/settings.local.json, cadre.toml, agent
    /// files), its MCP servers (.mcp.json, mcp_config, agent files' inline servers) and its
    /// base_url. Until then, a run asks on a terminal and leaves them all out without one,
    /// naming each (your own hooks, in ~/.claude/settings.json and
    /// ~/.config/cadre/config.toml, always run). The trust covers them as they are now: if
    /// they change, cadre asks again, and a run without a terminal whose project has hooks
    /// is refused. Remembered in ~/.config/cadre/trusted.json.
    Trust(TrustCmd),
    /// List, show or check agent types.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// List, show or check skills.
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// Check or list workflows: one agent call per item of an input (JSONL, CSV, a JSON
    /// array, a glob of files), then an optional reduce (docs/workflows.md).
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Start the configured MCP servers and list or check their tools.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Browse past runs of this folder (.cadre/runs/): list them, show one agent tree, or
    /// write a timeline page.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Serve this machine's agents to a Restate server, as one worker of a fleet: each
    /// agent of an engine run (`cadre run --engine restate`) is one durable invocation, and
    /// its subagents run on whichever worker Restate and the load balancer pick. The model
    /// API key is read from this process's environment and never leaves it.
    Worker(Box<WorkerCmd>),
    /// Print a shell completion script: `cadre completions bash > ~/.local/share/bash-completion/completions/cadre`
    /// (zsh: a file `_cadre` in a folder of your `$fpath`; fish: `~/.config/fish/completions/cadre.fish`).
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `cadre config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print every setting as a run would use it, and where it came from (flag, env VAR,
    /// file:line, default), then every hook: its event, matcher, whether it will run
    /// (trusted or not), its file and its command. Takes the options of `cadre run`, to
    /// show what they change.
    Show(Box<ConfigShowCmd>),
    /// Check the settings files: every unknown key and bad value, with file:line; exit 1
    /// on any.
    Check,
}

/// `cadre trust`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  cadre trust                 (the project here: lists its hooks and trusts them)\n  cadre trust ~/src/app\n  cadre trust --revoke        (forget the answer: the next run asks again)\n  cadre trust --list          (every project answered for)\n  cadre run --trust-project … (use the project's items once, remembering nothing)"
)]
pub struct TrustCmd {
    /// The project [default: the project root, as for a run here, or -C DIR].
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Forget the answer for the project (trusted or declined): its hooks do not run until
    /// trusted again.
    #[arg(long, conflicts_with = "list")]
    pub revoke: bool,
    /// List every project answered for, trusted or declined, and whether its hooks changed
    /// since.
    #[arg(long)]
    pub list: bool,
}

/// `cadre config show`.
#[derive(Debug, Args)]
pub struct ConfigShowCmd {
    /// The options of `cadre run`.
    #[command(flatten)]
    pub args: RunArgs,
}

/// `cadre mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start every configured MCP server and list its tools as agents see them
    /// (mcp__<server>__<tool>); exit 1 if a server fails to start.
    List(McpArgs),
    /// Start every configured MCP server and report each one that fails, with its stderr;
    /// exit 1 on any failure or configuration problem.
    Check(McpArgs),
    /// Be an MCP server: each agent type a subagent may be (`explore`, `plan`, `code`, your
    /// own) is a tool, and each call is a cadre run in this project, journaled in
    /// .cadre/runs/ like any other. Serves stdio unless --http is given.
    Serve(Box<McpServeCmd>),
}

/// What `cadre mcp serve --help` shows after the options.
const MCP_SERVE_HELP: &str = "Set-ups (the server runs in the project it is started in; give -C DIR otherwise):
  Claude Code:  claude mcp add cadre -- cadre -C /path/to/project mcp serve
  Codex:        in ~/.codex/config.toml
                  [mcp_servers.cadre]
                  command = \"cadre\"
                  args = [\"-C\", \"/path/to/project\", \"mcp\", \"serve\"]
  .mcp.json:    {\"mcpServers\": {\"cadre\": {\"command\": \"cadre\", \"args\": [\"mcp\", \"serve\"]}}}
  HTTP:         cadre mcp serve --http 127.0.0.1:8765   (the endpoint is http://127.0.0.1:8765/mcp;
                clients send `Authorization: Bearer TOKEN`: CADRE_MCP_TOKEN, else a random token
                said on stderr)

Each tool takes `prompt` (required) and, optionally, `model`, `effort`, `max_turns` and
`budget_tokens` (which may only tighten the type's and the server's limits) and, for a type
without an answer schema of its own, `output_schema`. A type with an `output_schema` answers
with `structuredContent`. A call that did not complete is an error result naming its outcome
(turn_limit, budget, time_limit, cancelled, …) and its run id; `cadre runs show RUN_ID` shows it.

There is no terminal to ask: in permission mode `ask`, a call that would be asked about is
denied, and the agent is told why. The project's trust is decided as for `cadre run`, once
at start: asked on a terminal when the server has one, else not (`cadre trust` first, or
--trust-project). --max-parallel bounds the model requests
in flight across every call at once. The API key comes from this process's environment.";

/// `cadre mcp serve`.
#[derive(Debug, Args)]
#[command(after_help = MCP_SERVE_HELP)]
pub struct McpServeCmd {
    /// Serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765, path /mcp) instead of stdio. An
    /// address that is not loopback needs --token.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// The bearer token HTTP clients must send (`Authorization: Bearer TOKEN`); better given
    /// as CADRE_MCP_TOKEN, which other users cannot read in the process list. Without it, a
    /// random one is made and said on stderr.
    #[arg(
        long,
        env = "CADRE_MCP_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// With --http on loopback: no bearer token, so every user of this machine may call the
    /// agents (refused off loopback).
    #[arg(long)]
    pub no_token: bool,
    /// Put PREFIX before every tool's name (`--prefix cadre_` serves `cadre_explore`), for a
    /// client that already has tools of these names.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub prefix: String,
    /// The model, limits, permissions and the rest, as for `cadre run`; the options of one
    /// run (--agent, --team, --record, --replay, --output-format) are refused.
    #[command(flatten)]
    pub args: RunArgs,
}

/// Where MCP servers are configured, besides `.mcp.json` and `~/.config/cadre/mcp.json`.
#[derive(Debug, Args, Clone)]
pub struct McpArgs {
    /// Also read MCP servers from FILE (Claude Code's `.mcp.json` format; repeatable; a
    /// later file's server replaces an earlier one of the same name).
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Vec<PathBuf>,
    /// Timeout of one MCP tool call, in seconds (a server's own `timeout` wins).
    #[arg(long = "mcp-timeout", default_value_t = 120, value_name = "SECS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub mcp_timeout: u64,
}

/// `cadre workflow …`.
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Check a workflow without spending a token: the file, its agent types, its output
    /// schema, its input and the first item's rendered prompt; exit 2 listing every problem.
    #[command(after_help = workflow::CHECK_HELP)]
    Check(Box<WorkflowCheckCmd>),
    /// List the saved workflows (.cadre/workflows/*.yaml): name, description and file.
    List,
    /// Run a workflow: one agent call per item, results to the run folder's results.jsonl;
    /// `cadre resume RUN_ID` goes on without repeating finished items.
    #[command(after_help = RUN_HELP)]
    Run(Box<WorkflowRunCmd>),
    /// Run again the failed items of a workflow run, or continue one item's agent with a
    /// follow-up.
    #[command(after_help = RETRY_HELP)]
    Retry(Box<WorkflowRetryCmd>),
}

/// `cadre workflow run`.
#[derive(Debug, Args)]
pub struct WorkflowRunCmd {
    /// The workflow: a path to its file, or NAME for .cadre/workflows/NAME.yaml.
    #[arg(value_name = "FILE|NAME")]
    pub workflow: String,
    /// Read the items from FILE (or a glob) instead of the file's `input:`.
    #[arg(long, value_name = "FILE")]
    pub input: Option<String>,
    /// Also write each item's result line to FILE (CSV when it ends in .csv).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Most items at once [default: the file's map.concurrency].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: Option<u32>,
    /// Give the template's `args.NAME` the value VALUE (repeatable).
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_arg)]
    pub args: Vec<(String, String)>,
    /// The model, limits and the rest, as for `cadre run`; `--engine restate` runs each
    /// item as a durable call on the workers of a Restate server.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `cadre workflow retry`.
#[derive(Debug, Args)]
pub struct WorkflowRetryCmd {
    /// The workflow run (an id from .cadre/runs/, or a unique prefix).
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// Run again every item whose last attempt failed.
    #[arg(long, conflicts_with = "item", required_unless_present = "item")]
    pub failed: bool,
    /// The item (its key) whose agent goes on with --prompt.
    #[arg(long, value_name = "KEY", requires = "prompt")]
    pub item: Option<String>,
    /// The follow-up message for --item's agent.
    #[arg(long, value_name = "TEXT", requires = "item")]
    pub prompt: Option<String>,
    /// Also write each item's result line to FILE (CSV when it ends in .csv).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The model, limits and the rest, as for `cadre run`.
    #[command(flatten)]
    pub run: RunArgs,
}

/// How the result is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The answer as it streams, a live line for the running tool, a usage table at the end.
    Text,
    /// One JSON object with the answer, stop reason, turns and usage.
    Json,
    /// One JSON event per line as the run goes, then the result object.
    StreamJson,
}

/// `cadre run`.
#[derive(Debug, Args)]
pub struct RunCmd {
    /// The task, in plain words (with --continue or --resume: the follow-up message); `-`
    /// reads it from stdin, as does no TASK when stdin is not a terminal.
    #[arg(value_name = "TASK")]
    pub task: Option<String>,
    /// Read the task from FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "task")]
    pub task_file: Option<PathBuf>,
    /// Which earlier run TASK follows up, if any.
    #[command(flatten)]
    pub follow: FollowUp,
    /// Everything else.
    #[command(flatten)]
    pub args: RunArgs,
}

/// `--continue` / `--resume RUN_ID`: going on with an earlier run of this workspace.
#[derive(Debug, Args)]
pub struct FollowUp {
    /// Go on with the newest run of this workspace that can take a follow-up: its primary
    /// conversation goes on with the next message, in the same run folder.
    #[arg(short = 'c', long = "continue", conflicts_with = "resume")]
    pub continue_last: bool,
    /// Go on with the run RUN_ID (or a unique prefix of it).
    #[arg(long, value_name = "RUN_ID")]
    pub resume: Option<String>,
}

/// `cadre chat`.
#[derive(Debug, Args)]
pub struct ChatCmd {
    /// Which earlier run the conversation goes on with, if any.
    #[command(flatten)]
    pub follow: FollowUp,
    /// The model, limits and the rest, as for `cadre run`.
    #[command(flatten)]
    pub args: RunArgs,
}

/// `cadre resume`.
#[derive(Debug, Args)]
pub struct ResumeCmd {
    /// The run to carry on (an id from .cadre/runs/, or a unique prefix) [default: the
    /// newest unfinished run of this workspace].
    #[arg(value_name = "RUN_ID")]
    pub run_id: Option<String>,
    /// The model, limits and the rest, as for `cadre run`.
    #[command(flatten)]
    pub args: RunArgs,
}

/// Where a run's agents run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// In this process (the default).
    Local,
    /// On the workers of a Restate server (`cadre worker`), durable across crashes.
    Restate,
}

/// Options of `cadre run` and `cadre resume`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Where the agents run: `local` (in this process) or `restate` (on the `cadre worker`s
    /// of a Restate server, durable across crashes; see --restate-url and --repo).
    #[arg(long, value_enum, default_value_t = Engine::Local)]
    pub engine: Engine,
    /// Restate's ingress, for --engine restate.
    #[arg(
        long,
        env = "CADRE_RESTATE_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub restate_url: String,
    /// Restate's admin API, for --engine restate: while the run waits on a worker Restate
    /// cannot reach, it says why [default: the ingress's host, port 9070].
    #[arg(long, env = "CADRE_RESTATE_ADMIN_URL", value_name = "URL")]
    pub restate_admin_url: Option<String>,
    /// For --engine restate: the repository the workers check out and push their branches
    /// to, a URL or path every worker can reach; HEAD is pushed to it as
    /// refs/cadre/RUN/base [default: this repository's own folder, for workers on this
    /// machine; outside a git repository, each worker's --workspace folder].
    #[arg(long, value_name = "URL")]
    pub repo: Option<String>,
    /// The primary agent's type.
    #[arg(long, default_value = "main")]
    pub agent: String,
    /// Make the run a team run: `Task` takes a `name`, which starts a member that stays
    /// after it answers; members message each other (SendMessage) and share a task list.
    /// A primary type that lists a team tool (the shipped `lead`) makes one anyway.
    #[arg(long)]
    pub team: bool,
    /// Most messages the members of a team run may send in all (a runaway exchange stops
    /// there).
    #[arg(long, default_value_t = 500, value_name = "N", value_parser = whole::<usize>(1, None), allow_negative_numbers = true)]
    pub max_messages: usize,
    /// Most model requests in flight at once across every agent of the run.
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = whole::<usize>(1, None), allow_negative_numbers = true)]
    pub max_parallel: usize,
    /// How deep delegation may go (1: only the primary agent delegates; 0: no delegation).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = whole::<u32>(0, Some(100)), allow_negative_numbers = true)]
    pub max_depth: u32,
    /// Write no transcripts under .cadre/runs/.
    #[arg(long)]
    pub no_transcripts: bool,
    /// Extra folders of agent files.
    #[command(flatten)]
    pub dirs: AgentsDirArg,
    /// Extra folders of skills.
    #[command(flatten)]
    pub skills: SkillsDirArg,
    /// MCP server configuration.
    #[command(flatten)]
    pub mcp: McpArgs,
    /// Model id or alias (opus, sonnet, haiku) [default: claude-sonnet-5-5; with
    /// --provider openai there is no default: give the server's model name].
    #[arg(long, env = "CADRE_MODEL")]
    pub model: Option<String>,
    /// Most model requests the primary agent may make (default: its type's max_turns).
    #[arg(long, value_name = "N", value_parser = whole::<u32>(1, None), allow_negative_numbers = true)]
    pub max_turns: Option<u32>,
    /// Stop the run once this many tokens (input + output, cached included) are used; a
    /// resume counts what the run spent before.
    #[arg(long, value_name = "TOKENS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub budget_tokens: Option<u64>,
    /// The model's context window in tokens [default: the model's own — 1,000,000 for
    /// current Claude models, 200,000 for older ones; for OpenAI-compatible servers what the
    /// server reports (llama.cpp, vLLM), else 200,000]. Within 80% of it, old tool results
    /// are cleared (the newest two turns' are kept) as a last resort so the next request fits.
    #[arg(long, value_name = "TOKENS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub context_tokens: Option<u64>,
    /// Compact each agent's conversation once a request's input reaches TOKENS (at least
    /// 50000), or `off`. With Anthropic the server summarises the earlier turns into a
    /// `compaction` block (beta compact-2026-01-12); with OpenAI-compatible servers cadre asks
    /// the model for a summary near the window (70% of it, or TOKENS if sooner). An agent
    /// type's `compact_at:` overrides it.
    #[arg(long, value_name = "TOKENS|off", default_value = "150000", value_parser = parse_compact_at)]
    pub compact_at: CompactAtArg,
    /// Output token cap for each model response.
    #[arg(long, default_value_t = 8192, value_name = "N", value_parser = whole::<u32>(1, None), allow_negative_numbers = true)]
    pub max_tokens: u32,
    /// How many times a transient API failure (429, 529, 5xx, broken stream) is retried.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = whole::<u32>(0, Some(100)), allow_negative_numbers = true)]
    pub max_retries: u32,
    /// How long a model request may wait for the first byte of its answer, or between two
    /// pieces of a streamed answer, before the attempt fails (and is retried), in seconds.
    #[arg(long, default_value_t = cadre_model::HttpOptions::default().idle_timeout.as_secs(), value_name = "SECS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub request_timeout: u64,
    /// Timeout of a `bash` call when the model gives none, in seconds.
    #[arg(long, default_value_t = 120, value_name = "SECS", value_parser = whole::<u64>(1, None), allow_negative_numbers = true)]
    pub bash_timeout: u64,
    /// How the result is printed.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output_format: OutputFormat,
    /// Which API to talk to: `anthropic` (Messages API) or `openai` (any OpenAI-compatible
    /// Chat Completions server: Ollama, vLLM, llama.cpp, OpenRouter, …).
    #[arg(long, env = "CADRE_PROVIDER", value_enum, default_value_t = Provider::Anthropic)]
    pub provider: Provider,
    /// Base URL of the API [default: $ANTHROPIC_BASE_URL or https://api.anthropic.com;
    /// with --provider openai: $OPENAI_BASE_URL or https://api.openai.com/v1].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Record every model request and response of the run (all agents) to FILE, a cassette
    /// that --replay serves later.
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Serve model replies from a cassette written by --record: no network, no key. Tools
    /// still run for real. With --record and --replay, agent, skill and MCP configuration in
    /// your home is not loaded, so a cassette replays the same on every machine.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Let read-only agents run `bash` without the Landlock sandbox (for kernels without
    /// Landlock); writing agents then run it unsandboxed too.
    #[arg(long)]
    pub allow_unsandboxed_bash: bool,
    /// The `anthropic-version` header to send.
    #[arg(long, default_value = "2026-10-21")]
    pub api_version: String,
    /// Which of these options were given (flag or environment), so the settings files
    /// fill only the others.
    #[arg(skip)]
    pub given: Given,
    /// Deny rules standing for the project's guards this run leaves out (it is not
    /// trusted): the tools they guard are refused rather than run unguarded.
    #[arg(skip)]
    pub unguarded: Vec<cadre_core::RuleFrom>,
    /// What agents may do unasked: `auto` (as their types allow), `ask` (the person is asked
    /// before a writing tool or `bash` outside the allow rules; denied when there is no
    /// terminal), `deny-writes` (those calls are denied) or `plan` (read-only) [default: auto].
    /// An agent type's own `permission_mode` can make it stricter.
    #[arg(long, value_name = "MODE", value_parser = parse_permission_mode)]
    pub permission_mode: Option<cadre_core::PermissionMode>,
    /// Let calls a rule matches through without asking: `Bash(npm test)`, `Bash(git diff:*)`,
    /// `Edit(src/**)`, `Write(notes.md)`, `mcp__server__tool`, `Bash` (repeatable).
    #[arg(long = "allow", value_name = "RULE", value_parser = parse_rule)]
    pub allow: Vec<String>,
    /// Refuse calls a rule matches, whatever allows them: `Bash(rm:*)`, `Read(./secrets/**)`
    /// (repeatable).
    #[arg(long = "deny", value_name = "RULE", value_parser = parse_rule)]
    pub deny: Vec<String>,
    /// Trust the project this once, though it is not trusted: its hooks (in its
    /// .claude/settings.json, .claude/settings.local.json, cadre.toml, agent files), its MCP
    /// servers (.mcp.json, mcp_config, agent files' inline servers), its base_url and where
    /// its [telemetry] sends are used; nothing is remembered (`cadre trust` remembers). Your
    /// own hooks always run.
    #[arg(long)]
    pub trust_project: bool,
    /// The old name of --trust-project, refused with a message naming it: it trusts the
    /// whole project (servers, base_url), not its hooks alone, so a script that passes it
    /// must say so.
    #[arg(long, hide = true)]
    pub trust_hooks: bool,
    /// Run no hooks this time, neither yours nor the project's.
    #[arg(long)]
    pub no_hooks: bool,
}

fn parse_permission_mode(s: &str) -> Result<cadre_core::PermissionMode, String> {
    s.parse()
}

/// A permission rule, checked as it is given.
fn parse_rule(s: &str) -> Result<String, String> {
    cadre_core::Rule::parse(s)
        .map(|_| s.trim().to_owned())
        .map_err(|e| e.why)
}

/// `--compact-at`: a threshold in input tokens, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactAtArg(pub Option<u64>);

/// Reads a `--compact-at` value (also the settings files' `compact_at`).
pub fn parse_compact_at(s: &str) -> Result<CompactAtArg, String> {
    let s = s.trim();
    if matches!(s, "off" | "never" | "none") {
        return Ok(CompactAtArg(None));
    }
    let n: u64 = s.replace('_', "").parse().map_err(|_| {
        format!(
            "expected a number of input tokens (at least {}) or `off`",
            cadre_model::MIN_COMPACT_AT
        )
    })?;
    if n < cadre_model::MIN_COMPACT_AT {
        return Err(format!(
            "{n} is below the API's minimum of {} input tokens; use at least that, or `off`",
            cadre_model::MIN_COMPACT_AT
        ));
    }
    Ok(CompactAtArg(Some(n)))
}

/// The command line of this process; on a usage error, clap's message and exit code 2.
pub fn from_env() -> Cli {
    parse(Cli::command().get_matches()).unwrap_or_else(|e| e.exit())
}

/// Why `--trust-hooks` is refused: trust covers the project as one set (hooks, MCP servers,
/// base_url), and the old name would let a script that meant its guards send the user's
/// key to the project's endpoint unawares.
const TRUST_HOOKS_REFUSED: &str = "--trust-hooks is refused: trust now covers the whole project as one set (its hooks, its MCP servers and the variables they read, its base_url), not its hooks alone. Pass --trust-project to trust all of it for this run, or `cadre trust` to remember it";

/// The command line from clap's matches, with what the run options' matches say was given
/// (a flag, the environment) noted, so settings files fill only the rest.
pub fn parse(matches: ArgMatches) -> Result<Cli, clap::Error> {
    let mut cli = Cli::from_arg_matches(&matches)?;
    if cli.continue_last {
        let follow = match &mut cli.command {
            Some(Command::Run(cmd)) => Some(&mut cmd.follow),
            Some(Command::Chat(cmd)) => Some(&mut cmd.follow),
            // `cadre -c` alone: the command is chosen where it runs (a terminal or not).
            None => None,
            Some(_) => {
                return Err(Cli::command().error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "-c/--continue goes on with the newest run: it goes with `cadre` alone, `cadre run` or `cadre chat`",
                ))
            }
        };
        if let Some(follow) = follow {
            if follow.resume.is_some() {
                return Err(Cli::command().error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "-c/--continue and --resume RUN_ID name different runs: give one",
                ));
            }
            follow.continue_last = true;
        }
    }
    let mut leaf = &matches;
    while let Some((_, sub)) = leaf.subcommand() {
        leaf = sub;
    }
    let args = match &mut cli.command {
        Some(Command::Run(cmd)) => Some(&mut cmd.args),
        Some(Command::Chat(cmd)) => Some(&mut cmd.args),
        Some(Command::Resume(cmd)) => Some(&mut cmd.args),
        Some(Command::Config(ConfigCommand::Show(cmd))) => Some(&mut cmd.args),
        Some(Command::Mcp(McpCommand::Serve(cmd))) => Some(&mut cmd.args),
        Some(Command::Workflow(WorkflowCommand::Run(cmd))) => Some(&mut cmd.run),
        Some(Command::Workflow(WorkflowCommand::Retry(cmd))) => Some(&mut cmd.run),
        _ => None,
    };
    if let Some(args) = args {
        if args.trust_hooks {
            return Err(Cli::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                TRUST_HOOKS_REFUSED,
            ));
        }
        args.given = Given::from_matches(leaf);
    }
    if let Some(Command::Worker(cmd)) = &mut cli.command {
        cmd.prefer_command_line(leaf);
    }
    Ok(cli)
}
