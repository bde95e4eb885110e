//! The tools the server offers: one per agent type a subagent may be, named after it, with
//! the input a call takes and the checks that input passes before any run starts.

use crate::common::served::ServedCall;
use cadre_core::internal::schema_problem;
use cadre_core::internal::valid_model;
use cadre_core::{AgentSpec, Registry};
use cadre_model::Effort;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// The server's own limits, which a call may tighten and never loosen.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// `--max-turns`, which replaces each type's own when given.
    pub max_turns: Option<u32>,
    /// `--budget-tokens`: each call's run stops once it used this many.
    pub budget_tokens: Option<u64>,
}

/// One agent type served as a tool.
#[derive(Debug, Clone)]
pub struct AgentTool {
    /// The tool's name: the type's, after the prefix.
    pub name: String,
    /// The type, as the project defines it.
    pub spec: AgentSpec,
    /// What `tools/list` says of it.
    pub tool: Tool,
}

impl AgentTool {
    /// The most model requests a call may make: the server's `--max-turns`, else the type's.
    pub fn max_turns(&self, limits: &ServerLimits) -> u32 {
        limits.max_turns.unwrap_or(self.spec.max_turns)
    }
}

/// Every type of `registry` a subagent may be, as tools named `prefix` + its name; a type
/// whose name cannot be a tool's name, or that cannot start, is left out with a warning.
pub fn agent_tools(registry: &Registry, prefix: &str, limits: &ServerLimits) -> Vec<AgentTool> {
    let mut tools = Vec::new();
    for spec in registry.all().filter(|s| s.mode.is_subagent()) {
        let name = format!("{prefix}{}", spec.name);
        if let Some(why) = spec.unusable() {
            errln!("cadre: warning: not served: {why}");
            continue;
        }
        if !valid_tool_name(&name) {
            errln!(
                "cadre: warning: agent type {:?} is not served: {name:?} is no MCP tool name (1-128 of A-Z a-z 0-9 _ - .)",
                spec.name
            );
            continue;
        }
        let max_turns = limits.max_turns.unwrap_or(spec.max_turns);
        let mut tool = Tool::new(
            name.clone(),
            description(spec),
            Arc::new(input_schema(spec, max_turns, limits)),
        )
        .with_annotations(
            ToolAnnotations::new()
                .read_only(spec.read_only)
                .open_world(true),
        );
        if let Some(Value::Object(schema)) = declared_output(spec) {
            tool = tool.with_raw_output_schema(Arc::new(schema.clone()));
        }
        tools.push(AgentTool {
            name,
            spec: spec.clone(),
            tool,
        });
    }
    tools
}

/// The type's answer schema when it can be a tool's `outputSchema` (an object's schema,
/// as MCP's `structuredContent` is an object).
pub fn declared_output(spec: &AgentSpec) -> Option<&Value> {
    spec.output_schema
        .as_ref()
        .filter(|s| s.get("type").and_then(Value::as_str) == Some("object"))
}

/// What a client reads to choose the tool: the type's description, and what a call is.
fn description(spec: &AgentSpec) -> String {
    let what = spec.description.trim();
    let what = if what.is_empty() {
        format!("The cadre agent type {}.", spec.name)
    } else {
        what.to_owned()
    };
    let access = if spec.read_only {
        "It is read-only: it cannot change files (enforced by the kernel)."
    } else {
        "It may change files in the project."
    };
    format!(
        "{what}\n\nRuns a cadre agent of type {} on the prompt, in a fresh conversation, and returns its final answer. {access}",
        spec.name
    )
}

/// A name MCP accepts for a tool: 1–128 of `A-Z a-z 0-9 _ - .`.
fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The input schema of a type's tool: `prompt`, and the optional settings of one call.
fn input_schema(spec: &AgentSpec, max_turns: u32, limits: &ServerLimits) -> JsonObject {
    let budget = limits.budget_tokens;
    let whose = if limits.max_turns.is_some() {
        "the server's --max-turns"
    } else {
        "the type's limit"
    };
    let mut budget_tokens = json!({
        "type": "integer",
        "minimum": 1,
        "description": "Stop once the call's agents used this many tokens (input and output)."
    });
    if let Some(most) = budget {
        budget_tokens["maximum"] = most.into();
        budget_tokens["description"] =
            format!("Stop once the call's agents used this many tokens (at most {most}, the server's budget).").into();
    }
    let mut properties = json!({
        "prompt": {
            "type": "string",
            "description": "The complete, self-contained instructions: the agent sees nothing else (the goal, what is known, what to report back)."
        },
        "model": {
            "type": "string",
            "description": "The model id, or an alias (opus, sonnet, haiku); default: the type's own, else the server's."
        },
        "effort": {
            "type": "string",
            "enum": Effort::ALL.map(Effort::as_str),
            "description": "How much effort the model spends; default: the type's own, else the model's."
        },
        "max_turns": {
            "type": "integer",
            "minimum": 1,
            "maximum": max_turns,
            "description": format!("Most model requests the agent may make (at most {max_turns}, {whose}).")
        },
        "budget_tokens": budget_tokens,
    });
    if spec.output_schema.is_none() {
        properties["output_schema"] = json!({
            "type": "object",
            "description": "A JSON Schema (an object) the answer must be valid against; the answer is then that JSON, also as structuredContent."
        });
    }
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": ["prompt"],
        "additionalProperties": false,
    });
    match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// What a call may give, as it comes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Given {
    prompt: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    effort: Option<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    budget_tokens: Option<u64>,
    #[serde(default)]
    output_schema: Option<Value>,
}

/// One call, checked: what its run is given.
#[derive(Debug, Clone)]
pub struct Call {
    /// The task.
    pub prompt: String,
    /// The type and what the call changed of it, kept in the run folder for a resume.
    pub served: ServedCall,
    /// The type as this call runs it (as the run's primary agent, with the call's model,
    /// effort and answer schema).
    pub spec: AgentSpec,
}

/// Checks a call's `arguments` against `tool`; `Err` says, in words a caller can act on,
/// what is wrong.
pub fn check_call(
    tool: &AgentTool,
    arguments: Option<JsonObject>,
    limits: &ServerLimits,
) -> Result<Call, String> {
    let given: Given = serde_json::from_value(Value::Object(arguments.unwrap_or_default()))
        .map_err(|e| {
            let schema = if tool.spec.output_schema.is_none() {
                ", output_schema"
            } else {
                ""
            };
            format!(
                "bad arguments for {}: {e}; it takes prompt (required), model, effort, max_turns, budget_tokens{schema}",
                tool.name
            )
        })?;
    if given.prompt.trim().is_empty() {
        return Err("prompt is empty: say what the agent should do".into());
    }
    let mut served = settings(tool, &given)?;
    (served.max_turns, served.budget_tokens) = tightened(tool, &given, limits)?;
    Ok(Call {
        prompt: given.prompt,
        // The type runs as the primary agent of its own run; its subagents stay as they are.
        spec: served.apply(tool.spec.clone()),
        served,
    })
}

/// The call's model, effort and answer schema, each checked.
fn settings(tool: &AgentTool, given: &Given) -> Result<ServedCall, String> {
    let mut served = ServedCall {
        agent_type: tool.spec.name.clone(),
        ..ServedCall::default()
    };
    if let Some(model) = &given.model {
        if !valid_model(model) {
            return Err(format!(
                "model {model:?} is no model id nor alias (opus, sonnet, haiku)"
            ));
        }
        served.model = Some(model.clone());
    }
    if let Some(effort) = &given.effort {
        let level = Effort::parse(effort).ok_or_else(|| {
            format!(
                "effort {effort:?} is no level; the levels are {}",
                Effort::ALL.map(Effort::as_str).join(", ")
            )
        })?;
        served.effort = Some(level.as_str().to_owned());
    }
    if let Some(schema) = &given.output_schema {
        if tool.spec.output_schema.is_some() {
            return Err(format!(
                "{} answers with its type's own schema (the tool's outputSchema); leave out output_schema",
                tool.name
            ));
        }
        if let Some(why) = schema_problem(schema) {
            return Err(format!("output_schema is not usable: {why}"));
        }
        served.output_schema = Some(schema.clone());
    }
    Ok(served)
}

/// The call's turn limit and token budget: what it asks for, which may only tighten the
/// type's and the server's, else theirs.
fn tightened(
    tool: &AgentTool,
    given: &Given,
    limits: &ServerLimits,
) -> Result<(u32, Option<u64>), String> {
    let most_turns = tool.max_turns(limits);
    let max_turns = match given.max_turns {
        Some(0) => return Err("max_turns must be at least 1".into()),
        Some(n) if n > most_turns => {
            return Err(format!(
                "max_turns {n} would loosen the limit of {most_turns} turns; a call may only tighten it"
            ))
        }
        Some(n) => n,
        None => most_turns,
    };
    let budget_tokens = match (given.budget_tokens, limits.budget_tokens) {
        (Some(0), _) => return Err("budget_tokens must be at least 1".into()),
        (Some(n), Some(most)) if n > most => {
            return Err(format!(
                "budget_tokens {n} would loosen the server's budget of {most} tokens; a call may only tighten it"
            ))
        }
        (given, most) => given.or(most),
    };
    Ok((max_turns, budget_tokens))
}
