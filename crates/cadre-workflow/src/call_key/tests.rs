use super::*;
use serde_json::json;
use std::time::Duration;

fn limits() -> Limits {
    Limits {
        tokens: Some(50_000),
        turns: Some(10),
        time: Some(Duration::from_secs(300)),
    }
}

#[test]
fn the_key_is_stable_and_written_as_it_reads() {
    let schema = json!({"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]});
    let limits = limits();
    let spec = CallSpec {
        agent: "explore",
        prompt: "Label this issue: Crash",
        output_schema: Some(&schema),
        limits: &limits,
        model: "claude-sonnet-5-5",
    };
    let key = spec.key();
    // Pinned (SHA-256 of the parts as Python's `json.dumps(sort_keys=True)` writes them
    // without blanks): a change of what is hashed, or how, must be a deliberate one (bump
    // KEY_VERSION), or every journal's finished calls would run again.
    assert_eq!(
        key.to_string(),
        "610102a20d6c301ffd295f8a97ff8561946b02103ebf101498233307f2d42f45"
    );
    assert_eq!(key.to_string().parse::<CallKey>().unwrap(), key);
    assert!("abc".parse::<CallKey>().is_err());
    let json = serde_json::to_string(&key).unwrap();
    assert_eq!(serde_json::from_str::<CallKey>(&json).unwrap(), key);
}

#[test]
fn the_key_ignores_the_order_of_schema_keys() {
    let a = json!({"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}});
    let b: Value = serde_json::from_str(
        r#"{"properties": {"x": {"type": "string"}}, "required": ["x"], "type": "object"}"#,
    )
    .unwrap();
    let limits = limits();
    let spec = |schema| CallSpec {
        agent: "explore",
        prompt: "p",
        output_schema: Some(schema),
        limits: &limits,
        model: "m",
    };
    assert_eq!(spec(&a).key(), spec(&b).key());
}

#[test]
fn the_key_changes_when_any_part_changes() {
    let schema = json!({"type": "object"});
    let other_schema = json!({"type": "object", "required": []});
    let limits = limits();
    let fewer_turns = Limits {
        turns: Some(9),
        ..limits
    };
    let less_time = Limits {
        time: Some(Duration::from_secs(299)),
        ..limits
    };
    let base = CallSpec {
        agent: "explore",
        prompt: "p",
        output_schema: Some(&schema),
        limits: &limits,
        model: "m",
    };
    let variants = [
        CallSpec {
            agent: "plan",
            ..base
        },
        CallSpec {
            prompt: "p ",
            ..base
        },
        CallSpec {
            output_schema: None,
            ..base
        },
        CallSpec {
            output_schema: Some(&other_schema),
            ..base
        },
        CallSpec {
            limits: &fewer_turns,
            ..base
        },
        CallSpec {
            limits: &less_time,
            ..base
        },
        CallSpec {
            limits: &Limits::default(),
            ..base
        },
        CallSpec {
            model: "m2",
            ..base
        },
    ];
    let mut keys = std::collections::BTreeSet::from([base.key()]);
    for v in variants {
        assert!(keys.insert(v.key()), "{v:?} has the key of another call");
    }
    assert_eq!(base.key(), CallSpec { ..base }.key());
}
