use super::*;

/// Runs `cadre` in `cwd` with `home` as the home folder.
async fn cadre_home(cwd: &Path, home: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::cargo_bin("cadre").unwrap();
    cmd.current_dir(cwd)
        .env("HOME", home)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .args(args)
        .timeout(std::time::Duration::from_secs(120));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A project folder `proj` and a home folder with `~/.config/cadre`.
fn layout() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("proj");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::create_dir_all(home.join(".config/cadre")).unwrap();
    (dir, proj, home)
}

#[tokio::test]
async fn instructions_reach_the_primary_and_every_subagent_in_order() {
    let (dir, proj, home) = layout();
    write_file(
        &proj.join("AGENTS.md"),
        "Use tabs.\nSee @docs/style.md and @../secret.md.\n",
    );
    write_file(
        &proj.join("docs/style.md"),
        "Name things plainly. @../AGENTS.md\n",
    );
    write_file(
        &proj.join("CLAUDE.md"),
        "Run cargo test before you finish.\n",
    );
    write_file(&proj.join(".claude/CLAUDE.md"), "Answer in English.\n");
    write_file(
        &dir.path().join("secret.md"),
        "the secret word is swordfish",
    );
    write_file(
        &home.join(".config/cadre/AGENTS.md"),
        "I like short answers.\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Survey".into()),
        vec![
            Reply::tasks([
                ("t1", "explore", "Find alpha"),
                ("t2", "explore", "Find beta"),
            ]),
            Reply::text("Survey complete."),
        ],
    );
    for phrase in ["Find alpha", "Find beta"] {
        server.route(
            Match::FirstUserContains(phrase.into()),
            vec![Reply::text("found")],
        );
    }
    let url = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let out = cadre_home(&proj, &home, &env, &["run", "Survey the code"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "AGENTS.md:2:0: warning: import @../secret.md refused: it leaves the workspace"
        ),
        "{}",
        out.stderr
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let section = |system: &str| {
        let at = system
            .find("## Project instructions")
            .expect("no instructions section");
        system[at..]
            .split("## Available skills")
            .next()
            .unwrap()
            .trim_end()
            .to_owned()
    };
    let main = section(&requests[0].system_text());
    let order = [
        "### ~/.config/cadre/AGENTS.md (the user's own instructions, for every project)\n\nI like short answers.",
        "### AGENTS.md\n\nUse tabs.",
        "### docs/style.md (imported)\n\nName things plainly.",
        "### CLAUDE.md\n\nRun cargo test before you finish.",
        "### .claude/CLAUDE.md\n\nAnswer in English.",
    ];
    let mut at = 0;
    for part in order {
        let found = main[at..]
            .find(part)
            .unwrap_or_else(|| panic!("{part:?} not in order in {main}"));
        at += found + part.len();
    }
    assert!(!main.contains("swordfish"), "{main}");
    // Every subagent carries the very same section, and both explorers the same prompt.
    let sub: Vec<String> = requests
        .iter()
        .filter(|r| r.first_user_text().starts_with("Find"))
        .map(|r| r.system_text())
        .collect();
    assert_eq!(sub.len(), 2);
    assert_eq!(sub[0], sub[1]);
    assert_eq!(section(&sub[0]), main);
    assert!(sub[0].contains("You are a subagent"));
}

#[tokio::test]
async fn doctor_lists_the_root_instructions_and_settings() {
    let (_dir, proj, home) = layout();
    std::fs::create_dir_all(proj.join(".git")).unwrap();
    std::fs::create_dir_all(proj.join("src/deep")).unwrap();
    write_file(&proj.join("AGENTS.md"), "@docs/a.md\n");
    write_file(&proj.join("docs/a.md"), &"x".repeat(2048));
    write_file(&proj.join("cadre.toml"), "model = \"haiku\"\n");
    write_file(&home.join(".config/cadre/AGENTS.md"), "mine");
    let out = cadre_home(&proj.join("src/deep"), &home, &[], &["doctor"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let root = proj.canonicalize().unwrap();
    assert!(
        out.stdout.contains(&format!(
            "project root      {}  (the nearest folder with .git; tools cannot leave it)",
            root.display()
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("instructions      ~/.config/cadre/AGENTS.md  4 B  (yours, every project)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("AGENTS.md  11 B\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains("docs/a.md  2.0 KiB  (imported)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("cadre.toml  (read)"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("~/.config/cadre/config.toml  (not found)"),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn a_subfolder_runs_at_the_project_root_and_c_still_wins() {
    let (_dir, proj, home) = layout();
    cadre_testkit::git::init_repo(&proj);
    write_file(&proj.join("README.md"), "# Root readme\n");
    write_file(&proj.join("src/lib/code.rs"), "fn main() {}\n");
    write_file(
        &proj.join("agents/helper.yaml"),
        "name: helper\ndescription: Helps with things.\nmode: subagent\ntools: [read_file]\nprompt: You help.\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use("toolu_1", "read_file", json!({"path": "README.md"})),
            Reply::text("read it"),
            Reply::text("second"),
        ],
    );
    let url = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let out = cadre_home(
        &proj.join("src/lib"),
        &home,
        &env,
        &["run", "Read the readme"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let requests = server.requests();
    // The tools work at the root, the project's agent types are there, and so is the run folder.
    let result = requests[1].messages().last().unwrap().to_string();
    assert!(result.contains("Root readme"), "{result}");
    assert!(
        requests[0].body.to_string().contains("Helps with things"),
        "the project's agent type is missing"
    );
    assert!(proj.join(".cadre/runs").read_dir().unwrap().count() == 1);
    assert_eq!(
        std::fs::read_to_string(proj.join(".cadre/.gitignore")).unwrap(),
        cadre_core::internal::GITIGNORE
    );
    assert!(!proj.join("src/lib/.cadre").exists());
    let status =
        cadre_testkit::git::git(&proj, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains("runs/"), "{status}");
    // Nothing of cadre's shows: the file that keeps its folders out keeps itself out too
    // (the project's own agent types under .cadre/ still show).
    assert!(!status.contains(".cadre/.gitignore"), "{status}");

    // -C names the folder to work in as it is; the user's .gitignore is kept.
    write_file(&proj.join(".cadre/.gitignore"), "mine\n");
    let out = cadre_home(
        &proj,
        &home,
        &env,
        &["-C", "src", "run", "--no-transcripts", "again"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let last = server.requests().last().unwrap().body.to_string();
    assert!(!last.contains("Helps with things"), "{last}");
    assert_eq!(
        std::fs::read_to_string(proj.join(".cadre/.gitignore")).unwrap(),
        "mine\n"
    );
}

#[tokio::test]
async fn outside_git_no_gitignore_is_written() {
    let (_dir, proj, home) = layout();
    std::fs::create_dir_all(proj.join(".cadre")).unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("ok")]);
    let url = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!proj.join(".cadre/.gitignore").exists());
}

#[tokio::test]
async fn settings_follow_flags_env_project_user_defaults() {
    let (_dir, proj, home) = layout();
    std::fs::create_dir_all(proj.join(".cadre")).unwrap();
    write_file(
        &proj.join("cadre.toml"),
        "# the project's\nmodel = \"haiku\"\n\n[limits]\nmax_tokens = 1234\n\n[permissions]\nmode = \"ask\"\nallow = [\"Bash(git diff:*)\"]\n",
    );
    write_file(
        &home.join(".config/cadre/config.toml"),
        "model = \"opus\"\nbudget_tokens = 500000\n[limits]\nmax-tokens = 999\n[compaction]\ncompact_at = \"off\"\n[permissions]\ndeny = [\"Read(./secrets/**)\"]\n",
    );
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("ok"), Reply::text("ok")]);
    let url = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let body = &server.requests()[0].body;
    // The project beats the user; the user's file beats clap's defaults.
    assert_eq!(body["model"], "claude-haiku-5-5");
    assert_eq!(body["max_tokens"], 1234);
    assert!(
        body.get("context_management").is_none(),
        "compaction is off: {body}"
    );

    let with_env: Vec<(&str, &str)> = env
        .iter()
        .copied()
        .chain([("CADRE_MODEL", "sonnet")])
        .collect();
    let out = cadre_home(
        &proj,
        &home,
        &with_env,
        &["run", "--max-tokens", "2000", "hi"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let body = &server.requests()[1].body;
    assert_eq!(body["model"], "claude-sonnet-5-5");
    assert_eq!(body["max_tokens"], 2000);

    let out = cadre_home(
        &proj,
        &home,
        &with_env,
        &["config", "show", "--max-parallel", "3"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |key: &str| -> String {
        out.stdout
            .lines()
            // The settings' own lines, not the project items listed below them.
            .filter(|l| !l.starts_with(' ') && l.split_whitespace().next() == Some(key))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let project = proj.join("cadre.toml").canonicalize().unwrap();
    let p = project.display();
    assert_eq!(
        line("model"),
        "model claude-sonnet-5-5 env CADRE_MODEL",
        "{}",
        out.stdout
    );
    assert_eq!(line("limits.max_parallel"), "limits.max_parallel 3 flag");
    assert_eq!(
        line("limits.max_tokens"),
        format!("limits.max_tokens 1234 {p}:5")
    );
    assert_eq!(
        line("limits.budget_tokens"),
        "limits.budget_tokens 500000 ~/.config/cadre/config.toml:2"
    );
    assert_eq!(
        line("compaction.compact_at"),
        "compaction.compact_at off ~/.config/cadre/config.toml:6"
    );
    assert_eq!(line("limits.max_depth"), "limits.max_depth 2 default");
    assert_eq!(
        line("base_url"),
        format!("base_url {url} env ANTHROPIC_BASE_URL")
    );
    assert_eq!(
        line("permissions.mode"),
        format!("permissions.mode ask {p}:8")
    );
    assert_eq!(
        line("permissions.allow"),
        format!("permissions.allow Bash(git diff:*) {p}:9")
    );
    assert_eq!(
        line("permissions.deny"),
        "permissions.deny Read(./secrets/**) ~/.config/cadre/config.toml:8"
    );
}

#[tokio::test]
async fn bad_settings_are_errors_with_file_and_line_and_unknown_keys_warn() {
    let (_dir, proj, home) = layout();
    std::fs::create_dir_all(proj.join(".cadre")).unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("ok")]);
    let url = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let file = proj.join("cadre.toml");

    write_file(&file, "model = \"haiku\"\n[limits]\nmax_parallel = 0\n");
    let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cadre.toml:3: limits.max_parallel must be a whole number from 1 to"),
        "{}",
        out.stderr
    );
    write_file(&file, "provider = \"azure\"\n");
    let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cadre.toml:1: provider must be \"anthropic\" or \"openai\", not \"azure\""),
        "{}",
        out.stderr
    );
    write_file(&file, "model = \"haiku\"\nmodel = \"opus\"\n");
    let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("cadre.toml:2: not valid TOML"),
        "{}",
        out.stderr
    );
    write_file(&file, "[compaction]\ncompact_at = 10\n");
    let out = cadre_home(&proj, &home, &env, &["config", "show"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cadre.toml:2: compaction.compact_at 10 is below the API's minimum"),
        "{}",
        out.stderr
    );

    // Liberal in what it reads: an unknown key warns and the run goes on.
    write_file(
        &file,
        "model = \"haiku\"\ncolour = \"blue\"\n[limits]\nmax_turns = 3\n",
    );
    let out = cadre_home(&proj, &home, &env, &["run", "hi"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cadre.toml:2: unknown setting `colour` ignored"),
        "{}",
        out.stderr
    );
    assert_eq!(server.requests()[0].body["model"], "claude-haiku-5-5");
    // (Compaction is on by default: the other test's `off` is seen.)
    assert!(server.requests()[0]
        .body
        .get("context_management")
        .is_some());
    // `config show` warns as a run does, once ...
    let out = cadre_home(&proj, &home, &env, &["config", "show"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let told: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("unknown setting `colour`"))
        .collect();
    assert!(
        told.len() == 1 && told[0].starts_with("cadre: warning: "),
        "{}",
        out.stderr
    );
    // ... and `config check` is strict about it, telling it once.
    let out = cadre_home(&proj, &home, &env, &["config", "check"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(
        (out.stdout + &out.stderr)
            .matches("unknown setting `colour`")
            .count(),
        1,
        "{}",
        out.stderr
    );
    write_file(&file, "model = \"haiku\"\n");
    let out = cadre_home(&proj, &home, &env, &["config", "check"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[tokio::test]
async fn a_recording_replays_without_the_users_own_files() {
    let (dir, proj, home) = layout();
    std::fs::create_dir_all(proj.join(".cadre")).unwrap();
    write_file(&proj.join("AGENTS.md"), "Project rule.\n");
    write_file(&home.join(".config/cadre/AGENTS.md"), "My private rule.\n");
    write_file(
        &home.join(".config/cadre/config.toml"),
        "model = \"opus\"\n",
    );
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("recorded answer")]);
    let url = server.uri();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let cassette = dir.path().join("run.jsonl");
    let cas = cassette.to_str().unwrap();
    let out = cadre_home(&proj, &home, &env, &["run", "--record", cas, "hi"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("not read while recording or replaying, so the cassette replays the same everywhere: ~/.config/cadre/config.toml, ~/.config/cadre/AGENTS.md"), "{}", out.stderr);
    let first = &server.requests()[0];
    assert_eq!(first.body["model"], "claude-sonnet-5-5");
    assert!(first.system_text().contains("Project rule."));
    assert!(!first.system_text().contains("My private rule."));
    // Another machine: another home, no key, no server.
    let other = dir.path().join("other-home");
    std::fs::create_dir_all(&other).unwrap();
    let out = cadre_home(&proj, &other, &[], &["run", "--replay", cas, "hi"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("recorded answer"), "{}", out.stdout);
}

#[tokio::test]
async fn base_url_and_mcp_config_come_from_the_files() {
    let (_dir, proj, home) = layout();
    std::fs::create_dir_all(proj.join(".cadre")).unwrap();
    let config = json!({"mcpServers": {"local": {"command": cadre_testkit::mcp_server_binary()}}});
    write_file(&proj.join("tools/mcp.json"), &config.to_string());
    write_file(
        &proj.join("cadre.toml"),
        "mcp_config = \"tools/mcp.json\"\n",
    );
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("ok")]);
    write_file(
        &home.join(".config/cadre/config.toml"),
        &format!("base_url = \"{}\"\n", server.uri()),
    );
    // No ANTHROPIC_BASE_URL: the request reaches the mock only through the user's file. The
    // project's mcp_config is used only once the project is trusted.
    let out = cadre_home(
        &proj,
        &home,
        &[("ANTHROPIC_API_KEY", "k")],
        &["run", "--trust-project", "hi"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let tools = server.requests()[0].tool_names();
    assert!(
        tools.iter().any(|t| t.starts_with("mcp__local__")),
        "{tools:?}"
    );
    // `cadre mcp list` starts a project's servers only once it is trusted.
    let out = cadre_home(&proj, &home, &[], &["mcp", "list"]).await;
    assert!(!out.stdout.contains("mcp__local__"), "{}", out.stdout);
    assert!(out.stderr.contains("left out"), "{}", out.stderr);
    let out = cadre_home(&proj, &home, &[], &["trust"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = cadre_home(&proj, &home, &[], &["mcp", "list"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("mcp__local__"), "{}", out.stdout);

    write_file(
        &proj.join("cadre.toml"),
        "mcp_config = \"tools/none.json\"\n",
    );
    let out = cadre_home(&proj, &home, &[], &["config", "show"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("cadre.toml:1: mcp_config names "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("none.json: no such file"),
        "{}",
        out.stderr
    );
}
