//! Exit codes: what a script can tell from how `cadre` ended, and the error whose kind
//! decides the code when `cadre` fails before or outside its agents.

use cadre_core::{RunError, RunErrorKind, StopKind};
use std::process::ExitCode;

/// How `cadre` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 0: the agent finished.
    Done = 0,
    /// 1: the agent stopped early (turn cap, budget, time limit, refusal, max tokens, …).
    StoppedEarly = 1,
    /// 2: bad usage or configuration (no key, bad folder, bad flag).
    Config = 2,
    /// 3: the model API failed.
    Api = 3,
    /// 4: cadre itself failed: a file could not be read or written, a run folder is
    /// damaged, the engine could not be reached.
    Failed = 4,
    /// 129: the terminal closed (SIGHUP); the run was stopped as for Ctrl-C.
    HungUp = 129,
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

/// What an error was caused by, kept for its message.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A result whose error decides the exit code.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

/// Why `cadre` failed before or outside its agents; [`CliError::code`] is its exit code.
/// Each kind keeps its cause, and [`CliError::report`] tells the whole chain. A model API
/// failure during a run is the agent's stop, not an error (see [`Code::for_stop`]); as an
/// error it comes only from compacting a conversation, one model request.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage or configuration, told in one plain sentence (exit 2).
    #[error("{what}")]
    Config {
        /// What is wrong, and what to do instead.
        what: String,
        /// What it came from, if anything.
        #[source]
        cause: Option<Cause>,
    },
    /// A usage or configuration problem, told by the error that found it (exit 2).
    #[error(transparent)]
    Invalid(Cause),
    /// cadre itself failed: a file, a damaged run folder, the engine (exit 4).
    #[error("{what}")]
    Failed {
        /// What failed.
        what: String,
        /// What it came from, if anything.
        #[source]
        cause: Option<Cause>,
    },
    /// Reading or writing a file failed (exit 4).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A run could not start or go on; its kind decides the code.
    #[error(transparent)]
    Run(#[from] RunError),
}

impl CliError {
    /// A usage or configuration problem.
    pub fn config(what: impl Into<String>) -> Self {
        Self::Config {
            what: what.into(),
            cause: None,
        }
    }

    /// A usage or configuration problem `cause` revealed.
    pub fn config_from(what: impl Into<String>, cause: impl Into<Cause>) -> Self {
        Self::Config {
            what: what.into(),
            cause: Some(cause.into()),
        }
    }

    /// A usage or configuration problem that `cause` tells of in its own words.
    pub fn invalid(cause: impl Into<Cause>) -> Self {
        Self::Invalid(cause.into())
    }

    /// A failure of cadre itself, from `cause`.
    pub fn failed_from(what: impl Into<String>, cause: impl Into<Cause>) -> Self {
        Self::Failed {
            what: what.into(),
            cause: Some(cause.into()),
        }
    }

    /// The exit code this error ends `cadre` with.
    pub fn code(&self) -> Code {
        match self {
            Self::Config { .. } | Self::Invalid(_) => Code::Config,
            Self::Failed { .. } | Self::Io(_) => Code::Failed,
            // Exhaustive: cadre-core sorts every `RunError` into a kind, and a new kind must
            // be given its code here.
            Self::Run(e) => match e.kind() {
                RunErrorKind::Cadre => Code::Failed,
                RunErrorKind::Model => Code::Api,
                RunErrorKind::Usage => Code::Config,
            },
        }
    }

    /// The message and each cause under it, `what: cause: cause`; a cause whose text the
    /// message already holds is not told twice.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            let told = e.to_string();
            if !text.contains(&told) {
                text = format!("{text}: {told}");
            }
            cause = e.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_code_and_keeps_its_cause() {
        let io = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        assert_eq!(CliError::config("no key").code(), Code::Config);
        assert_eq!(CliError::from(io()).code(), Code::Failed);
        assert_eq!(
            CliError::failed_from("cannot read x", io()).code(),
            Code::Failed
        );
        assert_eq!(CliError::from(RunError::RunDir(io())).code(), Code::Failed);
        assert_eq!(
            CliError::from(RunError::NotFinished { run_id: "r".into() }).code(),
            Code::Config
        );
        let e = CliError::config_from("cannot read --task-file t", io());
        assert_eq!(e.to_string(), "cannot read --task-file t");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(e.report(), "cannot read --task-file t: denied");
        // A cause already told in the message is not repeated.
        let run = CliError::from(RunError::RunDir(io()));
        assert_eq!(run.report(), "cannot create the run folder: denied");
    }
}
