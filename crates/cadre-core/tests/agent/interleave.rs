//! The team protocol under the interleavings that matter, driven step by step: the mock
//! holds each request at a gate until the test opens it, so a message reaches a member
//! exactly where a case puts it (while it waits, during its request, with its tool
//! results, after it ended) and the member's request then ends exactly as the case says
//! (an answer, a model error, a refusal, a cut typed answer, an invalid one, a stop hook's
//! stop, `CloseMember`, a cancel, its turn limit, the run's budget). Each case checks that
//! the run ends, every message is delivered once or returned to its sender, no name runs
//! twice, every started agent finishes once, and that a run resumed from every prefix of
//! the journal keeps the team that prefix holds and ends with the same guarantees.

use super::*;
use cadre_core::internal::read_steps;
use cadre_core::internal::TeamState;
use cadre_core::vocab::Step;
use cadre_core::JournaledRun;
use cadre_core::TeamLimits;
use cadre_core::{AgentSpec, Hooks, Mode, Orchestrator};
use cadre_model::StopReason;
use cadre_testkit::hooks::script;
use cadre_testkit::Gate;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use tokio::sync::watch;

/// How long any one wait may take before the case fails: generous, since the machine may
/// be loaded; a run that hangs fails here instead of hanging the suite.
const PATIENCE: Duration = Duration::from_secs(60);

/// How the member's request ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Answer,
    ModelError,
    Refusal,
    Cut,
    Invalid,
    StopHook,
    Close,
    Cancel,
    MaxTurns,
    Budget,
}

/// Where the message reaches the member, against the request that ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// It wakes the waiting member: the ending request carries it.
    Idle,
    /// It is sent while the ending request is in flight.
    During,
    /// It is sent during the request before, and goes with that request's tool results.
    WithResults,
    /// It is sent after the ending request was answered.
    After,
}

const ARRIVALS: [Arrival; 4] = [
    Arrival::Idle,
    Arrival::During,
    Arrival::WithResults,
    Arrival::After,
];

/// The member's type: a worker with a file tool, under `max_turns`.
fn worker(max_turns: u32) -> AgentSpec {
    AgentSpec::builder("worker")
        .description("Works.")
        .mode(Mode::Subagent)
        .tools(["list_files"])
        .prompt("You work.")
        .max_turns(max_turns)
        .build()
}

/// Events seen so far, with a way to wait for one.
#[derive(Clone)]
struct Seen {
    events: Arc<Mutex<Vec<Event>>>,
    count: watch::Sender<usize>,
}

impl Seen {
    fn new() -> Self {
        Self {
            events: Arc::default(),
            count: watch::channel(0).0,
        }
    }

    fn push(&self, e: Event) {
        let n = {
            let mut events = self.events.lock().unwrap();
            events.push(e);
            events.len()
        };
        self.count.send_replace(n);
    }

    fn all(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until `what` holds of the events seen; fails the test after [`PATIENCE`].
    async fn until(&self, about: &str, what: impl Fn(&[Event]) -> bool) {
        let mut rx = self.count.subscribe();
        let waited = tokio::time::timeout(PATIENCE, async {
            loop {
                if what(&self.events.lock().unwrap()) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(waited.is_ok(), "waited in vain for {about}");
    }
}

fn sent(events: &[Event], text: &str) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Message { text: t, .. } if t.contains(text)))
}

fn bob_ended(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Finished { agent, .. } if agent.as_str().contains("worker")))
}

/// Whether bob went idle after a message was given to him: he answered it. (A message that
/// reaches him before his first answer is given without his ever waiting, so his idle
/// times alone do not tell; under load that interleaving is common.)
fn bob_idle_after_a_delivery(events: &[Event]) -> bool {
    let is_bob = |agent: &cadre_core::AgentPath| agent.as_str().contains("worker");
    events
        .iter()
        .position(|e| matches!(e, Event::Delivered { agent, .. } if is_bob(agent)))
        .is_some_and(|at| {
            events[at..]
                .iter()
                .any(|e| matches!(e, Event::Idle { agent } if is_bob(agent)))
        })
}

async fn held(gate: &Gate, what: &str) {
    assert!(
        gate.wait_for(1, PATIENCE).await,
        "no request of {what} reached its gate"
    );
}

/// Matches the lead's requests whose last user message holds `last`.
fn lead(last: &str) -> Match {
    let last = last.to_owned();
    Match::Custom(Arc::new(move |b: &Value| {
        b["messages"][0].to_string().contains("LEAD go")
            && b["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m.to_string().contains(&last))
    }))
}

/// Matches bob's requests whose last user message holds `last`.
fn bob(last: &str) -> Match {
    let last = last.to_owned();
    Match::Custom(Arc::new(move |b: &Value| {
        b["messages"][0].to_string().contains("BOB job")
            && b["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m.to_string().contains(&last))
    }))
}

fn send(id: &str, to: &str, text: &str) -> Reply {
    Reply::tool_use(id, "SendMessage", json!({"to": to, "message": text}))
}

fn close(id: &str, name: &str) -> Reply {
    Reply::tool_use(id, "CloseMember", json!({"name": name}))
}

fn list(id: &str) -> Reply {
    Reply::tool_use(id, "ListMembers", json!({}))
}

/// A `Task` call starting the member `name`, typed when `typed`.
fn start(id: &str, name: &str, typed: bool) -> (String, Value) {
    let mut input = json!({"description": format!("start {name}"), "prompt": "BOB job: help",
                           "subagent_type": "worker", "name": name});
    if typed {
        input["output_schema"] = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
    }
    (id.to_owned(), input)
}

fn bob_answer(typed: bool) -> Reply {
    Reply::text(if typed { "{\"ok\": true}" } else { "bob ok" })
}

/// Answers that keep any run going to its end: the lead finishes, members answer.
fn defaults(server: &MockServer, typed: bool) {
    server.route(
        Match::FirstUserContains("LEAD go".into()),
        vec![Reply::text("LEAD-DONE"); 40],
    );
    server.route(
        Match::FirstUserContains("BOB job".into()),
        vec![bob_answer(typed); 40],
    );
    server.route(
        Match::FirstUserContains("X job".into()),
        vec![Reply::text("x ok"); 40],
    );
}

/// An orchestrator of a team run in `dir` on `server`, its events going to `seen`.
fn team_run(
    server: &MockServer,
    dir: &Path,
    max_turns: u32,
    hooks: Option<Hooks>,
    budget: Option<u64>,
    limits: TeamLimits,
    seen: &Seen,
) -> Arc<Orchestrator> {
    let sink = seen.clone();
    let mut builder = mock_builder(server, dir)
        .runs_dir(dir.join(".cadre/runs"))
        .agent(worker(max_turns))
        .team(limits)
        .on_event(move |e| sink.push(e));
    if let Some(hooks) = hooks {
        builder = builder.hooks(hooks);
    }
    if let Some(tokens) = budget {
        builder = builder.budget_tokens(tokens);
    }
    builder.build().unwrap()
}

/// What a case leaves to check.
struct Ran {
    _dir: tempfile::TempDir,
    run_dir: PathBuf,
    events: Vec<Event>,
    hook_log: String,
}

/// Runs one case: bob is started, woken by m1, and m2 reaches him at `arrival` against the
/// request that ends him by `ending`.
async fn case(ending: Ending, arrival: Arrival) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let typed = matches!(ending, Ending::Cut | Ending::Invalid);
    let seen = Seen::new();
    // The request that ends bob: his second (woken by m1), or his third when m2 comes
    // with the results of the second's tool call.
    let last = if arrival == Arrival::WithResults {
        "m2 ping"
    } else {
        "m1 ping"
    };
    // Its ending request (the second) is its last allowed, for the turn limit's case.
    let max_turns = if ending == Ending::MaxTurns { 2 } else { 50 };
    let flag = dir.path().join("stop-now");
    let hook_log = dir.path().join("hooks.log");
    let log = script(
        dir.path(),
        "log.sh",
        &format!("printf '%s\\n' \"$(cat)\" >> '{}'", hook_log.display()),
    );
    let idle = script(
        dir.path(),
        "idle.sh",
        &format!(
            "test -f '{}' && {{ echo 'keep working' >&2; exit 2; }}; exit 0",
            flag.display()
        ),
    );
    let logged = json!([{"hooks": [{"type": "command", "command": log}]}]);
    let mut config = json!({"SubagentStart": logged, "SubagentStop": logged});
    if ending == Ending::StopHook {
        config["TeammateIdle"] = json!([{"hooks": [{"type": "command", "command": idle}]}]);
    }
    let (hooks, warnings) = Hooks::from_json(&config, "settings");
    assert!(warnings.is_empty(), "{warnings:?}");
    let hooks = Some(hooks);
    let budget = (ending == Ending::Budget).then_some(100_000);

    // Gates: the lead's request after m1 (it sends m2), after m2 (it may close bob), and
    // bob's requests whose timing matters.
    let g_lead2 = server.gate(lead("Sent to bob as message #1"));
    let g_lead3 = server.gate(lead("bob as message #2"));
    let g_bob1 = server.gate(bob("m1 ping"));
    let g_bob2 = (arrival == Arrival::WithResults).then(|| server.gate(bob("m2 ping")));

    // The lead: start bob, send m1, then m2 (or close bob), then finish.
    let (id, input) = start("t1", "bob", typed);
    server.route(
        lead("LEAD go"),
        vec![Reply::tool_uses(vec![(id.as_str(), "Task", input)])],
    );
    server.route(
        lead("\"tool_use_id\":\"t1\""),
        vec![send("s1", "bob", "m1 ping")],
    );
    let after_m1 = match (arrival, ending) {
        (Arrival::Idle, Ending::Close) => close("c1", "bob"),
        (Arrival::Idle, _) => Reply::text("LEAD-DONE"),
        (Arrival::After, Ending::Close) => close("c1", "bob"),
        _ => send("s2", "bob", "m2 ping"),
    };
    server.route(lead("Sent to bob as message #1"), vec![after_m1]);
    if arrival == Arrival::After && ending == Ending::Close {
        server.route(lead("Closed: bob"), vec![send("s2", "bob", "m2 ping")]);
    }
    let after_m2 = if ending == Ending::Close && arrival != Arrival::After {
        close("c1", "bob")
    } else {
        Reply::text("LEAD-DONE")
    };
    server.route(lead("bob as message #2"), vec![after_m2]);

    // Bob: ready at once; then the ending request.
    let ready = if typed {
        Reply::text("{\"ok\": true}")
    } else {
        Reply::text("bob ready")
    };
    server.route(bob("BOB job"), vec![ready]);
    let ending_reply = match ending {
        Ending::Answer | Ending::StopHook | Ending::Close | Ending::Cancel => bob_answer(typed),
        Ending::ModelError => Reply::error_status(400, "invalid_request_error", "boom"),
        Ending::Refusal => Reply::text("I will not").stop_reason("refusal"),
        Ending::Cut => Reply::text("{\"ok\": tr").stop_reason("max_tokens"),
        Ending::Invalid => Reply::text("not json"),
        Ending::MaxTurns => list("l9"),
        Ending::Budget => list("l9").usage(200_000, 10, 0, 0),
    };
    if arrival == Arrival::WithResults {
        // The request before: a tool call, during which m2 is sent.
        let before = if ending == Ending::MaxTurns {
            ending_reply.clone()
        } else {
            list("l1")
        };
        server.route(bob("m1 ping"), vec![before]);
        server.route(bob(last), vec![ending_reply]);
    } else {
        server.route(bob(last), vec![ending_reply]);
    }
    if ending == Ending::Invalid {
        server.route(
            bob("was not accepted"),
            vec![Reply::text("still not json"); 2],
        );
    }
    defaults(&server, typed);

    let o = team_run(
        &server,
        dir.path(),
        max_turns,
        hooks,
        budget,
        TeamLimits::default(),
        &seen,
    );
    let cancel = o.cancel_token();
    let runner = tokio::spawn({
        let o = o.clone();
        async move { o.run("main", "LEAD go: run the team").await }
    });

    let ending_gate = g_bob2.clone().unwrap_or_else(|| g_bob1.clone());
    // Acts on bob while his ending request is held: close him, cancel the run, or arm
    // the stop hook.
    let mid = |seen: Seen| {
        let (cancel, g_lead3, flag) = (cancel.clone(), g_lead3.clone(), flag.clone());
        async move {
            match ending {
                Ending::Close => {
                    g_lead3.open();
                    seen.until("bob closed", |e| sent(e, "bob ended") || bob_ended(e))
                        .await;
                }
                Ending::Cancel => cancel.cancel(),
                Ending::StopHook => std::fs::write(&flag, "").unwrap(),
                _ => {}
            }
        }
    };
    match arrival {
        Arrival::Idle => {
            held(&g_bob1, "bob woken by m1").await;
            if ending == Ending::Close {
                g_lead2.open();
                seen.until("bob closed", bob_ended).await;
            } else {
                mid(seen.clone()).await;
            }
            g_bob1.open();
            g_lead2.open();
        }
        Arrival::During => {
            held(&g_bob1, "bob woken by m1").await;
            g_lead2.open();
            seen.until("m2 sent", |e| sent(e, "m2 ping")).await;
            mid(seen.clone()).await;
            g_bob1.open();
        }
        Arrival::WithResults => {
            held(&g_bob1, "bob woken by m1").await;
            g_lead2.open();
            seen.until("m2 sent", |e| sent(e, "m2 ping")).await;
            g_bob1.open();
            if ending != Ending::MaxTurns {
                held(&ending_gate, "bob's request with m2").await;
                mid(seen.clone()).await;
            }
            ending_gate.open();
        }
        Arrival::After => {
            if ending == Ending::StopHook {
                std::fs::write(&flag, "").unwrap();
            }
            g_bob1.open();
            seen.until("bob answered", |e| {
                bob_ended(e) || bob_idle_after_a_delivery(e)
            })
            .await;
            g_lead2.open();
            if ending == Ending::Cancel {
                seen.until("m2 sent", |e| sent(e, "m2 ping")).await;
                cancel.cancel();
            }
        }
    }
    g_lead2.open();
    g_lead3.open();
    ending_gate.open();
    g_bob1.open();
    let ended = tokio::time::timeout(PATIENCE, runner).await;
    let Ok(joined) = ended else {
        panic!("{ending:?}/{arrival:?}: the run did not end");
    };
    let (_, summary) = joined
        .unwrap()
        .unwrap_or_else(|e| panic!("{ending:?}/{arrival:?}: {e}"));
    let run_dir = dir.path().join(".cadre/runs").join(summary.run_id.unwrap());
    let hook_log = std::fs::read_to_string(&hook_log).unwrap_or_default();
    Ran {
        _dir: dir,
        run_dir,
        events: seen.all(),
        hook_log,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn journal_steps(run_dir: &Path) -> Vec<Step> {
    read_steps(&run_dir.join("journal.jsonl")).unwrap().0
}

/// Checks the guarantees on a run's journal `steps` (and its `events`).
fn check(what: &str, steps: &[Step], events: Option<&[Event]>) -> TeamState {
    let state = TeamState::from_steps(steps.iter().cloned())
        .unwrap_or_else(|| panic!("{what}: no team in the journal"));
    // No name joins twice, and each member has one path.
    let mut names = HashSet::new();
    let mut paths = HashSet::new();
    for step in steps {
        if let Step::Team {
            change: cadre_core::vocab::TeamChange::Joined { member },
            ..
        } = step
        {
            assert!(
                names.insert(member.name.clone()),
                "{what}: {} joined twice",
                member.name
            );
            assert!(
                paths.insert(member.path.clone()),
                "{what}: {} joined at {}, another member's path",
                member.name,
                member.path
            );
        }
    }
    // Every message a member sent: given to its recipient once, or returned to it.
    let mut given: HashMap<(String, String, u64), Vec<(usize, String)>> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        if let Step::Delivered { agent, messages } = step {
            for m in messages {
                let key = (m.to.clone(), m.from.clone(), m.seq);
                given.entry(key).or_default().push((i, agent.to_string()));
            }
        }
    }
    for m in state.messages.iter().filter(|m| !m.notice) {
        let at = given
            .get(&(m.to.clone(), m.from.clone(), m.seq))
            .cloned()
            .unwrap_or_default();
        let times = at.len();
        // Returned: a notice from its recipient back to its sender, under its key.
        let returned = state.messages.iter().any(|r| {
            r.notice
                && r.key == format!("returned/{}#{}", m.from, m.seq)
                && r.from == m.to
                && r.to == m.from
        });
        let recipient_open = state.members.get(&m.to).is_some_and(|r| !r.closed);
        assert!(
            times <= 1,
            "{what}: {}→{} #{} was given {times} times",
            m.from,
            m.to,
            m.seq
        );
        // Read once, or returned (given to a member closed before its model answered
        // counts as unread), or still waiting for a member that may read it.
        assert!(
            times == 1 || returned || recipient_open,
            "{what}: {}→{} #{} ({:?}) given {times} times, returned: {returned}",
            m.from,
            m.to,
            m.seq,
            m.text
        );
        // Given and kept means read: the recipient acted on a response after it was given.
        if let (Some((i, path)), false) = (at.first(), returned) {
            assert!(
                acted_on_after(steps, path, *i),
                "{what}: {}→{} #{} ({:?}) was kept, but {} never acted on a response after it was given",
                m.from,
                m.to,
                m.seq,
                m.text,
                m.to
            );
        }
        if !recipient_open {
            assert!(
                times == 1 || returned,
                "{what}: {}→{} #{} is lost: its recipient is closed, and it was neither given nor returned",
                m.from,
                m.to,
                m.seq
            );
        }
    }
    if let Some(events) = events {
        // Every agent started finished once; no member path started twice.
        let mut open: HashMap<&str, i32> = HashMap::new();
        for e in events {
            match e {
                Event::Started { agent, .. } => *open.entry(agent.as_str()).or_default() += 1,
                Event::Finished { agent, .. } => *open.entry(agent.as_str()).or_default() -= 1,
                _ => {}
            }
        }
        for (agent, n) in &open {
            assert_eq!(
                *n, 0,
                "{what}: {agent} started and finished {n} times apart"
            );
        }
        // No member's agent started twice, and only members' agents started.
        let mut starts: HashMap<&str, usize> = HashMap::new();
        for e in events {
            if let Event::Started { agent, .. } = e {
                if agent.as_str().contains("worker") {
                    *starts.entry(agent.as_str()).or_default() += 1;
                }
            }
        }
        for (agent, n) in &starts {
            assert_eq!(*n, 1, "{what}: {agent} started {n} times");
            assert!(
                state.members.values().any(|m| m.path == *agent),
                "{what}: {agent} started, but no member has its path"
            );
        }
    }
    state
}

/// Whether the agent at `path` acted on a model response journaled after step `from`: one
/// that was not refused, cut or paused, and whose answer was not rejected (asked for
/// again, or failed for good).
fn acted_on_after(steps: &[Step], path: &str, from: usize) -> bool {
    let mine: Vec<&Step> = steps[from..]
        .iter()
        .filter(|s| s.agent() == Some(path))
        .collect();
    mine.iter().enumerate().any(|(k, step)| {
        let Step::Response { response, .. } = step else {
            return false;
        };
        let not_acted = matches!(
            response.stop_reason,
            Some(StopReason::Refusal | StopReason::MaxTokens | StopReason::PauseTurn)
        );
        // What the agent did next with it, up to its next response.
        let rejected = mine[k + 1..]
            .iter()
            .take_while(|s| !matches!(s, Step::Response { .. }))
            .any(|s| {
                matches!(
                    s,
                    Step::Rejected { .. }
                        | Step::Finished {
                            stop: StopKind::InvalidAnswer(_),
                            ..
                        }
                )
            });
        !not_acted && !rejected
    })
}

/// Resumes the run from every prefix of its journal: each resumed run ends, keeps the team
/// its prefix holds, and keeps every guarantee.
async fn resume_every_prefix(what: &str, run_dir: &Path, typed: bool, limits: &TeamLimits) {
    let text = std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    for k in 1..lines.len() {
        let prefix: Vec<Step> = lines[..k]
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let Some(before) = TeamState::from_steps(prefix.iter().cloned()) else {
            continue;
        };
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("run");
        copy_dir(run_dir, &copy);
        std::fs::write(copy.join("journal.jsonl"), lines[..k].join("\n") + "\n").unwrap();
        defaults(&server, typed);
        let seen = Seen::new();
        let sink = seen.clone();
        // Another model for the resumed lead: a member keeps the one it joined with.
        let o = mock_builder(&server, dir.path())
            .model_id("claude-haiku-5")
            .runs_dir(dir.path().join(".cadre/runs"))
            .agent(worker(50))
            .team(limits.clone())
            .on_event(move |e| sink.push(e))
            .build()
            .unwrap();
        let asked_before = server.requests().len();
        let Some(run) = JournaledRun::open(&copy).unwrap() else {
            continue;
        };
        let resumed = tokio::time::timeout(PATIENCE, o.resume(run, None)).await;
        let Ok(result) = resumed else {
            panic!("{what}: the run resumed after {k} steps did not end");
        };
        if let Err(e) = result {
            // Only a run that had ended, or whose lead never started, may refuse to go on.
            let lead_started = prefix
                .iter()
                .any(|s| matches!(s, Step::Started { agent, .. } if agent == "main"));
            assert!(
                e.to_string().contains("finished") || !lead_started,
                "{what}, resumed after {k} steps: {e}"
            );
            continue;
        }
        let requests = server.requests();
        let after = check(
            &format!("{what}, resumed after {k} steps"),
            &journal_steps(&copy),
            Some(&seen.all()),
        );
        // Bob joined before the cut: he goes on as he joined (one who joins after it
        // takes the resumed lead's model, as a fresh start does).
        let joined = before.members.contains_key("bob");
        for r in requests[asked_before..]
            .iter()
            .filter(|r| joined && r.first_user_text().contains("BOB job"))
        {
            assert_eq!(
                r.body["model"], "claude-sonnet-5-5",
                "{what}, resumed after {k} steps: bob lost his model"
            );
            assert_eq!(
                r.body["output_config"]["format"].is_object(),
                typed,
                "{what}, resumed after {k} steps: bob's output schema: {}",
                r.body["output_config"]
            );
        }
        for (name, m) in &before.members {
            let kept = after.members.get(name);
            assert_eq!(
                kept.map(|k| &k.path),
                Some(&m.path),
                "{what}, resumed after {k} steps: {name} moved"
            );
        }
        assert_eq!(
            &after.messages[..before.messages.len()],
            &before.messages[..],
            "{what}, resumed after {k} steps: the messages changed"
        );
    }
}

async fn drive(ending: Ending, arrival: Arrival) {
    let what = format!("{ending:?} with the message arriving {arrival:?}");
    let ran = case(ending, arrival).await;
    let steps = journal_steps(&ran.run_dir);
    let state = check(&what, &steps, Some(&ran.events));
    stops_match_starts(&what, &ran.hook_log);
    notices_keep_their_text(&what, &ran.run_dir);
    assert!(
        state.members.contains_key("bob"),
        "{what}: bob never joined"
    );
    resume_every_prefix(
        &what,
        &ran.run_dir,
        matches!(ending, Ending::Cut | Ending::Invalid),
        &TeamLimits::default(),
    )
    .await;
}

/// Every notice a `Delivered` step gave is journaled with its text, as given: a returned
/// message's notice has no step of its own to take it from.
fn notices_keep_their_text(what: &str, run_dir: &Path) {
    let text = std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["step"] != "delivered" {
            continue;
        }
        for m in v["messages"].as_array().unwrap() {
            if m["notice"] == true {
                assert!(
                    m["text"].as_str().is_some_and(|t| !t.is_empty()),
                    "{what}: a notice was journaled without its text: {line}"
                );
            }
        }
    }
}

/// Every `SubagentStart` in a hook log is followed by exactly one `SubagentStop` of the
/// same agent.
fn stops_match_starts(what: &str, log: &str) {
    let mut count: HashMap<String, (u32, u32)> = HashMap::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = v["agent_id"].as_str().unwrap_or_default().to_owned();
        let c = count.entry(id).or_default();
        match v["hook_event_name"].as_str() {
            Some("SubagentStart") => c.0 += 1,
            Some("SubagentStop") => c.1 += 1,
            other => panic!("{what}: a {other:?} hook in the log"),
        }
    }
    assert!(!count.is_empty(), "{what}: no hook ran");
    for (id, (starts, stops)) in &count {
        assert_eq!(
            (*starts, *stops),
            (1, 1),
            "{what}: {id} had {starts} SubagentStart and {stops} SubagentStop"
        );
    }
}

macro_rules! cases {
    ($($name:ident: $ending:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            for arrival in ARRIVALS {
                drive(Ending::$ending, arrival).await;
            }
        }
    )*};
}

cases! {
    a_member_that_answers_gets_every_message_once: Answer;
    a_member_whose_request_fails_returns_what_it_did_not_read: ModelError;
    a_refused_member_returns_what_it_did_not_read: Refusal;
    a_typed_member_cut_at_max_tokens_returns_what_it_did_not_read: Cut;
    a_typed_member_failing_its_answers_returns_what_it_did_not_read: Invalid;
    a_member_stopped_by_its_stop_hook_returns_what_it_did_not_read: StopHook;
    a_closed_member_returns_what_it_did_not_read: Close;
    a_cancelled_run_returns_what_its_members_did_not_read: Cancel;
    a_member_at_its_turn_limit_returns_what_it_did_not_read: MaxTurns;
    a_member_out_of_budget_returns_what_it_did_not_read: Budget;
}

/// Starts two members in one turn (`names`), under `limits`: the run ends, and resuming
/// from every prefix agrees with it.
async fn two_starts(names: [&str; 2], limits: TeamLimits) -> (TeamState, Vec<(String, bool)>) {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let calls: Vec<(String, Value)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (id, mut input) = start(&format!("t{i}"), n, false);
            input["prompt"] = "X job: help".into();
            (id, input)
        })
        .collect();
    server.route(
        lead("LEAD go"),
        vec![Reply::tool_uses(
            calls
                .iter()
                .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                .collect(),
        )],
    );
    defaults(&server, false);
    let seen = Seen::new();
    let o = team_run(&server, dir.path(), 50, None, None, limits.clone(), &seen);
    let (_, summary) = tokio::time::timeout(PATIENCE, o.run("main", "LEAD go: two"))
        .await
        .expect("the run ends")
        .unwrap();
    let run_dir = dir.path().join(".cadre/runs").join(summary.run_id.unwrap());
    let steps = journal_steps(&run_dir);
    let what = format!("two starts of {names:?}");
    let state = check(&what, &steps, Some(&seen.all()));
    let results: Vec<(String, bool)> = steps
        .iter()
        .filter_map(|s| match s {
            Step::ToolResult { agent, result, .. } if agent == "main" => {
                let v = serde_json::to_value(result).unwrap();
                Some((
                    cadre_testkit::content_text(v.get("content")),
                    v["is_error"].as_bool().unwrap_or(false),
                ))
            }
            _ => None,
        })
        .collect();
    let starts = seen
        .all()
        .iter()
        .filter(|e| matches!(e, Event::Started { agent, .. } if agent.as_str().contains("worker")))
        .count();
    // One start per member (the lead aside).
    assert_eq!(
        starts,
        state.members.len() - 1,
        "{what}: {starts} members started"
    );
    resume_every_prefix(&what, &run_dir, false, &limits).await;
    (state, results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starts_of_one_name_in_one_turn_make_one_member_and_one_error() {
    let (state, results) = two_starts(["x", "x"], TeamLimits::default()).await;
    let members: Vec<&String> = state.members.keys().collect();
    assert_eq!(members, ["main", "x"]);
    let errors: Vec<&(String, bool)> = results.iter().filter(|(_, e)| *e).collect();
    assert_eq!(errors.len(), 1, "{results:?}");
    assert!(errors[0].0.contains("already exists"), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starts_past_the_member_cap_make_one_member_and_one_error() {
    let limits = TeamLimits::default().max_members(1);
    let (state, results) = two_starts(["x", "y"], limits).await;
    assert_eq!(state.members.len(), 2, "{:?}", state.members.keys());
    let errors: Vec<&(String, bool)> = results.iter().filter(|(_, e)| *e).collect();
    assert_eq!(errors.len(), 1, "{results:?}");
    assert!(errors[0].0.contains("limit"), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_still_at_work_when_the_run_is_given_up_finishes_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.allow_unused_replies();
    let (id, input) = start("t1", "bob", false);
    server.route(
        lead("LEAD go"),
        vec![Reply::tool_uses(vec![(id.as_str(), "Task", input)])],
    );
    defaults(&server, false);
    let bob_asked = server.gate(bob("BOB job"));
    let seen = Seen::new();
    let o = team_run(
        &server,
        dir.path(),
        50,
        None,
        None,
        TeamLimits::default(),
        &seen,
    );
    let runner = tokio::spawn({
        let o = o.clone();
        async move { o.run("main", "LEAD go: give up").await }
    });
    held(&bob_asked, "bob's first request").await;
    // A second Ctrl-C: the run is given up, its future dropped; bob's task ends by itself.
    o.abandon("LEAD go: give up", 0);
    runner.abort();
    let run_dir = dir.path().join(".cadre/runs");
    let bob_ended_in_journal = || {
        std::fs::read_dir(&run_dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| std::fs::read_to_string(e.path().join("journal.jsonl")).ok())
            .is_some_and(|j| {
                j.lines().any(|l| {
                    l.contains("\"step\":\"finished\"") && l.contains("\"agent\":\"main/worker#1\"")
                })
            })
    };
    let waited = tokio::time::timeout(PATIENCE, async {
        while !bob_ended_in_journal() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "bob never ended");
    let finished = seen
        .all()
        .iter()
        .filter(|e| matches!(e, Event::Finished { agent, .. } if agent == "main/worker#1"))
        .count();
    assert_eq!(finished, 1, "bob's end was told {finished} times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_started_in_one_turn_keep_their_own_paths_across_every_resume() {
    // A resume cut after the first member joined but before it started must not hand its
    // path to the second.
    let (state, results) = two_starts(["x", "y"], TeamLimits::default()).await;
    assert_eq!(state.members.len(), 3, "{:?}", state.members.keys());
    assert!(results.iter().all(|(_, e)| !e), "{results:?}");
}
