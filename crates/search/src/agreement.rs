//! The index against the reference: random documents and random queries, each query answered
//! by a shard index and by [`crate::matches`] over the same documents; the keys must agree.

use crate::index::{Indexable, NodeIndex};
use crate::sort::sort_text;
use crate::{SortKey, SortValue, compare_sort_values, matches, parse, parse_sort};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use trireme_types::ShardId;

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "alps", "alpine", "bet", "gammon", "omega", "zeta",
];
const CITIES: &[&str] = &["Oxford", "Paris", "New York", "São Paulo", "oslo"];

fn words(rng: &mut ChaCha8Rng, n: usize) -> String {
    (0..n)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect::<Vec<_>>()
        .join(if rng.random_bool(0.5) { " " } else { "-" })
}

fn document(rng: &mut ChaCha8Rng) -> Value {
    let mut doc = serde_json::Map::new();
    if rng.random_bool(0.8) {
        let n = rng.random_range(1..4);
        doc.insert("name".into(), json!(words(rng, n)));
    }
    if rng.random_bool(0.7) {
        let age = if rng.random_bool(0.8) {
            json!(rng.random_range(0..60))
        } else {
            json!(rng.random_range(0..600) as f64 / 10.0)
        };
        doc.insert("age".into(), age);
    }
    if rng.random_bool(0.5) {
        doc.insert("active".into(), json!(rng.random_bool(0.5)));
    }
    if rng.random_bool(0.6) {
        let day = rng.random_range(1..28);
        let month = rng.random_range(1..13);
        let text = if rng.random_bool(0.5) {
            format!("2024-{month:02}-{day:02}")
        } else {
            format!(
                "2024-{month:02}-{day:02}T{:02}:30:00+02:00",
                rng.random_range(0..24)
            )
        };
        doc.insert("created".into(), json!(text));
    }
    if rng.random_bool(0.6) {
        let tags: Vec<Value> = (0..rng.random_range(0..4))
            .map(|_| json!(WORDS[rng.random_range(0..WORDS.len())]))
            .collect();
        doc.insert("tags".into(), Value::Array(tags));
    }
    if rng.random_bool(0.6) {
        let city = CITIES[rng.random_range(0..CITIES.len())];
        doc.insert(
            "address".into(),
            json!({"city": city, "zip": rng.random_range(10..20)}),
        );
    }
    if rng.random_bool(0.5) {
        let note = [
            json!(null),
            json!(""),
            json!("!!"),
            json!("ok"),
            json!([null]),
            json!({}),
        ];
        doc.insert("note".into(), note[rng.random_range(0..note.len())].clone());
    }
    if rng.random_bool(0.3) {
        doc.insert("rank".into(), json!(words(rng, 1)));
    }
    Value::Object(doc)
}

fn leaf(rng: &mut ChaCha8Rng) -> String {
    let w = |rng: &mut ChaCha8Rng| WORDS[rng.random_range(0..WORDS.len())].to_string();
    let field = ["name", "tags", "rank", "address.city", "value.name"][rng.random_range(0..5)];
    match rng.random_range(0..17) {
        0 => format!("{field}:{}", w(rng)),
        1 => w(rng),
        16 if rng.random_bool(0.3) => format!("\"{} {}\"", w(rng), w(rng)),
        2 => format!("{field}:\"{} {}\"", w(rng), w(rng)),
        3 => format!("{field}:{}*", &w(rng)[..2]),
        4 => format!("{field}:{}?{}", &w(rng)[..1], &w(rng)[2..]),
        5 => format!("{field}:{}~{}", w(rng), rng.random_range(0..3)),
        6 => format!(
            "{}:*",
            ["name", "age", "created", "address", "note", "tags"][rng.random_range(0..6)]
        ),
        7 => format!(
            "age:[{} TO {}]",
            rng.random_range(0..30),
            rng.random_range(20..60)
        ),
        8 => format!(
            "age:{}{}",
            [">", ">=", "<", "<="][rng.random_range(0..4)],
            rng.random_range(0..600) as f64 / 10.0
        ),
        9 => format!(
            "created:{{2024-{:02}-01 TO 2024-{:02}-15T12:00:00Z]",
            rng.random_range(1..7),
            rng.random_range(6..13)
        ),
        10 => format!("rank:[{} TO {}]", w(rng), w(rng)),
        11 => format!("active:{}", rng.random_bool(0.5)),
        12 => format!("age:{}", rng.random_range(0..60)),
        13 => format!("address.zip:[{} TO *]", rng.random_range(10..20)),
        14 => format!(
            "address.city:\"{}\"",
            CITIES[rng.random_range(0..CITIES.len())]
        ),
        15 => "*".into(),
        _ => format!("{}~", w(rng)),
    }
}

fn query(rng: &mut ChaCha8Rng, depth: u32) -> String {
    if depth == 0 || rng.random_bool(0.4) {
        return leaf(rng);
    }
    let a = query(rng, depth - 1);
    let b = query(rng, depth - 1);
    match rng.random_range(0..6) {
        0 => format!("{a} {b}"),
        1 => format!("({a}) OR ({b})"),
        2 => format!("{a} AND NOT ({b})"),
        3 => format!("-({a})"),
        4 => format!("+({a}) -({b})"),
        _ => format!("({a})^2 || {b}"),
    }
}

/// The keys of a page's hits, in order.
fn key_names(hits: crate::Hits) -> Vec<String> {
    hits.top
        .into_iter()
        .map(|hit| String::from_utf8(hit.key.to_vec()).unwrap())
        .collect()
}

#[test]
fn the_index_and_the_reference_find_the_same_documents() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut docs = Vec::new();
    for i in 0..400 {
        let mut doc = document(&mut rng);
        if i > 150 && i % 7 == 0 {
            // A path only the second segment holds.
            doc["late"] = json!(words(&mut rng, 2));
        }
        let key = format!("people/{i}");
        let Value::Object(object) = doc.clone() else {
            unreachable!()
        };
        index
            .put(Indexable {
                shard: ShardId(1),
                key: key.as_bytes(),
                slot: 0,
                modify_index: i,
                object,
            })
            .unwrap();
        docs.push((key, doc));
        if i == 150 {
            // Two segments at least: terms without a field ask the paths of both.
            index.commit().unwrap();
        }
    }
    // A document of another collection matches nothing here.
    index
        .put(Indexable {
            shard: ShardId(1),
            key: b"others/1",
            slot: 0,
            modify_index: 1,
            object: json!({"name": "alpha beta"}).as_object().unwrap().clone(),
        })
        .unwrap();
    index.commit().unwrap();
    let searchable = index.searchable();
    let mut checked = 0;
    let mut nonempty = 0;
    for _ in 0..1_500 {
        let text = query(&mut rng, 3);
        let parsed = match parse(&text) {
            Ok(q) => q,
            Err(e) => panic!("{text}: {e}"),
        };
        let expected: BTreeSet<String> = docs
            .iter()
            .filter(|(_, d)| matches(&parsed, d))
            .map(|(k, _)| k.clone())
            .collect();
        let hits = searchable
            .search(ShardId(1), b"people", &parsed, None, docs.len(), &[])
            .unwrap();
        let total = hits.total;
        let found: BTreeSet<String> = key_names(hits).into_iter().collect();
        assert_eq!(
            found, expected,
            "{text} (parsed {parsed:?}): the index and the reference differ"
        );
        assert_eq!(total, expected.len() as u64, "{text}");
        checked += 1;
        nonempty += usize::from(!expected.is_empty() && expected.len() < docs.len());
    }
    assert!(
        checked == 1_500 && nonempty > 300,
        "{nonempty} selective queries"
    );
}

#[test]
fn replaced_and_removed_documents_leave_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    let put = |index: &mut NodeIndex, key: &str, doc: Value, at: u64| {
        index
            .put(Indexable {
                shard: ShardId(1),
                key: key.as_bytes(),
                slot: 3,
                modify_index: at,
                object: doc.as_object().unwrap().clone(),
            })
            .unwrap();
    };
    put(&mut index, "c/a", json!({"w": "old"}), 1);
    put(&mut index, "c/b", json!({"w": "old"}), 2);
    index.commit().unwrap();
    put(&mut index, "c/a", json!({"w": "new"}), 3);
    index.remove(b"c/b");
    index.commit().unwrap();
    let s = index.searchable();
    let keys = |q: &str, slots| {
        s.search(ShardId(1), b"c", &parse(q).unwrap(), slots, 10, &[])
            .unwrap()
            .top
            .into_iter()
            .map(|hit| hit.key)
            .collect::<Vec<_>>()
    };
    assert!(keys("w:old", None).is_empty());
    assert_eq!(keys("w:new", None), vec![bytes::Bytes::from_static(b"c/a")]);
    assert_eq!(keys("w:new", Some((3, 3))).len(), 1);
    assert!(
        keys("w:new", Some((4, 100))).is_empty(),
        "outside the slots"
    );
    let mut indexed = index.indexed(ShardId(1)).unwrap();
    indexed.sort();
    assert_eq!(indexed, vec![(b"c/a".to_vec(), 3)]);
    assert!(
        index.indexed(ShardId(2)).unwrap().is_empty(),
        "another shard's part"
    );
    assert!(
        s.search(ShardId(2), b"c", &parse("*").unwrap(), None, 10, &[])
            .unwrap()
            .top
            .is_empty()
    );
    // Reopened, the index holds what was committed.
    drop(s);
    drop(index);
    let index = NodeIndex::open(dir.path()).unwrap();
    assert_eq!(
        index.indexed(ShardId(1)).unwrap(),
        vec![(b"c/a".to_vec(), 3)]
    );
}

/// A document's value under `path` for a sort, computed from the JSON the way the sort
/// rules say: scalars at the path (an array's elements), the smallest ascending and the
/// largest descending, missing when there are none.
fn reference_value(doc: &Value, key: &SortKey) -> SortValue {
    let mut at = doc;
    for part in &key.path {
        match at.get(part) {
            Some(next) => at = next,
            None => return SortValue::Missing,
        }
    }
    let scalars: Vec<&Value> = match at {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let mut best = SortValue::Missing;
    for v in scalars {
        let value = match v {
            Value::Bool(b) => SortValue::Bool(*b),
            Value::Number(n) => SortValue::Number(n.as_f64().unwrap()),
            Value::String(s) => SortValue::Text(sort_text(s).to_owned()),
            _ => continue,
        };
        let ahead = compare_sort_values(
            std::slice::from_ref(&value),
            std::slice::from_ref(&best),
            std::slice::from_ref(key),
        );
        if ahead.is_lt() {
            best = value;
        }
    }
    best
}

/// Indexes `docs` into shard 1, committing after each document `commit_after` picks (so that
/// the index has several segments) and at the end.
fn put_all(index: &mut NodeIndex, docs: &[(String, Value)], commit_after: impl Fn(usize) -> bool) {
    for (i, (key, doc)) in docs.iter().enumerate() {
        index
            .put(Indexable {
                shard: ShardId(1),
                key: key.as_bytes(),
                slot: 0,
                modify_index: i as u64,
                object: doc.as_object().unwrap().clone(),
            })
            .unwrap();
        if commit_after(i) {
            index.commit().unwrap();
        }
    }
    index.commit().unwrap();
}

#[test]
fn sorted_pages_agree_with_the_reference_order() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    let mut docs: Vec<(String, Value)> = (0..300)
        .map(|i| (format!("people/{i:03}"), document(&mut rng)))
        .collect();
    // Strings longer than the sort sees, that differ only past the cut.
    let long = "x".repeat(crate::SORT_STRING_BYTES);
    docs[5].1["name"] = json!(format!("{long}b"));
    docs[6].1["name"] = json!(format!("{long}a"));
    // Two segments at least: segments merge by value, not by dictionary ordinal.
    put_all(&mut index, &docs, |i| i == 140);
    let searchable = index.searchable();
    let fields = [
        "name",
        "age",
        "active",
        "created",
        "tags",
        "address.city",
        "address.zip",
        "rank",
        "note",
        "absent",
    ];
    let mut checked = 0;
    for _ in 0..400 {
        let text = query(&mut rng, 2);
        let parsed = parse(&text).unwrap();
        let mut sort_text_param = Vec::new();
        for _ in 0..rng.random_range(1..3) {
            let field = fields[rng.random_range(0..fields.len())];
            let direction = ["", ":asc", ":desc"][rng.random_range(0..3)];
            sort_text_param.push(format!("{field}{direction}"));
        }
        let sort = parse_sort(&sort_text_param.join(",")).unwrap();
        let mut expected: Vec<(Vec<SortValue>, &str)> = docs
            .iter()
            .filter(|(_, d)| matches(&parsed, d))
            .map(|(k, d)| {
                (
                    sort.iter().map(|s| reference_value(d, s)).collect(),
                    k.as_str(),
                )
            })
            .collect();
        expected.sort_by(|a, b| compare_sort_values(&a.0, &b.0, &sort).then(a.1.cmp(b.1)));
        let want = rng.random_range(1..40);
        let hits = searchable
            .search(ShardId(1), b"people", &parsed, None, want, &sort)
            .unwrap();
        let found: Vec<(Vec<SortValue>, String)> = hits
            .top
            .into_iter()
            .map(|h| (h.sort, String::from_utf8(h.key.to_vec()).unwrap()))
            .collect();
        let expected: Vec<(Vec<SortValue>, String)> = expected
            .into_iter()
            .take(want)
            .map(|(v, k)| (v, k.to_owned()))
            .collect();
        assert_eq!(found, expected, "{text} sorted by {sort_text_param:?}");
        checked += usize::from(found.len() > 1);
    }
    assert!(checked > 150, "{checked} pages of more than one result");
}

#[test]
fn a_sort_on_a_field_of_two_types_is_refused_only_where_they_meet() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    let docs = vec![
        ("a/1".to_owned(), json!({"x": 1, "k": "one"})),
        ("a/2".to_owned(), json!({"x": "two", "k": "two"})),
        ("b/1".to_owned(), json!({"x": 3})),
        ("b/2".to_owned(), json!({"x": [4, "four"]})),
        ("c/1".to_owned(), json!({"x": 5})),
        ("c/2".to_owned(), json!({"x": "six"})),
    ];
    // c/1 and c/2 land in different segments: the segments' answers disagree.
    put_all(&mut index, &docs, |i| i == 4);
    let s = index.searchable();
    let search = |collection: &[u8], q: &str| {
        s.search(
            ShardId(1),
            collection,
            &parse(q).unwrap(),
            None,
            10,
            &parse_sort("x").unwrap(),
        )
    };
    for (collection, q) in [(&b"a"[..], "*"), (b"b", "*"), (b"c", "*")] {
        let err = search(collection, q).unwrap_err();
        assert!(
            err.to_string().contains("numbers and strings")
                || err.to_string().contains("strings and numbers"),
            "{err}"
        );
    }
    // Narrowed to one type, the same field sorts.
    let hits = search(b"a", "k:one").unwrap();
    assert_eq!(hits.top.len(), 1);
    assert_eq!(hits.top[0].sort, vec![SortValue::Number(1.0)]);
}

#[test]
fn ties_are_cut_by_key_even_where_keys_share_their_first_bytes() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    // Every key agrees on its first 8 bytes after the collection; every document scores and
    // sorts the same: only the full keys order them, across three segments.
    let mut docs: Vec<(String, Value)> = (0..90)
        .map(|i| (format!("c/samefirst-{i:03}"), json!({"g": "same", "n": 1})))
        .collect();
    for i in (1..docs.len()).rev() {
        docs.swap(i, rng.random_range(0..=i));
    }
    let mut sorted_keys: Vec<String> = docs.iter().map(|(k, _)| k.clone()).collect();
    sorted_keys.sort();
    put_all(&mut index, &docs, |i| i % 30 == 29);
    let s = index.searchable();
    for sort in ["", "n", "g:desc"] {
        let sort = if sort.is_empty() {
            Vec::new()
        } else {
            parse_sort(sort).unwrap()
        };
        for want in [1, 5, 17, 31, 90, 200] {
            let found = key_names(
                s.search(
                    ShardId(1),
                    b"c",
                    &parse("g:same").unwrap(),
                    None,
                    want,
                    &sort,
                )
                .unwrap(),
            );
            let expected: Vec<String> = sorted_keys.iter().take(want).cloned().collect();
            assert_eq!(found, expected, "want {want}, sort {sort:?}");
        }
    }
}

#[test]
fn minus_zero_and_zero_tie_and_fall_back_to_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    let docs = vec![
        ("c/a".to_owned(), json!({"x": 0})),
        (
            "c/b".to_owned(),
            serde_json::from_str::<Value>(r#"{"x": -0.0}"#).unwrap(),
        ),
        ("c/c".to_owned(), json!({"x": -1})),
    ];
    put_all(&mut index, &docs, |i| i == 0);
    let s = index.searchable();
    for (sort, expected) in [
        ("x", ["c/c", "c/a", "c/b"]),
        ("x:desc", ["c/a", "c/b", "c/c"]),
    ] {
        let found = key_names(
            s.search(
                ShardId(1),
                b"c",
                &parse("*").unwrap(),
                None,
                10,
                &parse_sort(sort).unwrap(),
            )
            .unwrap(),
        );
        assert_eq!(found, expected, "sort={sort}");
    }
}

#[test]
fn whole_numbers_match_exactly_beyond_the_floats_precision() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = NodeIndex::open(dir.path()).unwrap();
    let docs: Vec<(String, Value)> = [
        ("c/a", r#"{"id": 1234567890123456789}"#),
        ("c/b", r#"{"id": 1234567890123456788}"#),
        ("c/c", r#"{"id": 18446744073709551615}"#),
        ("c/d", r#"{"id": 18446744073709551614}"#),
        ("c/e", r#"{"id": -9223372036854775807}"#),
        ("c/f", r#"{"id": 42.0}"#),
        ("c/g", r#"{"id": 42}"#),
        ("c/h", r#"{"id": 4.2e1}"#),
        ("c/i", r#"{"id": 1e300}"#),
        ("c/j", r#"{"id": 1e18}"#),
        ("c/k", r#"{"id": 9.223372036854775808e18}"#),
        ("c/l", r#"{"id": 9223372036854775807}"#),
        ("c/m", r#"{"id": -0.0}"#),
        ("c/n", r#"{"id": [0.5, 7]}"#),
    ]
    .into_iter()
    .map(|(key, text)| (key.to_owned(), serde_json::from_str(text).unwrap()))
    .collect();
    put_all(&mut index, &docs, |i| i == 3);
    let s = index.searchable();
    let none: Vec<&str> = Vec::new();
    for (query, expected) in [
        ("id:1234567890123456789", vec!["c/a"]),
        ("id:1234567890123456788", vec!["c/b"]),
        ("id:18446744073709551615", vec!["c/c"]),
        ("id:18446744073709551614", vec!["c/d"]),
        ("id:-9223372036854775807", vec!["c/e"]),
        ("id:42", vec!["c/f", "c/g", "c/h"]),
        ("id:42.0", vec!["c/f", "c/g", "c/h"]),
        ("id:1e300", vec!["c/i"]),
        ("id:1000000000000000000", vec!["c/j"]),
        ("id:1000000000000000001", none.clone()),
        ("id:9223372036854775808", vec!["c/k"]),
        ("id:9223372036854775807", vec!["c/l"]),
        ("id:0", vec!["c/m"]),
        ("id:0.5", vec!["c/n"]),
        ("id:7", vec!["c/n"]),
    ] {
        let parsed = parse(query).unwrap();
        let mut found = key_names(s.search(ShardId(1), b"c", &parsed, None, 10, &[]).unwrap());
        found.sort();
        assert_eq!(found, expected, "the index, {query}");
        let reference: Vec<&str> = docs
            .iter()
            .filter(|(_, doc)| matches(&parsed, doc))
            .map(|(key, _)| key.as_str())
            .collect();
        assert_eq!(reference, expected, "the reference, {query}");
    }
}
