//! The spans of an agent (`invoke_agent {type}`) and of its tool calls
//! (`execute_tool {tool}`), named and filled in as the OpenTelemetry GenAI conventions say
//! (see [`cadre_model::semconv`], where the names live), and cadre's own spans of a hook run
//! (`hook {event}`) and of a compaction (`compact {type}`). A model request's `chat` span is
//! made by the model client itself, an MCP call's `tools/call {tool}` by the MCP client.
//!
//! A `Task` call's span is the current span where its subagent starts, so the child's
//! `invoke_agent` span nests under it; work moved to a task of its own carries the span
//! with it. Content (prompts, tool inputs and results) is recorded only as
//! [`RecordContent`] allows.

use crate::vocab::hooks::{HookEvent, HookOutcome};
use crate::vocab::outcome::{AgentOutcome, StopKind};
use crate::vocab::team::Envelope;
use cadre_model::semconv::{
    int, record_error, record_usage, SpanName, CADRE_AGENT_OUTCOME, CADRE_AGENT_TURNS,
    CADRE_COMPACTION_BY, CADRE_COMPACTION_TOKENS_AFTER, CADRE_COMPACTION_TOKENS_BEFORE,
    CADRE_COMPACTION_TRIGGER, CADRE_HOOK_COMMAND, CADRE_HOOK_DECISION, CADRE_HOOK_EVENT,
    CADRE_TEAM_MEMBER, CADRE_TEAM_MESSAGES, CADRE_TOOL_DECISION, CADRE_WORKFLOW_NAME, ERROR_TYPE,
    GEN_AI_AGENT_ID, GEN_AI_AGENT_NAME, GEN_AI_CONVERSATION_ID, GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID, GEN_AI_TOOL_CALL_RESULT, GEN_AI_TOOL_NAME, GEN_AI_TOOL_TYPE,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS, GEN_AI_USAGE_OUTPUT_TOKENS, OP_COMPACT, OP_DELIVER, OP_EXECUTE_TOOL,
    OP_HOOK, OP_INVOKE_AGENT, OP_INVOKE_WORKFLOW, OTEL_KIND, OTEL_NAME, OTEL_STATUS_CODE,
    OTEL_STATUS_DESCRIPTION, TARGET,
};
use cadre_model::{CompactionUsage, RecordContent};
use std::fmt::Display;
use tracing::field::Empty;
use tracing::Span;

/// Who an agent's span is about.
pub(crate) struct AgentSpan<'a> {
    /// Its type.
    pub agent_type: &'a str,
    /// Its path in the run's tree.
    pub path: &'a dyn Display,
    /// The run's id.
    pub run_id: &'a str,
    /// The model id it asks.
    pub model: &'a str,
    /// The model client's provider.
    pub provider: &'a str,
}

/// The `invoke_agent {type}` span (INTERNAL) of one agent, child of the current span (the
/// `Task` call that started it, for a subagent).
pub(crate) fn invoke_agent(agent: &AgentSpan<'_>) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        { OTEL_NAME } = %SpanName(OP_INVOKE_AGENT, agent.agent_type),
        { OTEL_KIND } = "internal",
        { OTEL_STATUS_CODE } = Empty,
        { OTEL_STATUS_DESCRIPTION } = Empty,
        { GEN_AI_OPERATION_NAME } = OP_INVOKE_AGENT,
        { GEN_AI_PROVIDER_NAME } = agent.provider,
        { GEN_AI_AGENT_NAME } = agent.agent_type,
        { GEN_AI_AGENT_ID } = %agent.path,
        { GEN_AI_CONVERSATION_ID } = agent.run_id,
        { GEN_AI_REQUEST_MODEL } = agent.model,
        { GEN_AI_INPUT_MESSAGES } = Empty,
        { GEN_AI_USAGE_INPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_OUTPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS } = Empty,
        { CADRE_AGENT_OUTCOME } = Empty,
        { CADRE_AGENT_TURNS } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// The `invoke_workflow {name}` span (INTERNAL) of a workflow run `run_id`, child of the
/// current span: the agents of its items (and its reduce) nest under it.
pub(crate) fn invoke_workflow(name: &str, run_id: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_workflow",
        { OTEL_NAME } = %SpanName(OP_INVOKE_WORKFLOW, name),
        { OTEL_KIND } = "internal",
        { GEN_AI_OPERATION_NAME } = OP_INVOKE_WORKFLOW,
        { GEN_AI_CONVERSATION_ID } = run_id,
        { CADRE_WORKFLOW_NAME } = name,
    )
}

/// Records an agent's first prompt on its span, when prompts are recorded: the
/// conventions' `gen_ai.input.messages`, one user message of one text part.
pub(crate) fn record_prompt(span: &Span, content: &RecordContent, prompt: &str) {
    if !content.prompts || span.is_disabled() {
        return;
    }
    let messages = serde_json::json!([{
        "role": "user",
        "parts": [{"type": "text", "content": content.clip(prompt)}],
    }]);
    span.record(GEN_AI_INPUT_MESSAGES, messages.to_string().as_str());
}

/// Records how an agent ended on its span: its outcome, turns and summed usage, and an
/// error status unless it finished or was cut or stopped by a limit it was given. The
/// status says what went wrong only when content is recorded: a stop's text may quote the
/// model's answer (a schema's complaint), a hook's output or the API's message.
pub(crate) fn record_agent_end(span: &Span, content: &RecordContent, outcome: &AgentOutcome) {
    if span.is_disabled() {
        return;
    }
    span.record(
        CADRE_AGENT_OUTCOME,
        tracing::field::display(outcome.stop.outcome()),
    );
    span.record(CADRE_AGENT_TURNS, i64::from(outcome.turns));
    record_usage(span, &outcome.usage);
    if let Some(kind) = failure(&outcome.stop) {
        if content.prompts || content.tool_details {
            record_error(span, kind, &outcome.stop);
        } else {
            record_error(span, kind, &outcome.stop.outcome());
        }
    }
}

/// The `error.type` of an agent that stopped with `stop`, if that is a failure.
fn failure(stop: &StopKind) -> Option<&'static str> {
    match stop {
        StopKind::ModelError(_) => Some("model_error"),
        StopKind::ContextWindowExceeded => Some("context_window_exceeded"),
        _ if stop.outcome() == crate::vocab::outcome::Outcome::Failed => Some("failed"),
        _ => None,
    }
}

/// The `execute_tool {tool}` span (INTERNAL) of one tool call, child of its agent's span.
pub(crate) fn execute_tool(name: &str, id: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "execute_tool",
        { OTEL_NAME } = %SpanName(OP_EXECUTE_TOOL, name),
        { OTEL_KIND } = "internal",
        { OTEL_STATUS_CODE } = Empty,
        { OTEL_STATUS_DESCRIPTION } = Empty,
        { GEN_AI_OPERATION_NAME } = OP_EXECUTE_TOOL,
        { GEN_AI_TOOL_NAME } = name,
        { GEN_AI_TOOL_CALL_ID } = id,
        { GEN_AI_TOOL_TYPE } = "function",
        { GEN_AI_TOOL_CALL_ARGUMENTS } = Empty,
        { GEN_AI_TOOL_CALL_RESULT } = Empty,
        { CADRE_TOOL_DECISION } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// Records on a tool call's span whether it was let run, or by whom it was refused.
pub(crate) fn record_decision(span: &Span, hook_refused: bool, rule_denied: bool) {
    if span.is_disabled() {
        return;
    }
    let decision = match (hook_refused, rule_denied) {
        (true, _) => "deny_hook",
        (false, true) => "deny_rule",
        (false, false) => "allow",
    };
    span.record(CADRE_TOOL_DECISION, decision);
}

/// Records a tool call's input on its span, when tool details are recorded.
pub(crate) fn record_tool_input(span: &Span, content: &RecordContent, input: &serde_json::Value) {
    if content.tool_details && !span.is_disabled() {
        span.record(GEN_AI_TOOL_CALL_ARGUMENTS, content.clip(&input.to_string()));
    }
}

/// Records how a tool call ended on its `execute_tool` span: an error status if it failed,
/// and its result when tool details are recorded. What went wrong is said only then too: a
/// failed call's output (a command's, say) is content.
pub(crate) fn record_tool_end(span: &Span, content: &RecordContent, is_error: bool, result: &str) {
    if span.is_disabled() {
        return;
    }
    if is_error {
        span.record(OTEL_STATUS_CODE, "error");
        span.record(ERROR_TYPE, "tool_error");
        if content.tool_details {
            let first = result.lines().next().unwrap_or_default();
            span.record(OTEL_STATUS_DESCRIPTION, content.clip(first));
        }
    }
    if content.tool_details {
        span.record(GEN_AI_TOOL_CALL_RESULT, content.clip(result));
    }
}

/// The `hook {event}` span (INTERNAL) of one hook run, child of the current span: the tool
/// call's `execute_tool` for a `PreToolUse` or `PostToolUse` hook, else its agent's. Its
/// output is content and is never recorded.
pub(crate) fn hook(event: HookEvent, command: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "hook",
        { OTEL_NAME } = %SpanName(OP_HOOK, event.name()),
        { OTEL_KIND } = "internal",
        { OTEL_STATUS_CODE } = Empty,
        { CADRE_HOOK_EVENT } = event.name(),
        { CADRE_HOOK_COMMAND } = command,
        { CADRE_HOOK_DECISION } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// Records what came of a hook run on its span: its decision, and an error status when the
/// hook itself failed (its exit code, its timeout, or it could not start).
pub(crate) fn record_hook_end(span: &Span, outcome: &HookOutcome) {
    if span.is_disabled() {
        return;
    }
    let decision = hook_decision(outcome);
    span.record(CADRE_HOOK_DECISION, decision);
    if outcome.is_failure() {
        span.record(OTEL_STATUS_CODE, "error");
        span.record(ERROR_TYPE, decision);
    }
}

/// A hook's outcome in one low-cardinality word (the `kind` its event is written with).
fn hook_decision(outcome: &HookOutcome) -> &'static str {
    match outcome {
        HookOutcome::Ok { .. } => "ok",
        HookOutcome::Allowed { .. } => "allowed",
        HookOutcome::Asked { .. } => "asked",
        HookOutcome::Denied { .. } => "denied",
        HookOutcome::Blocked { .. } => "blocked",
        HookOutcome::Stopped { .. } => "stopped",
        HookOutcome::Failed { .. } => "failed",
        HookOutcome::TimedOut { .. } => "timed_out",
        HookOutcome::Cancelled => "cancelled",
        HookOutcome::NotRun { .. } => "not_run",
    }
}

/// The `compact {type}` span (INTERNAL) of one compaction of an agent of type
/// `agent_type`, child of its `invoke_agent` span; `trigger` is `auto` or `manual`. The
/// summary is content and is never recorded.
pub(crate) fn compaction(agent_type: &str, trigger: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "compact",
        { OTEL_NAME } = %SpanName(OP_COMPACT, agent_type),
        { OTEL_KIND } = "internal",
        { OTEL_STATUS_CODE } = Empty,
        { CADRE_COMPACTION_TRIGGER } = trigger,
        { CADRE_COMPACTION_BY } = Empty,
        { CADRE_COMPACTION_TOKENS_BEFORE } = Empty,
        { CADRE_COMPACTION_TOKENS_AFTER } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// Records on a compaction's span who wrote the summary and the tokens it read and wrote.
pub(crate) fn record_compacted(span: &Span, by: &str, usage: &CompactionUsage) {
    if span.is_disabled() {
        return;
    }
    span.record(CADRE_COMPACTION_BY, by);
    span.record(CADRE_COMPACTION_TOKENS_BEFORE, int(usage.input_tokens));
    span.record(CADRE_COMPACTION_TOKENS_AFTER, int(usage.output_tokens));
}

/// The `compact {type}` span of a compaction the server made inside one of the agent's
/// requests (whose `chat` span holds its time): a moment under the agent, by `server`.
pub(crate) fn server_compacted(agent_type: &str, usage: &CompactionUsage) {
    let span = compaction(agent_type, "auto");
    record_compacted(&span, "server", usage);
}

/// Marks a compaction's span as failed with `kind`; what went wrong (a model's message)
/// is left out.
pub(crate) fn record_compaction_failed(span: &Span, kind: &str) {
    if span.is_disabled() {
        return;
    }
    span.record(OTEL_STATUS_CODE, "error");
    span.record(ERROR_TYPE, kind);
}

/// The `deliver {member}` span (INTERNAL) of messages given to the team member `member`,
/// child of its agent's span: a moment, linked to the `SendMessage` call of each message
/// that carries its sender's context (those sent in this process, not resumed ones).
pub(crate) fn deliver(member: &str, messages: &[Envelope]) {
    if messages.is_empty() {
        return;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "deliver",
        { OTEL_NAME } = %SpanName(OP_DELIVER, member),
        { OTEL_KIND } = "internal",
        { CADRE_TEAM_MEMBER } = member,
        { CADRE_TEAM_MESSAGES } = i64::try_from(messages.len()).unwrap_or(i64::MAX),
    );
    if span.is_disabled() {
        return;
    }
    for trace in messages.iter().filter_map(|m| m.trace.as_deref()) {
        cadre_model::trace_bridge::link(&span, trace);
    }
}
