//! One agent's limits: the tokens, turns and wall time it may use. Set by its type, by a
//! workflow's `map`, or by the `Task` call that starts it; a call may only tighten them.

use super::numbers;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};
use std::time::Duration;

/// One agent's limits; a limit not set is `None`. Read as people write them: `50_000` or
/// `"50000"` tokens, `5m`, `90s` or a number of seconds for the time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentLimits {
    /// Most tokens (input + output, cached included) the agent and its subagents may use.
    #[serde(
        default,
        deserialize_with = "numbers::opt_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub tokens: Option<u64>,
    /// Most model requests it may make.
    #[serde(
        default,
        deserialize_with = "numbers::opt_u32",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub turns: Option<u32>,
    /// Most wall time it may take, its subagents' included (`5m`, `90s`, `1h 30m`, or a
    /// number of seconds).
    #[serde(
        default,
        deserialize_with = "numbers::opt_time",
        serialize_with = "time_text",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub time: Option<Duration>,
}

/// Writes a time as it is read back: `5m`, `1h 30m`.
fn time_text<S: Serializer>(time: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(t) => s.serialize_str(&humantime::format_duration(*t).to_string()),
        None => s.serialize_none(),
    }
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

    /// What of `other` would loosen these limits, so [`tightened_by`](Self::tightened_by)
    /// ignores it: one line per limit (`turns 9 (5 hold)`); empty when none.
    pub fn looser_in(&self, other: &Self) -> Vec<String> {
        let mut looser = Vec::new();
        if let (Some(mine), Some(theirs)) = (self.tokens, other.tokens) {
            if theirs > mine {
                looser.push(format!("tokens {theirs} ({mine} hold)"));
            }
        }
        if let (Some(mine), Some(theirs)) = (self.turns, other.turns) {
            if theirs > mine {
                looser.push(format!("turns {theirs} ({mine} hold)"));
            }
        }
        if let (Some(mine), Some(theirs)) = (self.time, other.time) {
            if theirs > mine {
                let text = |t: Duration| humantime::format_duration(t).to_string();
                looser.push(format!("time {} ({} hold)", text(theirs), text(mine)));
            }
        }
        looser
    }

    /// The limits that are set but can never let an agent work (a zero), each named.
    pub fn zeros(&self) -> Vec<&'static str> {
        let mut zeros = Vec::new();
        if self.tokens == Some(0) {
            zeros.push("tokens");
        }
        if self.turns == Some(0) {
            zeros.push("turns");
        }
        if self.time == Some(Duration::ZERO) {
            zeros.push("time");
        }
        zeros
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
        assert_eq!(
            by_type.looser_in(&by_call),
            vec!["tokens 5000 (1000 hold)".to_owned()]
        );
    }

    #[test]
    fn limits_read_as_people_write_them_and_write_back_alike() {
        let read = |text: &str| yaml_serde::from_str::<AgentLimits>(text);
        let limits = read("{tokens: 50_000, turns: \"10\", time: 5m}").unwrap();
        assert_eq!(
            limits,
            AgentLimits::new(Some(50_000), Some(10), Some(Duration::from_secs(300)))
        );
        assert_eq!(
            read("time: 90").unwrap().time,
            Some(Duration::from_secs(90))
        );
        assert!(read("tokens: lots").is_err());
        assert!(read("tokns: 5").is_err(), "an unknown key is an error");
        let json = serde_json::to_value(limits).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"tokens": 50000, "turns": 10, "time": "5m"})
        );
        assert_eq!(serde_json::from_value::<AgentLimits>(json).unwrap(), limits);
        assert_eq!(
            AgentLimits::new(Some(0), None, None).zeros(),
            vec!["tokens"]
        );
    }
}
