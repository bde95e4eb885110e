//! Reading cadre's own agent files, one YAML file an agent type, into an [`AgentSpec`],
//! with each problem at its file:line:column.

use crate::definitions::agent_hooks::read_hooks;
use crate::definitions::problem::{locate, Problem};
use crate::definitions::spec::{tools_for, AgentSpec, KNOWN_KEYS};
use crate::definitions::tools::SKILL_TOOL;
use crate::definitions::yaml::{self, Mapping};
use std::path::Path;

impl AgentSpec {
    /// Parses one YAML agent file. Text that is not strict YAML is read line by line, and
    /// unknown keys and tools are dropped, each with a warning; a shape error (a number
    /// where a list belongs, say) is an error. Every problem has its position; the spec
    /// comes back unless there was an error.
    pub fn parse_yaml(file: &Path, text: &str) -> (Option<Self>, Vec<Problem>) {
        let (mut map, mut problems) = match read_mapping(file, text) {
            Ok(read) => read,
            Err(problem) => return (None, vec![problem]),
        };
        let repaired = !problems.is_empty();
        let lists_skills = map.contains_key("skills");
        let unknown = drop_unknown_keys(file, text, &mut map, &mut problems);
        // Hooks are written as Claude Code writes them, read forgivingly on their own.
        let hooks_yaml = map.remove("hooks");
        let parsed = if !repaired && !unknown && hooks_yaml.is_none() {
            // From the text, so a type error has its exact position.
            yaml::from_str::<AgentSpec>(text).map_err(|e| yaml_problem(file, e, (0, 0)))
        } else {
            from_mapping(file, text, map)
        };
        let mut spec = match parsed {
            Ok(spec) => spec,
            Err(p) => {
                problems.push(p);
                return (None, problems);
            }
        };
        spec.source = Some(file.to_path_buf());
        if let Some(value) = hooks_yaml {
            spec.hooks = read_hooks(file, &value, &mut problems, &|needle| {
                locate(text, "hooks", needle)
            });
        }
        spec.repair(file, &mut problems, &|key, needle| {
            locate(text, key, needle)
        });
        if lists_skills {
            warn_skills_unloadable(file, text, &spec, &mut problems);
        }
        (Some(spec), problems)
    }
}

/// A reader's error as a problem of `file`, at its position (else `fallback`).
fn yaml_problem(file: &Path, e: yaml::Error, fallback: (usize, usize)) -> Problem {
    let pos = e.location().map_or(fallback, |l| (l.line(), l.column()));
    // The position is already in front of the message; drop the reader's copy.
    let msg = e.to_string();
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg,
    };
    Problem::at(file, pos, msg)
}

/// The file's keys and values, with what reading it repaired; the problem when it is no
/// mapping at all.
fn read_mapping(file: &Path, text: &str) -> Result<(Mapping, Vec<Problem>), Problem> {
    let (value, problems) = yaml::read(file, text, 1).map_err(|e| yaml_problem(file, e, (0, 0)))?;
    match value {
        yaml::Value::Mapping(map) => Ok((map, problems)),
        _ => Err(Problem::at(
            file,
            (1, 1),
            "expected a mapping of keys (name: …, description: …, prompt: …)",
        )),
    }
}

/// Drops the keys an agent file does not know, each with a warning, so one stray key does
/// not hide every other problem of the file, nor stop it loading; whether there was one.
fn drop_unknown_keys(
    file: &Path,
    text: &str,
    map: &mut Mapping,
    problems: &mut Vec<Problem>,
) -> bool {
    let mut unknown = false;
    map.retain(|key, _| {
        let name = key.as_str().unwrap_or_default();
        let known = KNOWN_KEYS.contains(&name);
        if !known {
            unknown = true;
            problems.push(Problem::warning_at(
                file,
                locate(text, name, None),
                format!(
                    "unknown key `{name}` ignored; the keys are: {}",
                    KNOWN_KEYS.join(", ")
                ),
            ));
        }
        known
    });
    unknown
}

/// The spec from a mapping read forgivingly; a value knows no positions, so an error is
/// placed at the field it names.
fn from_mapping(file: &Path, text: &str, map: Mapping) -> Result<AgentSpec, Problem> {
    serde_path_to_error::deserialize::<_, AgentSpec>(yaml::Value::Mapping(map)).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        let mut p = yaml_problem(file, inner, locate(text, &key, None));
        if key != "." {
            p.message = format!("{key}: {}", p.message);
        }
        p
    })
}

/// Skills are loaded with the `Skill` tool: listing them to a type that lacks it is a
/// mistake, told rather than silently widening its tools.
fn warn_skills_unloadable(file: &Path, text: &str, spec: &AgentSpec, problems: &mut Vec<Problem>) {
    let no_skill_tool = tools_for(spec, &[SKILL_TOOL]).is_empty();
    if !spec.skills.is_empty() && no_skill_tool {
        problems.push(Problem::warning_at(
            file,
            locate(text, "skills", None),
            "skills: lists skills, but tools: lacks `Skill`, so this type cannot load them; add Skill to tools (or set skills: [])",
        ));
    }
}
