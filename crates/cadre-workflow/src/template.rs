//! The prompt templates of a workflow's steps (minijinja, strict undefined): the map
//! prompt renders once per item (`item`, `key`, `position`, `args`), the reduce prompt once
//! (`results_path`, `args`). A value the template uses that is not there is an error that
//! names it and the item.

use crate::input::item::Item;
use crate::step::Step;
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde_json::{json, Map, Value};
use std::path::Path;

/// Why a prompt could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template does not parse.
    #[error("{step} prompt: {source:#}")]
    Syntax {
        /// Its step.
        step: Step,
        /// What the template engine says.
        source: minijinja::Error,
    },
    /// The template uses a value the item (or the arguments) does not have.
    #[error("{step} prompt: `{field}` is not defined{}", for_item(key.as_deref(), *line))]
    MissingField {
        /// Its step.
        step: Step,
        /// The value it uses, as written (`item.title`).
        field: String,
        /// The item's key (none for the reduce step).
        key: Option<String>,
        /// The item's line, if its format has lines.
        line: Option<u64>,
    },
    /// Rendering failed otherwise (a filter given a bad value, an undefined value the
    /// template reaches in a way not named by its text).
    #[error("{step} prompt{}: {source:#}", for_item(key.as_deref(), *line))]
    Render {
        /// Its step.
        step: Step,
        /// The item's key (none for the reduce step).
        key: Option<String>,
        /// The item's line, if its format has lines.
        line: Option<u64>,
        /// What the template engine says.
        source: minijinja::Error,
    },
}

/// ` for item "KEY" (line N)`, or nothing without a key.
fn for_item(key: Option<&str>, line: Option<u64>) -> String {
    match (key, line) {
        (Some(k), Some(l)) => format!(" for item {k:?} (line {l})"),
        (Some(k), None) => format!(" for item {k:?}"),
        _ => String::new(),
    }
}

/// The name of each step's template in the environment.
fn template_name(step: Step) -> &'static str {
    match step {
        Step::Map => "map",
        Step::Reduce => "reduce",
    }
}

/// A workflow's prompt templates, parsed once.
#[derive(Debug)]
pub struct Prompts {
    env: Environment<'static>,
    has_reduce: bool,
}

impl Prompts {
    /// Parses the map prompt and the reduce prompt, if any ([`crate::Workflow::prompts`]
    /// gives a workflow's).
    pub fn new(map: &str, reduce: Option<&str>) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let mut add = |step, text: &str| {
            env.add_template_owned(template_name(step), text.to_owned())
                .map_err(|source| TemplateError::Syntax { step, source })
        };
        add(Step::Map, map)?;
        if let Some(reduce) = reduce {
            add(Step::Reduce, reduce)?;
        }
        Ok(Self {
            env,
            has_reduce: reduce.is_some(),
        })
    }

    /// The map prompt for `item`, with the template's `args`.
    pub fn map(&self, item: &Item, args: &Map<String, Value>) -> Result<String, TemplateError> {
        let context = json!({
            "item": item.value,
            "key": item.key,
            "position": item.position,
            "args": args,
        });
        self.render(Step::Map, &context, Some(&item.key), item.line)
    }

    /// The reduce prompt, given where the results are; none when the workflow has no
    /// reduce step.
    pub fn reduce(
        &self,
        results_path: &Path,
        args: &Map<String, Value>,
    ) -> Option<Result<String, TemplateError>> {
        self.has_reduce.then(|| {
            let context = json!({
                "results_path": results_path.display().to_string(),
                "args": args,
            });
            self.render(Step::Reduce, &context, None, None)
        })
    }

    /// Renders `step`'s template over `context`; an undefined value is named.
    fn render(
        &self,
        step: Step,
        context: &Value,
        key: Option<&str>,
        line: Option<u64>,
    ) -> Result<String, TemplateError> {
        let render = |source| TemplateError::Render {
            step,
            key: key.map(str::to_owned),
            line,
            source,
        };
        let template = self.env.get_template(template_name(step)).map_err(render)?;
        let source = match template.render(context) {
            Ok(text) => return Ok(text),
            Err(e) => e,
        };
        if source.kind() != ErrorKind::UndefinedError {
            return Err(render(source));
        }
        let mut used: Vec<String> = template.undeclared_variables(true).into_iter().collect();
        used.sort();
        match used.into_iter().find(|path| !defined(context, path)) {
            Some(field) => Err(TemplateError::MissingField {
                step,
                field,
                key: key.map(str::to_owned),
                line,
            }),
            None => Err(render(source)),
        }
    }
}

/// Whether the dotted `path` (`item.title`) leads to a value in `context`.
fn defined(context: &Value, path: &str) -> bool {
    path.split('.')
        .try_fold(context, |node, part| match node {
            Value::Object(map) => map.get(part),
            Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
        .is_some()
}

#[cfg(test)]
mod tests;
