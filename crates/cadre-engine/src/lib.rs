//! cadre on Restate.

pub mod workspace;

pub use workspace::{CloneCache, WorkspaceError, WriterTree};
