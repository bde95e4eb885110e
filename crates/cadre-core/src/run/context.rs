//! Keeping a conversation inside the model's context window.

use cadre_model::{ContentBlock, History, Message, Messages, Role};

/// What an old tool result is replaced with once the context runs short.
pub const CLEARED: &str = "[output cleared to keep the conversation within the context \
window; call the tool again if you still need it]";

/// Share of the context window at which old tool results start to be cleared.
pub const CLEAR_AT: f64 = 0.8;

/// Tool-result messages, newest first, that are always kept whole.
pub const KEEP_RECENT: usize = 2;

/// Share of the context window at which cadre summarises old turns itself, for models whose
/// server does not compact (OpenAI-compatible servers).
pub const SUMMARISE_AT: f64 = 0.7;

/// Assistant turns, newest first, that a client-side summary leaves as they are.
pub const KEEP_TURNS: usize = 2;

/// The instruction of a client-side summary request.
pub const SUMMARY_PROMPT: &str = "Context is running out. Write a summary of the conversation \
above for yourself, to continue the task from it alone: the task and its constraints, what has \
been done and found (files, commands, results, decisions), what is left to do, and anything you \
were about to do. Be specific and complete; do not call tools; answer with the summary only.";

/// How a client-side summary opens the message that replaces the turns it summarises.
pub const SUMMARY_HEADER: &str = "[The earlier conversation was summarised to stay within the \
context window. Summary:]";

/// What is sent of `history`: from the newest `compaction` block on (the API ignores every
/// block before it, so they need not travel), or all of it when there is none. The history
/// is shared with the request, not copied.
pub fn since_compaction(history: &History) -> Messages {
    let newest = history.iter().enumerate().rev().find_map(|(i, m)| {
        m.content
            .iter()
            .rposition(|b| matches!(b, ContentBlock::Compaction(_)))
            .map(|j| (i, j))
    });
    let (message, block) = newest.unwrap_or((0, 0));
    Messages::since(history, message, block)
}

/// Where a client-side summary may cut `history`: the index of the assistant message that
/// opens the newest `keep` assistant turns, so the summarised part ends with a user message
/// and no tool_use is parted from its tool_result. `None` when there is too little to summarise.
pub fn summary_split(history: &[Message], keep: usize) -> Option<usize> {
    let assistants: Vec<usize> = (0..history.len())
        .filter(|&i| history[i].role == Role::Assistant)
        .collect();
    let split = *assistants.get(assistants.len().checked_sub(keep)?)?;
    // At least one assistant turn before the cut, or there is nothing to summarise.
    (assistants.first() < Some(&split) && history[split - 1].role == Role::User).then_some(split)
}

/// The history after a client-side summary: one user message holding `summary`, then the
/// turns from `split` on.
pub fn replace_with_summary(history: &[Message], split: usize, summary: &str) -> Vec<Message> {
    let mut out = Vec::with_capacity(history.len() - split + 1);
    out.push(Message::user_text(format!("{SUMMARY_HEADER}\n\n{summary}")));
    out.extend_from_slice(&history[split..]);
    out
}

/// Replaces the content of every tool result except those in the newest `keep` tool-result
/// messages with [`CLEARED`]; returns how many results were cleared. The tool_use/tool_result
/// pairing is untouched, so the history stays valid for the API.
pub fn clear_old_tool_results(history: &mut [Message], keep: usize) -> usize {
    let old = old_results(history, keep);
    let mut cleared = 0;
    for i in old {
        for block in &mut history[i].content {
            if let ContentBlock::ToolResult(r) = block {
                if !is_cleared(r) {
                    r.content = vec![ContentBlock::text(CLEARED)];
                    cleared += 1;
                }
            }
        }
    }
    cleared
}

/// Whether [`clear_old_tool_results`] would clear anything.
pub fn would_clear(history: &[Message], keep: usize) -> bool {
    old_results(history, keep).into_iter().any(|i| {
        history[i].content.iter().any(|b| match b {
            ContentBlock::ToolResult(r) => !is_cleared(r),
            _ => false,
        })
    })
}

/// The indexes of the user messages holding tool results, all but the newest `keep`.
fn old_results(history: &[Message], keep: usize) -> Vec<usize> {
    let holds_results = |m: &Message| {
        m.role == Role::User
            && m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult(_)))
    };
    let mut with_results: Vec<usize> = (0..history.len())
        .filter(|&i| holds_results(&history[i]))
        .collect();
    with_results.truncate(with_results.len().saturating_sub(keep));
    with_results
}

/// Whether a tool result's output was cleared already.
fn is_cleared(r: &cadre_model::ToolResultBlock) -> bool {
    matches!(r.content.as_slice(), [ContentBlock::Text(t)] if t.text == CLEARED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(id: &str) -> Message {
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(
                id,
                format!("output of {id}"),
                false,
            )],
        )
    }

    fn turn(id: &str) -> [Message; 2] {
        [
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(id, "grep", serde_json::json!({}))],
            ),
            results(id),
        ]
    }

    #[test]
    fn only_what_follows_the_newest_compaction_is_sent() {
        let compaction = |text: &str| {
            serde_json::from_value::<ContentBlock>(
                serde_json::json!({"type": "compaction", "content": text}),
            )
            .unwrap()
        };
        let mut history = History::from(vec![Message::user_text("task")]);
        history.extend(turn("a"));
        assert_eq!(since_compaction(&history).to_vec(), *history);
        history.push(Message::new(
            Role::Assistant,
            vec![compaction("one"), ContentBlock::text("x")],
        ));
        history.push(Message::user_text("more"));
        history.push(Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("before"),
                compaction("two"),
                ContentBlock::text("after"),
            ],
        ));
        let sent = since_compaction(&history);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].content.len(), 2);
        assert_eq!(sent[0].content[0], compaction("two"));
    }

    #[test]
    fn a_summary_cuts_between_turns_and_keeps_the_newest() {
        let mut history = vec![Message::user_text("task")];
        for id in ["a", "b", "c"] {
            history.extend(turn(id));
        }
        let split = summary_split(&history, 2).unwrap();
        assert_eq!(split, 3);
        let after = replace_with_summary(&history, split, "did a");
        assert_eq!(after.len(), 5);
        assert_eq!(after[0].role, Role::User);
        assert!(after[0].text().contains("did a"));
        assert_eq!(after[1].role, Role::Assistant);
        // Two turns, two kept: nothing to summarise.
        assert_eq!(summary_split(&history[..5], 2), None);
        assert_eq!(summary_split(&history[..1], 0), None);
    }

    #[test]
    fn clears_all_but_the_newest_results_once() {
        let mut history = vec![Message::user_text("task")];
        for id in ["a", "b", "c", "d"] {
            history.push(Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(id, "grep", serde_json::json!({}))],
            ));
            history.push(results(id));
        }
        assert_eq!(clear_old_tool_results(&mut history, 2), 2);
        let text = |i: usize| serde_json::to_string(&history[i]).unwrap();
        assert!(text(2).contains("output cleared") && text(4).contains("output cleared"));
        assert!(text(6).contains("output of c") && text(8).contains("output of d"));
        assert!(text(0).contains("task"));
        // Clearing again changes nothing.
        assert_eq!(clear_old_tool_results(&mut history, 2), 0);
    }
}
