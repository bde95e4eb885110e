//! `cadre runs show ID --html FILE`: one self-contained page (inline CSS and JS, nothing
//! fetched) with a timeline lane per agent, its turns and tool calls as bars.

use super::view::{AgentView, Call, RecordKind, RunView, COMPLETED};
use crate::common::display::{clock, human_tokens, truncate};
use cadre_core::{describe_call, AgentPath};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::SystemTime;

/// Tool-call rows drawn per lane; further concurrent calls share the last row.
const MAX_TOOL_ROWS: usize = 6;
/// The narrowest bar, in percent of the track, so instant steps stay clickable.
const MIN_WIDTH: f64 = 0.4;
/// How much of a tool input a bar's detail shows.
const INPUT_SHOWN: usize = 2000;

/// `text` safe inside HTML text and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Where every record of the run sits on the timeline, in percent of its width.
struct Scale {
    /// Real times (every record has one) or evenly spaced steps (transcripts without times).
    timed: bool,
    origin: Option<SystemTime>,
    /// Milliseconds (timed) or steps covered by the whole track; never 0.
    span: u64,
}

impl Scale {
    fn new(run: &RunView) -> Self {
        let records = || run.agents.iter().flat_map(|a| a.records.iter());
        let timed = records().next().is_some() && records().all(|r| r.t.is_some());
        if timed {
            let times: Vec<SystemTime> = records().filter_map(|r| r.t).collect();
            let origin = times.iter().min().copied();
            let end = times.iter().max().copied();
            let span = match (origin, end) {
                (Some(a), Some(b)) => millis_between(a, b),
                _ => 0,
            };
            Self {
                timed,
                origin,
                span: span.max(1),
            }
        } else {
            let longest = run.agents.iter().map(|a| a.records.len()).max();
            Self {
                timed,
                origin: None,
                span: u64::try_from(longest.unwrap_or(0).saturating_sub(1))
                    .unwrap_or(u64::MAX)
                    .max(1),
            }
        }
    }

    /// The position of `agent`'s record number `i`.
    fn units(&self, agent: &AgentView, i: usize) -> u64 {
        match (self.origin, agent.records.get(i).and_then(|r| r.t)) {
            (Some(origin), Some(t)) if self.timed => millis_between(origin, t),
            _ => u64::try_from(i).unwrap_or(u64::MAX),
        }
    }

    fn percent(&self, units: u64) -> f64 {
        units as f64 / self.span as f64 * 100.0
    }

    /// How long from `a` to `b`, for people.
    fn length(&self, a: u64, b: u64) -> String {
        let d = b.saturating_sub(a);
        if !self.timed {
            return format!("{d} step(s)");
        }
        match d {
            0..=999 => format!("{d} ms"),
            1_000..=59_999 => format!("{:.1} s", d as f64 / 1000.0),
            _ => clock(d),
        }
    }
}

fn millis_between(a: SystemTime, b: SystemTime) -> u64 {
    b.duration_since(a)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One bar on a lane.
struct Bar {
    class: &'static str,
    from: u64,
    to: u64,
    row: usize,
    title: String,
    detail: String,
}

/// The bars of one agent: a turn from the record before each response to the response,
/// and each tool call from the response that asked for it to the message with its result.
fn bars(agent: &AgentView, scale: &Scale) -> Vec<Bar> {
    let mut out = Vec::new();
    let mut pending: Vec<(Call, u64)> = Vec::new();
    let mut turn = 0u32;
    for (i, record) in agent.records.iter().enumerate() {
        let at = scale.units(agent, i);
        let before = scale.units(agent, i.saturating_sub(1));
        match &record.kind {
            RecordKind::Response { text, calls } => {
                turn += 1;
                let mut detail = format!(
                    "{} · turn {turn} · {}\n",
                    agent.path,
                    scale.length(before, at)
                );
                if !text.is_empty() {
                    detail.push_str(&truncate(text.trim(), INPUT_SHOWN));
                    detail.push('\n');
                }
                for c in calls {
                    let _ = writeln!(detail, "→ {}", describe_call(&c.name, &c.input));
                }
                out.push(Bar {
                    class: "turn",
                    from: before,
                    to: at,
                    row: 0,
                    title: format!("turn {turn} · {}", scale.length(before, at)),
                    detail,
                });
                pending.extend(calls.iter().cloned().map(|c| (c, at)));
            }
            RecordKind::Results { answered } => {
                for (row, (call, from)) in std::mem::take(&mut pending).into_iter().enumerate() {
                    let failed = answered.iter().any(|(id, err)| *id == call.id && *err);
                    out.push(tool_bar(
                        agent,
                        &call,
                        from,
                        at,
                        row,
                        if failed { "tool failed" } else { "tool" },
                        scale,
                    ));
                }
            }
            _ => {}
        }
    }
    // Calls that never got a result were still running when the run's last record was
    // written, so they reach the end of the timeline.
    for (row, (call, from)) in pending.into_iter().enumerate() {
        out.push(tool_bar(
            agent,
            &call,
            from,
            scale.span.max(from),
            row,
            "tool open",
            scale,
        ));
    }
    out
}

fn tool_bar(
    agent: &AgentView,
    call: &Call,
    from: u64,
    to: u64,
    row: usize,
    class: &'static str,
    scale: &Scale,
) -> Bar {
    let input = serde_json::to_string_pretty(&call.input).unwrap_or_default();
    let state = match class {
        "tool failed" => " · failed",
        "tool open" => " · no result (the run stopped)",
        _ => "",
    };
    Bar {
        class,
        from,
        to,
        row: row.min(MAX_TOOL_ROWS - 1),
        title: format!(
            "{} · {}{state}",
            describe_call(&call.name, &call.input),
            scale.length(from, to)
        ),
        detail: format!(
            "{} · {} · {}{state}\n{}",
            agent.path,
            call.name,
            scale.length(from, to),
            truncate(&input, INPUT_SHOWN)
        ),
    }
}

/// One team message, drawn as an arrow from its sender's lane to its recipient's.
struct Arrow {
    /// The sender's agent path.
    from: AgentPath,
    /// The recipient's agent path.
    to: AgentPath,
    /// When it was sent, in scale units.
    sent: u64,
    /// When the recipient was given it; the send time when it never was (or its transcript
    /// does not show it).
    got: u64,
    class: &'static str,
    title: String,
    detail: String,
}

/// The team's messages as arrows. The journal keeps no times, so the transcripts give
/// them: a message was sent by the response that asked for it (its `SendMessage` call;
/// for an idle notice, the response that ended the turn), and given to its recipient by
/// the record of the recipient's transcript that carries it.
fn arrows(run: &RunView, scale: &Scale) -> Vec<Arrow> {
    let Some(team) = &run.team else {
        return Vec::new();
    };
    let lane = |name: &str| {
        let member = team.members.get(name)?;
        run.agents.iter().find(|a| a.path == member.path)
    };
    // The idle notices seen so far per (sender, recipient): notices carry no number, so
    // the kth notice is the kth one the recipient's transcript shows.
    let mut notices: HashMap<(&str, &str), usize> = HashMap::new();
    let mut out = Vec::new();
    for m in &team.messages {
        let (Some(sender), Some(recipient)) = (lane(&m.from), lane(&m.to)) else {
            continue;
        };
        let (sent, got) = if m.notice {
            let k = notices.entry((&m.from, &m.to)).or_default();
            *k += 1;
            let turn = m.key.strip_prefix("idle@").and_then(|n| n.parse().ok());
            let sent = turn.and_then(|n| nth_response(sender, n));
            let mark = format!("<team-notice from=\"{}\">", m.from);
            (sent, nth_mention(recipient, &mark, *k))
        } else {
            // A message to every member is keyed by its call and its recipient.
            let call = m.key.split('/').next().unwrap_or_default();
            let sent = sender.records.iter().position(|r| {
                matches!(&r.kind, RecordKind::Response { calls, .. } if calls.iter().any(|c| c.id == call))
            });
            let mark = format!("<team-message from=\"{}\" seq=\"{}\">", m.from, m.seq);
            (sent, nth_mention(recipient, &mark, 1))
        };
        let Some(sent) = sent else {
            continue;
        };
        let sent = scale.units(sender, sent);
        let given = got.map(|i| scale.units(recipient, i));
        let delivered = team.was_delivered(&m.to, &m.from, m.seq);
        let state = match (delivered, given) {
            (true, Some(at)) => format!("delivered {} later", scale.length(sent, at)),
            (true, None) => "delivered".to_owned(),
            (false, _) => "not delivered: the run stopped first".to_owned(),
        };
        let what = if m.notice { "idle notice" } else { "message" };
        let first = m.text.lines().next().unwrap_or_default();
        out.push(Arrow {
            from: sender.path.clone(),
            to: recipient.path.clone(),
            sent,
            got: given.filter(|_| delivered).unwrap_or(sent),
            class: match (delivered, m.notice) {
                (false, _) => "undelivered",
                (true, true) => "notice",
                (true, false) => "delivered",
            },
            title: format!("{} → {} #{}: {}", m.from, m.to, m.seq, truncate(first, 80)),
            detail: format!(
                "{what} {} → {} #{} · {state}\n{} → {}\n\n{}",
                m.from,
                m.to,
                m.seq,
                sender.path,
                recipient.path,
                truncate(m.text.trim(), INPUT_SHOWN)
            ),
        });
    }
    out
}

/// The index of `agent`'s `n`th response (from 1).
fn nth_response(agent: &AgentView, n: usize) -> Option<usize> {
    agent
        .records
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r.kind, RecordKind::Response { .. }))
        .nth(n.checked_sub(1)?)
        .map(|(i, _)| i)
}

/// The index of the record of `agent` that holds the `k`th mention (from 1) of `mark` in
/// the messages it was given.
fn nth_mention(agent: &AgentView, mark: &str, k: usize) -> Option<usize> {
    let mut seen = 0;
    agent.records.iter().position(|r| match &r.kind {
        RecordKind::Prompt(text) => {
            seen += text.matches(mark).count();
            seen >= k
        }
        _ => false,
    })
}

/// The hidden list of arrows the page's script draws.
fn arrow_data(arrows: &[Arrow], scale: &Scale) -> String {
    if arrows.is_empty() {
        return String::new();
    }
    let mut html = String::from("<div id=\"messages\" hidden>\n");
    for a in arrows {
        let _ = writeln!(
            html,
            r#"<i class="msg {class}" data-from="{from}" data-to="{to}" data-sent="{sent:.3}" data-got="{got:.3}" title="{title}" data-detail="{detail}"></i>"#,
            class = a.class,
            from = escape(a.from.as_str()),
            to = escape(a.to.as_str()),
            sent = scale.percent(a.sent).min(100.0),
            got = scale.percent(a.got).min(100.0),
            title = escape(&a.title),
            detail = escape(&a.detail),
        );
    }
    html.push_str("</div>\n");
    html
}

/// The whole page for `run`.
pub fn page(run: &RunView) -> String {
    let scale = Scale::new(run);
    let most_tokens = run.agents.iter().map(AgentView::tokens).max().unwrap_or(0);
    let lanes = lanes(run, &scale, most_tokens);
    let time = run.elapsed_ms.map_or("–".to_owned(), clock);
    let answer = match &run.answer {
        Some(a) => escape(a.trim()),
        None => "(none: the run did not finish)".to_owned(),
    };
    let note = if scale.timed {
        ""
    } else {
        "<p class=\"note\">These transcripts carry no times: bars are evenly spaced steps, in order.</p>"
    };
    let arrows = arrows(run, &scale);
    let messages = arrow_data(&arrows, &scale);
    let arrows_note = if arrows.is_empty() {
        String::new()
    } else {
        format!(
            "<p class=\"note\">{} team message(s): each arrow leaves its sender at the turn that sent it and reaches its recipient when it was given it (dashed: never delivered; grey: cadre's notice that a member went idle).</p>",
            arrows.len()
        )
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cadre run {id}</title>
<style>{CSS}</style>
</head>
<body>
<header>
<h1>cadre run <code>{id}</code></h1>
<p class="task">{task}</p>
<p class="facts"><span class="outcome {outcome_class}">{outcome}</span> · started {started} UTC · {agents} agents · {tokens} tokens · {time}</p>
</header>
<main>
{note}
{arrows_note}
<p class="legend"><span class="key turn"></span>a model turn<span class="key tool"></span>a tool call<span class="key failed"></span>a failed tool call<span class="key tokens"></span>under a name: the agent's tokens, against the most any agent used</p>
<div class="timeline">
<svg id="arrows" aria-hidden="true"></svg>
{messages}<div class="row axisrow"><div class="label"></div><div id="axis" class="track" data-mode="{mode}" data-span="{span}"></div></div>
{lanes}</div>
<pre id="detail">Click a bar to see what happened.</pre>
<h2>Answer</h2>
<pre class="answer">{answer}</pre>
</main>
<script>{JS}</script>
</body>
</html>
"#,
        id = escape(&run.id),
        task = escape(&run.task),
        outcome = escape(run.outcome()),
        outcome_class = if run.outcome() == COMPLETED {
            "ok"
        } else {
            "bad"
        },
        started = escape(&run.started),
        agents = run.agents.len(),
        tokens = human_tokens(run.tokens()),
        time = escape(&time),
        mode = if scale.timed { "time" } else { "steps" },
        span = scale.span,
    )
}

/// Every agent's lane of the timeline, in the run's order.
fn lanes(run: &RunView, scale: &Scale, most_tokens: u64) -> String {
    let mut lanes = String::new();
    for agent in &run.agents {
        // A team member's lane is named by its member name too.
        let member = run
            .team
            .as_ref()
            .and_then(|t| t.member_at(&agent.path))
            .map(|m| m.name.as_str())
            .filter(|name| *name != agent.path);
        lanes.push_str(&lane(agent, member, scale, most_tokens));
    }
    lanes
}

fn lane(agent: &AgentView, member: Option<&str>, scale: &Scale, most_tokens: u64) -> String {
    let bars = bars(agent, scale);
    let rows = bars
        .iter()
        .filter(|b| b.class != "turn")
        .map(|b| b.row + 1)
        .max()
        .unwrap_or(0);
    // Tall enough for the two-line label, and for every row of tool calls.
    let height = (26 + rows * 12).max(46);
    let tokens = agent.tokens();
    let share = (tokens as f64 / most_tokens.max(1) as f64 * 100.0).max(0.0);
    let tokens_text = match agent.usage {
        Some(u) => format!(
            "{} in · {} out",
            human_tokens(u.total_input()),
            human_tokens(u.output_tokens)
        ),
        None => "tokens unknown".to_owned(),
    };
    let mut html = format!(
        r#"<div class="row lane" data-agent="{path}" style="height:{height}px">
<div class="label" style="padding-left:{indent}px" title="{description}"><span class="path">{path}</span> <span class="type">{agent_type}</span>{member}<br><span class="meta"><span class="outcome {outcome_class}">{outcome}</span> · {turns} turns · {tools} tools · {tokens_text}</span><div class="token-bar" style="width:{share:.1}%" title="{tokens_human} tokens: {share:.0}% of the most any agent used"></div></div>
<div class="track">
"#,
        path = escape(agent.path.as_str()),
        indent = 6 + agent.depth() * 14,
        description = escape(&agent.description),
        agent_type = escape(&agent.agent_type),
        member = member
            .map(|m| format!(r#" <span class="member">· {}</span>"#, escape(m)))
            .unwrap_or_default(),
        outcome = escape(agent.outcome()),
        outcome_class = match agent.outcome() {
            COMPLETED => "ok",
            "unfinished" => "open",
            _ => "bad",
        },
        turns = agent.turns,
        tools = agent.tool_calls,
        tokens_human = human_tokens(tokens),
    );
    if !agent.records.is_empty() {
        let first = scale.units(agent, 0);
        let last = scale.units(agent, agent.records.len() - 1);
        let _ = writeln!(
            html,
            r#"<div class="life" style="{}"></div>"#,
            position(scale, first, last)
        );
    }
    for bar in &bars {
        let top = if bar.class == "turn" {
            4
        } else {
            24 + bar.row * 12
        };
        let _ = writeln!(
            html,
            r#"<div class="bar {class}" tabindex="0" style="{pos};top:{top}px" title="{title}" data-detail="{detail}"></div>"#,
            class = bar.class,
            pos = position(scale, bar.from, bar.to),
            title = escape(&bar.title),
            detail = escape(&bar.detail),
        );
    }
    html.push_str("</div>\n</div>\n");
    html
}

fn position(scale: &Scale, from: u64, to: u64) -> String {
    let left = scale.percent(from).min(100.0 - MIN_WIDTH);
    let width = (scale.percent(to) - scale.percent(from)).max(MIN_WIDTH);
    format!("left:{left:.3}%;width:{width:.3}%")
}

const CSS: &str = r#"
:root { --bg:#fbfbfa; --fg:#1f2328; --muted:#6a737d; --line:#e3e3e0; --turn:#4b7bd1; --tool:#e0953a; --bad:#c9423a; --ok:#2f8a4c; --open:#8c6bb1; --msg:#1a9a8a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--fg); }
header { padding: 16px 24px; border-bottom: 1px solid var(--line); background: #fff; }
h1 { font-size: 18px; margin: 0 0 6px; }
h2 { font-size: 15px; margin: 20px 0 6px; }
.task { margin: 0 0 6px; white-space: pre-wrap; max-height: 8em; overflow: auto; }
.facts { margin: 0; color: var(--muted); }
main { padding: 12px 24px 32px; }
.note { color: var(--muted); }
.timeline { border: 1px solid var(--line); background: #fff; position: relative; }
.member { color: var(--msg); font-weight: 600; }
#arrows { position: absolute; left: 0; top: 0; overflow: visible; pointer-events: none; z-index: 3; }
#arrows .arrow { cursor: pointer; outline: none; }
#arrows .hit { stroke: transparent; stroke-width: 9; pointer-events: stroke; }
#arrows .shaft { stroke: var(--msg); stroke-width: 1.5; }
#arrows .head { fill: var(--msg); pointer-events: fill; }
#arrows .notice .shaft { stroke: var(--muted); }
#arrows .notice .head { fill: var(--muted); }
#arrows .undelivered .shaft { stroke: var(--bad); stroke-dasharray: 4 3; }
#arrows .undelivered .head { fill: var(--bad); }
#arrows .arrow:hover .shaft, #arrows .arrow:focus .shaft, #arrows .arrow.selected .shaft { stroke-width: 3; }
.row { display: flex; border-bottom: 1px solid var(--line); }
.row:last-child { border-bottom: 0; }
.label { flex: 0 0 330px; padding: 3px 8px; border-right: 1px solid var(--line); overflow: hidden; white-space: nowrap; text-overflow: ellipsis; position: relative; }
.path { font-family: ui-monospace, monospace; font-weight: 600; }
.type { color: var(--muted); }
.meta { color: var(--muted); font-size: 12px; }
.token-bar { position: absolute; left: 0; bottom: 0; height: 3px; background: var(--turn); opacity: .5; }
.track { position: relative; flex: 1 1 auto; min-width: 300px; }
.axisrow { height: 22px; }
.tick { position: absolute; top: 0; bottom: 0; border-left: 1px solid var(--line); padding-left: 3px; font-size: 11px; color: var(--muted); white-space: nowrap; }
.tick.end { border-left: 0; border-right: 1px solid var(--line); padding: 0 3px 0 0; }
.legend { color: var(--muted); font-size: 12px; margin: 0 0 8px; }
.legend .key { display: inline-block; vertical-align: middle; width: 18px; border-radius: 2px; margin: 0 4px 0 10px; }
.legend .key:first-child { margin-left: 0; }
.legend .key.turn { height: 10px; background: var(--turn); }
.legend .key.tool { height: 7px; background: var(--tool); }
.legend .key.failed { height: 7px; background: var(--bad); }
.legend .key.tokens { height: 3px; background: var(--turn); opacity: .5; }
.life { position: absolute; top: 2px; bottom: 2px; background: #f1f3f6; border-radius: 3px; }
.bar { position: absolute; height: 16px; border-radius: 3px; cursor: pointer; outline: none; }
.bar.tool, .bar.tool.failed, .bar.tool.open { height: 9px; }
.bar.turn { background: var(--turn); }
.bar.tool { background: var(--tool); }
.bar.tool.failed { background: var(--bad); }
.bar.tool.open { background: repeating-linear-gradient(45deg, var(--tool), var(--tool) 4px, #fff 4px, #fff 6px); }
.bar:hover, .bar:focus, .bar.selected { box-shadow: 0 0 0 2px var(--fg); z-index: 2; }
.outcome.ok { color: var(--ok); }
.outcome.bad { color: var(--bad); }
.outcome.open { color: var(--open); }
#detail, .answer { background: #fff; border: 1px solid var(--line); padding: 10px 12px; white-space: pre-wrap; word-break: break-word; max-height: 24em; overflow: auto; }
#detail { margin-top: 12px; }
"#;

/// Draws the time axis and shows a bar's details on click or Enter; text goes in with
/// `textContent` only, so nothing from a transcript is ever parsed as HTML. Sets
/// `data-ready` on the body: "ok", or the first script error.
const JS: &str = r##"
(function () {
  "use strict";
  var failure = null;
  window.addEventListener("error", function (e) {
    failure = failure || String(e.message);
    document.body.setAttribute("data-ready", "error: " + failure);
  });
  var detail = document.getElementById("detail");
  function show(bar) {
    var selected = document.querySelectorAll(".selected");
    for (var i = 0; i < selected.length; i++) { selected[i].classList.remove("selected"); }
    bar.classList.add("selected");
    detail.textContent = bar.getAttribute("data-detail");
  }
  function clickable(el) {
    el.addEventListener("click", function () { show(el); });
    el.addEventListener("keydown", function (e) { if (e.key === "Enter") { show(el); } });
  }
  var bars = document.querySelectorAll(".bar");
  for (var i = 0; i < bars.length; i++) { clickable(bars[i]); }
  var axis = document.getElementById("axis");
  var span = Number(axis.getAttribute("data-span")) || 1;
  var timed = axis.getAttribute("data-mode") === "time";
  var steps = timed
    ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000, 3600000, 7200000]
    : [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
  var step = steps[steps.length - 1];
  for (var s = 0; s < steps.length; s++) { if (span / steps[s] <= 8) { step = steps[s]; break; } }
  function label(v) {
    if (!timed) { return "step " + v; }
    if (v < 1000) { return v + " ms"; }
    if (v < 60000) { return (v / 1000).toFixed(v % 1000 === 0 ? 0 : 1) + " s"; }
    var m = Math.floor(v / 60000), sec = Math.floor(v % 60000 / 1000);
    return m + ":" + (sec < 10 ? "0" : "") + sec;
  }
  for (var v = 0; v <= span; v += step) {
    var tick = document.createElement("div");
    tick.className = "tick";
    tick.setAttribute("data-at", v / span * 100);
    tick.textContent = label(v);
    axis.appendChild(tick);
  }
  // A label that would run past the axis's end (and make the page scroll sideways) is
  // written before its line instead of after it.
  function placeTicks() {
    var ticks = axis.querySelectorAll(".tick");
    for (var i = 0; i < ticks.length; i++) {
      var t = ticks[i], at = Number(t.getAttribute("data-at"));
      t.className = "tick";
      t.style.right = "";
      t.style.left = at + "%";
      if (t.offsetLeft + t.offsetWidth > axis.clientWidth) {
        t.className = "tick end";
        t.style.left = "";
        t.style.right = (100 - at) + "%";
      }
    }
  }
  placeTicks();
  window.addEventListener("resize", placeTicks);
  // Team messages: an arrow from the sender's lane at the time it was sent to the
  // recipient's lane at the time it was given, measured from the laid-out page.
  var svg = document.getElementById("arrows");
  var timeline = document.querySelector(".timeline");
  var msgs = document.querySelectorAll("#messages .msg");
  function laneOf(path) {
    var lanes = document.querySelectorAll(".lane");
    for (var i = 0; i < lanes.length; i++) {
      if (lanes[i].getAttribute("data-agent") === path) { return lanes[i]; }
    }
    return null;
  }
  function point(lane, percent, box) {
    var row = lane.getBoundingClientRect();
    var track = lane.querySelector(".track").getBoundingClientRect();
    return { x: track.left - box.left + track.width * percent / 100, y: row.top - box.top + 12 };
  }
  function el(name, attrs, parent) {
    var e = document.createElementNS(svg.namespaceURI, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    parent.appendChild(e);
    return e;
  }
  function draw() {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var box = timeline.getBoundingClientRect();
    svg.setAttribute("width", box.width);
    svg.setAttribute("height", box.height);
    for (var i = 0; i < msgs.length; i++) {
      var m = msgs[i];
      var from = laneOf(m.getAttribute("data-from")), to = laneOf(m.getAttribute("data-to"));
      if (!from || !to) { continue; }
      var a = point(from, Number(m.getAttribute("data-sent")), box);
      var b = point(to, Number(m.getAttribute("data-got")), box);
      var dx = b.x - a.x, dy = b.y - a.y, len = Math.sqrt(dx * dx + dy * dy) || 1;
      var ux = dx / len, uy = dy / len;
      var g = el("g", { "class": "arrow " + m.className.replace("msg ", ""), "tabindex": "0",
                        "data-detail": m.getAttribute("data-detail") }, svg);
      el("title", {}, g).textContent = m.getAttribute("title");
      var line = { x1: a.x, y1: a.y, x2: b.x - ux * 7, y2: b.y - uy * 7 };
      line["class"] = "hit";
      el("line", line, g);
      line["class"] = "shaft";
      el("line", line, g);
      var bx = b.x - ux * 8, by = b.y - uy * 8;
      el("polygon", { "class": "head", "points": b.x + "," + b.y + " " +
        (bx - uy * 4) + "," + (by + ux * 4) + " " + (bx + uy * 4) + "," + (by - ux * 4) }, g);
      clickable(g);
    }
  }
  if (msgs.length > 0) {
    draw();
    window.addEventListener("resize", draw);
  }
  if (failure === null) { document.body.setAttribute("data-ready", "ok"); }
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_s_swatches_are_styled_only_as_swatches() {
        // A rule for a bare class the legend's keys also carry would place them as it
        // places what it is for (the token bar sits at its row's bottom-left, absolutely).
        let legend = "turn tool failed tokens";
        for class in legend.split(' ') {
            for line in CSS.lines() {
                let selector = line.split('{').next().unwrap_or_default().trim();
                let bare = selector.split(',').any(|s| s.trim() == format!(".{class}"));
                assert!(!bare, "{class:?} has a rule of its own: {line}");
            }
        }
    }
    use crate::commands::runs::view::{Record, Stop};

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            escape(r#"<img src=x onerror="a('b')">&"#),
            "&lt;img src=x onerror=&quot;a(&#39;b&#39;)&quot;&gt;&amp;"
        );
    }

    fn agent(path: &str, kinds: Vec<RecordKind>) -> AgentView {
        AgentView {
            path: path.into(),
            agent_type: "explore".to_owned(),
            stop: Some(Stop {
                label: COMPLETED.into(),
                detail: "finished".into(),
            }),
            records: kinds
                .into_iter()
                .map(|kind| Record { t: None, kind })
                .collect(),
            ..AgentView::default()
        }
    }

    #[test]
    fn transcripts_without_times_get_evenly_spaced_bars() {
        let call = Call {
            id: "c1".into(),
            name: "grep".into(),
            input: serde_json::json!({"pattern": "</script><script>alert(1)</script>"}),
        };
        let a = agent(
            "main",
            vec![
                RecordKind::Agent,
                RecordKind::Prompt("go".into()),
                RecordKind::Response {
                    text: String::new(),
                    calls: vec![call],
                },
                RecordKind::Results {
                    answered: vec![("c1".into(), false)],
                },
                RecordKind::Response {
                    text: "done".into(),
                    calls: vec![],
                },
                RecordKind::Outcome,
            ],
        );
        let run = RunView {
            id: "20261201-101500-1".into(),
            started: "2026-12-01 10:15".into(),
            task: "<b>task</b>".into(),
            answer: Some("fine".into()),
            stop: a.stop.clone(),
            elapsed_ms: None,
            agents: vec![a],
            engine: false,
            team: None,
        };
        let scale = Scale::new(&run);
        assert!(!scale.timed);
        assert_eq!(scale.span, 5);
        let bars = bars(&run.agents[0], &scale);
        let spans: Vec<(&str, u64, u64)> = bars.iter().map(|b| (b.class, b.from, b.to)).collect();
        assert_eq!(spans, [("turn", 1, 2), ("tool", 2, 3), ("turn", 3, 4)]);
        // A call the run never answered lasts to the end of the timeline.
        let mut open = agent(
            "main/explore#1",
            vec![
                RecordKind::Agent,
                RecordKind::Prompt("look".into()),
                RecordKind::Response {
                    text: String::new(),
                    calls: vec![Call {
                        id: "c2".into(),
                        name: "bash".into(),
                        input: serde_json::json!({"command": "sleep 100"}),
                    }],
                },
            ],
        );
        open.stop = None;
        let spans: Vec<(&str, u64, u64)> = super::bars(&open, &scale)
            .iter()
            .map(|b| (b.class, b.from, b.to))
            .collect();
        assert_eq!(spans, [("turn", 1, 2), ("tool open", 2, 5)]);
        let html = page(&run);
        assert!(!html.contains("<b>task"), "the task went in unescaped");
        assert!(
            !html.contains("<script>alert"),
            "a tool input went in unescaped"
        );
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains("evenly spaced"));
    }
}
