use super::*;
use cadre_testkit::prereq;

/// The task of the older run: it must come back escaped in every view.
const TASK: &str = "Survey the code <img src=x onerror=alert(1)>";

struct Runs {
    dir: tempfile::TempDir,
    /// The fleet run (4 agents, done).
    fleet: String,
    /// The newer run, stopped at its turn limit (1 agent).
    stopped: String,
}

/// Two real runs in one workspace: a fleet that finishes, then one that hits max turns.
async fn two_runs() -> Runs {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "pub fn alpha() {}\n").unwrap();
    let server = MockServer::start().await;
    fleet_routes(&server);
    server.route(
        Match::FirstUserContains("Count".into()),
        vec![Reply::tool_use("l1", "list_files", json!({}))],
    );
    let out = cadre(dir.path(), &server.uri(), Some("k"), &["run", TASK]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--max-turns", "1", "Count the files"],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let mut fleet = None;
    let mut stopped = None;
    for entry in std::fs::read_dir(dir.path().join(".cadre/runs")).unwrap() {
        let entry = entry.unwrap();
        let summary: Value = serde_json::from_str(
            &std::fs::read_to_string(entry.path().join("summary.json")).unwrap(),
        )
        .unwrap();
        let id = entry.file_name().to_str().unwrap().to_owned();
        if summary["task"] == TASK {
            fleet = Some(id);
        } else {
            stopped = Some(id);
        }
    }
    Runs {
        dir,
        fleet: fleet.unwrap(),
        stopped: stopped.unwrap(),
    }
}

/// The line of `text` that starts (after indentation) with `name` followed by a space.
fn row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{text}"))
}

/// Copies the run folder `id` of `from` into a fresh workspace, where it can be altered.
pub(super) fn copy_run(from: &Path, id: &str) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    let dest = to.path().join(".cadre/runs").join(id);
    std::fs::create_dir_all(&dest).unwrap();
    for entry in std::fs::read_dir(from.join(".cadre/runs").join(id)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dest.join(entry.file_name())).unwrap();
    }
    to
}

/// Once a run was listed, its row comes from its small index (what the index says is what
/// is listed) until a file of the run changes; a run folder without one lists as before.
#[tokio::test]
async fn a_listing_reads_each_run_s_index_until_the_run_changes() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await;
    server.route(
        Match::Any,
        vec![Reply::text("first"), Reply::text("second")],
    );
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "Say something"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = std::fs::read_dir(dir.path().join(".cadre/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let index = run.join("index.json");
    assert!(!index.exists());
    let listed = |out: Output| -> Value {
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    };
    let first = listed(cadre_env(dir.path(), &[], &["runs", "list", "--json"]).await);
    assert_eq!(first[0]["task"], "Say something");
    assert_eq!(first[0]["outcome"], "completed");
    assert!(index.is_file(), "the first listing writes the index");
    let text = std::fs::read_to_string(&index).unwrap();
    std::fs::write(&index, text.replace("Say something", "From the index")).unwrap();
    let second = listed(cadre_env(dir.path(), &[], &["runs", "list", "--json"]).await);
    assert_eq!(second[0]["task"], "From the index");
    // The run goes on (found through the index as the newest to go on with): its files
    // changed, so its row is made from the run again.
    let out = cadre(
        dir.path(),
        &server.uri(),
        Some("k"),
        &["run", "--continue", "And more"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let third = listed(cadre_env(dir.path(), &[], &["runs", "list", "--json"]).await);
    assert_eq!(third.as_array().unwrap().len(), 1, "{third}");
    assert_ne!(third[0]["task"], "From the index", "{third}");
}

#[tokio::test]
async fn list_and_show_read_back_finished_and_unfinished_runs() {
    let runs = two_runs().await;
    let ws = runs.dir.path();
    let ws_arg = ws.to_str().unwrap();

    // Newest first, each with its outcome and agent count; -C works from anywhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let list = cadre_env(elsewhere.path(), &[], &["-C", ws_arg, "runs", "list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", list.stdout);
    assert!(lines[1].starts_with(&runs.stopped), "{}", list.stdout);
    assert!(lines[1].contains("turn limit"), "{}", lines[1]);
    assert!(lines[1].contains("Count the files"), "{}", lines[1]);
    assert!(lines[2].starts_with(&runs.fleet), "{}", list.stdout);
    assert!(lines[2].contains(" completed "), "{}", lines[2]);
    let agents = |line: &str| -> String {
        let after = line.split_whitespace().collect::<Vec<_>>();
        // id, date, time, outcome (one or two words), agents…
        let at = if after[3] == "turn" { 5 } else { 4 };
        after[at].to_owned()
    };
    assert_eq!(agents(lines[1]), "1", "{}", lines[1]);
    assert_eq!(agents(lines[2]), "4", "{}", lines[2]);
    let date = runs.fleet.get(0..4).unwrap();
    assert!(lines[2].contains(&format!("{date}-")), "{}", lines[2]);

    let limited = cadre_env(ws, &[], &["runs", "list", "--limit", "1"]).await;
    assert_eq!(limited.stdout.lines().count(), 3, "{}", limited.stdout);
    assert!(limited.stdout.contains("1 older run(s) not shown"));

    let json = cadre_env(ws, &[], &["runs", "list", "--json"]).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let items: Value = serde_json::from_str(&json.stdout).unwrap();
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["id"], runs.stopped.as_str());
    assert_eq!(items[0]["outcome"], "turn limit");
    assert_eq!(items[0]["agents"], 1);
    assert_eq!(items[1]["id"], runs.fleet.as_str());
    assert_eq!(items[1]["outcome"], "completed");
    assert_eq!(items[1]["finished"], true);
    assert_eq!(items[1]["agents"], 4);
    assert_eq!(items[1]["task"], TASK);
    assert!(items[1]["tokens"].as_u64().unwrap() > 0);
    assert!(items[1]["started"].as_str().unwrap().ends_with('Z'));

    // The tree, each agent with its outcome, turns and tool calls; then task and answer.
    let show = cadre_env(ws, &[], &["runs", "show", &runs.fleet]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    let text = &show.stdout;
    assert!(text.contains(&format!("run {}", runs.fleet)), "{text}");
    assert!(row(text, "main").starts_with("main "), "{text}");
    for (name, kind, tools) in [
        ("explore#1", "explore", "1"),
        ("explore#2", "explore", "1"),
        ("plan#1", "plan", "1"),
    ] {
        let line = row(text, name);
        assert!(line.starts_with(&format!("  {name}")), "{line}");
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cols[1..5], [kind, "completed", "2", tools], "{line}");
    }
    let main: Vec<&str> = row(text, "main").split_whitespace().collect();
    assert_eq!(&main[1..5], ["main", "completed", "2", "3"], "{text}");
    assert!(text.contains(TASK), "{text}");
    assert!(
        text.contains("Survey complete: alpha, beta, gamma."),
        "{text}"
    );

    let latest = cadre_env(ws, &[], &["runs", "show", "latest"]).await;
    assert_eq!(latest.code, 0, "{}", latest.stderr);
    assert!(latest.stdout.contains(&format!("run {}", runs.stopped)));
    assert!(row(&latest.stdout, "main").contains("turn limit"));

    // Unknown or ambiguous ids are usage errors that say which ids exist.
    let unknown = cadre_env(ws, &[], &["runs", "show", "19990101"]).await;
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("no run \"19990101\""),
        "{}",
        unknown.stderr
    );
    assert!(unknown.stderr.contains(&runs.fleet), "{}", unknown.stderr);
    assert!(unknown.stderr.contains(&runs.stopped), "{}", unknown.stderr);
    let ambiguous = cadre_env(ws, &[], &["runs", "show", "2"]).await;
    assert_eq!(ambiguous.code, 2);
    assert!(
        ambiguous.stderr.contains("matches 2 runs"),
        "{}",
        ambiguous.stderr
    );
    let empty = tempfile::tempdir().unwrap();
    let none = cadre_env(empty.path(), &[], &["runs", "list"]).await;
    assert_eq!(none.code, 0);
    assert!(none.stdout.contains("no runs yet"), "{}", none.stdout);
    assert_eq!(none.stdout.lines().count(), 1);
    let none = cadre_env(empty.path(), &[], &["runs", "show", "latest"]).await;
    assert_eq!(none.code, 2);

    // A run killed mid-way: no summary, and one explorer without its outcome line. A
    // journal another version might write beside the transcripts is left alone.
    let copy = copy_run(ws, &runs.fleet);
    let folder = copy.path().join(".cadre/runs").join(&runs.fleet);
    std::fs::remove_file(folder.join("summary.json")).unwrap();
    std::fs::write(folder.join("journal.jsonl"), "{\"step\":1}\n").unwrap();
    let transcript = folder.join("transcript.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(&transcript)
        .unwrap()
        .lines()
        .filter(|l| {
            !l.contains("\"agent\":\"main/explore#2\"") || !l.contains("\"type\":\"outcome\"")
        })
        .map(str::to_owned)
        .collect();
    std::fs::write(&transcript, kept.join("\n") + "\n").unwrap();
    let list = cadre_env(copy.path(), &[], &["runs", "list", "--json"]).await;
    let items: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(items[0]["outcome"], "unfinished", "{}", list.stdout);
    assert_eq!(items[0]["finished"], false);
    assert_eq!(items[0]["agents"], 4);
    assert_eq!(items[0]["unfinished_agents"], 1);
    assert_eq!(items[0]["task"], TASK);
    // Alone in its workspace, a run is found by any prefix of its id.
    let show = cadre_env(copy.path(), &[], &["runs", "show", &runs.fleet[..8]]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    let text = &show.stdout;
    assert!(text.contains("unfinished"), "{text}");
    assert!(text.contains("no summary.json"), "{text}");
    assert!(row(text, "explore#1").contains(" completed "), "{text}");
    let cols: Vec<String> = row(text, "explore#2")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(&cols[1..5], ["explore", "unfinished", "2", "1"], "{text}");
    assert!(text.contains("answer: (none"), "{text}");
}

/// How many times `needle` occurs in `text`.
fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// The page of run `id` in `ws`, written by `cadre runs show ID --html`.
async fn html_of(ws: &Path, id: &str, out: &Path) -> String {
    let file = out.join(format!("{id}.html"));
    let res = cadre_env(
        ws,
        &[],
        &["runs", "show", id, "--html", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(res.code, 0, "{}", res.stderr);
    std::fs::read_to_string(&file).unwrap()
}

fn assert_self_contained_and_escaped(html: &str) {
    for bad in ["<script src", "<link", "@import", "url("] {
        assert!(!html.contains(bad), "the page references {bad:?}");
    }
    assert!(
        !html.to_ascii_lowercase().contains("http"),
        "the page names a URL"
    );
    assert!(!html.contains("<img"), "the task went in as HTML");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
}

/// The fleet run's page, and the page of a copy whose transcripts are as the oldest cadre
/// wrote them: a file per agent, no times, no agent named on each line. Both written into
/// `out`.
async fn timed_and_untimed_pages(runs: &Runs, out: &Path) -> (String, String) {
    let ws = runs.dir.path();
    let html = html_of(ws, &runs.fleet, out).await;
    let old = copy_run(ws, &runs.fleet);
    let folder = old.path().join(".cadre/runs").join(&runs.fleet);
    let transcript = folder.join("transcript.jsonl");
    let mut files: std::collections::BTreeMap<String, String> = Default::default();
    for line in std::fs::read_to_string(&transcript).unwrap().lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let fields = v.as_object_mut().unwrap();
        fields.remove("t").unwrap();
        let agent = fields.remove("agent").unwrap();
        // `main/explore#2` → `main.explore-2.jsonl`
        let name = agent.as_str().unwrap().replace('/', ".").replace('#', "-") + ".jsonl";
        files
            .entry(name)
            .or_default()
            .push_str(&(v.to_string() + "\n"));
    }
    assert_eq!(files.len(), 4, "{files:?}");
    std::fs::remove_file(&transcript).unwrap();
    for (name, text) in files {
        std::fs::write(folder.join(name), text).unwrap();
    }
    let untimed = html_of(old.path(), &runs.fleet, out).await;
    (html, untimed)
}

#[tokio::test]
async fn the_html_timeline_has_a_lane_per_agent() {
    let runs = two_runs().await;
    let out = tempfile::tempdir().unwrap();
    let (html, untimed) = timed_and_untimed_pages(&runs, out.path()).await;
    assert_eq!(count(&html, "data-agent=\""), 4);
    for path in ["main", "main/explore#1", "main/explore#2", "main/plan#1"] {
        assert!(html.contains(&format!("data-agent=\"{path}\"")), "{path}");
    }
    // Every agent made 2 turns; the parent's 3 Task calls and one call per subagent.
    assert_eq!(count(&html, "class=\"bar turn\""), 8);
    assert_eq!(count(&html, "class=\"bar tool\""), 6);
    assert!(
        html.contains("data-mode=\"time\""),
        "transcripts carry times"
    );
    assert_self_contained_and_escaped(&html);

    // Transcripts of an older cadre, a file per agent without times: the same lanes, evenly
    // spaced.
    assert!(untimed.contains("data-mode=\"steps\""));
    assert!(untimed.contains("evenly spaced"));
    assert_eq!(count(&untimed, "data-agent=\""), 4);
    assert_eq!(count(&untimed, "class=\"bar turn\""), 8);
}

/// The page's script, run in a real browser, finishes without an error.
#[tokio::test]
#[cfg_attr(
    not(has_chromium),
    ignore = "needs Chromium: apt-get install chromium (as .ci/run does)"
)]
async fn the_html_timeline_renders_in_a_browser() {
    let Some(chromium) = prereq::find_or_skip(&prereq::CHROMIUM, "apt-get install chromium") else {
        return;
    };
    let runs = two_runs().await;
    let out = tempfile::tempdir().unwrap();
    let (html, untimed) = timed_and_untimed_pages(&runs, out.path()).await;
    for (name, page) in [("timed", &html), ("untimed", &untimed)] {
        let file = out.path().join(format!("{name}.html"));
        std::fs::write(&file, page).unwrap();
        let dom = dump_dom(&chromium, &file).await;
        assert!(dom.contains("data-ready=\"ok\""), "{name}: {dom}");
        assert_eq!(count(&dom, "data-agent=\""), 4, "{name}: {dom}");
        assert!(count(&dom, "class=\"tick\"") >= 2, "{name}: no time axis");
        assert!(!dom.contains("<img"), "{name}: the task became an element");
    }
}

#[tokio::test]
async fn runs_help_says_what_each_command_shows() {
    let dir = tempfile::tempdir().unwrap();
    let help = cadre_env(dir.path(), &[], &["runs", "--help"]).await;
    assert_eq!(help.code, 0);
    for want in ["list", "show", ".cadre/runs"] {
        assert!(help.stdout.contains(want), "{want}: {}", help.stdout);
    }
    let help = cadre_env(dir.path(), &[], &["runs", "show", "--help"]).await;
    for want in ["latest", "prefix", "--html", "unfinished", "self-contained"] {
        assert!(help.stdout.contains(want), "{want}: {}", help.stdout);
    }
    let help = cadre_env(dir.path(), &[], &["runs", "list", "--help"]).await;
    for want in ["--limit", "--json", "newest first", "unfinished"] {
        assert!(help.stdout.contains(want), "{want}: {}", help.stdout);
    }
}

/// At a narrow and a wide window the page does not scroll sideways, every axis label is
/// whole within the axis, and the thin bar under each lane label has a legend.
#[tokio::test]
#[cfg_attr(
    not(has_chromium),
    ignore = "needs Chromium: apt-get install chromium (as .ci/run does)"
)]
async fn the_html_timeline_fits_its_window_and_says_what_its_bars_are() {
    let Some(chromium) = prereq::find_or_skip(&prereq::CHROMIUM, "apt-get install chromium") else {
        return;
    };
    let runs = two_runs().await;
    let out = tempfile::tempdir().unwrap();
    let (html, untimed) = timed_and_untimed_pages(&runs, out.path()).await;
    assert!(
        html.contains("class=\"legend\"") && html.contains("the most any agent used"),
        "no legend for the token bar"
    );
    // Measured in the browser, after the page's own script, and written on the body.
    let probe = r#"<script>
(function () {
  var d = document.documentElement, axis = document.getElementById("axis").getBoundingClientRect();
  var ticks = document.querySelectorAll(".tick"), outside = 0;
  for (var i = 0; i < ticks.length; i++) {
    var r = ticks[i].getBoundingClientRect();
    if (r.right > axis.right + 0.5 || r.left < axis.left - 0.5) { outside++; }
  }
  var legend = document.querySelector(".legend");
  document.body.setAttribute("data-probe", "sideways=" + (d.scrollWidth > d.clientWidth) +
    " outside=" + outside + " ticks=" + ticks.length +
    " legend=" + (legend !== null && legend.getBoundingClientRect().height > 0));
})();
</script></body>"#;
    let mut wrong = Vec::new();
    for (name, page) in [("timed", &html), ("untimed", &untimed)] {
        for width in [820, 1400] {
            let file = out.path().join(format!("{name}-{width}.html"));
            std::fs::write(&file, page.replace("</body>", probe)).unwrap();
            let size = format!("--window-size={width},900");
            let dom = dump_dom_with(&chromium, &file, &[&size]).await;
            assert!(
                dom.contains("data-ready=\"ok\""),
                "{name} at {width}: {dom}"
            );
            let probe = dom
                .split("data-probe=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("(no probe)");
            if !(probe.starts_with("sideways=false outside=0 ") && probe.ends_with("legend=true")) {
                wrong.push(format!("{name} at {width}px: {probe}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The page's DOM after its script ran, as headless chromium serialises it.
pub(super) async fn dump_dom(chromium: &Path, page: &Path) -> String {
    dump_dom_with(chromium, page, &[]).await
}

/// [`dump_dom`] with more chromium flags (a window size).
async fn dump_dom_with(chromium: &Path, page: &Path, flags: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .args(flags)
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg("--dump-dom")
    .arg(format!("file://{}", page.display()))
    .env("HOME", profile.path())
    .timeout(std::time::Duration::from_secs(120));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !dom.is_empty(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(profile);
    dom
}
