//! Claude Code's settings files, as Claude Code users already have them:
//! `~/.claude/settings.json`, and the project's `.claude/settings.json` and
//! `.claude/settings.local.json`. cadre reads their `hooks` and their `permissions`
//! (`allow`, `deny`, `ask`, `defaultMode`) and leaves every other key to Claude Code.
//!
//! Reading is forgiving: what cadre cannot honour is repaired or dropped with a warning that
//! says what happens instead. A file that is not JSON is an error: its deny rules must not
//! be dropped quietly.

use crate::common::exit::CliError;
use cadre_core::internal::file_mode;
use cadre_core::internal::{HooksCheck, HOOK_REFUSED};
use cadre_core::{Hooks, PermissionMode};
use serde_json::Value;
use std::path::Path;

/// The project's Claude Code settings files, from the project root, the local one last (it
/// wins, as in Claude Code).
pub const PROJECT_FILES: [&str; 2] = [".claude/settings.json", ".claude/settings.local.json"];

/// The user's Claude Code settings file, from their home folder.
pub const USER_FILE: &str = ".claude/settings.json";

/// One rule as a file writes it, with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The rule, in Claude Code's syntax.
    pub rule: String,
    /// Its 1-based line in the file.
    pub line: usize,
}

/// One Claude Code settings file, read.
#[derive(Debug, Clone, Default)]
pub struct ClaudeFile {
    /// How it is named in messages.
    pub label: String,
    /// Whether it exists.
    pub found: bool,
    /// Its hooks, each naming this file as its source.
    pub hooks: Hooks,
    /// `disableAllHooks: true`: no hook runs while this file says so.
    pub disable_all_hooks: bool,
    /// `permissions.defaultMode`, as cadre's mode (`None`: it follows the run), and its line.
    pub mode: Option<(PermissionMode, usize)>,
    /// Allow rules cadre can apply.
    pub allow: Vec<Written>,
    /// Deny rules cadre can apply (`ask` rules among them: see [`read`]).
    pub deny: Vec<Written>,
    /// What was repaired or dropped, as warnings (`file:line: …`).
    pub warnings: Vec<String>,
}

/// The text of the settings file `path` (named `label` in messages); `None` when it does
/// not exist, which is no error: every settings file, Claude Code's and cadre's, is
/// optional.
pub fn read_if_present(path: &Path, label: &str) -> Result<Option<String>, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::config_from(format!("cannot read {label}"), e)),
    }
}

/// Reads `path`, named `label` in messages; a missing file is an empty one.
///
/// `ask` rules become deny rules: cadre asks per mode (`--permission-mode ask`), not per
/// rule, and a call Claude Code would ask about is refused, as Claude Code refuses it
/// where no one can answer. `acceptEdits` adds allow rules for edits.
pub fn read(path: &Path, label: String) -> Result<ClaudeFile, CliError> {
    let mut file = ClaudeFile {
        label,
        ..ClaudeFile::default()
    };
    let Some(text) = read_if_present(path, &file.label)? else {
        return Ok(file);
    };
    file.found = true;
    // An empty file is an empty object, as an editor may leave it.
    if text.trim().is_empty() {
        return Ok(file);
    }
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::config(format!(
            "{}:{}:{}: not valid JSON: {e}",
            file.label,
            e.line(),
            e.column()
        ))
    })?;
    let Some(doc) = doc.as_object() else {
        return Err(CliError::config(format!(
            "{}: expected a JSON object of settings",
            file.label
        )));
    };
    if let Some(hooks) = doc.get("hooks") {
        check_hooks(&file.label, &text)?;
        let line = line_of_key(&text, "hooks");
        let (hooks, warnings) = Hooks::from_json(hooks, &file.label);
        file.hooks = hooks;
        let label = &file.label;
        file.warnings
            .extend(warnings.into_iter().map(|w| format!("{label}:{line}: {w}")));
    }
    match doc.get("disableAllHooks") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => file.disable_all_hooks = true,
        Some(other) => file.warnings.push(format!(
            "{}:{}: disableAllHooks ignored: expected true or false, found {other}",
            file.label,
            line_of_key(&text, "disableAllHooks")
        )),
    }
    if let Some(permissions) = doc.get("permissions") {
        read_permissions(&mut file, permissions, &text)?;
    }
    Ok(file)
}

/// Refuses a file whose `hooks` hold an entry that cannot load, naming its place as a
/// syntax error does: a guard that cannot load must not let the command it guards through.
fn check_hooks(label: &str, text: &str) -> Result<(), CliError> {
    serde_json::from_str::<HooksCheck>(text)
        .map(|_| ())
        .map_err(|e| {
            let message = e.to_string();
            // The place is said first, as for a syntax error.
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(m, _)| m);
            CliError::config(format!(
                "{label}:{}:{}: {HOOK_REFUSED}: {message}",
                e.line(),
                e.column()
            ))
        })
}

/// Reads the `permissions` object into `file`; a deny (or ask) rule that cannot be read
/// refuses the file, as in `cadre.toml`: a guard that cannot load fails closed.
fn read_permissions(
    file: &mut ClaudeFile,
    permissions: &Value,
    text: &str,
) -> Result<(), CliError> {
    let label = file.label.clone();
    let at = |key: &str| format!("{label}:{}", line_of_key(text, key));
    let Some(permissions) = permissions.as_object() else {
        file.warnings.push(format!(
            "{}: permissions ignored: expected an object with allow, deny, ask, defaultMode",
            at("permissions")
        ));
        return Ok(());
    };
    for (key, value) in permissions {
        match key.as_str() {
            "allow" | "deny" | "ask" => {
                let Some(rules) = value.as_array() else {
                    if key != "allow" {
                        return Err(CliError::config(format!(
                            "{}: permissions.{key} refused: expected a list of rules",
                            at(key)
                        )));
                    }
                    file.warnings.push(format!(
                        "{}: permissions.{key} ignored: expected a list of rules",
                        at(key)
                    ));
                    continue;
                };
                for rule in rules {
                    read_rule(file, key, rule, text)?;
                }
            }
            "defaultMode" => {
                let line = line_of_key(text, key);
                let Some(written) = value.as_str() else {
                    file.warnings.push(format!(
                        "{label}:{line}: permissions.defaultMode ignored: expected text, found {value}"
                    ));
                    continue;
                };
                match file_mode(written) {
                    Ok(mode) => {
                        if let Some(mode) = mode.mode {
                            file.mode = Some((mode, line));
                        }
                        if mode.allow_edits {
                            // acceptEdits: edits need no one's yes, in any mode.
                            file.allow.push(Written {
                                rule: "Edit".into(),
                                line,
                            });
                        }
                    }
                    Err(why) => file.warnings.push(format!(
                        "{label}:{line}: permissions.defaultMode {why}; the run's mode applies"
                    )),
                }
            }
            "additionalDirectories" => file.warnings.push(format!(
                "{}: permissions.additionalDirectories ignored: cadre's tools stay inside the project root",
                at(key)
            )),
            "disableBypassPermissionsMode" => file.warnings.push(format!(
                "{}: permissions.disableBypassPermissionsMode ignored: cadre has no bypass mode to disable (its loosest mode, auto, still applies deny rules)",
                at(key)
            )),
            other => file.warnings.push(format!(
                "{}: permissions.{other} ignored: cadre reads allow, deny, ask and defaultMode",
                at(other)
            )),
        }
    }
    Ok(())
}

/// Reads one rule of the list `key` (`allow`, `deny`, `ask`). An allow rule that cannot be
/// read is dropped with a warning (it would only let calls through); a deny or ask rule
/// refuses the file, at its line and column.
fn read_rule(file: &mut ClaudeFile, key: &str, rule: &Value, text: &str) -> Result<(), CliError> {
    let label = &file.label;
    let guard = key != "allow";
    let Some(rule) = rule.as_str() else {
        let line = line_of_key(text, key);
        if guard {
            return Err(CliError::config(format!(
                "{label}:{line}: a permissions.{key} rule refused: expected text, found {rule}"
            )));
        }
        file.warnings.push(format!(
            "{label}:{line}: a permissions.{key} rule ignored: expected text, found {rule}"
        ));
        return Ok(());
    };
    let line = line_of_text(text, rule).unwrap_or_else(|| line_of_key(text, key));
    if let Err(e) = cadre_core::Rule::parse(rule) {
        if guard {
            let column = column_of_text(text, rule).unwrap_or(1);
            return Err(CliError::config(format!(
                "{label}:{line}:{column}: permissions.{key} rule {rule:?} cannot be read, so the file is refused rather than run without it: {}",
                e.why
            )));
        }
        file.warnings.push(format!(
            "{label}:{line}: permissions.{key} rule {rule:?} ignored (not allowed): {}",
            e.why
        ));
        return Ok(());
    }
    let written = Written {
        rule: rule.trim().to_owned(),
        line,
    };
    match key {
        "allow" => file.allow.push(written),
        "deny" => file.deny.push(written),
        _ => {
            file.warnings.push(format!(
                "{label}:{line}: permissions.ask rule {rule:?} is applied as a deny rule: cadre asks by mode (--permission-mode ask), not by rule, so what Claude Code would ask about is refused, as Claude Code refuses it where no one can answer"
            ));
            file.deny.push(written);
        }
    }
    Ok(())
}

/// The 1-based line where `"key"` first appears in `text` (1 if it does not).
fn line_of_key(text: &str, key: &str) -> usize {
    line_of_text(text, key).unwrap_or(1)
}

/// The 1-based column where `value`, written as a JSON string, first appears on its line.
fn column_of_text(text: &str, value: &str) -> Option<usize> {
    let quoted = serde_json::to_string(value).ok()?;
    let at = text.find(&quoted)?;
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    Some(text[start..at].chars().count() + 1)
}

/// The 1-based line where `value`, written as a JSON string, first appears in `text`.
fn line_of_text(text: &str, value: &str) -> Option<usize> {
    let quoted = serde_json::to_string(value).ok()?;
    let at = text.find(&quoted)?;
    Some(text[..at].matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<ClaudeFile, CliError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        std::fs::write(&path, text).unwrap();
        read(&path, "settings.json".into())
    }

    #[test]
    fn reads_hooks_and_permissions_and_says_what_it_cannot_honour() {
        let f = read_text(
            r#"{
  "model": "opus",
  "permissions": {
    "allow": ["Bash(npm test)", "WebFetch(domain:example.com)"],
    "deny": ["Read(./.env)"],
    "ask": ["Bash(git push:*)"],
    "defaultMode": "acceptEdits",
    "additionalDirectories": ["../docs"]
  },
  "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]}
}"#,
        )
        .unwrap();
        assert!(f.found);
        assert_eq!(f.hooks.all().len(), 1);
        assert_eq!(f.hooks.all()[0].source, "settings.json");
        let allow: Vec<&str> = f.allow.iter().map(|w| w.rule.as_str()).collect();
        assert_eq!(allow, ["Bash(npm test)", "Edit"]);
        let deny: Vec<(&str, usize)> = f.deny.iter().map(|w| (w.rule.as_str(), w.line)).collect();
        assert_eq!(deny, [("Bash(git push:*)", 6), ("Read(./.env)", 5)]);
        assert_eq!(f.mode, None);
        assert_eq!(f.warnings.len(), 3, "{:?}", f.warnings);
        let said = |what: &str| f.warnings.iter().any(|w| w.contains(what));
        assert!(said("settings.json:4: permissions.allow rule \"WebFetch"));
        assert!(said(
            "permissions.ask rule \"Bash(git push:*)\" is applied as a deny rule"
        ));
        assert!(said("additionalDirectories ignored"));
    }

    #[test]
    fn modes_map_and_bad_json_names_the_line() {
        let f = read_text(r#"{"permissions": {"defaultMode": "plan"}}"#).unwrap();
        assert_eq!(f.mode, Some((PermissionMode::Plan, 1)));
        let f = read_text(r#"{"permissions": {"defaultMode": "sometimes"}}"#).unwrap();
        assert_eq!(f.mode, None);
        assert!(
            f.warnings[0].contains("the run's mode applies"),
            "{:?}",
            f.warnings
        );
        let e = read_text("{\"permissions\": {\n  \"deny\": [\"Bash\", \"Fetch(x)\"]}}")
            .unwrap_err()
            .report();
        assert!(
            e.starts_with("settings.json:2:20: permissions.deny rule"),
            "{e}"
        );
        let e = read_text("{\n  \"hooks\": ,\n}").unwrap_err().report();
        assert!(e.starts_with("settings.json:2:"), "{e}");
        assert!(read_text("").unwrap().found);
    }
}
