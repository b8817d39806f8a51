//! The reference evaluation of a [`Query`] against one JSON document, with exactly the
//! meaning written in [`crate::ast`]. It needs no index, so it is what the index is tested
//! against, and what a search can fall back to.
//!
//! Where values are looked for:
//! - a leaf with a field looks at the value(s) at that dotted path; arrays met on the way or
//!   at the end fan out, at any depth of nesting, and any element may match;
//! - a leaf without a field looks at every string anywhere in the document (never numbers,
//!   booleans or object keys), whatever its test.
//!
//! What each test asks of those values is said on [`Test`]; the details the index must
//! share are on the functions below ([`exists_under`], [`Check::Date`]).

use crate::ast::{IndexNumber, Query, RangeKind, Test, parse_date, parse_number, words};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;
use std::ops::Bound;

/// Whether `doc` matches `query`. Only JSON objects are documents: anything else matches
/// nothing, not even [`Query::All`]. Boosts never change what matches.
pub fn matches(query: &Query, doc: &Value) -> bool {
    doc.is_object() && holds(query, doc)
}

/// Whether the JSON text `doc` is a document (an object) that matches `query`; text that is
/// not JSON, or not an object, matches nothing.
///
/// When every leaf names a field, only the top-level fields the query names are built into
/// values; the rest is checked and skipped, which is most of a document when a query names
/// a field or two. (Skipping does not apply serde_json's nesting limit to the skipped
/// parts; stored documents were read whole when written, so they are within it.)
pub fn matches_json(query: &Query, doc: &[u8]) -> bool {
    let mut wanted = Vec::new();
    if !top_level_fields(query, &mut wanted) {
        return serde_json::from_slice::<Value>(doc).is_ok_and(|doc| matches(query, &doc));
    }
    let mut reader = serde_json::Deserializer::from_slice(doc);
    match KeepFields(&wanted).deserialize(&mut reader) {
        Ok(kept) if reader.end().is_ok() => matches(query, &Value::Object(kept)),
        _ => false,
    }
}

/// Adds to `wanted` the first part of every field the leaves of `query` name; false when
/// some leaf names none (so needs every string of the document).
fn top_level_fields(query: &Query, wanted: &mut Vec<String>) -> bool {
    match query {
        Query::All => true,
        Query::And(parts) | Query::Or(parts) => {
            parts.iter().all(|part| top_level_fields(part, wanted))
        }
        Query::Not(part) | Query::Boosted(part, _) => top_level_fields(part, wanted),
        Query::Leaf { field: None, .. } => false,
        Query::Leaf {
            field: Some(path), ..
        } => {
            if let Some(first) = path.first().filter(|first| !wanted.contains(first)) {
                wanted.push(first.clone());
            }
            true
        }
    }
}

/// `And([])` holds (nothing is asked), `Or([])` does not (nothing is offered).
fn holds(query: &Query, doc: &Value) -> bool {
    match query {
        Query::All => true,
        Query::And(parts) => parts.iter().all(|part| holds(part, doc)),
        Query::Or(parts) => parts.iter().any(|part| holds(part, doc)),
        Query::Not(part) => !holds(part, doc),
        Query::Boosted(part, _) => holds(part, doc),
        Query::Leaf { field, test, .. } => {
            let check = Check::new(test);
            match field {
                Some(path) => at_path(doc, path, &mut |value| check.value(value)),
                None => any_string(doc, &mut |text| check.string(text)),
            }
        }
    }
}

/// A [`Test`] made ready to be asked of many values.
enum Check {
    /// Term and phrase: the words next to each other in a string; for a term, also the
    /// number and the boolean its text reads as.
    Words {
        words: Vec<String>,
        number: Option<IndexNumber>,
        boolean: Option<bool>,
    },
    Wildcard(Vec<char>),
    Fuzzy {
        term: Vec<char>,
        edits: usize,
    },
    Exists,
    Number {
        lower: Bound<f64>,
        upper: Bound<f64>,
    },
    /// Dates are compared in whole seconds, the value's and the bounds' fractions dropped:
    /// the index keeps dates at that precision.
    Date {
        lower: Bound<i64>,
        upper: Bound<i64>,
    },
    Word {
        lower: Bound<String>,
        upper: Bound<String>,
    },
    /// A range whose bound does not read as its kind (only a hand-built query has one).
    Never,
}

impl Check {
    fn new(test: &Test) -> Self {
        match test {
            Test::Term(text) => {
                let lowered = text.trim().to_lowercase();
                Check::Words {
                    words: words(text).collect(),
                    number: IndexNumber::parse(text),
                    boolean: match lowered.as_str() {
                        "true" => Some(true),
                        "false" => Some(false),
                        _ => None,
                    },
                }
            }
            Test::Phrase(text) => Check::Words {
                words: words(text).collect(),
                number: None,
                boolean: None,
            },
            Test::Wildcard(pattern) => Check::Wildcard(pattern.to_lowercase().chars().collect()),
            Test::Fuzzy { term, edits } => Check::Fuzzy {
                term: term.to_lowercase().chars().collect(),
                edits: usize::from(*edits),
            },
            Test::Exists => Check::Exists,
            Test::Range { kind, lower, upper } => {
                let ends = match kind {
                    RangeKind::Number => map_bounds(lower, upper, parse_number)
                        .map(|(lower, upper)| Check::Number { lower, upper }),
                    RangeKind::Date => map_bounds(lower, upper, |end| {
                        parse_date(end).map(|(seconds, _)| seconds)
                    })
                    .map(|(lower, upper)| Check::Date { lower, upper }),
                    RangeKind::Word => map_bounds(lower, upper, |end| Some(end.to_lowercase()))
                        .map(|(lower, upper)| Check::Word { lower, upper }),
                };
                ends.unwrap_or(Check::Never)
            }
        }
    }

    /// Asked of a value at a field (never an array: those have been fanned out).
    fn value(&self, value: &Value) -> bool {
        match (self, value) {
            (Check::Exists, value) => exists_under(value),
            (_, Value::String(text)) => self.string(text),
            (
                Check::Words {
                    number: Some(wanted),
                    ..
                },
                Value::Number(n),
            ) => IndexNumber::of(n) == Some(*wanted),
            (
                Check::Words {
                    boolean: Some(wanted),
                    ..
                },
                Value::Bool(b),
            ) => b == wanted,
            (Check::Number { lower, upper }, Value::Number(n)) => {
                n.as_f64().is_some_and(|n| within(&n, lower, upper))
            }
            _ => false,
        }
    }

    /// Asked of one string.
    fn string(&self, text: &str) -> bool {
        match self {
            Check::Words { words: wanted, .. } => {
                if wanted.is_empty() {
                    return false;
                }
                let have: Vec<String> = words(text).collect();
                have.windows(wanted.len())
                    .any(|run| run == wanted.as_slice())
            }
            Check::Wildcard(pattern) => words(text).any(|word| {
                let word: Vec<char> = word.chars().collect();
                wildcard_matches(pattern, &word)
            }),
            Check::Fuzzy { term, edits } => words(text).any(|word| {
                let word: Vec<char> = word.chars().collect();
                within_edits(term, &word, *edits)
            }),
            Check::Exists => words(text).next().is_some(),
            Check::Date { lower, upper } => {
                parse_date(text).is_some_and(|(seconds, _)| within(&seconds, lower, upper))
            }
            Check::Word { lower, upper } => words(text).any(|word| within(&word, lower, upper)),
            Check::Number { .. } | Check::Never => false,
        }
    }
}

/// [`Test::Exists`] on a value at a field: some number, boolean or string with a word in it
/// is reachable at or under it, through objects and arrays. So `null`, `[]`, `{}`, `""`,
/// `"!!"` and `{"a": [null]}` hold nothing, and `{"a": {"b": 1}}` makes `a` exist. The index
/// sees the same: "some term is indexed under a path starting with this field" (a string
/// without words leaves no term).
fn exists_under(value: &Value) -> bool {
    match value {
        Value::String(text) => words(text).next().is_some(),
        Value::Number(_) | Value::Bool(_) => true,
        Value::Null => false,
        Value::Array(items) => items.iter().any(exists_under),
        Value::Object(map) => map.values().any(exists_under),
    }
}

fn map_bounds<T>(
    lower: &Bound<String>,
    upper: &Bound<String>,
    read: impl Fn(&str) -> Option<T>,
) -> Option<(Bound<T>, Bound<T>)> {
    let map = |end: &Bound<String>| match end {
        Bound::Included(end) => read(end).map(Bound::Included),
        Bound::Excluded(end) => read(end).map(Bound::Excluded),
        Bound::Unbounded => Some(Bound::Unbounded),
    };
    Some((map(lower)?, map(upper)?))
}

fn within<T: PartialOrd>(value: &T, lower: &Bound<T>, upper: &Bound<T>) -> bool {
    let above = match lower {
        Bound::Included(end) => value >= end,
        Bound::Excluded(end) => value > end,
        Bound::Unbounded => true,
    };
    let below = match upper {
        Bound::Included(end) => value <= end,
        Bound::Excluded(end) => value < end,
        Bound::Unbounded => true,
    };
    above && below
}

/// Calls `hit` on each value at `path` under `value` until it says yes; arrays met on the
/// way or at the end fan out, so `hit` never sees an array.
fn at_path(value: &Value, path: &[String], hit: &mut dyn FnMut(&Value) -> bool) -> bool {
    match (value, path.split_first()) {
        (Value::Array(items), _) => items.iter().any(|item| at_path(item, path, hit)),
        (_, None) => hit(value),
        (Value::Object(map), Some((first, rest))) => {
            map.get(first).is_some_and(|next| at_path(next, rest, hit))
        }
        _ => false,
    }
}

/// Calls `hit` on every string in `value`, at any depth, until it says yes.
fn any_string(value: &Value, hit: &mut dyn FnMut(&str) -> bool) -> bool {
    match value {
        Value::String(text) => hit(text),
        Value::Array(items) => items.iter().any(|item| any_string(item, hit)),
        Value::Object(map) => map.values().any(|item| any_string(item, hit)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Whether `word` matches `pattern`, where `*` is any run of characters (perhaps none) and
/// `?` exactly one. Greedy with one point to come back to (the last `*`), which is enough
/// for these patterns and keeps the work at most pattern × word.
fn wildcard_matches(pattern: &[char], word: &[char]) -> bool {
    let (mut p, mut w) = (0, 0);
    // After the last `*` seen: where the pattern resumes, and the word position it last
    // resumed from.
    let mut retry: Option<(usize, usize)> = None;
    while let Some(&c) = word.get(w) {
        match pattern.get(p) {
            Some('*') => {
                p += 1;
                retry = Some((p, w));
            }
            Some(&want) if want == '?' || want == c => {
                p += 1;
                w += 1;
            }
            _ => match retry {
                Some((resume, from)) => {
                    p = resume;
                    w = from + 1;
                    retry = Some((resume, from + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == '*'))
}

/// Whether the optimal string alignment distance between `a` and `b` (insertions,
/// deletions, substitutions, and swaps of two neighbouring characters, each costing 1,
/// no character edited twice) is at most `limit`.
fn within_edits(a: &[char], b: &[char], limit: usize) -> bool {
    if a.len().abs_diff(b.len()) > limit {
        return false;
    }
    // Three rows of the distance table: for a's first i-2, i-1 and i characters.
    let mut two_back: Vec<usize> = vec![0; b.len() + 1];
    let mut one_back: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for (i, &ac) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, &bc) in b.iter().enumerate() {
            let substitution = one_back[j] + usize::from(ac != bc);
            let mut best = substitution.min(one_back[j + 1] + 1).min(current[j] + 1);
            let swapped = i > 0 && j > 0 && a[i - 1] == bc && b[j - 1] == ac;
            if swapped {
                best = best.min(two_back[j - 1] + 1);
            }
            current[j + 1] = best;
        }
        std::mem::swap(&mut two_back, &mut one_back);
        std::mem::swap(&mut one_back, &mut current);
    }
    one_back[b.len()] <= limit
}

/// Reads a JSON object keeping only the named top-level fields; anything but an object is
/// an error.
struct KeepFields<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for KeepFields<'_> {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Self::Value, D::Error> {
        reader.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeepFields<'_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = entries.next_key::<String>()? {
            if self.0.contains(&key) {
                // A repeated key: the last one wins, as when reading the whole document.
                kept.insert(key, entries.next_value()?);
            } else {
                entries.next_value::<IgnoredAny>()?;
            }
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse;
    use serde_json::json;

    fn alice() -> Value {
        json!({
            "name": "Alice Liddell",
            "age": 42,
            "height": 1.5,
            "active": true,
            "bio": "Fell down a rabbit-hole; met the Cheshire Cat.",
            "address": {"city": "Oxford", "zip": "OX1 3BD"},
            "tags": ["Reader", "dreamer"],
            "pets": [{"kind": "cat", "name": "Dinah"}, {"kind": "kitten", "name": null}],
            "grid": [[{"x": 1}], [{"x": "two"}]],
            "born": "1852-05-04T10:00:00+02:00",
            "none": null,
            "empty": [],
            "nothing": {},
            "holes": {"a": [null], "b": {}},
        })
    }

    fn query(text: &str) -> Query {
        parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn hits(text: &str, doc: &Value) -> bool {
        matches(&query(text), doc)
    }

    fn hits_alice(text: &str) -> bool {
        hits(text, &alice())
    }

    fn leaf(field: Option<&str>, test: Test) -> Query {
        Query::Leaf {
            field: field.map(|f| f.split('.').map(str::to_owned).collect()),
            test,
            boost: None,
        }
    }

    #[test]
    fn only_objects_are_documents() {
        assert!(matches(&Query::All, &json!({})));
        assert!(matches(&Query::All, &alice()));
        for not_a_document in [json!([1]), json!("x"), json!(null), json!(42), json!(true)] {
            assert!(!matches(&Query::All, &not_a_document), "{not_a_document}");
            assert!(!hits("x", &not_a_document), "{not_a_document}");
        }
    }

    #[test]
    fn terms_match_runs_of_words() {
        assert!(hits_alice("name:alice"));
        assert!(hits_alice("name:LIDDELL"));
        assert!(
            hits_alice(r"name:alice\ liddell"),
            "several words, next to each other"
        );
        assert!(hits_alice("bio:rabbit-hole"));
        assert!(hits_alice("bio:HOLE;met"));
        assert!(!hits_alice("bio:hole-rabbit"), "in order");
        assert!(!hits_alice("bio:rabbit-met"), "next to each other");
        assert!(!hits_alice("name:ali"), "whole words");
        assert!(hits_alice("address.city:oxford"));
        assert!(hits_alice("address.zip:3bd"));
        assert!(!hits_alice("address:oxford"), "an object is no value");
        assert!(!hits_alice("city:oxford"), "paths start at the top");
        assert!(!hits_alice("missing:oxford"));
    }

    #[test]
    fn terms_match_numbers_and_booleans_at_a_field() {
        assert!(hits_alice("age:42"));
        assert!(hits_alice("age:42.0"));
        assert!(hits_alice("age:4.2e1"));
        assert!(!hits_alice("age:4"));
        assert!(!hits_alice("age:43"));
        assert!(hits_alice("height:1.5"));
        assert!(hits_alice("height:1.50"));
        assert!(hits("n:42", &json!({"n": 42.0})));
        assert!(hits("n:-5", &json!({"n": -5})));
        assert!(hits("n:0", &json!({"n": -0.0})));
        assert!(hits("n:42", &json!({"n": [1, 42]})));
        assert!(
            hits("n:42", &json!({"n": "room 42"})),
            "and the word in a string"
        );
        assert!(
            hits("n:42", &json!({"n": "42.5"})),
            "a string of the words 42 and 5"
        );
        assert!(hits("n:42.5", &json!({"n": "42.5"})));
        assert!(!hits("n:42.5", &json!({"n": 42})));
        assert!(hits("n:18446744073709551615", &json!({"n": u64::MAX})));
        assert!(
            !hits("n:18446744073709551614", &json!({"n": u64::MAX})),
            "integers compare exactly"
        );
        assert!(hits("n:42", &json!({"n": 42.0})));
        assert!(hits("n:4.2e1", &json!({"n": 42})));
        assert!(hits_alice("active:true"));
        assert!(hits_alice("active:TRUE"));
        assert!(!hits_alice("active:false"));
        assert!(hits("ok:false", &json!({"ok": false})));
        assert!(
            !hits("ok:1", &json!({"ok": true})),
            "a boolean is not a number"
        );
        assert!(!hits("n:true", &json!({"n": 1})));
        assert!(!hits_alice("none:null"), "null holds nothing");
    }

    #[test]
    fn bare_terms_look_at_every_string_and_only_strings() {
        assert!(hits_alice("cheshire"));
        assert!(hits_alice("dinah"), "in arrays of objects");
        assert!(hits_alice("two"), "in nested arrays");
        assert!(hits_alice("oxford"));
        assert!(!hits_alice("42"), "not numbers");
        assert!(!hits_alice("true"), "not booleans");
        assert!(!hits_alice("kind"), "not keys");
        assert!(!hits_alice("zebra"));
        assert!(hits_alice("\"rabbit hole\""));
        assert!(hits_alice("dream*"));
        assert!(hits_alice("dremer~1"));
        assert!(!matches(
            &leaf(None, Test::Exists),
            &json!({"x": [{"y": ""}]})
        ));
        assert!(matches(
            &leaf(None, Test::Exists),
            &json!({"x": [{"y": "a"}]})
        ));
        assert!(!matches(
            &leaf(None, Test::Exists),
            &json!({"x": 1, "y": true})
        ));
    }

    #[test]
    fn phrases_stay_within_one_string() {
        assert!(hits_alice("bio:\"the cheshire cat\""));
        assert!(hits_alice("bio:\"Rabbit, hole!\""));
        assert!(!hits_alice("bio:\"cat cheshire\""));
        let doc = json!({"names": ["alice", "liddell"], "n": 42});
        assert!(
            !hits("names:\"alice liddell\"", &doc),
            "not across elements"
        );
        assert!(!hits(r"names:alice\ liddell", &doc));
        assert!(!hits("\"alice liddell\"", &doc));
        assert!(hits("names:\"liddell\"", &doc));
        assert!(!hits("n:\"42\"", &doc), "strings only");
    }

    #[test]
    fn wildcards_match_one_word() {
        assert!(hits_alice("bio:che?hire"));
        assert!(hits_alice("bio:ch*"));
        assert!(hits_alice("bio:*ire"));
        assert!(hits_alice("bio:c*s*e"));
        assert!(hits_alice("bio:*"), "a field holding something");
        assert!(hits_alice("bio:**"));
        assert!(hits_alice("bio:c?t"));
        assert!(!hits_alice("bio:c?"));
        assert!(!hits_alice("bio:ca?t"));
        assert!(!hits_alice("bio:rabbit*hole"), "one word, not two");
        assert!(hits_alice("tags:READ*"));
        assert!(hits_alice("pets.name:d?n*"));
        assert!(!hits_alice("age:4*"), "strings only");
        assert!(hits("w:caf?", &json!({"w": "Café"})), "? is one character");
        assert!(hits("w:?????", &json!({"w": "hello"})));
        assert!(!hits("w:????", &json!({"w": "hello"})));
        assert!(hits(
            "w:a*a*a",
            &json!({"w": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})
        ));
        assert!(!hits(
            "w:a*a*ab",
            &json!({"w": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})
        ));
    }

    #[test]
    fn fuzzy_counts_optimal_string_alignment_edits() {
        let doc = json!({"w": "the Cat sat"});
        assert!(hits("w:cat~0", &doc));
        assert!(!hits("w:cut~0", &doc));
        assert!(hits("w:cut~1", &doc), "a substitution");
        assert!(hits("w:ct~1", &doc), "an insertion");
        assert!(hits("w:caat~1", &doc), "a deletion");
        assert!(hits("w:hte~1", &doc), "a swap of neighbours is one edit");
        assert!(hits("w:act~1", &doc));
        assert!(!hits("w:tac~1", &doc));
        assert!(hits("w:tac~2", &doc));
        assert!(hits("w:CAT~", &doc), "two edits by default, lowercased");
        assert!(!hits("n:42~0", &json!({"n": 42})), "strings only");
        // Optimal string alignment edits no character twice: "ca" to "abc" is three edits
        // there (two with unrestricted transpositions).
        let fuzzy = |term: &str, edits| {
            leaf(
                Some("w"),
                Test::Fuzzy {
                    term: term.into(),
                    edits,
                },
            )
        };
        assert!(!matches(&fuzzy("ca", 2), &json!({"w": "abc"})));
        assert!(matches(&fuzzy("ca", 3), &json!({"w": "abc"})));
        assert!(
            matches(&fuzzy("CAFE", 1), &json!({"w": "café"})),
            "on characters"
        );
        assert!(matches(&fuzzy("naïve", 1), &json!({"w": "naive"})));
        assert!(!matches(&fuzzy("abcdef", 2), &json!({"w": "abc"})));
    }

    #[test]
    fn osa_distance_table() {
        let within = |a: &str, b: &str, limit| {
            let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
            within_edits(&a, &b, limit)
        };
        let distance = |a: &str, b: &str| (0..10).find(|&k| within(a, b, k)).unwrap_or(99);
        assert_eq!(distance("", ""), 0);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", ""), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("abcd", "badc"), 2);
        assert_eq!(distance("ca", "abc"), 3);
        assert_eq!(distance("flaw", "lawn"), 2);
    }

    #[test]
    fn exists_needs_a_leaf_value_at_or_under_the_field() {
        assert!(hits_alice("name:*"));
        assert!(hits_alice("age:*"));
        assert!(hits_alice("active:*"));
        assert!(hits_alice("address:*"), "an object holding values");
        assert!(hits_alice("address.city:*"));
        assert!(hits_alice("pets.kind:*"));
        assert!(hits_alice("grid:*"));
        assert!(hits_alice("grid.x:*"));
        assert!(!hits_alice("pets.name.first:*"));
        assert!(!hits_alice("none:*"), "null");
        assert!(!hits_alice("empty:*"), "an empty array");
        assert!(!hits_alice("nothing:*"), "an empty object");
        assert!(!hits_alice("holes:*"), "only nulls and empties under it");
        assert!(!hits_alice("missing:*"));
        assert!(
            !hits("s:*", &json!({"s": ""})),
            "a string without words holds nothing"
        );
        assert!(!hits("s:*", &json!({"s": "?!"})));
        assert!(hits("s:*", &json!({"s": "?a!"})));
        assert!(hits("n:[* TO *]", &json!({"n": 0})));
        assert!(hits(
            "pets.name:*",
            &json!({"pets": [{"name": null}, {"name": "x"}]})
        ));
        assert!(!hits("pets.name:*", &json!({"pets": [{"name": null}, {}]})));
    }

    #[test]
    fn number_ranges() {
        let doc = json!({"n": 5, "m": [1, 10.5], "s": "7"});
        assert!(hits("n:[1 TO 5]", &doc));
        assert!(!hits("n:[1 TO 5}", &doc));
        assert!(hits("n:{4.99 TO 5.01}", &doc));
        assert!(!hits("n:{5 TO *]", &doc));
        assert!(hits("n:[5 TO *]", &doc));
        assert!(hits("n:>=5", &doc));
        assert!(!hits("n:>5", &doc));
        assert!(hits("n:<=5", &doc));
        assert!(!hits("n:<5", &doc));
        assert!(hits("n:>-1e3", &doc));
        assert!(hits("m:[10 TO 11]", &doc), "any element");
        assert!(!hits("m:[2 TO 10]", &doc));
        assert!(!hits("s:[1 TO 10]", &doc), "numbers only");
        assert!(!hits("n:[6 TO 1]", &doc));
    }

    #[test]
    fn date_ranges_compare_instants_in_whole_seconds() {
        let doc = json!({
            "at": "2024-05-01T12:00:00+02:00",
            "fine": "2024-05-01T10:00:00.700Z",
            "day": "2024-05-01",
            "n": 1714557600,
            "words": "on 2024-05-01",
        });
        assert!(hits(
            "at:[2024-05-01T10:00:00Z TO 2024-05-01T10:00:00Z]",
            &doc
        ));
        assert!(hits("at:>=2024-05-01T09:59:59Z", &doc));
        assert!(!hits("at:>2024-05-01T10:00:00Z", &doc));
        assert!(hits("at:[2024-05-01 TO 2024-05-02}", &doc));
        assert!(!hits("at:<2024-05-01T11:00:00+02:00", &doc));
        assert!(hits("at:<2024-05-01T11:00:01+01:00", &doc));
        assert!(hits(
            "day:[2024-05-01T00:00:00Z TO 2024-05-01T00:00:00Z]",
            &doc
        ));
        assert!(hits("day:<\"2024-05-01T00:00:01Z\"", &doc));
        // Fractions of a second are dropped on both sides.
        assert!(!hits("fine:{2024-05-01T10:00:00.200Z TO *]", &doc));
        assert!(hits("fine:[* TO 2024-05-01T10:00:00.200Z]", &doc));
        assert!(hits("fine:[2024-05-01T10:00:00.900Z TO *]", &doc));
        assert!(!hits("n:[2024-01-01 TO 2025-01-01]", &doc), "strings only");
        assert!(
            !hits("words:[2024-01-01 TO 2025-01-01]", &doc),
            "the whole string must be a date"
        );
    }

    #[test]
    fn word_ranges_compare_lowercased_words_as_bytes() {
        let doc = json!({"w": "Zebra and Cat", "x": ["apple", "Mango"], "n": 5});
        assert!(hits("w:[b TO d]", &doc), "cat");
        assert!(hits("w:[B TO D]", &doc), "bounds lowercased");
        assert!(hits("w:{and TO d]", &doc), "any word: cat is above and");
        assert!(
            !hits("w:{and TO c]", &doc),
            "and, cat and zebra all outside"
        );
        assert!(hits("w:>yak", &doc));
        assert!(hits("x:[m TO n]", &doc));
        assert!(!hits("x:[b TO l]", &doc));
        assert!(!hits("n:[a TO z]", &doc), "strings only");
        assert!(hits("w:[zebra TO zebra]", &doc));
        assert!(!hits("w:{zebra TO zebrb}", &doc));
    }

    #[test]
    fn hand_built_ranges_whose_bounds_do_not_read_match_nothing() {
        let range = |kind| {
            leaf(
                Some("n"),
                Test::Range {
                    kind,
                    lower: Bound::Included("soon".into()),
                    upper: Bound::Unbounded,
                },
            )
        };
        let doc = json!({"n": [5, "2024-05-01", "zoo"]});
        assert!(!matches(&range(RangeKind::Number), &doc));
        assert!(!matches(&range(RangeKind::Date), &doc));
        assert!(matches(&range(RangeKind::Word), &doc));
    }

    #[test]
    fn paths_fan_out_through_arrays() {
        let doc = json!({
            "a": [{"b": [{"c": "deep"}]}, {"b": {"c": ["deeper", ["deepest"]]}}],
            "m": [[1, [2]], 3],
            "s": "text",
        });
        assert!(hits("a.b.c:deep", &doc));
        assert!(hits("a.b.c:deeper", &doc));
        assert!(hits("a.b.c:deepest", &doc));
        assert!(hits("m:2", &doc));
        assert!(hits("m:3", &doc));
        assert!(!hits("a.c:deep", &doc));
        assert!(!hits("s.x:text", &doc), "a string has no fields");
        assert!(!hits("a.b:deep", &doc), "objects are not values");
    }

    #[test]
    fn combinations() {
        assert!(hits_alice("name:alice age:42"));
        assert!(!hits_alice("name:alice age:43"));
        assert!(hits_alice("name:bob OR age:42"));
        assert!(!hits_alice("name:bob OR age:43"));
        assert!(hits_alice("name:alice -age:43"));
        assert!(!hits_alice("name:alice -age:42"));
        assert!(!hits_alice("-cheshire"));
        assert!(hits_alice("-zebra"));
        assert!(hits_alice("NOT zebra OR cheshire"));
        assert!(hits_alice(
            "(name:bob OR name:alice) AND NOT (age:[0 TO 18])"
        ));
        assert!(hits_alice("name:(bob OR alice)^2"));
        assert!(hits_alice("name:alice^5"));
        assert!(!hits_alice("* -name:alice"));
        assert!(matches(&Query::And(vec![]), &alice()), "nothing is asked");
        assert!(!matches(&Query::Or(vec![]), &alice()), "nothing is offered");
        assert!(!matches(&Query::Not(Box::new(Query::All)), &alice()));
        assert!(matches(
            &Query::Boosted(Box::new(query("name:alice")), 3.0),
            &alice()
        ));
    }

    #[test]
    fn matching_json_text_agrees_with_matching_the_parsed_document() {
        let docs = [
            alice(),
            json!({"name": "Bob", "age": 7, "group": {"x": 1}}),
            json!({"name": {"first": "Alice"}, "tags": [], "bio": null}),
            json!({}),
        ];
        let queries = [
            "*",
            "name:alice",
            "name.first:alice",
            "-name:alice",
            "address.city:oxford age:7",
            "alice",
            "name:* -cheshire",
            "tags:*",
            "pets.kind:cat OR age:[1 TO 10]",
            "group:*",
        ];
        for text in queries {
            let query = query(text);
            for doc in &docs {
                let bytes = serde_json::to_vec(doc).unwrap();
                assert_eq!(
                    matches_json(&query, &bytes),
                    matches(&query, doc),
                    "{text} on {doc}"
                );
            }
            for not_a_document in [
                &b"[1]"[..],
                b"\"x\"",
                b"null",
                b"{\"a\":",
                b"{} {}",
                b"{\"name\":\"alice\"} x",
                b"",
                b"{\"name\":\"alice\",\"other\":[1,}",
            ] {
                assert!(
                    !matches_json(&query, not_a_document),
                    "{text} on {not_a_document:?}"
                );
            }
        }
        // A repeated key: the last one wins, as in serde_json's own reading.
        let query = query("group:g2");
        assert!(matches_json(&query, br#"{"group":"g1","group":"g2"}"#));
        assert!(!matches_json(&query, br#"{"group":"g2","group":"g1"}"#));
    }
}
