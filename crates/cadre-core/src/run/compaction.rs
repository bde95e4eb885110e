//! Compaction: keeping a long conversation inside the context window by replacing what came
//! before with a summary — the server's `compaction` block where it compacts, else a summary
//! cadre asks the model for — and, as a last resort, clearing old tool results.

use crate::record::transcript::TranscriptRecord;
use crate::run::agent::request::Failed;
use crate::run::agent::Agent;
use crate::run::context;
use crate::run::spans;
use crate::run::state::AgentState;
use crate::vocab::event::Event;
use crate::vocab::outcome::StopKind;
use crate::vocab::step::Step;
use cadre_model::{CompactionUsage, ContentBlock, History, Message, Role, Usage};
use tracing::Instrument;

impl Agent {
    /// The threshold the server compacts at, when it compacts for this agent.
    pub(crate) fn server_compact_at(&self) -> Option<u64> {
        self.config
            .compact_at
            .filter(|_| self.model.server_compaction())
    }

    /// Input tokens at which cadre summarises old turns itself (no server compaction): the
    /// threshold, or sooner where the window is smaller.
    pub(crate) fn summarise_at(&self) -> u64 {
        let near = (self.config.context_tokens as f64 * context::SUMMARISE_AT) as u64;
        self.config.compact_at.map_or(near, |at| at.min(near))
    }

    /// After a request was refused as too long: compacts once — not twice in a row, and
    /// not when compaction is off — and returns what replaces the history, or `None` when
    /// the conversation cannot be made to fit (the loop then stops, `context full`).
    pub(crate) async fn mend_length(
        &self,
        history: &[Message],
        why: &str,
        again: bool,
    ) -> Option<Compaction> {
        if again || self.config.compact_at.is_none() {
            tracing::warn!(agent = %self.config.path, "{why}");
            return None;
        }
        tracing::info!(agent = %self.config.path, "the request was refused as too long ({why}); compacting");
        match self.compact(history).await {
            Ok(compacted) => Some(compacted),
            Err(e) => {
                tracing::warn!(agent = %self.config.path, "{why}; compacting failed too: {e}");
                None
            }
        }
    }

    /// Compacts `history` now and returns what replaces it, with what that cost: where the
    /// server compacts, one `compaction` block it wrote (stop reason `compaction`); elsewhere
    /// a user message holding a summary cadre asked the model for. A last user message that
    /// answers no tool call (a new question) is kept as asked, after the summary. Nothing is
    /// journaled yet: [`Agent::compacted`] makes the step.
    pub async fn compact(&self, history: &[Message]) -> Result<Compaction, CompactError> {
        self.compact_as(history, "auto").await
    }

    /// [`compact`](Self::compact), its `PreCompact` hooks told the `trigger`: `auto`, or
    /// `manual` when a person asked for it.
    pub(crate) async fn compact_as(
        &self,
        history: &[Message],
        trigger: &str,
    ) -> Result<Compaction, CompactError> {
        // Its span holds its hooks and its request. Boxed: a compaction is rare, and every
        // waiting agent's future would otherwise be sized for it.
        let span = spans::compaction(&self.config.agent_type, trigger);
        let compacted =
            Box::pin(self.compact_here(history, trigger).instrument(span.clone())).await;
        match &compacted {
            Ok(c) => spans::record_compacted(&span, c.by, &c.usage.compaction),
            Err(e) => spans::record_compaction_failed(&span, e.kind()),
        }
        compacted
    }

    /// [`compact_as`](Self::compact_as) inside the compaction's span.
    async fn compact_here(
        &self,
        history: &[Message],
        trigger: &str,
    ) -> Result<Compaction, CompactError> {
        if let Some(hooks) = &self.hooks {
            hooks.pre_compact(trigger).await;
        }
        let (older, newest) = match history.split_last() {
            Some((last, older))
                if last.role == Role::User
                    && !older.is_empty()
                    && !last
                        .content
                        .iter()
                        .any(|b| matches!(b, ContentBlock::ToolResult(_))) =>
            {
                (older, Some(last))
            }
            _ => (history, None),
        };
        let (mut compacted, usage, by) = self.compact_all(older).await?;
        if let Some(newest) = newest {
            match compacted.last_mut() {
                Some(last) if last.role == Role::User => {
                    last.content.extend(newest.content.iter().cloned());
                }
                _ => compacted.push(newest.clone()),
            }
        }
        Ok(Compaction {
            history: compacted,
            usage,
            by,
        })
    }

    /// Compacts all of `history`: the replacement, what it cost, and who wrote it.
    async fn compact_all(
        &self,
        history: &[Message],
    ) -> Result<(Vec<Message>, Usage, &'static str), CompactError> {
        self.emit(Event::Compacting {
            agent: self.config.path.clone(),
        });
        if !self.model.server_compaction() {
            // The newest turns stay as they are, so the summary request is smaller than
            // the one that may have been refused as too long.
            let split =
                context::summary_split(history, context::KEEP_TURNS).unwrap_or(history.len());
            let (summary, used) = self.summarise(&history[..split]).await?;
            let compacted = context::replace_with_summary(history, split, &summary);
            return Ok((compacted, used, "cadre"));
        }
        // A compaction is rare: the part compacted is copied into a request of its own.
        let mut request = self.request(&History::from(history.to_vec()));
        request.summarize(None);
        let response = self.call(Box::new(request)).await?;
        let block = response
            .content
            .iter()
            .rfind(|b| matches!(b, ContentBlock::Compaction(_)))
            .cloned()
            .ok_or(CompactError::NoBlock)?;
        let mut used = response.usage;
        if used.compaction.is_empty() {
            used = summarising_call(&used);
        }
        let compacted = vec![Message::new(Role::Assistant, vec![block])];
        Ok((compacted, used, "server"))
    }

    /// What must happen before the next request so that it fits, as a step: old turns
    /// summarised once the last request came near the window (for models whose server does
    /// not compact), else old tool results cleared. `None` when the history fits as it is.
    pub(crate) async fn make_room(&self, state: &AgentState) -> Option<Step> {
        let last = state.last_input;
        if self.config.compact_at.is_some()
            && !self.model.server_compaction()
            && last >= self.summarise_at()
            // Too few turns yet: nothing older than the ones kept as they are.
            && context::summary_split(&state.history, context::KEEP_TURNS).is_some()
        {
            match self.compact(&state.history).await {
                Ok(compacted) => return Some(self.compacted(compacted)),
                // Clearing old tool results remains.
                Err(e) => {
                    tracing::warn!(agent = %self.config.path, "could not summarise the conversation: {e}")
                }
            }
        }
        if (last as f64) < self.config.context_tokens as f64 * context::CLEAR_AT
            || !context::would_clear(&state.history, context::KEEP_RECENT)
        {
            return None;
        }
        tracing::info!(agent = %self.config.path, used = last, "clearing old tool results to stay within the context window");
        Some(Step::Cleared {
            agent: self.config.path.clone(),
            keep: context::KEEP_RECENT,
        })
    }

    /// Asks the model for a summary of `older` (which ends with a user message), with the
    /// agent's own system prompt and tools so the request stays valid; returns its text.
    async fn summarise(&self, older: &[Message]) -> Result<(String, Usage), CompactError> {
        let mut messages = older.to_vec();
        let ask = ContentBlock::text(context::SUMMARY_PROMPT);
        match messages.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(ask),
            _ => messages.push(Message::new(Role::User, vec![ask])),
        }
        let response = self
            .call(Box::new(self.request(&History::from(messages))))
            .await?;
        let summary = response.text();
        if summary.trim().is_empty() {
            return Err(CompactError::NoBlock);
        }
        Ok((summary, summarising_call(&response.usage)))
    }

    /// Logs, charges and reports a compaction, and returns the step that replaces the
    /// history with it (to be journaled and applied).
    pub fn compacted(&self, compaction: Compaction) -> Step {
        let Compaction { history, usage, by } = compaction;
        if let Some(t) = &self.transcript {
            t.write(TranscriptRecord::Compacted {
                by: by.to_owned(),
                usage: usage.compaction,
                history: history.as_slice().into(),
            });
        }
        self.budget.charge(&usage);
        self.emit(Event::Usage {
            agent: self.config.path.clone(),
            usage,
        });
        self.emit(Event::Compacted {
            agent: self.config.path.clone(),
            by: by.to_owned(),
            usage: usage.compaction,
        });
        Step::Compacted {
            agent: self.config.path.clone(),
            history,
            usage,
        }
    }
}

/// What compacting a conversation gave.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Compaction {
    /// The history that replaces the conversation.
    pub history: Vec<Message>,
    /// What compacting cost.
    pub usage: Usage,
    /// Who wrote it: `server` or `cadre`.
    pub by: &'static str,
}

/// The usage of a request that only summarised, counted as one compaction.
fn summarising_call(usage: &Usage) -> Usage {
    Usage {
        compaction: CompactionUsage {
            count: 1,
            input_tokens: usage.total_input(),
            output_tokens: usage.output_tokens,
        },
        ..Usage::default()
    }
}

/// Why compacting a conversation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The request failed or was cancelled.
    #[error("{0}")]
    Stopped(StopKind),
    /// The answer held no summary.
    #[error("the model's answer held no summary")]
    NoBlock,
}

impl CompactError {
    /// What went wrong in a word, for the compaction's span.
    fn kind(&self) -> &'static str {
        match self {
            Self::Stopped(StopKind::Cancelled) => "cancelled",
            Self::Stopped(_) => "model_error",
            Self::NoBlock => "no_summary",
        }
    }
}

impl From<Failed> for CompactError {
    fn from(f: Failed) -> Self {
        match f {
            Failed::Stop(stop) => Self::Stopped(stop),
            Failed::TooLong(why) => Self::Stopped(StopKind::ModelError(why)),
        }
    }
}
