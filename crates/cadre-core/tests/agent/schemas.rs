use super::*;
use cadre_core::SkillSet;
use std::path::Path;

/// The tool definitions the model is offered must not change by accident: recorded
/// cassettes key their requests by them, so a drifted schema stops every replay.
#[tokio::test]
async fn the_tool_schemas_offered_to_the_model_match_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("skills/demo/SKILL.md");
    std::fs::create_dir_all(skill.parent().unwrap()).unwrap();
    std::fs::write(
        &skill,
        "---\nname: demo\ndescription: A demonstration skill.\n---\nDo the demo.\n",
    )
    .unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("done")]);
    let o = mock_builder(&server, dir.path())
        .skills(Arc::new(SkillSet::load(&[dir.path().join("skills")])))
        .build()
        .unwrap();
    o.run("main", "hello").await.unwrap();
    let tools = server.requests()[0].body["tools"].clone();
    // The body is parsed as it arrived, so key order is compared too wherever the JSON
    // maps keep it.
    let got = serde_json::to_string_pretty(&tools).unwrap() + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tool_schemas.json");
    if std::env::var_os("CADRE_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    let names: Vec<String> = server.requests()[0].tool_names();
    assert!(
        cadre_tools::BUILTIN_TOOL_NAMES
            .iter()
            .chain(&["Task", "TaskOutput", "TaskStop", "Skill"])
            .all(|n| names.iter().any(|m| m == n)),
        "{names:?}"
    );
    assert!(
        got == want,
        "the tool definitions offered to the model changed (recorded cassettes will no longer replay); if that is intended, run with CADRE_UPDATE_SNAPSHOTS=1\n{}",
        similar::TextDiff::from_lines(&want, &got).unified_diff()
    );
}
