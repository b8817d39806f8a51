//! Reads the query language users write: Lucene's classic syntax, as Orchestrate documented
//! it, into a [`Query`]. A hand-written recursive descent over the characters, bounded by
//! [`MAX_QUERY_BYTES`], [`MAX_DEPTH`] and a cap on leaves, so any input is answered in about
//! linear time with a query or a [`SearchError::Syntax`] naming the construct at fault.
//!
//! What is read:
//! - `term`, `field:term`, dotted fields `address.city:oxford`; Orchestrate's `value.` in
//!   front of a field is dropped (`value.name:x` is `name:x`; a field that is just `value`
//!   stays `value`); `"a phrase"`, `field:"a phrase"`;
//! - `\` makes the next character plain, in terms, phrases, range bounds and field names
//!   (`a\:b` is the term `a:b`, `first\ name:x` the field `first name`);
//! - `*` (or `*:*`) is every document; `field:*` is [`Test::Exists`]; a term with `*` or `?`
//!   is a [`Test::Wildcard`] over one word;
//! - `term~`, `term~1` (fuzzy: 2 edits, or 0, 1, 2); `term^2`, `"phrase"^1.5`, `(group)^3`
//!   (boosts: positive numbers);
//! - ranges `field:[a TO b]`, `field:{a TO b}`, mixed `[a TO b}`, `*` as an open end, and
//!   `field:>a`, `>=a`, `<a`, `<=a`; the bounds decide the [`RangeKind`];
//! - `field:(a OR b)`: every clause inside without a field of its own gets that field.
//!
//! How clauses combine, loosest first:
//! 1. `OR` (or `||`) between alternatives: `a b OR c` is `(a AND b) OR c`;
//! 2. clauses side by side, or joined by `AND` (`&&`), must all match. Unlike Lucene, whose
//!    default operator is OR, this database has always read `a b` as both: kept;
//! 3. one prefix per clause: `+x` is just `x`; `-x`, `!x`, `NOT x` are [`Query::Not`], so
//!    `a -b` and `a AND NOT b` are `a` without `b`. A `-` starts a prefix only where a
//!    clause starts: `rabbit-hole` is one term and `n:-5` the term `-5`. A group made only
//!    of negations is taken from every document: `-a` is `And[All, Not a]`.
//!
//! So every `Not` built here sits directly in an `And` beside something that is not a
//! `Not`. Nested `And`s and `Or`s are flattened, and a single clause is not wrapped. The
//! operators are case-sensitive as in Lucene: `and` is a plain term.
//!
//! What a leaf holds: a [`Test::Term`] or [`Test::Phrase`] has at least one word; a
//! [`Test::Wildcard`] is the lowercase of letters and digits, with `*` and `?` (always
//! wildcards: a pattern cannot look for a literal one); a [`Test::Fuzzy`] term is one word
//! as [`words`] gives it; a [`Test::Range`] has at least one bound (else it is
//! [`Test::Exists`]) and always a field.
//!
//! Refused, with a message rather than misread: regular expressions `/.../`, proximity
//! `"a b"~2`, Lucene's old fuzzy similarity `~0.8`, wildcards in field names, and wildcard
//! patterns spanning more than one word (`foo-bar*`).

use crate::ast::{
    FieldPath, MAX_WORD_BYTES, Query, RangeKind, Test, parse_date, parse_number, words,
};
use crate::error::SearchError;
use std::ops::Bound;

/// The longest query text read, in bytes: a guard on work per request, far above any
/// query a person writes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

/// The deepest parentheses may nest; it bounds the parser's recursion (and the matcher's
/// and compiler's over the tree it builds).
pub const MAX_DEPTH: usize = 32;

/// The most leaves (terms, phrases, ranges...) one query may hold: each becomes a query
/// over the index, so this bounds a search's cost.
const MAX_LEAVES: usize = 1024;

const UNBALANCED_QUOTE: &str = "unbalanced quote: a phrase is opened and never closed";
const UNCLOSED_RANGE: &str = "unclosed range: a [ or { is never closed by ] or }";
const NO_TO: &str = "a range is written [low TO high]: TO is missing";
const REGEX: &str = "regular expressions are not supported (/.../)";
const NEEDS_FIELD: &str = "a range needs a field: write name:[a TO b] or name:>a";

/// Parses `text`; a syntax error names the construct it trips on.
pub fn parse(text: &str) -> Result<Query, SearchError> {
    let syntax = |problem: String| SearchError::Syntax {
        query: text.to_owned(),
        problem,
    };
    if text.len() > MAX_QUERY_BYTES {
        return Err(syntax(format!(
            "the query is {} bytes long, more than the {MAX_QUERY_BYTES} allowed",
            text.len()
        )));
    }
    if text.trim().is_empty() {
        return Err(syntax(
            "the query is empty (use * to match every document)".into(),
        ));
    }
    Parser {
        chars: text.chars().collect(),
        at: 0,
        leaves: 0,
    }
    .query()
    .map_err(syntax)
}

/// A problem, said for a person; [`parse`] wraps it with the query.
type Parsed<T> = Result<T, String>;

/// A run of characters as read, each with whether it was escaped by `\`: an escaped `*` is
/// a star to look for, an unescaped one a wildcard.
type Run = Vec<(char, bool)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    And,
    Or,
    Not,
}

/// What ends a term: whitespace and the characters with a meaning of their own.
fn ends_term(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '"' | ':' | '^' | '~' | '[' | ']' | '{' | '}')
}

fn run_text(run: &[(char, bool)]) -> String {
    run.iter().map(|&(c, _)| c).collect()
}

fn is_plain_star(run: &[(char, bool)]) -> bool {
    run == [('*', false)]
}

fn is_wildcard(c: char) -> bool {
    c == '*' || c == '?'
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    leaves: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.at += 1;
        }
        found
    }

    /// The operator starting here, if any, and how it is spelled (all spellings are ASCII,
    /// so their length in chars is their length in bytes). A keyword must stand alone:
    /// `ANDROID` is a term and `AND:x` a field.
    fn operator(&self) -> Option<(Operator, &'static str)> {
        const SPELLINGS: [(&str, Operator); 5] = [
            ("&&", Operator::And),
            ("||", Operator::Or),
            ("AND", Operator::And),
            ("OR", Operator::Or),
            ("NOT", Operator::Not),
        ];
        SPELLINGS.into_iter().find_map(|(spelling, op)| {
            if !self.starts_with(spelling) {
                return None;
            }
            let is_word = spelling.starts_with(|c: char| c.is_ascii_alphabetic());
            let stands_alone = match self.peek_at(spelling.len()) {
                None => true,
                Some(':') => false,
                Some(c) => ends_term(c),
            };
            (!is_word || stands_alone).then_some((op, spelling))
        })
    }

    /// The prefix starting here (`+`, `-`, `!`, `NOT`): its spelling and whether it negates.
    fn prefix(&self) -> Option<(&'static str, bool)> {
        match self.peek()? {
            '+' => Some(("+", false)),
            '-' => Some(("-", true)),
            '!' => Some(("!", true)),
            _ => match self.operator() {
                Some((Operator::Not, spelling)) => Some((spelling, true)),
                _ => None,
            },
        }
    }

    /// Reads characters up to one `stop` accepts (or the end), resolving `\` escapes.
    fn scan_run(&mut self, stop: fn(char) -> bool) -> Parsed<Run> {
        let mut run = Vec::new();
        while let Some(c) = self.peek() {
            if c == '\\' {
                let Some(escaped) = self.peek_at(1) else {
                    return Err("a \\ at the end of the query escapes nothing".into());
                };
                run.push((escaped, true));
                self.at += 2;
            } else if stop(c) {
                break;
            } else {
                run.push((c, false));
                self.at += 1;
            }
        }
        Ok(run)
    }

    fn query(mut self) -> Parsed<Query> {
        let query = self.any_of(None, 0)?;
        self.skip_space();
        match self.peek() {
            None => crate::compile::check_cost(&query).map(|()| query),
            Some(')') => Err("unbalanced parentheses: a ) closes nothing".into()),
            Some(c) => Err(format!("unexpected {c:?}")),
        }
    }

    /// Alternatives joined by `OR`; stops at the end or at a `)`.
    fn any_of(&mut self, field: Option<&FieldPath>, depth: usize) -> Parsed<Query> {
        let mut alternatives = vec![self.all_of(field, depth, None)?];
        loop {
            self.skip_space();
            match self.operator() {
                Some((Operator::Or, spelling)) => {
                    self.at += spelling.len();
                    alternatives.push(self.all_of(field, depth, Some(spelling))?);
                }
                _ => break,
            }
        }
        Ok(one_of(alternatives))
    }

    /// Clauses side by side or joined by `AND`; stops at the end, a `)` or an `OR`.
    fn all_of(
        &mut self,
        field: Option<&FieldPath>,
        depth: usize,
        after: Option<&'static str>,
    ) -> Parsed<Query> {
        let mut clauses = vec![self.required_clause(field, depth, after)?];
        loop {
            self.skip_space();
            if matches!(self.peek(), None | Some(')')) {
                break;
            }
            match self.operator() {
                Some((Operator::Or, _)) => break,
                Some((Operator::And, spelling)) => {
                    self.at += spelling.len();
                    clauses.push(self.required_clause(field, depth, Some(spelling))?);
                }
                _ => clauses.push(self.clause(field, depth)?),
            }
        }
        Ok(every_one_of(clauses))
    }

    /// A clause that must be there: at the start of the query or a group, or after the
    /// binary operator `after`.
    fn required_clause(
        &mut self,
        field: Option<&FieldPath>,
        depth: usize,
        after: Option<&'static str>,
    ) -> Parsed<Query> {
        self.skip_space();
        let binary = match self.operator() {
            Some((Operator::And | Operator::Or, spelling)) => Some(spelling),
            _ => None,
        };
        match (self.peek(), binary, after) {
            (None | Some(')'), _, Some(op)) => Err(format!(
                "{op} has nothing after it: an operator needs a clause on each side"
            )),
            (None, _, None) => Err("unbalanced parentheses: a ( is never closed".into()),
            (Some(')'), _, None) if depth == 0 => {
                Err("unbalanced parentheses: a ) closes nothing".into())
            }
            (Some(')'), _, None) => Err("an empty group (): put a clause inside".into()),
            (_, Some(op), Some(before)) => Err(format!(
                "{op} right after {before}: an operator needs a clause on each side"
            )),
            (_, Some(op), None) => Err(format!(
                "{op} has nothing before it: an operator needs a clause on each side"
            )),
            _ => self.clause(field, depth),
        }
    }

    /// One clause, perhaps with a prefix. The caller has checked something is here that is
    /// neither `)` nor a binary operator.
    fn clause(&mut self, field: Option<&FieldPath>, depth: usize) -> Parsed<Query> {
        let negate = match self.prefix() {
            None => false,
            Some((spelling, negates)) => {
                self.at += spelling.len();
                self.skip_space();
                if matches!(self.peek(), None | Some(')')) {
                    return Err(format!("{spelling} has no clause after it"));
                }
                if let Some((next, _)) = self.prefix() {
                    return Err(format!(
                        "{next} right after {spelling}: one prefix (+, -, !, NOT) per clause"
                    ));
                }
                if let Some((_, next)) = self.operator() {
                    return Err(format!(
                        "{next} right after {spelling}: {spelling} needs a clause after it"
                    ));
                }
                negates
            }
        };
        let body = self.primary(field, depth)?;
        if self.peek() == Some(':') {
            return Err(
                "a ':' must follow a field name (escape it as \\: to search for one)".into(),
            );
        }
        Ok(if negate {
            Query::Not(Box::new(body))
        } else {
            body
        })
    }

    /// A clause without its prefix: a group, phrase, range, `field:value` or term.
    fn primary(&mut self, field: Option<&FieldPath>, depth: usize) -> Parsed<Query> {
        match self.peek() {
            Some('(') => self.group(field, depth),
            Some('"') => self.phrase(field.cloned()),
            Some('[' | '{' | '<' | '>') => match field {
                Some(field) => self.range(field.clone()),
                None => Err(NEEDS_FIELD.into()),
            },
            Some('/') => Err(REGEX.into()),
            Some('~') => {
                Err("a lone ~: fuzzy matching is written right after a term (term~1)".into())
            }
            Some('^') => Err(
                "a lone ^: a boost is written right after a term, phrase or group (term^2)".into(),
            ),
            Some(':') => Err("empty field name before ':'".into()),
            Some(c @ (']' | '}')) => Err(format!(
                "unexpected {c}: a range is written name:[low TO high]"
            )),
            Some(')') | None => Err("a clause is missing".into()),
            Some(_) => {
                let run = self.scan_run(ends_term)?;
                if !self.eat(':') {
                    return self.term(run, field.cloned());
                }
                if is_plain_star(&run) {
                    return self.everything();
                }
                let path = field_path(&run)?;
                self.value(path, &run_text(&run), depth)
            }
        }
    }

    /// What follows `*:`, which must be `*`.
    fn everything(&mut self) -> Parsed<Query> {
        let run = self.scan_run(ends_term)?;
        if !is_plain_star(&run) {
            return Err(
                "a * in a field name is not supported (*:* alone matches every document)".into(),
            );
        }
        self.term(run, None)
    }

    /// What follows `field:`.
    fn value(&mut self, field: FieldPath, written: &str, depth: usize) -> Parsed<Query> {
        self.skip_space();
        if let Some((_, spelling)) = self.operator() {
            return Err(format!(
                "{written}: is followed by the operator {spelling} (quote or escape it to search \
                 for the word)"
            ));
        }
        match self.peek() {
            None | Some(')' | ']' | '}' | ':' | '^' | '~') => {
                Err(format!("the field {written}: has nothing after the ':'"))
            }
            Some('(') => self.group(Some(&field), depth),
            Some('"') => self.phrase(Some(field)),
            Some('[' | '{' | '<' | '>') => self.range(field),
            Some('/') => Err(REGEX.into()),
            // Here `-`, `+` and `!` are part of the term (`n:-5`), not prefixes.
            Some(_) => {
                let run = self.scan_run(ends_term)?;
                self.term(run, Some(field))
            }
        }
    }

    /// `( ... )`, perhaps boosted; `field` is given to its clauses that name none.
    fn group(&mut self, field: Option<&FieldPath>, depth: usize) -> Parsed<Query> {
        let depth = depth + 1;
        if depth > MAX_DEPTH {
            return Err(format!("parentheses nested deeper than {MAX_DEPTH}"));
        }
        self.at += 1;
        let inner = self.any_of(field, depth)?;
        self.skip_space();
        if !self.eat(')') {
            return Err("unbalanced parentheses: a ( is never closed".into());
        }
        Ok(match self.boost()? {
            Some(boost) => Query::Boosted(Box::new(inner), boost),
            None => inner,
        })
    }

    /// A term just read, with what may follow it (`~`, `^`).
    fn term(&mut self, run: Run, field: Option<FieldPath>) -> Parsed<Query> {
        let (edits, boost) = self.term_suffixes()?;
        let text = run_text(&run);
        if is_plain_star(&run) {
            if edits.is_some() {
                return Err("* cannot be fuzzy (~)".into());
            }
            return match field {
                Some(field) => self.leaf(Some(field), Test::Exists, boost),
                None => Ok(match boost {
                    Some(boost) => Query::Boosted(Box::new(Query::All), boost),
                    None => Query::All,
                }),
            };
        }
        let test = if run.iter().any(|&(c, escaped)| !escaped && is_wildcard(c)) {
            if edits.is_some() {
                return Err(format!(
                    "the wildcard term {text:?} cannot also be fuzzy (~)"
                ));
            }
            wildcard(&run, text)?
        } else if let Some(edits) = edits {
            let mut found: Vec<String> = words(&text).collect();
            if found.len() > 1 {
                return Err(format!(
                    "fuzzy matching (~) compares one word, and {text:?} is {} words",
                    found.len()
                ));
            }
            let Some(term) = found.pop() else {
                return Err(no_words("term", &text));
            };
            Test::Fuzzy { term, edits }
        } else {
            if words(&text).next().is_none() {
                return Err(no_words("term", &text));
            }
            Test::Term(text)
        };
        self.leaf(field, test, boost)
    }

    /// `~N` and `^B` after a term, in either order, each at most once.
    fn term_suffixes(&mut self) -> Parsed<(Option<u8>, Option<f32>)> {
        let (mut edits, mut boost) = (None, None);
        loop {
            match self.peek() {
                Some('~') if edits.is_none() => {
                    self.at += 1;
                    edits = Some(self.edits()?);
                }
                Some('^') if boost.is_none() => boost = self.boost()?,
                _ => return Ok((edits, boost)),
            }
        }
    }

    /// The number after `~` (just read): 0, 1 or 2 edits, 2 when none is written.
    fn edits(&mut self) -> Parsed<u8> {
        let written = run_text(&self.scan_run(ends_term)?);
        match written.as_str() {
            "" | "2" => Ok(2),
            "1" => Ok(1),
            "0" => Ok(0),
            _ if written.contains('.') && written.parse::<f64>().is_ok() => Err(format!(
                "fuzzy similarity ~{written} is not supported: allow 0, 1 or 2 edits (~0, ~1, \
                 ~2)"
            )),
            _ => Err(format!(
                "fuzzy ~{written}: the edits allowed must be 0, 1 or 2"
            )),
        }
    }

    /// `^B` if it is here: a positive finite number.
    fn boost(&mut self) -> Parsed<Option<f32>> {
        if !self.eat('^') {
            return Ok(None);
        }
        let written = run_text(&self.scan_run(ends_term)?);
        if written.is_empty() {
            return Err("^ needs a number after it (a boost such as ^2)".into());
        }
        match written.parse::<f32>() {
            Ok(boost) if boost.is_finite() && boost > 0.0 => Ok(Some(boost)),
            _ => Err(format!("the boost ^{written} is not a positive number")),
        }
    }

    /// `"..."`, perhaps boosted.
    fn phrase(&mut self, field: Option<FieldPath>) -> Parsed<Query> {
        let text = self.quoted()?;
        if self.peek() == Some('~') {
            return Err("proximity searches (\"a phrase\"~N) are not supported".into());
        }
        let boost = self.boost()?;
        if words(&text).next().is_none() {
            return Err(no_words("phrase", &text));
        }
        self.leaf(field, Test::Phrase(text), boost)
    }

    /// The text between a `"` (here) and the next unescaped one.
    fn quoted(&mut self) -> Parsed<String> {
        self.at += 1;
        let mut text = String::new();
        loop {
            match (self.peek(), self.peek_at(1)) {
                (None, _) | (Some('\\'), None) => return Err(UNBALANCED_QUOTE.into()),
                (Some('"'), _) => {
                    self.at += 1;
                    return Ok(text);
                }
                (Some('\\'), Some(escaped)) => {
                    text.push(escaped);
                    self.at += 2;
                }
                (Some(c), _) => {
                    text.push(c);
                    self.at += 1;
                }
            }
        }
    }

    /// A range on `field`: `[a TO b]` and kin, or `>a` and kin. Both ends open is
    /// [`Test::Exists`].
    fn range(&mut self, field: FieldPath) -> Parsed<Query> {
        let (lower, upper) = match self.peek() {
            Some(op @ ('>' | '<')) => {
                self.at += 1;
                let inclusive = self.eat('=');
                let end = self.comparison_bound(op, inclusive)?;
                let end = bound(end, inclusive);
                if op == '>' {
                    (end, Bound::Unbounded)
                } else {
                    (Bound::Unbounded, end)
                }
            }
            _ => self.bracketed()?,
        };
        let boost = self.boost()?;
        let test = match (&lower, &upper) {
            (Bound::Unbounded, Bound::Unbounded) => Test::Exists,
            _ => Test::Range {
                kind: range_kind(&lower, &upper),
                lower,
                upper,
            },
        };
        self.leaf(Some(field), test, boost)
    }

    /// The bound after `>`, `>=`, `<` or `<=`: quoted, or up to what ends a term (except
    /// `:`, common in dates).
    fn comparison_bound(&mut self, op: char, inclusive: bool) -> Parsed<Option<String>> {
        let spelled = if inclusive {
            format!("{op}=")
        } else {
            op.to_string()
        };
        match self.peek() {
            Some('"') => return self.quoted().map(Some),
            Some(c) if !ends_term(c) || c == ':' => {}
            _ => return Err(format!("{spelled} needs a value after it")),
        }
        let run = self.scan_run(|c| ends_term(c) && c != ':')?;
        Ok((!is_plain_star(&run)).then(|| run_text(&run)))
    }

    /// `[a TO b]`, `{a TO b}` and mixes, starting here.
    fn bracketed(&mut self) -> Parsed<(Bound<String>, Bound<String>)> {
        let lower_inclusive = self.peek() == Some('[');
        self.at += 1;
        self.skip_space();
        let lower = self.range_bound()?;
        self.skip_space();
        let after_to = self.peek_at(2);
        if !self.starts_with("TO")
            || after_to.is_some_and(|c| !c.is_whitespace() && c != ']' && c != '}')
        {
            return Err(if self.peek().is_none() {
                UNCLOSED_RANGE
            } else {
                NO_TO
            }
            .into());
        }
        self.at += 2;
        self.skip_space();
        let upper = self.range_bound()?;
        self.skip_space();
        let upper_inclusive = match self.peek() {
            Some(']') => true,
            Some('}') => false,
            None => return Err(UNCLOSED_RANGE.into()),
            Some(_) => {
                return Err(
                    "a range is written [low TO high]: expected ] or } after the high bound".into(),
                );
            }
        };
        self.at += 1;
        Ok((bound(lower, lower_inclusive), bound(upper, upper_inclusive)))
    }

    /// One bound inside brackets: quoted, or up to whitespace, `]` or `}`; `None` for `*`.
    fn range_bound(&mut self) -> Parsed<Option<String>> {
        match self.peek() {
            None => Err(UNCLOSED_RANGE.into()),
            Some('"') => self.quoted().map(Some),
            Some(']' | '}') => {
                Err("a range bound is missing: a range is written [low TO high]".into())
            }
            Some(_) => {
                let run = self.scan_run(|c| c.is_whitespace() || c == ']' || c == '}')?;
                Ok((!is_plain_star(&run)).then(|| run_text(&run)))
            }
        }
    }

    fn leaf(&mut self, field: Option<FieldPath>, test: Test, boost: Option<f32>) -> Parsed<Query> {
        self.leaves += 1;
        if self.leaves > MAX_LEAVES {
            return Err(format!("more than {MAX_LEAVES} terms in one query"));
        }
        Ok(Query::Leaf { field, test, boost })
    }
}

/// The dotted field named by `run` (read before a `:`), without Orchestrate's `value.`.
fn field_path(run: &[(char, bool)]) -> Parsed<FieldPath> {
    let written = run_text(run);
    if run.iter().any(|&(c, escaped)| !escaped && is_wildcard(c)) {
        return Err(format!(
            "the field name {written:?} holds a * or ?: wildcards in field names are not \
             supported"
        ));
    }
    // Dots separate the parts of a path; the index sees paths the same way, so a key with a
    // dot in it cannot be named.
    if run.iter().any(|&(c, escaped)| escaped && c == '.') {
        return Err(format!(
            "the field name {written:?} holds an escaped dot: dots always separate the parts \
             of a field path"
        ));
    }
    dotted_path(&written)
}

/// The path a dotted field name gives, without Orchestrate's `value.` (shared with the
/// `sort=` parameter): dots separate its parts, and none may be empty.
pub(crate) fn dotted_path(written: &str) -> Parsed<FieldPath> {
    let mut path: FieldPath = written.split('.').map(str::to_owned).collect();
    if path.iter().any(String::is_empty) {
        return Err(format!("empty part in the field path {written:?}"));
    }
    if path.len() > 1 && path[0] == "value" {
        path.remove(0);
    }
    Ok(path)
}

/// A term with unescaped `*` or `?` as a [`Test::Wildcard`]: one word's letters and digits
/// with the wildcards, lowercased, as the index matches patterns against single words.
fn wildcard(run: &[(char, bool)], text: String) -> Parsed<Test> {
    if run.iter().any(|&(c, escaped)| escaped && is_wildcard(c)) {
        return Err(format!(
            "the term {text:?} mixes wildcards with an escaped * or ?: a wildcard pattern \
             cannot look for a literal * or ?"
        ));
    }
    if run
        .iter()
        .any(|&(c, _)| !c.is_alphanumeric() && !is_wildcard(c))
    {
        let plain: String = text.chars().filter(|&c| !is_wildcard(c)).collect();
        return Err(if words(&plain).nth(1).is_some() {
            format!(
                "the wildcard pattern {text:?} spans more than one word: a pattern matches one \
                 word (letters and digits)"
            )
        } else {
            format!(
                "the wildcard pattern {text:?} holds more than letters, digits, * and ?: a \
                 pattern matches one word"
            )
        });
    }
    Ok(Test::Wildcard(text.to_lowercase()))
}

/// The problem with a term or phrase that has nothing the index could find.
fn no_words(what: &str, text: &str) -> String {
    if text.chars().any(char::is_alphanumeric) {
        format!(
            "the {what} {text:?} has only words longer than {MAX_WORD_BYTES} bytes, which are \
             not indexed"
        )
    } else {
        format!("the {what} {text:?} has no words (letters or digits) to search for")
    }
}

fn bound(end: Option<String>, inclusive: bool) -> Bound<String> {
    match end {
        None => Bound::Unbounded,
        Some(end) if inclusive => Bound::Included(end),
        Some(end) => Bound::Excluded(end),
    }
}

/// Numbers if every given bound reads as one, else dates if every one does, else words.
fn range_kind(lower: &Bound<String>, upper: &Bound<String>) -> RangeKind {
    let given: Vec<&str> = [lower, upper]
        .into_iter()
        .filter_map(|end| match end {
            Bound::Included(end) | Bound::Excluded(end) => Some(end.as_str()),
            Bound::Unbounded => None,
        })
        .collect();
    if given.iter().all(|end| parse_number(end).is_some()) {
        RangeKind::Number
    } else if given.iter().all(|end| parse_date(end).is_some()) {
        RangeKind::Date
    } else {
        RangeKind::Word
    }
}

/// Clauses that must all match, flattened; one made only of negations starts from every
/// document.
fn every_one_of(clauses: Vec<Query>) -> Query {
    let mut parts = Vec::with_capacity(clauses.len());
    for clause in clauses {
        match clause {
            Query::And(inner) => parts.extend(inner),
            other => parts.push(other),
        }
    }
    if parts.iter().all(|part| matches!(part, Query::Not(_))) {
        parts.insert(0, Query::All);
    }
    match <[Query; 1]>::try_from(parts) {
        Ok([single]) => single,
        Err(parts) => Query::And(parts),
    }
}

/// Alternatives of which one must match, flattened.
fn one_of(alternatives: Vec<Query>) -> Query {
    let mut parts = Vec::with_capacity(alternatives.len());
    for alternative in alternatives {
        match alternative {
            Query::Or(inner) => parts.extend(inner),
            other => parts.push(other),
        }
    }
    match <[Query; 1]>::try_from(parts) {
        Ok([single]) => single,
        Err(parts) => Query::Or(parts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Query {
        parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    /// The problem `text` is refused with (checking the error carries the query).
    fn problem(text: &str) -> String {
        match parse(text) {
            Ok(query) => panic!("{text:?} parsed as {query:?}"),
            Err(SearchError::Syntax { query, problem }) => {
                assert_eq!(query, text);
                problem
            }
            #[allow(unreachable_patterns)]
            Err(other) => panic!("{text:?}: not a syntax error: {other}"),
        }
    }

    fn refused(text: &str, naming: &str) {
        let problem = problem(text);
        let shown: String = text.chars().take(60).collect();
        assert!(
            problem.contains(naming),
            "{shown:?} was refused with {problem:?}, which does not say {naming:?}"
        );
    }

    fn path(dotted: &str) -> Option<FieldPath> {
        Some(dotted.split('.').map(str::to_owned).collect())
    }

    fn on(field: &str, test: Test) -> Query {
        Query::Leaf {
            field: path(field),
            test,
            boost: None,
        }
    }

    fn bare(test: Test) -> Query {
        Query::Leaf {
            field: None,
            test,
            boost: None,
        }
    }

    fn term(text: &str) -> Query {
        bare(Test::Term(text.into()))
    }

    fn field_term(field: &str, text: &str) -> Query {
        on(field, Test::Term(text.into()))
    }

    fn boosted_leaf(query: Query, by: f32) -> Query {
        match query {
            Query::Leaf { field, test, .. } => Query::Leaf {
                field,
                test,
                boost: Some(by),
            },
            other => panic!("not a leaf: {other:?}"),
        }
    }

    fn not(query: Query) -> Query {
        Query::Not(Box::new(query))
    }

    fn range(field: &str, kind: RangeKind, lower: Bound<&str>, upper: Bound<&str>) -> Query {
        on(
            field,
            Test::Range {
                kind,
                lower: lower.map(str::to_owned),
                upper: upper.map(str::to_owned),
            },
        )
    }

    #[test]
    fn terms_and_fields() {
        assert_eq!(parsed("alice"), term("alice"));
        assert_eq!(parsed("  Alice  "), term("Alice"), "kept as written");
        assert_eq!(parsed("name:Alice"), field_term("name", "Alice"));
        assert_eq!(
            parsed("address.city:oxford"),
            field_term("address.city", "oxford")
        );
        assert_eq!(parsed("name: alice"), field_term("name", "alice"));
        assert_eq!(parsed("rabbit-hole"), term("rabbit-hole"));
        assert_eq!(parsed("e-mail@x.org"), term("e-mail@x.org"));
        assert_eq!(parsed("a/b"), term("a/b"));
        assert_eq!(parsed("ANDROID"), term("ANDROID"));
        assert_eq!(parsed("AND:x"), field_term("AND", "x"));
    }

    #[test]
    fn orchestrates_value_prefix_is_dropped() {
        assert_eq!(parsed("value.name:x"), field_term("name", "x"));
        assert_eq!(parsed("value.a.b:x"), field_term("a.b", "x"));
        assert_eq!(parsed("value:x"), field_term("value", "x"));
        assert_eq!(parsed("values.name:x"), field_term("values.name", "x"));
        assert_eq!(parsed("a.value.b:x"), field_term("a.value.b", "x"));
        refused("value.:x", "empty part");
    }

    #[test]
    fn phrases() {
        assert_eq!(parsed("\"a b\""), bare(Test::Phrase("a b".into())));
        assert_eq!(
            parsed("bio:\"Rabbit  Hole\""),
            on("bio", Test::Phrase("Rabbit  Hole".into()))
        );
        assert_eq!(
            parsed("\"a\"b"),
            Query::And(vec![bare(Test::Phrase("a".into())), term("b")]),
            "a phrase and a term side by side"
        );
        assert_eq!(
            parsed("bio:\"a (b) : c\""),
            on("bio", Test::Phrase("a (b) : c".into())),
            "syntax characters are plain inside quotes"
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(parsed(r"a\:b"), term("a:b"));
        assert_eq!(parsed(r"f:a\:b"), field_term("f", "a:b"));
        assert_eq!(parsed(r"a\*"), term("a*"), "an escaped star is a character");
        assert_eq!(parsed(r"a\?b"), term("a?b"));
        assert_eq!(parsed(r"\-a"), term("-a"), "an escaped - is no prefix");
        assert_eq!(parsed(r"\AND"), term("AND"), "an escaped keyword is a term");
        assert_eq!(parsed(r"a\ b"), term("a b"));
        assert_eq!(parsed(r"a\(b\)"), term("a(b)"));
        assert_eq!(
            parsed(r#""say \"hi\" \\ now""#),
            bare(Test::Phrase(r#"say "hi" \ now"#.into()))
        );
        assert_eq!(parsed(r"first\ name:x"), field_term("first name", "x"));
        assert_eq!(parsed(r"a\*b:x"), field_term("a*b", "x"));
        refused(r"a\.b:x", "escaped dot");
        refused("a\\", "escapes nothing");
        refused("\"a\\", "unbalanced quote");
    }

    #[test]
    fn everything_and_exists() {
        assert_eq!(parsed("*"), Query::All);
        assert_eq!(parsed(" * "), Query::All);
        assert_eq!(parsed("*:*"), Query::All);
        assert_eq!(parsed("*^2"), Query::Boosted(Box::new(Query::All), 2.0));
        assert_eq!(parsed("name:*"), on("name", Test::Exists));
        assert_eq!(
            parsed("name:*^2"),
            boosted_leaf(on("name", Test::Exists), 2.0)
        );
        assert_eq!(parsed("f:(*)"), on("f", Test::Exists));
        assert_eq!(parsed("f:(*:*)"), Query::All);
        refused("*:foo", "*:*");
        refused("*~", "fuzzy");
    }

    #[test]
    fn wildcards() {
        assert_eq!(parsed("Te?t*"), bare(Test::Wildcard("te?t*".into())));
        assert_eq!(
            parsed("name:ALI*"),
            on("name", Test::Wildcard("ali*".into()))
        );
        assert_eq!(parsed("f:**"), on("f", Test::Wildcard("**".into())));
        assert_eq!(parsed("?"), bare(Test::Wildcard("?".into())));
        assert_eq!(
            parsed("caf\u{e9}*"),
            bare(Test::Wildcard("caf\u{e9}*".into()))
        );
        refused("foo-bar*", "more than one word");
        refused("f:foo*-bar", "more than one word");
        refused("foo!*", "letters, digits");
        refused(r"foo\**", "escaped");
        refused(r"f\?o*", "escaped");
        refused("na*me:x", "field name");
        refused("n?:x", "field name");
    }

    #[test]
    fn fuzzy() {
        let fuzzy = |term: &str, edits| {
            bare(Test::Fuzzy {
                term: term.into(),
                edits,
            })
        };
        assert_eq!(parsed("roam~"), fuzzy("roam", 2));
        assert_eq!(parsed("Roam~0"), fuzzy("roam", 0), "the word, lowercased");
        assert_eq!(parsed("roam~1"), fuzzy("roam", 1));
        assert_eq!(parsed("roam~2"), fuzzy("roam", 2));
        assert_eq!(parsed("roam!~1"), fuzzy("roam", 1));
        assert_eq!(
            parsed("f:roam~1^3"),
            boosted_leaf(
                on(
                    "f",
                    Test::Fuzzy {
                        term: "roam".into(),
                        edits: 1
                    }
                ),
                3.0
            )
        );
        assert_eq!(parsed("roam^3~1"), boosted_leaf(fuzzy("roam", 1), 3.0));
        refused("roam~3", "0, 1 or 2");
        refused("roam~0.8", "0, 1 or 2");
        refused("roam~0.8", "similarity");
        refused("roam~x", "0, 1 or 2");
        refused("foo-bar~", "one word");
        refused("foo*~1", "wildcard");
        refused("f:!!~", "no words");
        refused("\"a b\"~2", "proximity");
        refused("~", "lone ~");
        refused("a ~1", "lone ~");
        refused("a~1~2", "lone ~");
    }

    #[test]
    fn boosts() {
        assert_eq!(parsed("a^2"), boosted_leaf(term("a"), 2.0));
        assert_eq!(
            parsed("\"a b\"^1.5"),
            boosted_leaf(bare(Test::Phrase("a b".into())), 1.5)
        );
        assert_eq!(
            parsed("(a b)^3"),
            Query::Boosted(Box::new(Query::And(vec![term("a"), term("b")])), 3.0)
        );
        assert_eq!(
            parsed("f:(a)^0.5"),
            Query::Boosted(Box::new(field_term("f", "a")), 0.5)
        );
        assert_eq!(
            parsed("n:[1 TO 2]^2"),
            boosted_leaf(
                range(
                    "n",
                    RangeKind::Number,
                    Bound::Included("1"),
                    Bound::Included("2")
                ),
                2.0
            )
        );
        refused("a^", "^ needs a number");
        refused("(a)^", "^ needs a number");
        refused("a^ 2", "^ needs a number");
        for bad in ["a^0", "a^-1", "a^x", "a^inf", "a^NaN", "a^1e50"] {
            refused(bad, "positive number");
        }
        refused("^2", "lone ^");
    }

    #[test]
    fn operators_and_precedence() {
        let (a, b, c, d) = (term("a"), term("b"), term("c"), term("d"));
        let and = |parts: &[&Query]| Query::And(parts.iter().map(|&q| q.clone()).collect());
        let or = |parts: &[&Query]| Query::Or(parts.iter().map(|&q| q.clone()).collect());
        for text in [
            "a b", "a AND b", "a && b", "+a +b", "a +b", "a&&b c", "(a b)",
        ] {
            if text == "a&&b c" {
                assert_eq!(parsed(text), and(&[&term("a&&b"), &c]));
                continue;
            }
            assert_eq!(parsed(text), and(&[&a, &b]), "{text}");
        }
        for text in ["a OR b", "a || b", "(a) OR (b)"] {
            assert_eq!(parsed(text), or(&[&a, &b]), "{text}");
        }
        assert_eq!(parsed("+a"), a);
        assert_eq!(parsed("a b OR c"), or(&[&and(&[&a, &b]), &c]));
        assert_eq!(parsed("a OR b c"), or(&[&a, &and(&[&b, &c])]));
        assert_eq!(
            parsed("a AND b OR c AND d"),
            or(&[&and(&[&a, &b]), &and(&[&c, &d])])
        );
        assert_eq!(parsed("a (b OR c)"), and(&[&a, &or(&[&b, &c])]));
        assert_eq!(parsed("a (b c) d"), and(&[&a, &b, &c, &d]), "flattened");
        assert_eq!(parsed("a OR (b OR c)"), or(&[&a, &b, &c]), "flattened");
        assert_eq!(parsed("((a))"), a);
        assert_eq!(
            parsed("a and b"),
            and(&[&a, &term("and"), &b]),
            "case-sensitive"
        );
        assert_eq!(parsed("a or b"), and(&[&a, &term("or"), &b]));
    }

    #[test]
    fn negation() {
        let (a, b) = (term("a"), term("b"));
        for text in ["a -b", "a AND NOT b", "a NOT b", "a !b", "a && !b", "a - b"] {
            assert_eq!(
                parsed(text),
                Query::And(vec![a.clone(), not(b.clone())]),
                "{text}"
            );
        }
        for text in ["-a", "NOT a", "!a", "(-a)"] {
            assert_eq!(
                parsed(text),
                Query::And(vec![Query::All, not(a.clone())]),
                "{text}"
            );
        }
        assert_eq!(
            parsed("-a -b"),
            Query::And(vec![Query::All, not(a.clone()), not(b.clone())])
        );
        assert_eq!(
            parsed("-a OR b"),
            Query::Or(vec![
                Query::And(vec![Query::All, not(a.clone())]),
                b.clone()
            ])
        );
        assert_eq!(
            parsed("-(a OR b)"),
            Query::And(vec![Query::All, not(Query::Or(vec![a.clone(), b.clone()]))])
        );
        assert_eq!(
            parsed("a -(b)^2"),
            Query::And(vec![a, not(Query::Boosted(Box::new(b), 2.0))])
        );
        assert_eq!(
            parsed("-5"),
            Query::And(vec![Query::All, not(term("5"))]),
            "a - starting a clause negates"
        );
        assert_eq!(
            parsed("n:-5"),
            field_term("n", "-5"),
            "after : it is the term"
        );
        assert_eq!(parsed("n:+5"), field_term("n", "+5"));
        refused("n:!!!", "no words");
    }

    #[test]
    fn a_field_applies_to_a_group() {
        assert_eq!(
            parsed("f:(a OR b)"),
            Query::Or(vec![field_term("f", "a"), field_term("f", "b")])
        );
        assert_eq!(
            parsed("f:(a g:b \"c d\" -e x*)"),
            Query::And(vec![
                field_term("f", "a"),
                field_term("g", "b"),
                on("f", Test::Phrase("c d".into())),
                not(field_term("f", "e")),
                on("f", Test::Wildcard("x*".into())),
            ])
        );
        assert_eq!(
            parsed("f:(a (b OR g:(c d)))"),
            Query::And(vec![
                field_term("f", "a"),
                Query::Or(vec![
                    field_term("f", "b"),
                    Query::And(vec![field_term("g", "c"), field_term("g", "d")]),
                ]),
            ])
        );
        assert_eq!(
            parsed("n:([1 TO 2] OR >5)"),
            Query::Or(vec![
                range(
                    "n",
                    RangeKind::Number,
                    Bound::Included("1"),
                    Bound::Included("2")
                ),
                range(
                    "n",
                    RangeKind::Number,
                    Bound::Excluded("5"),
                    Bound::Unbounded
                ),
            ])
        );
        assert_eq!(
            parsed("value.f:(a)"),
            field_term("f", "a"),
            "the alias is dropped for groups too"
        );
    }

    #[test]
    fn ranges() {
        use Bound::{Excluded, Included, Unbounded};
        use RangeKind::{Date, Number, Word};
        let cases = [
            (
                "n:[1 TO 5]",
                range("n", Number, Included("1"), Included("5")),
            ),
            (
                "n:{1 TO 5}",
                range("n", Number, Excluded("1"), Excluded("5")),
            ),
            (
                "n:[1 TO 5}",
                range("n", Number, Included("1"), Excluded("5")),
            ),
            (
                "n:{1 TO 5]",
                range("n", Number, Excluded("1"), Included("5")),
            ),
            (
                "n:[ -1.5  TO  5e3 ]",
                range("n", Number, Included("-1.5"), Included("5e3")),
            ),
            ("n:[* TO 5]", range("n", Number, Unbounded, Included("5"))),
            ("n:{1 TO *]", range("n", Number, Excluded("1"), Unbounded)),
            ("n:>5", range("n", Number, Excluded("5"), Unbounded)),
            ("n:>=5", range("n", Number, Included("5"), Unbounded)),
            ("n:<5", range("n", Number, Unbounded, Excluded("5"))),
            ("n:<=-5", range("n", Number, Unbounded, Included("-5"))),
            (
                "d:[2024-01-01 TO 2024-12-31T23:59:59+02:00]",
                range(
                    "d",
                    Date,
                    Included("2024-01-01"),
                    Included("2024-12-31T23:59:59+02:00"),
                ),
            ),
            (
                "d:>=2024-05-01T10:00:00Z",
                range("d", Date, Included("2024-05-01T10:00:00Z"), Unbounded),
            ),
            (
                "d:<\"2024-05-01\"",
                range("d", Date, Unbounded, Excluded("2024-05-01")),
            ),
            (
                "w:[Apple TO banana]",
                range("w", Word, Included("Apple"), Included("banana")),
            ),
            (
                "w:[\"a b\" TO \"*\"]",
                range("w", Word, Included("a b"), Included("*")),
            ),
            (
                "w:[1 TO 2024-01-01]",
                range("w", Word, Included("1"), Included("2024-01-01")),
            ),
            (
                r"w:[a\]b TO c]",
                range("w", Word, Included("a]b"), Included("c")),
            ),
            ("w:>a", range("w", Word, Excluded("a"), Unbounded)),
            ("n:[* TO *]", on("n", Test::Exists)),
            ("n:{* TO *}", on("n", Test::Exists)),
            ("n:>*", on("n", Test::Exists)),
        ];
        for (text, expected) in cases {
            assert_eq!(parsed(text), expected, "{text}");
        }
        assert_eq!(
            parsed("n:[1 TO 5] a"),
            Query::And(vec![
                range("n", Number, Included("1"), Included("5")),
                term("a")
            ])
        );
        refused("[1 TO 5]", "a range needs a field");
        refused("{1 TO 5}", "a range needs a field");
        refused(">5", "a range needs a field");
        refused("n:[1 TO 5", "unclosed range");
        refused("n:[1 TO", "unclosed range");
        refused("n:[1", "unclosed range");
        refused("n:[1 5]", "TO is missing");
        refused("n:[1 to 5]", "TO is missing");
        refused("n:[1]", "TO is missing");
        refused("n:[1 TO]", "bound is missing");
        refused("n:[1 TO 5 6]", "expected ] or }");
        refused("n:>", "> needs a value");
        refused("n:<= 5", "<= needs a value");
        refused("n:[\"1 TO 5]", "unbalanced quote");
        refused("a]", "unexpected ]");
    }

    #[test]
    fn costly_automatons_are_refused() {
        let refused = |text: &str| match parse(text) {
            Err(SearchError::Syntax { problem, .. }) => problem,
            other => panic!("{text:?}: {other:?}"),
        };
        assert!(refused("name:*a??????????????").contains("too complex"));
        let many = (0..17)
            .map(|i| format!("f{i}:a*"))
            .collect::<Vec<_>>()
            .join(" OR ");
        assert!(refused(&many).contains("at most 16"));
        let fuzzy = (0..17)
            .map(|i| format!("w{i}~"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(refused(&fuzzy).contains("at most 16"));
        let fine = (0..16)
            .map(|i| format!("f{i}:a*"))
            .collect::<Vec<_>>()
            .join(" OR ");
        assert!(parse(&fine).is_ok());
        assert!(parse("name:a?i*e").is_ok());
    }

    #[test]
    fn errors_name_the_construct() {
        for empty in ["", "   ", "\t\n"] {
            refused(empty, "the query is empty (use * to match every document)");
        }
        refused("(a", "unbalanced parentheses");
        refused("((a)", "unbalanced parentheses");
        refused("(", "unbalanced parentheses");
        refused("a)", "unbalanced parentheses");
        refused(")", "unbalanced parentheses");
        refused("(a))", "unbalanced parentheses");
        refused("()", "empty group");
        refused("\"abc", "unbalanced quote");
        refused("a \"b", "unbalanced quote");
        refused("a AND", "AND has nothing after it");
        refused("a &&", "&& has nothing after it");
        refused("(a OR) b", "OR has nothing after it");
        refused("OR b", "OR has nothing before it");
        refused("AND", "AND has nothing before it");
        refused("(AND a)", "AND has nothing before it");
        refused("a AND OR b", "OR right after AND");
        refused("a OR OR b", "OR right after OR");
        refused("-", "- has no clause after it");
        refused("a -", "- has no clause after it");
        refused("a NOT", "NOT has no clause after it");
        refused("(a !)", "! has no clause after it");
        refused("+", "+ has no clause after it");
        refused("NOT OR a", "OR right after NOT");
        refused("--a", "one prefix");
        refused("NOT -a", "one prefix");
        refused(":alice", "empty field name");
        refused("a..b:x", "empty part in the field path");
        refused(".a:x", "empty part");
        refused("a.:x", "empty part");
        refused("name:", "has nothing after the ':'");
        refused("name:   ", "has nothing after the ':'");
        refused("(name:)", "has nothing after the ':'");
        refused("name:^2", "has nothing after the ':'");
        refused("name:AND", "operator AND");
        refused("a:b:c", "':' must follow a field name");
        refused("\"a\":b", "':' must follow a field name");
        refused("name:!!!", "has no words");
        refused("\"!!\"", "has no words");
        refused("f:\"\"", "has no words");
        refused("&", "has no words");
        refused(&"x".repeat(101), "longer than 100 bytes");
        refused("/ab.*/", "regular expressions are not supported");
        refused("f:/ab/", "regular expressions are not supported");
    }

    #[test]
    fn limits() {
        let deepest = format!("{}a{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(parsed(&deepest), term("a"));
        let too_deep = format!(
            "{}a{}",
            "(".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        );
        refused(&too_deep, "nested deeper than 32");
        let field_groups = format!(
            "{}a{}",
            "f:(".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        );
        refused(&field_groups, "nested deeper than 32");
        refused(&"(".repeat(MAX_QUERY_BYTES), "nested deeper");
        refused(&"-(".repeat(MAX_QUERY_BYTES / 2), "nested deeper");

        let most = "a ".repeat(MAX_LEAVES);
        assert!(matches!(parsed(&most), Query::And(parts) if parts.len() == MAX_LEAVES));
        refused(&"a ".repeat(MAX_LEAVES + 1), "more than 1024 terms");
        refused(&"f:>1 ".repeat(MAX_LEAVES + 1), "more than 1024 terms");

        let longest = format!("{:<width$}", "a b", width = MAX_QUERY_BYTES);
        assert_eq!(parsed(&longest), Query::And(vec![term("a"), term("b")]));
        refused(&format!("{longest} "), "more than the 8192 allowed");
    }

    /// A small generator of arbitrary queries from the characters that matter, so every
    /// input is answered without a panic (the fuzz target does the same at length).
    #[test]
    fn any_input_is_answered_without_panicking() {
        const PIECES: [&str; 32] = [
            "a",
            "B",
            "42",
            "-",
            "+",
            "!",
            "(",
            ")",
            "\"",
            ":",
            "*",
            "?",
            "~",
            "^",
            "[",
            "]",
            "{",
            "}",
            " TO ",
            " AND ",
            " OR ",
            "NOT ",
            "&&",
            "||",
            "\\",
            "/",
            ".",
            ">",
            "<=",
            " ",
            "é",
            "2024-05-01",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut answered = 0;
        for _ in 0..20_000 {
            let len = next() % 12;
            let text: String = (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            match parse(&text) {
                Ok(_) => answered += 1,
                Err(SearchError::Syntax { problem, .. }) => assert!(!problem.is_empty()),
                #[allow(unreachable_patterns)]
                Err(other) => panic!("{text:?}: {other}"),
            }
        }
        assert!(answered > 1000, "only {answered} parsed");
    }
}
