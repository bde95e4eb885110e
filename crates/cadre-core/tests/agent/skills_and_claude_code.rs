use super::*;
use cadre_core::{AgentSpec, Mode, Orchestrator, Registry, SkillSet};
use std::path::{Path, PathBuf};

const SUBAGENT: &str = "You are a subagent";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn orchestrator(
    server: &MockServer,
    dir: &Path,
    registry: Registry,
    skills: SkillSet,
) -> Arc<Orchestrator> {
    mock_builder(server, dir)
        .registry(registry)
        .skills(Arc::new(skills))
        .build()
        .unwrap()
}

/// The tool results sent in `request`'s last message.
fn results_of(request: &cadre_testkit::Captured) -> Vec<Value> {
    request.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone()
}

/// A skills folder in the published format: a folded and a quoted description,
/// license, metadata, allowed-tools, and scripts/, references/ and assets/ beside it.
fn published_skills(root: &Path) -> PathBuf {
    let skills = root.join("skills");
    write(
        &skills.join("lint-guide/SKILL.md"),
        "---\nname: lint-guide\ndescription: >\n  Use when fixing lint warnings:\n  the house rules.\nlicense: Apache-2.0\nmetadata:\n  author: qa-team\n  version: \"2.1\"\nallowed-tools: Read Bash(cargo clippy:*)\n---\n\n# Lint guide\n\nBODY-MARKER: read references/rules.md, then run scripts/check.sh.\n",
    );
    write(
        &skills.join("lint-guide/references/rules.md"),
        "RULE-CONTENT: no unwrap outside tests\n",
    );
    write(
        &skills.join("lint-guide/scripts/check.sh"),
        "#!/bin/sh\necho ok\n",
    );
    write(&skills.join("lint-guide/assets/template.txt"), "T\n");
    write(
        &skills.join("release-notes/SKILL.md"),
        "---\nname: release-notes\ndescription: \"Use when writing release notes: group by feat/fix.\"\ncompatibility: Needs git\n---\nWrite notes.\n",
    );
    skills
}

#[test]
fn skills_in_the_published_format_load_and_bad_ones_are_skipped_with_positions() {
    let root = tempfile::tempdir().unwrap();
    let skills = published_skills(root.path());
    write(
        &skills.join("broken/SKILL.md"),
        "---\nname: broken\ndescription: [unclosed\n---\nx\n",
    );
    write(
        &skills.join("noname/SKILL.md"),
        "---\ndescription: d\n---\nx\n",
    );
    write(
        &skills.join("wordy/SKILL.md"),
        &format!(
            "---\nname: wordy\ndescription: {}\n---\nx\n",
            "w".repeat(1025)
        ),
    );
    write(
        &skills.join("folder-a/SKILL.md"),
        "---\nname: folder-b\ndescription: d\n---\nx\n",
    );
    write(&skills.join("plain/SKILL.md"), "# no front matter\n");
    write(
        &skills.join("extra/SKILL.md"),
        "---\nname: extra\ndescription: d\nauthor: me\n---\nx\n",
    );
    let set = SkillSet::load(std::slice::from_ref(&skills));
    let names: Vec<&str> = set.all().map(|s| s.name.as_str()).collect();
    // An overlong description loads (Claude Code loads it too) with a warning.
    assert_eq!(names, ["extra", "lint-guide", "release-notes", "wordy"]);

    let lint = set.get("lint-guide").unwrap();
    assert_eq!(
        lint.description,
        "Use when fixing lint warnings: the house rules."
    );
    assert_eq!(lint.license.as_deref(), Some("Apache-2.0"));
    assert_eq!(lint.metadata["author"], "qa-team");
    assert_eq!(lint.metadata["version"], "2.1");
    assert_eq!(lint.allowed_tools, ["Read", "Bash(cargo clippy:*)"]);
    assert_eq!(lint.dir, skills.join("lint-guide"));
    let files: Vec<String> = lint
        .files()
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    assert_eq!(
        files,
        [
            "assets/template.txt",
            "references/rules.md",
            "scripts/check.sh"
        ]
    );
    let notes = set.get("release-notes").unwrap();
    assert_eq!(
        notes.description,
        "Use when writing release notes: group by feat/fix."
    );
    assert_eq!(notes.compatibility.as_deref(), Some("Needs git"));
    let body = set.body("lint-guide").unwrap();
    assert!(body.starts_with("# Lint guide") && body.contains("BODY-MARKER"));
    assert!(!body.contains("name:"), "{body}");

    let report: Vec<String> = set.problems().iter().map(ToString::to_string).collect();
    let has = |tail: &str| {
        assert!(
            report.iter().any(|p| p.contains(tail)),
            "no {tail:?} in {report:#?}"
        );
    };
    has("broken/SKILL.md:4:1: error: broken YAML");
    has("noname/SKILL.md:1:1: error: missing name");
    has("wordy/SKILL.md:3:1: warning: description too long: 1025 characters");
    has("folder-a/SKILL.md:2:7: error: name \"folder-b\" differs from its folder \"folder-a\"");
    has("plain/SKILL.md:1:1: error: missing front matter");
    has("extra/SKILL.md:4:1: warning: unknown key \"author\"");
    assert_eq!(report.len(), 6, "{report:#?}");
}

#[test]
fn claude_code_agent_files_load_with_mapped_tools_and_dropped_ones_warned() {
    let root = tempfile::tempdir().unwrap();
    let claude = root.path().join(".claude/agents");
    write(
        &claude.join("reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews diffs for bugs. Use after code changes.\ntools: Read, Grep, Glob, Bash\nmodel: sonnet\ncolor: red\n---\n\nYou are a meticulous reviewer.\n",
    );
    write(
        &claude.join("helper.md"),
        "---\nname: helper\ndescription: Helps.\ntools: Read, WebFetch\nmodel: inherit\npermissionMode: default\n---\nHelp out.\n",
    );
    write(
        &claude.join("broken.md"),
        "---\nname: broken\ndescription: Broken.\ntools: Read, Teleport\n---\nNo.\n",
    );
    write(&claude.join("README.md"), "# Our agents\n");
    write(
        &claude.join("shadow.md"),
        "---\nname: shadow\ndescription: from claude\n---\np\n",
    );
    write(
        &root.path().join("agents/shadow.yaml"),
        "name: shadow\ndescription: from cadre\nprompt: p\n",
    );
    let registry = Registry::load(&Registry::standard_dirs(root.path(), None));

    let reviewer = registry.get("reviewer").unwrap();
    assert_eq!(reviewer.mode, Mode::Subagent);
    assert_eq!(reviewer.model, "sonnet");
    assert_eq!(reviewer.tools, ["read_file", "grep", "list_files", "bash"]);
    assert_eq!(reviewer.prompt, "You are a meticulous reviewer.");
    let helper = registry.get("helper").unwrap();
    assert_eq!(helper.model, "inherit");
    assert_eq!(helper.tools, ["read_file"]);
    // A name that is no tool is dropped; the agent loads with the rest.
    assert_eq!(registry.get("broken").unwrap().tools, ["read_file"]);
    assert_eq!(
        registry.get("reviewer").unwrap().color.as_deref(),
        Some("red")
    );
    assert_eq!(registry.get("shadow").unwrap().description, "from cadre");

    let report: Vec<String> = registry
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    let has = |tail: &str| {
        assert!(
            report.iter().any(|p| p.contains(tail)),
            "no {tail:?} in {report:#?}"
        );
    };
    has("helper.md:4:14: warning: tool \"WebFetch\" dropped");
    has("broken.md:4:14: warning: unknown tool \"Teleport\" dropped from tools");
    has("README.md:1:1: warning: skipped: no front matter");
    assert_eq!(report.len(), 3, "{report:#?}");
}

#[tokio::test]
async fn a_claude_code_agent_runs_as_a_subagent_with_its_mapped_tools_and_model() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join(".claude/agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews diffs.\ntools: Read, Grep, WebSearch\nmodel: haiku\n---\nReview carefully.\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "reviewer", "Review the diff")]),
            Reply::text("reviewed"),
        ],
    );
    server.route(
        Match::FirstUserContains("Review the diff".into()),
        vec![Reply::text("looks fine")],
    );
    let registry = Registry::load(&Registry::standard_dirs(dir.path(), None));
    let o = orchestrator(&server, dir.path(), registry, SkillSet::default());
    let (outcome, _) = o.run("main", "PARENT").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    let sub = server
        .requests()
        .into_iter()
        .find(|r| r.first_user_text() == "Review the diff")
        .unwrap();
    assert_eq!(sub.tool_names(), ["read_file", "grep"]);
    assert_eq!(sub.body["model"], "claude-haiku-5-5");
    assert!(sub.system_text().starts_with("Review carefully."));
}

fn no_skills_agent() -> AgentSpec {
    AgentSpec::builder("no-skills")
        .description("Has every tool but no skills.")
        .mode(Mode::Subagent)
        .model("inherit")
        .tools(["*"])
        .disallowed_tools(Vec::<String>::new())
        .read_only(false)
        .network(true)
        .max_turns(5)
        .skills(Vec::<String>::new())
        .prompt("Work without skills.")
        .build()
}

#[tokio::test]
async fn a_subagent_loads_a_skill_then_reads_its_reference_and_the_prompt_never_changes() {
    let dir = tempfile::tempdir().unwrap();
    let skills = SkillSet::load(&[published_skills(dir.path())]);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([
                ("t1", "code", "Fix the lint warnings"),
                ("t2", "explore", "Look around"),
                ("t3", "no-skills", "Work plainly"),
            ]),
            Reply::text("all done"),
        ],
    );
    server.route(
        Match::FirstUserContains("Fix the lint warnings".into()),
        vec![
            Reply::tool_uses(vec![
                ("s1", "Skill", json!({"name": "lint-guide"})),
                ("s2", "Skill", json!({"name": "no-such-skill"})),
            ]),
            Reply::tool_use(
                "r1",
                "read_file",
                json!({"path": "skills/lint-guide/references/rules.md"}),
            ),
            Reply::text("fixed per the rules"),
        ],
    );
    server.route(
        Match::FirstUserContains("Look around".into()),
        vec![Reply::text("looked")],
    );
    server.route(
        Match::FirstUserContains("Work plainly".into()),
        vec![Reply::text("worked")],
    );
    let mut registry = Registry::shipped();
    registry.insert(no_skills_agent());
    let o = orchestrator(&server, dir.path(), registry, skills);
    let (outcome, _) = o.run("main", "PARENT").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);

    let requests = server.requests();
    let of = |first: &str| -> Vec<cadre_testkit::Captured> {
        requests
            .iter()
            .filter(|r| r.first_user_text() == first)
            .cloned()
            .collect()
    };
    let coder = of("Fix the lint warnings");
    assert_eq!(coder.len(), 3);
    // The prompt lists the skills by name and description only.
    let system = coder[0].system_text();
    assert!(system.contains(SUBAGENT));
    assert!(
        system.contains("- lint-guide: Use when fixing lint warnings: the house rules.\n"),
        "{system}"
    );
    assert!(system.contains("- release-notes: Use when writing release notes: group by feat/fix."));
    assert!(!system.contains("BODY-MARKER") && !system.contains("RULE-CONTENT"));
    assert!(coder[0].tool_names().contains(&"Skill".to_string()));
    // The cached prefix (system prompt and tools) is byte-identical before and after.
    for later in &coder[1..] {
        assert_eq!(later.body["system"], coder[0].body["system"]);
        assert_eq!(later.body["tools"], coder[0].body["tools"]);
    }

    // Skill gave the body, the folder inside the workspace and its files.
    let results = results_of(&coder[1]);
    let loaded = results[0]["content"].to_string();
    assert!(results[0].get("is_error").is_none_or(|v| v == false));
    for want in [
        "BODY-MARKER",
        "Folder: skills/lint-guide",
        "references/rules.md",
        "scripts/check.sh",
        "assets/template.txt",
    ] {
        assert!(loaded.contains(want), "no {want:?} in {loaded}");
    }
    assert!(!loaded.contains("name: lint-guide"), "{loaded}");
    assert_eq!(results[1]["is_error"], true);
    let unknown = results[1]["content"].to_string();
    assert!(
        unknown.contains("unknown skill \\\"no-such-skill\\\"")
            && unknown.contains("lint-guide, release-notes"),
        "{unknown}"
    );
    // read_file reached the skill's reference file through the workspace.
    let read = results_of(&coder[2])[0]["content"].to_string();
    assert!(read.contains("RULE-CONTENT"), "{read}");

    // explore (read-only) may load skills too; no-skills allows none, so it is neither
    // offered Skill nor shown the list.
    let explorer = &of("Look around")[0];
    assert!(explorer.tool_names().contains(&"Skill".to_string()));
    assert!(explorer.system_text().contains("Available skills"));
    let plain = &of("Work plainly")[0];
    assert!(!plain.tool_names().contains(&"Skill".to_string()));
    assert!(!plain.system_text().contains("Available skills"));
    assert!(of("Work plainly")[0]
        .tool_names()
        .contains(&"Task".to_string()));
    // The primary agent (every tool, every skill) sees them too.
    let main = of("PARENT");
    assert!(main[0].tool_names().contains(&"Skill".to_string()));
    assert!(main[0].system_text().contains("- lint-guide:"));
}

#[test]
fn load_thousands_of_skills_and_agent_files() {
    let root = tempfile::tempdir().unwrap();
    let skills = root.path().join("skills");
    let agents = root.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    let body = "Step by step instructions.\n".repeat(150);
    for i in 0..1000 {
        write(
            &skills.join(format!("skill-{i:04}/SKILL.md")),
            &format!(
                "---\nname: skill-{i:04}\ndescription: Use when doing task number {i} of many.\nlicense: MIT\nmetadata:\n  index: \"{i}\"\n---\n{body}"
            ),
        );
        write(
            &agents.join(format!("agent-{i:04}.md")),
            &format!(
                "---\nname: agent-{i:04}\ndescription: Agent {i}.\ntools: Read, Grep, Glob\nmodel: haiku\n---\nYou are agent {i}.\n"
            ),
        );
    }
    let started = std::time::Instant::now();
    let set = SkillSet::load(&[skills]);
    let skills_took = started.elapsed();
    let started = std::time::Instant::now();
    let registry = Registry::load(&[agents]);
    let agents_took = started.elapsed();
    assert_eq!(set.len(), 1000);
    assert!(set.problems().is_empty());
    assert_eq!(registry.all().count(), 1005);
    assert!(registry.problems().is_empty());
    eprintln!(
        "load_thousands: 1,000 skills (front matter only) in {skills_took:?}; 1,000 Claude Code agent files in {agents_took:?}; total {:?}",
        skills_took + agents_took
    );
}
