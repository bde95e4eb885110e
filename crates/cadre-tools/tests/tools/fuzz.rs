use cadre_tools::{builtin_tools, Tool, ToolContext, ToolError, ToolLimits, Workspace};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn check<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        // Failures print the shrunk input; no regression files in the source tree.
        failure_persistence: None,
        ..Config::default()
    });
    let ran = AtomicU32::new(0);
    let started = Instant::now();
    let result = runner.run(&strategy, |v| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(v)
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

/// A temp folder holding the workspace `ws/` (a few files, symlinks in and out, a
/// dangling one and a loop) and a sibling `outside/` nothing may touch.
struct Sandbox {
    _dir: tempfile::TempDir,
    top: PathBuf,
    root: PathBuf,
    outside: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        let root = top.join("ws");
        let outside = top.join("outside");
        for d in [
            &root,
            &outside,
            &root.join("src/deep"),
            &outside.join("sub"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(root.join("a.txt"), "hello\nworld\nhello again\n").unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn main() {}\n// TODO\n").unwrap();
        std::fs::write(root.join("src/deep/ünï.md"), "# title\n\ntext\n").unwrap();
        std::fs::write(root.join("bin.dat"), [0u8, 159, 146, 150, 0, 1]).unwrap();
        std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        std::fs::write(outside.join("secret.txt"), "do not touch\n").unwrap();
        std::fs::write(outside.join("sub/x.txt"), "nor this\n").unwrap();
        symlink(&outside, root.join("out")).unwrap();
        symlink(outside.join("secret.txt"), root.join("secret")).unwrap();
        symlink(root.join("src"), root.join("in")).unwrap();
        symlink(outside.join("missing.txt"), root.join("dangle_out")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        Self {
            _dir: dir,
            top,
            root,
            outside,
        }
    }

    /// Every path under the temp folder but outside the workspace, with its bytes (or
    /// symlink target).
    fn snapshot_outside(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(p: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            if p == skip {
                return;
            }
            let meta = std::fs::symlink_metadata(p).unwrap();
            let body = if meta.file_type().is_symlink() {
                std::fs::read_link(p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if meta.is_dir() {
                for e in std::fs::read_dir(p).unwrap() {
                    walk(&e.unwrap().path(), skip, out);
                }
                b"<dir>".to_vec()
            } else {
                std::fs::read(p).unwrap()
            };
            out.insert(p.to_path_buf(), body);
        }
        let mut out = BTreeMap::new();
        walk(&self.top, &self.root, &mut out);
        out
    }
}

/// Short strings of any characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "(?s).{0,12}", 1 => "[a-z_./]{0,10}"]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Model-given paths: the workspace's files, pieces of its names joined every which
/// way, absolute paths in and out of it, NUL bytes, unicode, and very long ones (up to
/// `depth` folders deep).
fn path(root: &Path, outside: &Path, depth: usize) -> BoxedStrategy<String> {
    let files = prop::sample::select(
        &[
            "a.txt",
            "src/lib.rs",
            "in/lib.rs",
            "./src/../a.txt",
            "src/deep/ünï.md",
            "bin.dat",
            "new.txt",
            "src/new.rs",
            "src",
            ".",
            "secret",
            "out/secret.txt",
        ][..],
    )
    .prop_map(str::to_owned);
    let part = prop_oneof![
        6 => prop::sample::select(&[
            ".", "..", "", "a.txt", "src", "lib.rs", "deep", "ünï.md", "bin.dat", "out",
            "in", "secret", "dangle_out", "loop", "new", "new.txt", "ws", "outside",
            "secret.txt", "x\0y", " ", "~", "*", "\u{202e}",
        ][..])
        .prop_map(str::to_owned),
        1 => text(),
        1 => "[a-z]{250,260}",
    ];
    let joined = (
        prop::sample::select(vec![
            String::new(),
            "/".to_owned(),
            format!("{}/", root.display()),
            format!("{}/", outside.display()),
            format!("{}/../", root.display()),
        ]),
        prop::collection::vec(part, 0..6),
        prop_oneof![Just("/"), Just("//"), Just("/./")],
    )
        .prop_map(|(start, parts, sep)| format!("{start}{}", parts.join(sep)));
    prop_oneof![
        10 => files,
        6 => joined,
        1 => text(),
        1 => (1..depth).prop_map(|n| "a/".repeat(n)),
        1 => (1usize..200).prop_map(|n| "../".repeat(n)),
        1 => (5000usize..20000).prop_map(|n| "x".repeat(n)),
    ]
    .boxed()
}

#[test]
fn workspace_resolve_stays_inside() {
    let sb = Sandbox::new();
    let ws = Workspace::new(&sb.root).unwrap();
    check(
        "workspace_resolve_stays_inside",
        path(&sb.root, &sb.outside, 3000),
        |p| {
            let started = Instant::now();
            let out = ws.resolve(&p);
            prop_assert!(
                started.elapsed() < Duration::from_secs(2),
                "resolving took {:?}",
                started.elapsed()
            );
            match out {
                Ok(abs) => {
                    prop_assert!(abs.starts_with(ws.root()), "{p:?} resolved to {abs:?}");
                    prop_assert!(
                        abs.components()
                            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
                        "{p:?} resolved to {abs:?}"
                    );
                }
                Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
            }
            Ok(())
        },
    );
}

/// What a field of a tool's input holds.
#[derive(Clone, Copy)]
enum Kind {
    Path,
    Str,
    U64,
    Bool,
    Regex,
    Glob,
    Command,
}

/// A command built from a safe alphabet: it prints at most a word and changes nothing.
fn safe_command() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("".to_owned()),
        Just("   ".to_owned()),
        "[A-Za-z0-9_.,-]{0,12}".prop_map(|w| format!("echo {w}")),
        "[A-Za-z0-9_.,-]{0,12}".prop_map(|w| format!("printf %s {w}")),
    ]
}

fn is_safe_command(c: &str) -> bool {
    let word = |w: &str| {
        w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.,-".contains(c))
    };
    c.trim().is_empty()
        || c == "true"
        || c == "false"
        || c.strip_prefix("echo ").is_some_and(word)
        || c.strip_prefix("printf %s ").is_some_and(word)
}

fn value_of(kind: Kind, root: &Path, outside: &Path) -> BoxedStrategy<Value> {
    let s = |st: BoxedStrategy<String>| st.prop_map(Value::String).boxed();
    match kind {
        Kind::Path => s(path(root, outside, 100)),
        Kind::Str => s(prop_oneof![
            1 => text(),
            1 => prop::sample::select(&["hello", "world", "\n", "fn", "TODO", "again"][..]).prop_map(str::to_owned),
        ]
        .boxed()),
        Kind::U64 => prop_oneof![
            3 => (0u64..4).prop_map(Value::from),
            1 => (0u64..3000).prop_map(Value::from),
            1 => any::<u64>().prop_map(Value::from),
            1 => Just(Value::from(u64::MAX)),
        ]
        .boxed(),
        Kind::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Kind::Regex => s(prop_oneof![
            2 => text(),
            3 => prop::sample::select(&[
                "hello", "(?i)WORLD", "a|b", "[", "(", "\\", "x{100000}", ".*", "^", "$",
                "\\bfn\\b", "(a+)+$", "\\p{Greek}", "(?-u)\\xff", "", "\n",
            ][..])
            .prop_map(str::to_owned),
        ]
        .boxed()),
        Kind::Glob => s(prop_oneof![
            2 => text(),
            3 => prop::sample::select(&[
                "*", "**/*.rs", "{a,b}", "[", "**", "src/**", "*.{txt,md}", "\\", "[!a]",
                "../*", "/etc/*", "{", "***", "",
            ][..])
            .prop_map(str::to_owned),
        ]
        .boxed()),
        Kind::Command => s(safe_command().boxed()),
    }
}

/// Inputs for a tool with `fields`: mostly the right keys (each maybe missing, maybe of
/// the wrong type), plus objects of random keys, plus values that are not objects.
fn input(fields: &[(&'static str, Kind)], root: &Path, outside: &Path) -> BoxedStrategy<Value> {
    let parts: Vec<_> = fields
        .iter()
        .map(|&(name, kind)| {
            let value = prop_oneof![
                12 => value_of(kind, root, outside),
                1 => arb_json(),
            ];
            prop::option::weighted(0.9, value).prop_map(move |v| (name, v))
        })
        .collect();
    let names: Vec<&'static str> = fields.iter().map(|f| f.0).collect();
    let shaped =
        (parts, prop::option::weighted(0.05, (text(), arb_json()))).prop_map(|(parts, junk)| {
            let mut obj: Map<String, Value> = parts
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_owned(), v?)))
                .collect();
            if let Some((k, v)) = junk {
                obj.insert(k, v);
            }
            Value::Object(obj)
        });
    let key = prop_oneof![prop::sample::select(names).prop_map(str::to_owned), text()];
    let random = prop::collection::btree_map(key, arb_json(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    prop_oneof![
        10 => shaped,
        1 => random,
        1 => arb_json().prop_filter("not an object", |v| !v.is_object()),
    ]
    .boxed()
}

/// Runs one tool on random inputs in a temp workspace shared by all cases (so reads
/// make later edits possible), then checks nothing outside the workspace changed.
fn fuzz_tool(name: &str, fields: &[(&'static str, Kind)]) {
    let sb = Sandbox::new();
    let before = sb.snapshot_outside();
    let tool: Arc<dyn Tool> = builtin_tools()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap();
    let reader: Arc<dyn Tool> = builtin_tools()
        .into_iter()
        .find(|t| t.name() == "read_file")
        .unwrap();
    let mut ctx = ToolContext::new(Arc::new(Workspace::new(&sb.root).unwrap()));
    ctx.limits = ToolLimits {
        bash_timeout: Duration::from_secs(5),
        bash_max_timeout: Duration::from_secs(5),
        max_output_bytes: 2_000,
        max_read_bytes: 1 << 20,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ok = AtomicU32::new(0);
    let strategy = (
        input(fields, &sb.root, &sb.outside),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.5),
    );
    check(
        &format!("{name}_input"),
        strategy,
        |(mut input, read_only, read_first)| {
            if name == "bash" {
                // Only commands from the safe alphabet ever run.
                if let Some(Value::String(c)) = input.get_mut("command") {
                    if !is_safe_command(c) {
                        *c = "true".to_owned();
                    }
                }
            }
            let mut ctx = ctx.clone();
            ctx.read_only = read_only;
            let out = rt.block_on(async {
                if read_first {
                    // Lets edit_file get past "read it first" for this path.
                    if let Some(p) = input.get("path").filter(|p| p.is_string()) {
                        let _ = reader.call(json!({"path": p}), &ctx).await;
                    }
                }
                tokio::time::timeout(Duration::from_secs(20), tool.call(input.clone(), &ctx)).await
            });
            let out = out.map_err(|_| TestCaseError::fail(format!("{name} hung on {input}")))?;
            match out {
                Ok(_) => {
                    prop_assert!(input.is_object(), "{name} accepted {input}");
                    ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let shown = e.to_string();
                    prop_assert!(
                        !shown.trim().is_empty(),
                        "{name} {input}: blank error {e:?}"
                    );
                    prop_assert!(
                        !shown.contains("internal error") && !shown.contains("panicked"),
                        "{name} {input}: {shown}"
                    );
                    if let ToolError::InvalidInput { message: m } = &e {
                        prop_assert!(!m.contains("struct Input"), "{name} {input}: {m}");
                    }
                    if !input.is_object() {
                        prop_assert!(
                            matches!(e, ToolError::InvalidInput { .. }),
                            "{name} {input}: {e:?}"
                        );
                    }
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz::{name}_input: {} calls succeeded",
        ok.load(Ordering::Relaxed)
    );
    assert_eq!(
        sb.snapshot_outside(),
        before,
        "{name} changed something outside the workspace"
    );
}

#[test]
fn bash_input() {
    // `command` only ever comes from the safe alphabet; the other fields are fuzzed.
    fuzz_tool(
        "bash",
        &[
            ("command", Kind::Command),
            ("timeout_ms", Kind::U64),
            ("description", Kind::Str),
        ],
    );
}

#[test]
fn read_file_input() {
    fuzz_tool(
        "read_file",
        &[
            ("path", Kind::Path),
            ("offset", Kind::U64),
            ("limit", Kind::U64),
        ],
    );
}

#[test]
fn write_file_input() {
    fuzz_tool(
        "write_file",
        &[("path", Kind::Path), ("content", Kind::Str)],
    );
}

#[test]
fn edit_file_input() {
    fuzz_tool(
        "edit_file",
        &[
            ("path", Kind::Path),
            ("old_string", Kind::Str),
            ("new_string", Kind::Str),
            ("replace_all", Kind::Bool),
        ],
    );
}

#[test]
fn list_files_input() {
    fuzz_tool(
        "list_files",
        &[("pattern", Kind::Glob), ("path", Kind::Path)],
    );
}

#[test]
fn grep_input() {
    fuzz_tool(
        "grep",
        &[
            ("pattern", Kind::Regex),
            ("path", Kind::Path),
            ("glob", Kind::Glob),
            ("case_insensitive", Kind::Bool),
            ("context", Kind::U64),
            ("max_results", Kind::U64),
        ],
    );
}
