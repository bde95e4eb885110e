//! Hooks at the edges of an agent's steps: the user's own commands, run as Claude Code runs
//! them (`sh -c`, the event's JSON on stdin, in the project root, in a process group of their
//! own, killed at their timeout or on cancel, without the API keys), whose answers may block
//! a call, change its input, keep an agent from stopping, or add context.
//!
//! Every hook of one moment that matches runs at once, as in Claude Code, and their answers
//! are combined. A run without hooks does none of this: an agent gets no [`AgentHooks`].

mod input;
mod matcher;
mod output;
mod runner;
mod steps;

pub use matcher::guarded_tools;

pub(crate) use input::{claude_mode, Who};
pub(crate) use output::Verdict;

use crate::definitions::hooks::{Hook, Hooks};
use crate::definitions::spec::AgentSpec;
use crate::record::events::{millis, EventHandler};
use crate::record::transcript::{HookRecord, Recorded, Transcript, TranscriptRecord};
use crate::run::spans;
use crate::vocab::agent_path::AgentPath;
use crate::vocab::event::Event;
use crate::vocab::hooks::HookEvent;
use crate::vocab::step::Step;
use cadre_model::ToolUseBlock;
use cadre_tools::ToolOutput;
use dashmap::DashMap;
use futures::future::join_all;
use matcher::{names_of, Matcher};
use runner::Place;
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How often `Stop` / `SubagentStop` / `TeammateIdle` hooks may keep an agent going in a
/// row (with no new input between); past it the agent stops with a clear message.
pub const MAX_STOP_BLOCKS: u32 = 5;

/// One tool call's journaled steps: a hook decision made before it ran, its result, and a
/// hook decision made after it.
pub(crate) struct Answered {
    /// A `PreToolUse` decision, if one was journaled (boxed, as `after`: the future of every
    /// call waiting for its tool holds these, and most calls have none).
    pub before: Option<Box<Step>>,
    /// The `tool_result`.
    pub result: Step,
    /// A `PostToolUse` decision (a stop), if one was journaled.
    pub after: Option<Box<Step>>,
}

impl IntoIterator for Answered {
    type Item = Step;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<Step>, 3>>;

    fn into_iter(self) -> Self::IntoIter {
        [
            self.before.map(|s| *s),
            Some(self.result),
            self.after.map(|s| *s),
        ]
        .into_iter()
        .flatten()
    }
}

/// A hook with its matcher compiled.
#[derive(Debug, Clone)]
struct Prepared {
    hook: Hook,
    matcher: Matcher,
}

/// `hooks` with their matchers compiled; a `Stop` hook becomes `SubagentStop` when `as_sub`
/// (an agent type's own `Stop` runs when its subagent stops, as in Claude Code).
fn prepare(hooks: &Hooks, as_sub: bool) -> Vec<Prepared> {
    hooks
        .all()
        .iter()
        .filter_map(|h| {
            let Some(matcher) = Matcher::new(h.matcher.as_deref()) else {
                tracing::warn!(
                    "a {} hook from {} is not run: its matcher {:?} is not a regular expression",
                    h.event,
                    h.source,
                    h.matcher
                );
                return None;
            };
            let mut hook = h.clone();
            if as_sub && hook.event == HookEvent::Stop {
                hook.event = HookEvent::SubagentStop;
            }
            Some(Prepared { hook, matcher })
        })
        .collect()
}

/// The bit of `event` in a set of events.
fn bit(event: HookEvent) -> u32 {
    1 << (event as u32)
}

/// The run's hooks, compiled once, and each agent type's own, compiled when first needed.
pub(crate) struct RunHooks {
    run: Arc<[Prepared]>,
    by_type: DashMap<(String, bool), Arc<[Prepared]>>,
    place: Arc<Place>,
}

impl RunHooks {
    /// The run's `hooks`, run in `project_dir`.
    pub(crate) fn new(hooks: &Hooks, project_dir: PathBuf) -> Self {
        Self {
            run: prepare(hooks, false).into(),
            by_type: DashMap::new(),
            place: Arc::new(Place { project_dir }),
        }
    }

    /// Whether agents of type `spec` have any hooks.
    pub(crate) fn any_for(&self, spec: &AgentSpec) -> bool {
        !self.run.is_empty() || !spec.hooks.is_empty()
    }

    /// The hooks of the agent `who` of type `spec` (the run's, then its type's own); `None`
    /// when it has none, so it does no hook work at all.
    pub(crate) fn for_agent(
        &self,
        spec: &AgentSpec,
        who: impl FnOnce() -> Who,
        sub: bool,
        events: &EventHandler,
        cancel: &CancellationToken,
        transcript: Option<Arc<Transcript>>,
    ) -> Option<Arc<AgentHooks>> {
        if !self.any_for(spec) {
            return None;
        }
        let mut hooks: Vec<Prepared> = self.run.to_vec();
        if !spec.hooks.is_empty() {
            let own = self
                .by_type
                .entry((spec.name.clone(), sub))
                .or_insert_with(|| prepare(&spec.hooks, sub).into())
                .clone();
            hooks.extend(own.iter().cloned());
        }
        let mask = hooks.iter().fold(0, |m, p| m | bit(p.hook.event));
        Some(Arc::new(AgentHooks {
            hooks,
            mask,
            who: who(),
            place: self.place.clone(),
            events: events.clone(),
            cancel: cancel.clone(),
            transcript,
            stop_told: std::sync::atomic::AtomicBool::new(false),
        }))
    }
}

/// The hooks one agent runs (the run's and its type's), with who it is, as each hook's input
/// tells it. Made by the orchestrator for agents that have any.
pub struct AgentHooks {
    hooks: Vec<Prepared>,
    mask: u32,
    who: Who,
    place: Arc<Place>,
    events: EventHandler,
    cancel: CancellationToken,
    /// Where each hook run is written beside the agent's messages, if anywhere.
    transcript: Option<Arc<Transcript>>,
    /// Whether its `SubagentStop` hooks ran and let it end: its end then runs them no more.
    stop_told: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for AgentHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHooks")
            .field("agent", &self.who.agent_id)
            .field("hooks", &self.hooks.len())
            .finish_non_exhaustive()
    }
}

impl AgentHooks {
    /// Whether any hook runs at `event`.
    pub(crate) fn has(&self, event: HookEvent) -> bool {
        self.mask & bit(event) != 0
    }

    /// The agent's path.
    pub(crate) fn agent_id(&self) -> &AgentPath {
        &self.who.agent_id
    }

    /// Whether the agent is a subagent.
    pub(crate) fn is_subagent(&self) -> bool {
        self.who.is_subagent()
    }

    /// Runs every hook of `event` whose matcher takes one of `names` (every hook of the
    /// event when `names` is empty: the event has no matcher), at once, with `fields` added
    /// to the common input; reports each as an event and returns their combined verdict.
    async fn fire(&self, event: HookEvent, names: &[&str], fields: Map<String, Value>) -> Verdict {
        self.fire_until(event, names, fields, &self.cancel).await
    }

    /// [`fire`](Self::fire), the hooks killed when `cancel` is cancelled.
    async fn fire_until(
        &self,
        event: HookEvent,
        names: &[&str],
        fields: Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Verdict {
        if !self.has(event) {
            return Verdict::default();
        }
        let mut matching: Vec<&Prepared> = Vec::new();
        for p in &self.hooks {
            let runs = p.hook.event == event && (names.is_empty() || p.matcher.matches(names));
            // The same command written twice (a settings file and its local copy) runs once.
            if runs && !matching.iter().any(|m| m.hook.command == p.hook.command) {
                matching.push(p);
            }
        }
        if matching.is_empty() {
            return Verdict::default();
        }
        let input = input::hook_input(&self.who, event, fields);
        let runs = matching.into_iter().map(|p| {
            let input = input.clone();
            async move {
                let hook = &p.hook;
                let timeout = Duration::from_secs(hook.timeout_secs);
                // Current while it runs: the hook's `TRACEPARENT` names its span.
                let span = spans::hook(event, &hook.command);
                let run = runner::run(&hook.command, input, &self.place, timeout, cancel);
                let ran = run.instrument(span.clone()).await;
                let (verdict, outcome) = output::read(event, &ran, hook.timeout_secs);
                spans::record_hook_end(&span, &outcome);
                if outcome.is_failure() {
                    tracing::warn!(
                        agent = %self.who.agent_id,
                        "{event} hook `{}` (from {}): {outcome}; the run goes on",
                        hook.command,
                        hook.source
                    );
                }
                let duration_ms = millis(ran.elapsed);
                if let Some(t) = &self.transcript {
                    t.write(TranscriptRecord::Hook(HookRecord {
                        hook_event: Recorded::Known(event),
                        command: hook.command.clone(),
                        source: hook.source.clone(),
                        matcher: hook.matcher.clone(),
                        duration_ms,
                        outcome: Recorded::Known(outcome.clone()),
                    }));
                }
                (self.events)(Event::Hook {
                    agent: self.who.agent_id.clone(),
                    hook_event: event,
                    command: hook.command.clone(),
                    source: hook.source.clone(),
                    matcher: hook.matcher.clone(),
                    duration_ms,
                    outcome,
                });
                verdict
            }
        });
        Verdict::combine(join_all(runs).await)
    }

    /// `PreToolUse` for `call`: a refusal, a permission, a changed input (mapped back to
    /// cadre's fields), context.
    pub(crate) async fn pre_tool_use(&self, call: &ToolUseBlock) -> Verdict {
        let (names, n) = names_of(&call.name);
        let shown = input::tool_input(&call.name, &call.input, &self.who.cwd);
        let mut fields = Map::new();
        fields.insert("tool_name".into(), input::tool_name(&call.name).into());
        fields.insert("tool_input".into(), shown);
        fields.insert("tool_use_id".into(), call.id.clone().into());
        let mut verdict = self.fire(HookEvent::PreToolUse, &names[..n], fields).await;
        if let Some(updated) = verdict.updated_input.take() {
            verdict.updated_input = Some(input::updated_input(&call.name, &call.input, &updated));
        }
        verdict
    }

    /// Whether `PostToolUse` (or, for a failed call, `PostToolUseFailure`) hooks run.
    pub(crate) fn has_post(&self, failed: bool) -> bool {
        self.has(if failed {
            HookEvent::PostToolUseFailure
        } else {
            HookEvent::PostToolUse
        })
    }

    /// `PostToolUse` (or `PostToolUseFailure`) for `call`, which ran with `ran_with` and gave
    /// `out`.
    pub(crate) async fn post_tool_use(
        &self,
        call: &ToolUseBlock,
        ran_with: &Value,
        out: &ToolOutput,
    ) -> Verdict {
        let (names, n) = names_of(&call.name);
        let shown = input::tool_input(&call.name, ran_with, &self.who.cwd);
        let mut fields = Map::new();
        fields.insert("tool_name".into(), input::tool_name(&call.name).into());
        let event = if out.is_error {
            fields.insert("error".into(), out.content.clone().into());
            fields.insert("is_interrupt".into(), false.into());
            HookEvent::PostToolUseFailure
        } else {
            let response = input::tool_response(&call.name, &shown, out);
            fields.insert("tool_response".into(), response);
            HookEvent::PostToolUse
        };
        fields.insert("tool_input".into(), shown);
        fields.insert("tool_use_id".into(), call.id.clone().into());
        self.fire(event, &names[..n], fields).await
    }

    /// The moment the agent's end is: `SubagentStop` for a subagent, `Stop` for the primary.
    pub(crate) fn stop_event(&self) -> HookEvent {
        if self.is_subagent() {
            HookEvent::SubagentStop
        } else {
            HookEvent::Stop
        }
    }

    /// `Stop` / `SubagentStop`: the agent would end with `last` as its answer; `active` when
    /// a stop hook already kept it going.
    pub(crate) async fn stop(&self, last: &str, active: bool) -> Verdict {
        let event = self.stop_event();
        let mut fields = Map::new();
        fields.insert("stop_hook_active".into(), active.into());
        fields.insert("last_assistant_message".into(), last.into());
        let names: &[&str] = if event == HookEvent::SubagentStop {
            if let Some(t) = &self.who.transcript_path {
                fields.insert(
                    "agent_transcript_path".into(),
                    t.display().to_string().into(),
                );
            }
            &[self.who.agent_type.as_str()]
        } else {
            &[]
        };
        let verdict = self.fire(event, names, fields).await;
        if event == HookEvent::SubagentStop {
            // Let end (or stopped by the hook itself): the agent's end was told.
            self.stop_told.store(
                verdict.block.is_none(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        verdict
    }

    /// A subagent ended (`stop`, with `last` as its final text): its `SubagentStop` hooks
    /// run unless they ran already for this end, so every `SubagentStart` is followed by
    /// one `SubagentStop`, however the agent ended — an error, a cancel, a turn limit, a
    /// closed member. They run after a cancel too (with a token of their own), and cannot
    /// keep the agent going.
    pub(crate) async fn subagent_end(&self, last: &str, stop: &str) {
        use std::sync::atomic::Ordering;
        if !self.is_subagent() || self.stop_told.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut fields = Map::new();
        fields.insert("stop_hook_active".into(), false.into());
        fields.insert("last_assistant_message".into(), last.into());
        fields.insert("stop_reason".into(), stop.into());
        if let Some(t) = &self.who.transcript_path {
            fields.insert(
                "agent_transcript_path".into(),
                t.display().to_string().into(),
            );
        }
        let own = CancellationToken::new();
        let names = [self.who.agent_type.as_str()];
        self.fire_until(HookEvent::SubagentStop, &names, fields, &own)
            .await;
    }

    /// `TeammateIdle`: the team member `name` of team `team` would wait for messages.
    pub(crate) async fn teammate_idle(&self, name: &str, team: &str) -> Verdict {
        let mut fields = Map::new();
        fields.insert("teammate_name".into(), name.into());
        fields.insert("team_name".into(), team.into());
        self.fire(HookEvent::TeammateIdle, &[], fields).await
    }

    /// `TaskCreated` or `TaskCompleted` for the team's task `id`.
    pub(crate) async fn task(
        &self,
        event: HookEvent,
        id: u32,
        subject: &str,
        description: &str,
        teammate: Option<&str>,
        team: &str,
    ) -> Verdict {
        let mut fields = Map::new();
        fields.insert("task_id".into(), id.to_string().into());
        fields.insert("task_subject".into(), subject.into());
        fields.insert("task_description".into(), description.into());
        if let Some(name) = teammate {
            fields.insert("teammate_name".into(), name.into());
        }
        fields.insert("team_name".into(), team.into());
        self.fire(event, &[], fields).await
    }

    /// `SubagentStart`, matched on the agent's type.
    pub(crate) async fn subagent_start(&self) -> Verdict {
        let names = [self.who.agent_type.as_str()];
        self.fire(HookEvent::SubagentStart, &names, Map::new())
            .await
    }

    /// `PreCompact`, matched on `trigger` (`auto` or `manual`).
    pub(crate) async fn pre_compact(&self, trigger: &str) -> Verdict {
        let mut fields = Map::new();
        fields.insert("trigger".into(), trigger.into());
        fields.insert("custom_instructions".into(), "".into());
        self.fire(HookEvent::PreCompact, &[trigger], fields).await
    }

    /// `SessionStart`, matched on `source` (`startup` or `resume`), for the run's `model`.
    pub(crate) async fn session_start(&self, source: &str, model: &str) -> Verdict {
        let mut fields = Map::new();
        fields.insert("source".into(), source.into());
        fields.insert("model".into(), model.into());
        self.fire(HookEvent::SessionStart, &[source], fields).await
    }

    /// `UserPromptSubmit` for `prompt`.
    pub(crate) async fn user_prompt_submit(&self, prompt: &str) -> Verdict {
        let mut fields = Map::new();
        fields.insert("prompt".into(), prompt.into());
        self.fire(HookEvent::UserPromptSubmit, &[], fields).await
    }

    /// `SessionEnd`, for a run that ended for `reason`. It runs even after a cancel (a
    /// Ctrl-C ends the session too), within its timeout; giving the run up kills it.
    pub(crate) async fn session_end(&self, reason: &str) -> Verdict {
        let mut fields = Map::new();
        fields.insert("reason".into(), reason.into());
        let own = CancellationToken::new();
        self.fire_until(HookEvent::SessionEnd, &[], fields, &own)
            .await
    }
}
