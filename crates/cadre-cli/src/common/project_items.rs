//! The one trust boundary: everything a project supplies that can run a command, reach a
//! host or carry a secret — its hooks, its MCP servers (`.mcp.json`, the file `mcp_config`
//! names, inline servers in its agent files, and the variables they read), and the settings
//! of its `cadre.toml` the table of settings marks as needing trust (`base_url`, where its
//! `[telemetry]` sends and what content) — is
//! trusted or left out as one set, under one fingerprint (see [`trust`](crate::common::trust)).
//! A run decides once, before anything of the project is used: trusted, it is used; not,
//! one message names each item left out and `cadre trust`, and on a terminal the first run
//! asks, listing them.

use crate::args::RunArgs;
use crate::common::definitions::load_registry_from;
use crate::common::exit::{CliError, Result};
use crate::common::hooks::{aligned, is_project_type, ConfiguredHooks, Flags};
use crate::common::project::{require_dirs, user_dir};
use crate::common::settings::{resolve_from, shown_value, Settings, Sources};
use crate::common::trust::{State, Store};
use cadre_core::internal::guarded_tools;
use cadre_core::{AgentSpec, HookEvent, Hooks, McpServerRef, PermissionMode, Registry, RuleFrom};
use cadre_mcp::{McpConfig, ServerConfig};
use sha2::{Digest, Sha256};
use std::io::IsTerminal;
use std::path::Path;

/// One thing of the project's that needs the user's trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// What it is, in a few words (`hook PreToolUse Bash: ./guard.sh`).
    pub what: String,
    /// Where it is written.
    pub file: String,
    /// Whether it is a hook (a guard: losing it unannounced is refused).
    pub hook: bool,
    /// Why it cannot take effect this run whatever the trust (`--no-hooks`, your mode is
    /// auto), if it cannot: it is listed all the same, since a trust covers it.
    pub off: Option<String>,
    /// What the fingerprint covers of it: all of it that matters, the file from the root.
    covers: String,
}

/// Everything of a project's that needs the user's trust.
#[derive(Debug, Clone, Default)]
pub struct ProjectItems {
    /// Each item, hooks first; those that cannot take effect this run too, marked.
    pub items: Vec<Item>,
    /// What the fingerprint covers besides the items: the project's own switches that
    /// decide whether some of them take effect (its `disableAllHooks`).
    switches: Vec<String>,
    /// The user's own agent types that a project type of the same name replaces while they
    /// carry what holds agents back (hooks, deny rules, a mode): restored when untrusted.
    pub shadowed: Vec<AgentSpec>,
}

impl ProjectItems {
    /// The items of the project at `root`, from its settings files `sources`, the agent
    /// types of `registry` and its MCP files. What cannot take effect this run whatever the
    /// trust (hooks turned off by `--no-hooks` or `disableAllHooks`, allow rules under the
    /// user's `auto`) is listed too, marked as not in effect: a trust covers only what the
    /// user was shown, and holds whichever flags a run is given. The project's own
    /// `disableAllHooks` is covered too, so turning it off later is a change.
    pub fn gather(root: &Path, sources: &Sources, registry: &Registry, flags: Flags) -> Self {
        let mut this = Self::default();
        this.hooks(root, sources, registry, flags);
        this.servers(root, sources, registry);
        this.allow_rules(root, sources, registry, flags);
        this.shadows(root, registry);
        for (key, value, source) in sources.project_gated() {
            this.items.push(Item {
                // Shown as `config show` shows it (no header's value); covered whole.
                what: format!("{key} = {:?}", shown_value(key, &value)),
                file: source.to_string(),
                hook: false,
                off: None,
                // A path (mcp_config) from the root, so moving the project changes nothing.
                covers: format!("setting\0{key}\0{}", relative(root, &value)),
            });
        }
        this
    }

    /// The project's hooks: its settings files' and its agent files'.
    fn hooks(&mut self, root: &Path, sources: &Sources, registry: &Registry, flags: Flags) {
        let hooks = sources.hooks().with_types(registry, root);
        let off = hooks.project_off_by(flags);
        if let Some(file) = &hooks.project_disabled_by {
            self.switches
                .push(format!("disableAllHooks\0{}", relative(root, file)));
        }
        for h in hooks.project_all() {
            let matcher = h.matcher.clone().unwrap_or_else(|| "*".into());
            let item = Item {
                what: format!("hook {} {matcher}: {}", h.event, h.command),
                file: h.source.clone(),
                hook: true,
                off: off.clone(),
                covers: format!(
                    "hook\0{}\0{matcher}\0{}\0{}\0{}",
                    h.event,
                    h.command,
                    h.timeout_secs,
                    relative(root, &h.source)
                ),
            };
            self.items.push(item);
        }
    }

    /// The project's MCP servers: its `.mcp.json`, its `mcp_config`, and the inline servers
    /// of its agent files.
    fn servers(&mut self, root: &Path, sources: &Sources, registry: &Registry) {
        let config = project_mcp(root, sources);
        for (name, server) in &config.servers {
            let file = config
                .sources
                .get(name)
                .map_or_else(String::new, |f| f.display().to_string());
            self.items
                .push(server_item(name, server, &file, &relative(root, &file)));
        }
        for spec in registry.all().filter(|s| is_project_type(s, root)) {
            let file = spec
                .source
                .as_ref()
                .map_or_else(String::new, |f| f.display().to_string());
            let inline = spec.mcp_servers.iter().filter_map(|r| match r {
                McpServerRef::Inline(map) => Some(map),
                McpServerRef::Name(_) => None,
            });
            for (name, value) in inline.flatten() {
                let what = format!("{name} (inline, agent type {})", spec.name);
                let item = match ServerConfig::from_json(value) {
                    Ok(server) => server_item(&what, &server, &file, &relative(root, &file)),
                    Err(_) => Item {
                        what: format!("MCP server {what}"),
                        file: file.clone(),
                        hook: false,
                        off: None,
                        covers: format!("inline\0{what}\0{value}\0{}", relative(root, &file)),
                    },
                };
                self.items.push(item);
            }
        }
    }

    /// The project's allow rules, its settings files' and its agent types': where the user
    /// holds their agents back (a mode stricter than auto), they would let calls through,
    /// so they loosen a rule and need trust.
    fn allow_rules(&mut self, root: &Path, sources: &Sources, registry: &Registry, flags: Flags) {
        let loosens = loosened_mode(sources, flags, registry, root);
        let of_types = registry
            .all()
            .filter(|s| is_project_type(s, root))
            .flat_map(|s| {
                let file = s
                    .source
                    .as_ref()
                    .map_or_else(String::new, |f| f.display().to_string());
                s.permissions
                    .allow
                    .iter()
                    .map(move |rule| (format!("{rule} (agent type {})", s.name), file.clone()))
            });
        let rules: Vec<(String, String)> = sources
            .project_allow_rules()
            .into_iter()
            .map(|(rule, source)| (rule, source.to_string()))
            .chain(of_types)
            .collect();
        for (rule, source) in rules {
            let what = match loosens {
                Some(mode) => format!("permissions.allow {rule}: loosens your mode ({mode})"),
                None => format!("permissions.allow {rule}"),
            };
            self.items.push(Item {
                what,
                file: source,
                hook: false,
                off: loosens
                    .is_none()
                    .then(|| "your mode is auto: it loosens nothing".to_owned()),
                covers: format!("allow\0{rule}"),
            });
        }
    }

    /// The project's agent types that replace one of the user's own (in their folders,
    /// whether or not this run reads them, so the fingerprint is the same for every run)
    /// that carries hooks, deny rules or a mode stricter than auto: replacing it drops them.
    fn shadows(&mut self, root: &Path, registry: &Registry) {
        let Some(home) = crate::common::project::user_home(true) else {
            return;
        };
        let users = Registry::load(&[
            home.join(".claude/agents"),
            home.join(".config/cadre/agents"),
        ]);
        let guarded = |s: &AgentSpec| {
            !s.hooks.is_empty()
                || !s.permissions.deny.is_empty()
                || s.own_mode().is_some_and(|m| m != PermissionMode::Auto)
        };
        for theirs in users.all().filter(|s| s.source.is_some() && guarded(s)) {
            let Some(ours) = registry
                .get(&theirs.name)
                .filter(|s| is_project_type(s, root))
            else {
                continue;
            };
            let file = |s: &AgentSpec| {
                s.source
                    .as_ref()
                    .map_or_else(String::new, |f| f.display().to_string())
            };
            let (ours_file, theirs_file) = (file(ours), file(theirs));
            self.items.push(Item {
                what: format!(
                    "agent type {} replaces yours ({theirs_file}) and its hooks, deny rules and mode",
                    theirs.name
                ),
                file: ours_file.clone(),
                hook: !theirs.hooks.is_empty(),
                off: None,
                covers: format!(
                    "shadows\0{}\0{}\0{theirs_file}",
                    theirs.name,
                    relative(root, &ours_file)
                ),
            });
            self.shadowed.push(theirs.clone());
        }
    }

    /// Whether the project has nothing that needs trust this run: nothing, or nothing that
    /// can take effect (asked about once something can, since the fingerprint then differs
    /// from none).
    pub fn is_empty(&self) -> bool {
        self.items.iter().all(|i| i.off.is_some())
    }

    /// Whether a hook of the project's would run this run, once trusted.
    pub fn has_hooks_in_effect(&self) -> bool {
        self.items.iter().any(|i| i.hook && i.off.is_none())
    }

    /// The fingerprint the trust file keeps for them.
    pub fn fingerprint(&self) -> String {
        let mut hash = Sha256::new();
        // Changes meaning whenever what is covered does, so older answers count as changed.
        hash.update(b"cadre project items 2\n");
        let mut covered: Vec<&str> = self.items.iter().map(|i| i.covers.as_str()).collect();
        covered.extend(self.switches.iter().map(String::as_str));
        // In one order whatever the user's mode makes seen.
        covered.sort_unstable();
        for covers in covered {
            hash.update(covers.as_bytes());
            hash.update(b"\n");
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// One aligned line per item: what it is, then its file, then why it is not in effect
    /// now if it is not.
    pub fn lines(&self) -> Vec<String> {
        let rows: Vec<Vec<String>> = self
            .items
            .iter()
            .map(|i| {
                let mut row = vec![i.what.clone(), format!("({})", i.file)];
                row.extend(
                    i.off
                        .as_ref()
                        .map(|why| format!("(not in effect now: {why})")),
                );
                row
            })
            .collect();
        aligned(&rows)
    }
}

/// `file` from the project root `root`, so the fingerprint holds for the same project seen
/// through another path.
fn relative(root: &Path, file: &str) -> String {
    let prefix = format!("{}/", root.display());
    file.strip_prefix(&prefix).unwrap_or(file).to_owned()
}

/// One MCP server as an item: what it runs or reaches, and the variables it reads.
fn server_item(name: &str, server: &ServerConfig, file: &str, relative: &str) -> Item {
    let vars = server.variables();
    let reads = if vars.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = vars.iter().map(|v| format!("${{{v}}}")).collect();
        format!(", reads {}", names.join(" "))
    };
    Item {
        what: format!("MCP server {name}: {}{reads}", server.described()),
        file: file.to_owned(),
        hook: false,
        off: None,
        covers: format!("mcp\0{name}\0{server:?}\0{relative}"),
    }
}

/// The project's own MCP servers: its `.mcp.json` and the file its `cadre.toml` names.
pub fn project_mcp(root: &Path, sources: &Sources) -> McpConfig {
    let mut files = vec![root.join(".mcp.json")];
    files.extend(sources.project_mcp_config());
    McpConfig::load(&files, &[])
}

/// What the trust file and `flags` say of the project's items, no one asked.
pub fn state(items: &ProjectItems, root: &Path, flags: Flags) -> Option<State> {
    if items.is_empty() || flags.trust {
        return None;
    }
    Some(Store::load(user_dir(true).as_deref()).state(root, &items.fingerprint()))
}

/// What a run with `args` reads to decide the project's trust: the settings files, the
/// agent types (its `--agents-dir` too), its flags, and the project's items among them.
fn run_items(
    args: &RunArgs,
    root: &Path,
    user_dir: Option<&Path>,
    include_user: bool,
) -> Result<(Sources, Registry, Flags, ProjectItems)> {
    let sources = Sources::read(root, user_dir)?;
    require_dirs(&args.dirs.agents_dir, "--agents-dir")?;
    let registry = load_registry_from(root, &args.dirs.agents_dir, include_user);
    let flags = Flags::from(args);
    let items = ProjectItems::gather(root, &sources, &registry, flags);
    Ok((sources, registry, flags, items))
}

/// Whether a run with `args` uses the project's items without asking anyone: the trust
/// file trusts them as the run sees them (its `--agents-dir` included), or the run gives
/// `--trust-project`, or there are none. What is read before the run decides (its
/// telemetry) asks this, so that it agrees with [`decide_run`]; a project trusted only at
/// the run's prompt counts from the next run.
pub fn trusted_without_asking(args: &RunArgs, root: &Path) -> bool {
    let include_user = args.record.is_none() && args.replay.is_none();
    let Ok((_, _, flags, items)) =
        run_items(args, root, user_dir(include_user).as_deref(), include_user)
    else {
        return false;
    };
    matches!(state(&items, root, flags), None | Some(State::Trusted))
}

/// A run's settings and agent types once the project's trust is decided and applied.
pub struct Decided {
    /// The merged settings, the project's items in them only when trusted.
    pub settings: Settings,
    /// The agent types, an untrusted project's without what it may not use.
    pub registry: Registry,
    /// Whether the project's items are used.
    pub trusted: bool,
    /// The file the project's `cadre.toml` names in `mcp_config`, if it names one.
    pub project_mcp_config: Option<std::path::PathBuf>,
}

/// The one place a run (local or on the engine) decides the project's trust and applies
/// it: reads the settings files (a hook entry that cannot load refuses the run) and the
/// agent types, decides once ([`decide`]: asked on a terminal), fills every option of
/// `args` not given on the command line or by the environment, says what a project may
/// not set (even under `-q`: it is why a rule of the project's does not apply), and takes
/// from an untrusted project's agent types what it may not use.
pub fn decide_run(
    args: &mut RunArgs,
    root: &Path,
    user_dir: Option<&Path>,
    include_user: bool,
) -> Result<Decided> {
    let (sources, mut registry, flags, items) = run_items(args, root, user_dir, include_user)?;
    crate::common::definitions::refuse_unloadable_hooks(&registry)?;
    let trusted = decide(&items, root, flags)?;
    // Untrusted, a project type does not replace the user's own guarded one.
    if !trusted && include_user {
        for spec in &items.shadowed {
            registry.insert(spec.clone());
        }
    }
    let project_mcp_config = sources.project_mcp_config();
    let loosens = loosened_mode(&sources, flags, &registry, root).is_some();
    let settings = resolve_from(args, sources, trusted, !trusted && loosens);
    for line in &settings.left_out {
        errln!("cadre: warning: left out: {line}");
    }
    if !trusted {
        strip_untrusted(&mut registry, root, loosens);
        if settings.hooks.project_off_by(flags).is_none() {
            refuse_unguarded(args, &settings.hooks, &mut registry, root);
        }
    }
    Ok(Decided {
        settings,
        registry,
        trusted,
        project_mcp_config,
    })
}

/// Refuses the tools the project's `PreToolUse` hooks guard, as they are left out (the
/// project is not trusted): the settings files' guards by deny rules of the run naming
/// `cadre trust`, an agent file's by deny rules of its own type. DESIGN: a guard that does
/// not run refuses what it guards, never lets it run unguarded.
fn refuse_unguarded(
    args: &mut RunArgs,
    configured: &ConfiguredHooks,
    registry: &mut Registry,
    root: &Path,
) {
    let guards = |hooks: &Hooks| -> Vec<(&'static str, String)> {
        hooks
            .all()
            .iter()
            .filter(|h| h.event == HookEvent::PreToolUse)
            .flat_map(|h| {
                guarded_tools(h.matcher.as_deref())
                    .into_iter()
                    .map(|tool| (tool, h.source.clone()))
            })
            .collect()
    };
    for (tool, source) in guards(&configured.project) {
        if args.unguarded.iter().any(|r| r.rule == tool) {
            continue;
        }
        args.unguarded.push(RuleFrom {
            rule: tool.to_owned(),
            from: format!(
                "the project's PreToolUse hook in {source}, which does not run: the project is not trusted; `cadre trust` trusts it"
            ),
        });
    }
    let guarded: Vec<AgentSpec> = registry
        .all()
        .filter(|s| is_project_type(s, root))
        .filter_map(|s| {
            let tools = guards(&s.hooks);
            (!tools.is_empty()).then(|| {
                let mut spec = s.clone();
                for (tool, _) in tools {
                    if !spec.permissions.deny.iter().any(|d| d == tool) {
                        spec.permissions.deny.push(tool.to_owned());
                    }
                }
                spec
            })
        })
        .collect();
    for spec in guarded {
        registry.insert(spec);
    }
}

/// What `cadre config show` and `cadre doctor` say of a project hook, by the trust.
pub fn hook_status(state: Option<State>, flags: Flags) -> String {
    match state {
        _ if flags.trust => "runs (--trust-project, this run only)".into(),
        None | Some(State::Trusted) => "runs (project trusted)".into(),
        Some(State::Declined) => "not run: you declined it (`cadre trust` trusts it)".into(),
        Some(State::Changed { trusted: true }) => {
            "not run: the project changed since you trusted it; a run without a terminal is refused until `cadre trust`".into()
        }
        Some(State::Changed { trusted: false }) => {
            "not run until trusted: changed since you answered (`cadre trust`)".into()
        }
        Some(State::Unknown) => {
            "not run until trusted: asked on a terminal, or `cadre trust`".into()
        }
    }
}

/// Decides, once per run, whether the project's items are used: trusted (by the trust
/// file or `--trust-project`), or asked on a terminal (the answer remembered). Without a
/// terminal an untrusted project's items are left out with one message naming each, even
/// under `-q`; but a project trusted before whose items changed since and that holds hooks
/// refuses the run (exit 2): its guards must not silently stop guarding.
pub fn decide(items: &ProjectItems, root: &Path, flags: Flags) -> Result<bool> {
    let Some(state) = state(items, root, flags) else {
        return Ok(true);
    };
    let why = match state {
        State::Trusted => return Ok(true),
        State::Declined => "you declined to trust this project",
        State::Changed { .. } | State::Unknown if can_ask() => {
            let trusted = ask(items, root, matches!(state, State::Changed { .. }));
            let mut store = Store::load(user_dir(true).as_deref());
            store.set(root, trusted, &items.fingerprint());
            if let Err(e) = store.save() {
                errln!("cadre: warning: {}", e.report());
            }
            if !trusted {
                left_out(items, "you declined to trust it");
            }
            return Ok(trusted);
        }
        State::Changed { trusted: true } if items.has_hooks_in_effect() => {
            return Err(changed_refusal(items, root));
        }
        State::Changed { .. } => "it changed since you answered",
        State::Unknown => "this project is not trusted",
    };
    left_out(items, why);
    Ok(false)
}

/// The refusal of a run whose trusted project changed, with hooks, and no one to ask.
fn changed_refusal(items: &ProjectItems, root: &Path) -> CliError {
    let mut text = format!(
        "the project {} changed since you trusted it, and it has hooks: without a terminal to ask, the run is refused rather than run without its guards. Its items now:",
        root.display()
    );
    for line in items.lines() {
        text.push_str("\n  ");
        text.push_str(&line);
    }
    text.push_str("\n`cadre trust` trusts them as they are now (or --trust-project, for one run; --no-hooks runs none)");
    CliError::config(text)
}

/// The one message that says what of the project is left out, and how to trust it.
pub fn left_out(items: &ProjectItems, why: &str) {
    let mut text = format!(
        "cadre: warning: left out of this run ({why}), {}:",
        count(items.items.len())
    );
    for line in items.lines() {
        text.push_str("\n  ");
        text.push_str(&line);
    }
    text.push_str("\n`cadre trust` trusts them (or --trust-project, for one run)");
    errln!("{text}");
}

/// `N of the project's commands and endpoints`.
fn count(n: usize) -> String {
    if n == 1 {
        "1 of the project's commands and endpoints".into()
    } else {
        format!("{n} of the project's commands and endpoints")
    }
}

/// Whether a person can answer: stdin and stderr (where the question goes) are terminals.
fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on the terminal whether the project's items may be used; `changed`: they changed
/// since the last answer.
fn ask(items: &ProjectItems, root: &Path, changed: bool) -> bool {
    let what = if changed {
        "commands and endpoints that changed since you last answered"
    } else {
        "commands and endpoints"
    };
    errln!(
        "\ncadre: this project ({}) has {what}: they run with your rights, and reach hosts it chooses.",
        root.display()
    );
    for line in items.lines() {
        errln!("  {line}");
    }
    err!("Trust this project (remembered; `cadre trust --revoke` forgets it)? [y/N] ");
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        return false;
    }
    let yes = matches!(answer.trim().to_lowercase().as_str(), "y" | "yes");
    if yes {
        errln!("cadre: the project is trusted");
    }
    yes
}

/// The project's items for `cadre trust`, as a run without flags gathers them.
pub fn of_project(root: &Path) -> Result<ProjectItems> {
    // The user's files too, as a run reads them: their disableAllHooks and their mode
    // decide what of the project's is an item.
    let sources = Sources::read(root, user_dir(true).as_deref())?;
    let registry = load_registry_from(root, &[], true);
    Ok(ProjectItems::gather(
        root,
        &sources,
        &registry,
        Flags::default(),
    ))
}

/// The mode stricter than auto the user holds some agent to, which a project's allow rules
/// would loosen: the run's (`--permission-mode`, else their own files), else the
/// `permission_mode` of one of their own agent types in `registry` (any of them may be
/// delegated to); `None` when every agent the user set up runs under auto.
pub fn loosened_mode(
    sources: &Sources,
    flags: Flags,
    registry: &Registry,
    root: &Path,
) -> Option<PermissionMode> {
    let strict = |m: &PermissionMode| *m != PermissionMode::Auto;
    flags
        .mode
        .or_else(|| sources.users_mode())
        .filter(strict)
        .or_else(|| {
            registry
                .all()
                .filter(|s| !is_project_type(s, root))
                .filter_map(AgentSpec::own_mode)
                .find(strict)
        })
}

/// The project's agent types of `registry` without what an untrusted project may not
/// use: their inline MCP servers, and their allow rules when they would loosen the user's
/// mode (`loosens`).
pub fn strip_untrusted(registry: &mut Registry, root: &Path, loosens: bool) {
    let inline = |s: &cadre_core::AgentSpec| {
        s.mcp_servers
            .iter()
            .any(|r| matches!(r, McpServerRef::Inline(_)))
    };
    let stripped: Vec<cadre_core::AgentSpec> = registry
        .all()
        .filter(|s| is_project_type(s, root))
        .filter(|s| inline(s) || (loosens && !s.permissions.allow.is_empty()))
        .map(|s| {
            let mut spec = s.clone();
            spec.mcp_servers
                .retain(|r| matches!(r, McpServerRef::Name(_)));
            if loosens {
                spec.permissions.allow.clear();
            }
            spec
        })
        .collect();
    for spec in stripped {
        registry.insert(spec);
    }
}

/// The project's commands and endpoints (hooks, MCP servers, endpoints), and whether this
/// run uses them: what `cadre trust` covers.
pub fn print_items(items: &ProjectItems, state: Option<State>, flags: Flags) {
    outln!("a project's files may set (the rest freely):");
    for line in crate::common::table::project_limits() {
        outln!("  {line}");
    }
    if items.items.is_empty() {
        outln!("project items  (none: no hooks, MCP servers or endpoints of the project's)");
        return;
    }
    let used = match state {
        None | Some(State::Trusted) => "used",
        _ => "left out",
    };
    outln!(
        "project items ({used}: {}):",
        hook_status(state, flags).replace("runs", "trusted")
    );
    for line in items.lines() {
        outln!("  {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The items of a project at `root` whose settings file holds `settings` and whose
    /// `.mcp.json` holds `mcp`.
    fn items_of(root: &Path, settings: &str, mcp: &str, flags: Flags) -> ProjectItems {
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::write(root.join(".claude/settings.json"), settings).unwrap();
        std::fs::write(root.join(".mcp.json"), mcp).unwrap();
        let sources = Sources::read(root, None).unwrap();
        let registry = load_registry_from(root, &[], false);
        ProjectItems::gather(root, &sources, &registry, flags)
    }

    #[test]
    fn a_projects_header_values_are_not_shown_but_are_covered() {
        let dir = tempfile::tempdir().unwrap();
        let of = |secret: &str| {
            let table = format!(
                "[telemetry]\nendpoint = \"http://c:4318\"\nheaders = \"x-api-key={secret}\"\n"
            );
            std::fs::write(dir.path().join("cadre.toml"), table).unwrap();
            let sources = Sources::read(dir.path(), None).unwrap();
            let registry = load_registry_from(dir.path(), &[], false);
            ProjectItems::gather(dir.path(), &sources, &registry, Flags::default())
        };
        let items = of("s3cret");
        let shown: Vec<&str> = items.items.iter().map(|i| i.what.as_str()).collect();
        assert!(
            shown.contains(&"telemetry.headers = \"x-api-key=…\""),
            "{shown:?}"
        );
        assert!(!shown.iter().any(|w| w.contains("s3cret")), "{shown:?}");
        assert_ne!(items.fingerprint(), of("other").fingerprint());
    }

    #[test]
    fn an_mcp_config_path_is_fingerprinted_from_the_project_root() {
        let dir = tempfile::tempdir().unwrap();
        let of = |name: &str| {
            let root = dir.path().join(name);
            std::fs::create_dir_all(&root).unwrap();
            std::fs::write(root.join("servers.json"), "{}").unwrap();
            std::fs::write(root.join("cadre.toml"), "mcp_config = \"servers.json\"\n").unwrap();
            let sources = Sources::read(&root, None).unwrap();
            let registry = load_registry_from(&root, &[], false);
            ProjectItems::gather(&root, &sources, &registry, Flags::default())
        };
        let (a, b) = (of("a"), of("b"));
        assert_eq!(a.items.len(), 1, "{:?}", a.items);
        assert_eq!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn one_fingerprint_covers_hooks_servers_and_rules_wherever_the_project_lies() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let hook = |timeout: u64| {
            format!(
                r#"{{"hooks": {{"PreToolUse": [{{"matcher": "Bash", "hooks": [{{"command": "guard.sh", "timeout": {timeout}}}]}}]}}, "permissions": {{"allow": ["Bash"]}}}}"#
            )
        };
        let mcp = r#"{"mcpServers": {"s": {"command": "sh", "args": ["-c", "${TOKEN}"]}}}"#;
        let first = items_of(&a, &hook(10), mcp, Flags::default());
        // The allow rule loosens nothing under auto: listed, marked not in effect.
        assert_eq!(first.items.len(), 3, "{:?}", first.items);
        assert!(first.items[2].off.is_some(), "{:?}", first.items);
        assert!(first.items[0].hook && first.items[0].what.contains("guard.sh"));
        assert!(
            first.items[1].what.contains("reads ${TOKEN}"),
            "{:?}",
            first.items
        );
        // The same project in another folder: the same fingerprint.
        assert_eq!(
            first.fingerprint(),
            items_of(&b, &hook(10), mcp, Flags::default()).fingerprint()
        );
        // What is listed by the flags changes nothing of what was trusted.
        let off = Flags {
            off: true,
            mode: Some(PermissionMode::DenyWrites),
            ..Flags::default()
        };
        let listed = items_of(&a, &hook(10), mcp, off);
        assert!(
            listed
                .items
                .iter()
                .filter(|i| i.hook)
                .all(|i| i.off.as_deref() == Some("--no-hooks")),
            "{:?}",
            listed.items
        );
        assert!(listed
            .items
            .iter()
            .any(|i| i.what.contains("permissions.allow Bash")));
        assert_eq!(first.fingerprint(), listed.fingerprint());
        // Any change is a change: a timeout, a server's arguments.
        assert_ne!(
            first.fingerprint(),
            items_of(&a, &hook(11), mcp, Flags::default()).fingerprint()
        );
        // The project's own disableAllHooks is covered: turning it off later is a change.
        let disabled = hook(10).replacen('{', r#"{"disableAllHooks": true, "#, 1);
        let off = items_of(&a, &disabled, mcp, Flags::default());
        assert!(off.items[0].off.is_some(), "{:?}", off.items);
        assert_ne!(first.fingerprint(), off.fingerprint());
        let other = mcp.replace("TOKEN", "OTHER");
        assert_ne!(
            first.fingerprint(),
            items_of(&a, &hook(10), &other, Flags::default()).fingerprint()
        );
    }
}
