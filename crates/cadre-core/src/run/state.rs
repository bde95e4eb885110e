//! An agent rebuilt from its journaled steps: its history as the loop had built it, what it
//! had used, and the tool calls of its last turn that have no result yet.

use crate::record::journal::Step;
use crate::run::outcome::StopKind;
use cadre_model::{ContentBlock, Message, Role, StopReason, ToolUseBlock, Usage};
use std::collections::{HashMap, HashSet};

/// The state of one agent, as its steps leave it.
#[derive(Debug, Clone, Default)]
pub struct Rebuilt {
    /// Its type.
    pub agent_type: String,
    /// What it was asked to do.
    pub description: String,
    /// The conversation so far.
    pub history: Vec<Message>,
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
    pub spawned: HashMap<String, String>,
    /// Whether its last run ended by being cancelled (Ctrl-C): it may be resumed, or given
    /// a follow-up.
    pub cancelled: bool,
    /// The size of its last request (input and output tokens of the last response), to
    /// tell whether it must be compacted before it goes on.
    pub last_input: u64,
}

/// A turn whose tool calls were not all answered when the run stopped.
#[derive(Debug, Clone, Default)]
pub struct PendingTurn {
    /// The calls, in order.
    pub calls: Vec<ToolUseBlock>,
    /// Results journaled so far, by call id.
    pub results: HashMap<String, ContentBlock>,
    /// Calls journaled as started (changing tools only).
    pub started: HashSet<String>,
}

impl Rebuilt {
    /// Rebuilds an agent from `steps` (its own, in order); `None` when it never started.
    pub fn from_steps(steps: &[Step]) -> Option<Self> {
        let mut me: Option<Self> = None;
        for step in steps {
            match step {
                Step::Started {
                    agent_type,
                    description,
                    history,
                    ..
                } => {
                    me = Some(Self {
                        agent_type: agent_type.clone(),
                        description: description.clone(),
                        history: history.clone(),
                        ..Self::default()
                    });
                }
                other => {
                    if let Some(me) = &mut me {
                        me.apply(other);
                    }
                }
            }
        }
        me
    }

    fn apply(&mut self, step: &Step) {
        let was_cancelled = self.cancelled;
        self.cancelled = false;
        match step {
            Step::Response { response, .. } => {
                self.turns += 1;
                self.usage.add(&response.usage);
                self.last_input = response.usage.context_size();
                let message = crate::run::agent::sanitized(response);
                match self.history.last_mut() {
                    Some(last) if last.role == Role::Assistant => {
                        last.content.extend(message.content)
                    }
                    _ => self.history.push(message),
                }
                let stop = response.stop_reason.clone().unwrap_or(StopReason::EndTurn);
                match crate::run::agent::terminal(&stop) {
                    Some(kind) => self.finished = Some((kind, final_text(&self.history))),
                    None if stop == StopReason::ToolUse => {
                        let calls: Vec<ToolUseBlock> = response.tool_uses().cloned().collect();
                        if calls.is_empty() {
                            self.finished = Some((StopKind::Done, final_text(&self.history)));
                        } else {
                            self.tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
                            self.pending = Some(PendingTurn {
                                calls,
                                ..PendingTurn::default()
                            });
                        }
                    }
                    None => {}
                }
            }
            Step::ToolStarted { id, .. } => {
                if let Some(p) = &mut self.pending {
                    p.started.insert(id.clone());
                }
            }
            Step::ToolResult { result, .. } => {
                let ContentBlock::ToolResult(r) = result else {
                    return;
                };
                let Some(p) = &mut self.pending else {
                    return;
                };
                p.results.insert(r.tool_use_id.clone(), result.clone());
                if p.calls.iter().all(|c| p.results.contains_key(&c.id)) {
                    let results = p
                        .calls
                        .iter()
                        .filter_map(|c| p.results.remove(&c.id))
                        .collect();
                    self.history.push(Message::new(Role::User, results));
                    self.pending = None;
                }
            }
            Step::Spawned { call, child, .. } => {
                self.spawned.insert(call.clone(), child.clone());
            }
            Step::UserMessage { message, .. } => self.follow_up(message.clone()),
            Step::Compacted { history, usage, .. } => {
                self.history.clone_from(history);
                self.usage.add(usage);
                self.pending = None;
                self.last_input = 0;
                // Compacting an ended conversation (`/compact`) leaves it ended as it was,
                // so it still takes a follow-up.
                self.cancelled = was_cancelled;
            }
            // A cancelled agent (Ctrl-C) may be resumed like a killed one.
            Step::Finished {
                stop: StopKind::Cancelled,
                ..
            } => self.cancelled = true,
            Step::Finished { stop, text, .. } => self.finished = Some((stop.clone(), text.clone())),
            Step::Run { .. } | Step::Started { .. } => {}
        }
    }
}

impl Rebuilt {
    /// Adds a person's follow-up. A turn cut short by a cancel is closed first (its
    /// unanswered calls answered as cancelled), and a follow-up to a user message joins it,
    /// so the history stays valid for the API.
    pub fn follow_up(&mut self, message: Message) {
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
        }
        match self.history.last_mut() {
            Some(last) if last.role == Role::User => last.content.extend(message.content),
            _ => self.history.push(message),
        }
        self.finished = None;
        self.cancelled = false;
    }
}

/// The text of the last assistant message.
pub(crate) fn final_text(history: &[Message]) -> String {
    history
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(Message::text)
        .unwrap_or_default()
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
        let r = Rebuilt::from_steps(&steps).unwrap();
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
        let r = Rebuilt::from_steps(&cancelled).unwrap();
        assert!(r.cancelled);
        assert_eq!(r.history, compacted);
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
        let r = Rebuilt::from_steps(&steps).unwrap();
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
        let r = Rebuilt::from_steps(&more).unwrap();
        assert!(r.pending.is_none());
        assert_eq!(r.finished, Some((StopKind::Done, "all done".into())));
        more.push(Step::UserMessage {
            agent: "main".into(),
            message: Message::user_text("and then?"),
        });
        let r = Rebuilt::from_steps(&more).unwrap();
        assert!(r.finished.is_none());
        assert_eq!(r.history.last().unwrap().text(), "and then?");
        assert!(Rebuilt::from_steps(&steps[1..]).is_none());
    }
}
