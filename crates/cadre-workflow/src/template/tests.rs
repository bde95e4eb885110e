use super::*;
use crate::file::Workflow;

fn workflow(map_prompt: &str, reduce_prompt: Option<&str>) -> Workflow {
    let mut text =
        format!("name: t\ninput: x.jsonl\nmap:\n  agent: explore\n  prompt: {map_prompt:?}\n");
    if let Some(r) = reduce_prompt {
        text.push_str(&format!("reduce:\n  agent: plan\n  prompt: {r:?}\n"));
    }
    Workflow::parse(&text, Path::new("t.yaml")).unwrap().0
}

fn item(value: Value, line: Option<u64>) -> Item {
    Item {
        position: 4,
        line,
        key: "k4".into(),
        value,
    }
}

#[test]
fn the_map_prompt_renders_the_item_and_the_args() {
    let prompts = workflow(
        "Label {{ item.title }} ({{ key }}) as {{ args.style }}",
        None,
    )
    .prompts()
    .unwrap();
    let mut args = Map::new();
    args.insert("style".into(), json!("terse"));
    let text = prompts
        .map(&item(json!({"title": "Crash"}), Some(5)), &args)
        .unwrap();
    assert_eq!(text, "Label Crash (k4) as terse");
    assert!(prompts.reduce(Path::new("r.jsonl"), &args).is_none());
}

#[test]
fn a_missing_field_is_named_with_the_item() {
    let prompts = workflow("{{ item.title }}\n{{ item.body }}", None)
        .prompts()
        .unwrap();
    let err = prompts
        .map(&item(json!({"title": "Crash"}), Some(5)), &Map::new())
        .unwrap_err();
    match &err {
        TemplateError::MissingField {
            field, key, line, ..
        } => {
            assert_eq!(field, "item.body");
            assert_eq!(key.as_deref(), Some("k4"));
            assert_eq!(*line, Some(5));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "map prompt: `item.body` is not defined for item \"k4\" (line 5)"
    );
    let args = workflow("{{ args.missing }}", None).prompts().unwrap();
    let err = args.map(&item(json!({}), None), &Map::new()).unwrap_err();
    assert!(err.to_string().contains("`args.missing`"), "{err}");
}

#[test]
fn a_template_that_does_not_parse_says_its_step() {
    let err = workflow("{{ item.title", None).prompts().unwrap_err();
    assert!(
        matches!(
            err,
            TemplateError::Syntax {
                step: Step::Map,
                ..
            }
        ),
        "{err:?}"
    );
    let err = workflow("ok", Some("{% if %}")).prompts().unwrap_err();
    assert!(err.to_string().starts_with("reduce prompt:"), "{err}");
}

#[test]
fn the_reduce_prompt_gets_the_results_path_and_not_an_item() {
    let prompts = workflow("x", Some("Sum up {{ results_path }}"))
        .prompts()
        .unwrap();
    let text = prompts
        .reduce(Path::new("runs/r/results.jsonl"), &Map::new())
        .unwrap()
        .unwrap();
    assert_eq!(text, "Sum up runs/r/results.jsonl");
    let uses_item = workflow("x", Some("{{ item.title }}")).prompts().unwrap();
    let err = uses_item
        .reduce(Path::new("r"), &Map::new())
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, TemplateError::MissingField { ref field, key: None, .. } if field == "item.title"),
        "{err:?}"
    );
}

#[test]
fn a_whole_item_can_be_handed_over_as_json() {
    let prompts = workflow("Review {{ item | tojson }}", None)
        .prompts()
        .unwrap();
    let text = prompts
        .map(&item(json!({"id": 1, "tags": ["a"]}), None), &Map::new())
        .unwrap();
    let json = text.strip_prefix("Review ").unwrap();
    let back: Value = serde_json::from_str(json).unwrap();
    assert_eq!(back, json!({"id": 1, "tags": ["a"]}));
}
