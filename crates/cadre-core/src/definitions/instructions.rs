//! Project instructions: `AGENTS.md`, `CLAUDE.md` and `.claude/CLAUDE.md` at the project
//! root, and the user's own `~/.config/cadre/AGENTS.md`, with `@path` imports resolved.
//!
//! They are read once per run and rendered into one section ([`Instructions::section`])
//! that every agent's system prompt carries unchanged, so the prompt stays one cached
//! prefix per agent type. Loading is forgiving: a missing import, an import that leaves
//! its folder, a cycle or too deep a chain is a warning, and the text goes on without it.

use crate::definitions::problem::Problem;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The project's instruction files, in the order they are read, relative to its root.
pub const PROJECT_FILES: [&str; 3] = ["AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md"];

/// The user's instruction file, in their cadre folder (`~/.config/cadre/`).
pub const USER_FILE: &str = "AGENTS.md";

/// How the user's cadre folder is named in prompts and messages: never the machine's path.
pub const USER_DIR_LABEL: &str = "~/.config/cadre";

/// How many imports deep a chain may go (`AGENTS.md` → `a.md` → … ), as Claude Code allows.
pub const MAX_IMPORT_DEPTH: usize = 5;

/// Most characters of instructions in one prompt; beyond it the text is cut, with a warning.
pub const MAX_INSTRUCTION_CHARS: usize = 64_000;

/// Opens the section in the system prompt.
pub const INSTRUCTIONS_NOTE: &str = "## Project instructions\n\nThe files below hold \
instructions for working on this project, written by its people. Follow them as part of your \
instructions; where two disagree, the later one (more specific to this project) wins. They \
cannot widen what your tools or your agent type allow.";

/// Where an instruction file comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The user's own file, for every project.
    User,
    /// A file at the project root.
    Project,
    /// Pulled in by an `@path` line of an earlier file.
    Import,
}

/// One file that went into the instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstructionFile {
    /// How it is named in the prompt: relative to the project root, or under `~/.config/cadre`.
    pub label: String,
    /// Where it is on disk.
    pub path: PathBuf,
    /// Where it comes from.
    pub origin: Origin,
    /// Its size in bytes on disk.
    pub bytes: u64,
    /// Its text, as it goes into the prompt.
    text: String,
}

/// The instructions of one run, read once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    files: Vec<InstructionFile>,
    problems: Vec<Problem>,
    section: Option<String>,
}

/// One folder of instruction files and the folder its imports must stay in.
struct Base<'a> {
    dir: PathBuf,
    label: &'a str,
}

impl Instructions {
    /// Reads the user's file from `user_dir` (their `~/.config/cadre`, or `None` to leave it
    /// out, as a recording or a replay does) and then the project's files at `root`.
    pub fn load(root: &Path, user_dir: Option<&Path>) -> Self {
        let mut this = Self::default();
        let mut seen = HashSet::new();
        if let Some(dir) = user_dir {
            let base = Base {
                dir: canonical_or(dir),
                label: USER_DIR_LABEL,
            };
            this.read_top(&base, &dir.join(USER_FILE), Origin::User, &mut seen);
        }
        let base = Base {
            dir: canonical_or(root),
            label: "",
        };
        for name in PROJECT_FILES {
            this.read_top(&base, &root.join(name), Origin::Project, &mut seen);
        }
        this.section = this.render();
        this
    }

    /// The files read, in prompt order (imports right after the file that imports them).
    pub fn files(&self) -> &[InstructionFile] {
        &self.files
    }

    /// What was skipped or cut, as warnings.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The section for the system prompt, the same for every agent of the run; `None`
    /// when there are no instructions.
    pub fn section(&self) -> Option<&str> {
        self.section.as_deref()
    }

    fn read_top(&mut self, base: &Base, path: &Path, origin: Origin, seen: &mut HashSet<PathBuf>) {
        if !path.is_file() {
            return;
        }
        let mut chain = Vec::new();
        self.read(base, path, origin, 0, seen, &mut chain);
    }

    /// Reads `path` and, depth first, what it imports. `seen` holds every file read so far
    /// (a file is included once, however often it is named); `chain` the imports leading
    /// here, to tell a cycle from a repeat.
    fn read(
        &mut self,
        base: &Base,
        path: &Path,
        origin: Origin,
        depth: usize,
        seen: &mut HashSet<PathBuf>,
        chain: &mut Vec<PathBuf>,
    ) {
        let canonical = canonical_or(path);
        if !seen.insert(canonical.clone()) {
            return;
        }
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                self.problems.push(Problem::warning_at(
                    path,
                    (0, 0),
                    format!("instructions skipped: cannot read the file: {e}"),
                ));
                return;
            }
        };
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        // Two names for one text (CLAUDE.md a copy of AGENTS.md) go in once.
        if origin != Origin::Import && self.files.iter().any(|f| f.text == text) {
            return;
        }
        self.files.push(InstructionFile {
            label: label_of(base, &canonical),
            path: path.to_path_buf(),
            origin,
            bytes,
            text: text.clone(),
        });
        chain.push(canonical);
        for (line, target) in imports(&text) {
            let warn = |message: String| Problem::warning_at(path, (line, 0), message);
            let Some(resolved) = resolve(path, &target) else {
                // `@name` without a dot or slash is most likely a mention, not a file.
                if target.contains(['.', '/']) {
                    self.problems
                        .push(warn(format!("import @{target} skipped: no such file")));
                }
                continue;
            };
            if !resolved.starts_with(&base.dir) {
                let inside = if base.label.is_empty() {
                    "the workspace".to_owned()
                } else {
                    base.label.to_owned()
                };
                self.problems.push(warn(format!(
                    "import @{target} refused: it leaves {inside}"
                )));
            } else if chain.contains(&resolved) {
                self.problems
                    .push(warn(format!("import @{target} skipped: an import cycle")));
            } else if depth + 1 > MAX_IMPORT_DEPTH {
                self.problems.push(warn(format!(
                    "import @{target} skipped: imports go at most {MAX_IMPORT_DEPTH} deep"
                )));
            } else if !resolved.is_file() {
                self.problems
                    .push(warn(format!("import @{target} skipped: not a file")));
            } else {
                self.read(base, &resolved, Origin::Import, depth + 1, seen, chain);
            }
        }
        chain.pop();
    }

    /// The prompt section: the note, then each file under a heading naming it, cut to
    /// [`MAX_INSTRUCTION_CHARS`].
    fn render(&mut self) -> Option<String> {
        if self.files.is_empty() {
            return None;
        }
        let mut out = String::from(INSTRUCTIONS_NOTE);
        let mut left = MAX_INSTRUCTION_CHARS;
        for file in &self.files {
            let what = match file.origin {
                Origin::User => " (the user's own instructions, for every project)",
                Origin::Project => "",
                Origin::Import => " (imported)",
            };
            let body = file.text.trim();
            out.push_str(&format!("\n\n### {}{what}\n\n", file.label));
            if body.chars().count() > left {
                let cut: String = body.chars().take(left).collect();
                out.push_str(cut.trim_end());
                out.push_str("\n\n(The instructions are cut here: they are too long.)");
                self.problems.push(Problem::warning_at(
                    &file.path,
                    (0, 0),
                    format!(
                        "instructions cut: more than {MAX_INSTRUCTION_CHARS} characters in all"
                    ),
                ));
                break;
            }
            left -= body.chars().count();
            out.push_str(body);
        }
        Some(out)
    }
}

/// `path` canonicalized, or as given when that fails (it does not exist).
fn canonical_or(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// How a file is named in the prompt: relative to its base folder, `/`-separated.
fn label_of(base: &Base, canonical: &Path) -> String {
    let rel = canonical
        .strip_prefix(&base.dir)
        .map(|r| r.to_string_lossy().replace('\\', "/"))
        .unwrap_or_else(|_| canonical.to_string_lossy().into_owned());
    if base.label.is_empty() {
        rel
    } else {
        format!("{}/{rel}", base.label)
    }
}

/// Where `@target` in the file `from` points, canonical; `None` when nothing is there.
/// A path is relative to the importing file's folder; `~/` is the home folder.
fn resolve(from: &Path, target: &str) -> Option<PathBuf> {
    let path = if let Some(rest) = target.strip_prefix("~/") {
        PathBuf::from(std::env::var_os("HOME")?).join(rest)
    } else {
        from.parent().unwrap_or(Path::new(".")).join(target)
    };
    path.canonicalize().ok()
}

/// The `@path` imports of a Markdown text with their 1-based lines: an `@` at the start of
/// a word, outside code blocks and code spans; trailing punctuation is not part of the path.
pub fn imports(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if let Some(mark) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = Some(mark);
            continue;
        }
        // Even pieces between backticks are prose; odd ones are code spans.
        for prose in line.split('`').step_by(2) {
            for word in prose.split_whitespace() {
                let Some(target) = word.strip_prefix('@') else {
                    continue;
                };
                let target =
                    target.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '"', '\'']);
                if !target.is_empty() && !target.starts_with('@') {
                    found.push((i + 1, target.to_owned()));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_skip_code_mentions_and_punctuation() {
        let text = "See @docs/git.md.\nmail me@example.com\n`@not/this.md` but @this.md\n```\n@fenced.md\n```\n(@last.md)";
        let got: Vec<String> = imports(text).into_iter().map(|(_, t)| t).collect();
        assert_eq!(got, ["docs/git.md", "this.md"]);
        assert_eq!(imports("x\n@a.md")[0].0, 2);
    }

    #[test]
    fn project_files_imports_cycles_and_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(
            root.join("AGENTS.md"),
            "Use tabs.\n@docs/a.md\n@../outside.md\n",
        )
        .unwrap();
        std::fs::write(root.join("docs/a.md"), "A here. @b.md").unwrap();
        std::fs::write(root.join("docs/b.md"), "B here. @a.md @../AGENTS.md").unwrap();
        std::fs::write(dir.path().join("outside.md"), "secret").unwrap();
        std::fs::write(
            root.join("CLAUDE.md"),
            "Use tabs.\n@docs/a.md\n@../outside.md\n",
        )
        .unwrap();
        let ins = Instructions::load(&root, None);
        let labels: Vec<&str> = ins.files().iter().map(|f| f.label.as_str()).collect();
        assert_eq!(labels, ["AGENTS.md", "docs/a.md", "docs/b.md"]);
        let section = ins.section().unwrap();
        assert!(section.starts_with(INSTRUCTIONS_NOTE));
        assert!(
            section.contains("### docs/b.md (imported)\n\nB here."),
            "{section}"
        );
        assert!(!section.contains("secret"));
        let messages: Vec<&str> = ins.problems().iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains("@../outside.md refused")),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("@a.md skipped: an import cycle")),
            "{messages:?}"
        );
    }

    #[test]
    fn depth_is_capped_and_long_text_cut() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("AGENTS.md"), "@f1.md").unwrap();
        for i in 1..=7 {
            std::fs::write(
                root.join(format!("f{i}.md")),
                format!("level {i} @f{}.md", i + 1),
            )
            .unwrap();
        }
        let ins = Instructions::load(root, None);
        assert_eq!(ins.files().len(), 1 + MAX_IMPORT_DEPTH);
        assert!(ins
            .problems()
            .iter()
            .any(|p| p.message.contains("at most 5 deep")));

        std::fs::write(
            root.join("AGENTS.md"),
            "x".repeat(MAX_INSTRUCTION_CHARS + 10),
        )
        .unwrap();
        let ins = Instructions::load(root, None);
        assert!(ins
            .section()
            .unwrap()
            .ends_with("(The instructions are cut here: they are too long.)"));
        assert!(ins
            .problems()
            .iter()
            .any(|p| p.message.contains("instructions cut")));
        assert!(Instructions::load(&root.join("none"), None)
            .section()
            .is_none());
    }
}
