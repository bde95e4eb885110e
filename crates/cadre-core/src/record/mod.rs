//! What a run leaves behind: the events every agent emits, its folder on disk (journal,
//! transcripts, summary), and usage rolled up per agent and per type.

pub mod events;
pub mod failure;
pub mod journal;
mod jsonl;
pub mod run_dir;
pub mod transcript;
pub mod usage;
