use cadre_core::internal::{claude_agents, frontmatter};
use cadre_core::AgentSpec;
use cadre_core::Skill;
use cadre_core::{Registry, SkillSet};
use proptest::prelude::*;
use std::path::Path;

/// PROPTEST_CASES raises the count for a longer run.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(256),
        ..ProptestConfig::default()
    }
}

/// Text that looks like YAML front matter more often than random text would.
fn yamlish() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        "[a-z_-]{1,12}: [ -~]{0,30}",
        "  - [ -~]{0,20}",
        "[a-z]{1,8}: [|>]",
        "  [ -~]{0,40}",
        "---",
        "[\\PC]{0,40}",
        Just("name: explore".to_owned()),
        Just("description: \"quoted: yes\"".to_owned()),
        Just("tools: Read, Grep, WebFetch, mcp__x__y".to_owned()),
        Just("tools: [read_file, \"*\"]".to_owned()),
        Just("metadata: {a: 1, b: [2]}".to_owned()),
    ];
    prop::collection::vec(line, 0..14).prop_map(|lines| lines.join("\n"))
}

fn known(t: &str) -> bool {
    cadre_core::internal::resolve_tool_name(t).is_some()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn agent_yaml_never_panics(text in yamlish()) {
        let file = Path::new("agents/x.yaml");
        let (spec, problems) = AgentSpec::parse_yaml(file, &text);
        prop_assert!(spec.is_some() || !problems.is_empty(), "rejected without saying why");
        for p in &problems {
            prop_assert!(!p.message.is_empty());
        }
        if let Some(spec) = spec {
            let _ = spec.validate(file, &text, &known);
        }
    }

    #[test]
    fn front_matter_and_claude_agents_never_panic(yaml in yamlish(), body in "[\\PC\n]{0,200}", fence in any::<bool>()) {
        let text = if fence { format!("---\n{yaml}\n---\n{body}") } else { format!("{yaml}\n{body}") };
        let _ = frontmatter::split(&text);
        let _ = frontmatter::read_front_matter(&mut std::io::Cursor::new(text.as_bytes()));
        let (spec, problems) = claude_agents::parse(Path::new(".claude/agents/x.md"), &text);
        prop_assert!(spec.is_some() || !problems.is_empty(), "rejected without saying why");
        for p in problems {
            prop_assert!(!p.message.is_empty());
        }
    }

    #[test]
    fn skill_front_matter_never_panics(yaml in yamlish()) {
        let (skill, problems) = Skill::parse(Path::new("skills/x/SKILL.md"), "x", &yaml);
        prop_assert!(skill.is_some() || !problems.is_empty(), "rejected without saying why");
    }
}

#[test]
fn folders_of_random_files_load_with_problems_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::new(config());
    let strategy = (yamlish(), "[\\PC\n]{0,100}");
    for i in 0..64 {
        let (yaml, body) = strategy.new_tree(&mut runner).unwrap().current();
        std::fs::write(dir.path().join(format!("a{i}.yaml")), &yaml).unwrap();
        std::fs::write(
            dir.path().join(format!("c{i}.md")),
            format!("---\n{yaml}\n---\n{body}"),
        )
        .unwrap();
        let skill = dir.path().join(format!("skills/s{i}"));
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), format!("---\n{yaml}\n---\n{body}")).unwrap();
    }
    let registry = Registry::load(&[dir.path().to_path_buf()]);
    assert!(
        registry.get("main").is_some(),
        "the shipped types survive bad neighbours"
    );
    let skills = SkillSet::load(&[dir.path().join("skills")]);
    assert!(skills.problems().len() + skills.len() >= 64);
}
