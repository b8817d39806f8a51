//! The query language of document search (`GET /v0/{collection}?query=...`): a small subset
//! of Lucene's, evaluated against one JSON document at a time.
//!
//! There is no index: a search reads every document of the collection on every shard and
//! keeps those this module says match, so its cost grows with the collection, not with the
//! number of matches. Keeping the matcher a pure function over [`serde_json::Value`] lets the
//! shard that holds the rows run it, so only matches cross the peer link.
//!
//! The language:
//! - `*` matches every document;
//! - otherwise whitespace-separated clauses, all of which must match (a literal `AND` between
//!   them is accepted and ignored); `-clause` must not match;
//! - `field:term` looks at the value at `field`, a dotted path into the object
//!   (`address.city`; arrays on the way or at the end match when any element does);
//!   a bare `term` looks at every string anywhere in the document;
//! - a term matches a string when it equals one of its words (lowercased, split on anything
//!   not a letter or digit) or the whole string, ignoring case; a number or a boolean when it
//!   equals its JSON text (`n:42`, `active:true`);
//! - `term*` matches by prefix (of a word or of the whole value; `field:*` matches any value);
//! - `"a phrase"` matches a string containing those words next to each other, in order.
//!
//! Not supported, and refused with a message rather than misread: `OR`, `NOT` (write
//! `-clause`), parentheses, escapes, ranges, fuzzy and proximity operators.

use crate::ClusterError;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;
use trireme_types::{ErrorCode, TriremeError};

/// A parsed query, ready to be matched against documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    clauses: Vec<Clause>,
    /// The top-level fields the clauses look at, or `None` when a bare term needs every
    /// string of the document.
    fields: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Clause {
    negated: bool,
    /// The dotted path split at the dots; `None` for a bare term (any string anywhere).
    field: Option<Vec<String>>,
    term: Term,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    /// `*`: every document.
    All,
    /// A word or a whole value, lowercased.
    Exact(String),
    /// The text before a trailing `*`, lowercased.
    Prefix(String),
    /// The words of a quoted phrase, lowercased; never empty.
    Phrase(Vec<String>),
}

fn bad(query: &str, problem: impl std::fmt::Display) -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::InvalidArgument,
        format!("query {query:?}: {problem}"),
    ))
}

/// The lowercased words of `text`: runs of letters and digits.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl SearchQuery {
    /// Parses `text`; a syntax error is an `invalid_argument` naming the problem.
    pub fn parse(text: &str) -> Result<Self, ClusterError> {
        let mut clauses = Vec::new();
        for token in tokens(text).map_err(|p| bad(text, p))? {
            if token == "AND" {
                continue;
            }
            clauses.push(clause(&token).map_err(|p| bad(text, p))?);
        }
        if clauses.is_empty() {
            return Err(bad(
                text,
                "the query is empty (use * to match every document)",
            ));
        }
        let mut fields = Some(Vec::new());
        for clause in &clauses {
            match (&clause.field, &clause.term, fields.as_mut()) {
                (_, Term::All, _) | (_, _, None) => {}
                (None, _, Some(_)) => fields = None,
                (Some(path), _, Some(names)) => {
                    if !names.contains(&path[0]) {
                        names.push(path[0].clone());
                    }
                }
            }
        }
        Ok(Self { clauses, fields })
    }

    /// Whether the JSON text `doc` is a document that matches. Only the top-level fields the
    /// query names become values; the rest is checked and skipped without being built, which
    /// is most of a document when a query names a field or two. (A search runs this on every
    /// document of a collection.)
    pub fn matches_json(&self, doc: &[u8]) -> bool {
        let Some(fields) = &self.fields else {
            return serde_json::from_slice::<Value>(doc).is_ok_and(|v| self.matches(&v));
        };
        let mut de = serde_json::Deserializer::from_slice(doc);
        match PartialDoc(fields).deserialize(&mut de) {
            Ok(Some(map)) if de.end().is_ok() => self.matches(&Value::Object(map)),
            _ => false,
        }
    }

    /// Whether `doc` matches. Only JSON objects are documents: anything else never matches.
    pub fn matches(&self, doc: &Value) -> bool {
        doc.is_object() && self.clauses.iter().all(|c| c.matches(doc) != c.negated)
    }
}

/// Splits a query at whitespace outside quotes; a quote left open is an error.
fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        if c == '"' {
            quoted = !quoted;
        }
        if c.is_whitespace() && !quoted {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if quoted {
        return Err("unbalanced quote: a phrase is opened and never closed".into());
    }
    if !current.is_empty() {
        out.push(current);
    }
    Ok(out)
}

fn clause(token: &str) -> Result<Clause, String> {
    match token {
        "OR" => return Err("OR is not supported: clauses are all required (AND)".into()),
        "NOT" => return Err("NOT is not supported: prefix the clause with - instead".into()),
        _ => {}
    }
    let (negated, rest) = match token.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    if rest.is_empty() {
        return Err("a lone - negates nothing".into());
    }
    if rest.contains(['(', ')']) && !rest.contains('"') {
        return Err(format!(
            "{token:?}: parentheses (grouping) are not supported"
        ));
    }
    if rest == "*" {
        return Ok(Clause {
            negated,
            field: None,
            term: Term::All,
        });
    }
    // The field ends at the first colon that comes before any quote.
    let colon = rest.find(':').filter(|&at| !rest[..at].contains('"'));
    let (field, term) = match colon {
        Some(at) => {
            let field = &rest[..at];
            if field.is_empty() {
                return Err(format!("{token:?}: empty field name before ':'"));
            }
            let path: Vec<String> = field.split('.').map(str::to_owned).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!("{token:?}: empty part in the field path {field:?}"));
            }
            if field.contains('*') {
                return Err(format!("{token:?}: a * in a field name is not supported"));
            }
            (Some(path), &rest[at + 1..])
        }
        None => (None, rest),
    };
    if term.is_empty() {
        return Err(format!("{token:?}: empty term after ':'"));
    }
    Ok(Clause {
        negated,
        field,
        term: parse_term(token, term)?,
    })
}

fn parse_term(token: &str, term: &str) -> Result<Term, String> {
    if let Some(inner) = term.strip_prefix('"') {
        let Some(inner) = inner.strip_suffix('"') else {
            return Err(format!(
                "{token:?}: text after the closing quote of a phrase"
            ));
        };
        if inner.contains('"') {
            return Err(format!("{token:?}: a quote inside a phrase"));
        }
        let phrase: Vec<String> = words(inner).collect();
        if phrase.is_empty() {
            return Err(format!("{token:?}: the phrase has no words"));
        }
        return Ok(Term::Phrase(phrase));
    }
    if term.contains('"') {
        return Err(format!(
            "{token:?}: a quote may only open a phrase term (\"...\")"
        ));
    }
    let lowered = term.to_lowercase();
    match lowered.strip_suffix('*') {
        Some(prefix) if prefix.contains('*') => Err(format!(
            "{token:?}: only a trailing * (prefix) is supported"
        )),
        Some(prefix) => Ok(Term::Prefix(prefix.to_owned())),
        None if lowered.contains('*') => Err(format!(
            "{token:?}: only a trailing * (prefix) is supported"
        )),
        None => Ok(Term::Exact(lowered)),
    }
}

impl Clause {
    fn matches(&self, doc: &Value) -> bool {
        match (&self.term, &self.field) {
            (Term::All, _) => true,
            (term, Some(path)) => at_path(doc, path, &mut |v| term.matches_value(v)),
            (term, None) => any_string(doc, &mut |s| term.matches_str(s)),
        }
    }
}

impl Term {
    /// Against a value a field names: strings by words, numbers and booleans by their text.
    fn matches_value(&self, value: &Value) -> bool {
        match value {
            Value::String(s) => self.matches_str(s),
            Value::Number(n) => self.matches_text(&n.to_string()),
            Value::Bool(b) => self.matches_text(if *b { "true" } else { "false" }),
            Value::Array(items) => items.iter().any(|v| self.matches_value(v)),
            Value::Null | Value::Object(_) => false,
        }
    }

    /// A number's or a boolean's JSON text: one word, and the whole value.
    fn matches_text(&self, text: &str) -> bool {
        match self {
            Term::All => true,
            Term::Exact(t) => t == text,
            Term::Prefix(p) => text.starts_with(p.as_str()),
            Term::Phrase(words) => words.len() == 1 && words[0] == text,
        }
    }

    fn matches_str(&self, s: &str) -> bool {
        match self {
            Term::All => true,
            Term::Exact(t) => words(s).any(|w| w == *t) || s.to_lowercase() == *t,
            Term::Prefix(p) => {
                words(s).any(|w| w.starts_with(p.as_str())) || s.to_lowercase().starts_with(p)
            }
            Term::Phrase(phrase) => {
                let have: Vec<String> = words(s).collect();
                have.windows(phrase.len()).any(|w| w == phrase.as_slice())
            }
        }
    }
}

/// Calls `hit` on the value(s) at `path` until it says yes; arrays on the way fan out.
fn at_path(value: &Value, path: &[String], hit: &mut dyn FnMut(&Value) -> bool) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return hit(value);
    };
    match value {
        Value::Object(map) => map.get(first).is_some_and(|v| at_path(v, rest, hit)),
        Value::Array(items) => items.iter().any(|v| at_path(v, path, hit)),
        _ => false,
    }
}

/// Calls `hit` on every string in `value`, at any depth, until it says yes.
fn any_string(value: &Value, hit: &mut dyn FnMut(&str) -> bool) -> bool {
    match value {
        Value::String(s) => hit(s),
        Value::Array(items) => items.iter().any(|v| any_string(v, hit)),
        Value::Object(map) => map.values().any(|v| any_string(v, hit)),
        _ => false,
    }
}

/// Reads a JSON object keeping only the named fields; anything else is `None`.
struct PartialDoc<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for PartialDoc<'_> {
    type Value = Option<Map<String, Value>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PartialDoc<'_> {
    type Value = Option<Map<String, Value>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = Map::new();
        while let Some(found) = map.next_key_seed(FieldName(self.0))? {
            match found {
                Some(i) => {
                    kept.insert(self.0[i].clone(), map.next_value::<Value>()?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(kept))
    }
}

/// A key of the object: the index of the wanted field it names, compared without a copy.
struct FieldName<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for FieldName<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FieldName<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|f| f == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alice() -> Value {
        json!({
            "name": "Alice Liddell",
            "age": 42,
            "active": true,
            "group": "g7",
            "bio": "Fell down a rabbit-hole; met the Cheshire Cat.",
            "address": {"city": "Oxford", "zip": "OX1"},
            "tags": ["Reader", "dreamer"],
            "pets": [{"kind": "cat", "name": "Dinah"}],
        })
    }

    fn hits(query: &str) -> bool {
        SearchQuery::parse(query)
            .unwrap_or_else(|e| panic!("{query}: {e}"))
            .matches(&alice())
    }

    fn error(query: &str) -> String {
        match SearchQuery::parse(query) {
            Ok(q) => panic!("{query:?} parsed as {q:?}"),
            Err(e) => {
                let e = e.to_client();
                assert_eq!(e.code, ErrorCode::InvalidArgument, "{query}");
                e.message
            }
        }
    }

    #[test]
    fn star_matches_every_object_and_nothing_else() {
        let all = SearchQuery::parse("*").unwrap();
        assert!(all.matches(&alice()));
        assert!(all.matches(&json!({})));
        assert!(!all.matches(&json!([1, 2])));
        assert!(!all.matches(&json!("text")));
    }

    #[test]
    fn field_terms_match_words_whole_values_numbers_and_booleans() {
        assert!(hits("name:alice"));
        assert!(hits("name:LIDDELL"));
        assert!(!hits("name:bob"));
        assert!(hits("group:g7"));
        assert!(!hits("group:g70"));
        assert!(!hits("group:g"));
        assert!(hits("age:42"));
        assert!(!hits("age:4"));
        assert!(hits("active:true"));
        assert!(!hits("active:false"));
        assert!(hits("address.city:oxford"));
        assert!(!hits("address:oxford"), "an object is not a value");
        assert!(!hits("city:oxford"), "paths start at the top");
        assert!(hits("tags:reader"), "any element of an array");
        assert!(hits("pets.name:dinah"), "arrays fan out on the way");
        assert!(!hits("missing:alice"));
    }

    #[test]
    fn prefixes_phrases_and_bare_terms() {
        assert!(hits("name:lid*"));
        assert!(hits("name:ALI*"));
        assert!(!hits("name:bo*"));
        assert!(hits("age:4*"));
        assert!(hits("address.zip:*"), "field:* is any value");
        assert!(!hits("nothing:*"));
        assert!(hits(r#"bio:"rabbit hole""#));
        assert!(hits(r#"bio:"the cheshire cat""#));
        assert!(!hits(r#"bio:"cat cheshire""#), "order matters");
        assert!(!hits(r#"bio:"rabbit cat""#), "words must be adjacent");
        assert!(hits("cheshire"), "a bare term looks at every string");
        assert!(hits("dinah"), "nested in arrays of objects too");
        assert!(hits("oxf*"));
        assert!(hits(r#""alice liddell""#));
        assert!(!hits("42"), "bare terms look at strings only");
        assert!(!hits("zebra"));
    }

    #[test]
    fn clauses_are_anded_and_dash_negates() {
        assert!(hits("name:alice group:g7"));
        assert!(hits("name:alice AND group:g7"));
        assert!(!hits("name:alice group:g8"));
        assert!(hits("name:alice -group:g8"));
        assert!(!hits("name:alice -group:g7"));
        assert!(!hits("-cheshire"));
        assert!(hits("-zebra"));
        assert!(hits("  *   "));
        assert!(!hits("* -name:alice"));
    }

    #[test]
    fn matching_json_text_agrees_with_matching_the_parsed_document() {
        let docs = [
            alice(),
            json!({"group": "g7", "group2": {"x": 1}, "name": "Bob", "n": 7}),
            json!({"name": {"first": "Alice"}, "tags": [], "bio": null}),
            json!({}),
        ];
        let queries = [
            "*",
            "group:g7",
            "name:alice",
            "name.first:alice",
            "-group:g7",
            "address.city:oxford n:7",
            "alice",
            "group:g7 -cheshire",
            "tags:*",
            "pets.kind:cat",
        ];
        for query in queries {
            let q = SearchQuery::parse(query).unwrap();
            for doc in &docs {
                let text = serde_json::to_vec(doc).unwrap();
                assert_eq!(q.matches_json(&text), q.matches(doc), "{query} on {doc}");
            }
            for not_a_document in [
                &b"[1]"[..],
                b"\"x\"",
                b"{\"a\":",
                b"{} {}",
                b"{\"a\":1} x",
                b"",
            ] {
                assert!(
                    !q.matches_json(not_a_document),
                    "{query} on {not_a_document:?}"
                );
            }
        }
        // A field the query names is kept even when the same key comes twice (the last wins,
        // as serde_json's own parse does).
        let q = SearchQuery::parse("group:g2").unwrap();
        assert!(q.matches_json(br#"{"group":"g1","group":"g2"}"#));
    }

    #[test]
    fn bad_syntax_is_refused_naming_the_problem() {
        assert!(error("").contains("empty"));
        assert!(error("   ").contains("empty"));
        assert!(error("AND").contains("empty"));
        assert!(error(":alice").contains("empty field"));
        assert!(error("name:").contains("empty term"));
        assert!(error("a..b:x").contains("empty part"));
        assert!(error(r#"bio:"rabbit hole"#).contains("unbalanced quote"));
        assert!(error(r#"bio:"rabbit"hole""#).contains("quote"));
        assert!(error(r#"bio:ra"bbit"#).contains("quote"));
        assert!(error("-").contains("negates nothing"));
        assert!(error("a OR b").contains("OR"));
        assert!(error("NOT a").contains("NOT"));
        assert!(error("(a b)").contains("parentheses"));
        assert!(error("na*me:x").contains("field name"));
        assert!(error("name:a*b").contains("trailing *"));
        assert!(error(r#"bio:"!!""#).contains("no words"));
    }
}
