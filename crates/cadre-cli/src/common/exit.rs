//! Exit codes: what a script can tell from how `cadre` ended.

use cadre_core::StopKind;
use std::process::ExitCode;

/// How `cadre` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 0: the agent finished.
    Done = 0,
    /// 1: the agent stopped early (turn cap, budget, refusal, max tokens, …).
    StoppedEarly = 1,
    /// 2: bad usage or configuration (no key, bad folder, bad flag).
    Config = 2,
    /// 3: the model API failed.
    Api = 3,
    /// 130: cancelled by Ctrl-C or SIGTERM.
    Cancelled = 130,
}

impl From<Code> for ExitCode {
    fn from(code: Code) -> Self {
        ExitCode::from(code as u8)
    }
}

impl Code {
    /// The exit code for an agent's stop.
    pub fn for_stop(stop: &StopKind) -> Self {
        match stop {
            StopKind::Done => Self::Done,
            StopKind::ModelError(_) => Self::Api,
            StopKind::Cancelled => Self::Cancelled,
            _ => Self::StoppedEarly,
        }
    }
}

/// A configuration problem, told in one plain sentence.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The exit code for an error that ended the run before or outside the agent.
pub fn classify(err: &anyhow::Error) -> Code {
    if err.downcast_ref::<ConfigError>().is_some() {
        Code::Config
    } else {
        Code::Api
    }
}
