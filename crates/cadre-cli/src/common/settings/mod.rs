//! Settings files: `cadre.toml` at the project root and `~/.config/cadre/config.toml`; and
//! the `permissions` and `hooks` of Claude Code's settings files beside them (see
//! [`claude_settings`](crate::common::claude_settings)).
//!
//! Precedence, highest first: a flag given on the command line, the environment
//! (`CADRE_MODEL`, `CADRE_PROVIDER`, `ANTHROPIC_BASE_URL`/`OPENAI_BASE_URL`), the project's
//! file, the user's file, cadre's defaults. A flag counts only when it was given (clap's
//! defaults never hide a file's value). Reading is forgiving: an unknown key is a warning;
//! a bad value is an error naming `file:line`. A `[hooks]` table holds hooks in Claude
//! Code's shape (`[[hooks.PreToolUse]]`, `matcher`, `hooks = [{type, command, timeout}]`).

mod file;
mod resolve;
mod sources;

pub use resolve::{engine_refusals, resolve_from, shown_value, telemetry_values, Settings};
pub use sources::{claude_files, files, user_files, CadreFiles, Sources};

// What only the tests reach through this module.
#[cfg(test)]
pub(crate) use file::{known_keys, SettingsFile, PROJECT_FILE, USER_FILE};

#[cfg(test)]
mod tests;
