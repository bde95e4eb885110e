//! Where an agent sits in its run's tree ([`AgentPath`]). Steps, events and records keep
//! an agent's path as this type's text (`main/explore#2`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where an agent sits in its run's tree: the primary agent's type (`main`), then for each
/// subagent below it its type and its number among its run's agents of that type
/// (`main/explore#2`). Written and read as that text; any text reads back as itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct AgentPath {
    /// From the primary agent down; never empty. Ordered as a tree is read: a parent before
    /// its subagents, numbers compared as numbers.
    segments: Vec<Segment>,
}

/// One step of an agent path: `explore#2`, or the primary agent's `main`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Segment {
    agent_type: String,
    ordinal: Option<u32>,
}

impl Segment {
    /// `explore#2` → (`explore`, 2); a segment whose tail is not a plain number (`a#01`,
    /// `main`) is all type, so every segment reads back as written.
    fn parse(text: &str) -> Self {
        let numbered = text.rsplit_once('#').and_then(|(kind, n)| {
            let plain = !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'));
            let n: u32 = n.parse().ok().filter(|_| plain)?;
            Some((kind, n))
        });
        match numbered {
            Some((kind, n)) => Self {
                agent_type: kind.to_owned(),
                ordinal: Some(n),
            },
            None => Self {
                agent_type: text.to_owned(),
                ordinal: None,
            },
        }
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ordinal {
            Some(n) => write!(f, "{}#{n}", self.agent_type),
            None => f.write_str(&self.agent_type),
        }
    }
}

impl AgentPath {
    /// The primary agent of type `agent_type`.
    pub fn primary(agent_type: &str) -> Self {
        Self {
            segments: vec![Segment {
                agent_type: agent_type.to_owned(),
                ordinal: None,
            }],
        }
    }

    /// Reads a path as [`Display`](fmt::Display) writes it.
    pub fn parse(text: &str) -> Self {
        Self {
            segments: text.split('/').map(Segment::parse).collect(),
        }
    }

    /// The subagent of type `agent_type` numbered `ordinal`, started by this agent.
    pub fn child(&self, agent_type: &str, ordinal: u32) -> Self {
        let mut segments = self.segments.clone();
        segments.push(Segment {
            agent_type: agent_type.to_owned(),
            ordinal: Some(ordinal),
        });
        Self { segments }
    }

    /// The agent that started this one; `None` for the primary agent.
    pub fn parent(&self) -> Option<Self> {
        let (_, up) = self.segments.split_last()?;
        (!up.is_empty()).then(|| Self {
            segments: up.to_vec(),
        })
    }

    fn last(&self) -> Option<&Segment> {
        self.segments.last()
    }

    /// The agent's type.
    pub fn agent_type(&self) -> &str {
        self.last().map_or("", |s| s.agent_type.as_str())
    }

    /// The agent's number among its run's agents of its type; `None` for the primary agent.
    pub fn ordinal(&self) -> Option<u32> {
        self.last().and_then(|s| s.ordinal)
    }

    /// How deep it is: 0 for the primary agent.
    pub fn depth(&self) -> usize {
        self.segments.len().saturating_sub(1)
    }

    /// Its name in a tree: the last step of its path (`explore#2`).
    pub fn name(&self) -> String {
        self.last().map(Segment::to_string).unwrap_or_default()
    }

    /// The name of its transcript in the run folder, without the extension
    /// (`main/explore#2` → `main.explore-2`).
    pub fn transcript_key(&self) -> String {
        self.to_string().replace('/', ".").replace('#', "-")
    }
}

impl fmt::Display for AgentPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{segment}")?;
        }
        Ok(())
    }
}

impl From<&str> for AgentPath {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for AgentPath {
    fn from(text: String) -> Self {
        Self::parse(&text)
    }
}

impl From<AgentPath> for String {
    fn from(path: AgentPath) -> Self {
        path.to_string()
    }
}

impl std::str::FromStr for AgentPath {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::parse(text))
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
        assert_eq!(AgentPath::parse("main").parent(), None);
        assert_eq!(AgentPath::parse("main").ordinal(), None);
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
        ] {
            assert_eq!(AgentPath::parse(text).to_string(), text);
        }
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(json, "\"main/code#1/explore#12\"");
        assert_eq!(serde_json::from_str::<AgentPath>(&json).unwrap(), path);
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
