//! What a run is made of, as users write it: agent types (cadre's YAML and Claude Code's
//! Markdown), the registry that gathers them, and skills.

pub mod claude_agents;
pub mod frontmatter;
pub mod registry;
pub mod skills;
pub mod spec;
