//! Per-type model settings as users write them: `effort` (cadre's YAML and Claude Code's
//! front matter alike) and `output_schema`, repaired or dropped with a warning while loading.

use crate::definitions::problem::{Locator, Problem};
use cadre_model::Effort;
use std::path::Path;

/// Reads `effort` loosely (`High`, `x-high`) into the API's spelling and drops a value that
/// is no level; drops an `output_schema` that is not a JSON Schema object. Each with a
/// warning, so `check --strict` reports it.
pub(crate) fn repair(
    effort: &mut Option<String>,
    output_schema: &mut Option<serde_json::Value>,
    file: &Path,
    problems: &mut Vec<Problem>,
    pos: &Locator,
) {
    if let Some(written) = effort.take() {
        match Effort::parse(&written) {
            Some(level) => {
                if level.as_str() != written {
                    problems.push(Problem::warning_at(
                        file,
                        pos("effort", Some(&written)),
                        format!("`effort: {written}` read as `{level}`"),
                    ));
                }
                *effort = Some(level.as_str().to_owned());
            }
            None => problems.push(Problem::warning_at(
                file,
                pos("effort", Some(&written)),
                format!(
                    "unknown `effort: {written}` ignored (the levels are {}): the model's default effort is used",
                    Effort::ALL.map(Effort::as_str).join(", ")
                ),
            )),
        }
    }
    if let Some(schema) = output_schema.take() {
        match schema_problem(&schema) {
            None => *output_schema = Some(schema),
            Some(why) => problems.push(Problem::warning_at(
                file,
                pos("output_schema", None),
                format!("`output_schema` ignored: {why}; its answers are not checked"),
            )),
        }
    }
}

/// Why `schema` cannot be an answer's schema, if it cannot: not an object, or not a valid
/// JSON Schema.
pub fn schema_problem(schema: &serde_json::Value) -> Option<String> {
    compile(schema).err()
}

/// `schema` compiled to check answers with; `Err` says why it cannot be an answer's
/// schema.
pub(crate) fn compile(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    if !schema.is_object() {
        return Err("a JSON Schema must be an object (type: object, properties: …)".into());
    }
    jsonschema::validator_for(schema).map_err(|e| format!("it is not a valid JSON Schema: {e}"))
}
