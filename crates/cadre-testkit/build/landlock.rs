//! For the build scripts of crates with sandbox tests: the `has_landlock` cfg, set where the
//! kernel's Landlock can stop every kind of file write (ABI 3, cadre-tools'
//! `MIN_READ_ONLY_ABI`, what the tests check at run time) or where `CADRE_REQUIRE_LANDLOCK`
//! asks for those tests anyway.
//!
//! A build script includes it with `#[path]` beside `src/prereq.rs` (as `crate::prereq`)
//! and has `landlock` as a build dependency; the kit itself does not need it.

use landlock::{AccessFs, Ruleset, RulesetAttr, RulesetStatus, ABI};

/// The variable that makes the sandbox tests run, and fail, where Landlock is missing.
const REQUIRE_ENV: &str = "CADRE_REQUIRE_LANDLOCK";

/// Declares `has_landlock` and sets it where Landlock confines writes or is required.
pub fn emit() {
    println!("cargo::rustc-check-cfg=cfg(has_landlock)");
    println!("cargo::rerun-if-env-changed={REQUIRE_ENV}");
    if confines_writes() || crate::prereq::required(REQUIRE_ENV) {
        println!("cargo::rustc-cfg=has_landlock");
    }
}

/// Whether every ABI 3 write right is enforced, asked by restricting a throwaway thread
/// (a restriction binds only the thread that makes it).
fn confines_writes() -> bool {
    std::thread::spawn(|| {
        Ruleset::default()
            .handle_access(AccessFs::from_write(ABI::V3))
            .and_then(|r| r.create())
            .and_then(|r| r.restrict_self())
            .is_ok_and(|status| status.ruleset == RulesetStatus::FullyEnforced)
    })
    .join()
    .unwrap_or(false)
}
