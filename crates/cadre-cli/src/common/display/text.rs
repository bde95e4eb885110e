//! Text as the terminal shows it: cut to a width, on one line, safe to print, and the
//! short forms of token counts, times and paths.

use std::path::{Path, PathBuf};

/// `path` as a person would type it from where cadre was started: relative to the current
/// folder when inside it, else as it is.
pub fn shown_path(path: &Path) -> PathBuf {
    let inside = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf));
    match inside {
        Some(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
        Some(rel) => rel,
        None => path.to_path_buf(),
    }
}

/// The first sentence of a description, for one-line listings.
pub fn first_sentence(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    }
}

/// Text on one line: its runs of whitespace made one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` safe to print on a terminal: control characters (escape sequences that could move
/// the cursor or erase lines) and the invisible marks that reorder or hide text are written
/// as escapes (`\u{1b}`), so what a project's files say cannot rewrite what is shown.
pub fn printable(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    if !text.chars().any(hidden) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Token counts in a short human form: 950, 12.4k, 3.1M.
pub fn human_tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Milliseconds as `m:ss`.
pub fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// `s` cut to at most `n` characters, the cut marked with `…`.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    if n == 0 {
        return String::new();
    }
    let kept: String = s.chars().take(n - 1).collect();
    format!("{kept}…")
}

/// How wide stdout's lines may be: the terminal's width, else `$COLUMNS`; `None` (no
/// limit) when stdout goes to a file or a pipe and `COLUMNS` is not set.
pub fn stdout_width() -> Option<usize> {
    if let Some((_, cols)) = console::Term::stdout().size_checked() {
        return Some(usize::from(cols));
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
}

/// Each line of `text` cut to `width` characters (no limit for `None`).
pub fn fit_lines(text: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return text.to_owned();
    };
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        out.push_str(&truncate(line, width));
        out.push('\n');
    }
    out
}
