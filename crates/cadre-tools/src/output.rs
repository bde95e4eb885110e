//! Keeping tool output within the model's budget: head and tail kept, middle cut.

use std::collections::VecDeque;

/// Share of the budget given to the head; the tail gets the rest.
const HEAD_SHARE_PERCENT: usize = 60;

/// Caps `text` to about `max_bytes`, keeping the head (~60 %) and tail (~40 %) with a marker
/// saying how much was cut from the middle. Cuts fall on char, and preferably line, boundaries.
pub fn cap_output(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let (head_budget, tail_budget) = budgets(max_bytes, text.len(), count_lines(text));
    let head_end = head_cut(text, head_budget);
    let tail_start = tail_cut(text, tail_budget).max(head_end);
    let cut = &text[head_end..tail_start];
    assemble(
        &text[..head_end],
        &text[tail_start..],
        cut.len() as u64,
        count_lines(cut),
    )
}

/// Collects a stream of output in bounded memory, keeping only what [`cap_output`] would keep.
#[derive(Debug)]
pub struct OutputBuffer {
    max_bytes: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped_bytes: u64,
    dropped_lines: u64,
}

impl OutputBuffer {
    /// A buffer whose final text will be at most about `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped_bytes: 0,
            dropped_lines: 0,
        }
    }

    /// Appends a chunk of raw output.
    pub fn push(&mut self, mut bytes: &[u8]) {
        let room = self.max_bytes.saturating_sub(self.head.len());
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(self.max_bytes);
        for byte in self.tail.drain(..excess) {
            self.dropped_bytes += 1;
            if byte == b'\n' {
                self.dropped_lines += 1;
            }
        }
    }

    /// Whether nothing has been pushed.
    pub fn is_empty(&self) -> bool {
        self.head.is_empty() && self.tail.is_empty()
    }

    /// The capped text (invalid UTF-8 replaced, since this is only shown, never edited).
    pub fn finish(self) -> String {
        let tail: Vec<u8> = self.tail.into_iter().collect();
        if self.dropped_bytes == 0 {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return cap_output(&String::from_utf8_lossy(&all), self.max_bytes);
        }
        // The tail may start inside a multi-byte char; skip its continuation bytes.
        let skip = tail
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&tail[skip..]);
        let total = head.len() as u64 + self.dropped_bytes + skip as u64 + tail.len() as u64;
        let total_lines = count_lines(&head) + self.dropped_lines + count_lines(&tail);
        let (head_budget, tail_budget) = budgets_for(self.max_bytes, total, total_lines);
        let head_end = head_cut(&head, head_budget);
        let tail_start = tail_cut(&tail, tail_budget);
        let cut_bytes =
            (head.len() - head_end) as u64 + self.dropped_bytes + skip as u64 + tail_start as u64;
        let cut_lines =
            count_lines(&head[head_end..]) + self.dropped_lines + count_lines(&tail[..tail_start]);
        assemble(&head[..head_end], &tail[tail_start..], cut_bytes, cut_lines)
    }
}

fn count_lines(text: &str) -> u64 {
    text.bytes().filter(|b| *b == b'\n').count() as u64
}

fn marker(cut_bytes: u64, cut_lines: u64) -> String {
    format!("[… {cut_bytes} bytes ({cut_lines} lines) cut from the middle …]\n")
}

fn budgets(max_bytes: usize, total: usize, total_lines: u64) -> (usize, usize) {
    budgets_for(max_bytes, total as u64, total_lines)
}

/// Splits what is left of `max_bytes` after the widest possible marker between head and tail.
fn budgets_for(max_bytes: usize, total: u64, total_lines: u64) -> (usize, usize) {
    // The marker can never be wider than one counting the whole text, plus one joining newline.
    let reserve = marker(total, total_lines).len() + 1;
    let budget = max_bytes.saturating_sub(reserve);
    let head = budget * HEAD_SHARE_PERCENT / 100;
    (head, budget - head)
}

/// End of the head: at most `budget` bytes, on a char boundary, after a newline if one is in
/// the second half of the head.
fn head_cut(text: &str, budget: usize) -> usize {
    let mut end = budget.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text[..end].rfind('\n') {
        Some(nl) if nl + 1 >= end / 2 => nl + 1,
        _ => end,
    }
}

/// Start of the tail: at most `budget` bytes before the end, on a char boundary, at a line
/// start if one is in the first half of the tail.
fn tail_cut(text: &str, budget: usize) -> usize {
    let mut start = text.len() - budget.min(text.len());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let kept = text.len() - start;
    match text[start..].find('\n') {
        Some(nl) if nl < kept / 2 && start + nl + 1 < text.len() => start + nl + 1,
        _ => start,
    }
}

fn assemble(head: &str, tail: &str, cut_bytes: u64, cut_lines: u64) -> String {
    let mut out = String::with_capacity(head.len() + tail.len() + 80);
    out.push_str(head);
    if !head.is_empty() && !head.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker(cut_bytes, cut_lines));
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_unchanged() {
        assert_eq!(cap_output("hello\n", 100), "hello\n");
        assert_eq!(cap_output("", 0), "");
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let out = cap_output(&text, 500);
        assert!(out.len() <= 500, "{} bytes", out.len());
        assert!(out.starts_with("line 0\nline 1\n"));
        assert!(out.ends_with("line 999\n"));
        assert!(out.contains("cut from the middle"));
        // Cuts fall on line boundaries: every kept line is whole.
        for line in out.lines().filter(|l| !l.starts_with('[')) {
            assert!(line.starts_with("line "), "partial line {line:?}");
        }
        // The marker's counts add up to what was removed.
        let marker = out.lines().find(|l| l.starts_with("[…")).unwrap();
        let cut: usize = marker.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(out.len() - marker.len() - 1 + cut, text.len());
        // Head gets more than the tail.
        let head = out.split("[…").next().unwrap();
        let tail = out.split("…]\n").nth(1).unwrap();
        assert!(head.len() > tail.len());
    }

    #[test]
    fn cuts_on_char_boundaries() {
        let text = "é".repeat(1000);
        let out = cap_output(&text, 301);
        assert!(out.len() <= 301);
        assert!(out.contains("cut from the middle"));
        assert!(out.starts_with('é') && out.ends_with('é'));
    }

    #[test]
    fn buffer_matches_cap_for_long_streams() {
        let text: String = (0..5000).map(|i| format!("row {i}\n")).collect();
        let mut buf = OutputBuffer::new(1000);
        for chunk in text.as_bytes().chunks(37) {
            buf.push(chunk);
        }
        let out = buf.finish();
        assert!(out.len() <= 1000, "{} bytes", out.len());
        assert!(out.starts_with("row 0\n"));
        assert!(out.ends_with("row 4999\n"));
        assert_eq!(out, cap_output(&text, 1000));
    }

    #[test]
    fn buffer_short_stream_whole() {
        let mut buf = OutputBuffer::new(1000);
        assert!(buf.is_empty());
        buf.push(b"a\n");
        buf.push(b"b\n");
        assert!(!buf.is_empty());
        assert_eq!(buf.finish(), "a\nb\n");
    }
}
