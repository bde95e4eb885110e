//! The errors of reading and checking a workflow, and the warnings of reading it liberally.

use crate::step::Step;
use std::path::PathBuf;

/// Something a liberal reading let pass that a strict check reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A key cadre does not know (a typo, or a setting of a later version), ignored.
    UnknownKey {
        /// Where it is, as a dotted path (`map.limit`).
        at: String,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownKey { at } => write!(f, "unknown key `{at}` ignored"),
        }
    }
}

/// Why a workflow cannot be read, or what a check found wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The workflow file could not be read.
    #[error("cannot read the workflow {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a workflow in YAML.
    #[error("{}: {source}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Where and why, as the YAML reader tells it.
        source: yaml_serde::Error,
    },
    /// No workflow file of that name or path.
    #[error("there is no workflow {name:?}: no such file, and none in {}", dir.display())]
    NotFound {
        /// The name or path given.
        name: String,
        /// The folder of saved workflows looked in.
        dir: PathBuf,
    },
    /// A liberal reading's warning, made a problem by a strict check.
    #[error("{warning}")]
    Strict {
        /// The warning.
        warning: Warning,
    },
    /// A field that must be given is missing or empty.
    #[error("`{field}` is missing or empty")]
    Missing {
        /// The field, as a dotted path.
        field: &'static str,
    },
    /// `map.concurrency: 0`: no item could ever start.
    #[error("`map.concurrency` must be at least 1")]
    ZeroConcurrency,
    /// A limit or budget of 0, which would stop every agent before it starts.
    #[error("`{field}` is 0: give at least 1, or leave it out for no limit")]
    ZeroLimit {
        /// The field, as a dotted path.
        field: &'static str,
    },
    /// A step names an agent type the project does not have.
    #[error("{step}: there is no agent type {agent:?}; the types are: {}", known.join(", "))]
    UnknownAgent {
        /// The step.
        step: Step,
        /// The type named.
        agent: String,
        /// The types there are.
        known: Vec<String>,
    },
    /// `map.output_schema` is not a JSON Schema the API accepts.
    #[error("`map.output_schema`: {why}")]
    BadSchema {
        /// The schema as written.
        schema: serde_json::Value,
        /// Why it cannot be an answer's schema.
        why: String,
    },
    /// `--arg NAME=VALUE` names an argument the workflow does not declare.
    #[error("unknown argument {name:?}: the workflow's `args` declare {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownArg {
        /// The name given.
        name: String,
        /// The names declared.
        known: Vec<String>,
    },
    /// An argument declared without a default was not given.
    #[error("the argument {name:?} has no default: give `--arg {name}=VALUE`")]
    MissingArg {
        /// Its name.
        name: String,
    },
    /// The input is neither named in the file nor given.
    #[error("no input: give `input:` in the file (a JSONL, CSV or JSON file, or a glob of files)")]
    NoInput,
    /// The input's format cannot be told from its name.
    #[error("cannot tell the format of the input {input:?} from its extension (.jsonl, .ndjson, .csv, .json) and it is no glob; give `format: jsonl|csv|json|files`")]
    UnknownFormat {
        /// The input as written.
        input: String,
    },
    /// `format:` names no format.
    #[error("unknown `format: {format}`; the formats are jsonl, csv, json and files")]
    BadFormat {
        /// The format as written.
        format: String,
    },
    /// The input file could not be opened.
    #[error("cannot open the input {}: {source}", path.display())]
    InputOpen {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The input's glob is not a valid pattern.
    #[error("the input glob {pattern:?} is not valid: {source}")]
    BadGlob {
        /// The pattern.
        pattern: String,
        /// Why.
        source: globset::Error,
    },
    /// The input has no items at all.
    #[error("the input {input:?} has no items")]
    NoItems {
        /// The input as written.
        input: String,
    },
    /// The first item is bad input.
    #[error("the first item: {0}")]
    FirstItem(#[from] crate::input::item::ItemError),
    /// A prompt template does not parse, or does not render for the first item.
    #[error(transparent)]
    Template(#[from] crate::template::TemplateError),
}
