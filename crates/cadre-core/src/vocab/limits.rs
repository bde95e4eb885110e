//! One agent's limits: the tokens, turns and wall time it may use. Set by its type, by a
//! workflow's `map`, or by the `Task` call that starts it; a call may only tighten them.

use std::time::Duration;

/// One agent's limits; a limit not set is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AgentLimits {
    /// Most tokens (input + output) the agent may use.
    pub tokens: Option<u64>,
    /// Most model requests it may make.
    pub turns: Option<u32>,
    /// Most wall time it may take.
    pub time: Option<Duration>,
}

impl AgentLimits {
    /// Limits of `tokens`, `turns` and `time`, each unset when `None`.
    pub fn new(tokens: Option<u64>, turns: Option<u32>, time: Option<Duration>) -> Self {
        Self {
            tokens,
            turns,
            time,
        }
    }

    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// These limits with `other`'s applied where they are tighter: each limit is the
    /// smaller of the two, so nothing given later can loosen what was set before.
    pub fn tightened_by(&self, other: &Self) -> Self {
        Self {
            tokens: tighter(self.tokens, other.tokens),
            turns: tighter(self.turns, other.turns),
            time: tighter(self.time, other.time),
        }
    }
}

/// The smaller of two limits, either of which may be unset.
fn tighter<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_limit_only_tightens() {
        let by_type = AgentLimits::new(Some(1000), Some(10), None);
        let by_call = AgentLimits::new(Some(5000), Some(3), Some(Duration::from_secs(60)));
        let both = by_type.tightened_by(&by_call);
        assert_eq!(both.tokens, Some(1000), "a looser token limit is ignored");
        assert_eq!(both.turns, Some(3), "a tighter turn limit holds");
        assert_eq!(
            both.time,
            Some(Duration::from_secs(60)),
            "a new limit is added"
        );
        assert!(AgentLimits::default().is_unlimited());
        assert!(!both.is_unlimited());
    }
}
