//! The property that keeps resume honest: for every run a model could lead the loop through
//! — text, tool calls (several in a turn, read-only and changing, bad input), `Task` calls,
//! paused turns, compactions, cleared results, errors and stops — rebuilding an agent from
//! any prefix of the journal yields exactly the history the live loop held at that point.
//! The live loop shows its history in every request it sends and in its outcome; each is
//! compared with the agent rebuilt from the journal as it stood at that moment.

use crate::definitions::registry::Registry;
use crate::definitions::spec::{AgentSpec, Mode};
use crate::record::journal::{Journal, JournalError};
use crate::run::context;
use crate::run::orchestrator::Orchestrator;
use crate::run::state::AgentState;
use crate::vocab::step::Step;
use async_trait::async_trait;
use cadre_model::{
    ContentBlock, EventSink, History, Message, Model, ModelError, Request, Response, Role,
    StopReason, Usage,
};
use cadre_tools::{Tool, ToolContext, ToolError, ToolOutput};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The context window the runs use: small, so a "big" turn crosses the thresholds.
const WINDOW: u64 = 10_000;

/// One tool call a scripted turn makes.
#[derive(Debug, Clone)]
enum Call {
    /// A read-only tool.
    Peek,
    /// A changing tool.
    Poke,
    /// Arguments that are not JSON.
    Bad,
    /// A `Task` call whose subagent follows the script with this index.
    Task(usize),
}

/// One model reply in a script.
#[derive(Debug, Clone)]
enum Turn {
    /// Tool calls; `big` reports a request near the window, so the loop makes room next.
    Tools { calls: Vec<Call>, big: bool },
    /// Text, and the server paused the turn.
    Pause,
    /// A `tool_use` stop with no calls.
    EmptyToolUse,
    /// The request is refused as too long: the loop compacts and asks again.
    TooLong,
    /// The request fails for good.
    Fail,
    /// The conversation ends with this stop.
    End(StopReason),
}

fn call(subagents: usize) -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => Just(Call::Peek),
        2 => Just(Call::Poke),
        1 => Just(Call::Bad),
        2 => (1..=subagents).prop_map(Call::Task),
    ]
}

fn turn(subagents: usize) -> impl Strategy<Value = Turn> {
    prop_oneof![
        10 => (prop::collection::vec(call(subagents), 1..4), prop::bool::weighted(0.4))
            .prop_map(|(calls, big)| Turn::Tools { calls, big }),
        1 => Just(Turn::Pause),
        1 => Just(Turn::EmptyToolUse),
        1 => Just(Turn::TooLong),
        1 => Just(Turn::Fail),
        1 => prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::MaxTokens),
            Just(StopReason::Refusal),
        ]
        .prop_map(Turn::End),
    ]
}

/// Scripts: the primary agent's first (its `Task` calls name the others), then two
/// subagents' (which delegate no further).
fn scripts() -> impl Strategy<Value = Vec<Vec<Turn>>> {
    let sub = || {
        prop::collection::vec(turn(1), 0..7).prop_map(|turns| {
            turns
                .into_iter()
                .map(|t| match t {
                    Turn::Tools { calls, big } => Turn::Tools {
                        calls: calls
                            .into_iter()
                            .map(|c| {
                                if matches!(c, Call::Task(_)) {
                                    Call::Peek
                                } else {
                                    c
                                }
                            })
                            .collect(),
                        big,
                    },
                    other => other,
                })
                .collect::<Vec<_>>()
        })
    };
    (prop::collection::vec(turn(2), 1..10), sub(), sub()).prop_map(|(main, a, b)| vec![main, a, b])
}

/// A model that follows each agent's script, found by the `script N` its first prompt
/// names, and notes what the journal held when each request came.
struct Scripted {
    scripts: Vec<Vec<Turn>>,
    journal: Arc<MemoryJournal>,
    /// Per agent path: its script and the next turn in it.
    place: Mutex<HashMap<String, (usize, usize)>>,
    /// Per request: the agent, how many steps the journal held, the messages sent.
    seen: Mutex<Vec<(String, usize, Vec<Message>)>>,
}

#[async_trait]
impl Model for Scripted {
    fn provider(&self) -> &str {
        "scripted"
    }

    async fn send(&self, request: Request, _events: EventSink<'_>) -> Result<Response, ModelError> {
        let path = request
            .origin
            .as_ref()
            .map(|o| o.path.clone())
            .unwrap_or_default();
        let asked =
            |m: &Message| m.role == Role::User && m.text().contains(context::SUMMARY_PROMPT);
        if request.messages.last().is_some_and(asked) {
            // cadre summarising the conversation: not a turn of the script.
            return Ok(reply(
                vec![ContentBlock::text("summary")],
                StopReason::EndTurn,
                10,
            ));
        }
        let held = self.journal.len();
        self.seen
            .lock()
            .unwrap()
            .push((path.clone(), held, request.messages.to_vec()));
        let (script, at) = {
            let mut place = self.place.lock().unwrap();
            let entry = place.entry(path.clone()).or_insert_with(|| {
                let first = request
                    .messages
                    .first()
                    .map(Message::text)
                    .unwrap_or_default();
                let n = first
                    .split("script ")
                    .nth(1)
                    .and_then(|n| n.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                (n, 0)
            });
            entry.1 += 1;
            (entry.0, entry.1 - 1)
        };
        let id = |i: usize| format!("toolu_{}_{at}_{i}", path.replace(['/', '#'], "_"));
        let Some(turn) = self.scripts[script].get(at) else {
            return Ok(reply(
                vec![ContentBlock::text(format!("{path} done"))],
                StopReason::EndTurn,
                100,
            ));
        };
        Ok(match turn {
            Turn::Tools { calls, big } => {
                let blocks = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| match c {
                        Call::Peek => ContentBlock::tool_use(id(i), "peek", json!({"n": i})),
                        Call::Poke => ContentBlock::tool_use(id(i), "poke", json!({"n": i})),
                        Call::Bad => {
                            let mut block = ContentBlock::tool_use(id(i), "peek", json!({}));
                            if let ContentBlock::ToolUse(t) = &mut block {
                                t.invalid_input = serde_json::from_value(
                                    json!({"text": "{oops", "error": "EOF while parsing"}),
                                )
                                .ok();
                            }
                            block
                        }
                        Call::Task(n) => ContentBlock::tool_use(
                            id(i),
                            "Task",
                            json!({"description": format!("job {n}"), "prompt": format!("Follow script {n} please"), "subagent_type": "worker"}),
                        ),
                    })
                    .collect();
                reply(
                    blocks,
                    StopReason::ToolUse,
                    if *big { WINDOW * 9 / 10 } else { 100 },
                )
            }
            Turn::Pause => reply(
                vec![ContentBlock::text("thinking on")],
                StopReason::PauseTurn,
                100,
            ),
            Turn::EmptyToolUse => reply(
                vec![ContentBlock::text("nothing to call")],
                StopReason::ToolUse,
                100,
            ),
            Turn::TooLong => {
                return Err(ModelError::Api {
                    status: 400,
                    kind: "invalid_request_error".into(),
                    message: "prompt is too long: 20000 tokens > 10000 maximum".into(),
                    retry_after: None,
                })
            }
            Turn::Fail => {
                return Err(ModelError::Api {
                    status: 400,
                    kind: "invalid_request_error".into(),
                    message: "no".into(),
                    retry_after: None,
                })
            }
            Turn::End(reason) => reply(
                vec![ContentBlock::text(format!("{path} ends"))],
                reason.clone(),
                100,
            ),
        })
    }
}

fn reply(content: Vec<ContentBlock>, stop: StopReason, input_tokens: u64) -> Response {
    Response {
        id: "msg".into(),
        model: "m".into(),
        role: Role::Assistant,
        content,
        stop_reason: Some(stop),
        stop_sequence: None,
        usage: Usage {
            input_tokens,
            output_tokens: 5,
            ..Usage::default()
        },
    }
}

/// A journal in memory, every step in the order appended.
#[derive(Default)]
struct MemoryJournal {
    steps: Mutex<Vec<Step>>,
}

impl MemoryJournal {
    fn len(&self) -> usize {
        self.steps.lock().unwrap().len()
    }
}

#[async_trait]
impl Journal for MemoryJournal {
    async fn append(&self, step: &Step) -> Result<(), JournalError> {
        self.steps.lock().unwrap().push(step.clone());
        Ok(())
    }

    async fn steps(&self, agent: &str) -> Result<Vec<Step>, JournalError> {
        let steps = self.steps.lock().unwrap();
        Ok(steps
            .iter()
            .filter(|s| s.agent().unwrap_or_default() == agent)
            .cloned()
            .collect())
    }
}

/// A tool that answers from its input: `peek` reads, `poke` counts as a change.
struct Echo(&'static str);

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        self.0
    }

    fn description(&self) -> String {
        format!("{} something", self.0)
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    }

    fn is_read_only(&self) -> bool {
        self.0 == "peek"
    }

    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ok(format!(
            "{} {input} {}",
            self.0,
            "x".repeat(200)
        )))
    }
}

fn spec(name: &str, mode: Mode, tools: &[&str]) -> AgentSpec {
    AgentSpec {
        name: name.into(),
        description: format!("{name} agent"),
        mode,
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        max_turns: 12,
        prompt: "Follow the script.".into(),
        ..AgentSpec::default()
    }
}

/// The rebuilt agent's history as the loop would send it.
fn as_sent(history: &History) -> Vec<Message> {
    let mut request = Request::new("m", 100, context::since_compaction(history));
    request.apply_prompt_caching();
    request.messages.to_vec()
}

fn check(scripts: Vec<Vec<Turn>>, compact: bool) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(MemoryJournal::default());
    let model = Arc::new(Scripted {
        scripts,
        journal: journal.clone(),
        place: Mutex::default(),
        seen: Mutex::default(),
    });
    let mut registry = Registry::default();
    registry.insert(spec("main", Mode::Primary, &["peek", "poke", "Task"]));
    registry.insert(spec("worker", Mode::Subagent, &["peek", "poke"]));
    let orchestrator = Orchestrator::builder()
        .model(model.clone())
        .model_id("m")
        .workspace(dir.path())
        .registry(registry)
        .tool(Echo("peek"))
        .tool(Echo("poke"))
        .context_tokens(WINDOW)
        // Without compaction, old tool results are cleared instead.
        .compact_at(compact.then_some(WINDOW))
        .journal(journal.clone())
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (outcome, _) = runtime
        .block_on(orchestrator.run("main", "Follow script 0 please"))
        .unwrap();

    let steps = journal.steps.lock().unwrap().clone();
    let rebuild = |path: &str, upto: usize| {
        AgentState::from_steps(
            steps[..upto]
                .iter()
                .filter(|s| s.agent() == Some(path))
                .cloned(),
        )
    };
    let seen = model.seen.lock().unwrap().clone();
    prop_assert!(!seen.is_empty());
    for (path, held, sent) in &seen {
        let rebuilt = rebuild(path, *held);
        prop_assert!(
            rebuilt.is_some(),
            "{path} had not started after {held} steps"
        );
        let rebuilt = rebuilt.unwrap();
        prop_assert_eq!(
            &as_sent(&rebuilt.history),
            sent,
            "{} after {} steps",
            path,
            held
        );
    }
    let whole = rebuild("main", steps.len()).unwrap();
    prop_assert_eq!(&whole.history, &outcome.history);
    prop_assert_eq!(
        (whole.turns, whole.tool_calls),
        (outcome.turns, outcome.tool_calls)
    );
    prop_assert_eq!(whole.usage, outcome.usage);
    // Every prefix rebuilds, and one that ends the turn leaves a history the API takes.
    for upto in 0..=steps.len() {
        for path in seen.iter().map(|(p, _, _)| p) {
            if let Some(state) = rebuild(path, upto) {
                if state.pending.is_none() {
                    prop_assert!(alternates(&state.history), "{path} after {upto} steps");
                }
            }
        }
    }
    Ok(())
}

/// Whether roles alternate, starting with the user.
fn alternates(history: &[Message]) -> bool {
    history.first().is_none_or(|m| m.role == Role::User)
        && history.windows(2).all(|w| w[0].role != w[1].role)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn rebuilding_from_any_prefix_of_the_journal_gives_the_live_history(
        scripts in scripts(),
        compact in prop::bool::ANY,
    ) {
        check(scripts, compact)?;
    }
}
