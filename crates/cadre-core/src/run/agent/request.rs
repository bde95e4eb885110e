//! The loop's model requests: one turn's request, sent through the journal, and what came back.

use super::Agent;
use crate::record::events::{millis, EventHandler};
use crate::record::journal::{Done, Effect, EffectOutcome, ModelStep, Work};
use crate::run::context;
use crate::run::spans;
use crate::run::state::AgentState;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::event::Event;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use cadre_model::{
    ContentBlock, History, ModelEvent, Request, RequestOrigin, Response, SystemBlock,
};

impl Agent {
    /// One request: unless the agent must stop (and why), make room in the context if the
    /// last request came near its limit, or send the history and take the response — or,
    /// refused as too long, compact once and let the loop ask again.
    pub(super) async fn ask(
        &self,
        state: &AgentState,
        compacted_for_length: &mut bool,
    ) -> Result<Step, StopKind> {
        if let Some(stop) = self.should_stop(state.turns_since_follow_up()) {
            return Err(stop);
        }
        if let Some(step) = self.make_room(state).await {
            return Ok(step);
        }
        self.emit(Event::Turn {
            agent: self.config.path.clone(),
            turn: state.turns + 1,
        });
        match self.send(&state.history).await {
            Ok(response) => {
                *compacted_for_length = false;
                self.took(&response);
                // Journaled (by the loop) before anything acts on it: a resumed run never
                // asks again.
                Ok(Step::Response {
                    agent: self.config.path.clone(),
                    response,
                })
            }
            Err(Failed::TooLong(why)) => {
                let Some(compacted) = self
                    .mend_length(&state.history, &why, *compacted_for_length)
                    .await
                else {
                    return Err(StopKind::ContextWindowExceeded);
                };
                *compacted_for_length = true;
                Ok(self.compacted(compacted))
            }
            Err(Failed::Stop(stop)) => Err(stop),
        }
    }

    /// Charges a response's tokens to the run and tells the events.
    fn took(&self, response: &Response) {
        self.budget.charge(&response.usage);
        self.emit(Event::Usage {
            agent: self.config.path.clone(),
            usage: response.usage,
        });
        if response
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Compaction(_)))
        {
            spans::server_compacted(&self.config.agent_type, &response.usage.compaction);
            self.emit(Event::Compacted {
                agent: self.config.path.clone(),
                by: "server".into(),
                usage: response.usage.compaction,
            });
        }
    }

    /// Sends the history to the model, asking the server to compact it past the threshold.
    async fn send(&self, history: &History) -> Result<Response, Failed> {
        // Boxed from the start: the futures of every agent waiting for its response hold a
        // pointer here and in `call`, not two copies of the request.
        let mut request = Box::new(self.request(history));
        if let Some(at) = self.server_compact_at() {
            request.compact_at(at);
        }
        self.call(request).await
    }

    /// A request of this agent carrying what is sent of `history` (shared, not copied).
    pub(crate) fn request(&self, history: &History) -> Request {
        let mut request = Request::new(
            &self.config.model,
            self.config.max_tokens,
            context::since_compaction(history),
        );
        request.system = vec![SystemBlock::shared(self.config.system.clone())];
        request.tools = self.tools.definitions();
        request.apply_prompt_caching();
        if let Some(fork) = &self.config.fork {
            fork.pin(&mut request, history.len());
        }
        if self.config.effort.is_some() || self.config.answer.is_some() {
            request.output_config = Some(cadre_model::OutputConfig {
                effort: self.config.effort,
                format: self.config.answer.as_ref().map(|a| a.format().clone()),
            });
        }
        request.origin = Some(RequestOrigin {
            path: self.config.path.to_string(),
            agent_type: self.config.agent_type.clone(),
        });
        request
    }

    /// Sends one request, streaming text out as events, under the run's limit on requests
    /// in flight; the journal runs it (a cancel wins over a request run here).
    pub(crate) async fn call(&self, request: Box<Request>) -> Result<Response, Failed> {
        let model = self.model.clone();
        let events = self.events.clone();
        let path = self.config.path.clone();
        let limiter = self.limiter.clone();
        // Boxed (by the caller), so the work waiting for its slot holds a pointer, not the
        // whole request: with thousands of agents waiting at once, that is most they hold.
        let work: Work = Box::pin(async move {
            // Waiting for a slot is part of the request: cancel interrupts it too.
            let _permit = match &limiter {
                Some(limiter) => limiter.acquire().await.ok(),
                None => None,
            };
            let on_event = |e: ModelEvent| model_event(&events, &path, e);
            Done::Model(match model.send(*request, &on_event).await {
                Ok(response) => ModelStep::Response(response),
                Err(e) if e.is_context_too_long() => ModelStep::TooLong(e.to_string()),
                Err(e) => ModelStep::Error(e.to_string()),
            })
        });
        match self.effect(Effect::Model, work).await {
            EffectOutcome::Ran(Done::Model(ModelStep::Response(response))) => Ok(response),
            EffectOutcome::Ran(Done::Model(ModelStep::TooLong(why))) => Err(Failed::TooLong(why)),
            EffectOutcome::Ran(Done::Model(ModelStep::Error(why))) => {
                Err(Failed::Stop(StopKind::ModelError(why)))
            }
            EffectOutcome::Ran(Done::Tool(_)) => Err(Failed::Stop(StopKind::ModelError(
                "the kept step is not a model response".into(),
            ))),
            EffectOutcome::Stopped(stop) => Err(Failed::Stop(stop)),
            EffectOutcome::Interrupted => Err(Failed::Stop(StopKind::ModelError(
                "the request was interrupted".into(),
            ))),
        }
    }
}

/// Passes a model client's event on as the agent's event.
fn model_event(events: &EventHandler, path: &AgentPath, e: ModelEvent) {
    let event = match e {
        ModelEvent::TextDelta(delta) => Event::Text {
            agent: path.clone(),
            delta,
        },
        ModelEvent::Compacting => Event::Compacting {
            agent: path.clone(),
        },
        ModelEvent::Retrying {
            attempt,
            wait,
            reason,
        } => Event::Retrying {
            agent: path.clone(),
            attempt,
            wait_ms: millis(wait),
            reason,
        },
        _ => return,
    };
    events(event);
}

/// Why a request brought no response.
pub(crate) enum Failed {
    /// The loop stops with this.
    Stop(StopKind),
    /// The server refused the request as too long for the context window.
    TooLong(String),
}
