use super::*;
use cadre_core::{AgentSpec, Registry};
use cadre_testkit::git::{git, init_repo};
use std::path::Path;

/// A repository with one commit: `shared.txt` and a `.gitignore` for cadre's folder.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shared.txt"), "original\n").unwrap();
    std::fs::write(dir.path().join(".gitignore"), ".cadre/\n").unwrap();
    init_repo(dir.path());
    dir
}

fn registry() -> Registry {
    let mut registry = Registry::shipped();
    for yaml in [
        "name: coder\ndescription: Writes code.\nmode: subagent\ntools: [bash, read_file, write_file]\nisolation: worktree\nprompt: You write code.\n",
        "name: checker\ndescription: Checks.\nmode: subagent\ntools: [bash]\nread_only: true\nisolation: worktree\nprompt: You check.\n",
    ] {
        let (spec, problems) = AgentSpec::parse_yaml(Path::new("t.yaml"), yaml);
        assert!(problems.is_empty(), "{problems:?}");
        let spec = spec.unwrap();
        assert!(spec.is_isolated());
        registry.insert(spec);
    }
    registry
}

fn results(server: &MockServer) -> Vec<(String, bool)> {
    let parent = server
        .requests()
        .into_iter()
        .filter(|r| r.first_user_text() == "PARENT task")
        .nth(1)
        .unwrap();
    parent.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["content"][0]["text"].as_str().unwrap().to_owned(),
                r["is_error"] == true,
            )
        })
        .collect()
}

#[tokio::test]
async fn isolated_writers_change_one_file_at_once_each_on_its_own_branch() {
    let dir = repo();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([
                ("t1", "coder", "Writer one"),
                ("t2", "coder", "Writer two"),
                ("t3", "coder", "Idle one"),
                ("t4", "checker", "Try to write"),
            ]),
            Reply::text("review the branches"),
        ],
    );
    for (job, text) in [("Writer one", "from one"), ("Writer two", "from two")] {
        server.route(
            Match::FirstUserContains(job.into()),
            vec![
                Reply::tool_use(
                    "w",
                    "bash",
                    json!({"command": format!("printf '{text}\\n' > shared.txt")}),
                ),
                Reply::text(&format!("{job} done")),
            ],
        );
    }
    server.route(
        Match::FirstUserContains("Idle one".into()),
        vec![Reply::text("nothing to change")],
    );
    server.route(
        Match::FirstUserContains("Try to write".into()),
        vec![
            Reply::tool_use("p", "bash", json!({"command": "echo x > probe.txt"})),
            Reply::text("could not write"),
        ],
    );
    // Both writers' first requests must be with the model at once.
    server.hold_until_waiting(
        Match::FirstUserContains("Writer".into()),
        2,
        Duration::from_secs(60),
    );
    let o = mock_builder(&server, dir.path())
        .registry(registry())
        .runs_dir(dir.path().join(".cadre/runs"))
        .build()
        .unwrap();
    let (outcome, summary) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done, "{:?}", server.violations());
    let id = summary.run_id.clone().unwrap();
    let results = results(&server);
    assert_eq!(results.len(), 4);
    for (i, job) in ["Writer one", "Writer two"].iter().enumerate() {
        let (text, is_error) = &results[i];
        assert!(!is_error, "{text}");
        assert!(text.starts_with(&format!("{job} done")), "{text:?}");
        let branch = format!("cadre/{id}/coder-{}", i + 1);
        assert!(
            text.contains(&branch) && text.contains("shared.txt"),
            "{text}"
        );
    }
    assert!(results[2].0.contains("changed no file"), "{}", results[2].0);
    assert!(results[3].0.contains("changed no file"), "{}", results[3].0);
    // The read-only checker's bash was refused its write inside its worktree too.
    let checker = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text() == "Try to write")
        .unwrap();
    let refused = &checker.messages().last().unwrap()["content"][0];
    assert_eq!(refused["is_error"], true, "{refused}");
    // Each branch holds its own version; the main checkout is as it was.
    let show = |branch: &str| git(dir.path(), &["show", &format!("{branch}:shared.txt")]);
    assert_eq!(show(&format!("cadre/{id}/coder-1")), "from one\n");
    assert_eq!(show(&format!("cadre/{id}/coder-2")), "from two\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("shared.txt")).unwrap(),
        "original\n"
    );
    assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
    // Only the two writers left a branch (the idle coder and the read-only checker none).
    let branches = git(dir.path(), &["branch", "--list", "cadre/*"]);
    assert_eq!(branches.lines().count(), 2, "{branches}");
    assert_eq!(
        git(dir.path(), &["worktree", "list"]).lines().count(),
        1,
        "a worktree was left behind"
    );
    // The commit names the agent and its task.
    let log = git(
        dir.path(),
        &["log", "-1", "--format=%s", &format!("cadre/{id}/coder-1")],
    );
    assert!(
        log.contains("main/coder#1") && log.contains("job t1"),
        "{log}"
    );
}

#[tokio::test]
async fn outside_a_git_repository_an_isolated_subagent_fails_clearly_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "coder", "Writer one"), ("t2", "explore", "Look")]),
            Reply::text("went on"),
        ],
    );
    server.route(
        Match::FirstUserContains("Look".into()),
        vec![Reply::text("looked")],
    );
    let o = mock_builder(&server, dir.path())
        .registry(registry())
        .build()
        .unwrap();
    let (outcome, _) = o.run("main", "PARENT task").await.unwrap();
    assert_eq!(outcome.stop, StopKind::Done);
    assert_eq!(outcome.text, "went on");
    let results = results(&server);
    assert!(results[0].1, "not an error: {}", results[0].0);
    assert!(
        results[0].0.contains("not inside a git work tree"),
        "{}",
        results[0].0
    );
    assert_eq!(results[1], ("looked".to_owned(), false));
}
