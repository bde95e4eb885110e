//! System prompts: an agent type's own prompt plus what every agent of its kind must know.

use crate::definitions::skills::{Skill, SkillSet};
use crate::definitions::spec::{AgentSpec, LISTED_DESCRIPTION_CHARS};

/// Most characters of skill lines in one system prompt; the rest are counted, not listed,
/// so a large skills folder cannot crowd out the agent's own prompt.
pub const SKILLS_BUDGET_CHARS: usize = 8_000;

/// Opens the skills section: what skills are and how to load one.
pub const SKILLS_NOTE: &str = "## Available skills\n\nSkills are folders of instructions for \
particular kinds of work. When a task matches a skill's description, call the Skill tool with \
its name before you start: it returns the instructions and the files of the skill's folder. \
Load only the skills you need.\n";

/// Appended to every subagent's prompt: the one fact it must not forget.
pub const SUBAGENT_NOTE: &str = "You are a subagent. Only your final message reaches the agent \
that called you; it sees none of your tool calls or intermediate text. Make that final message \
complete and self-contained.";

/// Appended to every agent's prompt: where it works. The folder's absolute path is left out
/// on purpose, so the prompt (and a recorded run) is the same on every machine.
pub const ENVIRONMENT_NOTE: &str = "You work in the project folder, which is your working \
directory: give paths relative to it. Tools cannot reach files outside it.";

/// The type's prompt, where it works, the subagent note, the project's `instructions`
/// section (the same text for every agent of a run, so the cached prefix holds), then the
/// skills list (names and descriptions only: the bodies come as tool results, so the prompt
/// never changes during a run).
fn system_prompt_with(
    spec: &AgentSpec,
    is_subagent: bool,
    skills: &[&Skill],
    instructions: Option<&str>,
) -> String {
    let mut prompt = spec.prompt.trim_end().to_owned();
    prompt.push_str("\n\n");
    prompt.push_str(ENVIRONMENT_NOTE);
    if spec.read_only {
        prompt.push_str(" You are read-only: you must not change any file, and the sandbox refuses writes outside your private temporary folder ($TMPDIR).");
    }
    if is_subagent {
        prompt.push_str("\n\n");
        prompt.push_str(SUBAGENT_NOTE);
    }
    if let Some(section) = instructions {
        prompt.push_str("\n\n");
        prompt.push_str(section);
    }
    if let Some(section) = skills_section(skills, SKILLS_BUDGET_CHARS) {
        prompt.push_str("\n\n");
        prompt.push_str(&section);
    }
    prompt
}

/// The system prompt of an agent of type `spec`, as the orchestrator builds it: the skills
/// in `listed` by name and description, then the whole body of each skill its
/// `preload_skills` names, read from `all` (as Claude Code preloads a subagent's `skills`).
/// A name that matches no skill is skipped with a warning in the log. `instructions` is the
/// project's instructions section ([`crate::Instructions::section`]).
pub fn system_prompt_for(
    spec: &AgentSpec,
    is_subagent: bool,
    listed: &[&Skill],
    all: &SkillSet,
    instructions: Option<&str>,
) -> String {
    let mut prompt = system_prompt_with(spec, is_subagent, listed, instructions);
    let mut bodies = Vec::new();
    for name in &spec.preload_skills {
        match all.body(name) {
            Ok(body) => bodies.push(format!("### Skill: {name}\n\n{body}")),
            Err(e) => tracing::warn!("agent type {}: preloaded skill skipped: {e}", spec.name),
        }
    }
    if spec.is_isolated() {
        prompt.push_str("\n\nYou work in a git worktree of your own: a checkout of the current commit, on a branch of your own. Change files freely; when you finish, every change is committed on your branch for review, and the main checkout is never touched. Do not switch branches or commit yourself.");
    }
    if !bodies.is_empty() {
        prompt.push_str("\n\n## Preloaded skills\n\nThese skills' instructions are part of your instructions; follow them when they apply.\n\n");
        prompt.push_str(&bodies.join("\n\n"));
    }
    prompt
}

/// `description` on one line, cut by [`shorten`]: how skills are listed in the prompt.
pub fn listed_description(description: &str) -> String {
    shorten(&description.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `text` cut to [`LISTED_DESCRIPTION_CHARS`] characters with `…` when longer: how a
/// description is listed in a prompt (the file keeps the whole text).
pub fn shorten(text: &str) -> String {
    match text.char_indices().nth(LISTED_DESCRIPTION_CHARS - 1) {
        Some((i, _)) if text.chars().count() > LISTED_DESCRIPTION_CHARS => {
            format!("{}…", text[..i].trim_end())
        }
        _ => text.to_owned(),
    }
}

/// The "Available skills" section: one `- name: description` line per skill, in the order
/// given, while they fit in `budget` characters; then how many were left out. `None` when
/// there are no skills.
pub fn skills_section(skills: &[&Skill], budget: usize) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut section = String::from(SKILLS_NOTE);
    section.push('\n');
    let mut used = 0;
    let mut listed = 0;
    for skill in skills {
        // A folded or multi-line description becomes one line; an overlong one is cut.
        let description = listed_description(&skill.description);
        let line = format!("- {}: {description}\n", skill.name);
        let len = line.chars().count();
        if used + len > budget {
            break;
        }
        used += len;
        listed += 1;
        section.push_str(&line);
    }
    let left = skills.len() - listed;
    if left > 0 {
        section.push_str(&format!(
            "- ({left} more skill{} not listed to keep this prompt short; call Skill with a name you know, or with any name to get the full list.)\n",
            if left == 1 { " is" } else { "s are" }
        ));
    }
    Some(section.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn skill(name: &str, description: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            license: None,
            compatibility: None,
            metadata: BTreeMap::new(),
            allowed_tools: vec![],
            dir: PathBuf::from(name),
            file: PathBuf::from(name).join("SKILL.md"),
        }
    }

    #[test]
    fn lists_names_and_descriptions_only() {
        let spec = Registry::shipped().get("code").cloned().unwrap();
        let a = skill("alpha", "Use for alpha\nwork.");
        let plain = system_prompt_with(&spec, true, &[], None);
        let with = system_prompt_with(&spec, true, &[&a], None);
        assert!(with.starts_with(&plain));
        assert!(with.ends_with("## Available skills\n\nSkills are folders of instructions for particular kinds of work. When a task matches a skill's description, call the Skill tool with its name before you start: it returns the instructions and the files of the skill's folder. Load only the skills you need.\n\n- alpha: Use for alpha work."), "{with}");
        assert!(skills_section(&[], 100).is_none());
    }

    #[test]
    fn long_descriptions_are_cut_where_listed() {
        let long = format!("{} tail", "word ".repeat(300));
        let cut = listed_description(&long);
        let n = cut.chars().count();
        assert!(n <= LISTED_DESCRIPTION_CHARS && n > 1000, "{n}");
        assert!(cut.ends_with('…') && !cut.contains("tail"), "{cut}");
        assert_eq!(listed_description("short\n text"), "short text");
        let exact = "x".repeat(LISTED_DESCRIPTION_CHARS);
        assert_eq!(listed_description(&exact), exact);
    }

    #[test]
    fn the_budget_cuts_the_list_and_says_so() {
        let skills: Vec<Skill> = (0..500)
            .map(|i| skill(&format!("skill-{i:03}"), &"d".repeat(100)))
            .collect();
        let refs: Vec<&Skill> = skills.iter().collect();
        let section = skills_section(&refs, SKILLS_BUDGET_CHARS).unwrap();
        let listed = section
            .lines()
            .filter(|l| l.starts_with("- skill-"))
            .count();
        assert!(listed > 50 && listed < 500, "{listed}");
        assert!(section.len() < SKILLS_BUDGET_CHARS + SKILLS_NOTE.len() + 200);
        assert!(
            section.ends_with(&format!("({} more skills are not listed to keep this prompt short; call Skill with a name you know, or with any name to get the full list.)", 500 - listed)),
            "{}",
            &section[section.len() - 200..]
        );
    }
}
