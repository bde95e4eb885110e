use super::*;
use cadre_core::StopKind as Stop;

const DIRECTIVE: &str = "Summarise section 2";

/// A long context the parent was given (about 3,000 tokens at four characters a token).
fn context() -> String {
    (1..=12)
        .map(|i| {
            format!(
                "Section {i}. {}\n",
                "The cache keeps what was sent. ".repeat(30)
            )
        })
        .collect()
}

/// Whether a request's messages hold `text` anywhere (a fork's directive is in its last
/// user message at first, deeper later).
fn holds(text: &'static str) -> Match {
    Match::Custom(Arc::new(move |body: &Value| {
        body["messages"].to_string().contains(text)
    }))
}

/// A message's blocks with their breakpoints taken off: the prefix the cache compares.
fn unmarked(message: &Value) -> Value {
    let mut m = message.clone();
    if let Some(blocks) = m["content"].as_array_mut() {
        for b in blocks {
            if let Some(o) = b.as_object_mut() {
                o.remove("cache_control");
            }
        }
    }
    m
}

#[tokio::test]
async fn a_fork_starts_from_the_parent_s_conversation_and_reads_its_prefix_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    // The API's minimum cacheable prefix for most models.
    server.simulate_prompt_cache(1024);
    server.route(
        holds("Your task: Summarise section 2"),
        vec![
            // A fork may not fork again: the call is refused, and it goes on.
            Reply::tool_use(
                "again",
                "Task",
                json!({"description": "deeper", "prompt": "more", "subagent_type": "fork"}),
            ),
            Reply::text("Section 2 says the cache keeps what was sent."),
        ],
    );
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use(
                "f1",
                "Task",
                json!({"description": "fork it", "prompt": DIRECTIVE, "subagent_type": "fork"}),
            ),
            Reply::text("reported"),
        ],
    );
    let o = mock_builder(&server, dir.path())
        .runs_dir(dir.path().join(".cadre/runs"))
        .build()
        .unwrap();
    let task = format!("PARENT: read this.\n{}", context());
    let (outcome, summary) = o.run("main", &task).await.unwrap();
    assert_eq!(outcome.stop, Stop::Done);

    let requests = server.requests();
    let parent = &requests[0];
    let fork_at = requests
        .iter()
        .position(|r| {
            r.last_user_text()
                .contains("Your task: Summarise section 2")
        })
        .unwrap();
    let fork = &requests[fork_at];

    // The fork's first request is the parent's: the same system prompt and tools, the
    // parent's messages, its tool turn, then a result for each call of that turn and the
    // directive.
    assert_eq!(fork.body["system"], parent.body["system"]);
    assert_eq!(fork.body["tools"], parent.body["tools"]);
    assert_eq!(fork.body["model"], parent.body["model"]);
    let (pm, fm) = (parent.messages(), fork.messages());
    assert_eq!(fm.len(), pm.len() + 2);
    assert_eq!(unmarked(&fm[0]), unmarked(&pm[0]));
    let turn = &fm[1];
    assert_eq!(turn["role"], "assistant");
    assert_eq!(turn["content"][0]["id"], "f1");
    let last = &fm[2]["content"];
    assert_eq!(last[0]["tool_use_id"], "f1");
    assert!(last[1]["text"]
        .as_str()
        .unwrap()
        .ends_with("Your task: Summarise section 2"));
    // Its breakpoints: where the parent's request ended, where sibling forks part, the
    // system prompt's, and the request's own — the API's four.
    assert_eq!(fm[0]["content"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(last[0]["cache_control"]["type"], "ephemeral");
    assert!(fork.body["cache_control"].is_object());

    // The cache: the parent's first request wrote its whole prefix; the fork reads all of
    // it, a plain subagent given the same context in its prompt reads none.
    let parent_use = parent.cache.unwrap();
    let fork_use = fork.cache.unwrap();
    let plain_use = plain_subagent_first_request(dir.path()).await;
    assert_eq!(parent_use.cache_read_input_tokens, 0);
    assert_eq!(
        fork_use.cache_read_input_tokens,
        parent_use.cache_creation_input_tokens
    );
    assert!(fork_use.cache_read_input_tokens > 3_000, "{fork_use:?}");
    assert_eq!(plain_use.cache_read_input_tokens, 0, "{plain_use:?}");
    let total = |u: cadre_testkit::cache::CacheUse| {
        u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
    };
    println!(
        "first request of a fork: {} input tokens, {} read from the cache ({}%), {} written\n\
         first request of a plain subagent given the same context: {} input tokens, {} read from the cache, {} written",
        total(fork_use),
        fork_use.cache_read_input_tokens,
        fork_use.cache_read_input_tokens * 100 / total(fork_use),
        fork_use.cache_creation_input_tokens,
        total(plain_use),
        plain_use.cache_read_input_tokens,
        plain_use.cache_creation_input_tokens,
    );

    // The fork that tried to fork was told no, and its answer reached the parent.
    let refused = &requests
        .iter()
        .filter(|r| r.last_user_text().contains("a fork does not fork again"))
        .count();
    assert_eq!(*refused, 1);
    let results = tool_results(&server, requests.len() - 1);
    assert_eq!(
        results[0]["content"][0]["text"],
        "Section 2 says the cache keeps what was sent."
    );
    assert!(results[0].get("is_error").is_none());
    // It is an agent of its own, journaled with the history it started from, so a resumed
    // run rebuilds it.
    let fork_record = summary
        .usage
        .agents
        .iter()
        .find(|a| a.agent_type == "fork")
        .unwrap();
    assert_eq!(
        (fork_record.path.as_str(), fork_record.turns),
        ("main/fork#1", 2)
    );
    let run_dir = o.run_dir().unwrap();
    let journal = std::fs::read_to_string(run_dir.path().join("journal.jsonl")).unwrap();
    let started = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|s| s["step"] == "started" && s["agent"] == "main/fork#1")
        .unwrap();
    assert_eq!(started["history"].as_array().unwrap().len(), fm.len());
}

/// What the first request of a plain subagent, given the context a fork inherits in its
/// prompt instead, reads from the cache (in a run of its own).
async fn plain_subagent_first_request(dir: &std::path::Path) -> cadre_testkit::cache::CacheUse {
    let server = MockServer::start().await;
    server.simulate_prompt_cache(1024);
    server.route(
        Match::FirstUserContains("PLAIN:".into()),
        vec![Reply::text("Section 2 is about the cache.")],
    );
    let prompt = format!("PLAIN: {}\n{DIRECTIVE}", context());
    server.route(
        Match::FirstUserContains("PARENT".into()),
        vec![
            Reply::tool_use(
                "p1",
                "Task",
                json!({"description": "plain", "prompt": prompt, "subagent_type": "explore"}),
            ),
            Reply::text("reported"),
        ],
    );
    let o = mock_builder(&server, dir).build().unwrap();
    o.run("main", &format!("PARENT: read this.\n{}", context()))
        .await
        .unwrap();
    server
        .requests()
        .into_iter()
        .find(|r| r.first_user_text().starts_with("PLAIN:"))
        .and_then(|r| r.cache)
        .unwrap()
}
