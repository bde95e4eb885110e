use super::*;

// ---------------------------------------------------------------- bash

#[tokio::test]
async fn bash_output_and_exit_code() {
    let env = Env::new();
    let out = env
        .call(
            "bash",
            json!({"command": "echo a; echo b >&2; echo c; exit 3"}),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.content, "a\nb\nc\n[exit code 3]");

    let pwd = env
        .ok("bash", json!({"command": "pwd", "description": "where"}))
        .await;
    assert_eq!(pwd.trim(), env.root().to_str().unwrap());

    let quiet = env.ok("bash", json!({"command": "true"})).await;
    assert_eq!(quiet, "(no output)");
}

#[tokio::test]
async fn bash_runs_for_read_only_agents() {
    let mut env = Env::new();
    env.ctx.read_only = true;
    assert_eq!(env.ok("bash", json!({"command": "echo ok"})).await, "ok\n");
}

#[tokio::test]
async fn bash_timeout_kills_grandchildren() {
    let env = Env::new();
    let start = Instant::now();
    let out = env
        .call(
            "bash",
            json!({
                "command": "echo started; sleep 30 & echo $! > pid1; \
                            bash -c 'sleep 31 & echo $! > pid2; wait' & wait",
                "timeout_ms": 700
            }),
        )
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(out.is_error);
    assert!(out.content.starts_with("started\n"), "{}", out.content);
    assert!(
        out.content.contains("timed out after 700ms"),
        "{}",
        out.content
    );
    assert_gone_soon(read_pid(&env, "pid1")).await;
    assert_gone_soon(read_pid(&env, "pid2")).await;
}

#[tokio::test]
async fn bash_timeout_capped_by_max() {
    let limits = ToolLimits {
        bash_max_timeout: Duration::from_millis(300),
        ..ToolLimits::default()
    };
    let env = Env::with_limits(limits);
    let start = Instant::now();
    let out = env
        .call("bash", json!({"command": "sleep 20", "timeout_ms": 100000}))
        .await
        .unwrap();
    assert!(out.is_error && out.content.contains("timed out"));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn bash_background_child_does_not_hold_the_call() {
    let env = Env::new();
    let start = Instant::now();
    let out = env
        .ok(
            "bash",
            json!({"command": "sleep 100 & echo $! > pid; echo hi"}),
        )
        .await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out, "hi\n");
    assert_gone_soon(read_pid(&env, "pid")).await;
}

#[tokio::test]
async fn bash_cancel_kills_the_group() {
    let env = Env::new();
    let ctx = env.ctx.clone();
    let task = tokio::spawn(async move {
        call_with(
            &ctx,
            "bash",
            json!({"command": "sleep 30 & echo $! > pid; wait"}),
        )
        .await
    });
    let pid_file = env.path("pid");
    let start = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.ctx.cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
    assert_gone_soon(read_pid(&env, "pid")).await;
}

#[tokio::test]
async fn bash_output_capped() {
    let limits = ToolLimits {
        max_output_bytes: 2000,
        ..ToolLimits::default()
    };
    let env = Env::with_limits(limits);
    let out = env.ok("bash", json!({"command": "seq 1 100000"})).await;
    assert!(out.len() <= 2000, "{} bytes", out.len());
    assert!(out.starts_with("1\n2\n3\n"));
    assert!(out.ends_with("99999\n100000\n"));
    assert!(out.contains("cut from the middle"));
}
