use super::*;
use cadre_testkit::git::{git, init_repo};
use std::time::Duration;

#[tokio::test]
async fn runs_show_lists_a_runs_branches_and_runs_branches_delete_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/coder.yaml"),
        "name: coder\ndescription: Writes code.\nmode: subagent\ntools: [write_file]\nisolation: worktree\nprompt: You write code.\n",
    )
    .unwrap();
    std::fs::write(root.join(".gitignore"), ".cadre/\n").unwrap();
    init_repo(root);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "coder", "Add a note")]),
            Reply::text("one branch to review"),
        ],
    );
    server.route(
        Match::FirstUserContains("Add a note".into()),
        vec![
            Reply::tool_use(
                "w",
                "write_file",
                json!({"path": "NOTE.md", "content": "a note\n"}),
            ),
            Reply::text("note added"),
        ],
    );
    let tapes = tempfile::tempdir().unwrap();
    let cassette = tapes.path().join("isolated.jsonl");
    let cassette = cassette.to_str().unwrap();
    let out = cadre(
        root,
        &server.uri(),
        Some("k"),
        &["run", "--record", cassette, "PARENT task"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !root.join("NOTE.md").exists(),
        "the main checkout was touched"
    );
    let show = cadre(root, &server.uri(), None, &["runs", "show", "latest"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    let branch = show
        .stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cadre/") && l.ends_with("/coder-1"))
        .unwrap_or_else(|| panic!("no branch listed: {}", show.stdout))
        .to_owned();
    assert_eq!(
        git(root, &["show", &format!("{branch}:NOTE.md")]),
        "a note\n"
    );
    let listed = cadre(root, &server.uri(), None, &["runs", "branches", "latest"]).await;
    assert_eq!(listed.stdout.trim(), branch);
    let deleted = cadre(
        root,
        &server.uri(),
        None,
        &["runs", "branches", "latest", "--delete"],
    )
    .await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    assert!(deleted.stdout.contains(&branch), "{}", deleted.stdout);
    assert_eq!(git(root, &["branch", "--list", "cadre/*"]), "");
    assert_eq!(git(root, &["status", "--porcelain"]), "");
    // A replay runs the tools for real: the worktree and its branch are made again,
    // named as in the recording (the cassette holds the run id).
    let replayed = cadre(
        root,
        "http://127.0.0.1:9",
        None,
        &["run", "--replay", cassette, "PARENT task"],
    )
    .await;
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    let again = git(root, &["branch", "--list", "cadre/*"]);
    let again = again.trim().trim_start_matches("* ");
    assert_eq!(again, branch);
    assert_eq!(
        git(root, &["show", &format!("{again}:NOTE.md")]),
        "a note\n"
    );
}

#[tokio::test]
async fn a_killed_run_resumes_its_isolated_writer_on_the_branch_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/coder.yaml"),
        "name: coder\ndescription: Writes code.\nmode: subagent\ntools: [write_file]\nisolation: worktree\nprompt: You write code.\n",
    )
    .unwrap();
    std::fs::write(root.join(".gitignore"), ".cadre/\n").unwrap();
    init_repo(root);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tasks([("t1", "coder", "Add a note")]),
            Reply::text("one branch to review"),
        ],
    );
    server.route(
        Match::FirstUserContains("Add a note".into()),
        vec![
            Reply::tool_use(
                "w",
                "write_file",
                json!({"path": "NOTE.md", "content": "a note\n"}),
            ),
            // In flight when the run is killed.
            Reply::text("never seen").delay(Duration::from_secs(120)),
        ],
    );
    let mut child =
        super::sessions::spawn_cadre(root, &server.uri(), home.path(), &["run", "PARENT task"]);
    let coder_requests = |s: &MockServer| {
        s.requests()
            .iter()
            .filter(|r| r.first_user_text() == "Add a note")
            .count()
    };
    wait_for("the writer to wait for its second answer", || {
        coder_requests(&server) == 2
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    server.route(
        Match::FirstUserContains("Add a note".into()),
        vec![Reply::text("note added")],
    );
    let out = cadre(root, &server.uri(), Some("k"), &["resume"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("one branch to review"),
        "{}",
        out.stdout
    );
    let branches = git(
        root,
        &["branch", "--list", "--format=%(refname:short)", "cadre/*"],
    );
    let branch = branches.trim();
    assert!(branch.ends_with("/coder-1"), "{branches}");
    // The write made before the kill is on the branch, and the parent was told so.
    assert_eq!(
        git(root, &["show", &format!("{branch}:NOTE.md")]),
        "a note\n"
    );
    let parent = server
        .requests()
        .into_iter()
        .rfind(|r| r.first_user_text() == "PARENT task")
        .unwrap();
    let told = parent.last_user_text();
    assert!(
        told.contains("note added") && told.contains(branch),
        "{told}"
    );
}
