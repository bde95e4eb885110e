use super::*;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The items of `text` written in `format` to a temp file, opened by `key`.
fn items_of(format: InputFormat, text: &str, key: Option<&str>) -> Vec<Result<Item, ItemError>> {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("input.{}", format.as_str());
    std::fs::write(dir.path().join(&name), text).unwrap();
    let spec = InputSpec::new(&name, None, dir.path()).unwrap();
    assert_eq!(spec.format, format);
    Items::open(&spec, key).unwrap().collect()
}

fn ok(items: &[Result<Item, ItemError>]) -> Vec<(String, Option<u64>, Value)> {
    items
        .iter()
        .filter_map(|i| i.as_ref().ok())
        .map(|i| (i.key.clone(), i.line, i.value.clone()))
        .collect()
}

fn bad(items: &[Result<Item, ItemError>]) -> Vec<(u64, Option<u64>, String)> {
    items
        .iter()
        .filter_map(|i| i.as_ref().err())
        .map(|e| (e.position, e.line, e.why.to_string()))
        .collect()
}

#[test]
fn the_format_is_told_by_extension_or_glob_and_can_be_named() {
    assert_eq!(InputFormat::of("a/issues.jsonl"), Some(InputFormat::Jsonl));
    assert_eq!(InputFormat::of("x.NDJSON"), Some(InputFormat::Jsonl));
    assert_eq!(InputFormat::of("x.csv"), Some(InputFormat::Csv));
    assert_eq!(InputFormat::of("x.json"), Some(InputFormat::Json));
    assert_eq!(InputFormat::of("src/**/*.rs"), Some(InputFormat::Files));
    assert_eq!(InputFormat::of("x.txt"), None);
    assert!(InputSpec::new("x.txt", None, Path::new(".")).is_err());
    let spec = InputSpec::new("x.txt", Some(InputFormat::Jsonl), Path::new(".")).unwrap();
    assert_eq!(spec.format, InputFormat::Jsonl);
    assert_eq!("CSV".parse::<InputFormat>().unwrap(), InputFormat::Csv);
    assert!("yaml".parse::<InputFormat>().is_err());
}

#[test]
fn jsonl_items_are_named_by_key_or_position_with_their_lines() {
    let text = "{\"id\": \"a\", \"n\": 1}\n\n{\"id\": 7}\n";
    let items = items_of(InputFormat::Jsonl, text, Some("id"));
    let got = ok(&items);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, "a");
    assert_eq!(got[0].1, Some(1));
    assert_eq!(got[1].0, "7");
    assert_eq!(got[1].1, Some(3), "the blank line is skipped but counted");
    let by_position = items_of(InputFormat::Jsonl, text, None);
    let keys: Vec<String> = ok(&by_position).into_iter().map(|i| i.0).collect();
    assert_eq!(keys, ["0", "1"]);
}

#[test]
fn a_bad_item_is_its_own_outcome_and_the_others_are_read() {
    let text =
        "{\"id\": 1}\nnot json\n{\"title\": \"no id\"}\n{\"id\": 1}\n{\"id\": [1]}\n{\"id\": 2}\n";
    let items = items_of(InputFormat::Jsonl, text, Some("id"));
    assert_eq!(items.len(), 6);
    let keys: Vec<String> = ok(&items).into_iter().map(|i| i.0).collect();
    assert_eq!(keys, ["1", "2"]);
    let bad = bad(&items);
    assert_eq!(bad.len(), 4);
    assert_eq!((bad[0].0, bad[0].1), (1, Some(2)));
    assert!(bad[0].2.starts_with("not JSON"), "{}", bad[0].2);
    assert_eq!(bad[1].2, "no `id` field to name it by");
    assert_eq!(bad[2].2, "duplicate key \"1\": item 0 has it too");
    assert!(
        bad[3].2.contains("not a string or a number"),
        "{}",
        bad[3].2
    );
    let whole = items[1].as_ref().unwrap_err().to_string();
    assert!(whole.starts_with("item 1 (line 2): not JSON"), "{whole}");
}

#[test]
fn csv_rows_are_objects_of_strings_and_a_short_row_is_bad() {
    let text = "id,title\n1,\"Crash, on start\"\n2\n3,Slow\n";
    let items = items_of(InputFormat::Csv, text, Some("id"));
    let got = ok(&items);
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].2,
        serde_json::json!({"id": "1", "title": "Crash, on start"})
    );
    assert_eq!(got[0].1, Some(2));
    assert_eq!(got[1].0, "3");
    let bad = bad(&items);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].1, Some(3));
    assert!(bad[0].2.starts_with("bad CSV row"), "{}", bad[0].2);
}

#[test]
fn a_json_array_is_read_element_by_element() {
    let text = "[\n  {\"id\": \"a\", \"s\": \"x, ] y\"},\n  {bad},\n  3,\n  [1, [2]],\n  {\"id\": \"b\"}\n]\n";
    let items = items_of(InputFormat::Json, text, None);
    assert_eq!(items.len(), 5);
    let got = ok(&items);
    assert_eq!(got[0].2, serde_json::json!({"id": "a", "s": "x, ] y"}));
    assert_eq!(got[0].1, Some(2));
    assert_eq!(got[1].2, serde_json::json!(3));
    assert_eq!(got[2].2, serde_json::json!([1, [2]]));
    assert_eq!(got[3].1, Some(6));
    let bad = bad(&items);
    assert_eq!((bad[0].0, bad[0].1), (1, Some(3)));
    assert!(items_of(InputFormat::Json, "[]", None).is_empty());
    assert_eq!(items_of(InputFormat::Json, "[1, 2,]", None).len(), 2);
}

#[test]
fn a_broken_json_array_ends_with_one_bad_item() {
    let open = items_of(InputFormat::Json, "[1, {\"a\": 2", None);
    assert_eq!(open.len(), 2);
    assert!(open[1]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("closing `]`"));
    let object = items_of(InputFormat::Json, "{\"a\": 1}", None);
    assert_eq!(object.len(), 1);
    assert!(object[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("not a JSON array"));
}

#[test]
fn a_glob_gives_each_file_as_an_item_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/sub")).unwrap();
    std::fs::write(dir.path().join("src/b.rs"), "fn b() {}").unwrap();
    std::fs::write(dir.path().join("src/a.rs"), "fn a() {}").unwrap();
    std::fs::write(dir.path().join("src/sub/c.rs"), "fn c() {}").unwrap();
    std::fs::write(dir.path().join("src/notes.md"), "no").unwrap();
    let spec = InputSpec::new("src/*.rs", None, dir.path()).unwrap();
    let items: Vec<Item> = Items::open(&spec, Some("path"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["src/a.rs", "src/b.rs"]);
    assert_eq!(items[0].value["name"], "a.rs");
    assert_eq!(items[0].value["text"], "fn a() {}");
    let deep = InputSpec::new("src/**/*.rs", None, dir.path()).unwrap();
    assert_eq!(Items::open(&deep, None).unwrap().count(), 3);
}

#[test]
fn a_missing_input_file_is_an_error_before_any_item() {
    let dir = tempfile::tempdir().unwrap();
    let spec = InputSpec::new("nope.jsonl", None, dir.path()).unwrap();
    let err = Items::open(&spec, None).unwrap_err();
    assert!(matches!(err, WorkflowError::InputOpen { .. }), "{err}");
}

/// A JSON Lines source of `lines` items made as they are read, counting the bytes handed
/// out: nothing of it exists before it is asked for.
struct Generated {
    next: u64,
    lines: u64,
    pending: Vec<u8>,
    read: Arc<AtomicU64>,
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() && self.next < self.lines {
            self.pending =
                format!("{{\"id\": {}, \"title\": \"issue {0}\"}}\n", self.next).into_bytes();
            self.next += 1;
        }
        let n = self.pending.len().min(buf.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        self.read.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
}

#[test]
fn a_large_input_is_read_only_as_far_as_items_are_taken() {
    let read = Arc::new(AtomicU64::new(0));
    let source = Generated {
        next: 0,
        lines: 100_000,
        pending: Vec::new(),
        read: read.clone(),
    };
    let mut items = Items::from_raw(Box::new(readers::jsonl(source)), Some("id"));
    for expected in 0..10u64 {
        let item = items.next().unwrap().unwrap();
        assert_eq!(item.key, expected.to_string());
    }
    // Ten items and one buffer's worth at most, not the ~3 MB of the whole input.
    let after_ten = read.load(Ordering::SeqCst);
    assert!(
        after_ten < 16 * 1024,
        "{after_ten} bytes read for ten items"
    );
    let rest = items.map(|i| i.unwrap().position).last();
    assert_eq!(rest, Some(99_999));
    assert!(read.load(Ordering::SeqCst) > 2_000_000);
}

#[test]
fn a_large_json_array_is_read_only_as_far_as_items_are_taken() {
    // The array's elements are the JSON Lines source's lines with commas between them.
    struct Array(Generated, u8);
    impl Read for Array {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.1 {
                0 => {
                    self.1 = 1;
                    buf[0] = b'[';
                    Ok(1)
                }
                _ => {
                    let n = self.0.read(&mut buf[..1])?;
                    if n == 0 && self.1 == 1 {
                        self.1 = 2;
                        buf[0] = b']';
                        return Ok(1);
                    }
                    if n == 1 && buf[0] == b'\n' && self.0.next < self.0.lines {
                        buf[0] = b',';
                    }
                    Ok(n)
                }
            }
        }
    }
    let read = Arc::new(AtomicU64::new(0));
    let source = Generated {
        next: 0,
        lines: 100_000,
        pending: Vec::new(),
        read: read.clone(),
    };
    let mut items = Items::from_raw(
        Box::new(json_array::JsonArray::new(Array(source, 0))),
        Some("id"),
    );
    assert_eq!(items.next().unwrap().unwrap().key, "0");
    assert!(read.load(Ordering::SeqCst) < 16 * 1024);
    assert_eq!(items.count(), 99_999);
}

#[test]
fn a_large_jsonl_file_streams_item_by_item() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let mut text = String::new();
    for i in 0..100_000 {
        text.push_str(&format!("{{\"id\": \"k{i}\"}}\n"));
    }
    std::fs::write(&path, text).unwrap();
    let spec = InputSpec::new("big.jsonl", None, dir.path()).unwrap();
    let mut count = 0u64;
    for item in Items::open(&spec, Some("id")).unwrap() {
        let item = item.unwrap();
        assert_eq!(item.position, count);
        count += 1;
    }
    assert_eq!(count, 100_000);
}
