//! The steps of a workflow, as problems and prompts name them.

/// Which step of a workflow a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The `map` step: one agent call per item.
    Map,
    /// The `reduce` step: one agent call given every result.
    Reduce,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Map => "map",
            Self::Reduce => "reduce",
        })
    }
}
