//! A call `cadre mcp serve` ran as a run of its own: the agent type it ran as the run's
//! primary agent (a type that may otherwise only be a subagent) and what the call changed
//! of it, kept in the run folder so `cadre resume` carries the run on as the call ran it.

use crate::args::RunArgs;
use crate::common::exit::{CliError, Code, Result};
use crate::common::session::{Job, Session, Signals};
use crate::common::signals;
use cadre_core::JournaledRun;
use cadre_core::{AgentSpec, Mode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The file in a run folder that says the run is a served call.
pub const FILE: &str = "served.json";

/// One served call's type and settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServedCall {
    /// The agent type it ran.
    pub agent_type: String,
    /// The model the call asked for, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The effort it asked for (the API's spelling), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// The answer schema it gave, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Most model requests of its agent.
    pub max_turns: u32,
    /// Its run's token budget, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
}

impl ServedCall {
    /// `spec` (the project's type) as the call runs it: as a primary agent, with the
    /// call's model, effort and answer schema. Only these plain values come from the call:
    /// what a type may run or reach stays the project's, under its trust.
    pub fn apply(&self, mut spec: AgentSpec) -> AgentSpec {
        spec.mode = Mode::All;
        if let Some(model) = &self.model {
            model.clone_into(&mut spec.model);
        }
        if let Some(effort) = &self.effort {
            spec.effort = Some(effort.clone());
        }
        if let Some(schema) = &self.output_schema {
            spec.output_schema = Some(schema.clone());
        }
        spec
    }

    /// Keeps it in the run folder `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(FILE), text)
    }

    /// The served call of the run in `dir`, if it is one.
    pub fn read(dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(dir.join(FILE)).ok()?;
        match serde_json::from_str(&text) {
            Ok(call) => Some(call),
            Err(e) => {
                errln!(
                    "cadre: warning: {} is not what cadre mcp serve writes ({e}); the run is resumed as a plain run",
                    dir.join(FILE).display()
                );
                None
            }
        }
    }
}

/// Carries on the killed served call `run` (`cadre resume`), its type run as the call ran it.
pub async fn resume(
    args: RunArgs,
    run: JournaledRun,
    served: ServedCall,
    directory: Option<PathBuf>,
    quiet: bool,
) -> Result<Code> {
    // Prepared with the default primary type; the served type's primary spec is set after,
    // leaving the registry's type as it is for the run's subagents.
    let session = Session::prepare(args, directory, quiet)?;
    let spec = session
        .registry
        .get(&served.agent_type)
        .cloned()
        .ok_or_else(|| {
            CliError::config(format!(
                "the run is a call of agent type {:?}, which this project no longer has (see `cadre agents list`)",
                served.agent_type
            ))
        })?;
    let mut session = session.with_primary(served.apply(spec));
    session.args.agent.clone_from(&served.agent_type);
    session.args.max_turns = Some(served.max_turns);
    session.args.budget_tokens = served.budget_tokens;
    let endings = signals::watch_endings();
    Ok(session
        .turn(Job::Resume(run), quiet, Signals::Process, endings)
        .await?
        .code)
}
