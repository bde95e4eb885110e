//! The hooks of an agent file (Claude Code's object, in YAML): read forgivingly, and an
//! entry that cannot load refused at the text of the event or entry that fails.

use crate::definitions::hooks::{Hooks, StrictHooks, HOOK_REFUSED};
use crate::definitions::problem::Problem;
use crate::definitions::yaml;
use std::path::Path;

/// The text that places the first event of `hooks` that cannot become JSON (a key that is
/// not text, say), if one can be told.
fn failing_yaml_event(hooks: &yaml::Value) -> Option<String> {
    let yaml::Value::Mapping(map) = hooks else {
        return None;
    };
    map.iter()
        .find(|(k, v)| !k.is_string() || serde_json::to_value(v).is_err())
        .and_then(|(k, _)| yaml::to_string(k).ok())
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
}

/// The text that places the first event or entry of `hooks` that cannot load: the event's
/// name when the event itself is wrong, else the entry's matcher or first command.
fn failing_entry(hooks: &serde_json::Value) -> Option<String> {
    let events = hooks.as_object()?;
    for (event, entries) in events {
        let alone = |v: serde_json::Value| {
            let mut one = serde_json::Map::new();
            one.insert(event.clone(), v);
            serde_json::from_value::<StrictHooks>(serde_json::Value::Object(one)).is_err()
        };
        if !alone(entries.clone()) {
            continue;
        }
        // The event itself is wrong (unknown), or its entries are not a list.
        let list = match entries.as_array() {
            Some(list) if !alone(serde_json::Value::Array(Vec::new())) => list,
            _ => return Some(event.clone()),
        };
        let Some(entry) = list
            .iter()
            .find(|e| alone(serde_json::Value::Array(vec![(*e).clone()])))
        else {
            return Some(event.clone());
        };
        let text = entry.get("matcher").and_then(|m| m.as_str()).or_else(|| {
            entry
                .get("hooks")
                .and_then(|h| h.as_array())
                .and_then(|h| h.iter().find_map(|c| c.get("command")?.as_str()))
        });
        return Some(text.unwrap_or(event).to_owned());
    }
    None
}

/// Reads an agent file's `hooks` (Claude Code's object, in YAML) written in `file`; an entry
/// that cannot load is an error (see [`HOOK_REFUSED`](crate::definitions::hooks::HOOK_REFUSED))
/// placed by `pos` at the text of the failing event or entry (`pos(None)`: the `hooks` key).
pub(crate) fn read_hooks(
    file: &Path,
    value: &yaml::Value,
    problems: &mut Vec<Problem>,
    pos: &dyn Fn(Option<&str>) -> (usize, usize),
) -> Hooks {
    // A guard that cannot load fails closed: the file is refused, and with it the run.
    let json = match serde_json::to_value(value) {
        Ok(json) => json,
        Err(e) => {
            let at = failing_yaml_event(value);
            problems.push(Problem::at(
                file,
                pos(at.as_deref()),
                format!("{HOOK_REFUSED}: {e}"),
            ));
            return Hooks::default();
        }
    };
    if let Err(e) = serde_json::from_value::<StrictHooks>(json.clone()) {
        let at = failing_entry(&json);
        problems.push(Problem::at(
            file,
            pos(at.as_deref()),
            format!("{HOOK_REFUSED}: {e}"),
        ));
        return Hooks::default();
    }
    let (hooks, warnings) = Hooks::from_json(&json, &file.display().to_string());
    for w in warnings {
        problems.push(Problem::warning_at(file, pos(None), w));
    }
    hooks
}
