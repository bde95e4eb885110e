//! The workflow file: what it holds, read liberally, checked strictly, and where saved
//! workflows live.

use crate::call_key::CallSpec;
use crate::error::{Warning, WorkflowError};
use crate::input::{InputFormat, InputSpec, Items};
use crate::limits::Limits;
use crate::numbers;
use crate::step::Step;
use crate::template::{Prompts, TemplateError};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a project keeps its saved workflows, from its root.
pub const WORKFLOWS_DIR: &str = ".cadre/workflows";

/// How many items run at once when `map.concurrency` is not given: as many as `cadre run`
/// lets model requests be in flight by default.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// A workflow: one agent call per item of an input (`map`), then optionally one agent
/// given every result (`reduce`), within a budget.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Workflow {
    /// Its name, as `cadre workflow list` shows it.
    #[serde(default)]
    pub name: String,
    /// What it does, in a line.
    #[serde(default)]
    pub description: String,
    /// The input: a file (JSONL, CSV, JSON array) or a glob of files, relative to the
    /// project root.
    #[serde(default)]
    pub input: Option<String>,
    /// The input's format, when its extension does not tell it.
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// The field that names an item; its position (0, 1, …) when not given.
    #[serde(default)]
    pub key: Option<String>,
    /// The arguments `--arg NAME=VALUE` may give, with their defaults (`null`: required).
    #[serde(default)]
    pub args: BTreeMap<String, Value>,
    /// The step run once per item.
    pub map: MapStep,
    /// The step run once at the end, given every result.
    #[serde(default)]
    pub reduce: Option<ReduceStep>,
    /// The budget of the whole workflow.
    #[serde(default)]
    pub budget: Budget,
}

/// The `map` step: which agent runs each item, with what prompt, answer and limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MapStep {
    /// The agent type (built-in, YAML or Claude Code file).
    #[serde(default)]
    pub agent: String,
    /// The prompt template (`{{ item.title }}`, `{{ args.x }}`).
    #[serde(default)]
    pub prompt: String,
    /// The JSON Schema each item's answer must be valid against.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Most items running at once.
    #[serde(default = "default_concurrency", deserialize_with = "numbers::usize_")]
    pub concurrency: usize,
    /// How many times a failed item is tried again.
    #[serde(default, deserialize_with = "numbers::u32_")]
    pub retries: u32,
    /// Each item's agent's limits.
    #[serde(default)]
    pub limits: Limits,
}

fn default_concurrency() -> usize {
    DEFAULT_CONCURRENCY
}

/// The `reduce` step: one agent given the results file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReduceStep {
    /// The agent type.
    #[serde(default)]
    pub agent: String,
    /// The prompt template (`{{ results_path }}`, `{{ args.x }}`).
    #[serde(default)]
    pub prompt: String,
}

/// The whole workflow's budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Budget {
    /// Most tokens every agent of the workflow may use together.
    #[serde(default, deserialize_with = "numbers::opt_u64")]
    pub tokens: Option<u64>,
}

/// The keys each part of the file may have, for the warnings of a liberal reading.
const KEYS: [(&str, &[&str]); 5] = [
    (
        "",
        &[
            "name",
            "description",
            "input",
            "format",
            "key",
            "args",
            "map",
            "reduce",
            "budget",
        ],
    ),
    (
        "map",
        &[
            "agent",
            "prompt",
            "output_schema",
            "concurrency",
            "retries",
            "limits",
        ],
    ),
    ("map.limits", &["tokens", "turns", "time"]),
    ("reduce", &["agent", "prompt"]),
    ("budget", &["tokens"]),
];

impl Workflow {
    /// Reads a workflow from `text` (the file `path`, for messages): unknown keys are
    /// ignored and returned as warnings.
    pub fn parse(text: &str, path: &Path) -> Result<(Self, Vec<Warning>), WorkflowError> {
        let yaml = |source| WorkflowError::Yaml {
            path: path.to_path_buf(),
            source,
        };
        let tree: yaml_serde::Value = yaml_serde::from_str(text).map_err(yaml)?;
        let workflow = yaml_serde::from_str(text).map_err(yaml)?;
        Ok((workflow, unknown_keys(&tree)))
    }

    /// Reads the workflow file at `path`, as [`Workflow::parse`] does.
    pub fn load(path: &Path) -> Result<(Self, Vec<Warning>), WorkflowError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkflowError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Every problem a strict check finds in the file itself (the `warnings` its reading
    /// gave among them): missing fields, a zero concurrency, an output schema the API
    /// would refuse, no input (`input` stands for a `--input` given instead) or one whose
    /// format cannot be told.
    pub fn problems(&self, warnings: &[Warning], input: Option<&str>) -> Vec<WorkflowError> {
        let mut problems: Vec<WorkflowError> = warnings
            .iter()
            .map(|w| WorkflowError::Strict { warning: w.clone() })
            .collect();
        let mut missing = |field, value: &str| {
            if value.trim().is_empty() {
                problems.push(WorkflowError::Missing { field });
            }
        };
        missing("name", &self.name);
        missing("map.agent", &self.map.agent);
        missing("map.prompt", &self.map.prompt);
        if let Some(reduce) = &self.reduce {
            missing("reduce.agent", &reduce.agent);
            missing("reduce.prompt", &reduce.prompt);
        }
        if self.map.concurrency == 0 {
            problems.push(WorkflowError::ZeroConcurrency);
        }
        let limits = &self.map.limits;
        let zero = [
            ("map.limits.tokens", limits.tokens == Some(0)),
            ("map.limits.turns", limits.turns == Some(0)),
            ("map.limits.time", limits.time.is_some_and(|t| t.is_zero())),
            ("budget.tokens", self.budget.tokens == Some(0)),
        ];
        problems.extend(
            zero.into_iter()
                .filter(|(_, is_zero)| *is_zero)
                .map(|(field, _)| WorkflowError::ZeroLimit { field }),
        );
        if let Some(schema) = &self.map.output_schema {
            if let Some(why) = cadre_core::internal::schema_problem(schema) {
                problems.push(WorkflowError::BadSchema {
                    schema: schema.clone(),
                    why,
                });
            }
        }
        if let Err(e) = self.input_spec(input, Path::new("")) {
            problems.push(e);
        }
        problems
    }

    /// The steps' prompt templates, parsed.
    pub fn prompts(&self) -> Result<Prompts, TemplateError> {
        Prompts::new(
            &self.map.prompt,
            self.reduce.as_ref().map(|r| r.prompt.as_str()),
        )
    }

    /// The steps' agent types that `registry` does not have.
    pub fn check_agents(&self, registry: &cadre_core::Registry) -> Vec<WorkflowError> {
        let steps = [(Step::Map, Some(self.map.agent.as_str()))];
        let reduce = [(Step::Reduce, self.reduce.as_ref().map(|r| r.agent.as_str()))];
        steps
            .into_iter()
            .chain(reduce)
            .filter_map(|(step, agent)| Some((step, agent?)))
            .filter(|(_, agent)| !agent.trim().is_empty() && registry.get(agent).is_none())
            .map(|(step, agent)| WorkflowError::UnknownAgent {
                step,
                agent: agent.to_owned(),
                known: registry.all().map(|s| s.name.clone()).collect(),
            })
            .collect()
    }

    /// The input to read: `input` if given (a `--input` at run time), else the file's,
    /// with its paths relative to `base` (the project root).
    pub fn input_spec(&self, input: Option<&str>, base: &Path) -> Result<InputSpec, WorkflowError> {
        let written = input
            .or(self.input.as_deref())
            .filter(|s| !s.trim().is_empty())
            .ok_or(WorkflowError::NoInput)?;
        InputSpec::new(written, self.format, base)
    }

    /// The items of the input ([`Workflow::input_spec`]), named by the file's `key`.
    pub fn items(&self, input: Option<&str>, base: &Path) -> Result<Items, WorkflowError> {
        Items::open(&self.input_spec(input, base)?, self.key.as_deref())
    }

    /// The map step's call for one item's rendered `prompt`, to `model`.
    pub fn map_call<'a>(&'a self, prompt: &'a str, model: &'a str) -> CallSpec<'a> {
        CallSpec {
            agent: &self.map.agent,
            prompt,
            output_schema: self.map.output_schema.as_ref(),
            limits: &self.map.limits,
            model,
        }
    }

    /// The template's `args`: the declared defaults, with `given` (`--arg NAME=VALUE`)
    /// over them. An argument not declared, or declared without a default and not given,
    /// is an error.
    pub fn args_with(
        &self,
        given: &[(String, String)],
    ) -> Result<Map<String, Value>, WorkflowError> {
        let mut args: Map<String, Value> = self
            .args
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, value) in given {
            if !self.args.contains_key(name) {
                return Err(WorkflowError::UnknownArg {
                    name: name.clone(),
                    known: self.args.keys().cloned().collect(),
                });
            }
            args.insert(name.clone(), Value::String(value.clone()));
        }
        if let Some((name, _)) = args.iter().find(|(_, v)| v.is_null()) {
            return Err(WorkflowError::MissingArg { name: name.clone() });
        }
        Ok(args)
    }
}

/// The keys of `tree` that no part of a workflow has.
fn unknown_keys(tree: &yaml_serde::Value) -> Vec<Warning> {
    let mut warnings = Vec::new();
    for (at, known) in KEYS {
        let node = at
            .split('.')
            .filter(|s| !s.is_empty())
            .try_fold(tree, |node, part| node.get(part));
        let Some(yaml_serde::Value::Mapping(map)) = node else {
            continue;
        };
        for key in map.keys() {
            let name = key
                .as_str()
                .map_or_else(|| format!("{key:?}"), str::to_owned);
            if !known.contains(&name.as_str()) {
                let at = if at.is_empty() {
                    name
                } else {
                    format!("{at}.{name}")
                };
                warnings.push(Warning::UnknownKey { at });
            }
        }
    }
    warnings
}

/// The workflow file `name` names: a path to a file, else `NAME.yaml` (or `.yml`) among the
/// saved workflows of the project at `root`, else the saved workflow whose `name:` it is.
pub fn find_workflow(root: &Path, name: &str) -> Result<PathBuf, WorkflowError> {
    let given = Path::new(name);
    if given.is_file() {
        return Ok(given.to_path_buf());
    }
    let dir = root.join(WORKFLOWS_DIR);
    let by_file = ["yaml", "yml"]
        .iter()
        .map(|ext| dir.join(format!("{name}.{ext}")))
        .find(|p| p.is_file());
    let by_name = || {
        saved_workflows(root)
            .into_iter()
            .find(|p| Workflow::load(p).is_ok_and(|(w, _)| w.name == name))
    };
    by_file.or_else(by_name).ok_or(WorkflowError::NotFound {
        name: name.to_owned(),
        dir,
    })
}

/// The saved workflow files of the project at `root` (`.cadre/workflows/*.yaml|yml`), by
/// name.
pub fn saved_workflows(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join(WORKFLOWS_DIR)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests;
