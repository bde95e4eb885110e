//! What a run is made of, as users write it: agent types (cadre's YAML and Claude Code's
//! Markdown), the registry that gathers them, skills, and the project's instructions. Loading is forgiving (repairs
//! are warnings); `cadre … check --strict` turns every warning into an error.

mod agent_hooks;
mod agent_repair;
mod agent_validate;
mod agent_yaml;
pub mod claude_agents;
mod fields;
pub mod frontmatter;
pub mod hooks;
pub mod instructions;
pub mod model_settings;
pub mod permissions;
pub mod problem;
pub mod registry;
pub mod skills;
pub mod spec;
pub mod spec_builder;
pub mod tool_names;
pub mod tools;
pub mod yaml;
