//! Keeping a conversation inside the model's context window.

use cadre_model::{ContentBlock, Message, Role};

/// What an old tool result is replaced with once the context runs short.
pub const CLEARED: &str = "[output cleared to keep the conversation within the context \
window; call the tool again if you still need it]";

/// Share of the context window at which old tool results start to be cleared.
pub const CLEAR_AT: f64 = 0.8;

/// Tool-result messages, newest first, that are always kept whole.
pub const KEEP_RECENT: usize = 2;

/// Replaces the content of every tool result except those in the newest `keep` tool-result
/// messages with [`CLEARED`]; returns how many results were cleared. The tool_use/tool_result
/// pairing is untouched, so the history stays valid for the API.
pub fn clear_old_tool_results(history: &mut [Message], keep: usize) -> usize {
    let holds_results = |m: &Message| {
        m.role == Role::User
            && m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult(_)))
    };
    let with_results: Vec<usize> = (0..history.len())
        .filter(|&i| holds_results(&history[i]))
        .collect();
    let old = with_results.len().saturating_sub(keep);
    let mut cleared = 0;
    for &i in &with_results[..old] {
        for block in &mut history[i].content {
            if let ContentBlock::ToolResult(r) = block {
                let already =
                    matches!(r.content.as_slice(), [ContentBlock::Text(t)] if t.text == CLEARED);
                if !already {
                    r.content = vec![ContentBlock::text(CLEARED)];
                    cleared += 1;
                }
            }
        }
    }
    cleared
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
