//! What a run leaves behind: the events every agent emits, transcripts on disk, and usage
//! rolled up per agent and per type.

pub mod events;
pub mod journal;
pub mod transcript;
pub mod usage;
