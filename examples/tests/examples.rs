//! Every example runs offline from its shipped cassette, through the real agent loop,
//! orchestrator and tools.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cadre_core::StopKind;
use cadre_examples::{cassette, delegation, docs_qa, sample_project, weather};
use cadre_model::{Model, ReplayModel};
use std::sync::Arc;

fn replay(name: &str) -> Arc<dyn Model> {
    Arc::new(ReplayModel::open(cassette(name)).unwrap())
}

#[tokio::test]
async fn weather_replays_offline() {
    let scratch = tempfile::tempdir().unwrap();
    let orchestrator = weather::orchestrator(replay("weather"), scratch.path()).unwrap();
    let mut events = orchestrator.events();
    let outcome = weather::what_to_wear(&orchestrator, "Paris").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert!(outcome.text.contains("umbrella"));
    assert_eq!(outcome.tool_calls, 1);
    // The typed tool's result reached the model, and its call streamed as an event.
    let history = serde_json::to_string(&outcome.history).unwrap();
    assert!(history.contains("70% chance of rain"), "{history}");
    let mut calls = Vec::new();
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        if let cadre_core::Event::ToolCall { name, input, .. } = event {
            calls.push((name, input));
        }
    }
    assert_eq!(
        calls,
        [(
            "get_weather".to_owned(),
            serde_json::json!({"city": "Paris"})
        )]
    );
}

#[tokio::test]
async fn docs_qa_replays_offline_and_stays_in_the_docs_folder() {
    let docs = sample_project().join("docs");
    let outcome = docs_qa::ask(
        replay("docs_qa"),
        &docs,
        "Where does todo store its items, and can I change the location?",
    )
    .await
    .unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert!(outcome.text.contains("TODO_FILE"));
    // The read outside docs/ was refused with an is_error result, as recorded.
    let refused = serde_json::to_string(&outcome.history).unwrap();
    assert!(refused.contains("outside the workspace"), "{refused}");
}

#[tokio::test]
async fn delegation_replays_offline_and_edits_a_fresh_copy() {
    let project = delegation::fresh_copy(&sample_project()).unwrap();
    let (outcome, summary) = delegation::run(
        replay("delegation"),
        project.path(),
        delegation::TASK,
        false,
    )
    .await
    .unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    let types: Vec<&str> = summary
        .usage
        .agents
        .iter()
        .map(|a| a.agent_type.as_str())
        .collect();
    for t in ["explore", "plan", "code", "main"] {
        assert!(types.contains(&t), "{types:?}");
    }
    let cli = std::fs::read_to_string(project.path().join("src/todo/cli.py")).unwrap();
    assert!(
        cli.contains("\"--priority\"") && cli.contains("\"priority\": args.priority"),
        "{cli}"
    );
    // The shipped sample project itself is untouched.
    let original = std::fs::read_to_string(sample_project().join("src/todo/cli.py")).unwrap();
    assert!(!original.contains("--priority"));
}

#[tokio::test]
async fn team_replays_offline_with_its_messages_and_edits_a_fresh_copy() {
    let project = delegation::fresh_copy(&sample_project()).unwrap();
    let (outcome, summary) = cadre_examples::team::run(
        replay("team"),
        project.path(),
        cadre_examples::team::TASK,
        false,
    )
    .await
    .unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{}", outcome.text);
    assert!(
        outcome.text.contains("reviewer approved"),
        "{}",
        outcome.text
    );
    let types: Vec<&str> = summary
        .usage
        .agents
        .iter()
        .map(|a| a.agent_type.as_str())
        .collect();
    for t in ["lead", "coder", "explore"] {
        assert!(types.contains(&t), "{types:?}");
    }
    // The coder's fix after the reviewer's message is in the copy.
    let cli = std::fs::read_to_string(project.path().join("src/todo/cli.py")).unwrap();
    assert!(
        cli.contains("type=date.fromisoformat") && cli.contains("args.due.isoformat()"),
        "{cli}"
    );
    // The lead heard from the coder only after the reviewer's second look.
    let history = serde_json::to_string(&outcome.history).unwrap();
    assert!(
        history.contains("team-message from=\\\"coder\\\""),
        "{history}"
    );
}
