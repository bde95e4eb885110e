//! Marks the engine tests ignored where the Restate server or HAProxy is missing.

#[allow(dead_code)] // The kit's tests use its finders; this script only emits cfgs.
#[path = "src/prereq.rs"]
mod prereq;

fn main() {
    prereq::emit(&[prereq::RESTATE, prereq::HAPROXY]);
}
