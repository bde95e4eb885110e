//! Writes the shipped cassettes again from hand-written model replies (see `scripted.rs`).
//!
//! `cargo run -p cadre-examples --example author_cassettes`. Run it after changing a shipped
//! agent prompt or a tool description: replay refuses a cassette whose prompts differ.

use cadre_examples::scripted::{ScriptedModel, Turn};
use cadre_examples::{cassette, delegation, docs_qa, sample_project, team, weather};
use cadre_model::{Model, RecordingModel};
use serde_json::json;
use std::sync::Arc;

fn recorder(name: &str, script: ScriptedModel) -> anyhow::Result<Arc<dyn Model>> {
    let path = cassette(name);
    let _ = std::fs::remove_file(&path);
    Ok(Arc::new(RecordingModel::create(&path, Arc::new(script))?))
}

fn task(
    id: &str,
    kind: &str,
    description: &str,
    prompt: &str,
) -> (String, String, serde_json::Value) {
    (
        id.into(),
        "Task".into(),
        json!({"description": description, "prompt": prompt, "subagent_type": kind}),
    )
}

fn calls(list: &[(String, String, serde_json::Value)]) -> Vec<(&str, &str, serde_json::Value)> {
    list.iter()
        .map(|(i, n, v)| (i.as_str(), n.as_str(), v.clone()))
        .collect()
}

const EXPLORE_CLI: &str = "Find how `todo add` parses its arguments in this Python project: the parser, the add subcommand, and where the new item is built. Report file paths and line numbers.";
const EXPLORE_STORAGE: &str = "Find how todo stores its items: the file format, where the file lives, and how it is written. Report file paths and line numbers.";
const PLAN_PRIORITY: &str = "Plan how to add a `--priority` option (low, normal, high; default normal) to `todo add`, stored with each item. Study src/todo/cli.py and src/todo/storage.py and return numbered steps.";

/// The two explorers both multi-agent cassettes send (the CLI and the storage).
fn explorers(script: ScriptedModel) -> ScriptedModel {
    script
        .on(
            "explore",
            "parses its arguments",
            vec![
                Turn::tools("", vec![("toolu_e1", "grep", json!({"pattern": "add_parser|add_argument|items.append", "glob": "*.py"}))]),
                Turn::tools("", vec![("toolu_e2", "read_file", json!({"path": "src/todo/cli.py"}))]),
                Turn::text("Answer: arguments are parsed with argparse in src/todo/cli.py.\nEvidence:\n- build_parser() creates the `add` subparser (src/todo/cli.py:12) with one positional `text` (src/todo/cli.py:13).\n- main() builds the item dict {id, text, done} in `items.append(...)` (src/todo/cli.py:25) and saves it.\nGaps: none."),
            ],
        )
        .on(
            "explore",
            "stores its items",
            vec![
                Turn::tools("", vec![("toolu_s1", "read_file", json!({"path": "src/todo/storage.py"}))]),
                Turn::text("Answer: items are a JSON list in one file.\nEvidence:\n- path() is ~/.todo.json or $TODO_FILE (src/todo/storage.py:8-9).\n- load() returns [] when the file is missing (src/todo/storage.py:12-16).\n- save() writes a .tmp file and renames it over the old one (src/todo/storage.py:19-23).\nGaps: there is no schema version; extra keys in an item are kept as they are."),
            ],
        )
}

async fn author_weather() -> anyhow::Result<()> {
    let script = ScriptedModel::default().on(
        "weather",
        "Paris",
        vec![
            Turn::tools("", vec![("toolu_w1", "get_weather", json!({"city": "Paris"}))]),
            Turn::text("It is 9 °C and overcast in Paris, with a 70% chance of rain and a westerly wind. Wear a warm jumper under a waterproof jacket, long trousers and closed shoes — and take an umbrella."),
        ],
    );
    let scratch = tempfile::tempdir()?;
    let orchestrator = weather::orchestrator(recorder("weather", script)?, scratch.path())?;
    let outcome = weather::what_to_wear(&orchestrator, "Paris").await?;
    println!("weather: {} ({} turns)", outcome.stop, outcome.turns);
    Ok(())
}

async fn author_docs_qa() -> anyhow::Result<()> {
    let script = ScriptedModel::default().on(
        "docs",
        "Where does todo store",
        vec![
            Turn::tools("", vec![("toolu_d1", "grep", json!({"pattern": "TODO_FILE|stored", "case_insensitive": true}))]),
            Turn::tools(
                "The storage page looks right; I will also check the code.",
                vec![
                    ("toolu_d2", "read_file", json!({"path": "storage.md"})),
                    ("toolu_d3", "read_file", json!({"path": "../src/todo/storage.py"})),
                ],
            ),
            Turn::text("Items are stored in one JSON file, `~/.todo.json` by default. Yes, you can change the location: set the `TODO_FILE` environment variable to another path. Each save writes a temporary file and renames it over the old one, so a crash never leaves a half-written file. (Source: storage.md; the source code is outside the docs folder, so I could not read it.)"),
        ],
    );
    let outcome = docs_qa::ask(
        recorder("docs_qa", script)?,
        &sample_project().join("docs"),
        "Where does todo store its items, and can I change the location?",
    )
    .await?;
    println!("docs_qa: {} ({} turns)", outcome.stop, outcome.turns);
    Ok(())
}

async fn author_delegation() -> anyhow::Result<()> {
    let research = [
        task("toolu_m1", "explore", "Map the add command", EXPLORE_CLI),
        task("toolu_m2", "explore", "Map the storage", EXPLORE_STORAGE),
        task(
            "toolu_m3",
            "plan",
            "Plan the priority option",
            PLAN_PRIORITY,
        ),
    ];
    let code = [task(
        "toolu_m4",
        "code",
        "Implement --priority",
        "In src/todo/cli.py, add to the `add` subparser an option `--priority` with choices low, normal, high and default normal, and store it in the new item's dict as \"priority\" (in main(), where items.append builds the item). Change nothing else. Report what you changed.",
    )];
    let script = explorers(ScriptedModel::default())
        .on(
            "main",
            "--priority",
            vec![
                Turn::tools("I'll map the CLI and the storage and draft a plan at the same time.", calls(&research)),
                Turn::tools("The plan is clear and small; handing it to a coder.", calls(&code)),
                Turn::text("Done: `todo add` now takes `--priority low|normal|high` (default normal), and each new item stores it as `priority` in ~/.todo.json. Items saved before keep working: they simply have no priority field. Changed: src/todo/cli.py (the add subparser and the item built in main())."),
            ],
        )
        .on(
            "plan",
            "--priority",
            vec![
                Turn::tools("", vec![("toolu_p1", "list_files", json!({"pattern": "**/*.py"}))]),
                Turn::text("Goal: `todo add --priority low|normal|high` stores a priority with each item.\nSteps:\n1. src/todo/cli.py, build_parser(): add `--priority` to the add subparser with choices low/normal/high and default normal. Verify: `python3 -m todo add x --priority high`.\n2. src/todo/cli.py, main(): include `\"priority\": args.priority` in the dict passed to items.append. Verify: the saved JSON has the key.\n3. tests/test_todo.py: add a test that adds with --priority high and checks storage.load()[0][\"priority\"].\nRisks: items saved before have no priority; readers must use .get(\"priority\", \"normal\")."),
            ],
        )
        .on(
            "code",
            "--priority",
            vec![
                Turn::tools("", vec![("toolu_c1", "read_file", json!({"path": "src/todo/cli.py"}))]),
                Turn::tools(
                    "",
                    vec![(
                        "toolu_c2",
                        "edit_file",
                        json!({
                            "path": "src/todo/cli.py",
                            "old_string": "    add.add_argument(\"text\", help=\"what to do\")\n",
                            "new_string": "    add.add_argument(\"text\", help=\"what to do\")\n    add.add_argument(\n        \"--priority\", choices=[\"low\", \"normal\", \"high\"], default=\"normal\", help=\"how urgent it is\"\n    )\n"
                        }),
                    )],
                ),
                Turn::tools(
                    "",
                    vec![(
                        "toolu_c3",
                        "edit_file",
                        json!({
                            "path": "src/todo/cli.py",
                            "old_string": "items.append({\"id\": storage.next_id(items), \"text\": args.text, \"done\": False})",
                            "new_string": "items.append(\n            {\"id\": storage.next_id(items), \"text\": args.text, \"priority\": args.priority, \"done\": False}\n        )"
                        }),
                    )],
                ),
                Turn::text("Changed:\n- src/todo/cli.py: the add subparser has `--priority` (low, normal, high; default normal).\n- src/todo/cli.py: main() stores `priority` in each new item.\nVerified: both edits applied cleanly; I did not run the tests (no test command was given).\nNotes: older items have no priority key."),
            ],
        );
    let project = delegation::fresh_copy(&sample_project())?;
    let (outcome, summary) = delegation::run(
        recorder("delegation", script)?,
        project.path(),
        delegation::TASK,
        false,
    )
    .await?;
    println!(
        "delegation: {} ({} agents)",
        outcome.stop,
        summary.usage.agents.len()
    );
    Ok(())
}

/// The task of the README's offline quick start.
pub const QUICKSTART_TASK: &str = cadre_examples::QUICKSTART_TASK;

const PLAN_DUE: &str = "Plan how to add due dates to todo items: `todo add TEXT --due YYYY-MM-DD`, shown by `todo list`, with overdue items marked. Study src/todo/cli.py, src/todo/storage.py and the tests, and return numbered steps.";

/// The quick start runs through `cadre run --replay`, so it is authored with exactly what
/// the CLI loads for `-C examples/sample-project` (shipped and project agents and skills,
/// no user folders, default limits).
async fn author_quickstart() -> anyhow::Result<()> {
    use cadre_core::{Orchestrator, Registry, SkillSet};
    let research = [
        task("toolu_q1", "explore", "Map the storage", EXPLORE_STORAGE),
        task("toolu_q2", "explore", "Map the add command", EXPLORE_CLI),
        task("toolu_q3", "plan", "Plan due dates", PLAN_DUE),
    ];
    let script = explorers(ScriptedModel::default())
        .on(
            "main",
            "due dates",
            vec![
                Turn::tools("I'll look at the storage and the CLI and draft a plan, all at once.", calls(&research)),
                Turn::text("**How todo stores items.** All items live in one JSON file, `~/.todo.json` (or `$TODO_FILE`): a list of `{id, text, done}` objects (src/todo/storage.py). Every save writes a `.tmp` file and renames it over the old one, so a crash never leaves half a file. New ids are one more than the largest (storage.next_id).\n\n**Plan for due dates.**\n1. src/todo/cli.py: add `--due YYYY-MM-DD` to `todo add` (validate with `datetime.date.fromisoformat`) and store it as `due` in the new item.\n2. src/todo/cli.py: in `todo list`, print the due date and mark items whose date has passed as overdue.\n3. tests/test_todo.py: tests for a valid date, an invalid one (exit 2) and an overdue item.\nOlder items simply have no `due` key; read it with `.get(\"due\")`."),
            ],
        )
        .on(
            "plan",
            "due dates",
            vec![
                Turn::tools("", vec![("toolu_p1", "read_file", json!({"path": "tests/test_todo.py"}))]),
                Turn::text("Goal: items can carry a due date, and `todo list` shows it.\nSteps:\n1. src/todo/cli.py, build_parser(): `add.add_argument(\"--due\", type=datetime.date.fromisoformat)`; argparse then rejects bad dates with exit 2. Verify: `python3 -m todo add x --due 2026-13-01` fails.\n2. src/todo/cli.py, main(): store `args.due.isoformat()` as `due` when given.\n3. src/todo/cli.py, list: print the date after the text and `(overdue)` when it is before today.\n4. tests/test_todo.py: add tests for 1–3 next to test_add_then_list.\nRisks: comparing dates needs today's date; inject it for tests."),
            ],
        );
    let root = cadre_examples::sample_project();
    let registry = Registry::load(&Registry::standard_dirs(&root, None));
    let skills = SkillSet::load(&SkillSet::standard_dirs(&root, None));
    let orchestrator = Orchestrator::builder()
        .model(recorder("quickstart", script)?)
        .model_id(cadre_model::DEFAULT_MODEL)
        .workspace(&root)
        .registry(registry)
        .skills(Arc::new(skills))
        .build()?;
    let (outcome, summary) = orchestrator.run("main", QUICKSTART_TASK).await?;
    println!(
        "quickstart: {} ({} agents)",
        outcome.stop,
        summary.usage.agents.len()
    );
    Ok(())
}

const CODER_JOB: &str = "Add a `--due YYYY-MM-DD` option to `todo add` in src/todo/cli.py and store it with each new item as \"due\". Then start a reviewer (Task, subagent_type explore, name reviewer) to check the change, and fix what it reports. Answer with what you changed.";
const REVIEW_JOB: &str = "Review the `--due` change in src/todo/cli.py: is a bad date refused, and is the stored value plain JSON? Send your findings to the member named coder with SendMessage, then answer in one line.";

fn edit(id: &str, old: &str, new: &str) -> Turn {
    Turn::tools(
        "",
        vec![(
            id,
            "edit_file",
            json!({"path": "src/todo/cli.py", "old_string": old, "new_string": new}),
        )],
    )
}

/// The team: the lead starts the coder, the coder starts the reviewer, the reviewer sends
/// the coder its findings, the lead asks for a second look, the coder tells the lead.
async fn author_team() -> anyhow::Result<()> {
    let script = ScriptedModel::default()
        .on(
            "lead",
            "--due YYYY-MM-DD",
            vec![
                Turn::tools(
                    "I'll have a coder make the change; it gets a reviewer to check it.",
                    vec![(
                        "toolu_l1",
                        "Task",
                        json!({"description": "Implement --due", "prompt": CODER_JOB, "subagent_type": "coder", "name": "coder"}),
                    )],
                ),
                Turn::tools(
                    "The coder says it fixed the review finding; asking the reviewer for a second look.",
                    vec![(
                        "toolu_l2",
                        "SendMessage",
                        json!({"to": "reviewer", "message": "The coder says it fixed your finding. Check src/todo/cli.py again and tell the coder whether it is right now."}),
                    )],
                ),
                Turn::text("Waiting for the reviewer's verdict."),
                Turn::text("Done: `todo add` takes `--due YYYY-MM-DD`; argparse refuses a date that is not one (exit 2), and each new item stores it as `due` (an ISO date string, or null). The reviewer found that the first version accepted any text; the coder fixed it and the reviewer approved the fix. Changed: src/todo/cli.py."),
            ],
        )
        .on(
            "coder",
            "`--due YYYY-MM-DD` option",
            vec![
                Turn::tools("", vec![("toolu_c1", "read_file", json!({"path": "src/todo/cli.py"}))]),
                edit(
                    "toolu_c2",
                    "    add.add_argument(\"text\", help=\"what to do\")\n",
                    "    add.add_argument(\"text\", help=\"what to do\")\n    add.add_argument(\"--due\", help=\"when it is due (YYYY-MM-DD)\")\n",
                ),
                edit(
                    "toolu_c3",
                    "\"text\": args.text, \"done\": False}",
                    "\"text\": args.text, \"due\": args.due, \"done\": False}",
                ),
                Turn::tools(
                    "Asking a reviewer to check it.",
                    vec![(
                        "toolu_c4",
                        "Task",
                        json!({"description": "Review --due", "prompt": REVIEW_JOB, "subagent_type": "explore", "name": "reviewer"}),
                    )],
                ),
                edit(
                    "toolu_c5",
                    "import argparse\n",
                    "import argparse\nfrom datetime import date\n",
                ),
                edit(
                    "toolu_c6",
                    "add.add_argument(\"--due\", help=",
                    "add.add_argument(\"--due\", type=date.fromisoformat, help=",
                ),
                edit(
                    "toolu_c7",
                    "\"due\": args.due,",
                    "\"due\": args.due.isoformat() if args.due else None,",
                ),
                Turn::text("Changed:\n- src/todo/cli.py: `todo add` takes `--due YYYY-MM-DD`, parsed with date.fromisoformat, so argparse refuses a bad date.\n- src/todo/cli.py: each new item stores `due` as an ISO string (null without --due).\nReview: the reviewer's finding (any text was accepted) is fixed."),
                Turn::tools(
                    "",
                    vec![(
                        "toolu_c8",
                        "SendMessage",
                        json!({"to": "lead", "message": "The reviewer approved the fixed --due change: bad dates are refused and the value is stored as an ISO string."}),
                    )],
                ),
                Turn::text("Told the lead the review passed."),
            ],
        )
        .on(
            "explore",
            "Review the `--due` change",
            vec![
                Turn::tools("", vec![("toolu_r1", "read_file", json!({"path": "src/todo/cli.py"}))]),
                Turn::tools(
                    "",
                    vec![(
                        "toolu_r2",
                        "SendMessage",
                        json!({"to": "coder", "message": "One finding: `--due` accepts any text (src/todo/cli.py, the add subparser). Parse it with `type=date.fromisoformat` so argparse refuses a bad date, and store `args.due.isoformat()` so the JSON holds a plain string."}),
                    )],
                ),
                Turn::text("Sent my finding to coder: --due accepts any text."),
                Turn::tools("", vec![("toolu_r3", "read_file", json!({"path": "src/todo/cli.py"}))]),
                Turn::text("LGTM: --due is parsed with date.fromisoformat (src/todo/cli.py, the add subparser) and stored as an ISO string."),
            ],
        );
    let project = delegation::fresh_copy(&sample_project())?;
    let (outcome, summary) =
        team::run(recorder("team", script)?, project.path(), team::TASK, false).await?;
    println!(
        "team: {} ({} agents)",
        outcome.stop,
        summary.usage.agents.len()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    author_quickstart().await?;
    author_weather().await?;
    author_docs_qa().await?;
    author_delegation().await?;
    author_team().await?;
    Ok(())
}
