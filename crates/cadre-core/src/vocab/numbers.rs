//! Numbers and durations as people write them in YAML: `50000`, `"50000"`, `50_000`, and
//! `5m` or `300` (seconds) for a time.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// A whole number given as a number or a string (`"50_000"`).
struct Whole;

impl Visitor<'_> for Whole {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number (50000, \"50_000\")")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        v.trim()
            .replace('_', "")
            .parse()
            .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
    }
}

/// A duration given as humantime text (`5m`, `1h 30m`) or a number of seconds.
struct Time;

impl Visitor<'_> for Time {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a time (5m, 90s, 1h 30m) or a number of seconds")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        Whole.visit_i64(v).map(Duration::from_secs)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
        Duration::try_from_secs_f64(v)
            .map_err(|_| E::invalid_value(de::Unexpected::Float(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        let v = v.trim();
        if let Ok(secs) = v.parse::<u64>() {
            return Ok(Duration::from_secs(secs));
        }
        humantime::parse_duration(v).map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
    }
}

/// Reads an optional whole number.
pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    d.deserialize_any(Whole).map(Some)
}

/// Reads an optional whole number that fits a `u32`.
pub fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let n = d.deserialize_any(Whole)?;
    u32::try_from(n)
        .map(Some)
        .map_err(|_| de::Error::invalid_value(de::Unexpected::Unsigned(n), &"at most 4294967295"))
}

/// Reads an optional duration.
pub fn opt_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    d.deserialize_any(Time).map(Some)
}
