use super::LocalServer;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::routing::post;
use axum::Router;
use cadre_model::sse::StreamAssembler;
use cadre_model::{
    AnthropicConfig, AnthropicModel, CacheControl, Cassette, CassetteHeader, ContentBlock,
    Exchange, ImageBlock, Message, Model, ModelError, ModelEvent, OpenAiConfig, OpenAiModel,
    RedactedThinkingBlock, Request, RequestOrigin, Response, RetryPolicy, Role, StopReason,
    TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage,
};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// -----------------------------------------------------------------------------------
// Running properties.

/// Proptest's default case count: `PROPTEST_CASES` when set, else 256.
fn default_cases() -> u32 {
    Config::default().cases
}

/// Runs `test` on `cases` inputs from `strategy`, prints how many ran and how long it
/// took, and fails with the shrunk input if any case fails or panics.
fn check<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let config = Config {
        cases,
        // Failures print the shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let ran = AtomicU32::new(0);
    let started = Instant::now();
    let result = runner.run(&strategy, |value| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(value)
    });
    eprintln!(
        "fuzz::{name}: {} cases in {:.2?}",
        ran.load(Ordering::Relaxed),
        started.elapsed()
    );
    if let Err(e) = result {
        panic!("fuzz::{name} failed: {e}");
    }
}

/// A typed case under `err` is clear when its own message is not blank.
fn inner_is_clear(err: &ModelError, inner: &dyn std::error::Error) -> Result<(), TestCaseError> {
    prop_assert!(!inner.to_string().trim().is_empty(), "blank error: {err:?}");
    Ok(())
}

/// An error is clear when its message, and the detail it carries, are not blank and
/// it does not hide its cause.
fn clear(err: &ModelError) -> Result<(), TestCaseError> {
    let shown = err.to_string();
    prop_assert!(!shown.trim().is_empty(), "blank error: {err:?}");
    let detail: Vec<&str> = match err {
        ModelError::Api { kind, message, .. } => vec![kind, message],
        ModelError::StreamError { kind, message } => vec![kind, message],
        ModelError::Connect { reason, .. } => vec![reason],
        // Their typed cases, told in their own words.
        ModelError::Protocol(e) => {
            inner_is_clear(err, e)?;
            vec![]
        }
        ModelError::Config(e) => {
            inner_is_clear(err, e)?;
            vec![]
        }
        ModelError::Replay(e) => {
            inner_is_clear(err, e)?;
            vec![]
        }
        // What failed, and the error underneath, which must be clear too.
        ModelError::Malformed { what, source } | ModelError::Cassette { what, source } => {
            prop_assert!(!source.to_string().trim().is_empty(), "{err:?}");
            vec![what]
        }
        ModelError::Idle(_) => vec![],
        ModelError::RetriesExhausted { last, .. } => return clear(last),
        // Variants whose text is all their own: their message is checked above.
        _ => vec![],
    };
    for d in detail {
        prop_assert!(
            !d.trim().is_empty(),
            "an error with a blank detail: {err:?}"
        );
    }
    // serde's untagged enums hide the real cause behind "did not match any variant".
    prop_assert!(
        !shown.contains("untagged enum"),
        "an error hiding its cause: {shown}"
    );
    Ok(())
}

// -----------------------------------------------------------------------------------
// Strategies: strings, JSON, wire types.

/// Short strings of any characters (control characters, newlines and astral ones too).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "(?s).{0,12}",
        1 => "[a-z_]{0,10}",
        1 => "[\\x00-\\x1f\"\\\\\u{2028}\u{feff}\u{1F600}]{0,6}",
    ]
}

/// Words the Messages API uses, so random objects reach past the first check.
const WORDS: &[&str] = &[
    "type",
    "index",
    "delta",
    "content_block",
    "message",
    "usage",
    "error",
    "text",
    "thinking",
    "signature",
    "partial_json",
    "citation",
    "citations",
    "id",
    "name",
    "input",
    "data",
    "source",
    "content",
    "tool_use_id",
    "is_error",
    "cache_control",
    "role",
    "model",
    "stop_reason",
    "stop_sequence",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "ttl",
    "ephemeral",
    "tool_use",
    "tool_result",
    "redacted_thinking",
    "image",
    "server_tool_use",
    "user",
    "assistant",
    "end_turn",
    "text_delta",
    "thinking_delta",
    "signature_delta",
    "input_json_delta",
    "citations_delta",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "overloaded_error",
    "",
];

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(WORDS).prop_map(str::to_owned)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![3 => word(), 1 => text()]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0u64..4).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| {
            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
        }),
        1 => Just(json!(-1)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(1.5)),
    ]
}

/// Any JSON value, at most four levels deep, with words of the API for keys and strings.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => number(),
        2 => text().prop_map(Value::String),
        2 => word().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(key(), arb_json(), 0..4).prop_map(|m| m.into_iter().collect())
}

/// Fields a struct does not model; prefixed so they never shadow a modelled field.
fn extra() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("x_[a-z]{0,6}", arb_json(), 0..2)
        .prop_map(|m| m.into_iter().collect())
}

fn cache_control() -> impl Strategy<Value = Option<CacheControl>> {
    prop::option::of(
        prop::option::of(prop::sample::select(&["5m", "1h"][..])).prop_map(|ttl| CacheControl {
            kind: "ephemeral".into(),
            ttl: ttl.map(str::to_owned),
        }),
    )
}

/// A block of every kind but `tool_result`.
fn simple_block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        (text(), cache_control(), extra()).prop_map(|(text, cache_control, extra)| {
            ContentBlock::Text(TextBlock {
                text,
                cache_control,
                extra,
            })
        }),
        (text(), text(), arb_json(), cache_control(), extra()).prop_map(
            |(id, name, input, cache_control, extra)| {
                ContentBlock::ToolUse(ToolUseBlock {
                    id,
                    name,
                    input,
                    cache_control,
                    invalid_input: None,
                    extra,
                })
            }
        ),
        (text(), text(), extra()).prop_map(|(thinking, signature, extra)| {
            ContentBlock::Thinking(ThinkingBlock {
                thinking,
                signature,
                extra,
            })
        }),
        (text(), extra()).prop_map(|(data, extra)| {
            ContentBlock::RedactedThinking(RedactedThinkingBlock { data, extra })
        }),
        (arb_json(), cache_control(), extra()).prop_map(|(source, cache_control, extra)| {
            ContentBlock::Image(ImageBlock {
                source,
                cache_control,
                extra,
            })
        }),
        (
            prop_oneof![
                Just("server_tool_use".to_owned()),
                Just("document".to_owned()),
                "x_[a-z]{0,8}"
            ],
            arb_object()
        )
            .prop_map(|(kind, mut obj)| {
                obj.insert("type".into(), Value::String(kind));
                ContentBlock::Unknown(Value::Object(obj))
            }),
    ]
}

/// Any block, `tool_result` (holding simple blocks) included.
fn block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        4 => simple_block(),
        1 => (
            text(),
            prop::collection::vec(simple_block(), 0..3),
            any::<bool>(),
            cache_control(),
            extra()
        )
            .prop_map(|(tool_use_id, content, is_error, cache_control, extra)| {
                ContentBlock::ToolResult(ToolResultBlock {
                    tool_use_id,
                    content,
                    is_error,
                    cache_control,
                    extra,
                })
            }),
    ]
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::User), Just(Role::Assistant)]
}

fn message() -> impl Strategy<Value = Message> {
    (role(), prop::collection::vec(block(), 0..4))
        .prop_map(|(role, content)| Message::new(role, content))
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        Just(StopReason::EndTurn),
        Just(StopReason::ToolUse),
        Just(StopReason::MaxTokens),
        Just(StopReason::StopSequence),
        Just(StopReason::PauseTurn),
        Just(StopReason::Refusal),
        Just(StopReason::ModelContextWindowExceeded),
        // `Other` only ever holds a spelling `parse` does not know.
        text().prop_map(|s| StopReason::parse(&s)),
    ]
}

fn usage() -> impl Strategy<Value = Usage> {
    (any::<u64>(), any::<u64>(), 0u64..1 << 40, 0u64..1 << 40).prop_map(|(a, b, c, d)| Usage {
        input_tokens: a,
        output_tokens: b,
        cache_creation_input_tokens: c,
        cache_read_input_tokens: d,
        ..Default::default()
    })
}

fn response() -> impl Strategy<Value = Response> {
    (
        text(),
        text(),
        role(),
        prop::collection::vec(block(), 0..4),
        prop::option::of(stop_reason()),
        prop::option::of(text()),
        usage(),
    )
        .prop_map(
            |(id, model, role, content, stop_reason, stop_sequence, usage)| Response {
                id,
                model,
                role,
                content,
                stop_reason,
                stop_sequence,
                usage,
            },
        )
}

/// One random edit somewhere in a JSON tree.
#[derive(Debug, Clone)]
enum Edit {
    /// Remove the `n`th node (a key of its object, an item of its array).
    Remove(usize),
    /// Replace the `n`th node.
    Replace(usize, Value),
    /// Give the `n`th node (if an object) one more key.
    Add(usize, String, Value),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Remove),
        (any::<usize>(), arb_json()).prop_map(|(n, v)| Edit::Replace(n, v)),
        (any::<usize>(), key(), arb_json()).prop_map(|(n, k, v)| Edit::Add(n, k, v)),
    ]
}

/// The JSON pointers of every node of `v`, in pre-order.
fn pointers(v: &Value, here: String, out: &mut Vec<String>) {
    out.push(here.clone());
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{here}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let k = k.replace('~', "~0").replace('/', "~1");
                pointers(item, format!("{here}/{k}"), out);
            }
        }
        _ => {}
    }
}

fn apply_edit(v: &mut Value, edit: &Edit) {
    let mut all = Vec::new();
    pointers(v, String::new(), &mut all);
    let pick = |n: usize| all[n % all.len()].clone();
    match edit {
        Edit::Replace(n, new) => {
            if let Some(node) = v.pointer_mut(&pick(*n)) {
                *node = new.clone();
            }
        }
        Edit::Add(n, k, new) => {
            if let Some(Value::Object(map)) = v.pointer_mut(&pick(*n)) {
                map.insert(k.clone(), new.clone());
            }
        }
        Edit::Remove(n) => {
            let at = pick(*n);
            let Some(cut) = at.rfind('/') else { return };
            let last = at[cut + 1..].replace("~1", "/").replace("~0", "~");
            match v.pointer_mut(&at[..cut]) {
                Some(Value::Object(map)) => {
                    map.remove(&last);
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = last.parse::<usize>() {
                        if i < items.len() {
                            items.remove(i);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// A valid value's JSON with a few random edits: mostly almost valid.
fn mutated<T: serde::Serialize + std::fmt::Debug>(
    valid: impl Strategy<Value = T>,
) -> impl Strategy<Value = Value> {
    (valid, prop::collection::vec(edit(), 0..4)).prop_map(|(v, edits)| {
        let mut json = serde_json::to_value(&v).unwrap();
        for e in &edits {
            apply_edit(&mut json, e);
        }
        json
    })
}

// -----------------------------------------------------------------------------------
// 2. Wire types.

/// Anything that decodes encodes back to JSON that decodes to an equal value; anything
/// that does not gets a clear error. Returns whether `input` decoded.
fn round_trips<T>(input: &Value) -> Result<bool, TestCaseError>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let from_text = serde_json::from_str::<T>(&input.to_string());
    match serde_json::from_value::<T>(input.clone()) {
        Ok(v) => {
            prop_assert!(from_text.is_ok(), "from_value and from_str disagree");
            let text = serde_json::to_string(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: T = serde_json::from_str(&text)
                .map_err(|e| TestCaseError::fail(format!("{text} does not decode: {e}")))?;
            prop_assert_eq!(&back, &v, "round trip through {}", text);
            let again =
                serde_json::to_string(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(again, text, "encoding is not stable");
            Ok(true)
        }
        Err(e) => {
            prop_assert!(from_text.is_err(), "from_value and from_str disagree");
            let shown = e.to_string();
            prop_assert!(!shown.trim().is_empty());
            prop_assert!(
                !shown.contains("untagged enum"),
                "an error hiding its cause: {shown}"
            );
            Ok(false)
        }
    }
}

#[test]
fn wire_types_round_trip() {
    check(
        "wire_types_round_trip",
        default_cases(),
        (block(), message(), response()),
        |(b, m, r)| {
            prop_assert!(round_trips::<ContentBlock>(
                &serde_json::to_value(&b).unwrap()
            )?);
            prop_assert!(round_trips::<Message>(&serde_json::to_value(&m).unwrap())?);
            prop_assert!(round_trips::<Response>(&serde_json::to_value(&r).unwrap())?);
            Ok(())
        },
    );
}

#[test]
fn wire_types_from_arbitrary_json() {
    let decoded = AtomicU32::new(0);
    check(
        "wire_types_from_arbitrary_json",
        default_cases(),
        prop_oneof![
            1 => arb_json(),
            3 => mutated(block()),
            3 => mutated(message()),
            3 => mutated(response()),
        ],
        |v| {
            let mut any = false;
            any |= round_trips::<ContentBlock>(&v)?;
            any |= round_trips::<Message>(&v)?;
            any |= round_trips::<Response>(&v)?;
            any |= round_trips::<Vec<ContentBlock>>(&v)?;
            if any {
                decoded.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz::wire_types_from_arbitrary_json: {} inputs decoded as some wire type",
        decoded.load(Ordering::Relaxed)
    );
}

// -----------------------------------------------------------------------------------
// 3. Cassettes.

fn exchange() -> impl Strategy<Value = Exchange> {
    (
        "[a-z#/]{0,10}",
        "[a-z]{0,6}",
        prop::collection::vec(message(), 1..3),
        response(),
    )
        .prop_map(|(path, agent_type, messages, response)| {
            let mut request = Request::new("claude-test", 64, messages);
            request.origin = Some(RequestOrigin { path, agent_type });
            Exchange::new(&request, response)
        })
}

#[derive(Debug, Clone)]
enum TextEdit {
    Truncate(usize),
    Flip(usize, u8),
    DuplicateLine(usize),
    DeleteLine(usize),
    SwapLines(usize, usize),
    InsertLine(usize, String),
}

fn text_edit() -> impl Strategy<Value = TextEdit> {
    prop_oneof![
        any::<usize>().prop_map(TextEdit::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| TextEdit::Flip(i, b)),
        any::<usize>().prop_map(TextEdit::DuplicateLine),
        any::<usize>().prop_map(TextEdit::DeleteLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TextEdit::SwapLines(a, b)),
        (
            any::<usize>(),
            prop_oneof![text(), arb_json().prop_map(|v| v.to_string())]
        )
            .prop_map(|(i, l)| TextEdit::InsertLine(i, l)),
    ]
}

fn apply_text_edit(text: &str, edit: &TextEdit) -> String {
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let n = lines.len();
    match edit {
        TextEdit::Truncate(at) => {
            let bytes = text.as_bytes();
            return String::from_utf8_lossy(&bytes[..at % (bytes.len() + 1)]).into_owned();
        }
        TextEdit::Flip(at, b) => {
            let mut bytes = text.as_bytes().to_vec();
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] ^= b | 1;
            }
            return String::from_utf8_lossy(&bytes).into_owned();
        }
        TextEdit::DuplicateLine(i) => {
            let line = lines[i % n].clone();
            lines.insert(i % n, line);
        }
        TextEdit::DeleteLine(i) => {
            lines.remove(i % n);
        }
        TextEdit::SwapLines(a, b) => lines.swap(a % n, b % n),
        TextEdit::InsertLine(i, line) => lines.insert(i % (n + 1), line.clone()),
    }
    lines.join("\n")
}

/// `Cassette::parse` gives `Ok` or a clear `Replay` or `Cassette` error naming the file; whatever it
/// accepts writes back to text it reads as the same cassette.
fn parses_cleanly(text: &str) -> Result<Option<Cassette>, TestCaseError> {
    match Cassette::parse(text, "fuzz.jsonl") {
        Ok(c) => {
            let again = c
                .to_jsonl()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = Cassette::parse(&again, "again.jsonl")
                .map_err(|e| TestCaseError::fail(format!("re-parse failed: {e}")))?;
            prop_assert_eq!(&back.header, &c.header);
            prop_assert_eq!(&back.exchanges, &c.exchanges);
            prop_assert_eq!(back.truncated_tail, None);
            Ok(Some(c))
        }
        Err(e) => {
            clear(&e)?;
            prop_assert!(
                matches!(e, ModelError::Replay(_) | ModelError::Cassette { .. }),
                "{e:?}"
            );
            prop_assert!(e.to_string().contains("fuzz.jsonl"), "{e}");
            Ok(None)
        }
    }
}

#[test]
fn cassette_parse_arbitrary_text() {
    let lines = prop_oneof![
        2 => text(),
        2 => arb_json().prop_map(|v| v.to_string()),
        1 => Just(r#"{"cadre_cassette":1,"created_by":"fuzz"}"#.to_owned()),
        1 => exchange().prop_map(|e| serde_json::to_string(&e).unwrap()),
    ];
    check(
        "cassette_parse_arbitrary_text",
        default_cases(),
        prop_oneof![
            "(?s).{0,200}",
            prop::collection::vec(lines, 0..5).prop_map(|l| l.join("\n")),
        ],
        |text| parses_cleanly(&text).map(|_| ()),
    );
}

#[test]
fn cassette_parse_mutated() {
    check(
        "cassette_parse_mutated",
        default_cases(),
        (
            prop::collection::vec(exchange(), 0..3),
            prop::collection::vec(text_edit(), 0..4),
        ),
        |(exchanges, edits)| {
            let cassette = Cassette {
                header: CassetteHeader::default(),
                exchanges,
                truncated_tail: None,
            };
            let valid = cassette.to_jsonl().unwrap();
            let parsed = parses_cleanly(&valid)?;
            prop_assert_eq!(parsed.as_ref(), Some(&cassette));
            let mut text = valid;
            for e in &edits {
                text = apply_text_edit(&text, e);
            }
            parses_cleanly(&text).map(|_| ())
        },
    );
}

// -----------------------------------------------------------------------------------
// 1. Stream assembly.

const EVENT_NAMES: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "message",
    "",
];
const DELTA_TYPES: &[&str] = &[
    "text_delta",
    "thinking_delta",
    "signature_delta",
    "input_json_delta",
    "citations_delta",
    "brand_new_delta",
];
const BLOCK_TYPES: &[&str] = &[
    "text",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "server_tool_use",
    "image",
    "tool_result",
    "web_search_tool_result",
];

fn index() -> impl Strategy<Value = Value> {
    prop_oneof![6 => (0u64..3).prop_map(Value::from), 1 => number(), 1 => arb_json()]
}

/// A JSON field that is usually a string and sometimes anything.
fn stringish() -> impl Strategy<Value = Value> {
    prop_oneof![4 => text().prop_map(Value::String), 1 => arb_json()]
}

/// An object holding some of `fields` (each present with a fair chance).
fn some_of(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let parts: Vec<_> = fields
        .into_iter()
        .map(|(k, s)| prop::option::weighted(0.8, s).prop_map(move |v| (k, v)))
        .collect();
    (parts, prop::option::weighted(0.2, arb_object()))
        .prop_map(|(parts, junk)| {
            let mut obj = Map::new();
            for (k, v) in parts {
                if let Some(v) = v {
                    obj.insert(k.to_owned(), v);
                }
            }
            obj.extend(junk.unwrap_or_default());
            Value::Object(obj)
        })
        .boxed()
}

fn sel(words: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![
        5 => prop::sample::select(words).prop_map(|w| Value::String(w.to_owned())),
        1 => stringish(),
    ]
    .boxed()
}

/// The data of a stream event: mostly shaped like the real thing, with random holes.
fn event_data(name: &'static str) -> BoxedStrategy<Value> {
    let ty = || -> BoxedStrategy<Value> {
        prop_oneof![4 => Just(Value::String(name.to_owned())), 1 => sel(EVENT_NAMES)].boxed()
    };
    let usage = || {
        some_of(vec![
            ("input_tokens", number().boxed()),
            ("output_tokens", number().boxed()),
            ("cache_read_input_tokens", number().boxed()),
            ("cache_creation_input_tokens", number().boxed()),
        ])
    };
    match name {
        "message_start" => some_of(vec![
            ("type", ty()),
            (
                "message",
                some_of(vec![
                    ("id", stringish().boxed()),
                    ("model", stringish().boxed()),
                    ("usage", usage()),
                ]),
            ),
        ]),
        "content_block_start" => some_of(vec![
            ("type", ty()),
            ("index", index().boxed()),
            (
                "content_block",
                some_of(vec![
                    ("type", sel(BLOCK_TYPES)),
                    ("text", stringish().boxed()),
                    ("thinking", stringish().boxed()),
                    ("signature", stringish().boxed()),
                    ("data", stringish().boxed()),
                    ("id", stringish().boxed()),
                    ("name", stringish().boxed()),
                    ("input", arb_json().boxed()),
                ]),
            ),
        ]),
        "content_block_delta" => some_of(vec![
            ("type", ty()),
            ("index", index().boxed()),
            (
                "delta",
                some_of(vec![
                    ("type", sel(DELTA_TYPES)),
                    ("text", stringish().boxed()),
                    ("thinking", stringish().boxed()),
                    ("signature", stringish().boxed()),
                    (
                        "partial_json",
                        prop_oneof![
                            3 => prop::sample::select(&["{", "}", "\"a\"", ":", "1", ",", "[", "]", "", " "][..])
                                .prop_map(|s| Value::String(s.to_owned())),
                            1 => stringish(),
                        ]
                        .boxed(),
                    ),
                    ("citation", arb_json().boxed()),
                ]),
            ),
        ]),
        "content_block_stop" => {
            some_of(vec![("type", ty()), ("index", index().boxed())])
        }
        "message_delta" => some_of(vec![
            ("type", ty()),
            (
                "delta",
                some_of(vec![
                    ("stop_reason", sel(&["end_turn", "tool_use", "max_tokens"])),
                    ("stop_sequence", stringish().boxed()),
                ]),
            ),
            ("usage", usage()),
        ]),
        "error" => some_of(vec![
            ("type", ty()),
            (
                "error",
                some_of(vec![
                    ("type", stringish().boxed()),
                    ("message", stringish().boxed()),
                ]),
            ),
        ]),
        _ => some_of(vec![("type", ty())]),
    }
}

/// One `(event name, data)` pair: well-formed-looking, arbitrary JSON, or raw text.
fn sse_event() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        6 => prop::sample::select(EVENT_NAMES).prop_map(str::to_owned),
        1 => text(),
    ];
    let shaped = prop::sample::select(EVENT_NAMES).prop_flat_map(|n| {
        let real = n.to_owned();
        (
            prop_oneof![5 => Just(real), 1 => text()],
            event_data(n).prop_map(|v| v.to_string()),
        )
    });
    prop_oneof![
        6 => shaped,
        1 => (name.clone(), arb_json().prop_map(|v| v.to_string())),
        1 => (name, prop_oneof![text(), "(?s).{0,64}"]),
    ]
}

#[test]
fn stream_assembler_random_events() {
    let (pushed, assembled) = (AtomicU32::new(0), AtomicU32::new(0));
    check(
        "stream_assembler_random_events",
        default_cases(),
        prop::collection::vec(sse_event(), 0..24),
        |events| {
            let mut asm = StreamAssembler::new();
            for (name, data) in &events {
                // Keep pushing after an error: the assembler must stay usable.
                match asm.push(name, data, &cadre_model::ignore_events) {
                    Ok(()) => {
                        pushed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => clear(&e)?,
                }
            }
            match asm.finish() {
                Ok(resp) => {
                    assembled.fetch_add(1, Ordering::Relaxed);
                    prop_assert!(round_trips::<Response>(
                        &serde_json::to_value(&resp).unwrap()
                    )?);
                }
                Err(e) => clear(&e)?,
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz::stream_assembler_random_events: {} events accepted, {} responses assembled",
        pushed.load(Ordering::Relaxed),
        assembled.load(Ordering::Relaxed)
    );
}

/// A block of a valid Messages API stream.
#[derive(Debug, Clone)]
enum BlockSpec {
    Text(Vec<String>),
    Thinking(Vec<String>, String),
    Redacted(String),
    ToolUse(String, String, Value, Vec<usize>),
    ServerTool(String, Value, Vec<usize>),
}

/// A valid streamed Messages API response and how it is framed.
#[derive(Debug, Clone)]
struct StreamSpec {
    id: String,
    model: String,
    blocks: Vec<BlockSpec>,
    stop: &'static str,
    stop_sequence: String,
    usage: Usage,
    crlf: bool,
    pretty: bool,
    pings: bool,
}

fn tool_input() -> impl Strategy<Value = Value> {
    arb_object().prop_map(Value::Object)
}

fn block_spec() -> impl Strategy<Value = BlockSpec> {
    let pieces = || prop::collection::vec(text(), 0..5);
    let cuts = || prop::collection::vec(any::<usize>(), 0..6);
    prop_oneof![
        3 => pieces().prop_map(BlockSpec::Text),
        1 => (pieces(), text()).prop_map(|(p, s)| BlockSpec::Thinking(p, s)),
        1 => text().prop_map(BlockSpec::Redacted),
        2 => (text(), text(), tool_input(), cuts())
            .prop_map(|(id, name, input, c)| BlockSpec::ToolUse(id, name, input, c)),
        1 => (text(), tool_input(), cuts()).prop_map(|(id, input, c)| BlockSpec::ServerTool(id, input, c)),
    ]
}

fn stream_spec() -> impl Strategy<Value = StreamSpec> {
    (
        (text(), text(), prop::collection::vec(block_spec(), 0..5)),
        prop::sample::select(
            &[
                "end_turn",
                "tool_use",
                "max_tokens",
                "stop_sequence",
                "pause_turn",
                "something_new",
            ][..],
        ),
        text(),
        (0u64..1 << 32, 0u64..1 << 32, 0u64..1 << 32, 0u64..1 << 32),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |((id, model, blocks), stop, stop_sequence, (i, o, cc, cr), (crlf, pretty, pings))| {
                StreamSpec {
                    id,
                    model,
                    blocks,
                    stop,
                    stop_sequence,
                    usage: Usage {
                        input_tokens: i,
                        output_tokens: o,
                        cache_creation_input_tokens: cc,
                        cache_read_input_tokens: cr,
                        ..Default::default()
                    },
                    crlf,
                    pretty,
                    pings,
                }
            },
        )
}

/// `s` cut at the char boundaries at or before `cuts` (taken modulo its length).
fn split_text(s: &str, cuts: &[usize]) -> Vec<String> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| {
            let mut i = c % (s.len() + 1);
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            i
        })
        .collect();
    at.push(0);
    at.push(s.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| s[w[0]..w[1]].to_owned()).collect()
}

/// `bytes` cut at `cuts` (taken modulo its length).
fn split_bytes(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

impl StreamSpec {
    /// The events of the stream, with their data.
    fn events(&self) -> Vec<(&'static str, Value)> {
        let mut out = vec![(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": 1,
                          "cache_creation_input_tokens": self.usage.cache_creation_input_tokens,
                          "cache_read_input_tokens": self.usage.cache_read_input_tokens}}}),
        )];
        for (index, block) in self.blocks.iter().enumerate() {
            let start = |b: Value| {
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": b}),
                )
            };
            let delta = |d: Value| {
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": d}),
                )
            };
            match block {
                BlockSpec::Text(pieces) => {
                    out.push(start(json!({"type": "text", "text": ""})));
                    for p in pieces {
                        out.push(delta(json!({"type": "text_delta", "text": p})));
                    }
                }
                BlockSpec::Thinking(pieces, sig) => {
                    out.push(start(
                        json!({"type": "thinking", "thinking": "", "signature": ""}),
                    ));
                    for p in pieces {
                        out.push(delta(json!({"type": "thinking_delta", "thinking": p})));
                    }
                    out.push(delta(json!({"type": "signature_delta", "signature": sig})));
                }
                BlockSpec::Redacted(data) => {
                    out.push(start(json!({"type": "redacted_thinking", "data": data})));
                }
                BlockSpec::ToolUse(id, name, input, cuts) => {
                    out.push(start(
                        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    ));
                    for p in split_text(&input.to_string(), cuts) {
                        out.push(delta(
                            json!({"type": "input_json_delta", "partial_json": p}),
                        ));
                    }
                }
                BlockSpec::ServerTool(id, input, cuts) => {
                    out.push(start(json!({"type": "server_tool_use", "id": id, "name": "web_search", "input": {}})));
                    for p in split_text(&input.to_string(), cuts) {
                        out.push(delta(
                            json!({"type": "input_json_delta", "partial_json": p}),
                        ));
                    }
                }
            }
            if self.pings {
                out.push(("ping", json!({"type": "ping"})));
            }
            out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        let seq = (self.stop == "stop_sequence").then(|| self.stop_sequence.clone());
        out.push((
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": self.stop, "stop_sequence": seq},
                   "usage": {"output_tokens": self.usage.output_tokens}}),
        ));
        out.push(("message_stop", json!({"type": "message_stop"})));
        out
    }

    /// The stream as SSE text.
    fn sse(&self) -> String {
        let eol = if self.crlf { "\r\n" } else { "\n" };
        let mut out = String::new();
        for (i, (name, data)) in self.events().into_iter().enumerate() {
            if self.pings && i % 3 == 1 {
                out.push_str(&format!(": keep-alive{eol}"));
            }
            out.push_str(&format!("event: {name}{eol}"));
            let json = if self.pretty {
                serde_json::to_string_pretty(&data).unwrap()
            } else {
                data.to_string()
            };
            // Pretty JSON breaks lines only between tokens: several `data:` lines.
            for line in json.split('\n') {
                out.push_str(&format!("data: {line}{eol}"));
            }
            out.push_str(eol);
        }
        out
    }

    /// The response the stream describes.
    fn expected(&self) -> Response {
        let content = self
            .blocks
            .iter()
            .map(|b| match b {
                BlockSpec::Text(p) => ContentBlock::text(p.concat()),
                BlockSpec::Thinking(p, sig) => ContentBlock::Thinking(ThinkingBlock {
                    thinking: p.concat(),
                    signature: sig.clone(),
                    extra: Map::new(),
                }),
                BlockSpec::Redacted(data) => {
                    ContentBlock::RedactedThinking(RedactedThinkingBlock {
                        data: data.clone(),
                        extra: Map::new(),
                    })
                }
                BlockSpec::ToolUse(id, name, input, _) => {
                    ContentBlock::tool_use(id.clone(), name.clone(), input.clone())
                }
                BlockSpec::ServerTool(id, input, _) => ContentBlock::Unknown(json!({
                    "type": "server_tool_use", "id": id, "name": "web_search", "input": input
                })),
            })
            .collect();
        Response {
            id: self.id.clone(),
            model: self.model.clone(),
            role: Role::Assistant,
            content,
            stop_reason: Some(StopReason::parse(self.stop)),
            stop_sequence: (self.stop == "stop_sequence").then(|| self.stop_sequence.clone()),
            usage: self.usage,
        }
    }
}

/// Assembles chunks of SSE bytes as `AnthropicModel` does.
fn assemble(chunks: Vec<Vec<u8>>) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
    let seen = Mutex::new(Vec::new());
    let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
    let out = futures::executor::block_on(async {
        let bytes = chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(Bytes::from(c)));
        let mut stream = futures::stream::iter(bytes).eventsource();
        let mut asm = StreamAssembler::new();
        while let Some(next) = stream.next().await {
            match next {
                Ok(event) => {
                    asm.push(&event.event, &event.data, &sink)?;
                    if asm.is_complete() {
                        break;
                    }
                }
                Err(EventStreamError::Transport(never)) => match never {},
                Err(e) => {
                    return Err(ModelError::Malformed {
                        what: "the event stream could not be parsed".into(),
                        source: Box::new(e),
                    })
                }
            }
        }
        asm.finish()
    });
    (out, seen.into_inner().unwrap())
}

#[test]
fn stream_assembler_chunked_and_truncated() {
    check(
        "stream_assembler_chunked_and_truncated",
        default_cases(),
        (
            stream_spec(),
            prop::collection::vec(any::<usize>(), 0..16),
            any::<usize>(),
        ),
        |(spec, cuts, cut_at)| {
            let whole = spec.sse().into_bytes();
            let (full, full_events) = assemble(vec![whole.clone()]);
            let full =
                full.map_err(|e| TestCaseError::fail(format!("valid stream failed: {e}")))?;
            prop_assert_eq!(&full, &spec.expected());

            let (split, split_events) = assemble(split_bytes(&whole, &cuts));
            prop_assert_eq!(split.as_ref().ok(), Some(&full));
            prop_assert_eq!(&split_events, &full_events);

            // Cut before its last byte, a stream never completes.
            let end = cut_at % whole.len();
            let (cut, _) = assemble(split_bytes(&whole[..end], &cuts));
            match cut {
                Ok(r) => {
                    prop_assert!(false, "a stream cut at {end} of {} gave {r:?}", whole.len())
                }
                Err(e) => clear(&e)?,
            }
            Ok(())
        },
    );
}

// -----------------------------------------------------------------------------------
// 1c. Random bytes through the real HTTP path.

/// What the mock answers.
#[derive(Debug, Clone)]
struct Served {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    cuts: Vec<usize>,
    /// Keep the connection open, silent, after the body.
    stall: bool,
}

/// A tiny server that answers every POST with the current [`Served`].
struct BytesMock {
    uri: String,
    served: Arc<Mutex<Option<Served>>>,
    _server: LocalServer,
}

async fn serve(State(served): State<Arc<Mutex<Option<Served>>>>) -> axum::response::Response {
    let s = served.lock().unwrap().clone().unwrap();
    let pieces: Vec<Result<Bytes, Infallible>> = split_bytes(&s.body, &s.cuts)
        .into_iter()
        .map(|c| Ok(Bytes::from(c)))
        .collect();
    let body = futures::stream::iter(pieces);
    let body = if s.stall {
        Body::from_stream(body.chain(futures::stream::pending()))
    } else {
        Body::from_stream(body)
    };
    axum::response::Response::builder()
        .status(StatusCode::from_u16(s.status).unwrap())
        .header(header::CONTENT_TYPE, s.content_type)
        .body(body)
        .unwrap()
}

impl BytesMock {
    async fn start() -> Self {
        let served = Arc::new(Mutex::new(None));
        let app = Router::new()
            .route("/v1/messages", post(serve))
            .route("/v1/chat/completions", post(serve))
            .with_state(served.clone());
        let server = LocalServer::start(app).await;
        Self {
            uri: format!("http://{}", server.addr),
            served,
            _server: server,
        }
    }

    /// Both providers pointed at this mock, without retries.
    fn models(&self, idle: Duration) -> (AnthropicModel, OpenAiModel) {
        let anthropic = AnthropicModel::new(
            AnthropicConfig::new("sk-ant-fuzz-00000000")
                .with_base_url(&self.uri)
                .with_retry(RetryPolicy::none())
                .with_idle_timeout(idle),
        )
        .unwrap();
        let openai = OpenAiModel::new(
            OpenAiConfig::new()
                .with_base_url(format!("{}/v1", self.uri))
                .with_retry(RetryPolicy::none())
                .with_idle_timeout(idle),
        )
        .unwrap();
        (anthropic, openai)
    }
}

/// A simple valid Chat Completions stream.
fn openai_sse(pieces: &[String], finish: &str) -> String {
    let mut out = String::new();
    for p in pieces {
        let chunk = json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]});
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    let last = json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]});
    out.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
    out
}

fn served() -> impl Strategy<Value = (Served, Option<Response>)> {
    let valid = || stream_spec().prop_map(|s| (s.sse().into_bytes(), Some(s.expected())));
    let body = prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..600).prop_map(|b| (b, None)),
        2 => valid(),
        2 => (valid(), prop::collection::vec(text_edit(), 1..4)).prop_map(|((b, _), edits)| {
            let mut text = String::from_utf8(b).unwrap();
            for e in &edits {
                text = apply_text_edit(&text, e);
            }
            (text.into_bytes(), None)
        }),
        1 => prop::collection::vec(sse_event(), 0..12).prop_map(|events| {
            let text: String = events
                .iter()
                .map(|(n, d)| format!("event: {n}\ndata: {d}\n\n"))
                .collect();
            (text.into_bytes(), None)
        }),
        1 => (prop::collection::vec(text(), 0..4), prop::sample::select(&["stop", "length", ""][..]))
            .prop_map(|(p, f)| (openai_sse(&p, f).into_bytes(), None)),
        1 => arb_json().prop_map(|v| (v.to_string().into_bytes(), None)),
    ];
    (
        prop_oneof![
            8 => Just(200u16),
            1 => prop::sample::select(&[400u16, 401, 404, 429, 500, 503, 529][..]),
        ],
        prop_oneof![
            3 => Just("text/event-stream"),
            1 => Just("application/json"),
            1 => Just("text/plain"),
        ],
        body,
        prop::collection::vec(any::<usize>(), 0..8),
        prop::bool::weighted(1.0 / 16.0),
    )
        .prop_map(|(status, content_type, (body, expected), cuts, stall)| {
            let expected =
                expected.filter(|_| status == 200 && content_type == "text/event-stream");
            (
                Served {
                    status,
                    content_type,
                    body,
                    cuts,
                    stall,
                },
                expected,
            )
        })
}

/// Found by [`http_bodies`]: a streaming request answered with a plain JSON body that
/// then goes silent used to hang forever (no idle timeout covered that body).
#[tokio::test]
async fn plain_body_that_stalls_hits_the_idle_timeout() {
    let mock = BytesMock::start().await;
    *mock.served.lock().unwrap() = Some(Served {
        status: 200,
        content_type: "application/json",
        body: b"{\"id\": \"msg_1\",".to_vec(),
        cuts: vec![],
        stall: true,
    });
    let idle = Duration::from_millis(100);
    let (anthropic, openai) = mock.models(idle);
    let request = Request::new("m", 8, vec![Message::user_text("hi")]);
    let limit = Duration::from_secs(5);
    let out = tokio::time::timeout(
        limit,
        anthropic.send(request.clone(), &cadre_model::ignore_events),
    )
    .await
    .expect("AnthropicModel hung");
    assert!(matches!(out, Err(ModelError::Idle(_))), "{out:?}");
    let out = tokio::time::timeout(limit, openai.send(request, &cadre_model::ignore_events))
        .await
        .expect("OpenAiModel hung");
    assert!(matches!(out, Err(ModelError::Idle(_))), "{out:?}");
}

#[test]
fn http_bodies() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mock = rt.block_on(BytesMock::start());
    let idle = Duration::from_millis(200);
    let (anthropic, openai) = mock.models(idle);
    let request = Request::new("fuzz-model", 64, vec![Message::user_text("hi")]);
    check(
        "http_bodies",
        (default_cases() / 8).max(8),
        served(),
        |(served, expected)| {
            *mock.served.lock().unwrap() = Some(served);
            rt.block_on(async {
                // The idle timeout is 200 ms and the mock answers at once.
                let limit = Duration::from_secs(3);
                let out = tokio::time::timeout(
                    limit,
                    anthropic.send(request.clone(), &cadre_model::ignore_events),
                )
                .await
                .map_err(|_| TestCaseError::fail("AnthropicModel::send hung"))?;
                match (&out, &expected) {
                    (Ok(r), Some(e)) => prop_assert_eq!(r, e),
                    (Err(e), Some(_)) => prop_assert!(false, "a valid stream failed: {e}"),
                    (Ok(_), None) => {}
                    (Err(e), None) => clear(e)?,
                }
                let out = tokio::time::timeout(
                    limit,
                    openai.send(request.clone(), &cadre_model::ignore_events),
                )
                .await
                .map_err(|_| TestCaseError::fail("OpenAiModel::send hung"))?;
                if let Err(e) = &out {
                    clear(e)?;
                }
                Ok(())
            })
        },
    );
}
