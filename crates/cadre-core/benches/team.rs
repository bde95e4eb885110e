//! Team benchmark: how fast a message reaches its recipient, and many messages among many
//! members.
//!
//! In process (a `Model` implementation answering at once), a primary agent starts M named
//! members and, once all have joined, tells them to go. Each member then starts a token: a
//! message `hop 1 tok i` to the next member; whoever is given a token with hop h < H passes
//! `hop h+1` on to the member after it. So M tokens travel the ring at once, M·H messages
//! in all. The benchmark prints the wall time, the
//! messages per second, the CPU time per message, and the time from each send (its
//! `Message` event) to the request that carries it to the recipient (median, p99, max) —
//! the team's own cost, since the model answers at once.
//!
//! Run: `cargo bench -p cadre-core --bench team` (CADRE_BENCH_MEMBERS and CADRE_BENCH_HOPS
//! change M and H; the defaults are 2 × 500 and 16 × 63, about a thousand messages each).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use cadre_core::{AgentSpec, Event, Limits, Mode, Orchestrator, StopKind, TeamLimits};
use cadre_model::{
    ContentBlock, EventSink, Model, ModelError, Request, Response, Role, StopReason, Usage,
};
use cadre_tools::Workspace;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When each message was sent, and when the request carrying it arrived, by its text.
#[derive(Default)]
struct Clock {
    sent: HashMap<String, Instant>,
    carried: HashMap<String, Instant>,
}

struct RingModel {
    members: usize,
    hops: usize,
    ids: AtomicU64,
    clock: Arc<Mutex<Clock>>,
}

fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[async_trait]
impl Model for RingModel {
    fn provider(&self) -> &str {
        "bench"
    }

    async fn send(&self, request: Request, _events: EventSink<'_>) -> Result<Response, ModelError> {
        let now = Instant::now();
        let first = text_of(&request.messages[0].content);
        let last = request
            .messages
            .last()
            .map(|m| text_of(&m.content))
            .unwrap_or_default();
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let id = || format!("toolu_{}", self.ids.fetch_add(1, Ordering::Relaxed));
        let send = |to: usize, text: String| {
            ContentBlock::tool_use(
                id(),
                "SendMessage",
                json!({"to": format!("m{to}"), "message": text}),
            )
        };
        let (content, stop) = if first.starts_with("Start the ring") {
            if turn == 1 {
                // Every member has joined (each Task call returned): the ring may start.
                let go = ContentBlock::tool_use(
                    id(),
                    "SendMessage",
                    json!({"to": "*", "message": "go"}),
                );
                (vec![go], StopReason::ToolUse)
            } else if turn == 0 {
                let tasks = (0..self.members)
                    .map(|i| {
                        ContentBlock::tool_use(
                            id(),
                            "Task",
                            json!({"description": format!("member {i}"), "prompt": format!("member {i}"), "subagent_type": "ring", "name": format!("m{i}")}),
                        )
                    })
                    .collect();
                (tasks, StopReason::ToolUse)
            } else {
                (vec![ContentBlock::text("ring done")], StopReason::EndTurn)
            }
        } else {
            let me: usize = first
                .trim_start_matches("member ")
                .trim()
                .parse()
                .unwrap_or(0);
            let next = (me + 1) % self.members;
            let mut calls = Vec::new();
            // A token starts once the lead says go: a member that sent before the next
            // one joined would be refused, and its token lost.
            if last.lines().any(|l| l.trim() == "go") {
                calls.push(send(next, format!("hop 1 tok {me}")));
            }
            let mut clock = self.clock.lock().unwrap();
            for line in last.lines().filter(|l| l.starts_with("hop ")) {
                clock.carried.entry(line.to_owned()).or_insert(now);
                let mut parts = line.split_whitespace();
                let hop: usize = parts.nth(1).and_then(|h| h.parse().ok()).unwrap_or(0);
                let tok = parts.nth(1).unwrap_or("0").to_owned();
                if hop < self.hops {
                    calls.push(send(next, format!("hop {} tok {tok}", hop + 1)));
                }
            }
            if calls.is_empty() {
                (vec![ContentBlock::text("passed on")], StopReason::EndTurn)
            } else {
                (calls, StopReason::ToolUse)
            }
        };
        Ok(Response {
            id: "msg_bench".into(),
            model: request.model,
            role: Role::Assistant,
            content,
            stop_reason: Some(stop),
            stop_sequence: None,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                ..Usage::default()
            },
        })
    }
}

fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(u.user_time()) + tv(u.system_time())
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

async fn ring(members: usize, hops: usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(Mutex::new(Clock::default()));
    let model = Arc::new(RingModel {
        members,
        hops,
        ids: AtomicU64::new(0),
        clock: clock.clone(),
    });
    let sends = clock.clone();
    let orchestrator = Orchestrator::builder()
        .workspace_handle(Arc::new(Workspace::new(dir.path()).unwrap()))
        .model(model)
        .model_id("claude-sonnet-5-5")
        // Every hop is a model turn of some member, and every notice one of the primary's.
        .agent(
            AgentSpec::builder("ring")
                .description("Passes tokens on.")
                .mode(Mode::Subagent)
                .tools(["read_file"])
                .read_only(true)
                .max_turns(u32::MAX)
                .prompt("You pass tokens on.")
                .build(),
        )
        .max_turns(u32::MAX)
        .limits(
            Limits::default()
                .max_parallel(64)
                .max_depth(2)
                .max_fanout(1_000),
        )
        .team(
            TeamLimits::default()
                .max_members(members)
                // The tokens' hops, and the lead's go to each member.
                .max_messages(members * hops + members)
                .max_unread(members * hops),
        )
        .on_event(move |e| {
            if let Event::Message {
                text,
                notice: false,
                ..
            } = e
            {
                if text.starts_with("hop ") {
                    sends.lock().unwrap().sent.insert(text, Instant::now());
                }
            }
        })
        .build()
        .unwrap();
    let cpu0 = cpu_time();
    let started = Instant::now();
    let (outcome, _) = orchestrator.run("main", "Start the ring").await.unwrap();
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu0;
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", outcome.stop);
    let clock = clock.lock().unwrap();
    let mut waits: Vec<Duration> = clock
        .carried
        .iter()
        .filter_map(|(text, at)| {
            clock
                .sent
                .get(text)
                .map(|s| at.saturating_duration_since(*s))
        })
        .collect();
    waits.sort();
    let messages = clock.sent.len();
    let pick = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "team ring M={members} H={hops}: messages={messages} wall {:.0} ms, {:.0} messages/s, cpu/message {:.3} ms, send→next request median {:.2} ms, p99 {:.2} ms, max {:.2} ms (carried {})",
        ms(wall),
        messages as f64 / wall.as_secs_f64(),
        ms(cpu) / messages.max(1) as f64,
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(*waits.last().unwrap()),
        waits.len(),
    );
    assert_eq!(
        waits.len(),
        messages,
        "a message never reached its recipient"
    );
    assert_eq!(
        messages,
        members * hops,
        "a token stopped before its last hop"
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let shapes = match (
        env_usize("CADRE_BENCH_MEMBERS"),
        env_usize("CADRE_BENCH_HOPS"),
    ) {
        (Some(m), Some(h)) => vec![(m, h)],
        _ => vec![(2, 500), (16, 63)],
    };
    for (m, h) in shapes {
        rt.block_on(ring(m, h));
    }
}
