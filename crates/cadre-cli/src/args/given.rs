//! What the command line gave: the run options a flag or the environment set, which the
//! settings files then leave alone.

use clap::parser::ValueSource;
use clap::ArgMatches;
use std::collections::BTreeMap;
use std::fmt;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// cadre's own default.
    Default,
    /// A flag on the command line.
    Flag,
    /// This environment variable.
    Env(String),
    /// This line of this settings file (as named in messages).
    File(String, usize),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Flag => f.write_str("flag"),
            Source::Env(var) => write!(f, "env {var}"),
            Source::File(file, line) => write!(f, "{file}:{line}"),
        }
    }
}

/// The options of one command that were given on the command line or through the
/// environment, by setting name; filled from clap's matches before the command runs.
#[derive(Debug, Clone, Default)]
pub struct Given(BTreeMap<&'static str, Source>);

impl Given {
    /// What `matches` (the innermost subcommand's) says was given.
    pub fn from_matches(matches: &ArgMatches) -> Self {
        let mut given = BTreeMap::new();
        // Every setting a flag gives, as the table of settings declares it.
        let flags = crate::common::table::ROWS
            .iter()
            .filter_map(|r| r.flag.map(|f| (r.key, f, r.env)));
        for (key, id, env) in flags {
            // Only commands that take the run options have these ids.
            if matches.try_contains_id(id).is_err() {
                continue;
            }
            match matches.value_source(id) {
                Some(ValueSource::CommandLine) => {
                    given.insert(key, Source::Flag);
                }
                Some(ValueSource::EnvVariable) => {
                    given.insert(key, Source::Env(env.unwrap_or(id).to_owned()));
                }
                _ => {}
            }
        }
        Self(given)
    }

    /// Where the setting `key` came from, if the command line gave it.
    pub fn source(&self, key: &str) -> Option<Source> {
        self.0.get(key).cloned()
    }

    /// Every setting the command line gave, and how.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, &Source)> {
        self.0.iter().map(|(k, s)| (*k, s))
    }
}
