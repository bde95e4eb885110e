use super::*;

#[tokio::test]
async fn agents_check_reports_every_bad_definition_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    let write = |name: &str, text: &str| std::fs::write(agents.join(name), text).unwrap();
    write(
        "broken.yaml",
        "name: broken\ndescription: [unclosed\nprompt: hi\n",
    );
    write(
        "tools.yaml",
        "name: tooly\ndescription: d\ntools: [read_file, teleport]\nprompt: p\n",
    );
    write(
        "badname.yaml",
        "name: Bad Name\ndescription: d\nprompt: p\n",
    );
    write("nodesc.yaml", "name: nodesc\nprompt: p\n");
    write("noprompt.yaml", "name: noprompt\ndescription: d\n");
    write(
        "model.yaml",
        "name: modelly\ndescription: d\nmodel: sonet\nprompt: p\n",
    );
    write("dup1.yaml", "name: twin\ndescription: d\nprompt: p\n");
    write("dup2.yaml", "name: twin\ndescription: d\nprompt: p\n");
    write(
        "typo.yaml",
        "name: typo\ndescription: d\nprompt: p\nmax_turn: 3\n",
    );
    write(
        "good.yaml",
        "name: good\ndescription: A fine agent.\ntools: [Read, Grep]\nprompt: Be good.\n",
    );
    let out = cadre(dir.path(), "http://127.0.0.1:9", None, &["agents", "check"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let report = out.stdout;
    let has = |file: &str, pos: &str, words: &str| {
        let line = report
            .lines()
            .find(|l| l.contains(file) && l.contains(words));
        let line =
            line.unwrap_or_else(|| panic!("no {file} problem mentioning {words:?} in:\n{report}"));
        assert!(
            line.contains(&format!("{file}:{pos}")),
            "{file} should be at {pos}: {line}"
        );
    };
    has("broken.yaml", "3:7", "flow sequence");
    has("tools.yaml", "3:20", "teleport");
    has("badname.yaml", "1:7", "bad name");
    has("nodesc.yaml", "", "missing description");
    has("noprompt.yaml", "", "missing prompt");
    has("model.yaml", "3:8", "unknown model");
    has("dup2.yaml", "1:7", "duplicate agent name");
    has("typo.yaml", "4:", "max_turn");
    assert!(!report.contains("good.yaml"), "{report}");

    let list = cadre(dir.path(), "http://127.0.0.1:9", None, &["agents", "list"]).await;
    assert_eq!(list.code, 0);
    for name in ["main", "explore", "plan", "code", "good"] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{}",
            list.stdout
        );
    }
    let show = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        None,
        &["agents", "show", "explore"],
    )
    .await;
    assert_eq!(show.code, 0);
    assert!(show.stdout.contains("read_only: true"), "{}", show.stdout);
    let missing = cadre(
        dir.path(),
        "http://127.0.0.1:9",
        None,
        &["agents", "show", "nobody"],
    )
    .await;
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("explore"), "{}", missing.stderr);
}

#[tokio::test]
async fn skills_check_reports_each_bad_skill_with_its_position_and_good_ones_still_list() {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    write_file(
        &skills.join("good/SKILL.md"),
        "---\nname: good\ndescription: >\n  Use when testing\n  the CLI.\nlicense: MIT\n---\n# Good\n\nGOOD BODY\n",
    );
    write_file(&skills.join("good/references/notes.md"), "notes\n");
    write_file(
        &skills.join("broken/SKILL.md"),
        "---\nname: broken\ndescription: [oops\n---\nx\n",
    );
    write_file(
        &skills.join("noname/SKILL.md"),
        "---\ndescription: d\n---\nx\n",
    );
    write_file(
        &skills.join("long/SKILL.md"),
        &format!(
            "---\nname: long\ndescription: {}\n---\nx\n",
            "y".repeat(1100)
        ),
    );
    write_file(
        &skills.join("mismatch/SKILL.md"),
        "---\nname: other-name\ndescription: d\n---\nx\n",
    );
    let out = cadre_offline(dir.path(), &["skills", "check"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    for want in [
        "skills/broken/SKILL.md:4:1: error: broken YAML",
        "skills/noname/SKILL.md:1:1: error: missing name",
        "skills/long/SKILL.md:3:1: warning: description too long: 1100 characters, more than the 1024",
        "skills/mismatch/SKILL.md:2:7: error: name \"other-name\" differs from its folder \"mismatch\"",
        "3 error(s)",
    ] {
        assert!(out.stdout.contains(want), "no {want:?} in:\n{}", out.stdout);
    }
    assert!(!out.stdout.contains("good/SKILL.md"), "{}", out.stdout);

    let list = cadre_offline(dir.path(), &["skills", "list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with("good "))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(line.contains("skills/good") && line.contains("Use when testing the CLI."));
    // The overlong description loads too, shortened in the listing.
    assert_eq!(list.stdout.lines().count(), 3, "{}", list.stdout);
    assert!(
        list.stderr.contains("cadre skills check"),
        "{}",
        list.stderr
    );

    let show = cadre_offline(dir.path(), &["skills", "show", "good"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    for want in [
        "name: good",
        "license: MIT",
        "GOOD BODY",
        "references/notes.md (6 bytes)",
    ] {
        assert!(
            show.stdout.contains(want),
            "no {want:?} in:\n{}",
            show.stdout
        );
    }
    let missing = cadre_offline(dir.path(), &["skills", "show", "nobody"]).await;
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("good"), "{}", missing.stderr);

    // An extra folder adds its skills; with only good skills, check passes.
    let extra = tempfile::tempdir().unwrap();
    write_file(
        &extra.path().join("more/SKILL.md"),
        "---\nname: more\ndescription: Use for more.\n---\nMore.\n",
    );
    std::fs::remove_dir_all(skills.join("broken")).unwrap();
    std::fs::remove_dir_all(skills.join("noname")).unwrap();
    std::fs::remove_dir_all(skills.join("long")).unwrap();
    std::fs::remove_dir_all(skills.join("mismatch")).unwrap();
    let extra_dir = extra.path().display().to_string();
    let ok = cadre_offline(dir.path(), &["skills", "check", "--skills-dir", &extra_dir]).await;
    assert_eq!(ok.code, 0, "{}", ok.stdout);
    assert!(ok.stdout.contains("2 skills OK"), "{}", ok.stdout);
}

#[tokio::test]
async fn the_shipped_skills_pass_the_check() {
    let home = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = repo.canonicalize().unwrap().display().to_string();
    let out = cadre_offline(home.path(), &["-C", &repo, "skills", "check"]).await;
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("3 skills OK"), "{}", out.stdout);
    let list = cadre_offline(home.path(), &["-C", &repo, "skills", "list"]).await;
    for name in ["code-review", "commit-message", "writing-tests"] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{}",
            list.stdout
        );
    }
}

#[tokio::test]
async fn agents_check_shows_a_claude_code_files_dropped_tools_as_warnings_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join(".claude/agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews diffs.\ntools: Read, WebFetch, mcp__github__get_pr\nmodel: sonnet\ncolor: purple\n---\nReview.\n",
    );
    let out = cadre_offline(dir.path(), &["agents", "check"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for want in [
        ".claude/agents/reviewer.md:4:14: warning: tool \"WebFetch\" dropped from tools: cadre does not provide it",
        "6 agent types OK, 1 warning(s)",
    ] {
        assert!(out.stdout.contains(want), "no {want:?} in:\n{}", out.stdout);
    }
    let list = cadre_offline(dir.path(), &["agents", "list"]).await;
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with("reviewer"))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(
        line.contains("subagent") && line.contains("read_file"),
        "{line}"
    );

    // MCP tools are kept for the agent to be given later; they are no problem.
    assert!(line.contains("mcp__github__get_pr"), "{line}");

    // An unknown tool is dropped with a warning; --strict makes it an error.
    write_file(
        &dir.path().join(".claude/agents/wizard.md"),
        "---\nname: wizard\ndescription: Casts.\ntools: Read, Teleport\n---\nCast.\n",
    );
    let out = cadre_offline(dir.path(), &["agents", "check"]).await;
    assert_eq!(out.code, 0, "{}", out.stdout);
    let want =
        ".claude/agents/wizard.md:4:14: warning: unknown tool \"Teleport\" dropped from tools";
    assert!(out.stdout.contains(want), "{}", out.stdout);
    assert!(!out.stdout.contains("did you mean"), "{}", out.stdout);

    // A misspelt tool name is told what it most likely meant.
    write_file(
        &dir.path().join(".cadre/agents/typo.yaml"),
        "name: typo\ndescription: Reads.\ntools: [read_fiel, grep]\nprompt: Read.\n",
    );
    let out = cadre_offline(dir.path(), &["agents", "check"]).await;
    let want = ".cadre/agents/typo.yaml:3:9: warning: unknown tool \"read_fiel\" dropped from tools: did you mean read_file?";
    assert!(out.stdout.contains(want), "{}", out.stdout);
}

#[tokio::test]
async fn run_lists_skills_from_skills_dir_in_the_prompt_and_offers_skill() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join("my-skills/demo/SKILL.md"),
        "---\nname: demo\ndescription: Use when demonstrating skills.\n---\nDEMO BODY\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("s1", "Skill", json!({"name": "demo"})),
            Reply::text("demonstrated"),
        ],
    );
    let mut cmd = Command::cargo_bin("cadre").unwrap();
    cmd.current_dir(dir.path())
        .env("HOME", dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env_remove("CADRE_MODEL")
        .args(["run", "--skills-dir", "my-skills", "Show a skill"])
        .timeout(std::time::Duration::from_secs(120));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert!(requests[0].tool_names().contains(&"Skill".to_string()));
    let system = requests[0].system_text();
    assert!(
        system.contains("- demo: Use when demonstrating skills."),
        "{system}"
    );
    assert!(!system.contains("DEMO BODY"));
    assert_eq!(requests[1].system_text(), system);
    assert!(requests[1].last_user_text().contains("DEMO BODY"));
}

#[tokio::test]
async fn skills_install_puts_the_shipped_skills_where_every_project_sees_them() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_str = home.path().to_str().unwrap();
    let before = cadre_env(project.path(), &[("HOME", home_str)], &["skills", "list"]).await;
    assert!(
        before.stderr.contains("no skills found"),
        "{}",
        before.stderr
    );

    let out = cadre_env(
        project.path(),
        &[("HOME", home_str)],
        &["skills", "install"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let script = home
        .path()
        .join(".config/cadre/skills/code-review/scripts/changed-files.sh");
    assert!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&script).unwrap().permissions())
            & 0o111
            != 0
    );
    let list = cadre_env(project.path(), &[("HOME", home_str)], &["skills", "list"]).await;
    for name in ["code-review", "commit-message", "writing-tests"] {
        assert!(
            list.stdout.contains(name),
            "{name} missing:\n{}",
            list.stdout
        );
    }
    let check = cadre_env(project.path(), &[("HOME", home_str)], &["skills", "check"]).await;
    assert_eq!(check.code, 0, "{}", check.stdout);
    // Every file of the repository's skills/ is installed, byte for byte.
    fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((
                        p.strip_prefix(root).unwrap().to_path_buf(),
                        std::fs::read(&p).unwrap(),
                    ));
                }
            }
        }
        out.sort();
        out
    }
    let shipped = files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills"));
    assert_eq!(files(&home.path().join(".config/cadre/skills")), shipped);

    // A second install keeps the user's edits unless told otherwise.
    let skill = home
        .path()
        .join(".config/cadre/skills/commit-message/SKILL.md");
    let edited = std::fs::read_to_string(&skill).unwrap() + "\nMy own rule.\n";
    std::fs::write(&skill, &edited).unwrap();
    let again = cadre_env(
        project.path(),
        &[("HOME", home_str)],
        &["skills", "install"],
    )
    .await;
    assert!(again.stdout.contains("kept"), "{}", again.stdout);
    assert_eq!(std::fs::read_to_string(&skill).unwrap(), edited);
    cadre_env(
        project.path(),
        &[("HOME", home_str)],
        &["skills", "install", "--force"],
    )
    .await;
    assert_ne!(std::fs::read_to_string(&skill).unwrap(), edited);
}

/// The corpus of files as users bring them, kept beside cadre-core's tests.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cadre-core/tests/corpus")
        .canonicalize()
        .unwrap()
}

#[tokio::test]
async fn check_loads_the_corpus_with_warnings_and_strict_makes_them_errors() {
    let dir = tempfile::tempdir().unwrap();
    let agents = corpus().join("agents").display().to_string();
    let skills = corpus().join("skills").display().to_string();
    let agent_lines = [
        "agents/stats-analyst.md:3:14: {} not strict YAML (mapping values are not allowed in this context): read line by line; quote the value of `description`",
        "agents/stats-analyst.md:5:20: {} unknown tool \"airis-mcp-gateway\" dropped from tools",
        "agents/stats-analyst.md:5:39: {} unknown tool \"context-manager\" dropped from tools",
        "agents/powershell-5.1-expert.md:2:7: {} name \"powershell-5.1-expert\" is used as written",
        "agents/CodeReviewer.md:2:7: {} name \"CodeReviewer\" is used as written",
        "agents/everything.md:21:1: {} `memory` ignored",
        "agents/lenient.yaml:7:1: {} unknown key `colour` ignored",
        "agents/all-dropped.md:4:1: {} no tool is left",
    ];
    let skill_lines = [
        "skills/claude-api/SKILL.md:3:1: {} description too long: 1068 characters",
        "skills/stats-helper/SKILL.md:3:14: {} not strict YAML",
    ];
    for (what, flag, lines) in [
        ("agents", "--agents-dir", &agent_lines[..]),
        ("skills", "--skills-dir", &skill_lines[..]),
    ] {
        let folder = if what == "agents" { &agents } else { &skills };
        let out = cadre_offline(dir.path(), &[what, "check", flag, folder]).await;
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        for line in lines {
            let want = line.replace("{}", "warning:");
            assert!(
                out.stdout.contains(&want),
                "no {want:?} in:\n{}",
                out.stdout
            );
        }
        assert!(!out.stdout.contains("error:"), "{}", out.stdout);
        let count = out
            .stdout
            .lines()
            .filter(|l| l.contains(": warning: "))
            .count();
        assert!(
            out.stdout.contains(&format!("OK, {count} warning(s)")),
            "{}",
            out.stdout
        );

        let strict = cadre_offline(dir.path(), &[what, "check", "--strict", flag, folder]).await;
        assert_eq!(strict.code, 1, "{}{}", strict.stdout, strict.stderr);
        for line in lines {
            let want = line.replace("{}", "error:");
            assert!(
                strict.stdout.contains(&want),
                "no {want:?} in:\n{}",
                strict.stdout
            );
        }
        assert!(!strict.stdout.contains("warning:"), "{}", strict.stdout);
        assert!(
            strict.stdout.contains(&format!("{count} error(s)")),
            "{}",
            strict.stdout
        );
    }

    // Listing loads the same files forgivingly and prints each warning once on stderr.
    let list = cadre_offline(dir.path(), &["agents", "list", "--agents-dir", &agents]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    for name in [
        "stats-analyst",
        "powershell-5.1-expert",
        "CodeReviewer",
        "everything",
    ] {
        assert!(
            list.stdout.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{}",
            list.stdout
        );
    }
    let memory = "everything.md:21:1: warning: `memory` ignored";
    assert_eq!(list.stderr.matches(memory).count(), 1, "{}", list.stderr);
    assert!(!list.stderr.contains("`hooks`"), "{}", list.stderr);
}
