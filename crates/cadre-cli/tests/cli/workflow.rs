//! `cadre workflow check` and `cadre workflow list` on real files in a temp project; no
//! model is called (the base URL points at a closed port and there is no key).

use super::*;

/// The issue's example workflow, over `issues.jsonl`.
const LABEL: &str = r#"name: label-issues
description: Label each issue.
input: issues.jsonl
key: id
args: {style: terse}
map:
  agent: explore
  prompt: |
    Label this issue ({{ args.style }}): {{ item.title }}
    {{ item.body }}
  output_schema: {type: object, properties: {label: {type: string}}, required: [label]}
  concurrency: 16
  retries: 2
  limits: {tokens: 50000, turns: 10, time: 5m}
reduce:
  agent: plan
  prompt: Summarise the labels in {{ results_path }}.
budget: {tokens: 2000000}
"#;

const ISSUES: &str = "{\"id\": 17, \"title\": \"Crash on start\", \"body\": \"It panics.\"}\n{\"id\": 18, \"title\": \"Slow\"}\n";

/// A project with the example saved and its input.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    write_file(
        &dir.path().join(".cadre/workflows/label-issues.yaml"),
        LABEL,
    );
    write_file(&dir.path().join("issues.jsonl"), ISSUES);
    dir
}

async fn workflow(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["workflow"];
    all.extend_from_slice(args);
    cadre(dir, "http://127.0.0.1:9", None, &all).await
}

#[tokio::test]
async fn workflow_check_renders_the_first_prompt_of_a_good_file() {
    let dir = project();
    let out = workflow(dir.path(), &["check", "label-issues"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let text = &out.stdout;
    assert!(
        text.contains(
            "workflow label-issues (.cadre/workflows/label-issues.yaml): Label each issue."
        ),
        "{text}"
    );
    assert!(
        text.contains("input   issues.jsonl (jsonl), items named by `id`"),
        "{text}"
    );
    assert!(
        text.contains("map     explore, 16 at once, 2 retries, typed answers (output_schema), limits: 50000 tokens, 10 turns, 5m"),
        "{text}"
    );
    assert!(text.contains("reduce  plan"), "{text}");
    // The second issue has no body: the whole input is read, and its item would fail.
    assert!(
        text.contains("items   2, of which 1 would fail (bad input, or a prompt that does not render):\n    - map prompt: `item.body` is not defined for item \"18\" (line 2)\n"),
        "{text}"
    );
    assert!(
        text.contains("first item, key \"17\" (line 1); its prompt:"),
        "{text}"
    );
    assert!(
        text.contains("  Label this issue (terse): Crash on start\n  It panics."),
        "{text}"
    );
    assert!(text.contains("OK: no model was called"), "{text}");
    // By path, with an argument and another input given on the command line.
    write_file(
        &dir.path().join("more.csv"),
        "id,title,body\nA1,Typo,In README\n",
    );
    let file = dir.path().join(".cadre/workflows/label-issues.yaml");
    let out = workflow(
        dir.path(),
        &[
            "check",
            file.to_str().unwrap(),
            "--input",
            "more.csv",
            "--arg",
            "style=long",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("(csv)"), "{}", out.stdout);
    assert!(out.stdout.contains("  items   1\n"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("Label this issue (long): Typo\n  In README"),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn workflow_check_names_every_problem_of_a_bad_file() {
    let dir = project();
    let bad = r#"name: bad
input: issues.jsonl
key: id
map:
  agent: explorer
  prompt: "{{ item.title }} {{ item.labels }}"
  output_schema: {type: 12}
  limts: {tokens: 5}
reduce:
  agent: summariser
  prompt: "{{ results_path }}"
"#;
    write_file(&dir.path().join("bad.yaml"), bad);
    let out = workflow(dir.path(), &["check", "bad.yaml"]).await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    let text = &out.stdout;
    assert!(text.contains("bad.yaml: 5 problem(s):"), "{text}");
    assert!(text.contains("unknown key `map.limts` ignored"), "{text}");
    assert!(text.contains("`map.output_schema`: "), "{text}");
    assert!(
        text.contains("map: there is no agent type \"explorer\"; the types are: "),
        "{text}"
    );
    assert!(
        text.contains("reduce: there is no agent type \"summariser\""),
        "{text}"
    );
    assert!(
        text.contains("map prompt: `item.labels` is not defined for item \"17\" (line 1)"),
        "{text}"
    );
    assert!(!text.contains("OK"), "{text}");
    // A bad first item is a problem too, named with its line; an unknown --arg is another.
    write_file(&dir.path().join("broken.jsonl"), "\n{not json\n");
    let out = workflow(
        dir.path(),
        &["check", "label-issues", "--input", "broken.jsonl"],
    )
    .await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("the first item: item 0 (line 2): not JSON"),
        "{}",
        out.stdout
    );
    let out = workflow(
        dir.path(),
        &["check", "label-issues", "--arg", "colour=red"],
    )
    .await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("unknown argument \"colour\": the workflow's `args` declare style"),
        "{}",
        out.stdout
    );
    let out = workflow(dir.path(), &["check", "nonesuch"]).await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("there is no workflow \"nonesuch\""),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn workflow_list_shows_the_saved_workflows() {
    let dir = project();
    let none = tempfile::tempdir().unwrap();
    std::fs::create_dir(none.path().join(".git")).unwrap();
    let out = workflow(none.path(), &["list"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no saved workflows"), "{}", out.stderr);
    write_file(
        &dir.path().join(".cadre/workflows/review.yml"),
        "name: review-files\ndescription: Review each changed file.\ninput: 'src/**/*.rs'\nmap: {agent: explore, prompt: 'Review {{ item.path }}'}\n",
    );
    write_file(&dir.path().join(".cadre/workflows/broken.yaml"), "map: [\n");
    let out = workflow(dir.path(), &["list"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(
        lines[0].starts_with("name")
            && lines[0].contains("file")
            && lines[0].ends_with("description")
    );
    assert!(
        lines[1].starts_with("label-issues")
            && lines[1].contains(".cadre/workflows/label-issues.yaml")
            && lines[1].ends_with("Label each issue."),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("review-files") && lines[2].ends_with("Review each changed file."),
        "{}",
        lines[2]
    );
    assert!(out.stderr.contains("broken.yaml"), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 workflow file(s) could not be read"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn workflow_help_offers_check_list_run_and_retry() {
    let dir = project();
    let out = workflow(dir.path(), &["--help"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let commands: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        ["check", "list", "run", "retry", "help"],
        "{}",
        out.stdout
    );
    let out = workflow(dir.path(), &["run", "--help"]).await;
    assert!(out.stdout.contains("cadre resume RUN_ID"), "{}", out.stdout);
    assert!(out.stdout.contains("exits 3"), "{}", out.stdout);
    let out = workflow(dir.path(), &["retry", "--help"]).await;
    assert!(
        out.stdout.contains("--item KEY --prompt TEXT"),
        "{}",
        out.stdout
    );
    let out = workflow(dir.path(), &["check", "--help"]).await;
    assert!(out.stdout.contains("It calls no model"), "{}", out.stdout);
    assert!(out.stdout.contains("--arg <NAME=VALUE>"), "{}", out.stdout);
}
