//! A docs question-answering agent confined to one `docs/` folder, with a turn cap.

use cadre_core::{no_events, Agent, AgentConfig, AgentOutcome, Budget, ToolSet};
use cadre_model::{Message, Model};
use cadre_tools::{builtin_tools, ToolContext, Workspace};
use std::path::Path;
use std::sync::Arc;

/// The prompt the docs agent runs with.
pub const SYSTEM: &str = "You answer questions about a project using only its documentation \
folder. Search with grep and list_files, read the relevant pages, then answer in a few \
sentences and name the page(s) you used. If the docs do not say, answer that they do not.";

/// Asks `question` of the documentation in `docs`; the agent cannot read anything else.
pub async fn ask(
    model: Arc<dyn Model>,
    docs: &Path,
    question: &str,
) -> anyhow::Result<AgentOutcome> {
    // Only reading tools, and a workspace that is the docs folder itself: `..` and absolute
    // paths out of it come back as `is_error` results.
    let tools = builtin_tools()
        .into_iter()
        .filter(|t| ["read_file", "list_files", "grep"].contains(&t.name()));
    let agent = Agent {
        config: AgentConfig {
            path: "docs".into(),
            agent_type: "docs".into(),
            model: cadre_model::DEFAULT_MODEL.into(),
            system: SYSTEM.into(),
            max_tokens: 1024,
            max_turns: 6,
            context_tokens: 200_000,
            compact_at: None,
            effort: None,
            answer: None,
            fork: None,
            continuations: 0,
        },
        model,
        tools: ToolSet::new(tools),
        ctx: ToolContext::new(Arc::new(Workspace::new(docs)?)),
        budget: Budget::new(None),
        events: no_events(),
        limiter: None,
        transcript: None,
        journal: None,
        inbox: None,
        team: None,
        hooks: None,
        content: Default::default(),
        permissions: None,
    };
    Ok(agent.run(vec![Message::user_text(question)]).await)
}
