//! The registry of agent types: the shipped ones, then each agents folder (nearer wins).
//! A folder may hold cadre's YAML files (`*.yaml`, `*.yml`) and Claude Code agent files
//! (`*.md`, see [`crate::definitions::claude_agents`]).

pub use crate::definitions::spec::tools_for;
use crate::definitions::spec::{AgentSpec, Problem};
pub use crate::definitions::tools::{resolve_tool_name, SKILL_TOOL, TASK_TOOL, WORKFLOW_TOOL};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The agent types shipped with cadre, compiled in so `cadre` works in any folder.
const SHIPPED: [(&str, &str); 5] = [
    (
        "agents/main.yaml",
        include_str!("../../../../agents/main.yaml"),
    ),
    (
        "agents/lead.yaml",
        include_str!("../../../../agents/lead.yaml"),
    ),
    (
        "agents/explore.yaml",
        include_str!("../../../../agents/explore.yaml"),
    ),
    (
        "agents/plan.yaml",
        include_str!("../../../../agents/plan.yaml"),
    ),
    (
        "agents/code.yaml",
        include_str!("../../../../agents/code.yaml"),
    ),
];

/// Every agent type known to a run, and the problems met loading them.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    specs: BTreeMap<String, AgentSpec>,
    problems: Vec<Problem>,
}

impl Registry {
    /// Only the shipped agent types.
    pub fn shipped() -> Self {
        let mut reg = Self::default();
        for (name, text) in SHIPPED {
            reg.add_text(Path::new(name), text, &mut BTreeMap::new());
        }
        // They are compiled in, not read from a file (a project's own `agents/` is one).
        for spec in reg.specs.values_mut() {
            spec.source = None;
        }
        reg
    }

    /// The shipped types, then every `*.yaml`/`*.yml`/`*.md` file of each folder in `dirs`, in
    /// order: a later folder's type replaces an earlier one of the same name. Missing
    /// folders are skipped; bad files are recorded as problems and skipped.
    pub fn load(dirs: &[PathBuf]) -> Self {
        let mut reg = Self::shipped();
        reg.load_dirs(dirs);
        reg
    }

    /// Adds the types of each folder in `dirs`, as [`Self::load`] does.
    pub fn load_dirs(&mut self, dirs: &[PathBuf]) {
        for dir in distinct_dirs(dirs) {
            self.load_dir(dir);
        }
    }

    /// The folders searched for a project at `root`, farthest first: the user's Claude Code
    /// agents (`~/.claude/agents`) and `~/.config/cadre/agents`, then the project's
    /// `.claude/agents/`, `agents/` and `.cadre/agents/`. At each level cadre's own folders
    /// are nearer than Claude Code's, and the project's are nearer than the user's.
    pub fn standard_dirs(root: &Path, home: Option<&Path>) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(home) = home {
            dirs.push(home.join(".claude/agents"));
            dirs.push(home.join(".config/cadre/agents"));
        }
        dirs.push(root.join(".claude/agents"));
        dirs.push(root.join("agents"));
        dirs.push(root.join(".cadre/agents"));
        dirs
    }

    fn load_dir(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "md")
            })
            .collect();
        files.sort();
        // Names seen in this folder: a duplicate inside one folder is a mistake, not an override.
        let mut here = BTreeMap::new();
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => self.add_text(&file, &text, &mut here),
                Err(e) => {
                    self.problems
                        .push(Problem::at(&file, (0, 0), format!("cannot read: {e}")))
                }
            }
        }
    }

    fn add_text(&mut self, file: &Path, text: &str, here: &mut BTreeMap<String, PathBuf>) {
        let (spec, problems) = if file.extension().is_some_and(|x| x == "md") {
            crate::definitions::claude_agents::parse(file, text)
        } else {
            let (spec, mut problems) = AgentSpec::parse_yaml(file, text);
            if let Some(spec) = &spec {
                problems.extend(spec.validate(file, text, &|t| resolve_tool_name(t).is_some()));
            }
            (spec, problems)
        };
        // Warnings (a dropped Claude Code tool, say) are reported but do not reject the file.
        let fatal = problems.iter().any(|p| !p.warning);
        self.problems.extend(problems);
        let Some(spec) = spec else {
            return;
        };
        if let Some(first) = here.get(&spec.name) {
            let pos = crate::definitions::spec::locate(text, "name", Some(&spec.name));
            self.problems.push(Problem::at(
                file,
                pos,
                format!(
                    "duplicate agent name {:?}: {} already defines it",
                    spec.name,
                    first.display()
                ),
            ));
            return;
        }
        if !fatal {
            here.insert(spec.name.clone(), file.to_path_buf());
            self.specs.insert(spec.name.clone(), spec);
        }
    }

    /// The type called `name`.
    pub fn get(&self, name: &str) -> Option<&AgentSpec> {
        self.specs.get(name)
    }

    /// Every type, by name.
    pub fn all(&self) -> impl Iterator<Item = &AgentSpec> {
        self.specs.values()
    }

    /// The types `Task` may spawn.
    pub fn subagents(&self) -> impl Iterator<Item = &AgentSpec> {
        self.specs.values().filter(|s| s.mode.is_subagent())
    }

    /// What went wrong while loading, in file order.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The problems of agent files refused because a hook entry of theirs cannot load: a
    /// run must not start without the guards they hold.
    pub fn refused_hooks(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(|p| {
            !p.warning
                && p.message
                    .starts_with(crate::definitions::hooks::HOOK_REFUSED)
        })
    }

    /// Adds or replaces a type directly (for library callers and tests).
    pub fn insert(&mut self, spec: AgentSpec) {
        self.specs.insert(spec.name.clone(), spec);
    }
}

/// `dirs` with each folder kept only at its last (nearest) place, so a folder reached twice
/// (cadre run in the home folder: `~/.claude/agents` is `<root>/.claude/agents`) loads once.
pub(crate) fn distinct_dirs(dirs: &[PathBuf]) -> Vec<&PathBuf> {
    let keys: Vec<PathBuf> = dirs
        .iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()))
        .collect();
    dirs.iter()
        .enumerate()
        .filter(|(i, _)| !keys[i + 1..].contains(&keys[*i]))
        .map(|(_, d)| d)
        .collect()
}
