//! `grep`: regex search over workspace files, in-process like ripgrep.

use super::file_io::blocking;
use super::walk::{compile_glob, walker, GlobFilter};
use crate::{cap_output, ToolContext, ToolError, ToolOutput, TypedTool, Workspace};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use tokio_util::sync::CancellationToken;

/// Matching lines shown when the model gives no `max_results`.
const DEFAULT_MAX_RESULTS: u64 = 200;
/// Most context lines on each side of a match.
const MAX_CONTEXT: u64 = 50;
/// Longest line shown whole (minified files would otherwise flood the output).
const MAX_LINE_CHARS: usize = 500;

/// Searches file contents for a regex.
#[derive(Debug, Default, Clone, Copy)]
pub struct GrepTool;

/// What `grep` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// Regular expression to search for.
    pub pattern: String,
    /// Folder or file to search, relative to the workspace root (default: the root).
    pub path: Option<String>,
    /// Only search files matching this glob, e.g. `*.rs`.
    pub glob: Option<String>,
    /// Ignore case (default false).
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines of context before and after each match (default 0).
    #[schemars(range(max = MAX_CONTEXT))]
    pub context: Option<u64>,
    /// Most matching lines to show.
    #[schemars(range(min = 1), description = format!("Most matching lines to show (default {DEFAULT_MAX_RESULTS})."))]
    pub max_results: Option<u64>,
}

impl TypedTool for GrepTool {
    type Input = GrepInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> String {
        format!(
            "Search file contents in the workspace for a regular expression (Rust regex syntax, \
             like ripgrep: `fn\\s+main`, `TODO|FIXME`; escape literal `(`, `.`, `{{` etc.). \
             Matches are per line.\n\
             - Output lines are `path:line:text`; with `context`, surrounding lines are \
             `path-line-text` and separate groups are split by `--`. Paths are relative to the \
             workspace root.\n\
             - `path`: a folder or single file to search, relative to the workspace root \
             (default: the whole workspace).\n\
             - `glob`: only search files matching it, e.g. `*.rs` (any depth) or `src/**/*.ts`.\n\
             - `case_insensitive`: ignore case (default false). `context`: lines before and \
             after each match (default 0, max {MAX_CONTEXT}).\n\
             - At most `max_results` matching lines are shown (default {DEFAULT_MAX_RESULTS}).\n\
             - Skips binary files, hidden files, .git and anything .gitignore/.ignore exclude. \
             No match is a normal result, not an error."
        )
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: GrepInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let matcher = regex_matcher(&input.pattern, input.case_insensitive)?;
        let filter = match input.glob.as_deref().filter(|g| !g.trim().is_empty()) {
            Some(g) => Some(compile_glob(self.name(), g)?),
            None => None,
        };
        let target = match input.path.as_deref().filter(|p| !p.trim().is_empty()) {
            Some(p) => ctx.workspace.resolve(p)?,
            None => ctx.workspace.root().to_path_buf(),
        };
        let shown_target = ctx.workspace.display(&target);
        if !target.exists() {
            return Err(ToolError::refused(format!("{shown_target} does not exist")));
        }
        let search = Search {
            matcher,
            filter,
            target,
            context: input.context.unwrap_or(0).min(MAX_CONTEXT) as usize,
            max_results: input.max_results.unwrap_or(DEFAULT_MAX_RESULTS).max(1),
            workspace: ctx.workspace.clone(),
            cancel: ctx.cancel.clone(),
        };
        let found = blocking(move || search.run()).await?;
        if found.matches == 0 {
            return Ok(ToolOutput::ok(format!(
                "no matches for `{}` in {shown_target}",
                input.pattern
            )));
        }
        let mut out = found.text;
        if found.truncated {
            out.push_str(&format!(
                "[stopped after {} matching lines; narrow the pattern, path or glob, or raise max_results]\n",
                found.matches
            ));
        }
        Ok(ToolOutput::ok(cap_output(
            &out,
            ctx.limits.max_output_bytes,
        )))
    }
}

/// Most compiled regexes kept; past it the cache starts again.
const KEPT_REGEXES: usize = 256;

/// `pattern` compiled, once per pattern and case setting: compiling costs more than
/// searching a small workspace, and agents repeat their searches.
fn regex_matcher(pattern: &str, case_insensitive: bool) -> Result<RegexMatcher, ToolError> {
    type Kept = Mutex<HashMap<(String, bool), RegexMatcher>>;
    static KEPT: OnceLock<Kept> = OnceLock::new();
    let kept = KEPT.get_or_init(Mutex::default);
    let key = (pattern.to_owned(), case_insensitive);
    if let Some(m) = kept.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(m.clone());
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|e| ToolError::invalid_input(format!("grep: invalid regex: {e}")))?;
    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() >= KEPT_REGEXES {
        kept.clear();
    }
    kept.insert(key, matcher.clone());
    Ok(matcher)
}

struct Search {
    matcher: RegexMatcher,
    filter: Option<Arc<GlobFilter>>,
    target: PathBuf,
    context: usize,
    max_results: u64,
    workspace: Arc<Workspace>,
    cancel: CancellationToken,
}

struct Found {
    text: String,
    matches: u64,
    truncated: bool,
}

impl Search {
    fn run(&self) -> Result<Found, ToolError> {
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .before_context(self.context)
            .after_context(self.context)
            .build();
        let single_file = self.target.is_file();
        let mut found = Found {
            text: String::new(),
            matches: 0,
            truncated: false,
        };
        for entry in walker(&self.target).build() {
            if self.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            if !single_file {
                if let Some(filter) = &self.filter {
                    let rel = path.strip_prefix(&self.target).unwrap_or(path);
                    if !filter.matches(rel) {
                        continue;
                    }
                }
            }
            let mut sink = FileSink {
                shown: self.workspace.display(path),
                lines: String::new(),
                matches: 0,
                budget: self.max_results - found.matches,
                binary: false,
            };
            // Unreadable files are skipped, as rg would warn and go on.
            if searcher
                .search_path(&self.matcher, path, &mut sink)
                .is_err()
                || sink.binary
            {
                continue;
            }
            if sink.matches > 0 && self.context > 0 && !found.text.is_empty() {
                found.text.push_str("--\n");
            }
            found.text.push_str(&sink.lines);
            found.matches += sink.matches;
            if found.matches >= self.max_results {
                found.truncated = true;
                break;
            }
        }
        Ok(found)
    }
}

/// Collects one file's output so a file found to be binary midway can be dropped whole.
struct FileSink {
    shown: String,
    lines: String,
    matches: u64,
    budget: u64,
    binary: bool,
}

impl FileSink {
    fn push(&mut self, sep: char, number: Option<u64>, bytes: &[u8]) {
        let number = number.unwrap_or(0);
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let text = match text.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!("{}… [line truncated]", &text[..cut]),
            None => text.to_string(),
        };
        self.lines
            .push_str(&format!("{}{sep}{number}{sep}{text}\n", self.shown));
    }
}

impl Sink for FileSink {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let first = mat.line_number();
        for (i, line) in mat.lines().enumerate() {
            self.push(':', first.map(|n| n + i as u64), line);
            self.matches += 1;
            if self.matches >= self.budget {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        self.push('-', ctx.line_number(), ctx.bytes());
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        if !self.lines.is_empty() {
            self.lines.push_str("--\n");
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}
