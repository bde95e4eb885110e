//! Where an agent's loop meets its hooks: before and after a tool call, and when it would
//! stop. A decision that changes what the agent does is journaled as a step
//! ([`Step::Hooked`]) before it takes effect, and folded by the agent's state like any other.

use super::output::{Permission, Verdict};
use super::{AgentHooks, MAX_STOP_BLOCKS};
use crate::run::agent::Agent;
use crate::run::state::{final_text, AgentState};
use crate::vocab::hooks::HookEvent;
use crate::vocab::hooks::{CallPermission, HookDecision};
use crate::vocab::step::Step;
use crate::vocab::team::TaskStatus;
use cadre_model::ToolUseBlock;
use cadre_tools::ToolOutput;
use serde_json::Value;

/// What `PreToolUse` hooks made of a call.
#[derive(Debug, Default)]
pub(crate) struct PreTool {
    /// Why it is refused (a block, a deny, or a stop), as the model is told.
    pub refused: Option<String>,
    /// `allow` or `ask`.
    pub permission: Option<CallPermission>,
    /// The input it runs with instead of the model's (cadre's field names).
    pub input: Option<Value>,
    /// Context for the model, added to the call's result.
    pub context: Option<String>,
}

/// Adds a hook's words for the model to a call's output.
pub(crate) fn add_note(out: &mut ToolOutput, event: HookEvent, text: &str) {
    if !out.content.is_empty() {
        out.content.push_str("\n\n");
    }
    out.content.push_str(&format!("[{event} hook] {text}"));
}

impl Agent {
    /// The step that journals `decision` of a hook of `event` (about the call `call`).
    fn hooked(&self, event: HookEvent, call: Option<&str>, decision: HookDecision) -> Step {
        Step::Hooked {
            agent: self.config.path.clone(),
            event,
            call: call.map(str::to_owned),
            decision,
        }
    }

    /// Runs `call`'s `PreToolUse` hooks — unless `kept` holds what they decided before a
    /// resume — and returns what they made of it, with the journaled step of a decision
    /// that changes what happens.
    pub(crate) async fn pre_tool(
        &self,
        hooks: &AgentHooks,
        call: &ToolUseBlock,
        kept: Option<&HookDecision>,
    ) -> (PreTool, Option<Step>) {
        if let Some(HookDecision::Call {
            permission,
            input,
            context,
        }) = kept
        {
            let pre = PreTool {
                refused: None,
                permission: *permission,
                input: input.clone(),
                context: context.clone(),
            };
            return (pre, None);
        }
        let event = HookEvent::PreToolUse;
        let team = self.team_hook(hooks, call).await;
        if !hooks.has(event) && team.is_none() {
            return (PreTool::default(), None);
        }
        let mut verdict = hooks.pre_tool_use(call).await;
        if let Some((team_event, v)) = team {
            // A team task hook that blocks refuses the call that would create or complete it.
            if let Some(reason) = v.block {
                verdict.block = Some(format!("{team_event} hook: {reason}"));
            }
        }
        let mut pre = PreTool::default();
        if let Some(reason) = verdict.stop {
            pre.refused = Some(format!(
                "not run: a {event} hook stopped the agent: {reason}"
            ));
            let step = self.hooked(event, Some(&call.id), HookDecision::Stop { reason });
            self.journal(&step).await;
            return (pre, Some(step));
        }
        pre.refused = match (verdict.permission, verdict.block) {
            (Some(Permission::Deny(why)), _) => Some(format!(
                "denied by a {event} hook: {why}; the call was not run"
            )),
            (_, Some(why)) => Some(format!(
                "blocked by a {event} hook; the call was not run: {why}"
            )),
            (Some(Permission::Allow), None) => {
                pre.permission = Some(CallPermission::Allow);
                None
            }
            (Some(Permission::Ask(_)), None) => {
                pre.permission = Some(CallPermission::Ask);
                None
            }
            (None, None) => None,
        };
        if pre.refused.is_some() {
            // The refusal is the call's result, journaled as such.
            return (pre, None);
        }
        pre.input = verdict.updated_input;
        pre.context = verdict.context;
        if pre.permission.is_none() && pre.input.is_none() && pre.context.is_none() {
            return (pre, None);
        }
        let decision = HookDecision::Call {
            permission: pre.permission,
            input: pre.input.clone(),
            context: pre.context.clone(),
        };
        let step = self.hooked(event, Some(&call.id), decision);
        self.journal(&step).await;
        (pre, Some(step))
    }

    /// `TaskCreated` / `TaskCompleted` hooks for a team tool call that creates or completes
    /// a task of the shared list; `None` for any other call.
    async fn team_hook(
        &self,
        hooks: &AgentHooks,
        call: &ToolUseBlock,
    ) -> Option<(HookEvent, Verdict)> {
        let text = |key: &str| call.input.get(key).and_then(Value::as_str).unwrap_or("");
        let event = match call.name.as_str() {
            "TaskCreate" => HookEvent::TaskCreated,
            "TaskUpdate" if text("status") == "completed" => HookEvent::TaskCompleted,
            _ => return None,
        };
        if !hooks.has(event) {
            return None;
        }
        let seat = self.team.as_ref()?;
        let id = if event == HookEvent::TaskCreated {
            // The id the task is about to get, or got (a resumed repeat of the call).
            seat.team().task_id_for(&seat.name, &call.id).await
        } else {
            let id = ["task_id", "taskId"]
                .iter()
                .find_map(|k| call.input.get(*k))
                .and_then(|v| match v {
                    Value::String(s) => s.trim().trim_start_matches('#').parse().ok(),
                    v => v.as_u64().and_then(|n| u32::try_from(n).ok()),
                })?;
            // Only a change the task list would make completes a task: one it refuses
            // (owned by another, blocked) is refused by the call itself, unhooked.
            let owner = text("owner");
            let owner = call.input.get("owner").map(|_| owner.to_owned());
            seat.team()
                .may_update_task(&seat.name, id, Some(TaskStatus::Completed), owner)
                .await
                .ok()?;
            id
        };
        let verdict = hooks
            .task(
                event,
                id,
                text("subject"),
                text("description"),
                Some(&seat.name),
                &hooks.who.session_id,
            )
            .await;
        Some((event, verdict))
    }

    /// Runs `call`'s `PostToolUse` (or `PostToolUseFailure`) hooks once it ran with `input`
    /// and gave `out`: what they say for the model joins the output (with `context` from
    /// its `PreToolUse` hooks); a stop is journaled and returned.
    pub(crate) async fn post_tool(
        &self,
        hooks: &AgentHooks,
        call: &ToolUseBlock,
        input: &Value,
        out: &mut ToolOutput,
        context: Option<String>,
    ) -> Option<Step> {
        if let Some(context) = context {
            add_note(out, HookEvent::PreToolUse, &context);
        }
        if !hooks.has_post(out.is_error) {
            return None;
        }
        let event = if out.is_error {
            HookEvent::PostToolUseFailure
        } else {
            HookEvent::PostToolUse
        };
        let verdict = hooks.post_tool_use(call, input, out).await;
        if let Some(reason) = &verdict.block {
            add_note(out, event, reason);
        }
        if let Some(context) = &verdict.context {
            add_note(out, event, context);
        }
        let reason = verdict.stop?;
        add_note(out, event, &format!("the agent was stopped: {reason}"));
        Some(self.hooked(event, Some(&call.id), HookDecision::Stop { reason }))
    }

    /// Runs the stop hooks of an agent that would end (`Stop` or `SubagentStop`, then
    /// `TeammateIdle` for a team member): a block keeps it going with the hook's reason as
    /// its next message, at most [`MAX_STOP_BLOCKS`] times in a row, after which it stops
    /// with [`StopKind::Hook`](crate::StopKind::Hook). `None` lets it end.
    pub(crate) async fn stop_hooks(&self, state: &AgentState) -> Option<Step> {
        let hooks = self.hooks.as_ref()?;
        let event = hooks.stop_event();
        // A member does not stop when it answers: it goes idle (`TeammateIdle`), and its
        // `SubagentStop` runs once, when it ends.
        let is_member = hooks.is_subagent() && self.team.is_some();
        let stops = hooks.has(event) && !is_member;
        let member = self
            .team
            .as_ref()
            .filter(|_| is_member && hooks.has(HookEvent::TeammateIdle));
        if !stops && member.is_none() {
            return None;
        }
        let mut at = event;
        let mut verdict = Verdict::default();
        if stops {
            let last = final_text(&state.history);
            verdict = hooks.stop(&last, state.stop_blocks > 0).await;
        }
        if let (None, Some(seat)) = (&verdict.block, member) {
            at = HookEvent::TeammateIdle;
            verdict = hooks.teammate_idle(&seat.name, &hooks.who.session_id).await;
        }
        // A hook that says stop to an agent that stops anyway changes nothing.
        let reason = verdict.block?;
        let decision = if state.stop_blocks >= MAX_STOP_BLOCKS {
            HookDecision::Stop {
                reason: format!(
                    "{at} hooks kept the agent from stopping {MAX_STOP_BLOCKS} times in a row, so cadre stopped it; the hook's last reason: {reason}"
                ),
            }
        } else {
            HookDecision::Continue { reason }
        };
        Some(self.hooked(at, None, decision))
    }
}
