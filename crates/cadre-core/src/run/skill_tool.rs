//! The `Skill` tool: how an agent loads a skill's instructions when a task calls for them.
//!
//! The system prompt lists only skill names and descriptions; this tool returns a body as a
//! tool result, so loading a skill never changes the prompt (or its cache). The result also
//! gives the skill's folder and files: inside the workspace the agent reads them with its
//! file tools; outside it (`~/.config/cadre/skills`), where those tools cannot reach, the
//! text of `references/` is included (up to [`MAX_INLINE_BYTES`]) and the rest is named by
//! absolute path for `bash`.

use crate::definitions::registry::SKILL_TOOL;
use crate::definitions::skills::{Skill, SkillFile, SkillSet};
use cadre_tools::{ToolContext, ToolError, ToolOutput, TypedTool, Workspace};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Most bytes of `references/` text included for a skill outside the workspace.
pub const MAX_INLINE_BYTES: usize = 32 * 1024;

/// Room kept for the result's other text when sizing the included references, so the
/// output cap does not cut a file in half.
const OUTPUT_MARGIN: usize = 1_000;

/// `Skill`, offering the skills one agent may load.
pub struct SkillTool {
    skills: Arc<SkillSet>,
    visible: Vec<String>,
}

/// What `Skill` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillInput {
    /// The skill's name, as listed under Available skills.
    pub name: String,
}

impl SkillTool {
    /// A `Skill` tool that loads the skills of `skills` named in `visible`.
    pub fn new(skills: Arc<SkillSet>, visible: Vec<String>) -> Self {
        Self { skills, visible }
    }

    fn load(&self, name: &str, ctx: &ToolContext) -> ToolOutput {
        let Some(skill) = self
            .skills
            .get(name)
            .filter(|_| self.visible.iter().any(|v| v == name))
        else {
            let known = if self.visible.is_empty() {
                "(none)".to_owned()
            } else {
                self.visible.join(", ")
            };
            return ToolOutput::error(format!(
                "unknown skill {name:?}; the skills you can load are: {known}"
            ));
        };
        match skill.read_body() {
            Ok(body) => ToolOutput::ok(render(
                skill,
                &body,
                &ctx.workspace,
                ctx.limits.max_output_bytes,
            )),
            Err(e) => ToolOutput::error(format!("cannot load skill {name:?}: {e}")),
        }
    }
}

impl TypedTool for SkillTool {
    type Input = SkillInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        SKILL_TOOL
    }

    fn description(&self) -> String {
        "Load a skill: its full instructions, where its folder is, and the files in it \
         (scripts/, references/, assets/). The skills you can load are listed in your system \
         prompt under \"Available skills\". When a task matches a skill's description, load \
         it before you start, then follow its instructions, reading its files and running its \
         scripts with your usual tools."
            .into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: SkillInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(self.load(&input.name, ctx))
    }
}

/// The tool result: a header saying where the folder is and what is in it, the body, and
/// (for a folder outside the workspace) the text of its references.
fn render(skill: &Skill, body: &str, workspace: &Workspace, max_output: usize) -> String {
    let abs = skill
        .dir
        .canonicalize()
        .unwrap_or_else(|_| skill.dir.clone());
    let inside = abs.starts_with(workspace.root());
    let files = skill.files();
    let mut out = format!("Skill: {}\n", skill.name);
    if inside {
        let rel = workspace.display(&abs);
        let _ = writeln!(
            out,
            "Folder: {rel} (absolute: {}). It is inside the workspace: read its files with \
             read_file (paths such as {rel}/<file>) and run its scripts with bash.",
            abs.display()
        );
    } else {
        let _ = writeln!(
            out,
            "Folder: {} (outside the workspace, so read_file, list_files and grep cannot \
             open it). The text of its references/ files follows the instructions below (up \
             to {} KiB); run its scripts with bash by absolute path.",
            abs.display(),
            MAX_INLINE_BYTES / 1024
        );
    }
    if !skill.allowed_tools.is_empty() {
        let _ = writeln!(out, "Tools it expects: {}", skill.allowed_tools.join(" "));
    }
    if files.is_empty() {
        out.push_str("Files: none besides SKILL.md\n");
    } else {
        out.push_str("Files (relative to the folder):\n");
        for f in &files {
            let _ = writeln!(out, "- {} ({} bytes)", f.path.display(), f.bytes);
        }
    }
    out.push_str("\n---\n\n");
    out.push_str(body);
    out.push('\n');
    if !inside {
        let room = max_output.saturating_sub(out.len() + OUTPUT_MARGIN);
        inline_references(&mut out, &abs, &files, room.min(MAX_INLINE_BYTES));
    }
    out
}

/// Appends the text of `references/` files while they fit in `budget` bytes, and names the
/// ones left out.
fn inline_references(out: &mut String, dir: &Path, files: &[SkillFile], budget: usize) {
    let mut used = 0;
    let mut left_out: Vec<PathBuf> = Vec::new();
    for f in files.iter().filter(|f| f.path.starts_with("references")) {
        let text = std::fs::read(dir.join(&f.path))
            .ok()
            .filter(|b| !b.contains(&0))
            .and_then(|b| String::from_utf8(b).ok());
        match text {
            Some(text) if used + text.len() <= budget => {
                used += text.len();
                let _ = write!(
                    out,
                    "\n---\n\n## {}\n\n{}\n",
                    f.path.display(),
                    text.trim_end()
                );
            }
            _ => left_out.push(dir.join(&f.path)),
        }
    }
    if !left_out.is_empty() {
        out.push_str("\n---\n\nNot included (too large, or not text); read with bash if needed:\n");
        for p in left_out {
            let _ = writeln!(out, "- {}", p.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_with_skill(root: &Path) -> Arc<SkillSet> {
        let dir = root.join("skills/guide");
        std::fs::create_dir_all(dir.join("references")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: guide\ndescription: Use for guidance.\n---\n\nTHE BODY\n",
        )
        .unwrap();
        std::fs::write(dir.join("references/a.md"), "REFERENCE A\n").unwrap();
        std::fs::write(dir.join("references/big.md"), "x".repeat(MAX_INLINE_BYTES)).unwrap();
        Arc::new(SkillSet::load(&[root.join("skills")]))
    }

    async fn call(tool: &SkillTool, workspace: &Path, name: &str) -> ToolOutput {
        let ctx = ToolContext::new(Arc::new(Workspace::new(workspace).unwrap()));
        cadre_tools::Tool::call(tool, serde_json::json!({ "name": name }), &ctx)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn inside_the_workspace_it_points_at_the_files() {
        let root = tempfile::tempdir().unwrap();
        let tool = SkillTool::new(set_with_skill(root.path()), vec!["guide".into()]);
        let out = call(&tool, root.path(), "guide").await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("Folder: skills/guide (absolute: /"));
        assert!(out.content.contains("- references/a.md (12 bytes)"));
        assert!(out.content.contains("THE BODY"));
        assert!(!out.content.contains("REFERENCE A"), "{}", out.content);
    }

    #[tokio::test]
    async fn outside_the_workspace_it_includes_references_that_fit() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let tool = SkillTool::new(set_with_skill(root.path()), vec!["guide".into()]);
        let out = call(&tool, elsewhere.path(), "guide").await;
        assert!(
            out.content.contains("outside the workspace"),
            "{}",
            out.content
        );
        assert!(out.content.contains("## references/a.md\n\nREFERENCE A"));
        assert!(out.content.contains("Not included"));
        assert!(out.content.contains("references/big.md"));
        assert!(out.content.len() < 30_000);
    }

    #[tokio::test]
    async fn an_unknown_or_hidden_skill_is_an_error_naming_the_loadable_ones() {
        let root = tempfile::tempdir().unwrap();
        let set = set_with_skill(root.path());
        let tool = SkillTool::new(set.clone(), vec!["guide".into()]);
        let out = call(&tool, root.path(), "nope").await;
        assert!(out.is_error);
        assert!(out.content.contains("unknown skill \"nope\"") && out.content.contains("guide"));
        let hidden = SkillTool::new(set, vec![]);
        let out = call(&hidden, root.path(), "guide").await;
        assert!(
            out.is_error && out.content.contains("(none)"),
            "{}",
            out.content
        );
    }
}
