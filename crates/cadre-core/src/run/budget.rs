//! A token budget shared by every agent of a run.

use cadre_model::Usage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts tokens across every agent of a run and says when the limit is reached.
#[derive(Debug, Clone, Default)]
pub struct Budget {
    limit: Option<u64>,
    used: Arc<AtomicU64>,
}

impl Budget {
    /// A budget of `limit` tokens (input + output, cached included); `None` is unlimited.
    pub fn new(limit: Option<u64>) -> Self {
        Self {
            limit,
            used: Arc::default(),
        }
    }

    /// Adds one response's usage.
    pub fn charge(&self, usage: &Usage) {
        self.used.fetch_add(usage.total(), Ordering::Relaxed);
    }

    /// Tokens used so far.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Whether no more model requests may be sent.
    pub fn exhausted(&self) -> bool {
        self.limit.is_some_and(|l| self.used() >= l)
    }
}
