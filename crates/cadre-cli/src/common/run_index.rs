//! A run folder's index (`index.json`): what `cadre runs list` shows of a run and whether it
//! can be resumed or continued, kept small so that listing runs, or finding the newest one
//! to go on with, reads a few hundred bytes per run instead of its whole journal and
//! transcripts.
//!
//! The index is written the first time a run is read so (a folder from before indexes, or a
//! run that changed since, is read whole once), beside the folder's other files and renamed
//! into place. It notes the size and time of every file of the folder it was made from; when
//! any differs (the run went on, or is still running), it is made again.

use cadre_core::internal::run_state;
use cadre_core::RunDir;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::UNIX_EPOCH;

/// A run as a row of `cadre runs list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run id.
    pub id: String,
    /// The task given to the primary agent.
    pub task: String,
    /// Its outcome label (`completed`, `unfinished`, `on engine`, …).
    pub outcome: String,
    /// Whether it has a summary (it ended).
    pub finished: bool,
    /// Whether it ran on a durable engine.
    pub engine: bool,
    /// Its agents.
    pub agents: usize,
    /// Its agents that never finished.
    pub unfinished_agents: usize,
    /// Tokens used by every agent whose usage is known.
    pub tokens: u64,
    /// Wall time, when known.
    pub elapsed_ms: Option<u64>,
}

/// Whether a run can be carried on, as its journal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// `cadre resume` can carry it on.
    pub resumable: bool,
    /// It can take a follow-up.
    pub continuable: bool,
}

/// What `index.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    /// The folder's files it was made from: name, bytes, modification time (ns).
    files: Vec<(String, u64, u128)>,
    /// The run's row, once made.
    #[serde(default)]
    row: Option<RunRow>,
    /// Whether it can be carried on, once read: `None` inside when it has no journal
    /// (or one without a run header).
    #[serde(default)]
    standing: Option<Option<Standing>>,
}

/// The run's row: from its index when that is current, else made by `make` (which reads the
/// run whole) and kept in the index.
pub fn row(dir: &RunDir, make: impl FnOnce(&RunDir) -> RunRow) -> RunRow {
    let files = files_of(dir.path());
    let mut index = read(dir, &files);
    if let Some(row) = &index.row {
        return row.clone();
    }
    let row = make(dir);
    index.row = Some(row.clone());
    index.files = files;
    write(dir, &index);
    row
}

/// Whether the run can be carried on: from its index when that is current, else read from
/// its journal and kept in the index. `None` when it has no readable journal with a run
/// header.
pub fn standing(dir: &RunDir) -> Option<Standing> {
    let files = files_of(dir.path());
    let mut index = read(dir, &files);
    if let Some(standing) = index.standing {
        return standing;
    }
    let standing = match run_state(dir.path()) {
        Ok(state) => state.map(|s| Standing {
            resumable: s.resumable(),
            continuable: s.continuable(),
        }),
        // A journal that cannot be read now may be mended: nothing is kept of it.
        Err(_) => return None,
    };
    index.standing = Some(standing);
    index.files = files;
    write(dir, &index);
    standing
}

/// The index of `dir` if it was made from `files` as they are now; else an empty one.
fn read(dir: &RunDir, files: &[(String, u64, u128)]) -> Index {
    std::fs::read(dir.index_file())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Index>(&bytes).ok())
        .filter(|index| index.files == files)
        .unwrap_or_default()
}

/// Writes `index` beside the folder's files and renames it into place, so a reader never
/// sees half of one. A folder it cannot be written to (read-only, full) goes without: the
/// next reader reads the run whole again.
fn write(dir: &RunDir, index: &Index) {
    let Ok(text) = serde_json::to_vec(index) else {
        return;
    };
    let file = dir.index_file();
    let partial = file.with_extension("json.partial");
    if std::fs::write(&partial, text).is_err() || std::fs::rename(&partial, &file).is_err() {
        let _ = std::fs::remove_file(&partial);
    }
}

/// The files of the run folder `dir` but its index, by name: bytes and modification time.
fn files_of(dir: &Path) -> Vec<(String, u64, u128)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let index = cadre_core::internal::INDEX_FILE;
    let mut files: Vec<(String, u64, u128)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let meta = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (!name.starts_with(index)).then_some((name, meta.len(), modified))
        })
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_made_once_and_again_when_the_run_changes() {
        let runs = tempfile::tempdir().unwrap();
        let dir = RunDir::create_named(runs.path(), "20261201-101500-1").unwrap();
        std::fs::write(dir.transcript_file(), "{}\n").unwrap();
        let made = std::cell::Cell::new(0);
        let make = |d: &RunDir| {
            made.set(made.get() + 1);
            RunRow {
                id: d.id().to_owned(),
                agents: made.get(),
                ..RunRow::default()
            }
        };
        assert_eq!(row(&dir, make).agents, 1);
        assert_eq!(row(&dir, make).agents, 1, "read from the index");
        assert!(dir.index_file().is_file());
        std::fs::write(dir.transcript_file(), "{}\n{}\n").unwrap();
        assert_eq!(row(&dir, make).agents, 2, "made again: the transcript grew");
    }
}
