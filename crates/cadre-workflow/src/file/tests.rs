use super::*;
use crate::limits::Limits;
use std::time::Duration;

/// The example of the issue that asked for workflows, as written there.
const EXAMPLE: &str = r#"
name: label-issues
description: Label each issue.
input: issues.jsonl        # JSONL, CSV with a header row, a JSON array, or a glob of files
key: id                    # the field that names an item (default: its position)
map:
  agent: explore           # any agent type, built-in, YAML or Claude Code file
  prompt: |
    Label this issue: {{ item.title }}
    {{ item.body }}
  output_schema: {type: object, properties: {label: {type: string}}, required: [label]}
  concurrency: 16
  retries: 2               # failed items only, with backoff
  limits: {tokens: 50000, turns: 10, time: 5m}
reduce:                    # optional: one agent given the results (as a file it can read)
  agent: plan
  prompt: Summarise the labels in {{ results_path }}.
budget: {tokens: 2000000}  # for the whole workflow
"#;

fn parse(text: &str) -> (Workflow, Vec<Warning>) {
    Workflow::parse(text, Path::new("w.yaml")).unwrap()
}

#[test]
fn the_example_reads_whole_and_checks_clean() {
    let (w, warnings) = parse(EXAMPLE);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(w.name, "label-issues");
    assert_eq!(w.key.as_deref(), Some("id"));
    assert_eq!(w.map.agent, "explore");
    assert!(w
        .map
        .prompt
        .starts_with("Label this issue: {{ item.title }}\n"));
    assert_eq!(
        w.map.output_schema.as_ref().unwrap()["required"][0],
        "label"
    );
    assert_eq!(w.map.concurrency, 16);
    assert_eq!(w.map.retries, 2);
    assert_eq!(
        w.map.limits,
        Limits {
            tokens: Some(50_000),
            turns: Some(10),
            time: Some(Duration::from_secs(300)),
        }
    );
    assert_eq!(w.reduce.as_ref().unwrap().agent, "plan");
    assert_eq!(w.budget.tokens, Some(2_000_000));
    let problems: Vec<String> = w
        .problems(&warnings, None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
    let input = w.input_spec(None, Path::new("/p")).unwrap();
    assert_eq!(input.path, Path::new("/p/issues.jsonl"));
    assert_eq!(input.format, InputFormat::Jsonl);
    let other = w.input_spec(Some("more.csv"), Path::new("/p")).unwrap();
    assert_eq!(other.format, InputFormat::Csv);
}

#[test]
fn the_defaults_fill_what_is_not_given() {
    let (w, _) = parse("name: x\ninput: a.jsonl\nmap: {agent: explore, prompt: hi}\n");
    assert_eq!(w.map.concurrency, DEFAULT_CONCURRENCY);
    assert_eq!(w.map.retries, 0);
    assert_eq!(w.map.limits, Limits::default());
    assert_eq!(w.key, None);
    assert!(w.reduce.is_none());
    assert_eq!(w.budget.tokens, None);
}

#[test]
fn numbers_may_be_strings_and_times_seconds() {
    let (w, _) = parse(
        "name: x\nmap:\n  agent: a\n  prompt: p\n  concurrency: \"8\"\n  retries: '1'\n  limits: {tokens: \"50_000\", turns: '3', time: 90}\nbudget: {tokens: 1_000_000}\n",
    );
    assert_eq!(w.map.concurrency, 8);
    assert_eq!(w.map.retries, 1);
    assert_eq!(w.map.limits.tokens, Some(50_000));
    assert_eq!(w.map.limits.turns, Some(3));
    assert_eq!(w.map.limits.time, Some(Duration::from_secs(90)));
    assert_eq!(w.budget.tokens, Some(1_000_000));
    let (w, _) = parse("name: x\nmap: {agent: a, prompt: p, limits: {time: 1h 30m}}\n");
    assert_eq!(w.map.limits.time, Some(Duration::from_secs(5400)));
    let bad = Workflow::parse(
        "name: x\nmap: {agent: a, prompt: p, limits: {time: soon}}\n",
        Path::new("w.yaml"),
    );
    let err = bad.unwrap_err().to_string();
    assert!(err.contains("w.yaml") && err.contains("soon"), "{err}");
}

#[test]
fn unknown_keys_warn_and_a_strict_check_reports_them() {
    let (w, warnings) = parse(
        "name: x\ncolour: red\ninput: a.jsonl\nmap: {agent: a, prompt: p, limit: {tokens: 1}, limits: {tokns: 2}}\nreduce: {agent: b, prompt: q, model: opus}\n",
    );
    let at: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        at,
        [
            "unknown key `colour` ignored",
            "unknown key `map.limit` ignored",
            "unknown key `map.limits.tokns` ignored",
            "unknown key `reduce.model` ignored",
        ]
    );
    assert_eq!(w.problems(&warnings, None).len(), 4);
}

#[test]
fn a_check_finds_every_problem_of_the_file() {
    let (w, warnings) = parse(
        "map: {agent: '', prompt: p, concurrency: 0, output_schema: {type: 12}, limits: {turns: 0, time: 0s}}\ninput: data.txt\nreduce: {agent: plan}\nbudget: {tokens: 0}\n",
    );
    let problems: Vec<String> = w
        .problems(&warnings, None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        problems.contains(&"`name` is missing or empty".to_owned()),
        "{problems:?}"
    );
    assert!(problems.contains(&"`map.agent` is missing or empty".to_owned()));
    assert!(problems.contains(&"`reduce.prompt` is missing or empty".to_owned()));
    assert!(problems.contains(&"`map.concurrency` must be at least 1".to_owned()));
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("`map.output_schema`: ")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("cannot tell the format")),
        "{problems:?}"
    );
    assert!(problems.contains(
        &"`map.limits.turns` is 0: give at least 1, or leave it out for no limit".to_owned()
    ));
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("`map.limits.time` is 0")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("`budget.tokens` is 0")),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 9, "{problems:?}");
}

#[test]
fn args_take_their_defaults_and_must_be_declared() {
    let (w, _) = parse("name: x\nargs: {style: terse, team: null}\nmap: {agent: a, prompt: p}\n");
    let err = w.args_with(&[]).unwrap_err().to_string();
    assert!(err.contains("--arg team=VALUE"), "{err}");
    let args = w.args_with(&[("team".into(), "core".into())]).unwrap();
    assert_eq!(args["style"], "terse");
    assert_eq!(args["team"], "core");
    let err = w
        .args_with(&[("team".into(), "c".into()), ("colour".into(), "r".into())])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"colour\"") && err.contains("style, team"),
        "{err}"
    );
}

#[test]
fn saved_workflows_are_found_by_name_or_path() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join(WORKFLOWS_DIR);
    std::fs::create_dir_all(&saved).unwrap();
    std::fs::write(saved.join("b.yml"), EXAMPLE).unwrap();
    std::fs::write(saved.join("a.yaml"), EXAMPLE).unwrap();
    std::fs::write(saved.join("notes.txt"), "").unwrap();
    assert_eq!(
        saved_workflows(dir.path()),
        [saved.join("a.yaml"), saved.join("b.yml")]
    );
    assert_eq!(find_workflow(dir.path(), "b").unwrap(), saved.join("b.yml"));
    let by_path = saved.join("a.yaml");
    assert_eq!(
        find_workflow(dir.path(), by_path.to_str().unwrap()).unwrap(),
        by_path
    );
    // The example's `name:` finds it too, though no file is named so.
    assert_eq!(
        find_workflow(dir.path(), "label-issues").unwrap(),
        saved.join("a.yaml")
    );
    let err = find_workflow(dir.path(), "c").unwrap_err();
    assert!(matches!(err, WorkflowError::NotFound { .. }), "{err}");
    assert!(saved_workflows(&dir.path().join("none")).is_empty());
}

#[test]
fn the_items_and_each_call_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("issues.jsonl"),
        "{\"id\": 3}\n{\"id\": 3}\n",
    )
    .unwrap();
    let (w, _) = parse(EXAMPLE);
    let items: Vec<_> = w.items(None, dir.path()).unwrap().collect();
    assert_eq!(items[0].as_ref().unwrap().key, "3");
    assert!(items[1].is_err(), "the duplicate key is bad input");
    let call = w.map_call("Label this issue: x", "m");
    assert_eq!(call.agent, "explore");
    assert_eq!(call.limits, &w.map.limits);
    assert_eq!(call.output_schema, w.map.output_schema.as_ref());
    assert_ne!(call.key(), w.map_call("Label this issue: y", "m").key());
}
