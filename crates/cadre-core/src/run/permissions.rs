//! Permissions: before an agent's tool call runs, its mode and the allow and deny rules of
//! its type and of the run decide whether it runs, is refused, or waits for a person's
//! answer through an [`Approver`]. The kernel sandbox still enforces read-only types;
//! this is on top of it.

use crate::definitions::permissions::{allowed_by, CallView, PermissionMode, Rule, RuleError};
use crate::definitions::registry::{SKILL_TOOL, TASK_TOOL};
use crate::definitions::spec::AgentSpec;
use crate::definitions::tools::{TASK_OUTPUT_TOOL, TASK_STOP_TOOL};
use crate::run::toolset::ToolSet;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::hooks::CallPermission;
use cadre_tools::{SandboxMode, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Permissions as a settings file gives them: a mode and allow and deny rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionSettings {
    /// The mode of every run, unless a flag says otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// Rules that let calls through without asking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Rules that refuse calls, whatever else allows them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// One rule as written, and where it came from (`settings`, `--deny`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleFrom {
    /// The rule, in Claude Code's syntax.
    pub rule: String,
    /// Where it came from, as messages name it.
    pub from: String,
}

/// The run's mode and rules, as another process receives them (an engine's worker): all of
/// [`Permissions`] but who is asked and what the person allowed for the session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionsSnapshot {
    /// The run's mode.
    pub mode: PermissionMode,
    /// Its allow rules, in order.
    #[serde(default)]
    pub allow: Vec<RuleFrom>,
    /// Its deny rules, in order.
    #[serde(default)]
    pub deny: Vec<RuleFrom>,
}

/// A question for the person: may this call run?
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The asking agent's path (`main`, `main/code#1`).
    pub agent: AgentPath,
    /// Its agent type.
    pub agent_type: String,
    /// The tool (cadre's name).
    pub tool: String,
    /// The call's input.
    pub input: Value,
    /// What the call does, in one line (`rm -rf build`, `src/main.rs`).
    pub summary: String,
    /// Why it is asked (`bash command not in the allow rules`).
    pub reason: String,
    /// The rule an "always" answer allows for the rest of the session.
    pub always: String,
}

/// The person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Run this call.
    AllowOnce,
    /// Run it, and every call the request's `always` rule matches, for the rest of the session.
    AllowAlways,
    /// Do not run it.
    Deny,
}

/// Asks a person whether a call may run (a terminal prompt, say). Calls come one at a time.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// The person's answer to `request`.
    async fn ask(&self, request: &ApprovalRequest) -> Decision;
}

/// A rule and where it came from (`agent type code`, `--deny`, `cadre.toml`).
#[derive(Debug, Clone)]
struct Sourced {
    rule: Rule,
    from: String,
}

/// What lives as long as the session: the rules "always" answers added, and the lock that
/// keeps two questions from being asked at once.
#[derive(Default)]
struct Shared {
    granted: Mutex<Vec<Rule>>,
    asking: tokio::sync::Mutex<()>,
}

/// The run's permissions: its mode, its rules, who is asked, and what the person allowed
/// for the session. Clones share the session's answers, so a chat keeps them turn to turn.
#[derive(Clone, Default)]
pub struct Permissions {
    /// The run's mode; an agent type's own mode may make it stricter.
    pub mode: PermissionMode,
    allow: Vec<Sourced>,
    deny: Vec<Sourced>,
    /// Who is asked in `ask` mode; `None` (headless) denies what would be asked.
    pub approver: Option<Arc<dyn Approver>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Permissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permissions")
            .field("mode", &self.mode)
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("approver", &self.approver.is_some())
            .finish()
    }
}

impl Permissions {
    /// Permissions in `mode` with no rules and no one to ask.
    pub fn new(mode: PermissionMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Adds an allow rule; `from` says where it came from in messages (`--allow`).
    pub fn allow(&mut self, rule: &str, from: &str) -> Result<(), RuleError> {
        self.allow.push(Sourced {
            rule: Rule::parse(rule)?,
            from: from.to_owned(),
        });
        Ok(())
    }

    /// Adds a deny rule; `from` says where it came from in messages (`--deny`).
    pub fn deny(&mut self, rule: &str, from: &str) -> Result<(), RuleError> {
        self.deny.push(Sourced {
            rule: Rule::parse(rule)?,
            from: from.to_owned(),
        });
        Ok(())
    }

    /// Applies settings from `from` (a file's name): its mode replaces the current one, its
    /// rules are added.
    pub fn apply(&mut self, settings: &PermissionSettings, from: &str) -> Result<(), RuleError> {
        if let Some(mode) = settings.mode {
            self.mode = mode;
        }
        for rule in &settings.allow {
            self.allow(rule, from)?;
        }
        for rule in &settings.deny {
            self.deny(rule, from)?;
        }
        Ok(())
    }

    /// The mode and rules, to be rebuilt elsewhere with [`from_snapshot`](Self::from_snapshot).
    pub fn snapshot(&self) -> PermissionsSnapshot {
        let list = |rules: &[Sourced]| {
            rules
                .iter()
                .map(|s| RuleFrom {
                    rule: s.rule.to_string(),
                    from: s.from.clone(),
                })
                .collect()
        };
        PermissionsSnapshot {
            mode: self.mode,
            allow: list(&self.allow),
            deny: list(&self.deny),
        }
    }

    /// The permissions `snapshot` describes, with no one to ask (a question is denied).
    pub fn from_snapshot(snapshot: &PermissionsSnapshot) -> Result<Self, RuleError> {
        let mut permissions = Self::new(snapshot.mode);
        for r in &snapshot.allow {
            permissions.allow(&r.rule, &r.from)?;
        }
        for r in &snapshot.deny {
            permissions.deny(&r.rule, &r.from)?;
        }
        Ok(permissions)
    }

    /// The mode an agent of type `spec` runs in: the stricter of the run's and its own.
    pub fn mode_for(&self, spec: &AgentSpec) -> PermissionMode {
        spec.own_mode()
            .map_or(self.mode, |own| self.mode.stricter(own))
    }

    /// The checker for agent `path` of type `spec`; `None` when it has nothing to check
    /// (mode `auto`, no deny rule, no tool limited to patterns).
    pub fn for_agent(&self, spec: &AgentSpec, path: &AgentPath) -> Option<Arc<AgentPermissions>> {
        self.checker(spec, path, false)
    }

    /// The checker for agent `path` of type `spec`, even when it has nothing to check of its
    /// own (an agent with hooks, which may ask the person about a call).
    pub(crate) fn for_agent_always(
        &self,
        spec: &AgentSpec,
        path: &AgentPath,
    ) -> Option<Arc<AgentPermissions>> {
        self.checker(spec, path, true)
    }

    /// The checker for agent `path` of type `spec`; `None` when it has nothing to check,
    /// unless `always`.
    fn checker(
        &self,
        spec: &AgentSpec,
        path: &AgentPath,
        always: bool,
    ) -> Option<Arc<AgentPermissions>> {
        let mode = self.mode_for(spec);
        let from = format!("agent type {}", spec.name);
        let parse = |rules: &[String]| -> Vec<Sourced> {
            rules
                .iter()
                .filter_map(|r| match Rule::parse(r) {
                    Ok(rule) => Some(Sourced {
                        rule,
                        from: from.clone(),
                    }),
                    Err(e) => {
                        tracing::warn!("{e}; it is not applied");
                        None
                    }
                })
                .collect()
        };
        let own_allow = parse(&spec.permissions.allow);
        let mut deny = parse(&spec.permissions.deny);
        deny.extend(self.deny.iter().cloned());
        if !always
            && mode == PermissionMode::Auto
            && deny.is_empty()
            && spec.limited_tools.is_empty()
        {
            return None;
        }
        let mut allow = self.allow.clone();
        allow.extend(own_allow.iter().cloned());
        Some(Arc::new(AgentPermissions {
            agent: path.clone(),
            agent_type: spec.name.clone(),
            mode,
            allow,
            own_allow,
            deny,
            limited: spec.limited_tools.clone(),
            approver: self.approver.clone(),
            shared: self.shared.clone(),
        }))
    }
}

/// One agent's permissions, checked before each of its tool calls.
pub struct AgentPermissions {
    agent: AgentPath,
    agent_type: String,
    mode: PermissionMode,
    /// Every allow rule: the run's and its type's.
    allow: Vec<Sourced>,
    /// Its type's own allow rules, the only ones that open a limited tool.
    own_allow: Vec<Sourced>,
    deny: Vec<Sourced>,
    limited: Vec<String>,
    approver: Option<Arc<dyn Approver>>,
    shared: Arc<Shared>,
}

/// Why a call needs a yes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Its type gives the tool only through patterns, and none matches.
    Limited,
    /// It may change something and no allow rule covers it.
    Writes,
    /// A `PreToolUse` hook asked for the person's say.
    Hook,
}

/// A call that needs a yes, as the person (or the refusal) is told of it.
struct Question {
    /// Why it needs one.
    need: Need,
    /// The call in a few words (`bash `ls``, `write_file on a.txt`).
    what: String,
    /// Why it needs one, in words.
    reason: String,
    /// The allow rule that would let it through.
    always: String,
}

impl Question {
    /// The refusal where no one can be asked (a headless run).
    fn headless_refusal(&self) -> String {
        let Self {
            need,
            what,
            reason,
            always,
        } = self;
        if *need == Need::Hook {
            return format!(
                "denied: a PreToolUse hook asked for the person's say on {what}, but there is no terminal to ask (a headless run), so it was not run"
            );
        }
        format!(
            "denied: permission mode ask would ask the person about {what} ({reason}), but there is no terminal to ask (a headless run), so it was not run; an allow rule such as {always} permits it"
        )
    }
}

impl AgentPermissions {
    /// The mode the agent runs in.
    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// `None` when the call of `name` with `input` may run; else why not, for the model.
    /// In `ask` mode this waits for the person (one question at a time across the run);
    /// cancelling `ctx` ends the wait.
    pub async fn check(
        &self,
        name: &str,
        input: &Value,
        tools: &ToolSet,
        ctx: &ToolContext,
    ) -> Option<String> {
        self.check_with(name, input, tools, ctx, None).await
    }

    /// [`check`](Self::check) after `PreToolUse` hooks said `hook`: a hook's `allow` skips
    /// the allow rules and the question, never a deny rule (nor its type's own limits, nor
    /// the sandbox, which the tools enforce); its `ask` asks the person whatever the mode,
    /// and is refused where no one can be asked.
    pub async fn check_with(
        &self,
        name: &str,
        input: &Value,
        tools: &ToolSet,
        ctx: &ToolContext,
        hook: Option<CallPermission>,
    ) -> Option<String> {
        let root = ctx.workspace.root();
        let resolve = |p: &str| ctx.workspace.resolve(p).ok();
        let call = CallView::new(name, input, root, &resolve);
        if let Some(d) = self.deny.iter().find(|d| d.rule.denies(&call)) {
            return Some(format!(
                "denied by rule {} (from {}): the call was not run",
                d.rule, d.from
            ));
        }
        let need = self.need_after(&call, tools, ctx, hook)?;
        let question = Question {
            need,
            what: described(name, input, &call, ctx),
            reason: self.reason(name, need),
            always: call.exact_rule(),
        };
        if let Some(refusal) = self.refused_by_mode(&question) {
            return Some(refusal);
        }
        let Some(approver) = &self.approver else {
            return Some(question.headless_refusal());
        };
        self.ask(approver, name, input, &call, ctx, question).await
    }

    /// What the call needs after `PreToolUse` hooks said `hook`; `None` when it runs as it
    /// is (a hook's `allow` settles all but its type's own limits).
    fn need_after(
        &self,
        call: &CallView,
        tools: &ToolSet,
        ctx: &ToolContext,
        hook: Option<CallPermission>,
    ) -> Option<Need> {
        match hook {
            None => self.need(call, tools, ctx),
            Some(CallPermission::Allow) => match self.need(call, tools, ctx)? {
                Need::Limited => Some(Need::Limited),
                Need::Writes | Need::Hook => None,
            },
            Some(CallPermission::Ask) => Some(Need::Hook),
        }
    }

    /// Why the call `name` needs a yes, in words for the person and the model.
    fn reason(&self, name: &str, need: Need) -> String {
        match need {
            Need::Limited => format!(
                "agent type {} may use {name} only as its tools say ({})",
                self.agent_type,
                self.limits_of(name).join(", ")
            ),
            Need::Writes if name == "bash" => "the command is not in the allow rules".to_owned(),
            Need::Writes => format!("{name} may change things and no allow rule covers it"),
            Need::Hook => "a PreToolUse hook asks for the person's say".to_owned(),
        }
    }

    /// The refusal the agent's mode gives `question` without asking, if it gives one: every
    /// mode but `ask` refuses, save for a hook's `ask`, which asks in every mode.
    fn refused_by_mode(&self, question: &Question) -> Option<String> {
        let Question {
            need,
            what,
            reason,
            always,
        } = question;
        match self.mode {
            PermissionMode::Ask => None,
            _ if *need == Need::Hook => None,
            PermissionMode::Plan if *need == Need::Writes => Some(format!(
                "denied by permission mode plan (read-only): {what} may change things; the call was not run"
            )),
            mode if *need == Need::Limited => Some(format!(
                "denied: {reason}; the call was not run (permission mode {mode})"
            )),
            mode => Some(format!(
                "denied by permission mode {mode}: {what}: {reason}; the call was not run (an allow rule such as {always} permits it)"
            )),
        }
    }

    /// Asks the person through `approver`, one question at a time, and remembers an
    /// "always"; `None` when the call may run.
    async fn ask(
        &self,
        approver: &Arc<dyn Approver>,
        name: &str,
        input: &Value,
        call: &CallView<'_>,
        ctx: &ToolContext,
        question: Question,
    ) -> Option<String> {
        // One question at a time; an answer given meanwhile ("always") may settle this one.
        let _turn = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Some("cancelled while waiting to ask for permission".into()),
            turn = self.shared.asking.lock() => turn,
        };
        if self.granted(call) {
            return None;
        }
        let request = ApprovalRequest {
            agent: self.agent.clone(),
            agent_type: self.agent_type.clone(),
            tool: name.to_owned(),
            input: input.clone(),
            summary: summary(name, input, call, ctx),
            reason: question.reason,
            always: question.always,
        };
        let decision = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Some("cancelled while asking for permission".into()),
            d = approver.ask(&request) => d,
        };
        match decision {
            Decision::AllowOnce => None,
            Decision::AllowAlways => {
                if let Some(rule) = call.exact() {
                    self.shared
                        .granted
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(rule);
                }
                None
            }
            Decision::Deny => Some(format!(
                "denied by the person at the terminal: {} was not run",
                question.what
            )),
        }
    }

    /// Takes out of `tools` those the agent's mode refuses whatever the call: in `plan`,
    /// every tool that may change something (its type's pattern-limited tools stay, since
    /// their patterns decide). The model is not offered a tool it could only waste a turn on.
    pub(crate) fn withhold(&self, tools: &mut ToolSet, ctx: &ToolContext) {
        if self.mode != PermissionMode::Plan {
            return;
        }
        let all = tools.clone();
        tools.retain(|t| {
            let name = t.name();
            self.limited.iter().any(|l| l == name) || !changes(name, &all, ctx, true)
        });
    }

    /// What the call needs before it may run, if anything.
    fn need(&self, call: &CallView, tools: &ToolSet, ctx: &ToolContext) -> Option<Need> {
        let name = call.tool;
        if self.limited.iter().any(|t| t == name) {
            let own = self.own_allow.iter().map(|s| &s.rule);
            if !allowed_by(own, call) && !self.granted(call) {
                return Some(Need::Limited);
            }
            return None;
        }
        let plan = self.mode == PermissionMode::Plan;
        if self.mode == PermissionMode::Auto || !changes(name, tools, ctx, plan) {
            return None;
        }
        let allowed = allowed_by(self.allow.iter().map(|s| &s.rule), call) || self.granted(call);
        (!allowed || self.mode == PermissionMode::Plan).then_some(Need::Writes)
    }

    /// Whether an "always" answer of this session covers the call.
    fn granted(&self, call: &CallView) -> bool {
        let granted = self
            .shared
            .granted
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        allowed_by(granted.iter(), call)
    }

    /// The type's patterns for `tool`, as written.
    fn limits_of(&self, tool: &str) -> Vec<String> {
        self.own_allow
            .iter()
            .filter(|s| s.rule.covers_tool(tool))
            .map(|s| s.rule.to_string())
            .collect()
    }
}

/// Whether a call of `name` may change something: a tool that is not read-only, other than
/// the delegating ones (their subagents' calls are checked themselves), `bash` of a
/// read-only agent, which the kernel sandbox confines, and (outside `plan`, which says so
/// itself) the file tools of a read-only type, which refuse by themselves.
fn changes(name: &str, tools: &ToolSet, ctx: &ToolContext, plan: bool) -> bool {
    if matches!(
        name,
        TASK_TOOL | SKILL_TOOL | TASK_OUTPUT_TOOL | TASK_STOP_TOOL
    ) {
        return false;
    }
    if name == "bash" && ctx.read_only && ctx.sandbox == SandboxMode::Landlock {
        return false;
    }
    if !plan && ctx.read_only && matches!(name, "write_file" | "edit_file") {
        return false;
    }
    tools.get(name).is_some_and(|t| !t.is_read_only())
}

/// The call in a few words for a refusal: the command of `bash`, else the tool and the
/// last path it touches.
fn described(name: &str, input: &Value, call: &CallView, ctx: &ToolContext) -> String {
    match name {
        "bash" => format!(
            "bash `{}`",
            input
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        other => match call.paths.last() {
            Some(p) => format!("{other} on {}", ctx.workspace.display(p)),
            None => other.to_owned(),
        },
    }
}

/// The call in one line for the person: the command, the path, or the input.
fn summary(name: &str, input: &Value, call: &CallView, ctx: &ToolContext) -> String {
    if name == "bash" {
        if let Some(c) = input.get("command").and_then(Value::as_str) {
            return c.to_owned();
        }
    }
    if let Some(p) = call.paths.last() {
        return ctx.workspace.display(p);
    }
    let text = input.to_string();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_tools::{builtin_tools, Workspace};
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers every question with `answer`, counting them.
    struct Always {
        answer: Decision,
        asked: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Approver for Always {
        async fn ask(&self, _: &ApprovalRequest) -> Decision {
            self.asked.fetch_add(1, Ordering::SeqCst);
            self.answer
        }
    }

    fn spec(yaml: &str) -> AgentSpec {
        let text = format!("name: t\ndescription: d\nprompt: p\n{yaml}");
        let (spec, problems) = AgentSpec::parse_yaml(std::path::Path::new("t.yaml"), &text);
        spec.unwrap_or_else(|| panic!("{problems:?}"))
    }

    fn setup() -> (tempfile::TempDir, ToolSet, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Arc::new(Workspace::new(dir.path()).unwrap());
        (dir, ToolSet::new(builtin_tools()), ToolContext::new(ws))
    }

    #[test]
    fn a_type_tightens_the_run_and_auto_without_rules_checks_nothing() {
        let run = Permissions::new(PermissionMode::Ask);
        assert_eq!(run.mode_for(&spec("")), PermissionMode::Ask);
        assert_eq!(
            run.mode_for(&spec("permission_mode: auto\n")),
            PermissionMode::Ask
        );
        assert_eq!(
            run.mode_for(&spec("permission_mode: plan\n")),
            PermissionMode::Plan
        );
        let auto = Permissions::default();
        assert!(auto.for_agent(&spec(""), &"main".into()).is_none());
        assert_eq!(
            auto.for_agent(&spec("permission_mode: dontAsk\n"), &"main".into())
                .map(|p| p.mode()),
            Some(PermissionMode::DenyWrites)
        );
        assert!(auto
            .for_agent(
                &spec("permissions: {deny: [\"Bash(rm:*)\"]}\n"),
                &"main".into()
            )
            .is_some());
    }

    #[test]
    fn a_bad_mode_or_rule_in_an_agent_file_is_dropped_with_a_warning() {
        let text = "name: t\ndescription: d\nprompt: p\npermission_mode: sometimes\npermissions:\n  allow: [\"Teleport(x)\", \"Bash(ls:*)\"]\n";
        let (spec, problems) = AgentSpec::parse_yaml(std::path::Path::new("t.yaml"), text);
        let spec = spec.unwrap();
        assert_eq!(spec.permission_mode, None);
        assert_eq!(spec.permissions.allow, ["Bash(ls:*)"]);
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(
            shown[0].starts_with("t.yaml:4:18: warning: unknown permission mode \"sometimes\""),
            "{shown:?}"
        );
        assert!(
            shown[1].starts_with("t.yaml:6:12: warning: bad permission rule \"Teleport(x)\""),
            "{shown:?}"
        );
    }

    #[tokio::test]
    async fn always_is_remembered_for_the_session_and_deny_wins() {
        let (_dir, tools, ctx) = setup();
        let approver = Arc::new(Always {
            answer: Decision::AllowAlways,
            asked: AtomicUsize::new(0),
        });
        let mut run = Permissions::new(PermissionMode::Ask);
        run.approver = Some(approver.clone());
        run.deny("Bash(rm:*)", "--deny").unwrap();
        let a = run.for_agent(&spec(""), &"main".into()).unwrap();
        let input = json!({"command": "make"});
        assert_eq!(a.check("bash", &input, &tools, &ctx).await, None);
        // Another agent of the same session (a later turn's clone too) is not asked again.
        let b = run
            .clone()
            .for_agent(&spec(""), &"main/code#1".into())
            .unwrap();
        assert_eq!(b.check("bash", &input, &tools, &ctx).await, None);
        assert_eq!(approver.asked.load(Ordering::SeqCst), 1);
        // Reading is never asked; a deny rule is never asked either.
        let read = json!({"path": "x"});
        assert_eq!(a.check("read_file", &read, &tools, &ctx).await, None);
        let rm = json!({"command": "make && rm -rf x"});
        let why = a.check("bash", &rm, &tools, &ctx).await.unwrap();
        assert_eq!(
            why,
            "denied by rule Bash(rm:*) (from --deny): the call was not run"
        );
        assert_eq!(approver.asked.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn headless_ask_denies_and_a_cancelled_wait_ends() {
        let (_dir, tools, ctx) = setup();
        let run = Permissions::new(PermissionMode::Ask);
        let a = run.for_agent(&spec(""), &"main".into()).unwrap();
        let write = json!({"path": "a.txt", "content": "x"});
        let why = a.check("write_file", &write, &tools, &ctx).await.unwrap();
        assert!(why.contains("no terminal to ask"), "{why}");
        assert!(why.contains("Write(a.txt)"), "{why}");

        /// Never answers.
        struct Silent;
        #[async_trait::async_trait]
        impl Approver for Silent {
            async fn ask(&self, _: &ApprovalRequest) -> Decision {
                std::future::pending().await
            }
        }
        let mut run = Permissions::new(PermissionMode::Ask);
        run.approver = Some(Arc::new(Silent));
        let a = run.for_agent(&spec(""), &"main".into()).unwrap();
        ctx.cancel.cancel();
        let why = a.check("write_file", &write, &tools, &ctx).await.unwrap();
        assert!(why.contains("cancelled"), "{why}");
    }

    #[tokio::test]
    async fn a_read_only_types_sandboxed_bash_is_not_asked() {
        let (_dir, tools, mut ctx) = setup();
        let run = Permissions::new(PermissionMode::DenyWrites);
        let a = run
            .for_agent(&spec("read_only: true\n"), &"main/explore#1".into())
            .unwrap();
        ctx.read_only = true;
        let ls = json!({"command": "ls"});
        assert_eq!(a.check("bash", &ls, &tools, &ctx).await, None);
        ctx.sandbox = SandboxMode::Unsandboxed;
        assert!(a.check("bash", &ls, &tools, &ctx).await.is_some());
    }

    #[tokio::test]
    async fn a_snapshot_rebuilds_the_same_mode_and_rules_with_their_sources() {
        let (_dir, tools, ctx) = setup();
        let mut run = Permissions::new(PermissionMode::DenyWrites);
        run.allow("Bash(echo:*)", "--allow").unwrap();
        run.deny("Bash(rm:*)", "settings").unwrap();
        let wire = serde_json::to_string(&run.snapshot()).unwrap();
        let snapshot: PermissionsSnapshot = serde_json::from_str(&wire).unwrap();
        assert_eq!(snapshot, run.snapshot());
        let rebuilt = Permissions::from_snapshot(&snapshot).unwrap();
        assert_eq!(rebuilt.mode, PermissionMode::DenyWrites);
        let a = rebuilt.for_agent(&spec(""), &"main".into()).unwrap();
        let rm = json!({"command": "rm -f x"});
        let why = a.check("bash", &rm, &tools, &ctx).await.unwrap();
        assert!(why.contains("Bash(rm:*) (from settings)"), "{why}");
        let echo = json!({"command": "echo hi"});
        assert_eq!(a.check("bash", &echo, &tools, &ctx).await, None);
        let bad = PermissionsSnapshot {
            deny: vec![RuleFrom {
                rule: "Bash(".into(),
                from: "--deny".into(),
            }],
            ..PermissionsSnapshot::default()
        };
        assert!(Permissions::from_snapshot(&bad).is_err());
    }
}
