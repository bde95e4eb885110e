use super::*;

// ---------------------------------------------------------------- confinement

#[tokio::test]
async fn paths_cannot_escape_the_workspace() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), env.path("link")).unwrap();
    let abs_secret = outside.path().join("secret.txt");
    let escapes = [
        "../secret.txt".to_string(),
        format!(
            "../{}/secret.txt",
            outside.path().file_name().unwrap().to_str().unwrap()
        ),
        abs_secret.to_str().unwrap().to_string(),
        "link/secret.txt".to_string(),
    ];
    for path in &escapes {
        let inputs = [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": path, "old_string": "secret", "new_string": "pwned"}),
            ),
            ("list_files", json!({"path": path})),
            ("grep", json!({"pattern": "secret", "path": path})),
        ];
        for (name, input) in inputs {
            let result = env.call(name, input).await;
            assert!(
                matches!(result, Err(ToolError::OutsideWorkspace { .. })),
                "{name} {path}: {result:?}"
            );
        }
    }
    for dir in ["link", "../"] {
        let result = env.call("list_files", json!({"path": dir})).await;
        assert!(matches!(result, Err(ToolError::OutsideWorkspace { .. })));
    }
    // The message names the path as given, never this machine's workspace root.
    let root = env.root().to_str().unwrap().to_string();
    for name in ["read_file", "list_files", "grep"] {
        let input = match name {
            "grep" => json!({"pattern": "x", "path": "../secret.txt"}),
            _ => json!({"path": "../secret.txt"}),
        };
        let shown = env.call(name, input).await.unwrap_err().to_string();
        assert_eq!(
            shown,
            "../secret.txt is outside the workspace; only paths inside it may be used"
        );
        assert!(!shown.contains(&root), "{shown}");
    }
    assert_eq!(
        std::fs::read_to_string(&abs_secret).unwrap(),
        "secret\n",
        "nothing outside was changed"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    // The walk does not follow the symlink out either.
    let listed = env.ok("list_files", json!({})).await;
    assert!(!listed.contains("secret"), "{listed}");
    let grepped = env.ok("grep", json!({"pattern": "secret"})).await;
    assert!(grepped.starts_with("no matches"), "{grepped}");
}
