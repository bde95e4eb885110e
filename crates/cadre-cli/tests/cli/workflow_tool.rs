//! The `Workflow` tool: a model starts a saved workflow by name; its run is a run of its
//! own, resumed (not started again) when its caller is killed and resumed; a read-only
//! caller may not start writing agents; its tokens count in the caller's budget.

use super::sessions::{cadre_command, kill};
use super::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// How many items the saved workflow has.
const ITEMS: usize = 12;

/// A project whose saved workflow `label` (description "Label each item.") labels
/// `ITEMS` items with agents of type `agent`, `concurrency` at once.
fn project(agent: &str, concurrency: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    write_file(
        &dir.path().join(".cadre/workflows/label.yaml"),
        &format!(
            "name: label\ndescription: Label each item.\ninput: items.jsonl\nkey: id\nargs: {{style: plain}}\nmap:\n  agent: {agent}\n  prompt: \"Label {{{{ item.title }}}} ({{{{ args.style }}}}).\"\n  concurrency: {concurrency}\n"
        ),
    );
    let lines: Vec<String> = (0..ITEMS)
        .map(|n| json!({"id": format!("i{n:02}"), "title": format!("item-{n:02}")}).to_string())
        .collect();
    write_file(&dir.path().join("items.jsonl"), &(lines.join("\n") + "\n"));
    dir
}

/// Routes each item's request to its answer, `spare` of them, each after `delay` and
/// costing `tokens` (input).
fn item_routes(server: &MockServer, spare: usize, delay: Duration, tokens: u64) {
    for n in 0..ITEMS {
        server.route(
            Match::FirstUserContains(format!("item-{n:02} (")),
            vec![
                Reply::text(&format!("label-{n}"))
                    .delay(delay)
                    .usage(tokens, 0, 0, 0);
                spare
            ],
        );
    }
    server.allow_unused_replies();
}

/// The primary agent's answers: a `Workflow` call of `input` (id `wf1`), then "done".
fn primary_route(server: &MockServer, input: Value) {
    server.route(
        Match::FirstUserContains("Label the items".into()),
        vec![
            Reply::tool_use("wf1", "Workflow", input),
            Reply::text("done"),
        ],
    );
}

/// The number of the item a request is about (`item-07` is 7), from its first message.
fn item_of(body: &Value) -> Option<usize> {
    let first = body["messages"][0].to_string();
    let at = first.find("item-")?;
    first.get(at + 5..at + 7)?.parse().ok()
}

/// How many requests the mock received for each item.
fn sent_per_item(server: &MockServer) -> BTreeMap<usize, usize> {
    let mut sent = BTreeMap::new();
    for r in server.requests() {
        if let Some(n) = item_of(&r.body) {
            *sent.entry(n).or_default() += 1;
        }
    }
    sent
}

/// The run folders of the project, by name.
fn run_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join(".cadre/runs"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// The workflow's run folder (named after its caller's run and the call's content).
fn workflow_dir(dir: &Path) -> Option<PathBuf> {
    run_dirs(dir)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().contains("-wf-"))
}

/// The result lines of the workflow's run, by key.
fn results(dir: &Path) -> BTreeMap<String, Value> {
    let file = workflow_dir(dir).unwrap().join("results.jsonl");
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["key"].as_str().unwrap().to_owned(), v)
        })
        .collect()
}

#[tokio::test]
async fn a_model_starts_a_saved_workflow_and_gets_its_summary_not_its_items() {
    let dir = project("explore", 4);
    let server = MockServer::start().await;
    item_routes(&server, 1, Duration::ZERO, 10);
    server.route(
        Match::FirstUserContains("Label the items".into()),
        vec![
            Reply::tool_uses(vec![
                ("wf0", "Workflow", json!({"name": "nope"})),
                (
                    "wf1",
                    "Workflow",
                    json!({"name": "label", "args": {"style": "terse"}}),
                ),
            ]),
            Reply::text("done"),
        ],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "Label the items."],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let requests = server.requests();
    // The tool lists the saved workflows, as `Skill` lists skills.
    let tools = requests[0].body["tools"].as_array().unwrap();
    let tool = tools.iter().find(|t| t["name"] == "Workflow").unwrap();
    assert!(
        tool["description"]
            .as_str()
            .unwrap()
            .contains("- label: Label each item."),
        "{tool}"
    );
    // An unknown name is an error naming the saved ones.
    let (is_error, text) = result_of(&requests, "wf0");
    assert!(is_error, "{text}");
    assert!(
        text.contains("no saved workflow \"nope\"") && text.contains("label"),
        "{text}"
    );
    // The summary and the results' path; no item's answer.
    let (is_error, text) = result_of(&requests, "wf1");
    assert!(!is_error, "{text}");
    assert!(
        text.contains(&format!("{ITEMS} items: {ITEMS} completed")),
        "{text}"
    );
    assert!(text.contains("every item completed (exit 0)"), "{text}");
    assert!(text.contains("results.jsonl"), "{text}");
    assert!(!text.contains("label-"), "no item's answer: {text}");
    // Its own run folder, with every item's line; the arguments reached the prompts.
    let results = results(dir.path());
    assert_eq!(results.len(), ITEMS);
    assert!(results.values().all(|r| r["outcome"] == "completed"));
    let sent = sent_per_item(&server);
    assert!(sent.values().all(|&n| n == 1), "{sent:?}");
    assert!(requests
        .iter()
        .any(|r| r.body["messages"][0].to_string().contains("(terse)")));
    // A run like any other: `cadre runs` lists both.
    let runs = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["runs", "list", "--json"],
    )
    .await;
    let listed: Value = serde_json::from_str(&runs.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    // The caller's usage holds the workflow's tokens (12 items of 10), as its budget did.
    let caller = run_dirs(dir.path())
        .into_iter()
        .find(|p| !p.to_string_lossy().contains("-wf-"))
        .unwrap();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(caller.join("summary.json")).unwrap())
            .unwrap();
    let input = summary["usage"]["total"]["usage"]["input_tokens"].as_u64();
    assert!(input.unwrap() >= 10 * ITEMS as u64, "{summary}");
    // And `cadre workflow retry` takes it, as it was invoked (its arguments kept).
    let id = workflow_dir(dir.path()).unwrap();
    let id = id.file_name().unwrap().to_str().unwrap();
    let sent = server.requests().len();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "retry", id, "--failed"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        server.requests().len(),
        sent,
        "nothing failed, nothing asked"
    );
}

#[tokio::test]
async fn a_read_only_caller_may_not_start_a_workflow_of_writing_agents() {
    let dir = project("code", 4);
    write_file(
        &dir.path().join(".cadre/agents/scout.yaml"),
        "name: scout\ndescription: Looks around.\nmode: primary\nread_only: true\ntools: [read_file, Workflow]\nprompt: You look.\n",
    );
    let server = MockServer::start().await;
    item_routes(&server, 1, Duration::ZERO, 10);
    primary_route(&server, json!({"name": "label"}));
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--agent", "scout", "Label the items."],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let requests = server.requests();
    let (is_error, text) = result_of(&requests, "wf1");
    assert!(is_error, "{text}");
    assert!(
        text.contains("\"code\", which can change files, and you are read-only"),
        "{text}"
    );
    assert!(sent_per_item(&server).is_empty(), "no item started");
    assert!(workflow_dir(dir.path()).is_none());
}

#[tokio::test]
async fn a_workflows_tokens_count_in_its_callers_budget() {
    let dir = project("explore", 1);
    let server = MockServer::start().await;
    // The primary's first request costs 15 tokens, each item 30: the budget of 100 is
    // spent after the third item, and no fourth starts.
    item_routes(&server, 1, Duration::ZERO, 30);
    primary_route(&server, json!({"name": "label"}));
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--budget-tokens", "100", "Label the items."],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let sent = sent_per_item(&server);
    assert_eq!(sent.len(), 3, "{sent:?}");
    // The primary's budget is spent too: it sends no request after the call.
    assert_eq!(server.requests().len(), 1 + 3, "{}", out.stderr);
    assert!(out.stderr.contains("budget"), "{}", out.stderr);
    let results = results(dir.path());
    assert_eq!(
        results
            .values()
            .filter(|r| r["outcome"] == "budget")
            .count(),
        ITEMS - 3,
        "{results:?}"
    );
}

#[tokio::test]
async fn a_caller_killed_mid_workflow_and_resumed_goes_on_with_the_same_workflow_run() {
    let dir = project("explore", 2);
    let server = MockServer::start().await;
    item_routes(&server, 2, Duration::from_millis(20), 10);
    primary_route(&server, json!({"name": "label"}));
    // Items from 6 on are held until the kill, which so comes mid-workflow.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_of(body).is_some_and(|n| n >= 6)
    })));
    let home = tempfile::tempdir().unwrap();
    let mut child = cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--model", "claude-kept-1", "Label the items."],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    wait_for("six items finished", || {
        workflow_dir(dir.path())
            .and_then(|d| std::fs::read_to_string(d.join("journal.jsonl")).ok())
            .is_some_and(|j| {
                j.lines()
                    .filter(|l| l.contains("\"finished\"") && l.contains("explore#"))
                    .count()
                    >= 6
            })
    })
    .await;
    kill(&mut child);
    held.open();
    let before = sent_per_item(&server);
    assert!((0..6).all(|n| before.get(&n) == Some(&1)), "{before:?}");
    let parent = run_dirs(dir.path())
        .into_iter()
        .find(|p| !p.to_string_lossy().contains("-wf-"))
        .unwrap();
    let id = parent.file_name().unwrap().to_str().unwrap().to_owned();
    // The workflow's run is not resumed on its own: its caller is named.
    let nested = workflow_dir(dir.path()).unwrap();
    let nested = nested.file_name().unwrap().to_str().unwrap();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", nested]).await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&format!("cadre resume {id}")),
        "{}",
        out.stderr
    );
    // A plain `cadre resume` takes the caller, though the workflow's run id sorts after it.
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // The same workflow run went on: no second one, no finished item asked again.
    assert_eq!(run_dirs(dir.path()).len(), 2, "{:?}", run_dirs(dir.path()));
    let sent = sent_per_item(&server);
    for n in 0..ITEMS {
        let again = sent[&n] - before.get(&n).copied().unwrap_or(0);
        if n < 6 {
            assert_eq!(again, 0, "item {n} finished before the kill: {sent:?}");
        } else {
            assert!(again <= 1, "item {n}: {sent:?}");
        }
    }
    let results = results(dir.path());
    assert_eq!(results.len(), ITEMS);
    assert!(
        results.values().all(|r| r["outcome"] == "completed"),
        "{results:?}"
    );
    let (_, text) = result_of(&server.requests(), "wf1");
    assert!(
        text.contains(&format!("{ITEMS} items: {ITEMS} completed")),
        "{text}"
    );
    assert!(
        text.contains("tokens: 120 input"),
        "the whole run's: {text}"
    );
    // The workflow went on with the model it was started with, not the resume's default.
    let requests = server.requests();
    let models: std::collections::BTreeSet<&str> = requests
        .iter()
        .filter(|r| item_of(&r.body).is_some())
        .map(|r| r.body["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["claude-kept-1"].into(), "{models:?}");
}

#[tokio::test]
async fn cancelling_the_caller_cancels_its_workflow_and_its_resume_goes_on_with_it() {
    let dir = project("explore", 2);
    let server = MockServer::start().await;
    item_routes(&server, 2, Duration::ZERO, 10);
    // Resumed, the caller (told its call was cancelled) calls the workflow again, under
    // a new call id.
    server.route(
        Match::FirstUserContains("Label the items".into()),
        vec![
            Reply::tool_use("wf1", "Workflow", json!({"name": "label"})),
            Reply::tool_use("wf2", "Workflow", json!({"name": "label"})),
            Reply::text("done"),
        ],
    );
    // Items from 4 on are held: the cancel comes while two of them are asked.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_of(body).is_some_and(|n| n >= 4)
    })));
    let home = tempfile::tempdir().unwrap();
    let mut child = cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "Label the items."],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    assert!(
        held.wait_for(2, Duration::from_secs(60)).await,
        "2 items held"
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(130));
    held.open();
    // The workflow ended with its caller: a line per item, those not asked cancelled.
    let ended = results(dir.path());
    assert_eq!(ended.len(), ITEMS, "{ended:?}");
    let sent = sent_per_item(&server);
    assert_eq!(sent.len(), 6, "items 0–5 only: {sent:?}");
    for n in 6..ITEMS {
        assert_eq!(ended[&format!("i{n:02}")]["outcome"], "cancelled");
    }
    // Resumed: the new call goes on with the same run, and no finished item is asked again.
    let before = sent_per_item(&server);
    let caller = run_dirs(dir.path())
        .into_iter()
        .find(|p| !p.to_string_lossy().contains("-wf-"))
        .unwrap();
    let id = caller.file_name().unwrap().to_str().unwrap().to_owned();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(run_dirs(dir.path()).len(), 2, "{:?}", run_dirs(dir.path()));
    let sent = sent_per_item(&server);
    for n in 0..4 {
        assert_eq!(sent[&n], before[&n], "item {n} finished before: {sent:?}");
    }
    let after = results(dir.path());
    assert!(
        after.values().all(|r| r["outcome"] == "completed"),
        "{after:?}"
    );
    let (is_error, text) = result_of(&server.requests(), "wf2");
    assert!(!is_error && text.contains("every item completed"), "{text}");
}

#[tokio::test]
async fn a_subagent_has_the_tool_only_when_its_type_lists_it() {
    let dir = project("explore", 4);
    write_file(
        &dir.path().join(".cadre/agents/batcher.yaml"),
        "name: batcher\ndescription: Runs batches.\nmode: subagent\ntools: [read_file, Workflow]\nprompt: You run batches.\n",
    );
    write_file(
        &dir.path().join(".cadre/agents/helper.yaml"),
        "name: helper\ndescription: Helps.\nmode: subagent\ntools: [\"*\"]\nprompt: You help.\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("Label the items".into()),
        vec![
            Reply::tasks([("t1", "batcher", "Batch job"), ("t2", "helper", "Help job")]),
            Reply::text("done"),
        ],
    );
    for job in ["Batch job", "Help job"] {
        server.route(
            Match::FirstUserContains(job.into()),
            vec![Reply::text("ok")],
        );
    }
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "Label the items."],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let offers = |job: &str| {
        let requests = server.requests();
        let r = requests
            .iter()
            .find(|r| r.body["messages"][0].to_string().contains(job))
            .unwrap();
        r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "Workflow")
    };
    assert!(offers("Label the items"), "the primary agent has it");
    assert!(offers("Batch job"), "its type lists Workflow");
    assert!(!offers("Help job"), "\"*\" does not give it to a subagent");
}

#[tokio::test]
async fn a_provider_refusal_inside_the_workflow_stops_its_caller_too() {
    let dir = project("explore", 1);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("item-03 (".into()),
        vec![Reply::error_status(
            401,
            "authentication_error",
            "invalid x-api-key",
        )],
    );
    item_routes(&server, 1, Duration::ZERO, 10);
    primary_route(&server, json!({"name": "label"}));
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "Label the items."],
    )
    .await;
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("401"), "{}", out.stderr);
    // No item after the refused one, and the caller sends nothing after its call.
    let sent = sent_per_item(&server);
    assert_eq!(
        sent.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{sent:?}"
    );
    let callers = server
        .requests()
        .iter()
        .filter(|r| item_of(&r.body).is_none())
        .count();
    assert_eq!(callers, 1, "the caller asked again after the refusal");
}

#[tokio::test]
async fn a_read_only_callers_workflow_starts_no_writing_subagent() {
    // Its items' type is read-only, but may start any subagent through `Task`.
    let dir = project("looker", 1);
    write_file(
        &dir.path().join(".cadre/agents/looker.yaml"),
        "name: looker\ndescription: Looks.\nmode: subagent\nread_only: true\ntools: [read_file, Task]\nprompt: You look.\n",
    );
    write_file(
        &dir.path().join(".cadre/agents/scout.yaml"),
        "name: scout\ndescription: Looks around.\nmode: primary\nread_only: true\ntools: [read_file, Workflow]\nprompt: You look.\n",
    );
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("item-00 (".into()),
        vec![
            Reply::tasks([("t1", "code", "Write job")]),
            Reply::text("label-0"),
        ],
    );
    server.route(
        Match::FirstUserContains("Write job".into()),
        vec![
            Reply::tool_use("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
            Reply::text("wrote"),
        ],
    );
    item_routes(&server, 1, Duration::ZERO, 10);
    primary_route(&server, json!({"name": "label"}));
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--agent", "scout", "Label the items."],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        !dir.path().join("a.txt").exists(),
        "a subagent wrote a file"
    );
    let (_, text) = result_of(&server.requests(), "wf1");
    assert!(text.contains("every item completed"), "{text}");
}

#[tokio::test]
async fn a_finished_workflows_tokens_count_in_its_resumed_callers_limit() {
    let dir = project("explore", 4);
    // The caller may use 150 tokens: 15 of its own, then the workflow's 120 (12 items of
    // 10), then 20 for each turn after it.
    write_file(
        &dir.path().join(".cadre/agents/boss.yaml"),
        "name: boss\ndescription: Runs.\nmode: primary\nlimits: {tokens: 150}\ntools: [\"*\"]\nprompt: You run.\n",
    );
    let server = MockServer::start().await;
    item_routes(&server, 1, Duration::ZERO, 10);
    let read = |id| Reply::tool_use(id, "read_file", json!({"path": "items.jsonl"}));
    server.route(
        Match::FirstUserContains("Label the items".into()),
        vec![
            Reply::tool_use("wf1", "Workflow", json!({"name": "label"})).usage(15, 0, 0, 0),
            read("r1").usage(20, 0, 0, 0),
            read("r2").usage(20, 0, 0, 0),
            Reply::text("done"),
            Reply::text("done"),
        ],
    );
    // The caller is killed once its workflow has finished, asking its next turn.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_of(body).is_none()
            && body["messages"]
                .to_string()
                .contains("every item completed")
    })));
    let home = tempfile::tempdir().unwrap();
    let mut child = cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &["run", "--agent", "boss", "Label the items."],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    assert!(held.wait_for(1, Duration::from_secs(60)).await, "held");
    kill(&mut child);
    held.open();
    let callers = |server: &MockServer| {
        server
            .requests()
            .iter()
            .filter(|r| item_of(&r.body).is_none())
            .count()
    };
    let before = callers(&server);
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume"]).await;
    // Resumed, it counts the workflow's 120: its next turn takes it over 150, and it asks
    // no more.
    assert_eq!(callers(&server) - before, 1, "{}{}", out.stdout, out.stderr);
    assert_ne!(out.code, 0, "{}{}", out.stdout, out.stderr);
}
