//! What the items of a workflow run made so far leave for the next: the calls seen by
//! content (a second call of the same content is a call of its own), and the last output
//! schema compiled (a run of equal schemas compiles it once).

use super::CallKey;
use crate::run::answer::AnswerSchema;
use std::collections::HashMap;

/// What the items made so far leave for the next: the calls seen (by content, with how
/// many times), and the last output schema compiled.
#[derive(Default)]
pub(crate) struct Seen {
    calls: HashMap<[u8; 32], u32>,
    schema: Option<(serde_json::Value, AnswerSchema)>,
}

impl Seen {
    /// The id the call of content `key` is journaled under (`prefix` before it): a second
    /// call of the same content in one run is a call of its own, its id carrying how many
    /// came before it in the input's order.
    pub(crate) fn call_id(&mut self, prefix: &str, key: CallKey) -> String {
        let n = self.calls.entry(key.0).or_insert(0);
        let id = match *n {
            0 => format!("{prefix}{key}"),
            n => format!("{prefix}{key}.{n}"),
        };
        *n += 1;
        id
    }

    /// `schema` compiled, or the last one again when it is the same.
    pub(crate) fn schema(
        &mut self,
        schema: Option<&serde_json::Value>,
    ) -> Result<Option<AnswerSchema>, String> {
        let Some(schema) = schema else {
            return Ok(None);
        };
        match &self.schema {
            Some((last, compiled)) if last == schema => Ok(Some(compiled.clone())),
            _ => {
                let compiled = AnswerSchema::new(schema)?;
                self.schema = Some((schema.clone(), compiled.clone()));
                Ok(Some(compiled))
            }
        }
    }
}
