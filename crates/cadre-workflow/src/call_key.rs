//! An item's agent call and its content key: the stable hash by which a run looks up a
//! result it already has, so a finished call is never made again, whatever order items
//! start in, and a changed call (its prompt, schema, limits, type or model) is.

use crate::limits::Limits;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// What goes into the key before anything else, so a change to what is hashed (or how)
/// makes new keys rather than matching old ones wrongly.
const KEY_VERSION: &str = "cadre-workflow-call/1";

/// One agent call of a workflow, as it will be made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallSpec<'a> {
    /// The agent type.
    pub agent: &'a str,
    /// The rendered prompt.
    pub prompt: &'a str,
    /// The answer's JSON Schema, if the answer is typed.
    pub output_schema: Option<&'a Value>,
    /// The agent's limits.
    pub limits: &'a Limits,
    /// The model id the call goes to.
    pub model: &'a str,
}

impl CallSpec<'_> {
    /// The call's content key: SHA-256 over its parts as canonical JSON (object keys
    /// sorted, no blanks), so equal calls have equal keys on every run and machine.
    pub fn key(&self) -> CallKey {
        let limits = json!({
            "tokens": self.limits.tokens,
            "turns": self.limits.turns,
            "time_ms": self.limits.time.map(|t| t.as_millis() as u64),
        });
        let parts = json!([
            KEY_VERSION,
            self.agent,
            self.prompt,
            self.output_schema,
            limits,
            self.model
        ]);
        let mut text = String::new();
        canonical(&parts, &mut text);
        CallKey(Sha256::digest(text.as_bytes()).into())
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
mod tests;
