use super::*;
use cadre_testkit::prereq;

/// A primary agent type that leads a team: listing the team tools makes its run a team run.
const LEAD: &str = "name: lead\ndescription: Leads a team.\nmode: primary\nmodel: inherit\n\
tools: [Task, SendMessage, TaskCreate, TaskUpdate, TaskList, TaskGet]\nprompt: You lead a team.\n";

/// The lead's one response that starts the members alpha and beta.
fn start_alpha_and_beta() -> Reply {
    let member = |name: &str, job: &str| {
        json!({"description": job, "prompt": format!("{job}: do it"), "subagent_type": "code",
               "name": name})
    };
    Reply::tool_uses(vec![
        ("t1", "Task", member("alpha", "Job alpha")),
        ("t2", "Task", member("beta", "Job beta")),
    ])
}

fn send(id: &str, to: &str, text: &str) -> Reply {
    Reply::tool_use(id, "SendMessage", json!({"to": to, "message": text}))
}

/// The lead's agent file in `dir`, and the arguments that run it on `task`.
fn lead_args(dir: &Path, task: &str) -> Vec<String> {
    let agents = dir.join("team-agents");
    write_file(&agents.join("lead.yaml"), LEAD);
    [
        "run",
        "--agents-dir",
        agents.to_str().unwrap(),
        "--agent",
        "lead",
        task,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// The lead makes two tasks (the second blocked by the first) and starts alpha and beta;
/// alpha claims task 1, sends beta a two-line message and completes the task; beta answers
/// it with one message of its own.
fn team_routes(server: &MockServer) {
    server.allow_unused_replies();
    // alpha and beta start from one turn of the lead, in either order: their first requests
    // wait for each other, so alpha writes to beta only once beta is a member.
    server.hold_until_waiting(
        Match::Custom(std::sync::Arc::new(|body| {
            let messages = body["messages"].as_array().map_or(0, Vec::len);
            let first = content_text(Some(&body["messages"][0]["content"]));
            messages == 1 && (first.contains("Job alpha") || first.contains("Job beta"))
        })),
        2,
        std::time::Duration::from_secs(60),
    );
    server.route(
        Match::FirstUserContains("LEAD".into()),
        [
            Reply::tool_use(
                "c1",
                "TaskCreate",
                json!({"subject": "Write the parser", "description": "parse it"}),
            ),
            Reply::tool_use(
                "c2",
                "TaskCreate",
                json!({"subject": "Review the parser", "blocked_by": [1]}),
            ),
            start_alpha_and_beta(),
        ]
        .into_iter()
        .chain(vec![Reply::text("lead done"); 12])
        .collect(),
    );
    server.route(
        Match::FirstUserContains("Job alpha".into()),
        [
            Reply::tool_use(
                "u1",
                "TaskUpdate",
                json!({"taskId": 1, "status": "in_progress"}),
            ),
            send("s1", "beta", "ping 1\nthe second line"),
            Reply::tool_use(
                "u2",
                "TaskUpdate",
                json!({"taskId": 1, "status": "completed"}),
            ),
            Reply::text("alpha finished"),
        ]
        .into_iter()
        .chain(vec![Reply::text("alpha again"); 6])
        .collect(),
    );
    server.route(
        Match::FirstUserContains("Job beta".into()),
        [Reply::text("beta ready"), send("s2", "alpha", "pong 1")]
            .into_iter()
            .chain(vec![Reply::text("beta waits"); 6])
            .collect(),
    );
}

/// The ids of the runs in the workspace `ws`.
fn run_ids(ws: &Path) -> Vec<String> {
    std::fs::read_dir(ws.join(".cadre/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// A finished team run in a fresh workspace, in text mode: its id and its stderr.
async fn team_run() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    team_routes(&server);
    let args = lead_args(dir.path(), "LEAD the team");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &args).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("lead done"), "{}", out.stdout);
    let ids = run_ids(dir.path());
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids[0].clone();
    (dir, id, out.stderr)
}

/// The member name → agent path table `cadre runs show` prints.
fn member_paths(show: &str) -> Vec<(String, String)> {
    show.lines()
        .skip_while(|l| !l.starts_with("team members"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].to_owned(), cols[2].to_owned())
        })
        .collect()
}

/// The row of `text` whose first column (after indentation) is `first`.
fn row_of<'a>(text: &'a str, first: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{text}"))
}

#[tokio::test]
async fn runs_show_lists_a_team_runs_messages_tasks_and_usage_per_member() {
    let (dir, id, stderr) = team_run().await;
    let ws = dir.path();
    // Without a live block, messages and task changes are log lines.
    assert!(
        stderr.contains("alpha → beta #1: ping 1"),
        "no message line:\n{stderr}"
    );
    assert!(stderr.contains("beta → alpha #1: pong 1"), "{stderr}");
    assert!(
        stderr.contains("task #1 in_progress (alpha): Write the parser"),
        "{stderr}"
    );
    assert!(
        stderr.contains("task #1 completed (alpha): Write the parser"),
        "{stderr}"
    );

    let show = cadre_env(ws, &[], &["runs", "show", &id]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    let text = &show.stdout;
    let members = member_paths(text);
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "lead"], "{text}");
    assert!(
        row_of(text, "alpha").ends_with(" lead"),
        "started by the lead: {text}"
    );
    let path_of = |name: &str| members.iter().find(|(n, _)| n == name).unwrap().1.clone();
    assert!(path_of("alpha").starts_with("lead/code#"), "{text}");
    // The agent tree names each member too.
    let alpha_name = path_of("alpha").rsplit('/').next().unwrap().to_owned();
    assert!(text.contains(&format!("  {alpha_name} (alpha) ")), "{text}");

    // Each message: sender → recipient, its number, delivered, its first line only.
    let ping = text
        .lines()
        .find(|l| l.contains("alpha → beta"))
        .unwrap_or_else(|| panic!("no ping:\n{text}"));
    for want in ["#1", "delivered", "ping 1"] {
        assert!(ping.contains(want), "{want}: {ping}");
    }
    assert!(!text.contains("the second line"), "{text}");
    assert!(!ping.contains("undelivered"), "{ping}");
    let pong = text.lines().find(|l| l.contains("beta → alpha")).unwrap();
    assert!(pong.contains("#1") && pong.contains("delivered") && pong.contains("pong 1"));
    // beta was woken by a message: its starter was told when it went idle again.
    let notice = text.lines().find(|l| l.contains("beta → lead")).unwrap();
    assert!(notice.contains("[idle notice]"), "{notice}");

    // The task list: id, status, owner, blockers, subject.
    let t1 = row_of(text, "#1");
    let cols: Vec<&str> = t1.split_whitespace().collect();
    assert_eq!(cols[..3], ["#1", "completed", "alpha"], "{t1}");
    assert!(t1.ends_with("Write the parser"), "{t1}");
    let t2 = row_of(text, "#2");
    let cols: Vec<&str> = t2.split_whitespace().collect();
    assert_eq!(cols[..4], ["#2", "pending", "-", "#1"], "{t2}");
    assert!(t2.ends_with("Review the parser"), "{t2}");

    // The usage table counts every member on a row of its own, with its own turns.
    let table: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.starts_with("agent "))
        .collect();
    // Members are named by their names, not their paths.
    assert!(
        !table.iter().any(|l| l.starts_with("code#")),
        "a member named by its path: {stderr}"
    );
    let turns = |name: &str| -> u32 {
        let row = table
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no usage row for {name}:\n{stderr}"));
        row.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    // alpha: two task updates, a send and its answer; beta: its answer, a send, an answer.
    assert!(turns("alpha") >= 4, "{stderr}");
    assert!(turns("beta") >= 3, "{stderr}");
    assert!(turns("lead") >= 4, "{stderr}");
    assert!(
        table.iter().any(|l| l.starts_with("code ×2")),
        "members of one type add up: {stderr}"
    );

    // A message the run never delivered (its delivery cut from the journal) says so.
    let copy = super::runs::copy_run(ws, &id);
    let journal = copy
        .path()
        .join(".cadre/runs")
        .join(&id)
        .join("journal.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        // (A delivery names its message, whose text only its send carries.)
        .filter(|l| {
            !(l.contains("\"step\":\"delivered\"")
                && l.contains("\"from\":\"beta\",\"to\":\"alpha\",\"seq\":1,"))
        })
        .map(str::to_owned)
        .collect();
    std::fs::write(&journal, kept.join("\n") + "\n").unwrap();
    let cut = cadre_env(copy.path(), &[], &["runs", "show", &id]).await;
    assert_eq!(cut.code, 0, "{}", cut.stderr);
    let pong = cut
        .stdout
        .lines()
        .find(|l| l.contains("beta → alpha"))
        .unwrap();
    assert!(pong.contains("undelivered"), "{pong}");
    let ping = cut
        .stdout
        .lines()
        .find(|l| l.contains("alpha → beta"))
        .unwrap();
    assert!(!ping.contains("undelivered"), "{ping}");
    // On the page its arrow is marked so, and reaches its recipient when it was sent.
    let out = tempfile::tempdir().unwrap();
    let html = team_page(copy.path(), &id, out.path()).await;
    let undelivered: Vec<&str> = html
        .split("<i class=\"msg undelivered\"")
        .skip(1)
        .map(|s| &s[..s.find('>').unwrap()])
        .collect();
    assert_eq!(undelivered.len(), 1, "{html}");
    let arrow = undelivered[0];
    assert_eq!(attr(arrow, "data-sent"), attr(arrow, "data-got"));
    assert!(
        attr(arrow, "title").starts_with("beta → alpha #1"),
        "{arrow}"
    );
}

#[tokio::test]
async fn runs_without_a_team_show_no_team() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(Match::Any, vec![Reply::text("plain answer")]);
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", "plain task"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let show = cadre_env(dir.path(), &[], &["runs", "show", "latest"]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    for absent in ["team members", "messages", "tasks"] {
        assert!(!show.stdout.contains(absent), "{absent}:\n{}", show.stdout);
    }
    assert!(show.stdout.contains("plain answer"), "{}", show.stdout);
}

#[tokio::test]
async fn stream_json_carries_message_delivery_idle_and_task_events() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    team_routes(&server);
    let mut args = lead_args(dir.path(), "LEAD the team");
    args.splice(
        1..1,
        ["--output-format".to_owned(), "stream-json".to_owned()],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cadre(dir.path(), &server.uri(), Some("k"), &args).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == kind).collect() };
    let ping = of("message")
        .into_iter()
        .find(|e| e["from"] == "alpha" && e["to"] == "beta")
        .unwrap_or_else(|| panic!("no message event:\n{}", out.stdout));
    assert_eq!(ping["seq"], 1);
    assert_eq!(ping["text"], "ping 1\nthe second line");
    assert!(ping["agent"].as_str().unwrap().starts_with("lead/code#"));
    assert!(ping.get("notice").is_none(), "{ping}");
    let notice = of("message")
        .into_iter()
        .find(|e| e["from"] == "beta" && e["to"] == "lead")
        .unwrap();
    assert_eq!(notice["notice"], true);
    // Every message sent was delivered, and said so once.
    let delivered = of("delivered");
    assert_eq!(delivered.len(), of("message").len(), "{}", out.stdout);
    let beta = of("started")
        .into_iter()
        .find(|e| e["description"] == "Job beta")
        .unwrap()["agent"]
        .clone();
    let to_beta: Vec<&&Value> = delivered.iter().filter(|e| e["agent"] == beta).collect();
    assert_eq!(to_beta.len(), 1, "{}", out.stdout);
    assert_eq!(
        (&to_beta[0]["from"], &to_beta[0]["seq"]),
        (&json!("alpha"), &json!(1))
    );
    assert!(!of("idle").is_empty(), "{}", out.stdout);
    let tasks: Vec<(u64, &str, Option<&str>)> = of("task_changed")
        .iter()
        .map(|e| {
            (
                e["id"].as_u64().unwrap(),
                e["status"].as_str().unwrap(),
                e["owner"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        tasks,
        [
            (1, "pending", None),
            (2, "pending", None),
            (1, "in_progress", Some("alpha")),
            (1, "completed", Some("alpha")),
        ]
    );
    assert_eq!(answer_of(&out.stdout), "lead done");
}

/// The team run's page, written by `cadre runs show ID --html` into `out`.
async fn team_page(ws: &Path, id: &str, out: &Path) -> String {
    let file = out.join("team.html");
    let res = cadre_env(
        ws,
        &[],
        &["runs", "show", id, "--html", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(res.code, 0, "{}", res.stderr);
    std::fs::read_to_string(&file).unwrap()
}

/// The value of attribute `name` in the element `tag` of `html`.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let start = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
    &tag[start..start + tag[start..].find('"').unwrap()]
}

#[tokio::test]
async fn the_html_timeline_holds_an_arrow_per_message() {
    let (dir, id, _) = team_run().await;
    let out = tempfile::tempdir().unwrap();
    let html = team_page(dir.path(), &id, out.path()).await;
    let msgs: Vec<&str> = html
        .split("<i class=\"msg ")
        .skip(1)
        .map(|s| &s[..s.find('>').unwrap()])
        .collect();
    let show = cadre_env(dir.path(), &[], &["runs", "show", &id]).await;
    let members = member_paths(&show.stdout);
    let path_of = |name: &str| members.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let sent = show
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("messages ("))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .count();
    assert!(sent >= 3, "{}", show.stdout);
    assert_eq!(msgs.len(), sent, "one arrow per message:\n{html}");
    let ping = msgs
        .iter()
        .find(|m| attr(m, "title").starts_with("alpha → beta #1"))
        .unwrap_or_else(|| panic!("no arrow for the ping:\n{html}"));
    assert!(ping.starts_with("delivered"), "{ping}");
    assert_eq!(attr(ping, "data-from"), path_of("alpha"));
    assert_eq!(attr(ping, "data-to"), path_of("beta"));
    // Sent before it was given, both inside the timeline.
    let at = |k: &str| attr(ping, k).parse::<f64>().unwrap();
    assert!(0.0 <= at("data-sent") && at("data-sent") <= at("data-got"));
    assert!(at("data-got") <= 100.0);
    assert!(attr(ping, "data-detail").contains("the second line"));
    assert!(msgs.iter().any(|m| m.starts_with("notice")), "{html}");
    // The lanes carry the member names.
    assert!(
        html.contains("<span class=\"member\">· alpha</span>"),
        "{html}"
    );
    for bad in ["<script src", "<link", "@import", "url("] {
        assert!(!html.contains(bad), "the page references {bad:?}");
    }
    assert!(
        !html.to_ascii_lowercase().contains("http"),
        "the page names a URL"
    );
}

/// In a real browser the page's script draws each message as an arrow between lanes.
#[tokio::test]
#[cfg_attr(
    not(has_chromium),
    ignore = "needs Chromium: apt-get install chromium (as .ci/run does)"
)]
async fn the_html_arrows_are_drawn_in_a_browser() {
    let Some(chromium) = prereq::find_or_skip(&prereq::CHROMIUM, "apt-get install chromium") else {
        return;
    };
    let (dir, id, _) = team_run().await;
    let out = tempfile::tempdir().unwrap();
    let html = team_page(dir.path(), &id, out.path()).await;
    let msgs = html.matches("<i class=\"msg ").count();
    let dom = super::runs::dump_dom(&chromium, &out.path().join("team.html")).await;
    assert!(dom.contains("data-ready=\"ok\""), "{dom}");
    assert_eq!(dom.matches("<g class=\"arrow ").count(), msgs, "{dom}");
    // Each arrow is a line with a head, from one lane to another (not flat, not nowhere).
    let shafts: Vec<&str> = dom
        .split("<line ")
        .skip(1)
        .filter(|l| l.contains("class=\"shaft\""))
        .collect();
    assert_eq!(shafts.len(), msgs, "{dom}");
    for s in shafts {
        let n = |k: &str| attr(s, k).parse::<f64>().unwrap();
        assert!(
            (n("y1") - n("y2")).abs() > 10.0,
            "an arrow within one lane: {s}"
        );
        assert!(n("x1").is_finite() && n("x2") > 0.0, "{s}");
    }
}

/// On a terminal the live block shows each member by name and type, working or waiting,
/// with the messages waiting for it.
#[tokio::test]
async fn the_live_block_shows_members_their_state_and_unread_messages() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    server.route(
        Match::FirstUserContains("LEAD".into()),
        std::iter::once(start_alpha_and_beta())
            .chain(vec![Reply::text("LEAD-DONE"); 8])
            .collect(),
    );
    server.route(
        Match::FirstUserContains("Job alpha".into()),
        [send("s1", "beta", "one"), send("s2", "beta", "two")]
            .into_iter()
            .chain(vec![Reply::text("alpha finished"); 6])
            .collect(),
    );
    server.route(
        Match::FirstUserContains("Job beta".into()),
        vec![Reply::text("beta done"); 6],
    );
    // beta's first request is held: it stays at work while alpha's messages pile up.
    // alpha starts only once beta is at work (on the roster), so both messages count.
    let beta_gate = server.gate(Match::FirstUserContains("Job beta".into()));
    let alpha_gate = server.gate(Match::FirstUserContains("Job alpha".into()));
    let args = lead_args(dir.path(), "LEAD the team");
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("stty cols 120 rows 40; exec \"$0\" \"$@\"")
        .arg(assert_cmd::cargo::cargo_bin("cadre"))
        .args(&args)
        .current_dir(dir.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("TERM", "xterm")
        .env_remove("COLUMNS")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG");
    let shown = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        let start = std::time::Instant::now();
        while beta_gate.waiting() == 0 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "beta never asked"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        alpha_gate.open();
        // The session hands back each byte as a char, so `·` is matched as any two.
        let (mut seen, _) = p.exp_regex(r"alpha \(code\) \S+ waiting").unwrap();
        let (before, found) = p
            .exp_regex(r"beta +\(code\) \S+ working \S+ 2 unread")
            .unwrap();
        seen.push_str(&before);
        seen.push_str(&found);
        beta_gate.open();
        seen.push_str(&p.exp_string("LEAD-DONE").unwrap());
        seen.push_str(&p.exp_eof().unwrap());
        seen
    })
    .await
    .unwrap();
    let bytes: Vec<u8> = shown
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect();
    let shown = String::from_utf8_lossy(&bytes);
    assert!(shown.contains("alpha (code) · waiting"), "{shown}");
    // The primary agent is a member too, shown by its name and type.
    // Names make one column (alpha's is the longest), so the states line up.
    assert!(shown.contains("lead  (lead) · "), "{shown}");
    assert!(shown.contains("beta  (code) · "), "{shown}");
}

/// On a terminal a `Task` call that fails (an unknown type) starts no agent, so no row
/// tells of it: a line of its own does.
#[tokio::test]
async fn a_failed_task_call_leaves_a_line_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![
            Reply::tool_use(
                "t1",
                "Task",
                json!({"description": "Job ghost", "prompt": "Job ghost", "subagent_type": "no-such-type"}),
            ),
            Reply::text("LEAD-DONE"),
        ],
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("stty cols 120 rows 40; exec \"$0\" \"$@\"")
        .arg(assert_cmd::cargo::cargo_bin("cadre"))
        .args(["run", "LEAD go"])
        .current_dir(dir.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("TERM", "xterm")
        .env_remove("COLUMNS")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG");
    let shown = tokio::task::spawn_blocking(move || {
        let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
        let mut seen = p.exp_string("LEAD-DONE").unwrap();
        seen.push_str(&p.exp_eof().unwrap());
        seen
    })
    .await
    .unwrap();
    assert!(
        shown.contains("main Task failed: ") && shown.contains("no-such-type"),
        "{shown}"
    );
}
