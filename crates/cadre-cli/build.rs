//! Marks the tests that need an outside program ignored where it is missing: Restate and
//! HAProxy (engine), Chromium (the HTML page's script), the published MCP server and the MCP
//! Inspector from npm, and a mount namespace to fill a small disk in.

#[allow(dead_code)] // The tests use its finders; this script only emits cfgs.
#[path = "../cadre-testkit/src/prereq.rs"]
mod prereq;

fn main() {
    prereq::emit(&[
        prereq::RESTATE,
        prereq::HAPROXY,
        prereq::CHROMIUM,
        prereq::NPM_MCP_FILESYSTEM,
        prereq::MCP_INSPECTOR,
        prereq::TMPFS_MOUNT,
    ]);
}
