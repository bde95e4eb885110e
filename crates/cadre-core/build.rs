//! Marks the sandbox tests ignored where the kernel's Landlock cannot confine writes.

#[allow(dead_code)] // Only `required` is used here; the rest is for other crates.
#[path = "../cadre-testkit/src/prereq.rs"]
mod prereq;

#[path = "../cadre-testkit/build/landlock.rs"]
mod landlock_cfg;

fn main() {
    landlock_cfg::emit();
}
