//! A token budget shared by every agent of a run, and the budgets of agents with limits of
//! their own below it.
//!
//! The run's budget is one counter. An agent with a token or time limit gets a budget of
//! its own below its parent's: what it and its subagents use is counted there and in every
//! budget above, so its token limit covers its subtree the way the run's covers the tree.
//! When a subagent's tokens take an agent over its limit, that agent is tripped: its cancel
//! token is cancelled, which stops it and every subagent it started; it then ends for its
//! limit, they as cancelled. An agent's own response that takes it over is caught before
//! its next request, so a complete answer is not lost for the tokens it cost.

use crate::vocab::limits::AgentLimits;
use crate::vocab::outcome::StopKind;
use cadre_model::Usage;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Counts tokens across every agent of a run (or one agent's subtree) and says when a
/// limit is reached.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The counter this budget charges first: the run's, or an agent's own.
    own: Arc<Node>,
    /// The run's counter (the same as `own` for the run's budget).
    run: Arc<Node>,
    /// Whether `own` is this agent's own counter, not one a subagent without limits
    /// shares with the agent above it (whose tokens it counts).
    mine: bool,
}

/// One counter, with the counters above it.
#[derive(Debug, Default)]
struct Node {
    limit: Option<u64>,
    used: AtomicU64,
    /// The counter of the nearest agent above with limits, or the run's; `None` for the run's.
    above: Option<Arc<Node>>,
    /// The agent this counter limits: cancelled when the limit is reached (none for the run's).
    trip: Option<CancellationToken>,
    /// Why it was tripped: [`NOT_TRIPPED`], [`TOKENS`] or [`TIME`].
    tripped: AtomicU8,
    /// When the agent it limits runs out of time, once its time limit is running.
    deadline: OnceLock<Instant>,
    /// Whether the agent it limits waits idle (a team member between its turns), which
    /// its time limit does not count; made when its time limit starts.
    idle: OnceLock<watch::Sender<bool>>,
}

impl Default for Budget {
    /// An unlimited budget of its own.
    fn default() -> Self {
        Self::new(None)
    }
}

const NOT_TRIPPED: u8 = 0;
const TOKENS: u8 = 1;
const TIME: u8 = 2;

impl Node {
    /// Whether its limit is reached.
    fn over(&self) -> bool {
        self.limit
            .is_some_and(|l| self.used.load(Ordering::Relaxed) >= l)
    }

    /// Stops the agent it limits, for `why` (the first reason given stands).
    fn trip(&self, why: u8) {
        if let Some(trip) = &self.trip {
            let _ = self.tripped.compare_exchange(
                NOT_TRIPPED,
                why,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            trip.cancel();
        }
    }
}

impl Budget {
    /// A budget of `limit` tokens (input + output, cached included); `None` is unlimited.
    pub fn new(limit: Option<u64>) -> Self {
        let node = Arc::new(Node {
            limit,
            ..Node::default()
        });
        Self {
            own: node.clone(),
            run: node,
            mine: true,
        }
    }

    /// The budget of a run started from an agent whose budget this is (a workflow its
    /// `Workflow` tool starts): the new run's own counter, of `limit` tokens, below this
    /// one, so every token the new run spends counts here and in every budget above —
    /// the calling agent's limits and its run's budget stop the new run as they stop a
    /// subagent.
    pub(crate) fn nested(&self, limit: Option<u64>) -> Self {
        let node = Arc::new(Node {
            limit,
            above: Some(self.own.clone()),
            ..Node::default()
        });
        Self {
            own: node.clone(),
            run: node,
            mine: true,
        }
    }

    /// This budget as a subagent without limits of its own shares it: what it uses counts
    /// here, and taking an agent above over its limit trips that agent.
    pub(crate) fn inherited(&self) -> Self {
        Self {
            mine: false,
            ..self.clone()
        }
    }

    /// The budget of an agent below this one that may use `limit` tokens with its
    /// subagents, `used` of them already (by earlier parts of a resumed run); reaching it
    /// through a subagent's tokens, or [`time_up`](Self::time_up), cancels `trip`.
    ///
    /// An agent above that is over its limit already is tripped now: a subagent of its
    /// never gets to send a request on tokens it no longer has.
    pub(crate) fn below(&self, limit: Option<u64>, used: u64, trip: CancellationToken) -> Self {
        if self.own.over() {
            self.own.trip(TOKENS);
        }
        Self {
            own: Arc::new(Node {
                limit,
                used: AtomicU64::new(used),
                above: Some(self.own.clone()),
                trip: Some(trip),
                tripped: AtomicU8::new(NOT_TRIPPED),
                deadline: OnceLock::new(),
                idle: OnceLock::new(),
            }),
            run: self.run.clone(),
            mine: true,
        }
    }

    /// Adds one response's usage here and to every budget above; an agent above that this
    /// takes over its limit is tripped.
    pub fn charge(&self, usage: &Usage) {
        let n = usage.total();
        let mut above = match self.mine {
            true => {
                self.own.used.fetch_add(n, Ordering::Relaxed);
                self.own.above.as_deref()
            }
            false => Some(&*self.own),
        };
        while let Some(node) = above {
            let before = node.used.fetch_add(n, Ordering::Relaxed);
            if node.limit.is_some_and(|l| before.saturating_add(n) >= l) {
                node.trip(TOKENS);
            }
            above = node.above.as_deref();
        }
    }

    /// Tokens used so far (by the whole run, or by the agent this budget limits and its
    /// subagents).
    pub fn used(&self) -> u64 {
        self.own.used.load(Ordering::Relaxed)
    }

    /// The limit, if any.
    pub fn limit(&self) -> Option<u64> {
        self.own.limit
    }

    /// Whether no more model requests may be sent.
    pub fn exhausted(&self) -> bool {
        self.stop().is_some()
    }

    /// Why no more model requests may be sent, if they may not: the agent's own token
    /// limit (its subtree's tokens), the run's budget, or an agent above over its limit.
    /// A subagent below an agent over its limit (sharing its budget or not) trips that
    /// agent, which cancels them both: an agent's own response that takes it over trips
    /// nothing, and its subagents must not go on spending what it no longer has.
    ///
    /// Walks the counters above (no deeper than the run's depth limit), with relaxed loads
    /// only: it runs before every request.
    pub(crate) fn stop(&self) -> Option<StopKind> {
        if self.own.trip.is_some() && self.own.over() {
            if self.mine {
                return Some(StopKind::TokenLimit);
            }
            self.own.trip(TOKENS);
            return Some(StopKind::Cancelled);
        }
        if self.run.over() {
            return Some(StopKind::Budget);
        }
        let mut above = self.own.above.as_deref();
        while let Some(node) = above {
            if node.over() {
                // An agent above over its limit; or, above a nested run's budget, the
                // calling run's own, which stops it as its budget.
                if node.trip.is_none() {
                    return Some(StopKind::Budget);
                }
                node.trip(TOKENS);
                return Some(StopKind::Cancelled);
            }
            above = node.above.as_deref();
        }
        None
    }

    /// Why the agent this budget limits was stopped by its limits, if it was (see
    /// [`Budget::below`]): a cancel it sees is then that limit, not a person's.
    pub(crate) fn tripped(&self) -> Option<StopKind> {
        if !self.mine {
            return None;
        }
        match self.own.tripped.load(Ordering::Relaxed) {
            TOKENS => Some(StopKind::TokenLimit),
            TIME => Some(StopKind::TimeLimit),
            _ => None,
        }
    }

    /// Stops the agent this budget limits for its time limit.
    pub(crate) fn time_up(&self) {
        self.own.trip(TIME);
    }

    /// Says the agent this budget limits runs out of time at `at` (the first one said
    /// stands), so agents it starts outside its subtree can be held to it.
    pub(crate) fn set_deadline(&self, at: Instant) {
        if self.mine {
            let _ = self.own.deadline.set(at);
        }
    }

    /// Whether the agent this budget limits waits idle, for its time limit to watch.
    pub(crate) fn idle_watch(&self) -> watch::Receiver<bool> {
        let idle = self.own.idle.get_or_init(|| watch::channel(false).0);
        idle.subscribe()
    }

    /// Says whether the agent this budget limits waits idle: its time limit, if it has
    /// one, counts only the time it works.
    pub(crate) fn set_idle(&self, idle: bool) {
        if let (true, Some(tx)) = (self.mine, self.own.idle.get()) {
            tx.send_replace(idle);
        }
    }

    /// What the limits of the agents this budget counts for allow from now: the fewest
    /// tokens left under any of their token limits, the least time left before any of
    /// their deadlines. For a team member an agent starts, which runs outside its subtree.
    pub(crate) fn left(&self) -> AgentLimits {
        let now = Instant::now();
        let (mut tokens, mut time) = (None::<u64>, None::<Duration>);
        let mut node = Some(&*self.own);
        while let Some(n) = node {
            // The run's own budget stops everyone as the run's budget, not as a limit.
            if n.trip.is_some() {
                if let Some(limit) = n.limit {
                    let left = limit.saturating_sub(n.used.load(Ordering::Relaxed));
                    tokens = Some(tokens.map_or(left, |t| t.min(left)));
                }
                if let Some(at) = n.deadline.get() {
                    let left = at.saturating_duration_since(now);
                    time = Some(time.map_or(left, |t| t.min(left)));
                }
            }
            node = n.above.as_deref();
        }
        AgentLimits::new(tokens, None, time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(tokens: u64) -> Usage {
        Usage {
            input_tokens: tokens,
            ..Usage::default()
        }
    }

    #[test]
    fn a_subagents_tokens_count_against_every_limit_above_it() {
        let run = Budget::new(Some(10_000));
        let parent_cancel = CancellationToken::new();
        let parent = run.below(Some(100), 0, parent_cancel.clone());
        let child_cancel = parent_cancel.child_token();
        let child = parent.below(None, 0, child_cancel.clone());
        let sharing = parent.inherited();
        // The parent's own tokens stop it before its next request, without a trip.
        parent.charge(&usage(60));
        assert!(!parent_cancel.is_cancelled());
        assert_eq!(parent.stop(), None);
        // The child's take the parent over: the parent is tripped, the child cancelled
        // with it, and only the parent ends for its limit.
        child.charge(&usage(50));
        assert!(parent_cancel.is_cancelled() && child_cancel.is_cancelled());
        assert_eq!(parent.tripped(), Some(StopKind::TokenLimit));
        assert_eq!(parent.stop(), Some(StopKind::TokenLimit));
        assert_eq!(child.tripped(), None);
        assert_eq!(
            child.stop(),
            Some(StopKind::Cancelled),
            "its parent is over"
        );
        assert_eq!((run.used(), parent.used(), child.used()), (110, 110, 50));
        // A subagent sharing the parent's budget is cancelled, not stopped for a limit.
        sharing.charge(&usage(1));
        assert_eq!(sharing.tripped(), None);
        assert_eq!(sharing.stop(), Some(StopKind::Cancelled));
        assert_eq!(parent.used(), 111);
        // The run's budget stops everyone.
        child.charge(&usage(10_000));
        assert_eq!(child.stop(), Some(StopKind::Budget));
    }

    #[test]
    fn a_subagent_started_by_an_agent_over_its_limit_trips_that_agent() {
        let cancel = CancellationToken::new();
        let parent = Budget::new(None).below(Some(10), 0, cancel.clone());
        parent.charge(&usage(20));
        assert!(
            !cancel.is_cancelled(),
            "its own tokens stop it before its next request"
        );
        let child = parent.below(Some(5), 0, cancel.child_token());
        assert!(cancel.is_cancelled());
        assert_eq!(parent.tripped(), Some(StopKind::TokenLimit));
        assert_eq!(child.tripped(), None);
    }

    #[test]
    fn a_limited_descendant_stops_when_any_agent_above_is_over_its_limit() {
        let top_cancel = CancellationToken::new();
        let top = Budget::new(None).below(Some(100), 0, top_cancel.clone());
        let middle = top.below(Some(1_000), 0, top_cancel.child_token());
        let bottom = middle.below(Some(1_000), 0, top_cancel.child_token());
        assert_eq!(bottom.stop(), None);
        // The top agent's own response takes it over: that trips nothing by itself.
        top.charge(&usage(120));
        assert!(!top_cancel.is_cancelled());
        // Its grandchild's next request would spend tokens it no longer has.
        assert_eq!(bottom.stop(), Some(StopKind::Cancelled));
        assert!(top_cancel.is_cancelled());
        assert_eq!(top.tripped(), Some(StopKind::TokenLimit));
        assert_eq!(bottom.tripped(), None);
        assert_eq!(middle.stop(), Some(StopKind::Cancelled));
    }

    #[test]
    fn what_is_left_is_the_least_any_limit_above_allows() {
        let run = Budget::new(Some(10_000));
        let outer = run.below(Some(100), 0, CancellationToken::new());
        let inner = outer.below(Some(80), 0, CancellationToken::new());
        assert_eq!(run.left(), AgentLimits::default(), "the run's is no limit");
        inner.charge(&usage(30));
        outer.charge(&usage(50));
        // outer: 100 - 80 = 20 left; inner: 80 - 30 = 50 left.
        assert_eq!(inner.left().tokens, Some(20));
        assert_eq!(inner.inherited().left().tokens, Some(20));
        assert_eq!(inner.left().time, None);
        let soon = Instant::now() + Duration::from_secs(60);
        outer.set_deadline(soon);
        outer.set_deadline(soon + Duration::from_secs(600));
        let time = inner.left().time.unwrap();
        assert!(
            time <= Duration::from_secs(60) && time > Duration::ZERO,
            "{time:?}"
        );
        // A subagent sharing a budget never sets its owner's deadline.
        let shared = Budget::new(None).below(None, 0, CancellationToken::new());
        shared.inherited().set_deadline(soon);
        assert_eq!(shared.left().time, None);
    }

    #[test]
    fn a_nested_runs_tokens_count_against_its_caller_and_its_callers_run() {
        let run = Budget::new(Some(1_000));
        let caller_cancel = CancellationToken::new();
        let caller = run.below(Some(100), 0, caller_cancel.clone());
        let nested = caller.nested(Some(500));
        let item = nested.below(None, 0, CancellationToken::new());
        item.charge(&usage(60));
        assert_eq!((nested.used(), caller.used(), run.used()), (60, 60, 60));
        assert_eq!(nested.stop(), None);
        // Its tokens take the caller over its limit: the caller is tripped (cancelling
        // its tool call, and so the nested run), and the nested run stops.
        item.charge(&usage(50));
        assert!(caller_cancel.is_cancelled());
        assert_eq!(caller.tripped(), Some(StopKind::TokenLimit));
        assert_eq!(nested.stop(), Some(StopKind::Cancelled));
        // Without limits of the caller's own, the calling run's budget stops it.
        let run = Budget::new(Some(100));
        let nested = run.inherited().nested(None);
        nested.charge(&usage(150));
        assert_eq!(run.used(), 150);
        assert_eq!(nested.stop(), Some(StopKind::Budget));
        // And its own limit too.
        let nested = Budget::new(None).nested(Some(10));
        nested.charge(&usage(10));
        assert_eq!(nested.stop(), Some(StopKind::Budget));
    }

    #[test]
    fn a_time_limit_trips_once_for_its_first_reason() {
        let cancel = CancellationToken::new();
        let agent = Budget::new(None).below(None, 0, cancel.clone());
        agent.time_up();
        assert!(cancel.is_cancelled());
        assert_eq!(agent.tripped(), Some(StopKind::TimeLimit));
        assert_eq!(agent.stop(), None, "no token limit was reached");
        // The run's own budget is never tripped: it has no agent to stop.
        let run = Budget::new(Some(1));
        run.time_up();
        assert_eq!(run.tripped(), None);
    }
}
