//! A parsed [`Query`] as a tantivy query over a shard's index (see [`crate::index`] for the
//! fields). Each construct keeps the meaning [`crate::matches`] gives it; the two are tested
//! against each other.
//!
//! The document is one JSON field: a term there is the path, a type code and the value, so a
//! test of one field is a test of the terms under that path, one type at a time. Ranges and
//! "any value" are ranges of such terms in the term dictionary; wildcards are a regular
//! expression over them, anchored to the path.

use crate::ast::{IndexNumber, RangeKind, Test, parse_date, parse_number, words};
use crate::index::{Fields, date_at};
use crate::{FieldPath, Query};
use std::ops::Bound;
use tantivy::query::{
    AllQuery, BooleanQuery, BoostQuery, EmptyQuery, FuzzyTermQuery, InvertedIndexRangeQuery, Occur,
    PhraseQuery, Query as TantivyQuery, RegexQuery, TermQuery,
};
use tantivy::schema::{Field, IndexRecordOption, Type};
use tantivy::{DateTime, Term};

type Boxed = Box<dyn TantivyQuery>;

/// `query` as a tantivy query on the index whose fields are `fields`; `string_paths` are the
/// paths that hold strings, which a test without a field asks.
pub(crate) fn compile(query: &Query, fields: &Fields, string_paths: &[FieldPath]) -> Boxed {
    match query {
        Query::All => Box::new(AllQuery),
        Query::And(parts) => {
            let mut clauses: Vec<(Occur, Boxed)> = Vec::with_capacity(parts.len() + 1);
            for part in parts {
                match part {
                    Query::Not(inner) => {
                        clauses.push((Occur::MustNot, compile(inner, fields, string_paths)))
                    }
                    other => clauses.push((Occur::Must, compile(other, fields, string_paths))),
                }
            }
            if clauses.iter().all(|(occur, _)| *occur == Occur::MustNot) {
                clauses.push((Occur::Must, Box::new(AllQuery)));
            }
            Box::new(BooleanQuery::new(clauses))
        }
        Query::Or(parts) => Box::new(BooleanQuery::new(
            parts
                .iter()
                .map(|p| (Occur::Should, compile(p, fields, string_paths)))
                .collect(),
        )),
        Query::Not(inner) => Box::new(BooleanQuery::new(vec![
            (Occur::Must, Box::new(AllQuery) as Boxed),
            (Occur::MustNot, compile(inner, fields, string_paths)),
        ])),
        Query::Boosted(inner, boost) => Box::new(BoostQuery::new(
            compile(inner, fields, string_paths),
            *boost,
        )),
        Query::Leaf { field, test, boost } => {
            let leaf = match field {
                Some(path) => field_test(path, test, fields.doc),
                None if matches!(test, Test::Wildcard(_)) => match test {
                    Test::Wildcard(pattern) => any_path_wildcard(fields.doc, pattern),
                    _ => Box::new(EmptyQuery),
                },
                None => any_of(
                    string_paths
                        .iter()
                        .map(|path| string_test(path, test, fields.doc))
                        .collect(),
                ),
            };
            match boost {
                Some(b) => Box::new(BoostQuery::new(leaf, *b)),
                None => leaf,
            }
        }
    }
}

/// The tantivy spelling of a path: dots between parts, dots and backslashes in a part
/// escaped.
fn path_text(path: &FieldPath) -> String {
    let mut out = String::new();
    for (i, part) in path.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        for c in part.chars() {
            if c == '.' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// A term at `path` with no value yet: the path and its end marker.
fn path_term(doc: Field, path: &FieldPath) -> Term {
    Term::from_field_json_path(doc, &path_text(path), false)
}

fn str_term(doc: Field, path: &FieldPath, word: &str) -> Term {
    let mut term = path_term(doc, path);
    term.append_type_and_str(word);
    term
}

/// Words next to each other in one string: a term for one, a phrase for more.
fn words_query(terms: Vec<Term>) -> Boxed {
    match terms.len() {
        0 => Box::new(EmptyQuery),
        1 => Box::new(TermQuery::new(
            terms.into_iter().next().expect("one term"),
            IndexRecordOption::WithFreqs,
        )),
        _ => Box::new(PhraseQuery::new(terms)),
    }
}

fn any_of(mut queries: Vec<Boxed>) -> Boxed {
    match queries.len() {
        0 => Box::new(EmptyQuery),
        1 => queries.pop().expect("one query"),
        _ => Box::new(BooleanQuery::new(
            queries.into_iter().map(|q| (Occur::Should, q)).collect(),
        )),
    }
}

fn field_test(path: &FieldPath, test: &Test, doc: Field) -> Boxed {
    match test {
        Test::Term(text) => {
            let mut options = vec![words_query(
                words(text).map(|w| str_term(doc, path, &w)).collect(),
            )];
            if let Some(n) = IndexNumber::parse(text) {
                let term = number_term(doc, path, n);
                options.push(Box::new(TermQuery::new(term, IndexRecordOption::Basic)));
            }
            match text.trim().to_lowercase().as_str() {
                "true" | "false" => {
                    let mut term = path_term(doc, path);
                    term.append_type_and_fast_value(text.trim().eq_ignore_ascii_case("true"));
                    options.push(Box::new(TermQuery::new(term, IndexRecordOption::Basic)));
                }
                _ => {}
            }
            any_of(options)
        }
        Test::Phrase(text) => words_query(words(text).map(|w| str_term(doc, path, &w)).collect()),
        Test::Wildcard(pattern) => {
            let prefix = str_term(doc, path, "");
            regex_query(doc, prefix.serialized_value_bytes(), pattern)
        }
        Test::Fuzzy { term, edits } => Box::new(FuzzyTermQuery::new(
            str_term(doc, path, &term.to_lowercase()),
            *edits,
            true,
        )),
        Test::Exists => {
            // Every term at the path (end marker 0) or below it (separator 1).
            let at = path_term(doc, path);
            let mut below = at.serialized_value_bytes().to_vec();
            if let Some(last) = below.last_mut() {
                *last = 2;
            }
            Box::new(InvertedIndexRangeQuery::new(
                Bound::Included(at),
                Bound::Excluded(Term::from_field_bytes(doc, &below)),
            ))
        }
        Test::Range { kind, lower, upper } => range_query(doc, path, *kind, lower, upper),
    }
}

/// `test` as a test of the strings at `path` only (a test without a field looks at strings
/// alone: `42` there is a word, not a number).
fn string_test(path: &FieldPath, test: &Test, doc: Field) -> Boxed {
    match test {
        Test::Term(text) | Test::Phrase(text) => {
            words_query(words(text).map(|w| str_term(doc, path, &w)).collect())
        }
        Test::Exists => range_query(
            doc,
            path,
            RangeKind::Word,
            &Bound::Unbounded,
            &Bound::Unbounded,
        ),
        // The parser gives ranges a field.
        Test::Range { .. } => Box::new(EmptyQuery),
        other => field_test(path, other, doc),
    }
}

/// Most wildcard and fuzzy tests one query may hold: each walks a word list with an automaton.
const MAX_COSTLY_LEAVES: usize = 16;

/// Refuses a parsed query whose automatons would cost too much: more than
/// [`MAX_COSTLY_LEAVES`] wildcard or fuzzy tests, or a wildcard pattern whose automaton passes
/// tantivy's state limit (checked with room for a long path before it), which the index could
/// otherwise only answer with nothing.
pub(crate) fn check_cost(query: &Query) -> Result<(), String> {
    fn walk(query: &Query, costly: &mut usize) -> Result<(), String> {
        match query {
            Query::And(parts) | Query::Or(parts) => parts.iter().try_for_each(|p| walk(p, costly)),
            Query::Not(inner) | Query::Boosted(inner, _) => walk(inner, costly),
            Query::All => Ok(()),
            Query::Leaf { test, .. } => match test {
                Test::Fuzzy { .. } => {
                    *costly += 1;
                    Ok(())
                }
                Test::Wildcard(pattern) => {
                    *costly += 1;
                    let headroom = [b'p'; 64];
                    RegexQuery::from_pattern(&wildcard_regex(&headroom, pattern), Field::from_field_id(0))
                        .map(drop)
                        .map_err(|_| {
                            format!("the wildcard pattern {pattern:?} is too complex (too many * and ? near each other)")
                        })
                }
                _ => Ok(()),
            },
        }
    }
    let mut costly = 0;
    walk(query, &mut costly)?;
    if costly > MAX_COSTLY_LEAVES {
        return Err(format!(
            "{costly} wildcard and fuzzy terms; at most {MAX_COSTLY_LEAVES} in one query"
        ));
    }
    Ok(())
}

/// The terms of `field` that are `prefix` followed by a word matching `pattern` (`*` any
/// run, `?` one character).
fn regex_query(field: Field, prefix: &[u8], pattern: &str) -> Boxed {
    match RegexQuery::from_pattern(&wildcard_regex(prefix, pattern), field) {
        Ok(q) => Box::new(q),
        // The parser checked the pattern with room for a long path; a path longer still
        // could tip it over.
        Err(_) => Box::new(EmptyQuery),
    }
}

/// The regular expression of [`regex_query`].
fn wildcard_regex(prefix: &[u8], pattern: &str) -> String {
    let mut regex = String::new();
    for &byte in prefix {
        // The path's bytes are UTF-8 text with control bytes between parts.
        if byte.is_ascii_alphanumeric() {
            regex.push(byte as char);
        } else if byte.is_ascii() {
            regex.push_str(&format!("\\x{byte:02x}"));
        } else {
            regex.clear();
            break;
        }
    }
    if regex.is_empty() && !prefix.is_empty() {
        // A non-ASCII path: escape it as characters instead.
        for c in String::from_utf8_lossy(prefix).chars() {
            push_literal(&mut regex, c);
        }
    }
    push_pattern(&mut regex, pattern);
    regex
}

fn push_pattern(regex: &mut String, pattern: &str) {
    for c in pattern.chars() {
        match c {
            '*' => regex.push_str(".*"),
            '?' => regex.push('.'),
            c => push_literal(regex, c),
        }
    }
}

/// A wildcard without a field: a word of any path matching `pattern`, as one automaton over
/// the whole JSON field (any path bytes, the end of the path, the string type, the word).
fn any_path_wildcard(doc: Field, pattern: &str) -> Boxed {
    let mut regex = format!("[^\\x00]*\\x00\\x{:02x}", Type::Str.to_code());
    push_pattern(&mut regex, pattern);
    match RegexQuery::from_pattern(&regex, doc) {
        Ok(q) => Box::new(q),
        Err(_) => Box::new(EmptyQuery),
    }
}

fn push_literal(regex: &mut String, c: char) {
    if c.is_alphanumeric() {
        regex.push(c);
    } else {
        regex.push_str(&format!("\\x{{{:x}}}", c as u32));
    }
}

/// The term under which the index holds the number `n` at `path`.
fn number_term(doc: Field, path: &FieldPath, n: IndexNumber) -> Term {
    let mut term = path_term(doc, path);
    match n {
        IndexNumber::Whole(whole) => match i64::try_from(whole) {
            Ok(signed) => term.append_type_and_fast_value(signed),
            // Within u64 by construction.
            Err(_) => term.append_type_and_fast_value(u64::try_from(whole).unwrap_or(u64::MAX)),
        },
        IndexNumber::Float(float) => term.append_type_and_fast_value(float),
    }
    term
}

fn range_query(
    doc: Field,
    path: &FieldPath,
    kind: RangeKind,
    lower: &Bound<String>,
    upper: &Bound<String>,
) -> Boxed {
    let typed = |make: &dyn Fn(&mut Term)| {
        let mut term = path_term(doc, path);
        make(&mut term);
        term
    };
    match kind {
        RangeKind::Word => {
            let bound = |b: &Bound<String>, open: Bound<Term>| match b {
                Bound::Included(t) => Bound::Included(str_term(doc, path, &t.to_lowercase())),
                Bound::Excluded(t) => Bound::Excluded(str_term(doc, path, &t.to_lowercase())),
                Bound::Unbounded => open,
            };
            // Every string term of the path lies between its type code and the next one.
            let mut past = path_term(doc, path).serialized_value_bytes().to_vec();
            past.push(Type::Str.to_code() + 1);
            Box::new(InvertedIndexRangeQuery::new(
                bound(lower, Bound::Included(str_term(doc, path, ""))),
                bound(upper, Bound::Excluded(Term::from_field_bytes(doc, &past))),
            ))
        }
        RangeKind::Date => {
            let secs = |t: &String| parse_date(t).map(|(s, _)| s);
            let at = |b: &Bound<String>, open: DateTime| match b {
                Bound::Included(t) => secs(t).map(|s| Bound::Included(date_at(s))),
                Bound::Excluded(t) => secs(t).map(|s| Bound::Excluded(date_at(s))),
                Bound::Unbounded => Some(Bound::Included(open)),
            };
            let (Some(low), Some(high)) = (
                at(lower, DateTime::from_timestamp_nanos(i64::MIN)),
                at(upper, DateTime::from_timestamp_nanos(i64::MAX)),
            ) else {
                return Box::new(EmptyQuery);
            };
            let term = |d: DateTime| typed(&|t: &mut Term| t.append_type_and_fast_value(d));
            Box::new(InvertedIndexRangeQuery::new(
                map_bound(low, term),
                map_bound(high, term),
            ))
        }
        RangeKind::Number => {
            let num = |b: &Bound<String>| match b {
                Bound::Included(t) => parse_number(t).map(Bound::Included),
                Bound::Excluded(t) => parse_number(t).map(Bound::Excluded),
                Bound::Unbounded => Some(Bound::Unbounded),
            };
            let (Some(low), Some(high)) = (num(lower), num(upper)) else {
                return Box::new(EmptyQuery);
            };
            let mut parts: Vec<Boxed> = Vec::new();
            // Floats: whatever is not a whole number the integers hold.
            let f = |b: Bound<f64>, open: f64| match b {
                Bound::Unbounded => Bound::Included(open),
                other => other,
            };
            let (fl, fh) = (f(low, f64::NEG_INFINITY), f(high, f64::INFINITY));
            parts.push(Box::new(InvertedIndexRangeQuery::new(
                map_bound(fl, |v| {
                    typed(&|t: &mut Term| t.append_type_and_fast_value(v))
                }),
                map_bound(fh, |v| {
                    typed(&|t: &mut Term| t.append_type_and_fast_value(v))
                }),
            )));
            if let Some((a, b)) = whole_range(low, high, i64::MIN as f64, i64::MAX as f64) {
                let (a, b) = (a as i64, b as i64);
                parts.push(Box::new(InvertedIndexRangeQuery::new(
                    Bound::Included(typed(&|t: &mut Term| t.append_type_and_fast_value(a))),
                    Bound::Included(typed(&|t: &mut Term| t.append_type_and_fast_value(b))),
                )));
            }
            if let Some((a, b)) = whole_range(low, high, 0.0, u64::MAX as f64) {
                let (a, b) = (a as u64, b as u64);
                parts.push(Box::new(InvertedIndexRangeQuery::new(
                    Bound::Included(typed(&|t: &mut Term| t.append_type_and_fast_value(a))),
                    Bound::Included(typed(&|t: &mut Term| t.append_type_and_fast_value(b))),
                )));
            }
            any_of(parts)
        }
    }
}

fn map_bound<T, U>(b: Bound<T>, f: impl Fn(T) -> U) -> Bound<U> {
    match b {
        Bound::Included(v) => Bound::Included(f(v)),
        Bound::Excluded(v) => Bound::Excluded(f(v)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The whole numbers within `low..high`, clamped to `min..=max`, as an inclusive pair of
/// floats; `None` when there are none.
fn whole_range(low: Bound<f64>, high: Bound<f64>, min: f64, max: f64) -> Option<(f64, f64)> {
    let a = match low {
        Bound::Unbounded => min,
        Bound::Included(x) => x.ceil(),
        Bound::Excluded(x) if x.fract() == 0.0 => x + 1.0,
        Bound::Excluded(x) => x.ceil(),
    }
    .max(min);
    let b = match high {
        Bound::Unbounded => max,
        Bound::Included(x) => x.floor(),
        Bound::Excluded(x) if x.fract() == 0.0 => x - 1.0,
        Bound::Excluded(x) => x.floor(),
    }
    .min(max);
    (a <= b).then_some((a, b))
}
