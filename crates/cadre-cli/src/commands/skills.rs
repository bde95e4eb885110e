//! `cadre skills list|show|check`.

use crate::args::{SkillsCommand, SkillsDirArg};
use crate::common::definitions::{check_report, load_skills, no_skills_found, print_problems};
use crate::common::display::{fit_lines, stdout_width};
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::user_home;
use cadre_core::internal::yaml::{self, Mapping, Value};
use cadre_core::Skill;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The skills shipped with cadre, compiled in: (path under the skills folder, contents,
/// executable).
const SHIPPED: [(&str, &str, bool); 6] = [
    (
        "code-review/SKILL.md",
        include_str!("../../../../skills/code-review/SKILL.md"),
        false,
    ),
    (
        "code-review/references/checklist.md",
        include_str!("../../../../skills/code-review/references/checklist.md"),
        false,
    ),
    (
        "code-review/scripts/changed-files.sh",
        include_str!("../../../../skills/code-review/scripts/changed-files.sh"),
        true,
    ),
    (
        "commit-message/SKILL.md",
        include_str!("../../../../skills/commit-message/SKILL.md"),
        false,
    ),
    (
        "writing-tests/SKILL.md",
        include_str!("../../../../skills/writing-tests/SKILL.md"),
        false,
    ),
    (
        "writing-tests/references/determinism.md",
        include_str!("../../../../skills/writing-tests/references/determinism.md"),
        false,
    ),
];

/// Writes the shipped skills under `dest`; keeps existing files unless `force`. Returns
/// (written, kept) paths.
fn install(dest: &Path, force: bool) -> std::io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    use std::os::unix::fs::PermissionsExt;
    let (mut written, mut kept) = (Vec::new(), Vec::new());
    for (rel, text, executable) in SHIPPED {
        let path = dest.join(rel);
        if path.exists() && !force {
            kept.push(path);
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
        if executable {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        written.push(path);
    }
    Ok((written, kept))
}

/// Runs one `cadre skills` command.
pub fn skills(cmd: SkillsCommand, root: &Path) -> Result<Code> {
    match cmd {
        SkillsCommand::List(SkillsDirArg { skills_dir }) => list(root, &skills_dir),
        SkillsCommand::Show { name, dirs } => show(root, &dirs.skills_dir, &name),
        SkillsCommand::Install { force } => install_shipped(force),
        SkillsCommand::Check { dirs, strict } => {
            let set = load_skills(root, &dirs.skills_dir)?;
            let ok = format!("{} skills OK", set.len());
            Ok(check_report(set.problems(), strict, &ok))
        }
    }
}

/// `cadre skills list`: each skill's name, folder and description, in columns.
fn list(root: &Path, skills_dir: &[PathBuf]) -> Result<Code> {
    let set = load_skills(root, skills_dir)?;
    print_problems(set.problems());
    if set.is_empty() && set.problems().is_empty() {
        errln!("{}", no_skills_found(root, skills_dir, true));
        return Ok(Code::Done);
    }
    // Columns as wide as their longest entry, so the descriptions line up; lines
    // are cut to the terminal's width.
    let folder = |s: &Skill| {
        s.dir
            .strip_prefix(root)
            .unwrap_or(&s.dir)
            .display()
            .to_string()
    };
    let name_width = set
        .all()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let folder_width = set
        .all()
        .map(|s| folder(s).chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut out = format!(
        "{:<name_width$} {:<folder_width$} description\n",
        "name", "folder"
    );
    for s in set.all() {
        let desc = one_line(&s.description);
        let _ = writeln!(
            out,
            "{:<name_width$} {:<folder_width$} {desc}",
            s.name,
            folder(s)
        );
    }
    emit(&fit_lines(&out, stdout_width()));
    if !set.problems().is_empty() {
        errln!(
            "\n{} problem(s) in skills; run `cadre skills check` to see them",
            set.problems().len()
        );
    }
    Ok(Code::Done)
}

/// `cadre skills show NAME`: the skill's front matter, body and files.
fn show(root: &Path, skills_dir: &[PathBuf], name: &str) -> Result<Code> {
    let set = load_skills(root, skills_dir)?;
    print_problems(set.problems());
    let skill = set.get(name).ok_or_else(|| {
        let known: Vec<&str> = set.all().map(|s| s.name.as_str()).collect();
        CliError::config(format!(
            "there is no skill {name:?}; the skills are: {}",
            if known.is_empty() {
                "(none)".to_owned()
            } else {
                known.join(", ")
            }
        ))
    })?;
    let body = skill.read_body().map_err(CliError::invalid)?;
    let mut out = format!("# from {}\n---\n", skill.file.display());
    out.push_str(&yaml::to_string(&front_matter(skill)).unwrap_or_default());
    let _ = writeln!(out, "---\n{body}");
    let files = skill.files();
    let _ = writeln!(out, "\n# files in {}", skill.dir.display());
    if files.is_empty() {
        out.push_str("(none besides SKILL.md)\n");
    }
    for f in files {
        let _ = writeln!(out, "{} ({} bytes)", f.path.display(), f.bytes);
    }
    emit(&out);
    Ok(Code::Done)
}

/// `cadre skills install`: writes the shipped skills into `~/.config/cadre/skills`.
fn install_shipped(force: bool) -> Result<Code> {
    let home = user_home(true).ok_or_else(|| {
        CliError::config("HOME is not set, so there is no ~/.config/cadre/skills to install into")
    })?;
    let dest = home.join(".config/cadre/skills");
    let (written, kept) = install(&dest, force)
        .map_err(|e| CliError::failed_from(format!("cannot install into {}", dest.display()), e))?;
    for p in &written {
        outln!("installed {}", p.display());
    }
    for p in &kept {
        outln!("kept {} (exists; --force overwrites it)", p.display());
    }
    Ok(Code::Done)
}

/// Prints `text` to stdout; a reader that went away early (`| head`) is not an error.
fn emit(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// The skill's front matter as the file spells it, in the format's order.
fn front_matter(skill: &Skill) -> Mapping {
    let mut map = Mapping::new();
    let mut put = |key: &str, value: Value| {
        map.insert(Value::String(key.to_owned()), value);
    };
    put("name", Value::String(skill.name.clone()));
    put("description", Value::String(skill.description.clone()));
    if let Some(license) = &skill.license {
        put("license", Value::String(license.clone()));
    }
    if let Some(compatibility) = &skill.compatibility {
        put("compatibility", Value::String(compatibility.clone()));
    }
    if !skill.metadata.is_empty() {
        let metadata = skill
            .metadata
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), Value::String(v.clone())))
            .collect();
        put("metadata", Value::Mapping(metadata));
    }
    if !skill.allowed_tools.is_empty() {
        put(
            "allowed-tools",
            Value::String(skill.allowed_tools.join(" ")),
        );
    }
    map
}

/// A description on one line, cut to a width that keeps the listing readable.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}
