//! A workflow item's content key: the stable hash by which a run looks up a result it
//! already has, so a finished call is never made again, whatever order items start in,
//! and a changed call (its prompt, schema, limits, type or model) is.

use crate::vocab::limits::AgentLimits;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// What goes into the key before anything else, so a change to what is hashed (or how)
/// makes new keys rather than matching old ones wrongly.
const KEY_VERSION: &str = "cadre-workflow-call/1";

impl CallKey {
    /// The content key of the call of an `agent` on `prompt`, its answer valid against
    /// `output_schema` (when typed), within `limits`, to `model`: SHA-256 over these parts
    /// as canonical JSON (object keys sorted, no blanks), so equal calls have equal keys on
    /// every run and machine.
    pub fn of(
        agent: &str,
        prompt: &str,
        output_schema: Option<&Value>,
        limits: &AgentLimits,
        model: &str,
    ) -> Self {
        let limits = json!({
            "tokens": limits.tokens,
            "turns": limits.turns,
            "time_ms": limits.time.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        });
        let parts = json!([KEY_VERSION, agent, prompt, output_schema, limits, model]);
        let mut text = String::new();
        canonical(&parts, &mut text);
        Self(Sha256::digest(text.as_bytes()).into())
    }
}

/// Writes `value` as JSON with every object's keys sorted and no blanks, whatever order
/// the map type keeps them in.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The content key of an agent call: 32 bytes, written as 64 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallKey(pub [u8; 32]);

impl std::fmt::Display for CallKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut hex = String::with_capacity(64);
        for b in self.0 {
            let _ = write!(hex, "{b:02x}");
        }
        f.write_str(&hex)
    }
}

impl serde::Serialize for CallKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Text that is not a [`CallKey`] (64 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a call key (64 hex digits): {text:?}")]
pub struct BadCallKey {
    /// The text.
    pub text: String,
}

impl std::str::FromStr for CallKey {
    type Err = BadCallKey;

    /// Reads the 64 hex digits [`CallKey`]'s `Display` writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadCallKey { text: s.to_owned() };
        if s.len() != 64 || !s.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = s.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(Self(bytes))
    }
}

impl<'de> serde::Deserialize<'de> for CallKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_key_is_pinned() {
        let schema = json!({"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]});
        let limits = AgentLimits::new(Some(50_000), Some(10), Some(Duration::from_secs(300)));
        let key = CallKey::of(
            "explore",
            "Label this issue: Crash",
            Some(&schema),
            &limits,
            "claude-sonnet-5-5",
        );
        // Pinned (SHA-256 of the parts as Python's `json.dumps(sort_keys=True)` writes them
        // without blanks): a change of what is hashed, or how, must be a deliberate one
        // (bump KEY_VERSION), or every journal's finished calls would run again.
        assert_eq!(
            key.to_string(),
            "610102a20d6c301ffd295f8a97ff8561946b02103ebf101498233307f2d42f45"
        );
        assert_eq!(key.to_string().parse::<CallKey>().unwrap(), key);
    }
}
