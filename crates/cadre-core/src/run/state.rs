//! An agent's state as its steps leave it — the one place where a model response, tool
//! results, a compaction or a message become the next history.
//!
//! The live loop ([`crate::Agent`]) journals each step and then applies it here; a resumed
//! run folds the journal's steps through the same [`AgentState::apply`]. So a resumed agent
//! holds exactly the history the live one held at that step, and a rule changed here
//! changes both.

use crate::run::context;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::hooks::HookDecision;
use crate::vocab::hooks::HookEvent;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use cadre_model::{
    ContentBlock, History, Message, Response, Role, StopReason, ToolUseBlock, Usage,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// The state of one agent, as its steps leave it.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AgentState {
    /// Its type.
    pub agent_type: String,
    /// What it was asked to do.
    pub description: String,
    /// The conversation so far, shared with the requests that send it.
    pub history: History,
    /// Model requests made.
    pub turns: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tokens used.
    pub usage: Usage,
    /// The last turn's tool calls, in call order, while any has no result; with the results
    /// journaled so far.
    pub pending: Option<PendingTurn>,
    /// How it ended, when it did: journaled, or a last response that ends the loop.
    pub finished: Option<(StopKind, String)>,
    /// The subagent each of its `Task` calls started, by call id.
    pub spawned: HashMap<String, AgentPath>,
    /// Whether its last run ended by being cancelled (Ctrl-C): it may be resumed, or given
    /// a follow-up.
    pub cancelled: bool,
    /// The size of its last request (input and output tokens of the last response), to
    /// tell whether it must be compacted or cleared before it goes on; 0 once it was.
    pub last_input: u64,
    /// How many of its answers were rejected as not matching its output schema.
    pub rejected: u32,
    /// Whether its last wake (messages given after it had answered) held one a member wrote,
    /// not only cadre's notices: the turn it starts earns its starter a notice when it ends.
    pub woken: bool,
    /// How often in a row `Stop`-like hooks kept it going since its last new input; its
    /// next stop hook is told `stop_hook_active`, and past the bound it stops.
    pub stop_blocks: u32,
    /// The turns and tokens it had used when its last follow-up came (a user message after
    /// its journaled end: a person's, a fix round's), a new ask whose turn and token limits
    /// count from it. The loop's own messages (a continuation, background results) come
    /// before its end and are no new ask.
    pub before_follow_up: Option<(u32, u64)>,
    /// Whether the last step folded is a follow-up, nothing of which ran yet (one just made,
    /// whose time and subagents count from now; not one killed mid-turn and resumed).
    pub follow_up_unstarted: bool,
    /// Whether the last step folded was its journaled end.
    ended: bool,
}

/// A turn whose tool calls were not all answered yet.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PendingTurn {
    /// The calls, in order. Their input is in the history's last assistant message, not
    /// here: a fan-out of thousands of calls keeps one copy of it.
    pub calls: Vec<PendingCall>,
    /// Results journaled so far, by call id.
    pub results: HashMap<String, ContentBlock>,
    /// Calls journaled as started (changing tools only).
    pub started: HashSet<String>,
    /// What `PreToolUse` hooks decided for calls they did not refuse, by call id: a resumed
    /// run uses it instead of running the hooks again.
    pub hooked: HashMap<String, HookDecision>,
}

/// One call of a pending turn.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PendingCall {
    /// Its `tool_use` id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The call as the model sent it, kept only where the history holds a repaired copy
    /// (input that was not a JSON object), so the tool is told what was wrong.
    pub as_sent: Option<ToolUseBlock>,
}

impl AgentState {
    /// The pending turn's calls in call order, each with the call as the model sent it
    /// (`None` only if the history lost it, which no step does).
    pub fn pending_calls(&self) -> Vec<(&PendingCall, Option<&ToolUseBlock>)> {
        let Some(turn) = &self.pending else {
            return Vec::new();
        };
        let mut in_history: HashMap<&str, &ToolUseBlock> = HashMap::new();
        if let Some(last) = self.history.last().filter(|m| m.role == Role::Assistant) {
            for block in &last.content {
                if let ContentBlock::ToolUse(t) = block {
                    in_history.insert(&t.id, t);
                }
            }
        }
        turn.calls
            .iter()
            .map(|c| {
                let sent = c
                    .as_sent
                    .as_ref()
                    .or_else(|| in_history.get(c.id.as_str()).copied());
                (c, sent)
            })
            .collect()
    }
}

/// What the loop does next, as the state says.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Send the history to the model.
    Ask,
    /// Run the pending turn's calls that have no result yet.
    Answer,
    /// The conversation ended, so.
    End(StopKind),
}

/// What applying a step added to the history (for the transcript).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Nothing new in the history.
    Nothing,
    /// A new last message.
    Message,
    /// The last `n` blocks of the last message (a paused turn going on, a follow-up
    /// joining a user message).
    Blocks(usize),
    /// The history was replaced or rewritten (compaction, clearing).
    Rewritten,
}

impl AgentState {
    /// A fresh agent about to send `history` (normally one user message).
    pub fn new(agent_type: &str, description: &str, history: Vec<Message>) -> Self {
        Self {
            agent_type: agent_type.to_owned(),
            description: description.to_owned(),
            history: history.into(),
            ..Self::default()
        }
    }

    /// Rebuilds an agent from `steps` (its own, in order); `None` when it never started.
    pub fn from_steps(steps: impl IntoIterator<Item = Step>) -> Option<Self> {
        let mut me: Option<Self> = None;
        for step in steps {
            match step {
                Step::Started {
                    agent_type,
                    description,
                    history,
                    ..
                } => me = Some(Self::new(&agent_type, &description, history)),
                other => {
                    if let Some(me) = &mut me {
                        me.apply(other);
                    }
                }
            }
        }
        me
    }

    /// The turns made since its last follow-up (all of them without one): what its turn
    /// limit counts.
    pub fn turns_since_follow_up(&self) -> u32 {
        let before = self.before_follow_up.map_or(0, |(turns, _)| turns);
        self.turns.saturating_sub(before)
    }

    /// The tokens it used since its last follow-up (all of them without one): what its
    /// token limit counts of its own.
    pub fn tokens_since_follow_up(&self) -> u64 {
        let before = self.before_follow_up.map_or(0, |(_, tokens)| tokens);
        self.usage.total().saturating_sub(before)
    }

    /// What the loop does next.
    pub fn next(&self) -> Next {
        match (&self.finished, &self.pending) {
            (Some((stop, _)), _) => Next::End(stop.clone()),
            (None, Some(_)) => Next::Answer,
            (None, None) => Next::Ask,
        }
    }

    /// Folds one step into the state: the loop's rules, written once.
    pub fn apply(&mut self, step: Step) -> Added {
        let was_cancelled = self.cancelled;
        self.cancelled = false;
        let was_ended = self.ended;
        self.ended = matches!(step, Step::Finished { .. });
        self.follow_up_unstarted = false;
        match step {
            Step::Response { response, .. } => self.respond(response),
            Step::ToolStarted { id, .. } => {
                if let Some(p) = &mut self.pending {
                    p.started.insert(id);
                }
                Added::Nothing
            }
            Step::ToolResult { result, spent, .. } => {
                self.usage.add(&spent.map(|u| *u).unwrap_or_default()); // its workflow's
                self.answered(result)
            }
            Step::Spawned { call, child, .. } => {
                self.spawned.insert(call, child);
                Added::Nothing
            }
            Step::UserMessage { message, .. } => self.asked(message, was_ended),
            Step::Rejected { error, .. } => {
                self.rejected += 1;
                let retry = retry_message(&error);
                self.follow_up(Message::user_text(retry))
            }
            Step::Hooked {
                event,
                call,
                decision,
                ..
            } => self.hooked(event, call, decision),
            Step::Delivered { messages, .. } => {
                self.stop_blocks = 0;
                // Only a wake starts a turn; messages given with tool results join one.
                if self.finished.is_some() {
                    self.woken = messages.iter().any(|m| !m.notice);
                    // A new turn: its answer gets tries of its own.
                    self.rejected = 0;
                }
                let blocks = messages
                    .iter()
                    .map(|m| ContentBlock::text(m.render()))
                    .collect();
                self.follow_up(Message::new(Role::User, blocks))
            }
            Step::Compacted { history, usage, .. } => {
                self.history = history.into();
                self.usage.add(&usage);
                self.pending = None;
                self.last_input = 0;
                // Compacting an ended conversation (`/compact`) leaves it ended as it was,
                // so it still takes a follow-up, with its limits afresh.
                self.cancelled = was_cancelled;
                self.ended = was_ended;
                Added::Rewritten
            }
            Step::Cleared { keep, .. } => {
                context::clear_old_tool_results(&mut self.history, keep);
                self.last_input = 0;
                Added::Rewritten
            }
            // A cancelled agent (Ctrl-C) may be resumed like a killed one.
            Step::Finished {
                stop: StopKind::Cancelled,
                ..
            } => {
                self.cancelled = true;
                Added::Nothing
            }
            Step::Finished { stop, text, .. } => {
                self.finished = Some((stop, text));
                Added::Nothing
            }
            Step::Run { .. } | Step::Started { .. } | Step::Team { .. } => Added::Nothing,
        }
    }

    /// A new user message: after its journaled end (`was_ended`) a follow-up, whose limits
    /// count from here.
    fn asked(&mut self, message: Message, was_ended: bool) -> Added {
        self.stop_blocks = 0;
        self.rejected = 0;
        if was_ended {
            self.before_follow_up = Some((self.turns, self.usage.total()));
            self.follow_up_unstarted = true;
        }
        self.follow_up(message)
    }

    /// A hook's decision: a blocked stop goes on with its reason as the next user message,
    /// a stop ends the conversation, a call's decision waits for the call to run.
    fn hooked(&mut self, event: HookEvent, call: Option<String>, decision: HookDecision) -> Added {
        match decision {
            HookDecision::Continue { reason } => {
                self.stop_blocks += 1;
                self.follow_up(Message::user_text(format!(
                    "{event} hook feedback:\n{reason}"
                )))
            }
            HookDecision::Stop { reason } => {
                self.finished = Some((StopKind::Hook(reason), final_text(&self.history)));
                Added::Nothing
            }
            decision @ HookDecision::Call { .. } => {
                if let (Some(p), Some(id)) = (&mut self.pending, call) {
                    p.hooked.insert(id, decision);
                }
                Added::Nothing
            }
        }
    }

    /// A model response: a turn, its usage, the assistant message (joined to the last one
    /// when a paused turn goes on), and what it asks for next.
    fn respond(&mut self, response: Response) -> Added {
        self.turns += 1;
        self.usage.add(&response.usage);
        self.last_input = response.usage.context_size();
        let reason = response.stop_reason.clone().unwrap_or(StopReason::EndTurn);
        let calls: Vec<PendingCall> = response
            .tool_uses()
            .map(|t| PendingCall {
                id: t.id.clone(),
                name: t.name.clone(),
                as_sent: needs_repair(t).then(|| t.clone()),
            })
            .collect();
        let content = sanitized(response.content);
        let added = match self.history.last_mut() {
            Some(last) if last.role == Role::Assistant => {
                let n = content.len();
                last.content.extend(content);
                Added::Blocks(n)
            }
            _ => {
                self.history.push(Message::new(Role::Assistant, content));
                Added::Message
            }
        };
        match terminal(&reason) {
            Some(kind) => self.finished = Some((kind, final_text(&self.history))),
            // A tool_use stop without calls has nothing to answer: it ends the turn.
            None if reason == StopReason::ToolUse && calls.is_empty() => {
                self.finished = Some((StopKind::Done, final_text(&self.history)));
            }
            None if reason == StopReason::ToolUse => {
                self.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
                self.pending = Some(PendingTurn {
                    calls,
                    ..PendingTurn::default()
                });
            }
            // The server paused a long turn (pause_turn): sending the history back resumes it.
            None => {}
        }
        added
    }

    /// A tool's result: kept until every call of the turn has one, then one user message
    /// with all of them, in call order.
    fn answered(&mut self, result: ContentBlock) -> Added {
        let ContentBlock::ToolResult(r) = &result else {
            return Added::Nothing;
        };
        let Some(p) = &mut self.pending else {
            return Added::Nothing;
        };
        p.results.insert(r.tool_use_id.clone(), result);
        // Counted first: a turn of many calls (a fan-out) must not be scanned per result.
        if p.results.len() < p.calls.len() || !p.calls.iter().all(|c| p.results.contains_key(&c.id))
        {
            return Added::Nothing;
        }
        let results = p
            .calls
            .iter()
            .filter_map(|c| p.results.remove(&c.id))
            .collect();
        self.history.push(Message::new(Role::User, results));
        self.pending = None;
        Added::Message
    }

    /// Adds a user message to a conversation that ended (a person's follow-up, or work
    /// that reported after the agent's answer). A turn cut short by a cancel is closed first
    /// (its unanswered calls answered as cancelled), and a message that follows a user
    /// message joins it, so the history stays valid for the API.
    pub fn follow_up(&mut self, message: Message) -> Added {
        let mut added = Added::Nothing;
        if let Some(p) = self.pending.take() {
            let results = p
                .calls
                .iter()
                .map(|c| {
                    p.results.get(&c.id).cloned().unwrap_or_else(|| {
                        ContentBlock::tool_result(
                            &c.id,
                            "cancelled: the person interrupted this turn",
                            true,
                        )
                    })
                })
                .collect();
            self.history.push(Message::new(Role::User, results));
            added = Added::Rewritten;
        }
        self.finished = None;
        self.cancelled = false;
        match self.history.last_mut() {
            Some(last) if last.role == Role::User => {
                let n = message.content.len();
                last.content.extend(message.content);
                if added == Added::Nothing {
                    Added::Blocks(n)
                } else {
                    added
                }
            }
            _ => {
                self.history.push(message);
                if added == Added::Nothing {
                    Added::Message
                } else {
                    added
                }
            }
        }
    }
}

/// A response's content as history, with any unparsable or non-object tool input replaced
/// by `{}` (and the note of it dropped) so the history stays valid for the API.
fn sanitized(mut content: Vec<ContentBlock>) -> Vec<ContentBlock> {
    for block in &mut content {
        if let ContentBlock::ToolUse(t) = block {
            if needs_repair(t) {
                t.invalid_input = None;
                t.input = Value::Object(Default::default());
            }
        }
    }
    content
}

/// Whether a call's input cannot go back to the API as it is (not JSON, or not an object).
fn needs_repair(call: &ToolUseBlock) -> bool {
    call.invalid_input.is_some() || !call.input.is_object()
}

/// The outcome a stop reason ends the loop with, or `None` when the loop goes on
/// (`tool_use`, `pause_turn`, `compaction`).
pub(crate) fn terminal(reason: &StopReason) -> Option<StopKind> {
    match reason {
        StopReason::ToolUse | StopReason::PauseTurn | StopReason::Compaction => None,
        StopReason::EndTurn | StopReason::StopSequence => Some(StopKind::Done),
        StopReason::MaxTokens => Some(StopKind::MaxTokens),
        StopReason::Refusal => Some(StopKind::Refusal),
        StopReason::ModelContextWindowExceeded => Some(StopKind::ContextWindowExceeded),
        StopReason::Other(other) => Some(StopKind::Other(other.clone())),
    }
}

/// What the model is told when its answer was invalid.
pub fn retry_message(error: &str) -> String {
    format!(
        "Your final answer was not accepted: {error}. Answer again with only the JSON value that matches the output schema, nothing before or after it."
    )
}

/// The final answer: the text of the last assistant message, joined after the pieces it
/// continues when it was cut and asked to go on.
pub(crate) fn final_text(history: &[Message]) -> String {
    crate::run::continuation::answer(history)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_model::Response;
    use serde_json::json;

    fn response(json: serde_json::Value) -> Step {
        Step::Response {
            agent: "main".into(),
            response: serde_json::from_value::<Response>(json).unwrap(),
        }
    }

    fn tool_use(ids: &[&str]) -> Step {
        let content: Vec<_> = ids
            .iter()
            .map(|id| json!({"type": "tool_use", "id": id, "name": "bash", "input": {}}))
            .collect();
        response(
            json!({"id": "m", "type": "message", "role": "assistant", "model": "x",
            "content": content, "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 2}}),
        )
    }

    fn result(id: &str) -> Step {
        Step::ToolResult {
            agent: "main".into(),
            result: ContentBlock::tool_result(id, "ok", false),
            spent: None,
        }
    }

    #[test]
    fn a_compaction_replaces_the_history_and_counts_its_tokens() {
        let compacted = vec![Message::new(
            Role::Assistant,
            vec![serde_json::from_value(json!({"type": "compaction", "content": "s"})).unwrap()],
        )];
        let mut cost = Usage::default();
        cost.compaction.count = 1;
        cost.compaction.input_tokens = 900;
        let steps = vec![
            Step::Started {
                agent: "main".into(),
                agent_type: "main".into(),
                description: "d".into(),
                history: vec![Message::user_text("go")],
            },
            tool_use(&["a"]),
            result("a"),
            Step::Compacted {
                agent: "main".into(),
                history: compacted.clone(),
                usage: cost,
            },
        ];
        let r = AgentState::from_steps(steps.clone()).unwrap();
        assert_eq!(r.history, compacted);
        assert_eq!(r.usage.compaction.count, 1);
        assert_eq!(r.usage.total(), 12 + 900);
        assert_eq!(r.last_input, 0);
        assert!(r.pending.is_none() && r.finished.is_none());

        // A cancelled conversation compacted by `/compact` still takes a follow-up.
        let mut cancelled = steps[..3].to_vec();
        cancelled.push(Step::Finished {
            agent: "main".into(),
            stop: StopKind::Cancelled,
            text: String::new(),
        });
        cancelled.push(steps[3].clone());
        let r = AgentState::from_steps(cancelled.clone()).unwrap();
        assert!(r.cancelled);
        assert_eq!(r.history, compacted);
        // And its follow-up is one still: its limits count from it.
        cancelled.push(Step::UserMessage {
            agent: "main".into(),
            message: Message::user_text("go on"),
        });
        let r = AgentState::from_steps(cancelled).unwrap();
        assert_eq!(r.before_follow_up, Some((1, 12 + 900)));
    }

    fn text_reply(text: &str) -> Step {
        response(
            json!({"id": "m", "type": "message", "role": "assistant", "model": "x",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2}}),
        )
    }

    fn hooked(event: HookEvent, call: Option<&str>, decision: HookDecision) -> Step {
        Step::Hooked {
            agent: "main".into(),
            event,
            call: call.map(str::to_owned),
            decision,
        }
    }

    #[test]
    fn hook_decisions_fold_like_the_live_loop_acted_on_them() {
        let mut s = AgentState::new("main", "d", vec![Message::user_text("go")]);
        s.apply(text_reply("done"));
        assert!(matches!(s.next(), Next::End(StopKind::Done)));
        // A blocked stop: the reason is the next user message, and the loop asks again.
        let keep_going = HookDecision::Continue {
            reason: "tests fail".into(),
        };
        s.apply(hooked(HookEvent::Stop, None, keep_going));
        assert_eq!(s.next(), Next::Ask);
        assert_eq!(s.stop_blocks, 1);
        let last = s.history.last().unwrap();
        assert_eq!(last.role, Role::User);
        assert_eq!(last.text(), "Stop hook feedback:\ntests fail");
        // A call's decision waits with its turn, for a resumed run to use.
        s.apply(tool_use(&["a"]));
        let decision = HookDecision::Call {
            permission: None,
            input: Some(json!({"command": "ls"})),
            context: None,
        };
        s.apply(hooked(HookEvent::PreToolUse, Some("a"), decision.clone()));
        assert_eq!(s.pending.as_ref().unwrap().hooked.get("a"), Some(&decision));
        s.apply(result("a"));
        assert!(s.pending.is_none());
        // New input resets the count; a stop ends the conversation with the hook's reason.
        s.apply(Step::UserMessage {
            agent: "main".into(),
            message: Message::user_text("more"),
        });
        assert_eq!(s.stop_blocks, 0);
        let stop = HookDecision::Stop {
            reason: "enough".into(),
        };
        s.apply(hooked(HookEvent::PostToolUse, Some("a"), stop));
        assert_eq!(s.next(), Next::End(StopKind::Hook("enough".into())));
    }

    #[test]
    fn a_half_answered_turn_is_pending_and_a_whole_one_is_history() {
        let started = Step::Started {
            agent: "main".into(),
            agent_type: "main".into(),
            description: "d".into(),
            history: vec![Message::user_text("go")],
        };
        let steps = vec![
            started.clone(),
            tool_use(&["a"]),
            result("a"),
            tool_use(&["b", "c"]),
            Step::ToolStarted {
                agent: "main".into(),
                id: "c".into(),
                name: "bash".into(),
            },
            result("b"),
        ];
        let r = AgentState::from_steps(steps.clone()).unwrap();
        assert_eq!(r.history.len(), 4, "{:?}", r.history);
        assert_eq!((r.turns, r.tool_calls, r.usage.input_tokens), (2, 3, 20));
        let p = r.pending.unwrap();
        assert_eq!(p.calls.len(), 2);
        assert!(p.results.contains_key("b") && p.started.contains("c"));
        assert!(r.finished.is_none());

        let mut more = steps.clone();
        more.push(result("c"));
        more.push(response(
            json!({"id": "m", "type": "message", "role": "assistant",
            "model": "x", "content": [{"type": "text", "text": "all done"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}),
        ));
        let r = AgentState::from_steps(more.clone()).unwrap();
        assert!(r.pending.is_none());
        assert_eq!(r.finished, Some((StopKind::Done, "all done".into())));
        more.push(Step::UserMessage {
            agent: "main".into(),
            message: Message::user_text("and then?"),
        });
        let r = AgentState::from_steps(more.clone()).unwrap();
        assert!(r.finished.is_none());
        assert_eq!(r.history.last().unwrap().text(), "and then?");
        // A message the loop gives before the agent's end (a continuation, its background
        // work's results) is no new ask: its limits still count every turn.
        assert_eq!((r.turns, r.usage.total()), (3, 26));
        assert_eq!(r.turns_since_follow_up(), 3);
        // After its journaled end, a follow-up's limits count from it.
        more.pop();
        more.push(Step::Finished {
            agent: "main".into(),
            stop: StopKind::MaxTurns,
            text: "all done".into(),
        });
        more.push(Step::UserMessage {
            agent: "main".into(),
            message: Message::user_text("and then?"),
        });
        let r = AgentState::from_steps(more.clone()).unwrap();
        assert!(r.finished.is_none());
        assert_eq!(
            (r.turns_since_follow_up(), r.tokens_since_follow_up()),
            (0, 0)
        );
        more.push(tool_use(&["d"]));
        let r = AgentState::from_steps(more).unwrap();
        assert_eq!(
            (r.turns_since_follow_up(), r.tokens_since_follow_up()),
            (1, 12)
        );
        assert!(AgentState::from_steps(steps[1..].to_vec()).is_none());
    }
}
