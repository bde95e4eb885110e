//! File descriptors: raising the process's limit, and keeping HTTP connections within it.
//!
//! Thousands of agents may wait on the model at once, each on a connection of its own. Past
//! the descriptor limit a new connection fails, and the agent with it; so connections queue
//! for a slot instead, and the slots are counted from the limit once, the first time a
//! client connects.

use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// Descriptors always left to everything else (files, pipes, child processes).
const RESERVE: u64 = 256;

/// Raises the soft limit on open files to the hard limit; returns the limit now in force.
/// Called by programs at start (a library does not change its process's limits by itself).
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
    }
    Ok(hard.max(soft))
}

/// How many HTTP connections cadre's clients may hold at once: half of the descriptors
/// left under the soft limit, less a reserve. Half, because the other end of a connection
/// may live in the same process (a local server, a test's mock) and tools need descriptors
/// too.
pub fn connection_limit() -> usize {
    connection_slots().available_permits()
}

/// The slots every model client of the process takes a connection from.
pub(crate) fn connection_slots() -> &'static Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS.get_or_init(|| Arc::new(Semaphore::new(slots())))
}

/// Counts the slots from the limit and the descriptors open now.
fn slots() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    // Where the count cannot be read, assume a small program's worth.
    let open = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64);
    let free = soft
        .saturating_sub(open)
        .saturating_sub(RESERVE.max(soft / 16));
    usize::try_from(free / 2)
        .unwrap_or(Semaphore::MAX_PERMITS)
        .clamp(1, Semaphore::MAX_PERMITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_leaves_room_and_is_never_zero() {
        let limit = raise_open_file_limit().unwrap();
        let slots = slots() as u64;
        assert!(slots >= 1);
        assert!(
            slots * 2 < limit.max(2),
            "{slots} slots under a limit of {limit}"
        );
    }
}
