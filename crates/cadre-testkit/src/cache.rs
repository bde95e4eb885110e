//! Prompt caching as the Messages API counts it, for tests that measure it.
//!
//! A request's prefix is read in the API's order — tools, then system blocks, then each
//! message's content blocks — and cut at its breakpoints: every block that carries
//! `cache_control`, and the last block when the request carries the request-level
//! `cache_control` (automatic caching). At each breakpoint the cache is looked up for the
//! longest prefix it holds, ending at the breakpoint or at one of the 20 blocks before it;
//! that many tokens are read from the cache (`cache_read_input_tokens`). The prefix up to
//! each breakpoint is then written, when it is at least the model's minimum length; what is
//! written beyond what was read is `cache_creation_input_tokens`, and the rest of the input
//! is `input_tokens`. Tokens are characters / 4 of each block's JSON, with its
//! `cache_control` left out (a breakpoint does not change the prefix). Entries never expire.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// How many blocks before a breakpoint the API looks back for a cached prefix.
pub const LOOKBACK_BLOCKS: usize = 20;

/// What one request read from, and wrote to, the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUse {
    /// Input tokens not read from the cache nor written to it.
    pub input_tokens: u64,
    /// Tokens written to the cache.
    pub cache_creation_input_tokens: u64,
    /// Tokens read from the cache.
    pub cache_read_input_tokens: u64,
}

/// The prefixes the mock has cached.
#[derive(Debug, Default)]
pub struct PromptCache {
    /// The shortest prefix, in tokens, that is cached.
    pub min_tokens: u64,
    entries: HashSet<u64>,
}

impl PromptCache {
    /// A cache that keeps prefixes of at least `min_tokens`.
    pub fn new(min_tokens: u64) -> Self {
        Self {
            min_tokens,
            entries: HashSet::new(),
        }
    }

    /// Counts the request `body` against the cache, and caches its prefixes.
    pub fn account(&mut self, body: &Value) -> CacheUse {
        let blocks = prefix_blocks(body);
        // Each block's prefix: a running hash (the model included) and its length in tokens.
        let mut hasher = DefaultHasher::new();
        body.get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .hash(&mut hasher);
        let mut chars = 0usize;
        let mut prefix = Vec::with_capacity(blocks.len());
        let mut breakpoints = Vec::new();
        for (i, (text, marked)) in blocks.iter().enumerate() {
            text.hash(&mut hasher);
            chars += text.len();
            prefix.push((hasher.finish(), (chars / 4) as u64));
            if *marked {
                breakpoints.push(i);
            }
        }
        let total = (chars / 4) as u64;
        let automatic = body.get("cache_control").is_some_and(|c| !c.is_null());
        if automatic && !blocks.is_empty() && breakpoints.last() != Some(&(blocks.len() - 1)) {
            breakpoints.push(blocks.len() - 1);
        }
        let read = breakpoints
            .iter()
            .filter_map(|&b| {
                (b.saturating_sub(LOOKBACK_BLOCKS)..=b)
                    .rev()
                    .find(|&j| self.entries.contains(&prefix[j].0))
                    .map(|j| prefix[j].1)
            })
            .max()
            .unwrap_or(0);
        let mut written = read;
        for &b in &breakpoints {
            let (hash, tokens) = prefix[b];
            if tokens >= self.min_tokens.max(1) {
                self.entries.insert(hash);
                written = written.max(tokens);
            }
        }
        CacheUse {
            input_tokens: total - written,
            cache_creation_input_tokens: written - read,
            cache_read_input_tokens: read,
        }
    }
}

/// The request's prefix as blocks in the API's order, each as its JSON without
/// `cache_control` (tagged with where it sits), and whether it carries a breakpoint.
fn prefix_blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |tag: &str, block: &Value| {
        let marked = block.get("cache_control").is_some_and(|c| !c.is_null());
        let mut block = block.clone();
        if let Some(obj) = block.as_object_mut() {
            obj.remove("cache_control");
        }
        out.push((format!("{tag}{block}"), marked));
    };
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push("tool:", tool);
    }
    // A bare string is read as one text block, as the API reads it.
    let text = |s: &str| serde_json::json!({"type": "text", "text": s});
    match body.get("system") {
        Some(Value::String(s)) => push("system:", &text(s)),
        Some(Value::Array(blocks)) => blocks.iter().for_each(|b| push("system:", b)),
        _ => {}
    }
    for (i, message) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let tag = format!("{i}:{role}:");
        match message.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().for_each(|b| push(&tag, b)),
            Some(Value::String(s)) => push(&tag, &text(s)),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(messages: Value) -> Value {
        json!({"model": "m", "max_tokens": 10, "cache_control": {"type": "ephemeral"},
            "system": [{"type": "text", "text": "s".repeat(400), "cache_control": {"type": "ephemeral"}}],
            "messages": messages})
    }

    #[test]
    fn a_longer_request_reads_the_prefix_an_earlier_one_wrote() {
        let mut cache = PromptCache::new(50);
        let first = request(json!([{"role": "user", "content": "a".repeat(800)}]));
        let one = cache.account(&first);
        assert_eq!(one.cache_read_input_tokens, 0);
        assert!(one.cache_creation_input_tokens > 300, "{one:?}");
        assert_eq!(one.input_tokens, 0);

        let second = request(json!([
            {"role": "user", "content": "a".repeat(800)},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c".repeat(400)}
        ]));
        let two = cache.account(&second);
        assert_eq!(two.cache_read_input_tokens, one.cache_creation_input_tokens);
        assert!(two.cache_creation_input_tokens >= 100, "{two:?}");

        // Another model shares nothing; a changed prefix reads only what still matches.
        let mut other = second.clone();
        other["model"] = json!("n");
        assert_eq!(cache.account(&other).cache_read_input_tokens, 0);
        let changed = request(json!([{"role": "user", "content": "z".repeat(800)}]));
        let three = cache.account(&changed);
        assert!(three.cache_read_input_tokens > 0 && three.cache_read_input_tokens < 200);
    }

    #[test]
    fn short_prefixes_are_not_cached_and_far_hits_are_missed() {
        let mut cache = PromptCache::new(10_000);
        let r = request(json!([{"role": "user", "content": "a"}]));
        cache.account(&r);
        assert_eq!(cache.account(&r).cache_read_input_tokens, 0);

        let mut cache = PromptCache::new(1);
        cache.account(&request(json!([{"role": "user", "content": "a"}])));
        // 21 blocks after the cached prefix, with only the automatic breakpoint: missed,
        // except for the system block's own breakpoint.
        let mut blocks = vec![json!({"type": "text", "text": "a"})];
        blocks.extend((0..21).map(|i| json!({"type": "text", "text": format!("x{i}")})));
        let far = request(json!([{"role": "user", "content": blocks}]));
        let use_ = cache.account(&far);
        assert_eq!(use_.cache_read_input_tokens, 108, "{use_:?}");
    }
}
