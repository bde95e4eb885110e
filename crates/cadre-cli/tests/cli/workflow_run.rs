//! `cadre workflow run`, `cadre resume` of a workflow run and `cadre workflow retry`: the
//! real binary against the mock, over a 200-item JSONL input with a typed answer.

use super::sessions::{cadre_command, kill};
use super::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How many items the input has.
const ITEMS: usize = 200;

/// The workflow: each item labelled by an explore agent, typed.
fn workflow_file(prompt: &str, concurrency: usize) -> String {
    format!(
        r#"name: label
input: items.jsonl
key: id
map:
  agent: explore
  prompt: "{prompt}"
  output_schema: {{type: object, properties: {{label: {{type: string}}}}, required: [label], additionalProperties: false}}
  concurrency: {concurrency}
"#
    )
}

/// The first prompt: the same for every run of these tests.
const PROMPT: &str = "Label {{ item.title }}.";

/// A project with the workflow and its 200 items.
fn project(concurrency: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    write_file(
        &dir.path().join("label.yaml"),
        &workflow_file(PROMPT, concurrency),
    );
    let lines: Vec<String> = (0..ITEMS)
        .map(|n| {
            json!({"id": format!("i{n:03}"), "n": n, "title": format!("item-{n:03}")}).to_string()
        })
        .collect();
    write_file(&dir.path().join("items.jsonl"), &(lines.join("\n") + "\n"));
    dir
}

/// The answer the mock gives item `n`.
fn label(n: usize) -> String {
    json!({"label": format!("label-{n}")}).to_string()
}

/// Routes each item's request to its own answer (`spare` of them, for requests sent again),
/// each after `delay`.
fn routes(server: &MockServer, spare: usize, delay: Duration) {
    for n in 0..ITEMS {
        server.route(
            Match::FirstUserContains(format!("item-{n:03}.")),
            vec![Reply::text(&label(n)).delay(delay); spare],
        );
    }
    server.allow_unused_replies();
}

/// How many requests the mock received for each item's first prompt, by item number.
fn sent_per_item(server: &MockServer) -> BTreeMap<usize, usize> {
    let mut sent = BTreeMap::new();
    for r in server.requests() {
        if let Some(n) = item_number(&first_user(&r.body)) {
            *sent.entry(n).or_default() += 1;
        }
    }
    sent
}

/// The number of the item a prompt is about (`item-017.` is 17).
fn item_number(prompt: &str) -> Option<usize> {
    let at = prompt.find("item-")?;
    prompt.get(at + 5..at + 8)?.parse().ok()
}

/// The text of a request's first user message.
fn first_user(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(|b| b["text"].as_str()).collect())
        .or_else(|| body["messages"][0]["content"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The only run folder of the project.
fn run_dir(dir: &Path) -> PathBuf {
    let runs = dir.join(".cadre/runs");
    let mut found: Vec<PathBuf> = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// The results file's lines, by key.
fn results(dir: &Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(run_dir(dir).join("results.jsonl")).unwrap();
    let mut by_key = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_str().unwrap().to_owned();
        assert!(by_key.insert(key.clone(), v).is_none(), "{key} twice");
    }
    by_key
}

/// Each key's outcome and output.
fn answers(results: &BTreeMap<String, Value>) -> BTreeSet<(String, String, String)> {
    results
        .iter()
        .map(|(k, v)| (k.clone(), v["outcome"].to_string(), v["output"].to_string()))
        .collect()
}

/// Asserts every item completed with its own label.
fn all_completed(results: &BTreeMap<String, Value>) {
    assert_eq!(results.len(), ITEMS);
    for n in 0..ITEMS {
        let r = &results[&format!("i{n:03}")];
        assert_eq!(r["outcome"], "completed", "{r}");
        assert_eq!(r["output"]["label"], format!("label-{n}"), "{r}");
    }
}

/// The items whose agent the journal shows finished, by the item number in its prompt.
fn finished_in_journal(dir: &Path) -> BTreeSet<usize> {
    // Read while the run starts: there may be no run folder yet.
    let text = super::sessions::journal(dir);
    let mut item_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut done = BTreeSet::new();
    for line in text.lines() {
        let Ok(step) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let agent = step["agent"].as_str().unwrap_or_default().to_owned();
        match step["step"].as_str() {
            Some("started") => {
                let prompt = first_user(&json!({"messages": step["history"]}));
                if let Some(n) = item_number(&prompt) {
                    item_of.insert(agent, n);
                }
            }
            Some("finished") => done.extend(item_of.get(&agent)),
            _ => {}
        }
    }
    done
}

/// How many items the journal shows started after item `n`'s agent ended.
fn spawned_after_the_end_of(dir: &Path, n: usize) -> usize {
    let text = std::fs::read_to_string(run_dir(dir).join("journal.jsonl")).unwrap();
    let steps: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let marker = format!("item-{n:03}.");
    let agent = steps
        .iter()
        .find(|s| s["step"] == "started" && s["history"].to_string().contains(&marker))
        .map(|s| s["agent"].clone())
        .unwrap();
    let end = steps
        .iter()
        .position(|s| s["step"] == "finished" && s["agent"] == agent)
        .unwrap();
    steps[end..]
        .iter()
        .filter(|s| s["step"] == "spawned" && s["agent"] == "workflow")
        .count()
}

#[tokio::test]
async fn a_200_item_workflow_answers_each_item_once_typed() {
    let dir = project(16);
    let server = MockServer::start().await;
    routes(&server, 1, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "label.yaml", "--output", "out.csv"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("200 items: 200 completed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("explore"),
        "the closing table per type: {}",
        out.stderr
    );
    let results = results(dir.path());
    all_completed(&results);
    let sent = sent_per_item(&server);
    assert_eq!(sent.len(), ITEMS);
    assert!(
        sent.values().all(|&n| n == 1),
        "each item's call once: {sent:?}"
    );
    // A run like any other: `cadre runs` lists it.
    let runs = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["runs", "list", "--json"],
    )
    .await;
    let listed: Value = serde_json::from_str(&runs.stdout).unwrap();
    assert_eq!(listed[0]["task"], "label", "{listed}");
    assert_eq!(listed[0]["agents"], ITEMS, "{listed}");
    let shown = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["runs", "show", "latest"],
    )
    .await;
    assert_eq!(shown.code, 0, "{}{}", shown.stdout, shown.stderr);
    assert!(shown.stdout.contains("explore#200"), "{}", shown.stdout);
    let csv = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        ITEMS + 1,
        "a header and a row per item"
    );
    assert!(csv.starts_with("key,outcome,output,"), "{csv}");
}

/// Starts `cadre workflow run` in `dir`, killed with SIGKILL once the journal shows at
/// least `finished` items done; the items finished before the kill.
async fn run_and_kill(dir: &Path, server: &MockServer, finished: usize) -> BTreeSet<usize> {
    let home = tempfile::tempdir().unwrap();
    let mut child = cadre_command(
        dir,
        &server.uri(),
        home.path(),
        &["workflow", "run", "label.yaml"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    wait_for("about half the items finished", || {
        finished_in_journal(dir).len() >= finished
    })
    .await;
    kill(&mut child);
    finished_in_journal(dir)
}

#[tokio::test]
async fn killed_at_half_and_resumed_no_finished_item_is_sent_again_and_an_edit_reruns_only_its_items(
) {
    let dir = project(8);
    let server = MockServer::start().await;
    routes(&server, 3, Duration::from_millis(20));
    // Items from 108 on are held until the kill: it comes at about half, never after the end.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_number(&first_user(body)).is_some_and(|n| n >= 108)
    })));
    let before_kill = run_and_kill(dir.path(), &server, ITEMS / 2).await;
    held.open();
    assert!(
        (ITEMS / 2..=108).contains(&before_kill.len()),
        "{before_kill:?}"
    );
    let sent_before = sent_per_item(&server);

    // A tenth of the rendered prompts change: items 0–19 are asked to relabel.
    let edited = "{{ 'Relabel' if item.n < 20 else 'Label' }} {{ item.title }}.";
    write_file(&dir.path().join("label.yaml"), &workflow_file(edited, 8));
    let id = run_dir(dir.path())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let results = results(dir.path());
    all_completed(&results);
    let sent = sent_per_item(&server);
    for n in 0..ITEMS {
        let before = sent_before.get(&n).copied().unwrap_or(0);
        let after = sent[&n] - before;
        if before_kill.contains(&n) {
            let expected = usize::from(n < 20);
            assert_eq!(
                after,
                expected,
                "item {n}: finished before the kill; edited: {}",
                n < 20
            );
        } else {
            assert!(after <= 1, "item {n} was sent {after} times by the resume");
        }
    }
    // The same results again: a second resume sends nothing and writes the same lines.
    let total: usize = sent.values().sum();
    let again = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert_eq!(sent_per_item(&server).values().sum::<usize>(), total);
    assert_eq!(answers(&self::results(dir.path())), answers(&results));
    // Kept as their results alone, the finished items still count: the summary has a
    // record for every item agent the journal started.
    let run = run_dir(dir.path());
    let started = std::fs::read_to_string(run.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|s| s["step"] == "started" && s["agent"] != "workflow")
        .count();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["usage"]["agents"].as_array().unwrap().len(),
        started
    );
}

#[tokio::test]
async fn a_401_stops_scheduling_exits_3_and_resume_completes_the_rest() {
    let dir = project(8);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("item-050.".into()),
        vec![Reply::error_status(
            401,
            "authentication_error",
            "invalid x-api-key",
        )],
    );
    routes(&server, 2, Duration::from_millis(100));
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "label.yaml"],
    )
    .await;
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("401"), "{}", out.stderr);
    assert_eq!(
        spawned_after_the_end_of(dir.path(), 50),
        0,
        "an item started after the 401"
    );
    let sent = sent_per_item(&server);
    // Items start in order, 8 at once: when item 50's request was refused, at most the
    // seven after it had started.
    assert!(
        sent.keys().all(|&n| n < 58),
        "an item started after the 401: {sent:?}"
    );
    let first = results(dir.path());
    assert_eq!(first.len(), ITEMS, "one line per item");
    let cancelled = first
        .values()
        .filter(|r| r["outcome"] == "cancelled")
        .count();
    assert!(cancelled >= ITEMS - 58, "{cancelled} not started");

    // The key is good again: resume completes the rest, sending no finished item again.
    let id = run_dir(dir.path())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["resume", &id, "--output-format", "stream-json"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()));
    // stream-json tells each item as an event, then the result.
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let items = events.iter().filter(|e| e["event"] == "item").count();
    assert_eq!(items, ITEMS, "{}", out.stdout);
    assert_eq!(events.last().unwrap()["event"], "result");
    let after = sent_per_item(&server);
    for (n, r) in first.iter().filter(|(_, r)| r["outcome"] == "completed") {
        let n: usize = n[1..].parse().unwrap();
        assert_eq!(after[&n], 1, "completed item {n} ({r}) was sent again");
    }
}

#[tokio::test]
async fn retry_failed_reruns_only_failed_items_and_retry_item_continues_its_history() {
    let dir = project(8);
    let server = MockServer::start().await;
    // Items 3 and 7 answer with no JSON three times: their answers are invalid.
    for n in [3, 7] {
        server.route(
            Match::FirstUserContains(format!("item-{n:03}.")),
            vec![Reply::text("not json"); 3],
        );
    }
    routes(&server, 1, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "label.yaml"],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let first = results(dir.path());
    let failed: Vec<&String> = first
        .iter()
        .filter(|(_, r)| r["outcome"].as_str().unwrap().starts_with("failed"))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(failed, ["i003", "i007"]);
    let sent_before = sent_per_item(&server);

    let id = run_dir(dir.path())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "retry", &id, "--failed"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()));
    let sent = sent_per_item(&server);
    let rerun: Vec<usize> = (0..ITEMS).filter(|n| sent[n] != sent_before[n]).collect();
    assert_eq!(rerun, [3, 7], "only the failed items ran again");

    // An item the run does not have is refused, naming it.
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "retry", &id, "--item", "nope", "--prompt", "x"],
    )
    .await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no item \"nope\""), "{}", out.stderr);

    // A fix round: item 12's agent goes on from its history.
    server.route(
        Match::LastUserContains("Use lower case".into()),
        vec![Reply::text(r#"{"label": "fixed"}"#)],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &[
            "workflow",
            "retry",
            &id,
            "--item",
            "i012",
            "--prompt",
            "Use lower case.",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let last = server.requests().pop().unwrap();
    let messages = last.body["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "the earlier turns were sent: {messages:?}"
    );
    assert!(first_user(&last.body).contains("item-012."));
    assert!(messages[1].to_string().contains("label-12"), "{messages:?}");
    assert_eq!(results(dir.path())["i012"]["output"]["label"], "fixed");
}

/// On a terminal, the live block is one line for the whole run, not one per agent: done,
/// running, queued and failed items, tokens and an ETA.
#[tokio::test]
async fn the_live_block_is_one_line_of_counts() {
    use super::screen::{on_terminal, read_for, screen};
    let dir = project(8);
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    routes(&server, 1, Duration::ZERO);
    // Items from 10 on are held: 10 done, 8 running, 182 queued while the block is read.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_number(&first_user(body)).is_some_and(|n| n >= 10)
    })));
    let cmd = on_terminal(
        dir.path(),
        home.path(),
        &server,
        140,
        &["workflow", "run", "label.yaml"],
    );
    let gate = held.clone();
    let shown = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        let start = std::time::Instant::now();
        while gate.waiting() < 8 {
            assert!(start.elapsed() < Duration::from_secs(30), "no 8 held items");
            std::thread::sleep(Duration::from_millis(50));
        }
        let shown = read_for(&mut p, Duration::from_millis(800));
        gate.open();
        p.exp_string("200 items").unwrap();
        p.exp_eof().unwrap();
        shown
    })
    .await
    .unwrap();
    let rows = screen(&shown, 140);
    let block: Vec<&String> = rows
        .iter()
        .filter(|r| r.starts_with("workflow label"))
        .collect();
    assert_eq!(block.len(), 1, "{}", rows.join("\n"));
    assert!(
        block[0].contains("10 done · 8 running · 182 queued · 0 failed ·"),
        "{}",
        block[0]
    );
    assert!(block[0].contains("tokens · ETA"), "{}", block[0]);
    assert!(
        !rows.iter().any(|r| r.contains("explore#")),
        "{}",
        rows.join("\n")
    );
}

/// SIGTERM stops every item: the run ends cancelled (exit 130) with a line per item, and a
/// resume completes it.
#[tokio::test]
async fn sigterm_stops_every_item_and_resume_completes_the_run() {
    let dir = project(8);
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    routes(&server, 2, Duration::ZERO);
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_number(&first_user(body)).is_some_and(|n| n >= 20)
    })));
    let mut child = cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &["workflow", "run", "label.yaml"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    assert!(
        held.wait_for(8, Duration::from_secs(60)).await,
        "8 items held"
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let first = results(dir.path());
    assert_eq!(first.len(), ITEMS, "a line per item");
    assert!(first.values().any(|r| r["outcome"] == "cancelled"));
    held.open();
    let id = run_dir(dir.path())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()));
}

/// The id of the only run of the project.
fn run_id(dir: &Path) -> String {
    run_dir(dir)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// Waits for `child` to exit; its exit code.
async fn exit_code(mut child: std::process::Child) -> Option<i32> {
    tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap()
        .code()
}

/// The lines of a JSON Lines file in `dir`, by key.
fn lines_by_key(file: &Path) -> BTreeMap<String, Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["key"].as_str().unwrap().to_owned(), v))
        .collect()
}

#[tokio::test]
async fn a_retry_keeps_every_result_line_while_it_runs_and_writes_output_again() {
    let dir = project(8);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("item-003.".into()),
        vec![Reply::text("not json"); 3],
    );
    routes(&server, 2, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "label.yaml", "--output", "out.jsonl"],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let first = results(dir.path());
    assert_eq!(first["i003"]["outcome"], "failed: invalid answer");

    // The retry's request for item 3 is held: meanwhile every earlier line stays readable.
    let held = server.gate(Match::FirstUserContains("item-003.".into()));
    let home = tempfile::tempdir().unwrap();
    let child = cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &["workflow", "retry", &run_id(dir.path()), "--failed"],
    )
    .spawn()
    .unwrap();
    assert!(
        held.wait_for(1, Duration::from_secs(60)).await,
        "item 3 asked again"
    );
    assert_eq!(results(dir.path()), first, "results.jsonl lost lines");
    held.open();
    assert_eq!(exit_code(child).await, Some(0));
    all_completed(&results(dir.path()));
    assert!(!run_dir(dir.path()).join("results.jsonl.partial").exists());
    // --output, given to the run, is written again by the retry.
    let output = lines_by_key(&dir.path().join("out.jsonl"));
    assert_eq!(output.len(), ITEMS);
    assert_eq!(output["i003"]["outcome"], "completed", "{}", output["i003"]);
}

/// How many requests the mock received for the reduce.
fn reduces_sent(server: &MockServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| first_user(&r.body).contains("Summarise"))
        .count()
}

#[tokio::test]
async fn retry_failed_runs_the_reduce_again_and_a_resume_with_the_same_results_does_not() {
    let dir = project(8);
    let file = workflow_file(PROMPT, 8)
        + "reduce:\n  agent: plan\n  prompt: \"Summarise {{ results_path }}.\"\n";
    write_file(&dir.path().join("label.yaml"), &file);
    let server = MockServer::start().await;
    server.route(
        Match::FirstUserContains("item-003.".into()),
        vec![Reply::text("not json"); 3],
    );
    server.route(
        Match::FirstUserContains("Summarise".into()),
        vec![Reply::text("first summary"), Reply::text("second summary")],
    );
    routes(&server, 2, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "label.yaml"],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("first summary"), "{}", out.stdout);
    assert_eq!(reduces_sent(&server), 1);

    // The same results: the reduce's answer stands.
    let id = run_id(dir.path());
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("first summary"), "{}", out.stdout);
    assert_eq!(
        reduces_sent(&server),
        1,
        "the reduce ran again on the same results"
    );

    // Item 3 completes now: the reduce summarises the new results.
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "retry", &id, "--failed"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("second summary"), "{}", out.stdout);
    assert_eq!(reduces_sent(&server), 2);
}

#[tokio::test]
async fn a_workflow_stopped_by_its_budget_and_resumed_does_not_spend_it_again() {
    let dir = project(1);
    // Each answer is 15 tokens: about ten items fit.
    let file = workflow_file(PROMPT, 1) + "budget: {tokens: 150}\n";
    write_file(&dir.path().join("label.yaml"), &file);
    let server = MockServer::start().await;
    routes(&server, 1, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "label.yaml"],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let sent = server.requests().len();
    assert!((1..ITEMS).contains(&sent), "{sent} requests");
    let first = results(dir.path());
    assert!(first.values().any(|r| r["outcome"] == "budget"));

    let id = run_id(dir.path());
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        server.requests().len(),
        sent,
        "the resume spent the budget again"
    );
    // A larger budget lets it go on, counting what was spent before.
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["resume", &id, "--budget-tokens", "100000"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()));
}

#[tokio::test]
async fn a_resume_of_reversed_input_at_another_concurrency_sends_no_finished_item_again() {
    let dir = project(8);
    let server = MockServer::start().await;
    routes(&server, 2, Duration::ZERO);
    // Items from 100 on are held until the kill.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        item_number(&first_user(body)).is_some_and(|n| n >= 100)
    })));
    let before_kill = run_and_kill(dir.path(), &server, 60).await;
    held.open();
    let sent_before = sent_per_item(&server);

    // The input's lines reversed, and 3 at once instead of 8.
    let input = dir.path().join("items.jsonl");
    let text = std::fs::read_to_string(&input).unwrap();
    let reversed: Vec<&str> = text.lines().rev().collect();
    write_file(&input, &(reversed.join("\n") + "\n"));
    write_file(&dir.path().join("label.yaml"), &workflow_file(PROMPT, 3));
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["resume", &run_id(dir.path())],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()));
    let sent = sent_per_item(&server);
    for n in &before_kill {
        assert_eq!(
            sent[n], sent_before[n],
            "item {n} finished and was sent again"
        );
    }
}

#[tokio::test]
async fn stream_json_tells_each_item_when_it_starts_and_when_it_ends() {
    let dir = project(8);
    let server = MockServer::start().await;
    routes(&server, 1, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &[
            "workflow",
            "run",
            "label.yaml",
            "--output-format",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Each item's start comes before its end, naming the same call and agent.
    let mut started: BTreeMap<String, Value> = BTreeMap::new();
    let mut ended = 0;
    for e in &events {
        match e["event"].as_str() {
            Some("item_started") => {
                let key = e["key"].as_str().unwrap().to_owned();
                assert_eq!(e["attempt"], 1, "{e}");
                assert!(
                    e["agent"]
                        .as_str()
                        .unwrap()
                        .starts_with("workflow/explore#"),
                    "{e}"
                );
                assert!(
                    started.insert(key, e.clone()).is_none(),
                    "started twice: {e}"
                );
            }
            Some("item") => {
                let key = e["key"].as_str().unwrap();
                let start = started
                    .get(key)
                    .unwrap_or_else(|| panic!("{key} ended before it started"));
                assert_eq!(start["call"], e["call"], "{e}");
                assert_eq!(start["agent"], e["agent"], "{e}");
                ended += 1;
            }
            _ => {}
        }
    }
    assert_eq!((started.len(), ended), (ITEMS, ITEMS));
    assert_eq!(events.last().unwrap()["event"], "result");
}

/// A fix round (`retry --item K --prompt`) of the one item of a workflow whose items run
/// under `limits`, after its agent stopped at them: its first answer is a tool call
/// (`first`), which takes it to its limit and the outcome `stopped`. The follow-up gets
/// the limits afresh: it asks the model again (sending the earlier turns) and completes.
async fn a_fix_round_after_a_limit_stop_gets_a_fresh_allowance(
    limits: &str,
    first: Reply,
    stopped: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    write_file(
        &dir.path().join("fix.yaml"),
        &format!(
            "name: fix\ninput: items.jsonl\nkey: id\nmap:\n  agent: explore\n  prompt: \"Look at {{{{ item.title }}}}.\"\n  limits: {limits}\n"
        ),
    );
    write_file(
        &dir.path().join("items.jsonl"),
        &(json!({"id": "a", "title": "item-a"}).to_string() + "\n"),
    );
    let server = MockServer::start().await;
    server.route(Match::FirstUserContains("item-a.".into()), vec![first]);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "fix.yaml"],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(results(dir.path())["a"]["outcome"], stopped);
    assert_eq!(server.requests().len(), 1);

    server.route(
        Match::LastUserContains("Answer now".into()),
        vec![Reply::text("fixed").usage(10, 5, 0, 0)],
    );
    let id = run_id(dir.path());
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &[
            "workflow",
            "retry",
            &id,
            "--item",
            "a",
            "--prompt",
            "Answer now.",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the follow-up asked the model");
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert!(
        messages[1].to_string().contains("read_file"),
        "the earlier turns were sent: {messages:?}"
    );
    let line = &results(dir.path())["a"];
    assert_eq!(line["outcome"], "completed", "{line}");
    assert_eq!(line["output"], "fixed", "{line}");
}

#[tokio::test]
async fn a_fix_round_after_a_turn_limit_stop_gets_its_turns_afresh() {
    let first = Reply::tool_use("t1", "read_file", json!({"path": "items.jsonl"}));
    a_fix_round_after_a_limit_stop_gets_a_fresh_allowance("{turns: 1}", first, "turn limit").await;
}

#[tokio::test]
async fn a_fix_round_after_a_token_limit_stop_gets_its_tokens_afresh() {
    let first =
        Reply::tool_use("t1", "read_file", json!({"path": "items.jsonl"})).usage(300, 10, 0, 0);
    a_fix_round_after_a_limit_stop_gets_a_fresh_allowance("{tokens: 200}", first, "budget").await;
}

#[tokio::test]
async fn a_fix_round_killed_mid_turn_and_resumed_keeps_counting_its_subagents_tokens() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    write_file(
        &dir.path().join(".cadre/agents/digger.yaml"),
        "name: digger\ndescription: Digs.\nmode: subagent\ntools: [read_file, Task]\nprompt: You dig.\n",
    );
    write_file(
        &dir.path().join("fix.yaml"),
        "name: fix\ninput: items.jsonl\nkey: id\nmap:\n  agent: digger\n  prompt: \"Look at {{ item.title }}.\"\n  limits: {tokens: 300}\n",
    );
    write_file(
        &dir.path().join("items.jsonl"),
        &(json!({"id": "a", "title": "item-a"}).to_string() + "\n"),
    );
    let server = MockServer::start().await;
    // Its fix round starts a subagent (250 tokens), then reads a file for 50: over its 300
    // tokens counted from the follow-up, though its own are only 10 + 50, so it is not
    // asked again.
    let read = |id| Reply::tool_use(id, "read_file", json!({"path": "items.jsonl"}));
    server.route(
        Match::FirstUserContains("item-a.".into()),
        vec![
            Reply::text("first").usage(10, 0, 0, 0),
            Reply::tasks([("t2", "explore", "Dig job")]).usage(10, 0, 0, 0),
            read("r1").usage(50, 0, 0, 0),
            read("r2").usage(50, 0, 0, 0),
            Reply::text("fixed"),
            Reply::text("fixed"),
        ],
    );
    server.route(
        Match::FirstUserContains("Dig job".into()),
        vec![Reply::text("dug").usage(250, 0, 0, 0)],
    );
    server.allow_unused_replies();
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["workflow", "run", "fix.yaml"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // The fix round is killed while its answer after the subagent is asked.
    let held = server.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        first_user(body).contains("item-a.") && body["messages"].to_string().contains("dug")
    })));
    let id = run_id(dir.path());
    let home = tempfile::tempdir().unwrap();
    let mut child = cadre_command(
        dir.path(),
        &server.uri(),
        home.path(),
        &[
            "workflow",
            "retry",
            &id,
            "--item",
            "a",
            "--prompt",
            "Dig deeper.",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    assert!(held.wait_for(1, Duration::from_secs(60)).await, "held");
    kill(&mut child);
    held.open();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["resume", &id]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let line = &results(dir.path())["a"];
    assert_eq!(line["outcome"], "budget", "{line}");
}

#[tokio::test]
async fn stream_json_ends_every_attempt_it_starts_and_starts_no_reduce() {
    let dir = project(8);
    write_file(
        &dir.path().join("label.yaml"),
        &(workflow_file(PROMPT, 8)
            + "  retries: 1\nreduce:\n  agent: explore\n  prompt: \"Sum up {{ results_path }}.\"\n"),
    );
    let server = MockServer::start().await;
    // Item 5's first attempt fails; its second completes.
    server.route(
        Match::FirstUserContains("item-005.".into()),
        vec![
            Reply::error_status(400, "invalid_request_error", "bad request"),
            Reply::text(&label(5)),
        ],
    );
    server.route(
        Match::FirstUserContains("Sum up".into()),
        vec![Reply::text("summary")],
    );
    routes(&server, 1, Duration::ZERO);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &[
            "workflow",
            "run",
            "label.yaml",
            "--output-format",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // Each start's call has one end: the item's line, or the retried attempt's.
    let mut open: BTreeMap<String, Value> = BTreeMap::new();
    let mut retried = Vec::new();
    for line in out.stdout.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let call = e["call"].as_str().unwrap_or_default().to_owned();
        match e["event"].as_str() {
            Some("item_started") => assert!(open.insert(call, e).is_none(), "started twice"),
            Some("item") | Some("item_retried") => {
                assert!(open.remove(&call).is_some(), "ended, not started: {e}");
                if e["event"] == "item_retried" {
                    retried.push(e);
                }
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "started, never ended: {open:?}");
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(retried[0]["key"], "i005");
    assert_eq!(retried[0]["attempt"], 1);
    assert!(
        retried[0]["failed"].as_str().unwrap().contains("400"),
        "{retried:?}"
    );
}
