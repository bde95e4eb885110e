//! The orchestrator's layout rules, checked on its source: each file says at its top what
//! it depends on (no `use super::*` outside its tests), no per-run state waits in a
//! `Mutex<Option<…>>`, no file is over 700 lines and no function over 80 (tests aside).

use std::path::{Path, PathBuf};

/// The files of the orchestrator and the parts of `run/` it reaches.
fn orchestrator_files() -> Vec<PathBuf> {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/run");
    let mut files = vec![run.join("builder.rs"), run.join("task.rs")];
    for dir in ["orchestrator", "orchestrator/spawn", "team"] {
        for entry in std::fs::read_dir(run.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// `text` before its tests.
fn code_of(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |at| &text[..at])
}

/// The functions of `text` (before its tests) longer than `limit` lines, as `name (n lines)`.
fn long_functions(text: &str, limit: usize) -> Vec<String> {
    let lines: Vec<&str> = code_of(text).lines().collect();
    let code_end = lines.len();
    let mut long = Vec::new();
    for (i, line) in lines[..code_end].iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        // `pub`, `pub(crate)`, `pub(in …)` and `async` before `fn`.
        let signature = match body.strip_prefix("pub(") {
            Some(rest) => rest.split_once(") ").map_or(rest, |(_, after)| after),
            None => body.trim_start_matches("pub "),
        };
        let signature = signature.trim_start_matches("async ");
        let Some(name) = signature.strip_prefix("fn ") else {
            continue;
        };
        let closing = format!("{indent}}}");
        let Some(end) = lines[i + 1..code_end].iter().position(|l| *l == closing) else {
            continue;
        };
        let length = end + 2;
        if length > limit {
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            long.push(format!("{name} ({length} lines)"));
        }
    }
    long
}

#[test]
fn the_orchestrator_files_are_small_and_say_what_they_depend_on() {
    let mut broken = Vec::new();
    for file in orchestrator_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.display();
        if code_of(&text).contains("use super::*") {
            broken.push(format!("{name}: use super::*"));
        }
        if text.contains("Mutex<Option<") {
            broken.push(format!("{name}: state in a Mutex<Option<…>>"));
        }
        let lines = text.lines().count();
        if lines > 700 {
            broken.push(format!("{name}: {lines} lines"));
        }
        for long in long_functions(&text, 80) {
            broken.push(format!("{name}: {long}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_function_check_finds_a_long_function() {
    let long: String = format!("fn big() {{\n{}}}\n", "    x();\n".repeat(80));
    assert_eq!(long_functions(&long, 80), vec!["big (82 lines)".to_owned()]);
    assert!(long_functions(&long, 82).is_empty());
}
