//! Complete answers: a subagent whose final answer stops at the output token limit
//! (`max_tokens`) is asked to go on, a bounded number of times, and the pieces are joined
//! into the one answer its parent gets.
//!
//! The request to go on is a user message, journaled like any step, so a resumed run holds
//! the same pieces. It is a user message rather than the cut answer sent back as the start
//! of the next one (a "prefill"): current Claude models refuse a conversation that ends
//! with an assistant message, and a user turn works with every model and provider. The
//! message's text marks where one answer's pieces meet, so the answer is read back from the
//! history alone.

use crate::vocab::agent_path::AgentPath;
use crate::vocab::step::Step;
use cadre_model::{ContentBlock, Message, Role};

/// How many times a subagent's cut answer is asked to go on before it is reported cut.
pub const MAX_CONTINUATIONS: u32 = 3;

/// What a subagent whose answer was cut is told.
pub const CONTINUE_PROMPT: &str = "[Your last message was cut off at the output token limit. \
Continue it exactly where it stopped, mid-word if it stopped mid-word: repeat nothing and add \
no preamble, as the parts are joined as they are.]";

/// The step that asks the agent at `agent` to go on with its cut answer.
pub(crate) fn request(agent: &AgentPath) -> Step {
    Step::UserMessage {
        agent: agent.clone(),
        message: Message::user_text(CONTINUE_PROMPT),
    }
}

/// The final answer at the end of `history`: the last assistant message's text, joined
/// after the pieces it continues.
pub(crate) fn answer(history: &[Message]) -> String {
    let Some(last) = history.iter().rposition(|m| m.role == Role::Assistant) else {
        return String::new();
    };
    let first = first_piece(history, last);
    if first == last {
        return history[last].text();
    }
    history[first..=last]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(Message::text)
        .collect()
}

/// How many times the answer at the end of `history` was asked to go on.
pub(crate) fn asked(history: &[Message]) -> u32 {
    let Some(last) = history.len().checked_sub(1) else {
        return 0;
    };
    u32::try_from((last - first_piece(history, last)) / 2).unwrap_or(u32::MAX)
}

/// Whether the answer at the end of `history`, cut at the output token limit, may be asked
/// to go on when at most `limit` requests are allowed: it is text alone (a cut tool call
/// cannot be continued) and requests are left.
pub(crate) fn may_go_on(history: &[Message], limit: u32) -> bool {
    let Some(last) = history.last().filter(|m| m.role == Role::Assistant) else {
        return false;
    };
    let calls = last
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse(_)));
    !calls && asked(history) < limit
}

/// The index of the first piece of the answer whose last piece is at `last`.
fn first_piece(history: &[Message], mut last: usize) -> usize {
    while last >= 2 && is_request(&history[last - 1]) && history[last - 2].role == Role::Assistant {
        last -= 2;
    }
    last
}

/// Whether `m` is the request to go on.
fn is_request(m: &Message) -> bool {
    m.role == Role::User
        && matches!(m.content.as_slice(), [ContentBlock::Text(t)] if t.text == CONTINUE_PROMPT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str) -> Message {
        Message::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    #[test]
    fn the_pieces_of_one_answer_are_joined_and_counted() {
        let mut history = vec![Message::user_text("go"), said("Part one, ha")];
        assert_eq!(
            (answer(&history), asked(&history)),
            ("Part one, ha".into(), 0)
        );
        assert!(may_go_on(&history, 1));
        history.push(Message::user_text(CONTINUE_PROMPT));
        history.push(said("lf done. "));
        history.push(Message::user_text(CONTINUE_PROMPT));
        history.push(said("The end."));
        assert_eq!(answer(&history), "Part one, half done. The end.");
        assert_eq!(asked(&history), 2);
        assert!(may_go_on(&history, 3) && !may_go_on(&history, 2));
        // Another user message ends the chain: only what follows it is the answer.
        history.push(Message::user_text("and now?"));
        history.push(said("Fresh."));
        assert_eq!((answer(&history), asked(&history)), ("Fresh.".into(), 0));
        assert_eq!(answer(&[]), "");
        assert!(!may_go_on(&[Message::user_text("go")], 3));
    }
}
