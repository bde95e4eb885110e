//! One agent's limits, as a workflow's `map.limits` writes them and an item's call carries
//! them.

use crate::numbers;
use serde::Deserialize;
use std::time::Duration;

/// One agent's limits: none is a limit not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct Limits {
    /// Most tokens (input + output) the agent may use.
    #[serde(default, deserialize_with = "numbers::opt_u64")]
    pub tokens: Option<u64>,
    /// Most model requests it may make.
    #[serde(default, deserialize_with = "numbers::opt_u32")]
    pub turns: Option<u32>,
    /// Most wall time it may take (`5m`, `90s`, or seconds).
    #[serde(default, deserialize_with = "numbers::opt_time")]
    pub time: Option<Duration>,
}

impl Limits {
    /// These limits as cadre-core's [`AgentLimits`](cadre_core::AgentLimits), which an
    /// item's call carries.
    pub fn agent_limits(&self) -> cadre_core::AgentLimits {
        cadre_core::AgentLimits::new(self.tokens, self.turns, self.time)
    }
}
