//! Skills in the Agent Skills format: a folder holding a `SKILL.md` (YAML front matter with
//! `name` and `description`, then Markdown instructions) and, optionally, `scripts/`,
//! `references/` and `assets/`.
//!
//! Loading reads only each file's front matter; a body is read when an agent asks for it
//! (progressive disclosure), so many skills cost little at start-up and in the prompt.

use crate::definitions::fields::{key_text, Fields};
use crate::definitions::frontmatter::{self, read_front_matter, FrontMatterError};
use crate::definitions::problem::{check_name, Problem, Report};
use crate::definitions::yaml::{Mapping, Value};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Longest `description`, in characters (per the Agent Skills specification).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `compatibility`, in characters (per the Agent Skills specification).
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// The front matter keys the format defines; any other key is reported as a warning.
pub const KNOWN_KEYS: [&str; 6] = [
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
];
/// Most files listed for one skill folder.
const MAX_LISTED_FILES: usize = 200;
/// How deep a skill folder is listed.
const MAX_LIST_DEPTH: usize = 4;

/// One skill, as its front matter describes it; the body stays on disk until asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skill {
    /// Its name: `[a-z0-9-]`, equal to its folder's name.
    pub name: String,
    /// What it does and when to use it; agents choose skills by this.
    pub description: String,
    /// A license name or a bundled license file.
    pub license: Option<String>,
    /// What it needs from its environment.
    pub compatibility: Option<String>,
    /// Free-form key-value pairs.
    pub metadata: BTreeMap<String, String>,
    /// Tools it expects to use (recorded and shown; cadre grants tools by agent type only).
    pub allowed_tools: Vec<String>,
    /// Its folder.
    pub dir: PathBuf,
    /// Its `SKILL.md`.
    pub file: PathBuf,
}

/// One file inside a skill folder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkillFile {
    /// Its path relative to the skill folder.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Why a skill's body could not be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// No skill has that name.
    #[error("unknown skill {name:?}; the skills are: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        known: String,
    },
    /// Its `SKILL.md` could not be read again (changed or removed since start-up).
    #[error("cannot read {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// What went wrong.
        source: FrontMatterError,
    },
}

impl Skill {
    /// Parses the front matter `yaml` of `file`, whose folder is named `folder`. Returns the
    /// skill unless there was an error, and every problem found (warnings included).
    pub fn parse(file: &Path, folder: &str, yaml: &str) -> (Option<Skill>, Vec<Problem>) {
        let (map, mut problems) = match front_matter_map(file, yaml) {
            Ok(read) => read,
            Err(p) => return (None, vec![p]),
        };
        let mut fields = Fields {
            file,
            yaml,
            map: &map,
            problems: &mut problems,
        };
        let name = fields.string("name");
        let description = fields.string("description").map(|d| d.trim().to_owned());
        let license = fields.string("license");
        let compatibility = fields.string("compatibility");
        let metadata = fields.metadata();
        let allowed_tools = fields.words("allowed-tools");
        warn_unknown_keys(file, yaml, &map, &mut problems);
        let at = |key: &str, needle: Option<&str>| frontmatter::locate(yaml, key, needle);
        let mut report = Report {
            file,
            at: &at,
            problems: &mut problems,
        };
        check_skill_name(name.as_deref(), folder, &mut report);
        check_description(description.as_deref(), &mut report);
        check_compatibility(compatibility.as_deref(), &mut report);
        if problems.iter().any(|p| !p.warning) {
            return (None, problems);
        }
        let (Some(name), Some(description)) = (name, description) else {
            return (None, problems);
        };
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let skill = Skill {
            name,
            description,
            license,
            compatibility,
            metadata,
            allowed_tools,
            dir,
            file: file.to_path_buf(),
        };
        (Some(skill), problems)
    }

    /// Reads its Markdown body from disk (the text after the front matter).
    pub fn read_body(&self) -> Result<String, SkillError> {
        let read = || -> Result<String, FrontMatterError> {
            let mut reader = BufReader::new(File::open(&self.file)?);
            read_front_matter(&mut reader)?;
            let mut body = String::new();
            reader.read_to_string(&mut body)?;
            Ok(body)
        };
        let body = read().map_err(|source| SkillError::Read {
            file: self.file.clone(),
            source,
        })?;
        Ok(body.trim_start_matches(['\r', '\n']).trim_end().to_owned())
    }

    /// The files of its folder besides `SKILL.md`, sorted; hidden files and symlinked
    /// folders are left out, and the listing is capped.
    pub fn files(&self) -> Vec<SkillFile> {
        let mut out = Vec::new();
        list_files(&self.dir, Path::new(""), 0, &mut out);
        out.retain(|f| f.path != Path::new(SKILL_FILE));
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.truncate(MAX_LISTED_FILES);
        out
    }
}

/// Warns of each front matter key the format does not define.
fn warn_unknown_keys(file: &Path, yaml: &str, map: &Mapping, problems: &mut Vec<Problem>) {
    for key in map.keys() {
        let key = key_text(key);
        if !KNOWN_KEYS.contains(&key.as_str()) {
            let pos = frontmatter::locate(yaml, &key, None);
            problems.push(Problem::warning_at(
                file,
                pos,
                format!(
                    "unknown key {key:?} ignored; the keys of a skill are: {}",
                    KNOWN_KEYS.join(", ")
                ),
            ));
        }
    }
}

/// Checks a skill's `name`: there, usable, and its folder's name.
fn check_skill_name(name: Option<&str>, folder: &str, report: &mut Report) {
    match name.map(|n| (n, check_name(n))) {
        None => report.push(
            false,
            "name",
            None,
            "missing name: a skill needs `name:`, equal to its folder's name".into(),
        ),
        Some((n, Err(msg))) => report.push(false, "name", Some(n), msg),
        Some((n, _)) if n != folder => report.push(
            false,
            "name",
            Some(n),
            format!("name {n:?} differs from its folder {folder:?}: they must be equal"),
        ),
        Some((n, Ok(Some(msg)))) => report.push(true, "name", Some(n), msg),
        Some((_, Ok(None))) => {}
    }
}

/// Checks a skill's (trimmed) `description`: there, not empty, and not over the format's
/// length (a warning).
fn check_description(description: Option<&str>, report: &mut Report) {
    match description {
        None => report.push(
            false,
            "description",
            None,
            "missing description: say what the skill does and when to use it".into(),
        ),
        Some("") => report.push(
            false,
            "description",
            None,
            "empty description: say what the skill does and when to use it".into(),
        ),
        // Claude Code loads these and shortens them only where it lists them; so does cadre.
        Some(d) if d.chars().count() > MAX_DESCRIPTION_CHARS => report.push(
            true,
            "description",
            None,
            format!(
                "description too long: {} characters, more than the {MAX_DESCRIPTION_CHARS} the format allows; it is shortened where skills are listed",
                d.chars().count()
            ),
        ),
        Some(_) => {}
    }
}

/// Warns when a skill's `compatibility` is over the format's length.
fn check_compatibility(compatibility: Option<&str>, report: &mut Report) {
    if let Some(c) = compatibility {
        if c.chars().count() > MAX_COMPATIBILITY_CHARS {
            report.push(
                true,
                "compatibility",
                None,
                format!(
                    "compatibility too long: {} characters, more than the {MAX_COMPATIBILITY_CHARS} the format allows",
                    c.chars().count()
                ),
            );
        }
    }
}

fn list_files(root: &Path, rel: &Path, depth: usize, out: &mut Vec<SkillFile>) {
    if depth > MAX_LIST_DEPTH || out.len() > MAX_LISTED_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = rel.join(&name);
        // file_type does not follow symlinks, so a symlinked folder cannot loop the walk.
        match entry.file_type() {
            Ok(t) if t.is_dir() => list_files(root, &path, depth + 1, out),
            Ok(_) => {
                let bytes = std::fs::metadata(entry.path()).map_or(0, |m| m.len());
                out.push(SkillFile { path, bytes });
            }
            Err(_) => {}
        }
    }
}

fn front_matter_map(file: &Path, yaml: &str) -> Result<(Mapping, Vec<Problem>), Problem> {
    match crate::definitions::yaml::read(file, yaml, 2) {
        Ok((Value::Mapping(map), problems)) => Ok((map, problems)),
        Ok((Value::Null, problems)) => Ok((Mapping::new(), problems)),
        Ok(_) => Err(Problem::at(
            file,
            (2, 1),
            "the front matter must be YAML keys and values (name: …, description: …)",
        )),
        Err(e) => {
            let (pos, msg) = frontmatter::yaml_error(&e);
            Err(Problem::at(file, pos, format!("broken YAML: {msg}")))
        }
    }
}

/// Every skill known to a run, and the problems met loading them.
#[derive(Debug, Clone, Default)]
pub struct SkillSet {
    skills: BTreeMap<String, Skill>,
    problems: Vec<Problem>,
}

impl SkillSet {
    /// Every skill folder (`<dir>/<name>/SKILL.md`) of each folder in `dirs`, in order: a
    /// later folder's skill replaces an earlier one of the same name. Only front matter is
    /// read. Missing folders are skipped; bad skills are recorded as problems and skipped.
    pub fn load(dirs: &[PathBuf]) -> Self {
        let mut set = Self::default();
        set.load_dirs(dirs);
        set
    }

    /// Adds the skills of each folder in `dirs`, as [`Self::load`] does.
    pub fn load_dirs(&mut self, dirs: &[PathBuf]) {
        for dir in crate::definitions::registry::distinct_dirs(dirs) {
            self.load_dir(dir);
        }
    }

    /// The folders searched for a project at `root`, farthest first: the user's
    /// `~/.config/cadre/skills`, then the project's `skills/` and `.cadre/skills/`.
    pub fn standard_dirs(root: &Path, home: Option<&Path>) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(home) = home {
            dirs.push(home.join(".config/cadre/skills"));
        }
        dirs.push(root.join("skills"));
        dirs.push(root.join(".cadre/skills"));
        dirs
    }

    fn load_dir(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        if dir.join(SKILL_FILE).is_file() {
            self.problems.push(Problem::warning_at(
                &dir.join(SKILL_FILE),
                (0, 0),
                "this folder is itself a skill; skills are loaded from the folders inside a skills folder, so pass its parent",
            ));
        }
        let mut folders: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        folders.sort();
        for folder in folders {
            let file = folder.join(SKILL_FILE);
            if !file.is_file() {
                self.problems.push(Problem::warning_at(
                    &folder,
                    (0, 0),
                    format!("no {SKILL_FILE} in this folder, so it is not a skill"),
                ));
                continue;
            }
            let name = folder
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let yaml = match File::open(&file)
                .map_err(FrontMatterError::from)
                .and_then(|f| read_front_matter(&mut BufReader::new(f)))
            {
                Ok(yaml) => yaml,
                Err(e) => {
                    let pos = if matches!(e, FrontMatterError::Io(_)) {
                        (0, 0)
                    } else {
                        (1, 1)
                    };
                    self.problems.push(Problem::at(&file, pos, e.to_string()));
                    continue;
                }
            };
            let (skill, problems) = Skill::parse(&file, &name, &yaml);
            self.problems.extend(problems);
            if let Some(skill) = skill {
                self.skills.insert(skill.name.clone(), skill);
            }
        }
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// Every skill, by name.
    pub fn all(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// How many skills there are.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// What went wrong while loading, in folder order.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Adds or replaces a skill directly (for library callers and tests).
    pub fn insert(&mut self, skill: Skill) {
        self.skills.insert(skill.name.clone(), skill);
    }

    /// The body of the skill called `name`, read from disk now.
    pub fn body(&self, name: &str) -> Result<String, SkillError> {
        match self.get(name) {
            Some(skill) => skill.read_body(),
            None => Err(SkillError::Unknown {
                name: name.to_owned(),
                known: self.names_text(),
            }),
        }
    }

    /// The skills an agent type may load, by name: `allowed` is its `skills:` list, where
    /// `"*"` is every skill and names that match no skill are ignored.
    pub fn visible(&self, allowed: &[String]) -> Vec<&Skill> {
        if allowed.iter().any(|a| a == "*") {
            return self.all().collect();
        }
        self.all().filter(|s| allowed.contains(&s.name)).collect()
    }

    fn names_text(&self) -> String {
        let names: Vec<&str> = self.skills.keys().map(String::as_str).collect();
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, folder: &str, text: &str) -> PathBuf {
        let dir = root.join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SKILL_FILE), text).unwrap();
        dir
    }

    #[test]
    fn parses_every_field() {
        let yaml = "name: pdf\ndescription: >\n  Fill PDF forms.\n  Use for PDFs.\nlicense: MIT\ncompatibility: needs poppler\nmetadata:\n  author: ana\n  version: 1.0\nallowed-tools: Bash(git diff:*) Read\n";
        let (skill, problems) = Skill::parse(Path::new("s/pdf/SKILL.md"), "pdf", yaml);
        assert!(problems.is_empty(), "{problems:?}");
        let skill = skill.unwrap();
        assert_eq!(skill.description, "Fill PDF forms. Use for PDFs.");
        assert_eq!(skill.license.as_deref(), Some("MIT"));
        assert_eq!(skill.compatibility.as_deref(), Some("needs poppler"));
        assert_eq!(skill.metadata["version"], "1.0");
        assert_eq!(skill.allowed_tools, ["Bash(git diff:*)", "Read"]);
        assert_eq!(skill.dir, Path::new("s/pdf"));
    }

    #[test]
    fn allowed_tools_may_be_a_list_and_unknown_keys_warn() {
        let yaml = "name: a\ndescription: d\nallowed-tools: [Read, Grep]\nversion: 2\n";
        let (skill, problems) = Skill::parse(Path::new("a/SKILL.md"), "a", yaml);
        assert_eq!(skill.unwrap().allowed_tools, ["Read", "Grep"]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].warning);
        assert_eq!((problems[0].line, problems[0].column), (5, 1));
        assert!(problems[0].message.contains("version"));
    }

    #[test]
    fn each_bad_field_is_an_error_at_its_line() {
        let long = "x".repeat(MAX_DESCRIPTION_CHARS + 1);
        // Too long is a warning: Claude Code loads it and shortens it where it is listed.
        let (skill, problems) = Skill::parse(
            Path::new("a/SKILL.md"),
            "a",
            &format!("name: a\ndescription: {long}\n"),
        );
        assert_eq!(skill.map(|s| s.description), Some(long));
        assert!(problems[0].warning && problems[0].message.contains("too long"));
        assert_eq!((problems[0].line, problems[0].column), (3, 1));
        let cases = [
            ("description: d\n", "missing name", (1, 1)),
            ("name: a\n", "missing description", (1, 1)),
            ("name: a b\ndescription: d\n", "bad name", (2, 7)),
            (
                "name: b\ndescription: d\n",
                "differs from its folder",
                (2, 7),
            ),
            ("name: a\ndescription: [1\n", "broken YAML", (4, 1)),
            ("name: [a]\ndescription: d\n", "name must be text", (2, 1)),
            ("- a\n", "keys and values", (2, 1)),
        ];
        for (yaml, words, pos) in cases {
            let (skill, problems) = Skill::parse(Path::new("a/SKILL.md"), "a", yaml);
            assert!(skill.is_none(), "{yaml}");
            let p = problems
                .iter()
                .find(|p| p.message.contains(words))
                .unwrap_or_else(|| panic!("{words}: {problems:?}"));
            assert!(!p.warning);
            if words == "broken YAML" {
                assert!(p.line >= 3, "{p}");
            } else {
                assert_eq!((p.line, p.column), pos, "{p}");
            }
        }
    }

    #[test]
    fn loads_folders_nearer_wins_bad_ones_skipped_body_on_demand() {
        let far = tempfile::tempdir().unwrap();
        let near = tempfile::tempdir().unwrap();
        write(
            far.path(),
            "shared",
            "---\nname: shared\ndescription: far\n---\nFAR BODY\n",
        );
        write(
            far.path(),
            "only-far",
            "---\nname: only-far\ndescription: d\n---\n\n# Body\n\nText.\n",
        );
        write(
            near.path(),
            "shared",
            "---\nname: shared\ndescription: near\n---\nNEAR BODY\n",
        );
        write(near.path(), "nofront", "# Just markdown\n");
        write(near.path(), "open", "---\nname: open\n");
        std::fs::create_dir(near.path().join("empty")).unwrap();
        let set = SkillSet::load(&[
            far.path().to_path_buf(),
            near.path().to_path_buf(),
            PathBuf::from("/no/such/folder"),
            // The same folder twice loads once: its problems are not reported twice.
            near.path().join("."),
        ]);
        let names: Vec<&str> = set.all().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["only-far", "shared"]);
        assert_eq!(set.get("shared").unwrap().description, "near");
        assert_eq!(set.body("shared").unwrap(), "NEAR BODY");
        assert_eq!(set.body("only-far").unwrap(), "# Body\n\nText.");
        let err = set.body("nope").unwrap_err().to_string();
        assert!(err.contains("only-far, shared"), "{err}");
        let text: Vec<String> = set.problems().iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text[0].contains("empty") && text[0].contains("warning"));
        assert!(text[1].contains("nofront/SKILL.md:1:1: error: missing front matter"));
        assert!(text[2].contains("open/SKILL.md:1:1: error: the front matter is not closed"));
    }

    #[test]
    fn visibility_follows_the_agents_list_and_files_are_listed() {
        let root = tempfile::tempdir().unwrap();
        let dir = write(root.path(), "a", "---\nname: a\ndescription: d\n---\n");
        write(root.path(), "b", "---\nname: b\ndescription: d\n---\n");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join("scripts/run.sh"), "echo hi\n").unwrap();
        std::fs::write(dir.join(".git/HEAD"), "x").unwrap();
        let set = SkillSet::load(&[root.path().to_path_buf()]);
        let names = |allowed: &[&str]| -> Vec<String> {
            let allowed: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
            set.visible(&allowed)
                .iter()
                .map(|s| s.name.clone())
                .collect()
        };
        assert_eq!(names(&["*"]), ["a", "b"]);
        assert!(names(&[]).is_empty());
        assert_eq!(names(&["b", "zzz"]), ["b"]);
        let files = set.get("a").unwrap().files();
        assert_eq!(
            files,
            [SkillFile {
                path: PathBuf::from("scripts/run.sh"),
                bytes: 8
            }]
        );
    }
}
