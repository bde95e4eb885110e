//! `cadre workflow run --engine restate`: each item a durable call on two workers behind
//! HAProxy (a real Restate server), a worker or the client killed mid-run, and a 401.

use super::engine_fleet::{finish, gather_stderr, Fleet, WorkerProc};
use super::sessions::cadre_command;
use super::*;
use cadre_engine::client::Ingress;
use cadre_testkit::restate::{engine_or_skip, RestateServer};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::process::{Child, Stdio};
use std::time::Duration;

/// The workflow: each item labelled by an explore agent, typed.
fn workflow_file(concurrency: usize) -> String {
    format!(
        r#"name: label
input: items.jsonl
key: id
map:
  agent: explore
  prompt: "Label {{{{ item.title }}}}."
  output_schema: {{type: object, properties: {{label: {{type: string}}}}, required: [label], additionalProperties: false}}
  concurrency: {concurrency}
"#
    )
}

/// A project (no repository: the workers share its folder) with the workflow and `items`
/// items.
fn project(items: usize, concurrency: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("label.yaml"), &workflow_file(concurrency));
    let lines: Vec<String> = (0..items)
        .map(|n| json!({"id": format!("i{n:03}"), "title": format!("item-{n:03}")}).to_string())
        .collect();
    write_file(&dir.path().join("items.jsonl"), &(lines.join("\n") + "\n"));
    dir
}

/// Routes each of `items` items' request to its own answer (`spare` of them, for requests
/// sent again), each after `delay`.
fn routes(server: &MockServer, items: usize, spare: usize, delay: Duration) {
    for n in 0..items {
        let label = json!({"label": format!("label-{n}")}).to_string();
        server.route(
            Match::FirstUserContains(format!("item-{n:03}.")),
            vec![Reply::text(&label).usage(20, 5, 0, 0).delay(delay); spare],
        );
    }
    server.allow_unused_replies();
}

/// The number of the item a prompt is about (`item-017.` is 17).
fn item_number(body: &Value) -> Option<usize> {
    let prompt = body["messages"][0]["content"]
        .as_array()
        .and_then(|c| c.first())
        .and_then(|b| b["text"].as_str())
        .or_else(|| body["messages"][0]["content"].as_str())?;
    let at = prompt.find("item-")?;
    prompt.get(at + 5..at + 8)?.parse().ok()
}

/// How many requests the mock received for each item, by item number.
fn sent_per_item(server: &MockServer) -> BTreeMap<usize, usize> {
    let mut sent = BTreeMap::new();
    for r in server.requests() {
        if let Some(n) = item_number(&r.body) {
            *sent.entry(n).or_default() += 1;
        }
    }
    sent
}

/// A gate holding the requests of the items numbered in `held`.
fn hold(server: &MockServer, held: std::ops::Range<usize>) -> cadre_testkit::Gate {
    server.gate(Match::Custom(std::sync::Arc::new(move |body: &Value| {
        item_number(body).is_some_and(|n| held.contains(&n))
    })))
}

/// The project's one run folder, once there is one.
fn run_dir(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join(".cadre/runs"))
        .ok()?
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(found.len() <= 1, "{found:?}");
    found.pop()
}

/// The run's id.
fn run_id(dir: &Path) -> String {
    let dir = run_dir(dir).unwrap();
    dir.file_name().unwrap().to_str().unwrap().to_owned()
}

/// The keys the results file has lines for so far.
fn keys_told(dir: &Path) -> BTreeSet<String> {
    let Some(run) = run_dir(dir) else {
        return BTreeSet::new();
    };
    let text = std::fs::read_to_string(run.join("results.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["key"].as_str().map(str::to_owned))
        .collect()
}

/// The results file's lines, by key (each key once).
fn results(dir: &Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(run_dir(dir).unwrap().join("results.jsonl")).unwrap();
    let mut by_key = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_str().unwrap().to_owned();
        assert!(by_key.insert(key.clone(), v).is_none(), "{key} twice");
    }
    by_key
}

/// Asserts `items` lines, each completed with an output valid against the schema (an
/// object of one string `label`), its own.
fn all_completed(results: &BTreeMap<String, Value>, items: usize) {
    assert_eq!(results.len(), items);
    for n in 0..items {
        let r = &results[&format!("i{n:03}")];
        assert_eq!(r["outcome"], "completed", "{r}");
        let output = r["output"].as_object().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(output.len(), 1, "{r}");
        assert_eq!(output["label"], format!("label-{n}"), "{r}");
    }
}

/// `cadre workflow run label.yaml --engine restate` in `dir` as a child process (to kill),
/// with `extra` arguments.
fn spawn_run(dir: &Path, fleet: &Fleet, home: &Path, model: &str, extra: &[&str]) -> Child {
    let ingress = fleet.restate.ingress_url();
    let mut args = vec![
        "workflow",
        "run",
        "label.yaml",
        "--engine",
        "restate",
        "--restate-url",
        &ingress,
    ];
    args.extend_from_slice(extra);
    cadre_command(dir, model, home, &args)
        .env_remove("ANTHROPIC_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends `signal` to the client `child`, as a terminal would.
fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// The items numbered in `held` (their model requests held at the mock) as the roster of
/// run `id` shows them at work, with the worker each is on, once it shows them all. Only
/// those are counted: an item that has just ended can still be on the roster a moment.
async fn at_work(fleet: &Fleet, id: &str, held: Range<usize>) -> BTreeMap<usize, String> {
    let ingress = Ingress::new(&fleet.restate.ingress_url()).unwrap();
    let mut at_work = BTreeMap::new();
    for _ in 0..200 {
        let roster = ingress.roster(id).await.unwrap();
        at_work = roster
            .iter()
            .filter(|p| p.turn >= 1)
            .filter_map(|p| {
                let key = p.description.strip_prefix("item i")?;
                Some((key.parse::<usize>().ok()?, p.worker.clone()))
            })
            .filter(|(n, _)| held.contains(n))
            .collect();
        if at_work.len() == held.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    at_work
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn two_hundred_items_over_two_workers_one_killed_all_complete_none_sent_again() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 200;
    const AT_ONCE: usize = 8;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 2, Duration::from_millis(20));
    // Items 66–73 (the eight at work once about a third are done) wait here for the kill.
    let held = hold(&mock, 66..66 + AT_ONCE);
    let mut fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(
        dir.path(),
        &fleet,
        home.path(),
        &mock.uri(),
        &["--output", "out.csv"],
    );
    assert!(
        held.wait_for(AT_ONCE, Duration::from_secs(120)).await,
        "only {} held items reached the mock\n{}",
        held.waiting(),
        fleet.restate.log()
    );
    let told_before = keys_told(dir.path());
    assert_eq!(told_before.len(), 66, "{told_before:?}");
    // Kill a replica that holds some of them.
    let id = run_id(dir.path());
    let working = at_work(&fleet, &id, 66..66 + AT_ONCE).await;
    assert_eq!(working.len(), AT_ONCE, "{working:?}");
    let on = |w: &str| -> BTreeSet<usize> {
        working
            .iter()
            .filter(|(_, worker)| *worker == w)
            .map(|(n, _)| *n)
            .collect()
    };
    let (victim, lost) = if on("w1").is_empty() {
        (1, on("w2"))
    } else {
        (0, on("w1"))
    };
    assert!(!lost.is_empty(), "no worker holds an item: {working:?}");
    fleet.workers[victim].kill();
    held.open();
    let out = finish(client).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("200 items: 200 completed"),
        "{}",
        out.stdout
    );
    all_completed(&results(dir.path()), ITEMS);
    // No item's request went out twice but those the killed worker had under way, held
    // unanswered (its invocations went to the other worker, which sent each once more);
    // none that had ended, none the other worker had.
    let sent = sent_per_item(&mock);
    assert_eq!(sent.len(), ITEMS);
    let again: BTreeSet<usize> = sent
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(item, _)| *item)
        .collect();
    assert_eq!(
        again, lost,
        "sent again: {again:?}; the killed worker had {lost:?}"
    );
    assert!(sent.values().all(|n| *n <= 2), "{sent:?}");
    assert!(again.len() <= AT_ONCE);
    assert!(told_before
        .iter()
        .all(|k| !again.contains(&k[1..].parse().unwrap())));
    // `--output` has the same lines, as CSV.
    let csv = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        ITEMS + 1,
        "a header and a row per item"
    );
    // A run like any other: `cadre runs` lists it with every item's agent.
    let runs = cadre_env(dir.path(), &[], &["runs", "list", "--json"]).await;
    let listed: Value = serde_json::from_str(&runs.stdout).unwrap();
    assert_eq!(listed[0]["task"], "label", "{listed}");
    assert_eq!(listed[0]["agents"], ITEMS, "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn the_client_killed_and_resumed_sends_no_item_again() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 40;
    const AT_ONCE: usize = 4;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 2, Duration::from_millis(20));
    let held = hold(&mock, 20..20 + AT_ONCE);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let mut client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    assert!(
        held.wait_for(AT_ONCE, Duration::from_secs(120)).await,
        "only {} held items reached the mock",
        held.waiting()
    );
    client.kill().unwrap();
    client.wait().unwrap();
    assert_eq!(keys_told(dir.path()).len(), 20);
    // The items under way end on the engine while no client is there: their lines are not
    // written, and the resume must take their results from the engine.
    held.open();
    wait_for("the held items to end on the engine", || {
        mock.requests().iter().filter(|r| r.completed).count() == 20 + AT_ONCE
    })
    .await;
    let id = run_id(dir.path());
    let out = cadre_env(dir.path(), &[], &["resume", &id[..id.len() - 2]]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines = results(dir.path());
    all_completed(&lines, ITEMS);
    // Each item's agent is its own, in either part of the run.
    let agents: BTreeSet<&str> = lines
        .values()
        .map(|r| r["agent"].as_str().unwrap())
        .collect();
    assert_eq!(agents.len(), ITEMS, "{agents:?}");
    let sent = sent_per_item(&mock);
    assert_eq!(sent.len(), ITEMS);
    assert!(
        sent.values().all(|n| *n == 1),
        "an item was sent again: {sent:?}"
    );
    // The run's usage counts every item's agent, those of the first part too.
    let summary = run_dir(dir.path()).unwrap().join("summary.json");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
    assert_eq!(summary["usage"]["agents"].as_array().unwrap().len(), ITEMS);
    // Finished now: a plain `cadre resume` finds nothing to go on with.
    let out = cadre_env(dir.path(), &[], &["resume"]).await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
}

/// The number of the model request (its turn: 1 for the first) `body` is.
fn turn_of(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map_or(0, |m| m.len().div_ceil(2))
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_worker_killed_in_a_two_turn_item_sends_its_first_turn_once() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 8;
    const AT_ONCE: usize = 4;
    let dir = project(ITEMS, AT_ONCE);
    write_file(&dir.path().join("notes.txt"), "a note to read\n");
    let mock = MockServer::start().await;
    // Each item reads the note, then answers (twice over, for a turn sent again).
    for n in 0..ITEMS {
        let label = json!({"label": format!("label-{n}")}).to_string();
        mock.route(
            Match::FirstUserContains(format!("item-{n:03}.")),
            vec![
                Reply::tool_use(
                    &format!("toolu_{n}"),
                    "read_file",
                    json!({"path": "notes.txt"}),
                ),
                Reply::text(&label),
                Reply::text(&label),
            ],
        );
    }
    mock.allow_unused_replies();
    // The first items' second turns wait here for the kill.
    let held = mock.gate(Match::Custom(std::sync::Arc::new(|body: &Value| {
        turn_of(body) == 2 && item_number(body).is_some_and(|n| n < AT_ONCE)
    })));
    let mut fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    assert!(held.wait_for(AT_ONCE, Duration::from_secs(120)).await);
    let id = run_id(dir.path());
    let working = at_work(&fleet, &id, 0..AT_ONCE).await;
    assert_eq!(working.len(), AT_ONCE, "{working:?}");
    let victim = usize::from(!working.values().any(|w| w == "w1"));
    fleet.workers[victim].kill();
    held.open();
    let out = finish(client).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()), ITEMS);
    // The killed worker's items were replayed on the other: their first turn (and its
    // tool call) came from the journal, not from the model again.
    let mut first_turns = BTreeMap::new();
    for r in mock.requests() {
        if let (Some(n), 1) = (item_number(&r.body), turn_of(&r.body)) {
            *first_turns.entry(n).or_insert(0) += 1;
        }
    }
    assert_eq!(first_turns.len(), ITEMS, "{first_turns:?}");
    assert!(
        first_turns.values().all(|&n| n == 1),
        "a first turn was sent again: {first_turns:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn the_client_killed_and_resumed_while_items_run_attaches_to_them() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 12;
    const AT_ONCE: usize = 4;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 2, Duration::ZERO);
    let held = hold(&mock, 4..4 + AT_ONCE);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let mut client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    assert!(held.wait_for(AT_ONCE, Duration::from_secs(120)).await);
    client.kill().unwrap();
    client.wait().unwrap();
    let id = run_id(dir.path());
    // Resumed while the held items still run: the resume submits their keys again (its
    // record of each, with the invocation Restate gave it, follows the first part's).
    let submitted = run_dir(dir.path()).unwrap().join("engine-submitted.jsonl");
    let accepted = || {
        std::fs::read_to_string(&submitted)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"invocation\""))
            .count()
    };
    assert_eq!(accepted(), 4 + AT_ONCE);
    let resume = cadre_command(dir.path(), &mock.uri(), home.path(), &["resume", &id])
        .env_remove("ANTHROPIC_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the resume to submit the held items again", || {
        accepted() == 4 + 2 * AT_ONCE
    })
    .await;
    assert_eq!(held.waiting(), AT_ONCE, "the held items are still held");
    held.open();
    let out = finish(resume).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()), ITEMS);
    let sent = sent_per_item(&mock);
    assert!(
        sent.values().all(|&n| n == 1),
        "an item was sent again: {sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_401_stops_submitting_exits_3_naming_it_and_resume_completes_the_rest() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 40;
    const AT_ONCE: usize = 4;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    mock.route(
        Match::FirstUserContains("item-020.".into()),
        vec![Reply::error_status(
            401,
            "authentication_error",
            "invalid x-api-key",
        )],
    );
    routes(&mock, ITEMS, 2, Duration::ZERO);
    // The items that may be in flight beside item 20 hold their slots until the client has
    // its refusal: only item 20's end can free one, and the client then stops submitting.
    let held = hold(&mock, 21..20 + AT_ONCE);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    wait_for("item 20's line", || keys_told(dir.path()).contains("i020")).await;
    held.open();
    let out = finish(client).await;
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("401"), "{}", out.stderr);
    // Items are submitted in order, four at once: when item 20 was refused, at most the
    // three after it had been submitted, and none was after.
    let sent = sent_per_item(&mock);
    assert!(
        sent.keys().all(|&n| n < 20 + AT_ONCE),
        "an item was submitted after the 401: {sent:?}"
    );
    let first = results(dir.path());
    assert_eq!(first.len(), ITEMS, "one line per item");
    let not_started = first
        .values()
        .filter(|r| r["outcome"] == "cancelled")
        .count();
    assert!(
        not_started >= ITEMS - 20 - AT_ONCE,
        "{not_started} not started"
    );

    // The key is good again: resume completes the rest, sending no completed item again.
    let id = run_id(dir.path());
    let out = cadre_env(dir.path(), &[], &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()), ITEMS);
    let after = sent_per_item(&mock);
    for (key, r) in first.iter().filter(|(_, r)| r["outcome"] == "completed") {
        let n: usize = key[1..].parse().unwrap();
        assert_eq!(after[&n], 1, "completed item {n} ({r}) was sent again");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn retry_failed_on_the_engine_runs_only_the_failed_items_again() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 12;
    let dir = project(ITEMS, 4);
    let mock = MockServer::start().await;
    // Items 3 and 7 answer with no JSON three times: their answers are invalid.
    for n in [3, 7] {
        mock.route(
            Match::FirstUserContains(format!("item-{n:03}.")),
            vec![Reply::text("not json"); 3],
        );
    }
    routes(&mock, ITEMS, 1, Duration::ZERO);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let ingress = fleet.restate.ingress_url();
    let engine = ["--engine", "restate", "--restate-url", &ingress];
    let mut args = vec!["workflow", "run", "label.yaml"];
    args.extend(engine);
    let out = cadre_env(dir.path(), &[], &args).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let first = results(dir.path());
    let failed: Vec<&String> = first
        .iter()
        .filter(|(_, r)| r["outcome"] == "failed: invalid answer")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(failed, ["i003", "i007"], "{first:?}");
    let sent_before = sent_per_item(&mock);

    let id = run_id(dir.path());
    let out = cadre_env(dir.path(), &[], &["workflow", "retry", &id, "--failed"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = results(dir.path());
    all_completed(&after, ITEMS);
    // A fresh call each: the idempotency key of the failed one would hand its failure back.
    assert!(after["i003"]["call"].as_str().unwrap().ends_with("~1"));
    let sent = sent_per_item(&mock);
    let rerun: Vec<usize> = (0..ITEMS).filter(|n| sent[n] != sent_before[n]).collect();
    assert_eq!(rerun, [3, 7], "only the failed items ran again");
    // The usage table counts both attempts of a retried item: three turns, then one.
    let summary = run_dir(dir.path()).unwrap().join("summary.json");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
    let agent = &after["i003"]["agent"];
    let record = summary["usage"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == *agent)
        .unwrap_or_else(|| panic!("no record of {agent}: {summary}"));
    assert_eq!(record["turns"], 4, "{record}");

    // A fix round is refused on the engine, saying what does run.
    let out = cadre_env(
        dir.path(),
        &[],
        &[
            "workflow", "retry", &id, "--item", "i003", "--prompt", "again",
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("--failed"), "{}", out.stderr);
    assert_eq!(sent_per_item(&mock), sent, "the refusal sent nothing");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn an_invocation_the_worker_fails_is_the_items_failed_attempt_and_a_retry_takes_a_new_key() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 3;
    let dir = project(ITEMS, 2);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 1, Duration::ZERO);
    // Workers with no folder to work in fail every call outside git (a lasting error).
    let fleet = Fleet::start(&mock.uri(), &[]).await;
    let ingress = fleet.restate.ingress_url();
    let out = cadre_env(
        dir.path(),
        &[],
        &[
            "workflow",
            "run",
            "label.yaml",
            "--engine",
            "restate",
            "--restate-url",
            &ingress,
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let first = results(dir.path());
    assert_eq!(first.len(), ITEMS);
    for r in first.values() {
        assert_eq!(r["outcome"], "failed: stopped", "{r}");
        let error = r["error"].as_str().unwrap();
        assert!(error.contains("the engine failed its invocation"), "{r}");
        assert_eq!(r["attempts"], 1, "{r}");
    }

    // Retried, each item is a fresh call (`~1`), not the stored failure of its first key.
    let id = run_id(dir.path());
    let out = cadre_env(dir.path(), &[], &["workflow", "retry", &id, "--failed"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    for r in results(dir.path()).values() {
        assert!(r["call"].as_str().unwrap().ends_with("~1"), "{r}");
        assert_eq!(r["attempts"], 2, "{r}");
    }
    assert!(mock.requests().is_empty(), "no item reached the model");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_retry_of_the_failed_items_killed_midway_is_finished_by_a_resume() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 8;
    // One at once: when the retry is killed, item 6 has not been submitted again.
    let dir = project(ITEMS, 1);
    let mock = MockServer::start().await;
    for n in [3, 6] {
        mock.route(
            Match::FirstUserContains(format!("item-{n:03}.")),
            vec![Reply::text("not json"); 3],
        );
    }
    routes(&mock, ITEMS, 1, Duration::ZERO);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let ingress = fleet.restate.ingress_url();
    let out = cadre_env(
        dir.path(),
        &[],
        &[
            "workflow",
            "run",
            "label.yaml",
            "--engine",
            "restate",
            "--restate-url",
            &ingress,
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);

    let held = hold(&mock, 3..4);
    let id = run_id(dir.path());
    let home = tempfile::tempdir().unwrap();
    let mut retry = cadre_command(
        dir.path(),
        &mock.uri(),
        home.path(),
        &["workflow", "retry", &id, "--failed"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    assert!(held.wait_for(1, Duration::from_secs(120)).await);
    retry.kill().unwrap();
    retry.wait().unwrap();
    held.open();

    let out = cadre_env(dir.path(), &[], &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = results(dir.path());
    all_completed(&after, ITEMS);
    for key in ["i003", "i006"] {
        assert!(
            after[key]["call"].as_str().unwrap().ends_with("~1"),
            "{after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn ctrl_c_cancels_the_items_on_the_engine_exits_130_and_resume_completes_the_rest() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 20;
    const AT_ONCE: usize = 4;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 2, Duration::ZERO);
    let held = hold(&mock, 8..8 + AT_ONCE);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    assert!(held.wait_for(AT_ONCE, Duration::from_secs(120)).await);
    signal(&client, nix::sys::signal::Signal::SIGINT);
    // A running step is not cut off: the held requests end, and nothing comes after them.
    held.open();
    let out = finish(client).await;
    assert_eq!(out.code, 130, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("stopping every item"), "{}", out.stderr);
    let sent = sent_per_item(&mock);
    assert!(
        sent.keys().all(|&n| n < 8 + AT_ONCE),
        "an item was submitted after Ctrl-C: {sent:?}"
    );
    let first = results(dir.path());
    assert_eq!(first.len(), ITEMS, "one line per item");
    for n in 8 + AT_ONCE..ITEMS {
        assert_eq!(first[&format!("i{n:03}")]["outcome"], "cancelled");
    }

    let out = cadre_env(dir.path(), &[], &["resume"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    all_completed(&results(dir.path()), ITEMS);
    let after = sent_per_item(&mock);
    for (key, r) in first.iter().filter(|(_, r)| r["outcome"] == "completed") {
        let n: usize = key[1..].parse().unwrap();
        assert_eq!(after[&n], 1, "completed item {n} ({r}) was sent again");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn sighup_leaves_the_items_running_on_the_engine_exits_129_and_resume_attaches_to_them() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 12;
    const AT_ONCE: usize = 4;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 2, Duration::ZERO);
    let held = hold(&mock, 4..4 + AT_ONCE);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    assert!(held.wait_for(AT_ONCE, Duration::from_secs(120)).await);
    signal(&client, nix::sys::signal::Signal::SIGHUP);
    let out = finish(client).await;
    assert_eq!(out.code, 129, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("cadre resume"), "{}", out.stderr);
    // The held items are still at work there: nothing cancelled them.
    let id = run_id(dir.path());
    assert_eq!(at_work(&fleet, &id, 4..4 + AT_ONCE).await.len(), AT_ONCE);

    held.open();
    let out = cadre_env(dir.path(), &[], &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = results(dir.path());
    all_completed(&after, ITEMS);
    for r in after.values() {
        assert!(
            !r["call"].as_str().unwrap().contains('~'),
            "a new attempt: {r}"
        );
    }
    let sent = sent_per_item(&mock);
    assert!(
        sent.values().all(|&n| n == 1),
        "an item was sent again: {sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn a_line_inserted_above_before_a_resume_takes_no_finished_items_agent() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 6;
    const AT_ONCE: usize = 2;
    let dir = project(ITEMS, AT_ONCE);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS + 1, 2, Duration::ZERO);
    let held = hold(&mock, 2..2 + AT_ONCE);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(dir.path(), &fleet, home.path(), &mock.uri(), &[]);
    assert!(held.wait_for(AT_ONCE, Duration::from_secs(120)).await);
    signal(&client, nix::sys::signal::Signal::SIGINT);
    held.open();
    let out = finish(client).await;
    assert_eq!(out.code, 130, "{}{}", out.stdout, out.stderr);

    // A new item at the top of the input: the first item's place, not its agent.
    let input = dir.path().join("items.jsonl");
    let new = json!({"id": "new", "title": format!("item-{ITEMS:03}")}).to_string();
    let text = std::fs::read_to_string(&input).unwrap();
    write_file(&input, &format!("{new}\n{text}"));
    let id = run_id(dir.path());
    let out = cadre_env(dir.path(), &[], &["resume", &id]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = results(dir.path());
    assert_eq!(after.len(), ITEMS + 1, "{after:?}");
    let mut agents = BTreeMap::new();
    for (key, r) in &after {
        assert_eq!(r["outcome"], "completed", "{r}");
        let agent = r["agent"].as_str().unwrap().to_owned();
        if let Some(other) = agents.insert(agent.clone(), key.clone()) {
            panic!("{key} and {other} are both {agent}");
        }
    }
}

/// The model slots of run `id` as its `CadreRun` object keeps them (`used`, `queue`).
async fn slots(fleet: &Fleet, id: &str) -> Value {
    let query = format!(
        "SELECT value_utf8 FROM state WHERE service_name = 'CadreRun' AND service_key = '{id}' AND key = 'slots'"
    );
    let rows: Value = reqwest::Client::new()
        .post(format!("{}query", fleet.restate.admin_url()))
        .header("accept", "application/json")
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    rows["rows"][0]["value_utf8"]
        .as_str()
        .map_or(Value::Null, |v| serde_json::from_str(v).unwrap())
}

/// Run `id`'s slots once `done` holds of them (or as they are after a minute).
async fn slots_once(fleet: &Fleet, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut now = slots(fleet, id).await;
    for _ in 0..600 {
        if done(&now) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = slots(fleet, id).await;
    }
    now
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn an_item_cancelled_while_it_waits_for_a_model_slot_leaves_none_taken() {
    if !engine_or_skip() {
        return;
    }
    let dir = project(2, 2);
    let mock = MockServer::start().await;
    routes(&mock, 2, 2, Duration::ZERO);
    // One slot for two items: the first to get it is held, the other waits in line.
    let held = hold(&mock, 0..2);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    let client = spawn_run(
        dir.path(),
        &fleet,
        home.path(),
        &mock.uri(),
        &["--max-parallel", "1"],
    );
    assert!(held.wait_for(1, Duration::from_secs(120)).await);
    let id = run_id(dir.path());
    let waiting = |s: &Value| s["queue"].as_array().is_some_and(|q| q.len() == 1);
    let before = slots_once(&fleet, &id, waiting).await;
    assert!(waiting(&before), "{before}");
    signal(&client, nix::sys::signal::Signal::SIGINT);
    held.open();
    let out = finish(client).await;
    assert_eq!(out.code, 130, "{}{}", out.stdout, out.stderr);
    // The held item gave its slot back, and the one that waited took none.
    let free = |s: &Value| s["used"] == 0 && s["queue"].as_array().is_some_and(Vec::is_empty);
    let after = slots_once(&fleet, &id, free).await;
    assert!(free(&after), "a slot was left taken: {after}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn the_workflows_budget_is_one_for_all_its_items_on_the_engine() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 10;
    let dir = project(ITEMS, 1);
    // 25 tokens an item: the budget of 100 is spent by the fourth.
    let file = workflow_file(1) + "budget: {tokens: 100}\n";
    write_file(&dir.path().join("label.yaml"), &file);
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 1, Duration::ZERO);
    let fleet = Fleet::in_folder(&mock.uri(), dir.path()).await;
    let ingress = fleet.restate.ingress_url();
    let args = [
        "workflow",
        "run",
        "label.yaml",
        "--engine",
        "restate",
        "--restate-url",
        &ingress,
    ];
    let out = cadre_env(dir.path(), &[], &args).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let results = results(dir.path());
    let outcomes: Vec<&str> = (0..ITEMS)
        .map(|n| results[&format!("i{n:03}")]["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [["completed"; 4].as_slice(), ["budget"; 6].as_slice()].concat(),
        "{results:?}"
    );
    assert_eq!(
        sent_per_item(&mock).len(),
        4,
        "no request after the budget was spent"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn items_whose_worker_cannot_be_reached_are_said_to_wait_and_go_on_when_it_is_back() {
    if !engine_or_skip() {
        return;
    }
    const ITEMS: usize = 3;
    let dir = project(ITEMS, 2);
    let home = tempfile::tempdir().unwrap();
    let folder = dir.path().to_str().unwrap().to_owned();
    let mock = MockServer::start().await;
    routes(&mock, ITEMS, 1, Duration::ZERO);
    let restate = RestateServer::start().await.unwrap();
    let mut worker = WorkerProc::start("gone", &mock.uri(), home.path(), &["--workspace", &folder]);
    let addr = worker.addr;
    restate.register(&format!("http://{addr}/")).await.unwrap();
    worker.kill();
    let ingress = restate.ingress_url();
    let admin = restate.admin_url();
    let args = [
        "workflow",
        "run",
        "label.yaml",
        "--engine",
        "restate",
        "--restate-url",
        &ingress,
        "--restate-admin-url",
        &admin,
    ];
    let mut client = cadre_command(dir.path(), &mock.uri(), home.path(), &args)
        .env_remove("ANTHROPIC_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = gather_stderr(&mut client);
    let named = format!("cadre: waiting: Restate cannot reach http://{addr}/ (");
    wait_for("the client to say why the items wait", || {
        said.lock().unwrap().iter().any(|l| l.starts_with(&named))
    })
    .await;
    // The worker comes back on the same address: the items go on and end.
    let _back = WorkerProc::start_on(
        &addr.to_string(),
        "back",
        &mock.uri(),
        home.path(),
        &["--workspace", &folder],
    );
    let out = finish(client).await;
    let said = said.lock().unwrap().join("\n");
    assert_eq!(out.code, 0, "{}\n{said}", out.stdout);
    all_completed(&results(dir.path()), ITEMS);
}
