use super::*;
use cadre_core::{McpServerRef, Mode, Orchestrator, Registry, SkillSet};
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Every problem as `file:line:column: kind: message`, the path relative to the corpus.
fn report(problems: &[cadre_core::Problem]) -> Vec<String> {
    let root = corpus();
    problems
        .iter()
        .map(|p| {
            let rel = p.file.strip_prefix(&root).unwrap_or(&p.file);
            let kind = if p.warning { "warning" } else { "error" };
            format!(
                "{}:{}:{}: {kind}: {}",
                rel.display(),
                p.line,
                p.column,
                p.message
            )
        })
        .collect()
}

/// Asserts that `report` holds exactly the problems `want` (prefixes), in any order.
fn assert_exactly(report: &[String], want: &[&str]) {
    for w in want {
        assert!(
            report.iter().any(|p| p.starts_with(w)),
            "no {w:?} in {report:#?}"
        );
    }
    for p in report {
        assert!(want.iter().any(|w| p.starts_with(w)), "unexpected {p:?}");
    }
}

#[test]
fn every_agent_file_of_the_corpus_loads_with_each_repair_warned_at_its_place() {
    let registry = Registry::load(&[corpus().join("agents")]);
    let names: Vec<&str> = registry.all().map(|s| s.name.as_str()).collect();
    for name in [
        "stats-analyst",
        "powershell-5.1-expert",
        "CodeReviewer",
        "everything",
        "all-dropped",
        "lenient",
        "no-tools",
    ] {
        assert!(names.contains(&name), "{name} did not load: {names:?}");
    }
    let got = report(registry.problems());
    assert_exactly(
        &got,
        &[
            "agents/CodeReviewer.md:2:7: warning: name \"CodeReviewer\" is used as written",
            "agents/all-dropped.md:4:8: warning: tool \"WebFetch\" dropped from tools: cadre does not provide it",
            "agents/all-dropped.md:4:18: warning: unknown tool \"airis-mcp-gateway\" dropped from tools",
            "agents/all-dropped.md:4:1: warning: no tool is left: every entry of tools was dropped (WebFetch, airis-mcp-gateway)",
            "agents/everything.md:21:1: warning: `memory` ignored",
            "agents/everything.md:26:1: warning: `initialPrompt` ignored",
            "agents/lenient.yaml:2:14: warning: not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
            "agents/lenient.yaml:7:1: warning: unknown key `colour` ignored",
            "agents/no-tools.yaml:4:9: warning: unknown tool \"teleport\" dropped from tools",
            "agents/no-tools.yaml:4:19: warning: tool \"WebSearch\" dropped from tools",
            "agents/no-tools.yaml:4:1: warning: no tool is left",
            "agents/powershell-5.1-expert.md:2:7: warning: name \"powershell-5.1-expert\" is used as written",
            "agents/stats-analyst.md:3:14: warning: not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
            "agents/stats-analyst.md:5:20: warning: unknown tool \"airis-mcp-gateway\" dropped from tools",
            "agents/stats-analyst.md:5:39: warning: unknown tool \"context-manager\" dropped from tools",
        ],
    );

    let stats = registry.get("stats-analyst").unwrap();
    assert_eq!(
        stats.description,
        "Use when analysing experiment results. Triggers on: 'p-value', 'regression' and 'confidence interval' questions."
    );
    assert_eq!(
        stats.tools,
        ["read_file", "grep", "mcp__github__search_issues"]
    );
    assert_eq!(
        stats.dropped_tools,
        ["airis-mcp-gateway", "context-manager"]
    );
    assert_eq!(stats.model, "sonnet");
    assert!(stats.unusable().is_none());

    let ps = registry.get("powershell-5.1-expert").unwrap();
    assert_eq!(ps.tools, ["read_file", "write_file", "bash"]);

    let every = registry.get("everything").unwrap();
    assert_eq!(every.mode, Mode::Subagent);
    assert_eq!(every.tools, ["read_file", "grep", "Task", "mcp__github"]);
    assert_eq!(every.subagent_types, ["explore"]);
    assert_eq!(every.disallowed_tools, ["write_file"]);
    assert_eq!(every.model, "haiku");
    assert_eq!(every.permission_mode.as_deref(), Some("plan"));
    assert!(every.read_only, "permissionMode: plan is read-only");
    assert_eq!(every.max_turns, 12);
    assert_eq!(every.skills, ["*"]);
    assert_eq!(every.preload_skills, ["stats-helper", "missing-skill"]);
    let inline = json!({"local-db": {"command": "db-mcp", "args": ["--read-only"]}});
    assert_eq!(
        every.mcp_servers,
        [
            McpServerRef::Name("github".into()),
            McpServerRef::Inline(serde_json::from_value(inline).unwrap()),
        ]
    );
    assert!(every.background);
    assert_eq!(every.isolation.as_deref(), Some("worktree"));
    assert_eq!(every.color.as_deref(), Some("blue"));
    // Claude Code's `effort` is the type's effort, sent as output_config.effort.
    assert_eq!(every.effort(), Some(cadre_model::Effort::High));
    assert_eq!(every.prompt, "You use everything.");
    // Its hooks load as Claude Code wrote them, scoped to its agents.
    let hooks: Vec<_> = every.hooks.all().iter().collect();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].event, cadre_core::HookEvent::PreToolUse);
    assert_eq!(hooks[0].matcher.as_deref(), Some("Bash"));
    assert_eq!(hooks[0].command, "echo checked");

    let dropped = registry.get("all-dropped").unwrap();
    assert!(dropped.tools.is_empty());
    let why = dropped.unusable().unwrap();
    assert_eq!(why.agent_type, "all-dropped");
    assert_eq!(why.dropped, ["WebFetch", "airis-mcp-gateway"], "{why}");
    assert!(
        why.to_string().contains("(WebFetch, airis-mcp-gateway)"),
        "{why}"
    );

    let lenient = registry.get("lenient").unwrap();
    assert_eq!(
        lenient.description,
        "Use when checking: this value is not strict YAML"
    );
    assert_eq!(
        lenient.tools,
        ["read_file", "grep", "mcp__github__search_issues", "Task"]
    );
    assert_eq!(lenient.subagent_types, ["plan"]);
    assert_eq!(lenient.preload_skills, ["stats-helper"]);
    assert!(lenient.read_only);
    assert_eq!(lenient.prompt, "You are lenient.\n");
}

#[test]
fn every_skill_of_the_corpus_loads_with_each_repair_warned_at_its_place() {
    let set = SkillSet::load(&[corpus().join("skills")]);
    let names: Vec<&str> = set.all().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["claude-api", "stats-helper"]);
    assert_exactly(
        &report(set.problems()),
        &[
            "skills/claude-api/SKILL.md:3:1: warning: description too long: 1068 characters",
            "skills/stats-helper/SKILL.md:3:14: warning: not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
        ],
    );
    let api = set.get("claude-api").unwrap();
    assert_eq!(api.description.chars().count(), 1068);
    assert_eq!(
        set.get("stats-helper").unwrap().description,
        "Use for statistics. Triggers on: 'p-value', 'regression'"
    );
    // Listed, the long description is cut to 1,024 characters.
    let section = cadre_core::internal::skills_section(&[api], 100_000).unwrap();
    let line = section
        .lines()
        .find(|l| l.starts_with("- claude-api:"))
        .unwrap();
    let listed = line.trim_start_matches("- claude-api: ");
    assert!(listed.ends_with('…'), "{listed}");
    assert!(listed.chars().count() <= 1024 && listed.chars().count() > 1000);
}

fn orchestrator(server: &MockServer, dir: &Path) -> Arc<Orchestrator> {
    mock_builder(server, dir)
        .registry(Registry::load(&[corpus().join("agents")]))
        .skills(Arc::new(SkillSet::load(&[corpus().join("skills")])))
        .build()
        .unwrap()
}

/// The `Task` tool definition offered in `request`.
fn task_tool(request: &cadre_testkit::Captured) -> Value {
    request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Task")
        .cloned()
        .unwrap_or_else(|| panic!("no Task in {:?}", request.tool_names()))
}

#[tokio::test]
async fn an_agent_whose_every_tool_was_dropped_fails_to_start_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "all-dropped", "Fetch the page")]),
            Reply::text("done"),
        ],
    );
    let o = orchestrator(&server, dir.path());
    let (outcome, _) = o.run("main", "PARENT").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    let last = server.requests().pop().unwrap();
    let results = last.messages().last().unwrap()["content"].clone();
    assert_eq!(results[0]["is_error"], true);
    let why = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(
        why.contains("\"all-dropped\" cannot start") && why.contains("WebFetch, airis-mcp-gateway"),
        "{why}"
    );
    // It never reached the model.
    assert!(server
        .requests()
        .iter()
        .all(|r| r.first_user_text() != "Fetch the page"));

    // As the primary agent, the run does not start, and says why.
    let o = orchestrator(&server, dir.path());
    let err = o.run("no-tools", "anything").await.unwrap_err().to_string();
    assert!(err.contains("teleport, WebSearch"), "{err}");
}

#[tokio::test]
async fn preloaded_skills_are_in_the_prompt_and_task_types_limit_what_it_may_start() {
    let dir = tempfile::tempdir().unwrap();
    // The file says `isolation: worktree`: its subagent needs a repository with a commit.
    cadre_testkit::git::init_repo(dir.path());
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "everything", "Use every field")]),
            Reply::text("done"),
            // Its type says `background: true`: the result comes after the turn ends.
            Reply::text("got its result"),
        ],
    );
    server.route(
        Match::FirstUserContains("Use every field".into()),
        vec![
            Reply::tasks([("e1", "plan", "Plan it"), ("e2", "explore", "Explore it")]),
            Reply::text("used"),
        ],
    );
    server.route(
        Match::FirstUserContains("Explore it".into()),
        vec![Reply::text("explored")],
    );
    let o = orchestrator(&server, dir.path());
    let (outcome, _) = o.run("main", "PARENT").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(outcome.text, "got its result");
    let requests = server.requests();
    let delivered = requests
        .iter()
        .rfind(|r| r.first_user_text() == "PARENT")
        .unwrap()
        .last_user_text();
    assert!(
        delivered.contains("task_1") && delivered.contains("used"),
        "{delivered}"
    );
    let first = |text: &str| {
        requests
            .iter()
            .find(|r| r.first_user_text() == text)
            .cloned()
            .unwrap()
    };

    let every = first("Use every field");
    let system = every.system_text();
    assert!(system.starts_with("You use everything."), "{system}");
    assert!(
        system.contains("## Preloaded skills")
            && system.contains("### Skill: stats-helper\n\n# Statistics\n\nSTATS-BODY-MARKER"),
        "{system}"
    );
    // A preloaded name that matches no skill is skipped.
    assert!(!system.contains("missing-skill"), "{system}");
    assert!(!system.contains("CLAUDE-API-BODY"), "{system}");
    // Its Task offers only the types its file allows.
    let task = task_tool(&every);
    assert_eq!(
        task["input_schema"]["properties"]["subagent_type"]["enum"],
        json!(["explore"])
    );
    let description = task["description"].as_str().unwrap();
    assert!(description.contains("- explore:") && !description.contains("- plan:"));
    // The primary agent may start any type.
    let main_enum =
        task_tool(&first("PARENT"))["input_schema"]["properties"]["subagent_type"]["enum"].clone();
    assert!(main_enum.as_array().unwrap().len() > 3, "{main_enum}");

    // A call naming another type is an error result; the allowed one runs.
    let after = requests
        .iter()
        .filter(|r| r.first_user_text() == "Use every field")
        .nth(1)
        .unwrap();
    let results = after.messages().last().unwrap()["content"].clone();
    assert_eq!(results[0]["is_error"], true);
    let why = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(
        why.contains("\"plan\" is not one this agent may start"),
        "{why}"
    );
    assert_eq!(results[1]["content"][0]["text"], "explored");
    assert!(requests.iter().all(|r| r.first_user_text() != "Plan it"));
}
