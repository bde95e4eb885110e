//! `cadre agents` and `cadre skills`'s options, and the folders of definitions `cadre run`
//! also loads.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `cadre skills …`.
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// List every skill with its description and folder.
    List(SkillsDirArg),
    /// Show one skill in full: its front matter, its instructions and its files.
    Show {
        /// The skill's name.
        name: String,
        /// Extra folders of skills.
        #[command(flatten)]
        dirs: SkillsDirArg,
    },
    /// Check every skill and list every problem (file:line:column); exit 1 on any error
    /// (with --strict, on any warning too).
    Check {
        /// Extra folders of skills.
        #[command(flatten)]
        dirs: SkillsDirArg,
        /// Report every warning (a repaired line, an overlong description, …) as an error.
        #[arg(long)]
        strict: bool,
    },
    /// Copy the skills shipped with cadre (code-review, writing-tests, commit-message) into
    /// ~/.config/cadre/skills so every project sees them. Existing files are kept unless
    /// --force.
    Install {
        /// Overwrite files that already exist there.
        #[arg(long)]
        force: bool,
    },
}

/// Where skills are loaded from, besides the standard folders.
#[derive(Debug, Args, Clone)]
pub struct SkillsDirArg {
    /// Also load skills from DIR, a folder of skill folders (nearest of all: its skills win).
    #[arg(long = "skills-dir", value_name = "DIR")]
    pub skills_dir: Vec<PathBuf>,
}

/// `cadre agents …`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List every agent type with its mode, tools and description.
    List(AgentsDirArg),
    /// Show one agent type in full, with the file it came from.
    Show {
        /// The agent type's name.
        name: String,
        /// Extra folder of agent files.
        #[command(flatten)]
        dirs: AgentsDirArg,
    },
    /// Check every agent file and list every problem (file:line:column); exit 1 on any error
    /// (with --strict, on any warning too).
    Check {
        /// Extra folder of agent files.
        #[command(flatten)]
        dirs: AgentsDirArg,
        /// Report every warning (a repaired line, a dropped tool, …) as an error.
        #[arg(long)]
        strict: bool,
    },
}

/// Where agent files are loaded from, besides the standard folders.
#[derive(Debug, Args, Clone)]
pub struct AgentsDirArg {
    /// Also load agent files from DIR (nearest of all: its types win).
    #[arg(long = "agents-dir", value_name = "DIR")]
    pub agents_dir: Vec<std::path::PathBuf>,
}
