use super::*;

// ---------------------------------------------------------------- input decoding

#[tokio::test]
async fn invalid_input_is_reported() {
    let env = Env::new();
    let cases = [
        ("bash", json!({}), "command"),
        ("bash", json!({"command": ["ls"]}), "string"),
        ("bash", json!({"command": "ls", "timeout_ms": "5s"}), "u64"),
        ("read_file", json!({}), "path"),
        ("read_file", json!({"path": 5}), "string"),
        ("read_file", json!({"path": "f", "offset": -1}), "-1"),
        ("read_file", json!({"file_path": "f"}), "file_path"),
        ("write_file", json!({"path": "f"}), "content"),
        (
            "edit_file",
            json!({"path": "f", "old_string": "a"}),
            "new_string",
        ),
        (
            "edit_file",
            json!({"path": "f", "old_string": "a", "new_string": "b", "replace_all": "yes"}),
            "bool",
        ),
        ("list_files", json!({"pattern": 3}), "string"),
        ("grep", json!({"path": "src"}), "pattern"),
        ("grep", json!({"pattern": "x", "context": "2"}), "u64"),
        // serde would take an array as the fields in order; found by `fuzz`.
        (
            "bash",
            json!(["true"]),
            "must be a JSON object of named fields, not an array",
        ),
        (
            "read_file",
            json!(null),
            "must be a JSON object of named fields, not null",
        ),
        ("write_file", json!("f"), "not a string"),
    ];
    for (name, input, needle) in cases {
        match env.call(name, input.clone()).await {
            Err(ToolError::InvalidInput { message: msg }) => {
                assert!(msg.starts_with(name), "{msg}");
                assert!(msg.contains(needle), "{name} {input}: {msg}");
            }
            other => panic!("{name} {input}: expected InvalidInput, got {other:?}"),
        }
    }
    assert!(!Path::new(&env.path("f")).exists());
    drop(env.dir);
}
