//! The agent loop end to end: the real Anthropic client and real tools against the shared
//! mock Messages API server on 127.0.0.1.

// Test helpers outside #[test] functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cadre_core::{Agent, AgentConfig, AgentOutcome, Budget, Event, StopKind, ToolSet};
use cadre_model::{Message, RetryPolicy};
use cadre_testkit::{Block, Match, MockServer, Reply};
use cadre_tools::{builtin_tools, ToolContext, Workspace};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Run {
    outcome: AgentOutcome,
    events: Vec<Event>,
}

#[path = "common/mock.rs"]
mod mock;
use mock::{mock_builder, mock_model};

fn agent(
    server: &MockServer,
    dir: &std::path::Path,
    max_turns: u32,
    budget: Option<u64>,
) -> (Agent, Arc<Mutex<Vec<Event>>>) {
    let model = mock_model(server, 2);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let agent = Agent {
        config: AgentConfig {
            path: "main".into(),
            agent_type: "main".into(),
            model: "claude-sonnet-5-5".into(),
            system: "You are a test agent.".into(),
            max_tokens: 1024,
            max_turns,
            context_tokens: 200_000,
            compact_at: None,
            effort: None,
            answer: None,
            fork: None,
            continuations: 0,
        },
        model,
        tools: ToolSet::new(builtin_tools()),
        ctx: ToolContext::new(Arc::new(Workspace::new(dir).unwrap())),
        budget: Budget::new(budget),
        events: Arc::new(move |e| sink.lock().unwrap().push(e)),
        limiter: None,
        transcript: None,
        journal: None,
        inbox: None,
        team: None,
        hooks: None,
        permissions: None,
        content: Default::default(),
    };
    (agent, seen)
}

async fn run_with(
    server: &MockServer,
    dir: &std::path::Path,
    max_turns: u32,
    budget: Option<u64>,
) -> Run {
    let (agent, seen) = agent(server, dir, max_turns, budget);
    let outcome = agent.run(vec![Message::user_text("do the task")]).await;
    let events = seen.lock().unwrap().clone();
    Run { outcome, events }
}

/// The tool_result blocks of the user message of request `n`'s last message.
fn tool_results(server: &MockServer, n: usize) -> Vec<Value> {
    let req = &server.requests()[n];
    let last = req.messages().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    last["content"].as_array().unwrap().clone()
}

// ---------------------------------------------------------------------------------------
// The orchestrator: typed subagents through the `Task` tool.

#[path = "agent/fleet.rs"]
mod fleet;

// ---------------------------------------------------------------------------------------
// Skills (Agent Skills format, loaded on demand) and Claude Code agent files.

#[path = "agent/skills_and_claude_code.rs"]
mod skills_and_claude_code;

// ---------------------------------------------------------------------------------------
// Per-agent limits: tokens over a subtree, turns, wall time; a `Task` call only tightens them,
// and an agent stopped by one takes its subagents down with it.

#[path = "agent/limits.rs"]
mod limits;

// ---------------------------------------------------------------------------------------
// Faults: nothing a tool or the model does takes the run down, and limits hold.

#[path = "agent/faults.rs"]
mod faults;

// ---------------------------------------------------------------------------------------
// Randomised input: the loaders never panic and always say what is wrong.

#[path = "agent/fuzz.rs"]
mod fuzz;

// ---------------------------------------------------------------------------------------
// The corpus: files as users bring them (Claude Code agent files, published skills, loose
// cadre YAML) load, each repair a warning at its place.

#[path = "agent/corpus.rs"]
mod corpus;

/// MCP servers end to end: the real `cadre-test-mcp` server (rmcp) over stdio and streamable
/// HTTP, its tools offered to the agents their types allow, results reaching the model.
#[cfg(feature = "mcp")]
#[path = "agent/mcp.rs"]
mod mcp;

/// Long runs: server-side compaction past the threshold, on demand, and cadre's own summary
/// for servers without it.
#[path = "agent/compaction.rs"]
mod compaction;

/// Background subagents: `Task` with `run_in_background`, `TaskOutput`, `TaskStop`, and the
/// results a parent had not collected when it ended its turn.
#[path = "agent/background.rs"]
mod background;

/// Parallel writers: subagents of an `isolation: worktree` type, each in its own git
/// worktree and branch, on a real repository.
#[path = "agent/worktrees.rs"]
mod worktrees;

#[path = "agent/schemas.rs"]
mod schemas;

#[path = "agent/builder.rs"]
mod builder;

#[path = "agent/single_agent.rs"]
mod single_agent;

/// Teams: named members that stay, message each other exactly once and in order, share a
/// task list claimed atomically, and stop at their caps.
#[path = "agent/team.rs"]
mod team;

/// The team protocol driven step by step through every ending of a member's request against
/// every point a message may reach it, and resumed from every prefix of the journal.
#[path = "agent/interleave.rs"]
mod interleave;

/// Results that arrive whole: long reports kept in the run folder and read back, answers
/// cut at max_tokens continued, and outcomes reported as they happened.
#[path = "agent/results.rs"]
mod results;

/// Typed answers: an output schema on a `Task` call or an agent type, checked and retried,
/// `run_typed`, and per-type effort.
#[path = "agent/typed.rs"]
mod typed;

/// Forks: a subagent that starts from its parent's conversation and reads it from the
/// prompt cache.
#[path = "agent/forks.rs"]
mod forks;
/// Hooks as Claude Code users write them: real scripts around tool calls, stops, subagents
/// and prompts, their decisions journaled.
#[path = "agent/hooks.rs"]
mod hooks;

/// The shape of the code: no circle between files, the log and the vocabulary beneath the
/// loop, and the length limits of files and functions.
#[path = "agent/structure.rs"]
mod structure;

/// The public surface reachable from the crate's root: a facade of at most 125 names.
#[path = "agent/surface.rs"]
mod surface;

/// Workflows: items run once each, remembered by content through a resume, a refused key
/// stopping all scheduling, bad input as its own outcome.
#[path = "agent/workflows.rs"]
mod workflows;
