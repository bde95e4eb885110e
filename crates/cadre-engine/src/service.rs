//! The Restate objects a worker serves beside `CadreAgent` (which runs one agent per
//! invocation, in [`crate::driver`]): the `CadreRun` object (one per run id) holds what the
//! whole tree shares — its model slots, its token budget and the primary invocation to
//! cancel; the `CadreRoster` object (one per run id) holds the live roster.

use crate::wire::{Acquire, AgentTranscript, Grant, Progress};
use cadre_core::AgentPath;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// What the `CadreRun` object keeps about its slots and budget.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Slots {
    /// Slots handed out and not yet given back.
    used: u32,
    /// Awakeables waiting for a slot, in the order they asked, with the budget they carry.
    queue: VecDeque<(String, Option<u64>)>,
    /// Tokens the whole tree has used.
    tokens: u64,
}

impl Slots {
    /// A slot given back: the next in line gets it (its awakeable resolved in `ctx`), else
    /// it is free.
    fn pass_on(&mut self, ctx: &ObjectContext<'_>) {
        match self.queue.pop_front() {
            Some((awakeable, budget)) => {
                ctx.resolve_awakeable(&awakeable, Json(self.grant(budget)));
            }
            None => self.used = self.used.saturating_sub(1),
        }
    }

    /// A slot handed out now, under the token budget `budget`.
    fn grant(&self, budget: Option<u64>) -> Grant {
        Grant {
            exhausted: budget.is_some_and(|b| self.tokens >= b),
        }
    }
}

const SLOTS: &str = "slots";
const ROSTER: &str = "roster";
const ROOT: &str = "root";
/// The prefix of the keys agents' transcripts are kept under.
const TRANSCRIPT: &str = "transcript:";

/// What the whole tree of one run shares, keyed by the run id.
pub struct CadreRun;

#[restate_sdk::object]
impl CadreRun {
    /// Remembers the primary agent's invocation, which `cancel` cancels.
    #[handler]
    async fn open(&self, ctx: ObjectContext<'_>, root: String) -> Result<(), HandlerError> {
        ctx.set(ROOT, root);
        Ok(())
    }

    /// Cancels the run's primary invocation (Restate cancels every call below it); false
    /// when the run never started.
    #[handler]
    async fn cancel(&self, ctx: ObjectContext<'_>) -> Result<bool, HandlerError> {
        match ctx.get::<String>(ROOT).await? {
            Some(root) => {
                ctx.invocation_handle(root).cancel();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Cancels the invocations `ids` (a workflow run's items, each a primary invocation of
    /// its own; Restate cancels every call below each).
    #[handler]
    async fn cancel_items(
        &self,
        ctx: ObjectContext<'_>,
        Json(ids): Json<Vec<String>>,
    ) -> Result<(), HandlerError> {
        for id in ids {
            ctx.invocation_handle(id).cancel();
        }
        Ok(())
    }

    /// Asks for a model slot: the awakeable is resolved now when one is free, else when one
    /// is given back.
    #[handler]
    async fn acquire(
        &self,
        ctx: ObjectContext<'_>,
        Json(ask): Json<Acquire>,
    ) -> Result<(), HandlerError> {
        let mut slots = ctx.get::<Json<Slots>>(SLOTS).await?.unwrap_or_default().0;
        if slots.used < ask.max_parallel.max(1) {
            slots.used += 1;
            ctx.resolve_awakeable(&ask.awakeable, Json(slots.grant(ask.budget_tokens)));
        } else {
            slots.queue.push_back((ask.awakeable, ask.budget_tokens));
        }
        ctx.set(SLOTS, Json(slots));
        Ok(())
    }

    /// Gives a slot back with the tokens its request used: the next in line gets it.
    #[handler]
    async fn release(&self, ctx: ObjectContext<'_>, tokens: u64) -> Result<(), HandlerError> {
        let mut slots = ctx.get::<Json<Slots>>(SLOTS).await?.unwrap_or_default().0;
        slots.tokens = slots.tokens.saturating_add(tokens);
        slots.pass_on(&ctx);
        ctx.set(SLOTS, Json(slots));
        Ok(())
    }

    /// Takes back the ask of the awakeable `awakeable`, whose agent stopped waiting for
    /// it (cancelled): its place in line while it is queued, else the slot it was granted
    /// (passed on), so that no slot is handed to an agent that will never give it back.
    /// The agent sent its `acquire` before this, and Restate delivers one invocation's
    /// calls to one object in the order they were sent: the ask is in line or granted.
    #[handler]
    async fn withdraw(
        &self,
        ctx: ObjectContext<'_>,
        awakeable: String,
    ) -> Result<(), HandlerError> {
        let mut slots = ctx.get::<Json<Slots>>(SLOTS).await?.unwrap_or_default().0;
        match slots.queue.iter().position(|(a, _)| *a == awakeable) {
            Some(at) => {
                slots.queue.remove(at);
            }
            None => slots.pass_on(&ctx),
        }
        ctx.set(SLOTS, Json(slots));
        Ok(())
    }

    /// Tokens the whole tree has used so far.
    #[handler]
    async fn tokens(&self, ctx: SharedObjectContext<'_>) -> Result<u64, HandlerError> {
        Ok(ctx
            .get::<Json<Slots>>(SLOTS)
            .await?
            .map_or(0, |s| s.0.tokens))
    }
}

/// The live roster of one run, keyed by the run id: a key of its own, so that progress
/// never waits in line behind the run's slots.
pub struct CadreRoster;

#[restate_sdk::object]
impl CadreRoster {
    /// Updates one agent's line of the roster (an ended one leaves it).
    #[handler]
    async fn progress(
        &self,
        ctx: ObjectContext<'_>,
        Json(line): Json<Progress>,
    ) -> Result<(), HandlerError> {
        let mut roster = ctx
            .get::<Json<BTreeMap<AgentPath, Progress>>>(ROSTER)
            .await?
            .unwrap_or_default()
            .0;
        if line.done {
            roster.remove(&line.path);
        } else {
            roster.insert(line.path.clone(), line);
        }
        ctx.set(ROSTER, Json(roster));
        Ok(())
    }

    /// The agents running now, by path.
    #[handler]
    async fn roster(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Vec<Progress>>, HandlerError> {
        let roster = ctx
            .get::<Json<BTreeMap<AgentPath, Progress>>>(ROSTER)
            .await?
            .unwrap_or_default()
            .0;
        Ok(Json(roster.into_values().collect()))
    }

    /// Keeps an ended agent's transcript for the client.
    #[handler]
    async fn keep(
        &self,
        ctx: ObjectContext<'_>,
        Json(transcript): Json<AgentTranscript>,
    ) -> Result<(), HandlerError> {
        ctx.set(&format!("{TRANSCRIPT}{}", transcript.path), transcript.text);
        Ok(())
    }

    /// The transcripts of the run's agents that have ended, by path.
    #[handler]
    async fn transcripts(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Vec<AgentTranscript>>, HandlerError> {
        let mut out = Vec::new();
        for key in ctx.get_keys().await? {
            let Some(path) = key.strip_prefix(TRANSCRIPT) else {
                continue;
            };
            if let Some(text) = ctx.get::<String>(&key).await? {
                out.push(AgentTranscript {
                    path: path.into(),
                    text,
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Json(out))
    }
}
