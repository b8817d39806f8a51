//! A parsed search query: what [`crate::parse()`] produces, what the index compiles into a
//! tantivy query and what [`crate::matches`] evaluates against one JSON document (the plain
//! reference the index is tested against).
//!
//! Meaning, shared by both evaluations:
//! - a document is a JSON object; a *field* is a dotted path into it (`address.city`), and
//!   arrays met on the way or at the end fan out (any element may match);
//! - a string is seen as its *words*: the runs of letters and digits, lowercased
//!   ([`words`]), and words longer than [`MAX_WORD_BYTES`] are not seen at all;
//! - numbers, booleans and strings that read as dates are also seen as what they are, for
//!   exact terms and ranges.

use std::ops::Bound;

/// Words longer than this (in UTF-8 bytes) are not indexed, so never match.
pub const MAX_WORD_BYTES: usize = 100;

/// The lowercased words of `text`: runs of alphanumeric characters, each lowercased one
/// character at a time (as the index does: no special final sigma), those longer than
/// [`MAX_WORD_BYTES`] left out. The same split the index applies.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.chars().flat_map(char::to_lowercase).collect::<String>())
        .filter(|w| w.len() <= MAX_WORD_BYTES)
}

/// A field: the dotted path split at the dots, never empty, no part empty. A leading
/// `value.` (Orchestrate's spelling) has already been taken off.
pub type FieldPath = Vec<String>;

/// A query, as a tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// `*`: every document.
    All,
    /// Every part must match (clauses side by side, `AND`, `+`).
    And(Vec<Query>),
    /// At least one part must match (`OR`).
    Or(Vec<Query>),
    /// The part must not match (`-`, `NOT`): within an `And`, removes its matches.
    Not(Box<Query>),
    /// A test of one field, or of every string of the document when `field` is `None`.
    Leaf {
        field: Option<FieldPath>,
        test: Test,
        /// `^2`: multiplies the clause's relevance; never changes what matches.
        boost: Option<f32>,
    },
    /// `( ... )^2`: a boosted group.
    Boosted(Box<Query>, f32),
}

/// What a leaf tests.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// `term` or `field:term`, the text as written (not lowercased). It matches a string
    /// whose words contain the text's words next to each other in order (one word: that
    /// word); and, when the text reads as a number, a number equal to it; when it is `true`
    /// or `false`, that boolean. A bare term (no field) looks at strings only.
    Term(String),
    /// `"a phrase"`: the words of the text next to each other, in order, in one string.
    Phrase(String),
    /// `te?t*`, `term*`: a word matching the pattern, where `*` is any run of characters
    /// (perhaps none) and `?` exactly one; the pattern is lowercased. Strings only.
    Wildcard(String),
    /// `term~` (2 edits) or `term~1`: a word within that many edits (insertions, deletions,
    /// substitutions, swaps of two neighbours) of the lowercased term. Strings only.
    Fuzzy { term: String, edits: u8 },
    /// `field:*`: some number, boolean, or string with a word in it, is at or under the
    /// field (so `null`, `""`, `[]` and `{}` hold nothing).
    Exists,
    /// `[a TO b]`, `{a TO b}`, `>a`, `>=a`, `<a`, `<=a`; `*` as a bound is `Unbounded`.
    /// Needs a field. See [`RangeKind`] for what is compared.
    Range {
        kind: RangeKind,
        lower: Bound<String>,
        upper: Bound<String>,
    },
}

/// What a range compares, decided by its bounds: numbers when every given bound reads as a
/// number, else dates when every given bound reads as a date ([`parse_date`]), else words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeKind {
    /// JSON numbers, compared as numbers.
    Number,
    /// Strings that read as dates, compared as instants.
    Date,
    /// Words of strings (lowercased, bounds lowercased too), compared byte by byte.
    Word,
}

/// A string read as a date: RFC 3339 (`2024-05-01T10:00:00Z`, any offset) or a plain date
/// (`2024-05-01`, midnight UTC). Returns seconds and nanoseconds since the Unix epoch, UTC.
pub fn parse_date(text: &str) -> Option<(i64, u32)> {
    use time::format_description::well_known::Rfc3339;
    let text = text.trim();
    if let Ok(at) = time::OffsetDateTime::parse(text, &Rfc3339) {
        return Some((at.unix_timestamp(), at.nanosecond()));
    }
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let day = time::Date::parse(text, &format).ok()?;
    let at = day.midnight().assume_utc();
    Some((at.unix_timestamp(), 0))
}

/// A string read as a number: what JSON would read (no `NaN`, no infinities, no hex).
pub fn parse_number(text: &str) -> Option<f64> {
    let n: serde_json::Number = serde_json::from_str(text.trim()).ok()?;
    n.as_f64().filter(|f| f.is_finite())
}

/// A number as the index keys it, so that a term and a document compare as the index does:
/// a whole number within `i64::MIN..=u64::MAX` as that integer, exactly (an integer within
/// that range keeps every digit; `42.0` is `42`), any other as its float. A number beyond the
/// range is read as a float first (`-2^63-1` becomes `i64::MIN`), and tantivy clamps a float
/// of exactly 2^64 to `u64::MAX`, as this does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IndexNumber {
    /// A whole number, exactly.
    Whole(i128),
    /// A number with a fraction, or beyond 64-bit integers.
    Float(f64),
}

impl IndexNumber {
    /// What JSON would read from `text` (as [`parse_number`]).
    pub fn parse(text: &str) -> Option<Self> {
        let n: serde_json::Number = serde_json::from_str(text.trim()).ok()?;
        Self::of(&n)
    }

    /// A JSON number, `None` when it is not finite.
    pub fn of(n: &serde_json::Number) -> Option<Self> {
        if let Some(whole) = n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
        {
            return Some(Self::Whole(whole));
        }
        let float = n.as_f64().filter(|f| f.is_finite())?;
        Some(
            if float.fract() == 0.0 && float >= i64::MIN as f64 && float <= u64::MAX as f64 {
                Self::Whole((float as i128).min(i128::from(u64::MAX)))
            } else {
                Self::Float(float)
            },
        )
    }
}
