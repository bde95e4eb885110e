//! One agent of a run whose subagents are delegated (one invocation of a durable engine):
//! its context is made as a run's is, and the agent runs to its end.

use super::handle::{AgentHandle, Start};
use super::run_context::{open_transcript, RunParts};
use super::Orchestrator;
use crate::record::run_dir::RunDir;
use crate::record::usage::AgentRecord;
use crate::run::answer::AnswerSchema;
use crate::run::delegate::DelegatedCall;
use crate::vocab::outcome::{AgentOutcome, StopKind};
use std::sync::Arc;

impl Orchestrator {
    /// Runs one agent of a run whose subagents are delegated (one invocation of a durable
    /// engine): the agent `call` names, in this orchestrator's workspace, to its end.
    /// Returns its outcome and the records of it and of every agent below it.
    pub async fn run_delegated(
        self: &Arc<Self>,
        call: &DelegatedCall,
    ) -> (AgentOutcome, Vec<AgentRecord>) {
        // Like any run, one delegated agent per orchestrator: its context is the run's.
        if let Err(refused) = self.first_run() {
            let outcome = AgentOutcome {
                text: String::new(),
                stop: StopKind::Other(refused.to_string()),
                turns: 0,
                tool_calls: 0,
                usage: Default::default(),
                history: Vec::new(),
            };
            return (outcome, Vec::new());
        }
        let mut spec = call.spec.clone();
        if call.depth == 0 {
            if let Some(max_turns) = self.config.max_turns {
                spec.max_turns = max_turns;
            }
        }
        // With a runs folder, the agent's transcript is written there (its journal is the
        // delegate's), for whoever runs it elsewhere to carry back.
        let mut parts = RunParts {
            journal: self.config.journal.clone(),
            ..RunParts::default()
        };
        if let Some(runs) = &self.config.runs_dir {
            match RunDir::create_named(runs, &self.run_id()) {
                Ok(dir) => {
                    parts.transcript = open_transcript(&dir);
                    parts.dir = Some(dir);
                }
                Err(e) => tracing::warn!("could not create a folder for {}: {e}", call.path),
            }
        }
        let run = self.context(parts, self.new_team(None), false);
        let mut me = AgentHandle::new(
            run,
            call.path.clone(),
            call.depth,
            call.model.clone(),
            self.config.workspace.clone(),
        );
        if let Some(schema) = &call.output_schema {
            match AnswerSchema::new(schema) {
                Ok(answer) => me.answer = Some(answer),
                Err(why) => {
                    // The caller checks the schema first: this is a call sent some other way.
                    let stop = StopKind::Other(format!("bad output schema: {why}"));
                    return (AgentOutcome::new(String::new(), stop), Vec::new());
                }
            }
        }
        let start = Start::Fresh(&call.prompt);
        let cancel = self.cancel.child_token();
        let agent = self.run_agent(&spec, me, &call.description, start, cancel, false);
        // Its span is the caller's child, though the caller ran elsewhere.
        if let Some(parent) = &call.trace {
            cadre_model::trace_bridge::set_parent(agent.span(), parent);
        }
        let mut outcome = agent.await;
        // A file the agent could not keep cancelled it: say so, not just "cancelled".
        if let Some(lost) = self.failure.take() {
            outcome.stop = StopKind::Other(format!("stopped: {lost}"));
        }
        self.config.mcp.shutdown().await;
        self.roster.close();
        (outcome, self.roster.records())
    }
}
