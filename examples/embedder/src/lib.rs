//! Nothing to use here: this crate depends on what an embedder's program does (cadre-core
//! and tokio alone), so its examples and the code of the README and the library guide,
//! compiled against it, show that one dependency on cadre is enough.

/// The README's code, compiled as doctests the same way.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The library guide's code (`docs/library.md`), compiled as doctests with this crate's
/// dependencies: a block that uses anything beyond cadre-core and tokio fails to build.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDoctests;
