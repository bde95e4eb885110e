//! cadre on Restate.
