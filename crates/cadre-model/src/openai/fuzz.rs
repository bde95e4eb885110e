//! Randomised input tests (proptest) of the stream assembler, the non-streamed decoder and
//! the error-body parser: `Ok` or a clear error, never a panic. Each property runs
//! `PROPTEST_CASES` cases (256 when unset) and prints how many ran.

use super::*;
use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::convert::Infallible;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

fn check<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::default()
    });
    let ran = AtomicU32::new(0);
    let result = runner.run(&strategy, |v| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(v)
    });
    eprintln!("fuzz::{name}: {} cases", ran.load(Ordering::Relaxed));
    if let Err(e) = result {
        panic!("fuzz::{name} failed: {e}");
    }
}

fn clear(err: &ModelError) -> Result<(), TestCaseError> {
    let detail = match err {
        ModelError::Protocol(m) => m.to_string(),
        ModelError::Malformed { what, source } => format!("{what} {source}"),
        ModelError::StreamError { kind, message } => {
            prop_assert!(!kind.trim().is_empty(), "{err:?}");
            message.clone()
        }
        other => other.to_string(),
    };
    prop_assert!(
        !detail.trim().is_empty(),
        "an error with a blank detail: {err:?}"
    );
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "(?s).{0,10}", 1 => "[a-z_]{0,8}"]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0u64..3).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(-1)),
        1 => Just(json!(0.5)),
    ]
}

const WORDS: &[&str] = &[
    "id",
    "model",
    "choices",
    "index",
    "delta",
    "content",
    "refusal",
    "reasoning_content",
    "reasoning",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "error",
    "message",
    "type",
    "code",
    "stop",
    "length",
    "tool_calls",
    "",
];

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
        prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_owned())),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        let key = prop_oneof![
            3 => prop::sample::select(WORDS).prop_map(str::to_owned),
            1 => text(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `Some(v)` four times in five.
fn maybe(s: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Option<Value>> {
    prop::option::weighted(0.8, s).boxed()
}

fn object(fields: Vec<(&'static str, BoxedStrategy<Option<Value>>)>) -> BoxedStrategy<Value> {
    fields
        .into_iter()
        .map(|(k, s)| s.prop_map(move |v| (k, v)))
        .collect::<Vec<_>>()
        .prop_map(|parts| {
            Value::Object(
                parts
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.to_owned(), v?)))
                    .collect(),
            )
        })
        .boxed()
}

fn stringish() -> BoxedStrategy<Value> {
    prop_oneof![4 => text().prop_map(Value::String), 1 => arb_json()].boxed()
}

/// A chunk shaped like a Chat Completions stream chunk, with random holes and indices.
fn shaped_chunk() -> BoxedStrategy<Value> {
    let call = object(vec![
        ("index", maybe(number())),
        ("id", maybe(stringish())),
        (
            "function",
            maybe(object(vec![
                ("name", maybe(stringish())),
                (
                    "arguments",
                    maybe(prop_oneof![
                        3 => prop::sample::select(&["{", "}", "\"a\"", ":", "1", ""][..])
                            .prop_map(|s| Value::String(s.to_owned())),
                        1 => arb_json(),
                    ]),
                ),
            ])),
        ),
    ]);
    let delta = object(vec![
        ("content", maybe(stringish())),
        ("refusal", maybe(stringish())),
        ("reasoning_content", maybe(stringish())),
        (
            "tool_calls",
            maybe(prop::collection::vec(call, 0..3).prop_map(Value::Array)),
        ),
    ]);
    let choice = object(vec![
        ("index", maybe(number())),
        ("delta", maybe(delta)),
        (
            "finish_reason",
            maybe(prop_oneof![
                Just(Value::Null),
                prop::sample::select(&["stop", "length", "tool_calls", "content_filter"][..])
                    .prop_map(|s| Value::String(s.to_owned())),
                stringish(),
            ]),
        ),
    ]);
    let usage = object(vec![
        ("prompt_tokens", maybe(number())),
        ("completion_tokens", maybe(number())),
        (
            "prompt_tokens_details",
            maybe(object(vec![("cached_tokens", maybe(number()))])),
        ),
    ]);
    object(vec![
        ("id", maybe(stringish())),
        ("model", maybe(stringish())),
        (
            "choices",
            maybe(prop::collection::vec(choice, 0..3).prop_map(Value::Array)),
        ),
        ("usage", maybe(usage)),
        (
            "error",
            prop::option::weighted(
                0.05,
                object(vec![
                    ("message", maybe(stringish())),
                    ("type", maybe(stringish())),
                    ("code", maybe(number())),
                ]),
            )
            .boxed(),
        ),
    ])
}

fn chunk_data() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => shaped_chunk().prop_map(|v| v.to_string()),
        1 => Just("[DONE]".to_owned()),
        1 => prop::sample::select(&["", " ", "\n", " [DONE] "][..]).prop_map(str::to_owned),
        1 => arb_json().prop_map(|v| v.to_string()),
        1 => text(),
    ]
}

#[test]
fn chunk_assembler_random_chunks() {
    check(
        "chunk_assembler_random_chunks",
        prop::collection::vec(chunk_data(), 0..16),
        |chunks| {
            let ids = AtomicU64::new(1);
            let mut a = ChunkAssembler::new("m");
            for data in &chunks {
                // Keep going after an error: the assembler must stay usable.
                if let Err(e) = a.push(data, &ids, &crate::ignore_events) {
                    clear(&e)?;
                }
            }
            match a.finish(&ids, &crate::ignore_events) {
                Ok(r) => {
                    let text = serde_json::to_string(&r).unwrap();
                    prop_assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), r);
                }
                Err(e) => clear(&e)?,
            }
            Ok(())
        },
    );
}

#[test]
fn completion_and_error_bodies() {
    let body = prop_oneof![
        3 => (shaped_chunk(), prop_oneof![Just("delta"), Just("message")]).prop_map(|(mut v, field)| {
            // A non-streamed completion says `message` where a chunk says `delta`.
            if let Some(Value::Array(choices)) = v.get_mut("choices") {
                for c in choices.iter_mut().filter_map(Value::as_object_mut) {
                    if let Some(d) = c.remove("delta") {
                        c.insert(field.to_owned(), d);
                    }
                }
            }
            v.to_string().into_bytes()
        }),
        1 => arb_json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    check(
        "completion_and_error_bodies",
        (body, 100u16..600),
        |(body, status)| {
            let ids = AtomicU64::new(1);
            if let Err(e) = decode_completion(&body, "m", &ids) {
                clear(&e)?;
            }
            let status = StatusCode::from_u16(status).unwrap();
            let (kind, message) = parse_error_body(status, &String::from_utf8_lossy(&body));
            prop_assert!(!kind.trim().is_empty() && !message.trim().is_empty());
            Ok(())
        },
    );
}

/// A valid streamed completion and how it is framed.
#[derive(Debug, Clone)]
struct Spec {
    text: Vec<String>,
    reasoning: Vec<String>,
    /// id, name, arguments (an object), where the arguments are cut.
    calls: Vec<(String, String, Value, Vec<usize>)>,
    finish: &'static str,
    usage: Option<(u64, u64, u64)>,
    done: bool,
    crlf: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    let call = (
        "[a-z0-9_]{1,8}",
        "[a-z_]{1,8}",
        prop::collection::btree_map("[a-z]{0,4}", arb_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        prop::collection::vec(any::<usize>(), 0..4),
    );
    (
        prop::collection::vec(text(), 0..5),
        prop::collection::vec(text(), 0..3),
        prop::collection::vec(call, 0..3),
        prop::sample::select(&["stop", "length", "tool_calls", "content_filter", "eos"][..]),
        prop::option::of((0u64..1 << 40, 0u64..1 << 40, 0u64..1 << 40)),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(text, reasoning, calls, finish, usage, done, crlf)| Spec {
            text,
            reasoning,
            calls,
            finish,
            usage,
            done,
            crlf,
        })
}

fn cut_text(s: &str, cuts: &[usize]) -> Vec<String> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| {
            let mut i = c % (s.len() + 1);
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            i
        })
        .chain([0, s.len()])
        .collect();
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| s[w[0]..w[1]].to_owned()).collect()
}

fn cut_bytes(b: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| c % (b.len() + 1))
        .chain([0, b.len()])
        .collect();
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| b[w[0]..w[1]].to_vec()).collect()
}

impl Spec {
    /// The SSE text, and the byte offset where the chunk with the finish_reason ends.
    fn sse(&self) -> (String, usize) {
        let eol = if self.crlf { "\r\n" } else { "\n" };
        let mut out = String::new();
        let push = |data: String, out: &mut String| {
            out.push_str(&format!("data: {data}{eol}{eol}"));
        };
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({"id": "chatcmpl-f", "model": "gpt-fuzz",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string()
        };
        push(
            chunk(json!({"role": "assistant", "content": ""}), None),
            &mut out,
        );
        for r in &self.reasoning {
            push(chunk(json!({"reasoning_content": r}), None), &mut out);
        }
        for t in &self.text {
            push(chunk(json!({"content": t}), None), &mut out);
        }
        for (i, (id, name, args, cuts)) in self.calls.iter().enumerate() {
            push(
                chunk(
                    json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}),
                    None,
                ),
                &mut out,
            );
            for part in cut_text(&args.to_string(), cuts) {
                push(
                    chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                        None,
                    ),
                    &mut out,
                );
            }
        }
        push(chunk(json!({}), Some(self.finish)), &mut out);
        let finished = out.len();
        if let Some((p, c, cached)) = self.usage {
            let u = json!({"id": "chatcmpl-f", "choices": [], "usage": {
                "prompt_tokens": p + cached, "completion_tokens": c,
                "prompt_tokens_details": {"cached_tokens": cached}}});
            push(u.to_string(), &mut out);
        }
        if self.done {
            push("[DONE]".into(), &mut out);
        }
        (out, finished)
    }

    fn expected(&self) -> Response {
        let mut content = Vec::new();
        let text = self.text.concat();
        if !text.is_empty() {
            content.push(ContentBlock::text(text));
        }
        for (id, name, args, _) in &self.calls {
            content.push(ContentBlock::tool_use(
                id.clone(),
                name.clone(),
                args.clone(),
            ));
        }
        Response {
            id: "chatcmpl-f".into(),
            model: "gpt-fuzz".into(),
            role: Role::Assistant,
            content,
            stop_reason: map_finish_reason(Some(self.finish), !self.calls.is_empty(), false),
            stop_sequence: None,
            usage: self.usage.map_or(Usage::default(), |(p, c, cached)| Usage {
                input_tokens: p,
                output_tokens: c,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: cached,
                ..Default::default()
            }),
        }
    }
}

/// Assembles chunks of SSE bytes as `Transport::read_events` does with a `Chat` decoder.
fn assemble(chunks: Vec<Vec<u8>>) -> (Result<Response, ModelError>, Vec<ModelEvent>) {
    let seen = Mutex::new(Vec::new());
    let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
    let out = futures::executor::block_on(async {
        let ids = AtomicU64::new(1);
        let bytes = chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(Bytes::from(c)));
        let mut stream = futures::stream::iter(bytes).eventsource();
        let mut a = ChunkAssembler::new("asked-for");
        while let Some(next) = stream.next().await {
            match next {
                Ok(event) => {
                    a.push(&event.data, &ids, &sink)?;
                    if a.done {
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
        a.finish(&ids, &sink)
    });
    (out, seen.into_inner().unwrap())
}

#[test]
fn chunk_assembler_chunked_and_truncated() {
    check(
        "chunk_assembler_chunked_and_truncated",
        (
            spec(),
            prop::collection::vec(any::<usize>(), 0..16),
            any::<usize>(),
        ),
        |(spec, cuts, cut_at)| {
            let (sse, finished) = spec.sse();
            let whole = sse.into_bytes();
            let (full, full_events) = assemble(vec![whole.clone()]);
            let full =
                full.map_err(|e| TestCaseError::fail(format!("a valid stream failed: {e}")))?;
            prop_assert_eq!(&full, &spec.expected());

            let (split, split_events) = assemble(cut_bytes(&whole, &cuts));
            prop_assert_eq!(split.as_ref().ok(), Some(&full));
            prop_assert_eq!(&split_events, &full_events);

            // Cut before the finish_reason chunk is whole, a stream never completes.
            let end = cut_at % whole.len();
            match assemble(cut_bytes(&whole[..end], &cuts)).0 {
                Ok(r) => prop_assert!(end >= finished, "cut at {end} < {finished}: {r:?}"),
                Err(e) => clear(&e)?,
            }
            Ok(())
        },
    );
}
