//! Where a telemetry setting is read: the environment's `OTEL_*` variable, else the value
//! the `[telemetry]` table gives it.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The `[telemetry]` table's values, under the names of the variables they stand for.
static TABLE: OnceLock<BTreeMap<&'static str, String>> = OnceLock::new();

/// Sets the values the `[telemetry]` table gives, by the variables they stand for; the
/// first call wins (before logging starts, so the exporters see them).
pub(super) fn set_table(values: BTreeMap<&'static str, String>) {
    let _ = TABLE.set(values);
}

/// A telemetry setting by its variable's name: the environment's when set, else the
/// `[telemetry]` table's.
pub(super) fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| TABLE.get()?.get(name).cloned())
}

/// Whether the environment itself sets `name` (not the table).
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) fn env_sets(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}
