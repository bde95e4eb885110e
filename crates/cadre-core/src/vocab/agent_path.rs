//! Where an agent sits in its run's tree ([`AgentPath`]). Steps, events and records keep
//! an agent's path as this type's text (`main/explore#2`).

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Where an agent sits in its run's tree: the primary agent's type (`main`), then for each
/// subagent below it its type and its number among its run's agents of that type
/// (`main/explore#2`). Written and read as that text; any text reads back as itself.
///
/// Cloning it is cheap (its text is shared, one allocation made when the path is), so every
/// event and step carries its agent's path without copying it. Its steps are read from the
/// text when asked for, without allocating. Equal paths have equal text; paths sort as a
/// tree is read: a parent before its subagents, numbers compared as numbers.
#[derive(Clone)]
pub struct AgentPath(Arc<str>);

/// One step of a path's text: `explore#2` → (`explore`, 2); a step whose tail is not a
/// plain number (`a#01`, `main`) is all type, so every step reads back as written.
fn step(text: &str) -> (&str, Option<u32>) {
    let numbered = text.rsplit_once('#').and_then(|(kind, n)| {
        let plain = !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && (n == "0" || !n.starts_with('0'));
        let n: u32 = n.parse().ok().filter(|_| plain)?;
        Some((kind, n))
    });
    match numbered {
        Some((kind, n)) => (kind, Some(n)),
        None => (text, None),
    }
}

impl AgentPath {
    /// The primary agent of type `agent_type`.
    pub fn primary(agent_type: &str) -> Self {
        Self::parse(agent_type)
    }

    /// Reads a path as [`Display`](fmt::Display) writes it; any text reads back as itself
    /// (text of another shape, read from an old or damaged file, is kept as written).
    pub fn parse(text: &str) -> Self {
        Self(Arc::from(text))
    }

    /// The subagent of type `agent_type` numbered `ordinal`, started by this agent.
    pub fn child(&self, agent_type: &str, ordinal: u32) -> Self {
        Self::from(format!("{}/{agent_type}#{ordinal}", self.as_str()))
    }

    /// The agent that started this one; `None` for the primary agent.
    pub fn parent(&self) -> Option<Self> {
        self.as_str()
            .rsplit_once('/')
            .map(|(parent, _)| Self::parse(parent))
    }

    /// Whether this is the primary agent (it has no parent).
    pub fn is_primary(&self) -> bool {
        !self.as_str().contains('/')
    }

    /// Whether this agent is `other` or was started below it.
    pub fn is_within(&self, other: &Self) -> bool {
        match self.as_str().strip_prefix(other.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }

    /// The path's text, as [`Display`](fmt::Display) writes it (`main/explore#2`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The agent's type.
    pub fn agent_type(&self) -> &str {
        step(self.name()).0
    }

    /// The agent's number among its run's agents of its type; `None` for the primary agent.
    pub fn ordinal(&self) -> Option<u32> {
        step(self.name()).1
    }

    /// How deep it is: 0 for the primary agent.
    pub fn depth(&self) -> usize {
        self.as_str().matches('/').count()
    }

    /// Its name in a tree: the last step of its path (`explore#2`).
    pub fn name(&self) -> &str {
        self.as_str()
            .rsplit_once('/')
            .map_or(self.as_str(), |(_, last)| last)
    }

    /// The name of its transcript in the run folder, without the extension
    /// (`main/explore#2` → `main.explore-2`).
    pub fn transcript_key(&self) -> String {
        self.as_str().replace('/', ".").replace('#', "-")
    }
}

impl fmt::Display for AgentPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl fmt::Debug for AgentPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

// Equality and hashing go by the text alone: two paths with the same text have the same
// steps, since every text reads back as itself.
impl PartialEq for AgentPath {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for AgentPath {}

impl Hash for AgentPath {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for AgentPath {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for AgentPath {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for AgentPath {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<AgentPath> for str {
    fn eq(&self, other: &AgentPath) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<AgentPath> for &str {
    fn eq(&self, other: &AgentPath) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<AgentPath> for String {
    fn eq(&self, other: &AgentPath) -> bool {
        self == other.as_str()
    }
}

impl Ord for AgentPath {
    fn cmp(&self, other: &Self) -> Ordering {
        // Steps compared as (type, number), parsed only where the two first differ: equal
        // text is an equal step, and paths of one run share most of theirs.
        let (mut mine, mut theirs) = (self.as_str().split('/'), other.as_str().split('/'));
        loop {
            match (mine.next(), theirs.next()) {
                (None, None) => return Ordering::Equal,
                (None, Some(_)) => return Ordering::Less,
                (Some(_), None) => return Ordering::Greater,
                (Some(a), Some(b)) if a == b => {}
                (Some(a), Some(b)) => return step(a).cmp(&step(b)),
            }
        }
    }
}

impl PartialOrd for AgentPath {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The empty path (`""`), which names no agent: what a record that lacks one reads as.
impl Default for AgentPath {
    fn default() -> Self {
        Self::parse("")
    }
}

impl AsRef<str> for AgentPath {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for AgentPath {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for AgentPath {
    fn from(text: String) -> Self {
        Self(Arc::from(text))
    }
}

impl From<&AgentPath> for AgentPath {
    fn from(path: &AgentPath) -> Self {
        path.clone()
    }
}

impl From<AgentPath> for String {
    fn from(path: AgentPath) -> Self {
        path.as_str().to_owned()
    }
}

impl std::str::FromStr for AgentPath {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::parse(text))
    }
}

impl Serialize for AgentPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AgentPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(PathVisitor)
    }
}

/// Reads a path from any string straight into its shared text. Any text reads as a path
/// (see [`AgentPath::parse`]): a journal with an odd path stays readable.
struct PathVisitor;

impl Visitor<'_> for PathVisitor {
    type Value = AgentPath;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an agent path")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<AgentPath, E> {
        Ok(AgentPath::parse(text))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<AgentPath, E> {
        Ok(AgentPath::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_paths_read_back_as_written() {
        let path = AgentPath::primary("main")
            .child("code", 1)
            .child("explore", 12);
        assert_eq!(path.to_string(), "main/code#1/explore#12");
        assert_eq!(AgentPath::parse("main/code#1/explore#12"), path);
        assert_eq!(path.agent_type(), "explore");
        assert_eq!(path.ordinal(), Some(12));
        assert_eq!(path.depth(), 2);
        assert_eq!(path.name(), "explore#12");
        assert_eq!(path.transcript_key(), "main.code-1.explore-12");
        assert_eq!(path.parent(), Some(AgentPath::parse("main/code#1")));
        assert_eq!(
            path.parent().map(|p| p.agent_type().to_owned()),
            Some("code".into())
        );
        assert!(!path.is_primary());
        assert_eq!(AgentPath::parse("main").parent(), None);
        assert_eq!(AgentPath::parse("main").ordinal(), None);
        assert!(AgentPath::parse("main").is_primary());
        // Text of any shape reads back as itself.
        for text in [
            "main",
            "a#01",
            "a#",
            "#",
            "x#-1",
            "a//b",
            "",
            "b#4294967296",
            "é#3",
            "é#3/ü#7",
        ] {
            let path = AgentPath::parse(text);
            assert_eq!(path.to_string(), text);
            assert_eq!(path.as_str(), text);
            let json = serde_json::to_string(&path).unwrap();
            assert_eq!(serde_json::from_str::<AgentPath>(&json).unwrap(), path);
        }
        assert_eq!(AgentPath::parse("é#3/ü#7").agent_type(), "ü");
        assert_eq!(AgentPath::parse("a//b").depth(), 2);
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(json, "\"main/code#1/explore#12\"");
        assert_eq!(serde_json::from_str::<AgentPath>(&json).unwrap(), path);
        assert_eq!(format!("[{path:>24}]"), "[  main/code#1/explore#12]");
    }

    #[test]
    fn paths_are_equal_exactly_when_they_sort_equal() {
        let texts = [
            "main",
            "main/a#1",
            "main/a#01",
            "main/a",
            "main/a#1/b#2",
            "main/a#10",
            "a#1",
            "main/",
            "main//a#1",
            "",
        ];
        for x in texts {
            for y in texts {
                let (px, py) = (AgentPath::parse(x), AgentPath::parse(y));
                assert_eq!(px == py, px.cmp(&py) == Ordering::Equal, "{x:?} {y:?}");
                assert_eq!(px.cmp(&py), py.cmp(&px).reverse(), "{x:?} {y:?}");
            }
        }
    }

    #[test]
    fn an_agent_is_within_its_ancestors_only() {
        let code = AgentPath::parse("main/code#1");
        assert!(AgentPath::parse("main/code#1/explore#1").is_within(&code));
        assert!(code.is_within(&code));
        assert!(!AgentPath::parse("main/code#12").is_within(&code));
        assert!(!AgentPath::parse("main").is_within(&code));
    }

    #[test]
    fn agent_paths_sort_as_a_tree_with_numbers_as_numbers() {
        let mut paths: Vec<AgentPath> = [
            "main/explore#10",
            "main/explore#2",
            "main",
            "main/code#1/explore#1",
            "main/code#1",
        ]
        .map(AgentPath::parse)
        .to_vec();
        paths.sort();
        let shown: Vec<String> = paths.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "main",
                "main/code#1",
                "main/code#1/explore#1",
                "main/explore#2",
                "main/explore#10"
            ]
        );
    }
}
