//! Ordering matches by the values of their fields (`sort=name:asc,age:desc`) instead of by
//! relevance.
//!
//! Every document's scalar values (numbers, booleans, and strings cut to
//! [`SORT_STRING_BYTES`]) also go, by path, into columns of the index (tantivy's fast fields),
//! so a sort reads one value per match and key from memory-mapped columns rather than the
//! documents. Within a segment strings compare by their place in the segment's sorted
//! dictionary; each segment keeps its best matches, their values are read back, and segments
//! and shards merge by the values themselves.
//!
//! The same collector cuts pages by relevance when no field is named: score, highest first,
//! then key. (tantivy's own top-N breaks ties by its internal document order, which differs
//! from shard to shard and from one merge to the next, so a page cut at `offset + limit` could
//! leave out a tied match that the next page expects before it; many matches tie: every
//! document whose field holds just `g7` scores the same for `group:g7`. Within a segment the
//! key column's ordinals follow the keys' order, so a segment orders by ordinal cheaply.)
//!
//! The rules, as a user sees them: a document that lacks the field (or holds `null`, an empty
//! array or an object there) comes after every document that has it, in both directions; an
//! array sorts by its smallest value ascending and its largest descending; numbers compare
//! as numbers (as 64-bit floats), strings by their UTF-8 bytes (so case matters and dates
//! written alike sort in time order), `false` before `true`; ties fall back to the key. A field
//! whose matching documents hold values of two types (numbers in some, strings in others) is
//! refused: there is no order between them that a user could predict.

use crate::{FieldPath, SearchError};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::{BytesColumn, Column, DynamicColumn, StrColumn};
use tantivy::{DocAddress, DocId, Score, SegmentOrdinal, SegmentReader};

/// The most fields one sort may name.
pub const MAX_SORT_FIELDS: usize = 4;

/// The most parts a sort field's path may have: the index keeps values for sorting only down
/// to 20 levels of nesting (arrays count as levels).
pub const MAX_SORT_PATH_PARTS: usize = 16;

/// How much of a string a sort sees: strings that agree on their first this many bytes tie
/// (and fall back to the key). Keeps the columns small when documents hold long texts.
pub const SORT_STRING_BYTES: usize = 64;

/// The name of the index's JSON field that holds the sortable values.
pub(crate) const SORT_FIELD: &str = "sort";

/// One field to sort by, and its direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SortKey {
    /// The path into the document (without Orchestrate's `value.`).
    pub path: FieldPath,
    /// Largest first.
    pub descending: bool,
}

/// A document's value for one [`SortKey`], as shards send it to be merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SortValue {
    /// `false` sorts before `true`.
    Bool(bool),
    /// Every JSON number, as a 64-bit float.
    Number(f64),
    /// A string, cut to [`SORT_STRING_BYTES`].
    Text(String),
    /// The document has no value there: it sorts last.
    Missing,
}

impl SortValue {
    /// The name of this value's type, for an error; `None` when missing.
    fn kind(&self) -> Option<&'static str> {
        let rank = match self {
            SortValue::Bool(_) => 0,
            SortValue::Number(_) => 1,
            SortValue::Text(_) => 2,
            SortValue::Missing => return None,
        };
        Some(kind_name(rank))
    }

    fn compare(&self, other: &SortValue, descending: bool) -> Ordering {
        let ordered = match (self, other) {
            (SortValue::Missing, SortValue::Missing) => return Ordering::Equal,
            // Missing is last in either direction.
            (SortValue::Missing, _) => return Ordering::Greater,
            (_, SortValue::Missing) => return Ordering::Less,
            (SortValue::Bool(a), SortValue::Bool(b)) => a.cmp(b),
            (SortValue::Number(a), SortValue::Number(b)) => a.total_cmp(b),
            (SortValue::Text(a), SortValue::Text(b)) => a.cmp(b),
            // Refused before it gets here (see `check_one_type`); any fixed order will do.
            _ => self.kind().cmp(&other.kind()),
        };
        if descending {
            ordered.reverse()
        } else {
            ordered
        }
    }
}

/// Reads `sort=` as users write it: fields separated by commas, each optionally followed by
/// `:asc` (the default) or `:desc`; `value.name` names the same field as `name`.
pub fn parse_sort(text: &str) -> Result<Vec<SortKey>, SearchError> {
    let refuse = |problem: String| SearchError::Refused(format!("sort {text:?}: {problem}"));
    let mut keys = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(refuse("an empty field name".into()));
        }
        let (field, direction) = match part.rsplit_once(':') {
            Some((field, direction)) => (field.trim(), direction.trim()),
            None => (part, "asc"),
        };
        let descending = match direction.to_ascii_lowercase().as_str() {
            "asc" => false,
            "desc" => true,
            other => {
                return Err(refuse(format!(
                    "the direction {other:?} is neither asc nor desc"
                )));
            }
        };
        if field.contains(['*', '?', '\\', ' ']) || field.chars().any(char::is_control) {
            return Err(refuse(format!(
                "the field name {field:?} holds a character a field path cannot have here"
            )));
        }
        let path = crate::parse::dotted_path(field).map_err(refuse)?;
        if path.len() > MAX_SORT_PATH_PARTS {
            return Err(refuse(format!(
                "the field path {field:?} is deeper than the {MAX_SORT_PATH_PARTS} levels a sort reaches"
            )));
        }
        keys.push(SortKey { path, descending });
    }
    if keys.len() > MAX_SORT_FIELDS {
        return Err(refuse(format!(
            "more than {MAX_SORT_FIELDS} fields to sort by"
        )));
    }
    Ok(keys)
}

/// Compares two matches' values under `keys` (values first, then the caller breaks ties).
pub fn compare_sort_values(a: &[SortValue], b: &[SortValue], keys: &[SortKey]) -> Ordering {
    keys.iter()
        .zip(a.iter().zip(b))
        .map(|(key, (a, b))| a.compare(b, key.descending))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Refuses a sort when the values of one of its fields are of more than one type among
/// `rows` (each row holding one value per key).
pub fn check_one_type<'a>(
    rows: impl IntoIterator<Item = &'a [SortValue]>,
    keys: &[SortKey],
) -> Result<(), SearchError> {
    let mut seen: Vec<Option<&'static str>> = vec![None; keys.len()];
    for row in rows {
        for ((value, seen), key) in row.iter().zip(seen.iter_mut()).zip(keys) {
            let Some(kind) = value.kind() else { continue };
            match seen {
                None => *seen = Some(kind),
                Some(first) if *first != kind => return Err(mixed(key, first, kind)),
                Some(_) => {}
            }
        }
    }
    Ok(())
}

fn mixed(key: &SortKey, a: &str, b: &str) -> SearchError {
    SearchError::Refused(format!(
        "cannot sort by {:?}: the matching documents hold both {a} and {b} there; sort by a \
         field that holds one type, or narrow the query",
        key.path.join(".")
    ))
}

/// The column name of `path` inside the sort field, as tantivy resolves it.
fn column_name(path: &FieldPath) -> String {
    let mut name = SORT_FIELD.to_owned();
    for part in path {
        name.push('.');
        name.push_str(part);
    }
    name
}

/// A string as the sort columns hold it: its first [`SORT_STRING_BYTES`] bytes, to the end
/// of the character they end in (cutting before it instead would make the string a prefix
/// of others it does not precede: `"x…xé"` before `"x…xa"`).
pub(crate) fn sort_text(text: &str) -> &str {
    if text.len() <= SORT_STRING_BYTES {
        return text;
    }
    let mut end = SORT_STRING_BYTES;
    while !text.is_char_boundary(end) {
        end += 1;
    }
    &text[..end]
}

/// Collects each segment's best `want` matches by the values of `keys` (by score, highest
/// first, when there are none), then key.
pub(crate) struct TopMatches {
    pub keys: Vec<SortKey>,
    pub want: usize,
}

/// A match kept by a segment, with what was read for it.
pub(crate) struct SortedMatch {
    /// One per sort key; empty when ordered by score.
    pub values: Vec<SortValue>,
    pub score: Score,
    pub address: DocAddress,
}

/// One value within a segment, oriented so that smaller is always better: descending keys
/// store their values negated (numbers), inverted (ordinals) or flipped (booleans).
#[derive(Clone, Copy, Debug)]
enum Oriented {
    Bool(bool),
    Number(f64),
    /// The string's ordinal in the segment's dictionary, which is in byte order.
    Ordinal(u64),
    Missing,
}

impl Oriented {
    fn rank(&self) -> u8 {
        match self {
            Oriented::Bool(_) => 0,
            Oriented::Number(_) => 1,
            Oriented::Ordinal(_) => 2,
            Oriented::Missing => 3,
        }
    }

    fn compare(&self, other: &Oriented) -> Ordering {
        match (self, other) {
            (Oriented::Bool(a), Oriented::Bool(b)) => a.cmp(b),
            (Oriented::Number(a), Oriented::Number(b)) => a.total_cmp(b),
            (Oriented::Ordinal(a), Oriented::Ordinal(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// A kept match of a segment; "greater" is worse, so the heap's top goes first.
struct Kept {
    values: Vec<Oriented>,
    key_ord: u64,
    score: Score,
    doc: DocId,
}

impl Kept {
    fn order(&self, other: &Kept) -> Ordering {
        self.values
            .iter()
            .zip(&other.values)
            .map(|(a, b)| a.compare(b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
            .then(self.key_ord.cmp(&other.key_ord))
    }
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order(other)
    }
}

/// The columns a segment holds for one sort key.
struct KeyColumns {
    descending: bool,
    bools: Vec<Column<bool>>,
    numbers: Vec<NumberColumn>,
    strings: Option<StrColumn>,
    /// The type the segment's matches hold here so far (`Oriented::rank`).
    seen: Option<u8>,
}

enum NumberColumn {
    I64(Column<i64>),
    U64(Column<u64>),
    F64(Column<f64>),
}

impl KeyColumns {
    fn open(segment: &SegmentReader, key: &SortKey) -> tantivy::Result<KeyColumns> {
        let mut columns = KeyColumns {
            descending: key.descending,
            bools: Vec::new(),
            numbers: Vec::new(),
            strings: None,
            seen: None,
        };
        for handle in segment
            .fast_fields()
            .dynamic_column_handles(&column_name(&key.path))?
        {
            match handle.open()? {
                DynamicColumn::Bool(c) => columns.bools.push(c),
                DynamicColumn::I64(c) => columns.numbers.push(NumberColumn::I64(c)),
                DynamicColumn::U64(c) => columns.numbers.push(NumberColumn::U64(c)),
                DynamicColumn::F64(c) => columns.numbers.push(NumberColumn::F64(c)),
                DynamicColumn::Str(c) => columns.strings = Some(c),
                // The sort field is only given booleans, numbers and strings.
                _ => {}
            }
        }
        Ok(columns)
    }

    /// The value of `doc` here, oriented; `Err` names two types found in the one document.
    fn value(&self, doc: DocId) -> Result<Oriented, (u8, u8)> {
        let better = |a: Oriented, b: Oriented| {
            if b.compare(&a).is_lt() { b } else { a }
        };
        let mut found = Oriented::Missing;
        let mut take = |value: Oriented| {
            if matches!(found, Oriented::Missing) {
                found = value;
                Ok(())
            } else if found.rank() != value.rank() {
                Err((found.rank(), value.rank()))
            } else {
                found = better(found, value);
                Ok(())
            }
        };
        let desc = self.descending;
        for column in &self.bools {
            for b in column.values_for_doc(doc) {
                take(Oriented::Bool(b != desc))?;
            }
        }
        for column in &self.numbers {
            let values: Box<dyn Iterator<Item = f64> + '_> = match column {
                NumberColumn::I64(c) => Box::new(c.values_for_doc(doc).map(|v| v as f64)),
                NumberColumn::U64(c) => Box::new(c.values_for_doc(doc).map(|v| v as f64)),
                NumberColumn::F64(c) => Box::new(c.values_for_doc(doc)),
            };
            for n in values {
                take(Oriented::Number(if desc { -n } else { n }))?;
            }
        }
        if let Some(strings) = &self.strings {
            for ord in strings.term_ords(doc) {
                take(Oriented::Ordinal(if desc { !ord } else { ord }))?;
            }
        }
        Ok(found)
    }

    /// The value as shards exchange it.
    fn read_back(&self, value: Oriented) -> SortValue {
        let desc = self.descending;
        match value {
            Oriented::Bool(b) => SortValue::Bool(b != desc),
            Oriented::Number(n) => SortValue::Number(if desc { -n } else { n }),
            Oriented::Ordinal(ord) => {
                let ord = if desc { !ord } else { ord };
                let mut text = String::new();
                match &self.strings {
                    Some(strings) if strings.ord_to_str(ord, &mut text).unwrap_or(false) => {
                        SortValue::Text(text)
                    }
                    _ => SortValue::Missing,
                }
            }
            Oriented::Missing => SortValue::Missing,
        }
    }
}

/// The name of a type of value by its rank (see [`Oriented::rank`]), for an error.
fn kind_name(rank: u8) -> &'static str {
    match rank {
        0 => "booleans",
        1 => "numbers",
        _ => "strings",
    }
}

pub(crate) struct SegmentSorted {
    segment: SegmentOrdinal,
    keys: Vec<SortKey>,
    columns: Vec<KeyColumns>,
    key_column: Option<BytesColumn>,
    want: usize,
    heap: BinaryHeap<Kept>,
    /// Set when the matches hold two types under one key: (key, type, type).
    mixed: Option<(usize, u8, u8)>,
}

/// A segment's or the searcher's best matches, or the refusal of a field of two types.
pub(crate) type Sorted = Result<Vec<SortedMatch>, String>;

impl Collector for TopMatches {
    type Fruit = Sorted;
    type Child = SegmentSorted;

    fn for_segment(
        &self,
        ordinal: SegmentOrdinal,
        segment: &SegmentReader,
    ) -> tantivy::Result<SegmentSorted> {
        let columns = self
            .keys
            .iter()
            .map(|key| KeyColumns::open(segment, key))
            .collect::<tantivy::Result<Vec<_>>>()?;
        Ok(SegmentSorted {
            segment: ordinal,
            keys: self.keys.clone(),
            columns,
            key_column: segment.fast_fields().bytes("key")?,
            want: self.want,
            heap: BinaryHeap::with_capacity(self.want.min(1024) + 1),
            mixed: None,
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Sorted>) -> tantivy::Result<Sorted> {
        let mut out = Vec::new();
        for fruit in fruits {
            match fruit {
                Ok(matches) => out.extend(matches),
                Err(refusal) => return Ok(Err(refusal)),
            }
        }
        Ok(Ok(out))
    }
}

impl SegmentCollector for SegmentSorted {
    type Fruit = Sorted;

    fn collect(&mut self, doc: DocId, score: Score) {
        if self.want == 0 || self.mixed.is_some() {
            return;
        }
        let mut values = Vec::with_capacity(self.columns.len().max(1));
        if self.columns.is_empty() {
            // By relevance: the highest score is the smallest value.
            values.push(Oriented::Number(-f64::from(score)));
        }
        for (n, columns) in self.columns.iter_mut().enumerate() {
            let value = match columns.value(doc) {
                Ok(value) => value,
                Err((a, b)) => {
                    self.mixed = Some((n, a, b));
                    return;
                }
            };
            if !matches!(value, Oriented::Missing) {
                match columns.seen {
                    None => columns.seen = Some(value.rank()),
                    Some(seen) if seen != value.rank() => {
                        self.mixed = Some((n, seen, value.rank()));
                        return;
                    }
                    Some(_) => {}
                }
            }
            values.push(value);
        }
        let Some(key_ord) = self
            .key_column
            .as_ref()
            .and_then(|k| k.term_ords(doc).next())
        else {
            return;
        };
        let candidate = Kept {
            values,
            key_ord,
            score,
            doc,
        };
        if self.heap.len() < self.want {
            self.heap.push(candidate);
        } else if self.heap.peek().is_some_and(|worst| candidate < *worst) {
            self.heap.pop();
            self.heap.push(candidate);
        }
    }

    fn harvest(self) -> Self::Fruit {
        if let Some((n, a, b)) = self.mixed {
            return Err(mixed(&self.keys[n], kind_name(a), kind_name(b)).to_string());
        }
        Ok(self
            .heap
            .into_sorted_vec()
            .into_iter()
            .map(|kept| SortedMatch {
                values: kept
                    .values
                    .iter()
                    .zip(&self.columns)
                    .map(|(value, columns)| columns.read_back(*value))
                    .collect(),
                score: kept.score,
                address: DocAddress::new(self.segment, kept.doc),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str, descending: bool) -> SortKey {
        SortKey {
            path: path.split('.').map(str::to_owned).collect(),
            descending,
        }
    }

    #[test]
    fn sort_parameters_read_as_users_write_them() {
        assert_eq!(
            parse_sort("value.name:desc, age").unwrap(),
            vec![key("name", true), key("age", false)]
        );
        assert_eq!(parse_sort("a.b:ASC").unwrap(), vec![key("a.b", false)]);
        let deep = vec!["a"; MAX_SORT_PATH_PARTS + 1].join(".");
        for bad in [
            "",
            "name:up",
            "a..b",
            "na*me",
            ",",
            "a,b,c,d,e",
            "x\0",
            "x\ty",
            &deep,
        ] {
            let err = parse_sort(bad).unwrap_err();
            assert!(matches!(err, SearchError::Refused(_)), "{bad:?}: {err}");
        }
    }

    #[test]
    fn missing_values_come_last_both_ways() {
        let n = |x: f64| vec![SortValue::Number(x)];
        let none = vec![SortValue::Missing];
        for descending in [false, true] {
            let keys = [key("x", descending)];
            assert_eq!(compare_sort_values(&n(1.0), &none, &keys), Ordering::Less);
            assert_eq!(
                compare_sort_values(&none, &n(1.0), &keys),
                Ordering::Greater
            );
        }
        assert_eq!(
            compare_sort_values(&n(1.0), &n(2.0), &[key("x", true)]),
            Ordering::Greater
        );
    }

    #[test]
    fn two_types_under_one_field_are_refused() {
        let rows = [
            vec![SortValue::Number(1.0)],
            vec![SortValue::Missing],
            vec![SortValue::Text("a".into())],
        ];
        let err = check_one_type(rows.iter().map(Vec::as_slice), &[key("x", false)]).unwrap_err();
        assert!(err.to_string().contains("numbers and strings"), "{err}");
    }

    #[test]
    fn long_strings_are_cut_after_the_character_at_the_limit() {
        let text = format!("x{}", "é".repeat(SORT_STRING_BYTES));
        let cut = sort_text(&text);
        assert_eq!(
            cut.len(),
            SORT_STRING_BYTES + 1,
            "to the end of the é the limit cuts"
        );
        assert_eq!(sort_text("short"), "short");
        // Cut strings still compare as the whole strings do where they differ early.
        let a = format!("{}é", "x".repeat(SORT_STRING_BYTES - 1));
        let b = format!("{}a", "x".repeat(SORT_STRING_BYTES - 1));
        assert_eq!(sort_text(&b).cmp(sort_text(&a)), b.cmp(&a));
    }
}
