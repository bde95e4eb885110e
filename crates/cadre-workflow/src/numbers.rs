//! Numbers and durations as people write them in YAML: `50000`, `"50000"`, `50_000`, and
//! `5m` or `300` (seconds) for a time. The reader is cadre-core's, which agent types'
//! `limits` use too; here only the narrower types are made of it.

use serde::de::{self, Deserializer};

pub(crate) use cadre_core::internal::{opt_time, opt_u64};

/// Reads an optional whole number that fits a `u32`.
pub(crate) fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(n) = opt_u64(d)? else {
        return Ok(None);
    };
    u32::try_from(n)
        .map(Some)
        .map_err(|_| de::Error::invalid_value(de::Unexpected::Unsigned(n), &"at most 4294967295"))
}

/// Reads a whole number that fits a `u32`.
pub(crate) fn u32_<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    opt_u32(d).map(Option::unwrap_or_default)
}

/// Reads a whole number that fits a `usize`.
pub(crate) fn usize_<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = opt_u64(d)?.unwrap_or_default();
    usize::try_from(n)
        .map_err(|_| de::Error::invalid_value(de::Unexpected::Unsigned(n), &"a smaller number"))
}
