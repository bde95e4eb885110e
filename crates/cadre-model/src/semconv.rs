//! The names cadre's spans carry, and the `chat` span of a model request.
//!
//! cadre's library crates emit plain `tracing` spans; a subscriber that exports them (the
//! CLI's OpenTelemetry layer, or an embedder's own) finds on them the attributes of the
//! OpenTelemetry GenAI semantic conventions (status Development), followed as the
//! `model/gen-ai/registry.yaml` of open-telemetry/semantic-conventions-genai gives them at
//! commit 002c8a6 (no release yet; before the `gen_ai.token.*` metrics of its changelog).
//! The names are our own constants: the Rust `opentelemetry-semantic-conventions` crate marks
//! its GenAI ones deprecated, and the conventions may still move. The `otel.*` fields are
//! the ones `tracing-opentelemetry` reads for a span's name, kind and status.
//!
//! Every span has the target [`TARGET`] and level INFO, so a subscriber can take them alone.
//! A field is formatted only when a subscriber wants the span: with none, a span costs a
//! check of its callsite and nothing else.

use crate::{ModelError, Response, Usage};
use reqwest::Url;
use std::fmt;
use tracing::field::Empty;
use tracing::Span;

/// The `tracing` target of every span below (and of cadre-core's agent and tool spans).
pub const TARGET: &str = "cadre::gen_ai";

/// The span's name as exported (`chat claude-sonnet-5-5`).
pub const OTEL_NAME: &str = "otel.name";
/// The span's kind (`client`, `internal`).
pub const OTEL_KIND: &str = "otel.kind";
/// `ok` or `error`.
pub const OTEL_STATUS_CODE: &str = "otel.status_code";
/// What went wrong, with an `error` status.
pub const OTEL_STATUS_DESCRIPTION: &str = "otel.status_description";

/// `invoke_agent`, `chat` or `execute_tool`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `anthropic`, `openai`.
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The agent's type.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// The agent's path in the run's tree (`main/explore#2`).
pub const GEN_AI_AGENT_ID: &str = "gen_ai.agent.id";
/// The run's id.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The model id asked for.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model id that answered.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// The response's id.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// Why the model stopped (`["end_turn"]`, `["tool_use"]`): a list of strings.
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Input tokens, cached ones included, as the conventions count them.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Output tokens.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Input tokens read from the cache.
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Input tokens written to the cache.
pub const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str =
    "gen_ai.usage.cache_creation.input_tokens";
/// The tool's name.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// The tool call's id (`toolu_…`).
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` (a tool cadre runs) — the conventions' word for a client-side tool.
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// A tool call's input (content: recorded only when asked).
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// A tool call's result (content: recorded only when asked).
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// The messages an agent was given (content: recorded only when asked).
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The host of the model API.
pub const SERVER_ADDRESS: &str = "server.address";
/// The port of the model API.
pub const SERVER_PORT: &str = "server.port";
/// A low-cardinality name of what went wrong (an HTTP status, `timeout`, `tool_error`, …).
pub const ERROR_TYPE: &str = "error.type";

/// cadre's own: how an agent ended (`completed`, `failed`, …).
pub const CADRE_AGENT_OUTCOME: &str = "cadre.agent.outcome";
/// cadre's own: the model requests an agent made.
pub const CADRE_AGENT_TURNS: &str = "cadre.agent.turns";
/// cadre's own: whether a tool call was let run (`allow`), or refused by a hook
/// (`deny_hook`) or by the permission rules (`deny_rule`).
pub const CADRE_TOOL_DECISION: &str = "cadre.tool.decision";

/// The operation of an agent's span.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
/// The operation of a workflow's span, `invoke_workflow {name}`: the agents of its items
/// nest under it.
pub const OP_INVOKE_WORKFLOW: &str = "invoke_workflow";
/// The operation of a model request's span.
pub const OP_CHAT: &str = "chat";
/// The operation of a tool call's span.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

/// What content spans may carry besides their attributes; none by default. The CLI reads
/// it from `OTEL_LOG_USER_PROMPTS` and `OTEL_LOG_TOOL_DETAILS`, as Claude Code does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordContent {
    /// An agent's prompt, on its `invoke_agent` span.
    pub prompts: bool,
    /// A tool call's input and result, on its `execute_tool` span.
    pub tool_details: bool,
    /// The most bytes of one piece of content recorded; the rest is cut.
    pub max_bytes: usize,
}

impl RecordContent {
    /// The cap on one piece of content when none is given.
    pub const DEFAULT_MAX_BYTES: usize = 16 * 1024;

    /// `text` cut to at most [`max_bytes`](Self::max_bytes), at a character boundary.
    pub fn clip<'a>(&self, text: &'a str) -> &'a str {
        if text.len() <= self.max_bytes {
            return text;
        }
        let mut end = self.max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    }
}

impl Default for RecordContent {
    fn default() -> Self {
        Self {
            prompts: false,
            tool_details: false,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// A span's exported name, `{operation} {what}`, written only when a subscriber reads it.
#[derive(Debug, Clone, Copy)]
pub struct SpanName<'a>(pub &'static str, pub &'a str);

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.1)
    }
}

/// The `chat {model}` span (CLIENT) of one model request to `url` of `provider`; retries
/// are its events, and [`record_chat`] fills in how it went.
pub fn chat_span(provider: &str, model: &str, url: &Url) -> Span {
    tracing::info_span!(
        target: TARGET,
        "chat",
        { OTEL_NAME } = %SpanName(OP_CHAT, model),
        { OTEL_KIND } = "client",
        { OTEL_STATUS_CODE } = Empty,
        { OTEL_STATUS_DESCRIPTION } = Empty,
        { GEN_AI_OPERATION_NAME } = OP_CHAT,
        { GEN_AI_PROVIDER_NAME } = provider,
        { GEN_AI_REQUEST_MODEL } = model,
        { SERVER_ADDRESS } = url.host_str().unwrap_or_default(),
        { SERVER_PORT } = i64::from(url.port_or_known_default().unwrap_or_default()),
        { GEN_AI_RESPONSE_ID } = Empty,
        { GEN_AI_RESPONSE_MODEL } = Empty,
        { GEN_AI_RESPONSE_FINISH_REASONS } = Empty,
        { GEN_AI_USAGE_INPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_OUTPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// Records on a `chat` span what its request brought: the response's id, model, finish
/// reason and usage, or the error.
pub fn record_chat(span: &Span, result: &Result<Response, ModelError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(response) => {
            span.record(GEN_AI_RESPONSE_ID, response.id.as_str());
            span.record(GEN_AI_RESPONSE_MODEL, response.model.as_str());
            if let Some(reason) = &response.stop_reason {
                if let Ok(serde_json::Value::String(reason)) = serde_json::to_value(reason) {
                    record_finish_reason(span, &reason);
                }
            }
            record_usage(span, &response.usage);
        }
        Err(e) => record_error(span, error_type(e), e),
    }
}

/// Records a response's finish reason as the conventions want it, a list of strings, where
/// the layer can set one; else as the plain field the span declared.
fn record_finish_reason(span: &Span, reason: &str) {
    if !crate::trace_bridge::record_strings(span, GEN_AI_RESPONSE_FINISH_REASONS, &[reason]) {
        span.record(GEN_AI_RESPONSE_FINISH_REASONS, reason);
    }
}

/// Records `usage` on a span that declared the usage fields (`chat`, `invoke_agent`).
pub fn record_usage(span: &Span, usage: &Usage) {
    // The conventions count cached input tokens as input tokens too.
    let input =
        usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
    span.record(GEN_AI_USAGE_INPUT_TOKENS, int(input));
    span.record(GEN_AI_USAGE_OUTPUT_TOKENS, int(usage.output_tokens));
    span.record(
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        int(usage.cache_read_input_tokens),
    );
    span.record(
        GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        int(usage.cache_creation_input_tokens),
    );
}

/// A count as a signed integer: `tracing-opentelemetry` exports an `i64` as an integer
/// attribute, but a `u64` as text.
pub fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Marks a span that declared the status and error fields as failed with `kind`, described
/// by `why`.
pub fn record_error(span: &Span, kind: &str, why: &dyn fmt::Display) {
    span.record(OTEL_STATUS_CODE, "error");
    span.record(ERROR_TYPE, kind);
    span.record(OTEL_STATUS_DESCRIPTION, tracing::field::display(why));
}

/// The conventions' `error.type` of a failed model request: the HTTP status the API
/// answered, the API's own error type mid-stream, or what kind of failure it was.
fn error_type(e: &ModelError) -> &str {
    match e {
        ModelError::Api { status, .. } => status_name(*status),
        ModelError::StreamError { kind, .. } => kind,
        ModelError::Connect { .. } => "connect",
        ModelError::Idle(_) => "timeout",
        ModelError::Protocol(_) | ModelError::Malformed { .. } => "malformed_response",
        ModelError::RetriesExhausted { last, .. } => error_type(last),
        _ => "_OTHER",
    }
}

/// An HTTP status as `error.type` wants it: its number, as text.
fn status_name(status: u16) -> &'static str {
    match status {
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        408 => "408",
        413 => "413",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        529 => "529",
        s if s >= 500 => "5xx",
        _ => "4xx",
    }
}

/// The `tracing` target of cadre's own metric reports: events (level TRACE) a subscriber
/// may turn into metrics, as the CLI's metrics layer does. See [`report_items_queued`].
pub const CADRE_METRICS_TARGET: &str = "cadre::metrics";
/// cadre's own: a workflow's items waiting for an agent (a whole number).
pub const CADRE_WORKFLOW_ITEMS_QUEUED: &str = "cadre.workflow.items_queued";
/// cadre's own: the workflow a report is of.
pub const CADRE_WORKFLOW_NAME: &str = "cadre.workflow.name";

/// How a model client reads the current span's W3C `traceparent`
/// (`00-{trace}-{span}-{flags}`) to send with each request, so the provider's side can join
/// the trace; given only by a program that exports traces and was asked to tell the
/// provider (a provider need not learn the run's ids). `None` from it: nothing is sent.
#[derive(Clone, Copy)]
pub struct TraceparentSource(pub fn() -> Option<String>);

impl PartialEq for TraceparentSource {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl Eq for TraceparentSource {}

impl fmt::Debug for TraceparentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TraceparentSource")
    }
}

/// Reports how many items of the workflow `workflow` wait for an agent: a workflow calls
/// it whenever that number changes, and a subscriber that wants metrics makes a gauge of it
/// (an event of target [`CADRE_METRICS_TARGET`] with the fields
/// [`CADRE_WORKFLOW_ITEMS_QUEUED`] and [`CADRE_WORKFLOW_NAME`]).
pub fn report_items_queued(workflow: &str, queued: u64) {
    // The names as the constants spell them: the macro takes no constant as an event's
    // first field (a unit test of the CLI's metrics layer, which reads them by the
    // constants, checks they agree).
    tracing::event!(
        target: CADRE_METRICS_TARGET,
        tracing::Level::TRACE,
        cadre.workflow.items_queued = queued,
        cadre.workflow.name = workflow
    );
}

// Hooks, compactions and MCP calls: the MCP conventions' names where they say something
// (`docs/gen-ai/mcp.md` of the same repository), cadre's own otherwise.

/// The operation of a hook run's span, `hook {event}` (cadre's own).
pub const OP_HOOK: &str = "hook";
/// cadre's own: the moment a hook ran at (`PreToolUse`, `Stop`, …).
pub const CADRE_HOOK_EVENT: &str = "cadre.hook.event";
/// cadre's own: the hook's command, as configured.
pub const CADRE_HOOK_COMMAND: &str = "cadre.hook.command";
/// cadre's own: what came of the hook (`ok`, `allowed`, `asked`, `denied`, `blocked`,
/// `stopped`, `failed`, `timed_out`, `cancelled`, `not_run`).
pub const CADRE_HOOK_DECISION: &str = "cadre.hook.decision";

/// The operation of a compaction's span, `compact {agent type}` (cadre's own).
pub const OP_COMPACT: &str = "compact";
/// cadre's own: what started a compaction (`auto`, or `manual` when a person asked).
pub const CADRE_COMPACTION_TRIGGER: &str = "cadre.compaction.trigger";
/// cadre's own: who wrote the summary (`server` or `cadre`).
pub const CADRE_COMPACTION_BY: &str = "cadre.compaction.by";
/// cadre's own: the input tokens the compaction read (the conversation it replaced).
pub const CADRE_COMPACTION_TOKENS_BEFORE: &str = "cadre.compaction.tokens_before";
/// cadre's own: the tokens of the summary that replaced it.
pub const CADRE_COMPACTION_TOKENS_AFTER: &str = "cadre.compaction.tokens_after";

/// An MCP request's method (`tools/call`); an MCP client span is `{method} {tool}`.
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// The MCP method of a tool call.
pub const MCP_TOOLS_CALL: &str = "tools/call";
/// `pipe` for a stdio MCP server, `tcp` for one over HTTP.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// cadre's own: the MCP server's name in the configuration.
pub const CADRE_MCP_SERVER: &str = "cadre.mcp.server";

/// The operation of a delivery's span, `deliver {member}` (cadre's own): the moment team
/// messages reach a member, linked to each sender's `SendMessage` call.
pub const OP_DELIVER: &str = "deliver";
/// cadre's own: the name of the team member messages were delivered to.
pub const CADRE_TEAM_MEMBER: &str = "cadre.team.member";
/// cadre's own: how many messages one delivery gave.
pub const CADRE_TEAM_MESSAGES: &str = "cadre.team.messages";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_cut_at_a_character_boundary() {
        let record = RecordContent {
            max_bytes: 4,
            ..RecordContent::default()
        };
        assert_eq!(record.clip("abc"), "abc");
        assert_eq!(record.clip("abcdef"), "abcd");
        // "é" is two bytes: the cut falls inside the second one.
        assert_eq!(record.clip("aéé"), "aé");
        assert!(!RecordContent::default().prompts);
    }

    #[test]
    fn error_types_are_few() {
        let api = |status| ModelError::Api {
            status,
            kind: "x".into(),
            message: "y".into(),
            retry_after: None,
        };
        assert_eq!(error_type(&api(429)), "429");
        assert_eq!(error_type(&api(599)), "5xx");
        let exhausted = ModelError::RetriesExhausted {
            attempts: 3,
            last: Box::new(ModelError::Idle(std::time::Duration::from_secs(1))),
        };
        assert_eq!(error_type(&exhausted), "timeout");
    }
}
