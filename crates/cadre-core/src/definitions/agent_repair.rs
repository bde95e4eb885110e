//! The repairs an agent type gets once its fields are read, from either file kind: tool
//! names mapped, tool patterns turned into rules, its permission mode and rules read, an
//! unknown `isolation` dropped.

use crate::definitions::model_settings;
use crate::definitions::permissions::{file_mode, PermissionMode, Rule};
use crate::definitions::problem::{Locator, Problem};
use crate::definitions::spec::AgentSpec;
use crate::definitions::tools::map_tools;
use std::path::Path;

impl AgentSpec {
    /// What both file kinds repair once their fields are read: tool names mapped (unknown
    /// ones dropped with a warning, `Task(a, b)` turned into `Task` and `subagent_types`),
    /// patterns such as `Bash(git diff:*)` turned into rules, the permission mode read
    /// (`plan` makes it read-only), and an `isolation` other than `worktree` dropped.
    /// `pos` places a problem at a key (spelled as in the file) and an optional needle.
    pub(crate) fn repair(&mut self, file: &Path, problems: &mut Vec<Problem>, pos: &Locator) {
        let claude = file.extension().is_some_and(|x| x == "md");
        let key = |cadre: &'static str, claude_key: &'static str| {
            if claude {
                claude_key
            } else {
                cadre
            }
        };
        let tools_key = "tools";
        let tools = map_tools(
            file,
            tools_key,
            &self.tools,
            true,
            &|name| pos(tools_key, Some(name)),
            problems,
        );
        let denied_key = key("disallowed_tools", "disallowedTools");
        let denied = map_tools(
            file,
            denied_key,
            &self.disallowed_tools,
            false,
            &|name| pos(denied_key, Some(name)),
            problems,
        );
        if tools.names.is_empty() && !tools.dropped.is_empty() {
            problems.push(Problem::warning_at(
                file,
                pos(tools_key, None),
                format!(
                    "no tool is left: every entry of {tools_key} was dropped ({}); this agent type loads, but starting it fails",
                    tools.dropped.join(", ")
                ),
            ));
        }
        self.tools = tools.names;
        self.dropped_tools = tools.dropped;
        self.disallowed_tools = denied.names;
        for t in tools.subagent_types {
            if !self.subagent_types.contains(&t) {
                self.subagent_types.push(t);
            }
        }
        self.limited_tools = tools.limited;
        self.permissions.allow.extend(tools.rules);
        self.permissions.deny.extend(denied.rules);
        self.repair_permissions(
            file,
            problems,
            pos,
            key("permission_mode", "permissionMode"),
        );
        model_settings::repair(
            &mut self.effort,
            &mut self.output_schema,
            file,
            problems,
            pos,
        );
        if let Some(isolation) = self.isolation.take() {
            let normal = isolation.trim().to_ascii_lowercase();
            if normal == "worktree" {
                self.isolation = Some(normal);
            } else if !matches!(normal.as_str(), "" | "none" | "shared") {
                problems.push(Problem::warning_at(
                    file,
                    pos("isolation", Some(&isolation)),
                    format!("unknown `isolation: {isolation}` ignored (cadre knows `worktree`): the agent works in the shared workspace"),
                ));
            }
        }
    }

    /// Reads its permission mode and rules: an unknown mode is dropped with a warning,
    /// `plan` makes it read-only, Claude Code's `acceptEdits` allows edits; a rule that
    /// cannot be read is dropped with a warning.
    fn repair_permissions(
        &mut self,
        file: &Path,
        problems: &mut Vec<Problem>,
        pos: &Locator,
        mode_key: &str,
    ) {
        if let Some(written) = self.permission_mode.clone() {
            match file_mode(&written) {
                Ok(mode) => {
                    if mode.mode == Some(PermissionMode::Plan) {
                        self.read_only = true;
                    }
                    if mode.allow_edits && !self.permissions.allow.iter().any(|r| r == "Edit") {
                        self.permissions.allow.push("Edit".into());
                    }
                }
                Err(why) => {
                    problems.push(Problem::warning_at(
                        file,
                        pos(mode_key, Some(&written)),
                        why,
                    ));
                    self.permission_mode = None;
                }
            }
        }
        for list in [&mut self.permissions.allow, &mut self.permissions.deny] {
            list.retain(|rule| match Rule::parse(rule) {
                Ok(_) => true,
                Err(e) => {
                    let at = pos("permissions", Some(rule));
                    problems.push(Problem::warning_at(
                        file,
                        at,
                        format!("{e}; it is not applied"),
                    ));
                    false
                }
            });
        }
    }
}
