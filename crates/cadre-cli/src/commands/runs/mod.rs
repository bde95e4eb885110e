//! `cadre runs list|show|branches`: past runs of the workspace, listed, shown as an agent
//! tree or a timeline page, and the branches their isolated subagents made.

mod html;
mod view;

use crate::args::RunsCommand;
use crate::common::display::{clock, human_tokens, one_line, truncate};
use crate::common::exit::{CliError, Code, Result};
use crate::common::run_index::{self, RunRow};
use cadre_core::internal::TeamState;
use cadre_core::RunDir;
use serde_json::Value;
use std::path::Path;
use view::{find_runs, RunView};

/// How many ids an error message lists.
const IDS_SHOWN: usize = 5;

/// Runs one `cadre runs` command in the workspace at `root`.
pub async fn runs(cmd: RunsCommand, root: &Path) -> Result<Code> {
    let runs_dir = RunDir::runs_root(root);
    let find = || {
        find_runs(&runs_dir)
            .map_err(|e| CliError::failed_from(format!("cannot read {}", runs_dir.display()), e))
    };
    match cmd {
        RunsCommand::List { limit, json } => {
            let found = find()?;
            // Each run's row comes from its small index; a run without a current one is
            // read whole, once.
            let shown: Vec<RunRow> = found
                .iter()
                .take(limit)
                .map(|dir| run_index::row(dir, |dir| RunView::load(dir).row()))
                .collect();
            if json {
                let items: Vec<Value> = shown.iter().map(view::list_json).collect();
                outln!("{}", Value::Array(items));
            } else if shown.is_empty() {
                outln!(
                    "no runs yet in {}: each `cadre run TASK` in this folder records one",
                    runs_dir.display()
                );
            } else {
                print_list(&shown, found.len());
            }
            Ok(Code::Done)
        }
        RunsCommand::Show { run_id, html } => {
            let found = find()?;
            let found = resolve(&found, &run_id, &runs_dir)?;
            let run = RunView::load(found);
            match html {
                Some(file) => {
                    std::fs::write(&file, html::page(&run)).map_err(|e| {
                        CliError::failed_from(format!("cannot write {}", file.display()), e)
                    })?;
                    errln!(
                        "wrote the timeline of run {} ({} agents) to {}",
                        run.id,
                        run.agents.len(),
                        file.display()
                    );
                }
                None => {
                    print_show(&run, found.path());
                    // Outside a git repository there are no branches to list.
                    let branches = cadre_tools::worktree::branches(root, &run.id)
                        .await
                        .unwrap_or_default();
                    if !branches.is_empty() {
                        outln!("\nbranches made by its isolated subagents (review with `git diff HEAD...BRANCH`; `cadre runs branches {} --delete` removes them):", run.id);
                        for b in branches {
                            outln!("  {b}");
                        }
                    }
                }
            }
            Ok(Code::Done)
        }
        RunsCommand::Branches { run_id, delete } => {
            let found = find()?;
            let found = resolve(&found, &run_id, &runs_dir)?;
            let result = if delete {
                cadre_tools::worktree::delete_branches(root, found.id()).await
            } else {
                cadre_tools::worktree::branches(root, found.id()).await
            };
            let branches = result.map_err(CliError::invalid)?;
            match (delete, branches.is_empty()) {
                (_, true) => outln!("run {} has no branches", found.id()),
                (true, false) => outln!("deleted {}", branches.join(", ")),
                (false, false) => branches.iter().for_each(|b| outln!("{b}")),
            }
            Ok(Code::Done)
        }
    }
}

/// The run `wanted` names: an id, a unique prefix of one, or `latest`.
fn resolve<'a>(found: &'a [RunDir], wanted: &str, runs_dir: &Path) -> Result<&'a RunDir> {
    if found.is_empty() {
        return Err(CliError::config(format!(
            "there are no runs in {} yet: each `cadre run TASK` in this folder records one",
            runs_dir.display()
        )));
    }
    if wanted == "latest" {
        return Ok(&found[0]);
    }
    if let Some(exact) = found.iter().find(|f| f.id() == wanted) {
        return Ok(exact);
    }
    let matches: Vec<&RunDir> = found
        .iter()
        .filter(|f| f.id().starts_with(wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(CliError::config(format!(
            "there is no run {wanted:?} in {}; the newest are: {} (or say `latest`)",
            runs_dir.display(),
            ids(found.iter())
        ))),
        many => Err(CliError::config(format!(
            "{wanted:?} matches {} runs: {}; give more of the id",
            many.len(),
            ids(many.iter().copied())
        ))),
    }
}

fn ids<'a>(found: impl Iterator<Item = &'a RunDir>) -> String {
    let all: Vec<&str> = found.map(RunDir::id).collect();
    let mut text = all
        .iter()
        .take(IDS_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if all.len() > IDS_SHOWN {
        text.push_str(&format!(", … ({} in all)", all.len()));
    }
    text
}

fn time_column(ms: Option<u64>) -> String {
    ms.map_or("–".to_owned(), clock)
}

fn print_list(runs: &[RunRow], total: usize) {
    outln!(
        "{:<22} {:<16} {:<11} {:>6} {:>7} {:>6}  task",
        "run",
        "started (UTC)",
        "outcome",
        "agents",
        "tokens",
        "time"
    );
    for r in runs {
        outln!(
            "{:<22} {:<16} {:<11} {:>6} {:>7} {:>6}  {}",
            r.id,
            view::start_label(&r.id),
            r.outcome,
            r.agents,
            human_tokens(r.tokens),
            time_column(r.elapsed_ms),
            truncate(&one_line(&r.task), 48)
        );
    }
    if total > runs.len() {
        outln!(
            "… {} older run(s) not shown (--limit N shows more)",
            total - runs.len()
        );
    }
}

fn print_show(run: &RunView, dir: &Path) {
    outln!(
        "run {} · started {} UTC · {} · {} agents · {} tok · {}",
        run.id,
        run.started,
        run.outcome(),
        run.agents.len(),
        human_tokens(run.tokens()),
        time_column(run.elapsed_ms)
    );
    if run.stop.is_none() {
        outln!("this run has no summary.json: it was stopped before it ended (or is still running); what follows comes from its transcripts");
    }
    outln!();
    outln!(
        "{:<20} {:<9} {:<11} {:>5} {:>5} {:>7} {:>7} {:>6}  description",
        "agent",
        "type",
        "outcome",
        "turns",
        "tools",
        "input",
        "output",
        "time"
    );
    for a in &run.agents {
        // A team member goes by its member name too.
        let member = run
            .team
            .as_ref()
            .and_then(|t| t.member_at(&a.path))
            .filter(|m| m.name != a.path)
            .map(|m| format!(" ({})", m.name))
            .unwrap_or_default();
        let name = format!("{}{}{member}", "  ".repeat(a.depth()), a.name());
        let (input, output) = match a.usage {
            Some(u) => (human_tokens(u.total_input()), human_tokens(u.output_tokens)),
            None => ("–".to_owned(), "–".to_owned()),
        };
        outln!(
            "{:<20} {:<9} {:<11} {:>5} {:>5} {:>7} {:>7} {:>6}  {}",
            name,
            a.agent_type,
            a.outcome(),
            a.turns,
            a.tool_calls,
            input,
            output,
            time_column(a.elapsed_ms),
            truncate(&one_line(&a.description), 48)
        );
    }
    for a in &run.agents {
        if let Some(stop) = a.stop.as_ref().filter(|s| !s.is_done()) {
            outln!("{}: {}", a.path, stop.detail);
        }
        if let Some(file) = &a.result_file {
            outln!(
                "{}: its whole answer is in {}",
                a.path,
                dir.join(file).display()
            );
        }
    }
    if let Some(team) = &run.team {
        print_team(team);
    }
    outln!();
    outln!("task:");
    outln!("{}", indent(&run.task));
    outln!();
    match &run.answer {
        Some(answer) => {
            outln!("answer:");
            outln!("{}", indent(answer));
        }
        None => outln!("answer: (none: the run did not finish)"),
    }
}

/// The run's team: its members, every message sent and the shared task list.
fn print_team(team: &TeamState) {
    outln!();
    outln!("team members ({}):", team.members.len());
    outln!("  {:<16} {:<9} {:<20} started by", "name", "type", "agent");
    for m in team.members.values() {
        outln!(
            "  {:<16} {:<9} {:<20} {}",
            m.name,
            m.agent_type,
            m.path,
            m.starter.as_deref().unwrap_or("- (the primary agent)")
        );
    }
    outln!();
    if team.messages.is_empty() {
        outln!("messages: none");
    } else {
        outln!("messages ({}):", team.messages.len());
        outln!(
            "  {:<28} {:>4}  {:<11}  text",
            "from → to",
            "seq",
            "delivered"
        );
        for m in &team.messages {
            let delivered = if team.was_delivered(&m.to, &m.from, m.seq) {
                "delivered"
            } else {
                "undelivered"
            };
            // A notice is cadre's, sent on the member's behalf when it went idle.
            let kind = if m.notice { "[idle notice] " } else { "" };
            let first = m.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            outln!(
                "  {:<28} {:>4}  {:<11}  {}",
                truncate(&format!("{} → {}", m.from, m.to), 28),
                format!("#{}", m.seq),
                delivered,
                truncate(&format!("{kind}{}", first.trim()), 60)
            );
        }
    }
    outln!();
    if team.tasks.is_empty() {
        outln!("tasks: none");
    } else {
        outln!("tasks ({}):", team.tasks.len());
        outln!(
            "  {:>4}  {:<11}  {:<16} {:<12} subject",
            "id",
            "status",
            "owner",
            "blocked by"
        );
        for t in team.tasks.values() {
            let blocked: Vec<String> = t.blocked_by.iter().map(|b| format!("#{b}")).collect();
            let blocked = if blocked.is_empty() {
                "-".to_owned()
            } else {
                blocked.join(", ")
            };
            outln!(
                "  {:>4}  {:<11}  {:<16} {:<12} {}",
                format!("#{}", t.id),
                t.status.to_string(),
                t.owner.as_deref().unwrap_or("-"),
                truncate(&blocked, 12),
                truncate(&one_line(&t.subject), 60)
            );
        }
    }
}

fn indent(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_resolve_by_prefix_and_latest() {
        let dir = tempfile::tempdir().unwrap();
        let all: Vec<RunDir> = [
            "20261202-090000-7",
            "20261201-101500-1",
            "20261201-101500-2",
        ]
        .iter()
        .map(|id| RunDir::create_named(dir.path(), id).unwrap())
        .collect();
        let dir = Path::new(".cadre/runs");
        let id = |wanted| resolve(&all, wanted, dir).unwrap().id().to_owned();
        assert_eq!(id("latest"), "20261202-090000-7");
        assert_eq!(id("20261202"), "20261202-090000-7");
        assert_eq!(id("20261201-101500-2"), "20261201-101500-2");
        let ambiguous = resolve(&all, "20261201", dir).unwrap_err().to_string();
        assert!(ambiguous.contains("matches 2 runs"), "{ambiguous}");
        let unknown = resolve(&all, "1999", dir).unwrap_err().to_string();
        assert!(unknown.contains("20261202-090000-7"), "{unknown}");
        assert!(resolve(&[], "latest", dir).is_err());
    }
}
