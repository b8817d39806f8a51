//! Consul-compatible ACL rules and the authorizer built from them.
//!
//! A policy's rules text (Consul's HCL form or its JSON form) parses into [`Rules`]; a token's
//! policies merge into an [`Authorizer`] that answers each request's "may I" question. This is
//! pure logic: the node fetches tokens and policies, this module only decides.
//!
//! A rule repeated inside one policy (same resource, same name, or `operator`/`acl` twice) is
//! merged exactly as if it came from two policies: deny wins, else the highest level. That way
//! splitting a policy in two never changes what it grants.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;

/// Rules text of the built-in global-management policy. Kept as text (not a prebuilt
/// [`Rules`]) so it is shown and stored like any user policy.
pub const GLOBAL_MANAGEMENT_RULES: &str = r#"acl = "write"
operator = "write"
key_prefix "" { policy = "write" }
session_prefix "" { policy = "write" }
event_prefix "" { policy = "write" }
agent_prefix "" { policy = "write" }
node_prefix "" { policy = "write" }
query_prefix "" { policy = "write" }
service_prefix "" { policy = "write" intentions = "write" }
keyring = "write"
mesh = "write"
peering = "write"
"#;

/// The access a rule grants. Ordered for merging: Read < List < Write; Deny is separate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// Refuses everything for the name, whatever other rules grant for the same name.
    Deny,
    /// Read only.
    Read,
    /// Read, plus listing the keys under a prefix.
    List,
    /// Write, list and read.
    Write,
}

impl Access {
    /// Position in Read < List < Write; Deny sits below so it never satisfies a need.
    fn rank(self) -> u8 {
        match self {
            Access::Deny => 0,
            Access::Read => 1,
            Access::List => 2,
            Access::Write => 3,
        }
    }

    /// Two rules for the same name: an explicit deny is a deliberate veto, so it wins.
    fn merge(self, other: Access) -> Access {
        if self == Access::Deny || other == Access::Deny {
            Access::Deny
        } else if self.rank() >= other.rank() {
            self
        } else {
            other
        }
    }

    /// Whether this level covers `need` (never called with `need == Deny`).
    fn grants(self, need: Access) -> bool {
        self != Access::Deny && self.rank() >= need.rank()
    }

    fn parse(level: &str) -> Option<Access> {
        match level {
            "deny" => Some(Access::Deny),
            "read" => Some(Access::Read),
            "list" => Some(Access::List),
            "write" => Some(Access::Write),
            _ => None,
        }
    }
}

/// What the anonymous token (and any question no rule answers) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultPolicy {
    /// Unanswered questions are allowed (except ACL management).
    #[default]
    Allow,
    /// Unanswered questions are refused.
    Deny,
}

impl DefaultPolicy {
    /// The config-file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DefaultPolicy::Allow => "allow",
            DefaultPolicy::Deny => "deny",
        }
    }
}

impl fmt::Display for DefaultPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DefaultPolicy {
    type Err = RulesError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(DefaultPolicy::Allow),
            "deny" => Ok(DefaultPolicy::Deny),
            _ => Err(RulesError(format!(
                "invalid default policy {s:?} (expected \"allow\" or \"deny\")"
            ))),
        }
    }
}

/// One policy's rules, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// `key "exact" { policy = ... }`.
    pub keys: BTreeMap<String, Access>,
    /// `key_prefix "p" { policy = ... }`.
    pub key_prefixes: BTreeMap<String, Access>,
    /// `session "node" { policy = ... }`, by node name.
    pub sessions: BTreeMap<String, Access>,
    /// `session_prefix "p" { policy = ... }`, by node name.
    pub session_prefixes: BTreeMap<String, Access>,
    /// `event "name" { policy = ... }`; events are also the pub/sub channels.
    pub events: BTreeMap<String, Access>,
    /// `event_prefix "p" { policy = ... }`.
    pub event_prefixes: BTreeMap<String, Access>,
    /// `operator = "read" | "write" | "deny"`.
    pub operator: Option<Access>,
    /// `acl = "read" | "write" | "deny"`.
    pub acl: Option<Access>,
}

impl Rules {
    /// Folds `other` in with the cross-policy merge (deny wins, else highest).
    fn merge_from(&mut self, other: &Rules) {
        fn maps(into: &mut BTreeMap<String, Access>, from: &BTreeMap<String, Access>) {
            for (name, access) in from {
                merge_entry(into, name, *access);
            }
        }
        maps(&mut self.keys, &other.keys);
        maps(&mut self.key_prefixes, &other.key_prefixes);
        maps(&mut self.sessions, &other.sessions);
        maps(&mut self.session_prefixes, &other.session_prefixes);
        maps(&mut self.events, &other.events);
        maps(&mut self.event_prefixes, &other.event_prefixes);
        if let Some(access) = other.operator {
            merge_option(&mut self.operator, access);
        }
        if let Some(access) = other.acl {
            merge_option(&mut self.acl, access);
        }
    }
}

fn merge_entry(map: &mut BTreeMap<String, Access>, name: &str, access: Access) {
    match map.get_mut(name) {
        Some(existing) => *existing = existing.merge(access),
        None => {
            map.insert(name.to_owned(), access);
        }
    }
}

fn merge_option(slot: &mut Option<Access>, access: Access) {
    *slot = Some(slot.map_or(access, |existing| existing.merge(access)));
}

/// Why rules text was refused; the message names the construct and, where it can, the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RulesError(pub String);

fn err(line: usize, msg: impl fmt::Display) -> RulesError {
    RulesError(format!("line {line}: {msg}"))
}

/// Parses a policy's rules text: JSON when it starts with `{`, Consul's HCL otherwise.
pub fn parse_rules(text: &str) -> Result<Rules, RulesError> {
    let tokens = lex(text)?;
    let mut parser = Parser { tokens, pos: 0 };
    if text.trim_start().starts_with('{') {
        parser.json()
    } else {
        parser.hcl()
    }
}

// ---------------------------------------------------------------------------------------------
// Resources

/// The resources with per-name rules that Trireme enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    Key,
    KeyPrefix,
    Session,
    SessionPrefix,
    Event,
    EventPrefix,
}

impl Named {
    fn map(self, rules: &mut Rules) -> &mut BTreeMap<String, Access> {
        match self {
            Named::Key => &mut rules.keys,
            Named::KeyPrefix => &mut rules.key_prefixes,
            Named::Session => &mut rules.sessions,
            Named::SessionPrefix => &mut rules.session_prefixes,
            Named::Event => &mut rules.events,
            Named::EventPrefix => &mut rules.event_prefixes,
        }
    }

    /// Listing only means something for keys, so "list" elsewhere is most likely a mistake.
    fn allows_list(self) -> bool {
        matches!(self, Named::Key | Named::KeyPrefix)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Named(Named),
    Operator,
    Acl,
    /// Consul resources Trireme has no use for; accepted so Consul users' policies load.
    Ignored,
}

fn classify(name: &str) -> Option<Kind> {
    Some(match name {
        "key" => Kind::Named(Named::Key),
        "key_prefix" => Kind::Named(Named::KeyPrefix),
        "session" => Kind::Named(Named::Session),
        "session_prefix" => Kind::Named(Named::SessionPrefix),
        "event" => Kind::Named(Named::Event),
        "event_prefix" => Kind::Named(Named::EventPrefix),
        "operator" => Kind::Operator,
        "acl" => Kind::Acl,
        "agent" | "agent_prefix" | "node" | "node_prefix" | "query" | "query_prefix"
        | "service" | "service_prefix" | "keyring" | "mesh" | "peering" => Kind::Ignored,
        _ => return None,
    })
}

/// `key_prefix "app/"` or `operator`, for error messages.
fn describe(resource: &str, label: Option<&str>) -> String {
    match label {
        Some(label) => format!("{resource} {label:?}"),
        None => resource.to_owned(),
    }
}

fn level(value: &str, allow_list: bool, what: &str, line: usize) -> Result<Access, RulesError> {
    match Access::parse(value) {
        Some(Access::List) if !allow_list => Err(err(
            line,
            format!("invalid policy level \"list\" for {what} (list applies to keys only)"),
        )),
        Some(access) => Ok(access),
        None => Err(err(
            line,
            format!("invalid policy level {value:?} for {what}"),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer (shared by both forms; the token set is small enough for one)

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// A bare word: an HCL attribute or rule name, or a JSON number/true/false/null.
    Ident(String),
    Str(String),
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Equals,
    Colon,
    Comma,
    End,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(word) => write!(f, "{word:?}"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::LBrace => f.write_str("\"{\""),
            Tok::RBrace => f.write_str("\"}\""),
            Tok::LBracket => f.write_str("\"[\""),
            Tok::RBracket => f.write_str("\"]\""),
            Tok::Equals => f.write_str("\"=\""),
            Tok::Colon => f.write_str("\":\""),
            Tok::Comma => f.write_str("\",\""),
            Tok::End => f.write_str("end of input"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+')
}

fn lex(text: &str) -> Result<Vec<Token>, RulesError> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        let tok = match c {
            '\n' => {
                line += 1;
                continue;
            }
            c if c.is_whitespace() => continue,
            '#' => {
                while chars.next_if(|&c| c != '\n').is_some() {}
                continue;
            }
            '/' if chars.next_if_eq(&'/').is_some() => {
                while chars.next_if(|&c| c != '\n').is_some() {}
                continue;
            }
            '/' if chars.next_if_eq(&'*').is_some() => {
                let start = line;
                let mut prev = '\0';
                loop {
                    match chars.next() {
                        None => return Err(err(start, "unterminated block comment")),
                        Some('/') if prev == '*' => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            prev = c;
                        }
                    }
                }
                continue;
            }
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            '[' => Tok::LBracket,
            ']' => Tok::RBracket,
            '=' => Tok::Equals,
            ':' => Tok::Colon,
            ',' => Tok::Comma,
            '"' => Tok::Str(lex_string(&mut chars, line)?),
            c if is_word_char(c) => {
                let mut word = String::from(c);
                while let Some(c) = chars.next_if(|&c| is_word_char(c)) {
                    word.push(c);
                }
                Tok::Ident(word)
            }
            c => return Err(err(line, format!("unexpected character {c:?}"))),
        };
        tokens.push(Token { tok, line });
    }
    tokens.push(Token {
        tok: Tok::End,
        line,
    });
    Ok(tokens)
}

/// The rest of a double-quoted string, the opening quote already consumed. Strings may not
/// span lines (as in HCL), so a missing closing quote is reported on its own line.
fn lex_string(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    line: usize,
) -> Result<String, RulesError> {
    let unterminated = || err(line, "unterminated string");
    let mut out = String::new();
    loop {
        match chars.next().ok_or_else(unterminated)? {
            '"' => return Ok(out),
            '\n' => return Err(unterminated()),
            '\\' => {
                let escaped = match chars.next().ok_or_else(unterminated)? {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'u' => lex_unicode(chars, line)?,
                    other => {
                        return Err(err(line, format!("invalid escape \"\\{other}\" in string")));
                    }
                };
                out.push(escaped);
            }
            c => out.push(c),
        }
    }
}

/// `\uXXXX`, including a UTF-16 surrogate pair written as two escapes (JSON's way).
fn lex_unicode(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    line: usize,
) -> Result<char, RulesError> {
    let bad = || err(line, "invalid \\u escape in string");
    let hex4 = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        let mut value = 0u32;
        for _ in 0..4 {
            let digit = chars.next().and_then(|c| c.to_digit(16)).ok_or_else(bad)?;
            value = value * 16 + digit;
        }
        Ok::<u32, RulesError>(value)
    };
    let first = hex4(chars)?;
    let code = if (0xD800..0xDC00).contains(&first) {
        if chars.next() != Some('\\') || chars.next() != Some('u') {
            return Err(bad());
        }
        let second = hex4(chars)?;
        if !(0xDC00..0xE000).contains(&second) {
            return Err(bad());
        }
        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
    } else {
        first
    };
    char::from_u32(code).ok_or_else(bad)
}

// ---------------------------------------------------------------------------------------------
// Parsers. Blocks nest at most one level in HCL (three object levels in JSON), so both are
// plain loops; only skipping an ignored JSON value meets arbitrary nesting, handled with a stack.

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

/// One `name = value` inside a block.
struct Attr {
    name: String,
    value: String,
    quoted: bool,
    line: usize,
}

enum Body {
    Value { value: String, quoted: bool },
    Block(Vec<Attr>),
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.tokens.get(self.pos).map_or(&Tok::End, |t| &t.tok)
    }

    /// Takes the next token; at the end keeps answering `End`.
    fn next(&mut self) -> Token {
        match self.tokens.get_mut(self.pos) {
            Some(token) if token.tok != Tok::End => {
                self.pos += 1;
                Token {
                    tok: std::mem::replace(&mut token.tok, Tok::End),
                    line: token.line,
                }
            }
            Some(token) => token.clone(),
            None => Token {
                tok: Tok::End,
                line: 0,
            },
        }
    }

    fn hcl(&mut self) -> Result<Rules, RulesError> {
        let mut rules = Rules::default();
        loop {
            let Token { tok, line } = self.next();
            let resource = match tok {
                Tok::End => return Ok(rules),
                Tok::Comma => continue,
                Tok::Ident(word) => word,
                other => return Err(err(line, format!("unexpected {other}, expected a rule"))),
            };
            let kind = classify(&resource)
                .ok_or_else(|| err(line, format!("unknown rule {resource:?}")))?;
            let label = match self.peek() {
                Tok::Str(_) => match self.next().tok {
                    Tok::Str(label) => Some(label),
                    _ => None,
                },
                _ => None,
            };
            let what = describe(&resource, label.as_deref());
            if let Tok::Str(_) = self.peek() {
                return Err(err(line, format!("too many names for {what}")));
            }
            let next = self.next();
            let body = match next.tok {
                Tok::Equals => {
                    let value = self.next();
                    match value.tok {
                        Tok::Str(value) => Body::Value {
                            value,
                            quoted: true,
                        },
                        Tok::Ident(value) => Body::Value {
                            value,
                            quoted: false,
                        },
                        Tok::LBrace => Body::Block(self.hcl_block(&what, value.line)?),
                        Tok::End => return Err(err(line, format!("missing value for {what}"))),
                        other => {
                            return Err(err(
                                value.line,
                                format!("unexpected {other} as the value of {what}"),
                            ));
                        }
                    }
                }
                Tok::LBrace => Body::Block(self.hcl_block(&what, next.line)?),
                _ => {
                    let expected = match kind {
                        Kind::Named(_) => "\"{\"",
                        Kind::Operator | Kind::Acl => "\"=\"",
                        Kind::Ignored => "\"=\" or \"{\"",
                    };
                    return Err(err(line, format!("missing {expected} after {what}")));
                }
            };
            apply_hcl(
                &mut rules,
                kind,
                &resource,
                label.as_deref(),
                &what,
                body,
                line,
            )?;
        }
    }

    /// A block body, the `{` already consumed: flat `name = value` attributes up to `}`.
    fn hcl_block(&mut self, what: &str, open_line: usize) -> Result<Vec<Attr>, RulesError> {
        let unterminated = || err(open_line, format!("unterminated block for {what}"));
        let mut attrs = Vec::new();
        loop {
            let Token { tok, line } = self.next();
            let name = match tok {
                Tok::RBrace => return Ok(attrs),
                Tok::Comma => continue,
                Tok::Ident(name) | Tok::Str(name) => name,
                Tok::End => return Err(unterminated()),
                other => return Err(err(line, format!("unexpected {other} in {what}"))),
            };
            let eq = self.next();
            match eq.tok {
                Tok::Equals => {}
                Tok::End => return Err(unterminated()),
                _ => {
                    return Err(err(
                        eq.line,
                        format!("missing \"=\" after {name:?} in {what}"),
                    ));
                }
            }
            let value = self.next();
            let (value, quoted) = match value.tok {
                Tok::Str(value) => (value, true),
                Tok::Ident(value) => (value, false),
                Tok::End => return Err(unterminated()),
                other => {
                    return Err(err(
                        value.line,
                        format!("unexpected {other} as the value of {name:?} in {what}"),
                    ));
                }
            };
            attrs.push(Attr {
                name,
                value,
                quoted,
                line,
            });
        }
    }

    fn json(&mut self) -> Result<Rules, RulesError> {
        let mut rules = Rules::default();
        self.json_object("the policy", |p, resource, line| {
            let kind = classify(&resource)
                .ok_or_else(|| err(line, format!("unknown rule {resource:?}")))?;
            match kind {
                Kind::Named(named) => p.json_named(&mut rules, named, &resource),
                Kind::Operator | Kind::Acl => {
                    let Token { tok, line } = p.next();
                    let Tok::Str(value) = tok else {
                        return Err(err(
                            line,
                            format!(
                                "{resource} takes a level string, like \"{resource}\": \"read\""
                            ),
                        ));
                    };
                    let access = level(&value, false, &resource, line)?;
                    let slot = if kind == Kind::Acl {
                        &mut rules.acl
                    } else {
                        &mut rules.operator
                    };
                    merge_option(slot, access);
                    Ok(())
                }
                Kind::Ignored => p.skip_value(&resource),
            }
        })?;
        let Token { tok, line } = self.next();
        match tok {
            Tok::End => Ok(rules),
            other => Err(err(line, format!("unexpected {other} after the policy"))),
        }
    }

    /// `{"name": {"policy": "level"}, ...}` for one resource.
    fn json_named(
        &mut self,
        rules: &mut Rules,
        named: Named,
        resource: &str,
    ) -> Result<(), RulesError> {
        self.json_object(resource, |p, label, open_line| {
            let what = describe(resource, Some(&label));
            let mut policy = None;
            p.json_object(&what, |p, attr, line| {
                if attr != "policy" {
                    return Err(err(line, format!("unknown attribute {attr:?} in {what}")));
                }
                if policy.is_some() {
                    return Err(err(line, format!("duplicate policy in {what}")));
                }
                let Token { tok, line } = p.next();
                let Tok::Str(value) = tok else {
                    return Err(err(line, format!("policy in {what} must be a string")));
                };
                policy = Some(level(&value, named.allows_list(), &what, line)?);
                Ok(())
            })?;
            let access =
                policy.ok_or_else(|| err(open_line, format!("missing policy in {what}")))?;
            merge_entry(named.map(rules), &label, access);
            Ok(())
        })
    }

    /// A JSON object whose keys are strings; `member` parses each value.
    fn json_object(
        &mut self,
        what: &str,
        mut member: impl FnMut(&mut Self, String, usize) -> Result<(), RulesError>,
    ) -> Result<(), RulesError> {
        let open = self.next();
        if open.tok != Tok::LBrace {
            return Err(err(
                open.line,
                format!("expected \"{{\" for {what}, found {}", open.tok),
            ));
        }
        let unterminated = || err(open.line, format!("unterminated object for {what}"));
        if *self.peek() == Tok::RBrace {
            self.next();
            return Ok(());
        }
        loop {
            let Token { tok, line } = self.next();
            let key = match tok {
                Tok::Str(key) => key,
                Tok::End => return Err(unterminated()),
                other => {
                    return Err(err(
                        line,
                        format!("unexpected {other} in {what}, expected a quoted name"),
                    ));
                }
            };
            let colon = self.next();
            match colon.tok {
                Tok::Colon => {}
                Tok::End => return Err(unterminated()),
                _ => {
                    return Err(err(
                        colon.line,
                        format!("missing \":\" after {key:?} in {what}"),
                    ));
                }
            }
            member(self, key, line)?;
            let Token { tok, line } = self.next();
            match tok {
                Tok::Comma => {}
                Tok::RBrace => return Ok(()),
                Tok::End => return Err(unterminated()),
                other => {
                    return Err(err(
                        line,
                        format!("unexpected {other} in {what}, expected \",\" or \"}}\""),
                    ));
                }
            }
        }
    }

    /// Skips one JSON value of an ignored resource, keeping open brackets on a heap stack
    /// instead of recursing, since the nesting depth is the user's to choose.
    fn skip_value(&mut self, what: &str) -> Result<(), RulesError> {
        let mut open: Vec<Tok> = Vec::new();
        loop {
            let Token { tok, line } = self.next();
            match tok {
                Tok::LBrace => open.push(Tok::RBrace),
                Tok::LBracket => open.push(Tok::RBracket),
                Tok::RBrace | Tok::RBracket if open.last() == Some(&tok) => {
                    open.pop();
                }
                Tok::Str(_) | Tok::Ident(_) => {}
                Tok::Colon | Tok::Comma if !open.is_empty() => {}
                Tok::End => return Err(err(line, format!("unterminated value for {what}"))),
                other => {
                    return Err(err(
                        line,
                        format!("unexpected {other} in the value of {what}"),
                    ));
                }
            }
            if open.is_empty() {
                return Ok(());
            }
        }
    }
}

/// Checks one parsed HCL rule's shape and records it.
fn apply_hcl(
    rules: &mut Rules,
    kind: Kind,
    resource: &str,
    label: Option<&str>,
    what: &str,
    body: Body,
    line: usize,
) -> Result<(), RulesError> {
    match kind {
        Kind::Ignored => Ok(()),
        Kind::Named(named) => {
            let Some(label) = label else {
                return Err(err(
                    line,
                    format!(
                        "{resource} needs a quoted name, like {resource} \"app/\" {{ policy = \"read\" }}"
                    ),
                ));
            };
            let Body::Block(attrs) = body else {
                return Err(err(
                    line,
                    format!("{what} must be a block, like {what} {{ policy = \"read\" }}"),
                ));
            };
            let mut policy = None;
            for attr in attrs {
                if attr.name != "policy" {
                    return Err(err(
                        attr.line,
                        format!("unknown attribute {:?} in {what}", attr.name),
                    ));
                }
                if policy.is_some() {
                    return Err(err(attr.line, format!("duplicate policy in {what}")));
                }
                if !attr.quoted {
                    return Err(err(
                        attr.line,
                        format!("policy in {what} must be a quoted string"),
                    ));
                }
                policy = Some(level(&attr.value, named.allows_list(), what, attr.line)?);
            }
            let access = policy.ok_or_else(|| err(line, format!("missing policy in {what}")))?;
            merge_entry(named.map(rules), label, access);
            Ok(())
        }
        Kind::Operator | Kind::Acl => {
            if label.is_some() {
                return Err(err(
                    line,
                    format!("{resource} takes no name, like {resource} = \"read\""),
                ));
            }
            let Body::Value {
                value,
                quoted: true,
            } = body
            else {
                return Err(err(
                    line,
                    format!("{resource} takes a quoted level, like {resource} = \"read\""),
                ));
            };
            let access = level(&value, false, resource, line)?;
            let slot = if kind == Kind::Acl {
                &mut rules.acl
            } else {
                &mut rules.operator
            };
            merge_option(slot, access);
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Authorizer

/// Per-name rules of one resource, laid out once so each request's lookup is cheap.
#[derive(Debug, Clone, Default)]
struct NameTable {
    exact: BTreeMap<Vec<u8>, Access>,
    /// Longest first, so the first match is the longest; equal-length prefixes never both match.
    prefixes: Vec<(Vec<u8>, Access)>,
    /// Names of every rule (exact or prefix) granting less than write, for `key_write_prefix`.
    below_write: BTreeSet<Vec<u8>>,
    /// Names of every rule granting less than list, for `key_list_prefix`.
    below_list: BTreeSet<Vec<u8>>,
    /// Names of every rule granting less than read, for `event_read_prefix`.
    below_read: BTreeSet<Vec<u8>>,
}

impl NameTable {
    fn new(exact: &BTreeMap<String, Access>, prefixes: &BTreeMap<String, Access>) -> Self {
        let mut sorted: Vec<(Vec<u8>, Access)> = prefixes
            .iter()
            .map(|(name, access)| (name.as_bytes().to_vec(), *access))
            .collect();
        sorted.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let below = |need: Access| -> BTreeSet<Vec<u8>> {
            exact
                .iter()
                .chain(prefixes.iter())
                .filter(|(_, access)| !access.grants(need))
                .map(|(name, _)| name.as_bytes().to_vec())
                .collect()
        };
        let below_write = below(Access::Write);
        let below_list = below(Access::List);
        let below_read = below(Access::Read);
        NameTable {
            exact: exact
                .iter()
                .map(|(name, access)| (name.as_bytes().to_vec(), *access))
                .collect(),
            prefixes: sorted,
            below_write,
            below_list,
            below_read,
        }
    }

    fn longest_prefix(&self, name: &[u8]) -> Option<Access> {
        self.prefixes
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
            .map(|(_, access)| *access)
    }

    /// Exact rule, else longest prefix rule, else `None` (the default decides).
    fn lookup(&self, name: &[u8]) -> Option<Access> {
        match self.exact.get(name) {
            Some(access) => Some(*access),
            None => self.longest_prefix(name),
        }
    }

    /// Whether any rule at or under `prefix` grants less than `need`.
    fn restricted_under(&self, prefix: &[u8], need: Access) -> bool {
        let names = match need {
            Access::Write => &self.below_write,
            Access::List => &self.below_list,
            Access::Read | Access::Deny => &self.below_read,
        };
        names
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .next()
            .is_some_and(|name| name.starts_with(prefix))
    }

    /// `need` on `prefix` (from prefix rules or the default) and on everything under it.
    fn everything_under(&self, prefix: &[u8], need: Access, default: DefaultPolicy) -> bool {
        let granted = match self.longest_prefix(prefix) {
            Some(access) => access.grants(need),
            None => default == DefaultPolicy::Allow,
        };
        granted && !self.restricted_under(prefix, need)
    }
}

/// Answers "may this token do X" for one token, built from its policies' rules.
#[derive(Debug, Clone)]
pub struct Authorizer {
    keys: NameTable,
    sessions: NameTable,
    events: NameTable,
    operator: Option<Access>,
    acl: Option<Access>,
    default: DefaultPolicy,
}

impl Authorizer {
    /// Everything allowed, including ACL management (ACLs disabled).
    pub fn allow_all() -> Self {
        let everything: BTreeMap<String, Access> = [(String::new(), Access::Write)].into();
        let rules = Rules {
            key_prefixes: everything.clone(),
            session_prefixes: everything.clone(),
            event_prefixes: everything,
            operator: Some(Access::Write),
            acl: Some(Access::Write),
            ..Rules::default()
        };
        Authorizer::new(&[&rules], DefaultPolicy::Allow)
    }

    /// The merge of `policies` (deny wins, else the highest level, per resource and name);
    /// questions no rule answers get `default`.
    pub fn new(policies: &[&Rules], default: DefaultPolicy) -> Self {
        let mut merged = Rules::default();
        for rules in policies {
            merged.merge_from(rules);
        }
        Authorizer {
            keys: NameTable::new(&merged.keys, &merged.key_prefixes),
            sessions: NameTable::new(&merged.sessions, &merged.session_prefixes),
            events: NameTable::new(&merged.events, &merged.event_prefixes),
            operator: merged.operator,
            acl: merged.acl,
            default,
        }
    }

    fn decide(&self, found: Option<Access>, need: Access) -> bool {
        match found {
            Some(access) => access.grants(need),
            None => self.default == DefaultPolicy::Allow,
        }
    }

    /// Whether the token may read `key`.
    pub fn key_read(&self, key: &[u8]) -> bool {
        self.decide(self.keys.lookup(key), Access::Read)
    }

    /// Whether the token may list the keys under `prefix`.
    pub fn key_list(&self, prefix: &[u8]) -> bool {
        self.decide(self.keys.lookup(prefix), Access::List)
    }

    /// Whether the token may write `key`.
    pub fn key_write(&self, key: &[u8]) -> bool {
        self.decide(self.keys.lookup(key), Access::Write)
    }

    /// Write on `prefix` AND no rule for any key or prefix under `prefix` grants less than
    /// write (Deny/Read/List); used for recursive deletes and FLUSHALL (prefix "").
    ///
    /// The write on `prefix` comes from prefix rules (or the default), not from an exact `key`
    /// rule for the same name, since the delete reaches keys that rule does not cover; an exact
    /// rule named `prefix` itself counts as "under" (that key is deleted too).
    pub fn key_write_prefix(&self, prefix: &[u8]) -> bool {
        self.keys
            .everything_under(prefix, Access::Write, self.default)
    }

    /// List (and so read) on every key under `prefix`, with no rule under it that grants
    /// less: a listing of the whole keyspace (`KEYS`, `SCAN`) shows nothing a rule hides.
    pub fn key_list_prefix(&self, prefix: &[u8]) -> bool {
        self.keys
            .everything_under(prefix, Access::List, self.default)
    }

    /// Read on every event (channel) under `prefix` with no rule under it that grants less:
    /// a pattern subscription may receive any of them.
    pub fn event_read_prefix(&self, prefix: &[u8]) -> bool {
        self.events
            .everything_under(prefix, Access::Read, self.default)
    }

    /// Whether the token may read cluster operator state.
    pub fn operator_read(&self) -> bool {
        self.decide(self.operator, Access::Read)
    }

    /// Whether the token may change cluster operator state.
    pub fn operator_write(&self) -> bool {
        self.decide(self.operator, Access::Write)
    }

    /// Whether the token may read ACL tokens and policies; the default never grants this.
    pub fn acl_read(&self) -> bool {
        self.acl.is_some_and(|access| access.grants(Access::Read))
    }

    /// Whether the token may manage ACL tokens and policies; the default never grants this.
    pub fn acl_write(&self) -> bool {
        self.acl.is_some_and(|access| access.grants(Access::Write))
    }

    /// Whether the token may read sessions on `node`.
    pub fn session_read(&self, node: &str) -> bool {
        self.decide(self.sessions.lookup(node.as_bytes()), Access::Read)
    }

    /// Whether the token may create or destroy sessions on `node`.
    pub fn session_write(&self, node: &str) -> bool {
        self.decide(self.sessions.lookup(node.as_bytes()), Access::Write)
    }

    /// Whether the token may receive event (or pub/sub channel) `name`.
    pub fn event_read(&self, name: &[u8]) -> bool {
        self.decide(self.events.lookup(name), Access::Read)
    }

    /// Whether the token may fire event (or publish to channel) `name`.
    pub fn event_write(&self, name: &[u8]) -> bool {
        self.decide(self.events.lookup(name), Access::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HCL: &str = r#"
# comment
// another comment
/* block
   comment */
key_prefix "" { policy = "read" }
key_prefix "app/" {
  policy = "write"
}
key "app/secret" { policy = "deny" }
key_prefix "logs/" { policy = "list" }
session_prefix "" { policy = "write" }
session "db-1" { policy = "read" }
event_prefix "chat." { policy = "read" }
event "chat.admin" { policy = "write" }
operator = "read"
acl = "write"
service_prefix "" { policy = "read" intentions = "read" }   # accepted and ignored
node "n1" { policy = "write" }, keyring = "read"
"#;

    const JSON: &str = r#"{
  "key_prefix": {"": {"policy": "read"}, "app/": {"policy": "write"}, "logs/": {"policy": "list"}},
  "key": {"app/secret": {"policy": "deny"}},
  "session_prefix": {"": {"policy": "write"}},
  "session": {"db-1": {"policy": "read"}},
  "event_prefix": {"chat.": {"policy": "read"}},
  "event": {"chat.admin": {"policy": "write"}},
  "operator": "read",
  "acl": "write",
  "service_prefix": {"": {"policy": "read", "intentions": "read"}},
  "node": {"n1": {"policy": "write"}},
  "keyring": "read",
  "query": [{"x": {"policy": "read", "n": 1, "ok": true, "none": null}}]
}"#;

    fn parse(text: &str) -> Rules {
        match parse_rules(text) {
            Ok(rules) => rules,
            Err(e) => panic!("{text:?} should parse: {e}"),
        }
    }

    fn auth(texts: &[&str], default: DefaultPolicy) -> Authorizer {
        let rules: Vec<Rules> = texts.iter().map(|t| parse(t)).collect();
        let refs: Vec<&Rules> = rules.iter().collect();
        Authorizer::new(&refs, default)
    }

    fn error(text: &str) -> String {
        match parse_rules(text) {
            Ok(rules) => panic!("{text:?} should be refused, parsed to {rules:?}"),
            Err(e) => e.0,
        }
    }

    fn map(entries: &[(&str, Access)]) -> BTreeMap<String, Access> {
        entries.iter().map(|(n, a)| (n.to_string(), *a)).collect()
    }

    #[test]
    fn hcl_and_json_parse_to_the_same_rules() {
        let expected = Rules {
            keys: map(&[("app/secret", Access::Deny)]),
            key_prefixes: map(&[
                ("", Access::Read),
                ("app/", Access::Write),
                ("logs/", Access::List),
            ]),
            sessions: map(&[("db-1", Access::Read)]),
            session_prefixes: map(&[("", Access::Write)]),
            events: map(&[("chat.admin", Access::Write)]),
            event_prefixes: map(&[("chat.", Access::Read)]),
            operator: Some(Access::Read),
            acl: Some(Access::Write),
        };
        assert_eq!(parse(HCL), expected);
        assert_eq!(parse(JSON), expected);
    }

    #[test]
    fn empty_and_comment_only_text_is_empty_rules() {
        assert_eq!(parse(""), Rules::default());
        assert_eq!(parse("  \n\t"), Rules::default());
        assert_eq!(parse("# a\n// b\n/* c\n d */\n"), Rules::default());
        assert_eq!(parse("{}"), Rules::default());
        assert_eq!(parse(" \n { } \n"), Rules::default());
    }

    #[test]
    fn hcl_layout_variants() {
        let expected = Rules {
            key_prefixes: map(&[("a", Access::Read)]),
            ..Rules::default()
        };
        for text in [
            r#"key_prefix "a" { policy = "read" }"#,
            "key_prefix \"a\" {\n policy\n =\n \"read\"\n}",
            r#"key_prefix "a" { policy = "read", }"#,
            r#"key_prefix "a" = { policy = "read" }"#,
            r#"key_prefix "a" { "policy" = "read" }"#,
            r#"key_prefix "a"{policy="read"}"#,
        ] {
            assert_eq!(parse(text), expected, "{text}");
        }
    }

    #[test]
    fn string_escapes() {
        let rules = parse(r#"key "a\"b\\c\n\t\u00e9\ud83d\ude00/" { policy = "read" }"#);
        assert!(rules.keys.contains_key("a\"b\\c\n\t\u{e9}\u{1F600}/"));
        let rules = parse(r#"{"key": {"\u0041\/": {"policy": "deny"}}}"#);
        assert_eq!(rules.keys, map(&[("A/", Access::Deny)]));
    }

    #[test]
    fn duplicate_rules_in_one_policy_merge() {
        let rules = parse(
            r#"key "k" { policy = "read" }
               key "k" { policy = "write" }
               key_prefix "p" { policy = "write" }
               key_prefix "p" { policy = "deny" }
               operator = "write"
               operator = "read""#,
        );
        assert_eq!(rules.keys, map(&[("k", Access::Write)]));
        assert_eq!(rules.key_prefixes, map(&[("p", Access::Deny)]));
        assert_eq!(rules.operator, Some(Access::Write));
        let rules = parse(r#"{"acl": "write", "acl": "deny"}"#);
        assert_eq!(rules.acl, Some(Access::Deny));
    }

    #[test]
    fn longest_prefix_wins() {
        let a = auth(
            &[r#"key_prefix "" { policy = "deny" }
                 key_prefix "app/" { policy = "read" }
                 key_prefix "app/cfg/" { policy = "write" }
                 key_prefix "app/cfg/locked/" { policy = "deny" }"#],
            DefaultPolicy::Allow,
        );
        assert!(!a.key_read(b"other"));
        assert!(a.key_read(b"app/x") && !a.key_write(b"app/x"));
        assert!(a.key_write(b"app/cfg/x"));
        assert!(!a.key_read(b"app/cfg/locked/x"));
        assert!(a.key_write(b"app/cfg/locked"));
        assert!(!a.key_read(b"app"));
    }

    #[test]
    fn exact_beats_prefix() {
        let a = auth(
            &[r#"key_prefix "app/" { policy = "write" }
                 key "app/secret" { policy = "deny" }
                 key "app" { policy = "read" }"#],
            DefaultPolicy::Deny,
        );
        assert!(!a.key_read(b"app/secret"));
        assert!(a.key_write(b"app/secret2"));
        assert!(a.key_write(b"app/secre"));
        assert!(a.key_read(b"app") && !a.key_write(b"app"));
        assert!(!a.key_read(b"apps"));
    }

    #[test]
    fn deny_beats_write_across_policies() {
        let a = auth(
            &[
                r#"key_prefix "app/" { policy = "write" } operator = "write""#,
                r#"key_prefix "app/" { policy = "deny" } operator = "deny""#,
            ],
            DefaultPolicy::Allow,
        );
        assert!(!a.key_read(b"app/x"));
        assert!(!a.operator_read());
        // Same again in the other order.
        let a = auth(
            &[
                r#"key "k" { policy = "deny" }"#,
                r#"key "k" { policy = "write" }"#,
            ],
            DefaultPolicy::Allow,
        );
        assert!(!a.key_read(b"k"));
    }

    #[test]
    fn write_beats_read_across_policies() {
        let a = auth(
            &[
                r#"key_prefix "app/" { policy = "read" } session "n" { policy = "read" }"#,
                r#"key_prefix "app/" { policy = "write" } session "n" { policy = "write" }"#,
                r#"key_prefix "app/" { policy = "list" }"#,
            ],
            DefaultPolicy::Deny,
        );
        assert!(a.key_write(b"app/x"));
        assert!(a.session_write("n"));
    }

    #[test]
    fn different_names_stay_separate_after_merge() {
        let a = auth(
            &[
                r#"key_prefix "app/" { policy = "write" }"#,
                r#"key_prefix "app/ro/" { policy = "read" }"#,
            ],
            DefaultPolicy::Deny,
        );
        assert!(a.key_write(b"app/x"));
        assert!(a.key_read(b"app/ro/x") && !a.key_write(b"app/ro/x"));
    }

    #[test]
    fn list_grants_read_but_not_write() {
        let a = auth(
            &[r#"key_prefix "l/" { policy = "list" }
                          key_prefix "r/" { policy = "read" }"#],
            DefaultPolicy::Deny,
        );
        assert!(a.key_read(b"l/x") && a.key_list(b"l/") && !a.key_write(b"l/x"));
        assert!(a.key_read(b"r/x") && !a.key_list(b"r/") && !a.key_write(b"r/x"));
        let w = auth(
            &[r#"key_prefix "" { policy = "write" }"#],
            DefaultPolicy::Deny,
        );
        assert!(w.key_read(b"x") && w.key_list(b"") && w.key_write(b"x"));
    }

    #[test]
    fn key_write_prefix_needs_write_all_the_way_down() {
        let open = auth(
            &[r#"key_prefix "" { policy = "write" }"#],
            DefaultPolicy::Deny,
        );
        assert!(open.key_write_prefix(b""));
        assert!(open.key_write_prefix(b"app/"));

        let with_deny = auth(
            &[r#"key_prefix "" { policy = "write" }
                 key "app/secret" { policy = "deny" }"#],
            DefaultPolicy::Deny,
        );
        assert!(!with_deny.key_write_prefix(b""));
        assert!(!with_deny.key_write_prefix(b"app/"));
        assert!(!with_deny.key_write_prefix(b"app/secret"));
        assert!(with_deny.key_write_prefix(b"app/x"));
        assert!(with_deny.key_write_prefix(b"b"));

        let with_read = auth(
            &[r#"key_prefix "" { policy = "write" }
                 key_prefix "cfg/ro/" { policy = "read" }
                 key_prefix "logs/" { policy = "list" }"#],
            DefaultPolicy::Allow,
        );
        assert!(!with_read.key_write_prefix(b""));
        assert!(!with_read.key_write_prefix(b"cfg/"));
        assert!(!with_read.key_write_prefix(b"cfg/ro/"));
        assert!(!with_read.key_write_prefix(b"logs/"));
        assert!(with_read.key_write_prefix(b"cfg/rw/"));

        // The exact rule on the prefix's own name does not cover the keys below it.
        let exact_only = auth(&[r#"key "app/" { policy = "write" }"#], DefaultPolicy::Deny);
        assert!(exact_only.key_write(b"app/"));
        assert!(!exact_only.key_write_prefix(b"app/"));

        // Default allow with no rules: allowed; default deny: refused.
        assert!(auth(&[], DefaultPolicy::Allow).key_write_prefix(b""));
        assert!(!auth(&[], DefaultPolicy::Deny).key_write_prefix(b""));
    }

    #[test]
    fn default_allow_and_deny() {
        let allow = auth(&[r#"key "x" { policy = "deny" }"#], DefaultPolicy::Allow);
        assert!(allow.key_write(b"y") && allow.key_list(b"") && !allow.key_read(b"x"));
        assert!(allow.operator_write() && allow.session_write("n") && allow.event_write(b"e"));
        let deny = auth(&[r#"key "x" { policy = "write" }"#], DefaultPolicy::Deny);
        assert!(!deny.key_read(b"y") && deny.key_write(b"x"));
        assert!(!deny.operator_read() && !deny.session_read("n") && !deny.event_read(b"e"));
    }

    #[test]
    fn acl_is_never_granted_by_default() {
        let allow = auth(&[], DefaultPolicy::Allow);
        assert!(!allow.acl_read() && !allow.acl_write());
        let read = auth(&[r#"acl = "read""#], DefaultPolicy::Allow);
        assert!(read.acl_read() && !read.acl_write());
        let write = auth(&[r#"acl = "write""#], DefaultPolicy::Deny);
        assert!(write.acl_read() && write.acl_write());
        let deny = auth(&[r#"acl = "deny""#], DefaultPolicy::Allow);
        assert!(!deny.acl_read() && !deny.acl_write());
        let all = Authorizer::allow_all();
        assert!(all.acl_read() && all.acl_write() && all.operator_write());
        assert!(all.key_write_prefix(b"") && all.key_write(b"\xff"));
        assert!(all.session_write("n") && all.event_write(b"e"));
    }

    #[test]
    fn operator_rules() {
        let read = auth(&[r#"operator = "read""#], DefaultPolicy::Deny);
        assert!(read.operator_read() && !read.operator_write());
        let write = auth(&[r#"operator = "write""#], DefaultPolicy::Deny);
        assert!(write.operator_read() && write.operator_write());
        let deny = auth(&[r#"operator = "deny""#], DefaultPolicy::Allow);
        assert!(!deny.operator_read() && !deny.operator_write());
    }

    #[test]
    fn sessions_and_events() {
        let a = auth(&[HCL], DefaultPolicy::Deny);
        assert!(a.session_write("web-1") && a.session_read("db-1") && !a.session_write("db-1"));
        assert!(a.event_read(b"chat.room") && !a.event_write(b"chat.room"));
        assert!(a.event_write(b"chat.admin"));
        assert!(!a.event_read(b"news"));
        assert!(!a.event_read(b"chat\xff"));
    }

    #[test]
    fn non_utf8_keys() {
        let a = auth(
            &[r#"key_prefix "app/" { policy = "write" }"#],
            DefaultPolicy::Deny,
        );
        assert!(a.key_write(b"app/\xff\xfe"));
        assert!(!a.key_read(b"\xff\xfeapp/"));
        let a = auth(
            &[r#"key_prefix "app/" { policy = "deny" }"#],
            DefaultPolicy::Allow,
        );
        assert!(a.key_write(b"\xff\xfe"));
        assert!(!a.key_read(b"app/\x80"));
        let a = auth(
            &[r#"key_prefix "\u00e9" { policy = "write" }"#],
            DefaultPolicy::Deny,
        );
        assert!(a.key_write(b"\xc3\xa9\xff"));
        assert!(!a.key_write(b"\xc3"));
    }

    #[test]
    fn global_management_grants_everything() {
        let rules = parse(GLOBAL_MANAGEMENT_RULES);
        let a = Authorizer::new(&[&rules], DefaultPolicy::Deny);
        assert!(a.acl_read() && a.acl_write());
        assert!(a.operator_read() && a.operator_write());
        for key in [&b""[..], b"app/x", b"\xff\x00"] {
            assert!(a.key_read(key) && a.key_list(key) && a.key_write(key));
            assert!(a.key_write_prefix(key));
            assert!(a.event_read(key) && a.event_write(key));
        }
        assert!(a.session_read("n") && a.session_write("n") && a.session_write(""));
    }

    #[test]
    fn default_policy_from_str() {
        assert_eq!("allow".parse::<DefaultPolicy>(), Ok(DefaultPolicy::Allow));
        assert_eq!("deny".parse::<DefaultPolicy>(), Ok(DefaultPolicy::Deny));
        assert!("Allow".parse::<DefaultPolicy>().is_err());
        assert!("".parse::<DefaultPolicy>().is_err());
        assert_eq!(DefaultPolicy::default(), DefaultPolicy::Allow);
        assert_eq!(DefaultPolicy::Deny.to_string(), "deny");
    }

    #[test]
    fn errors_name_the_construct_and_line() {
        let cases: &[(&str, &str)] = &[
            // Unknown resources.
            (
                "kye_prefix \"a\" { policy = \"read\" }",
                "line 1: unknown rule \"kye_prefix\"",
            ),
            (
                "\n\nnamespace \"a\" {}",
                "line 3: unknown rule \"namespace\"",
            ),
            ("partition \"a\" {}", "unknown rule \"partition\""),
            // Unterminated string / block / comment.
            ("key \"abc { policy = \"read\" }", "unterminated string"),
            ("key \"a\" { policy = \"read }", "unterminated string"),
            (
                "key \"a\" { policy = \"read\"",
                "line 1: unterminated block for key \"a\"",
            ),
            (
                "key \"a\" {\n policy = \"read\"\n",
                "line 1: unterminated block for key \"a\"",
            ),
            ("key \"a\" { policy =", "unterminated block for key \"a\""),
            ("/* never closed", "unterminated block comment"),
            // Missing `=`.
            ("operator \"read\"", "missing \"=\" after operator"),
            ("acl", "missing \"=\" after acl"),
            (
                "key \"a\" { policy \"read\" }",
                "missing \"=\" after \"policy\" in key \"a\"",
            ),
            ("key \"a\"", "missing \"{\" after key \"a\""),
            // Bad levels.
            (
                "\n\nkey_prefix \"app/\" { policy = \"admin\" }",
                "line 3: invalid policy level \"admin\" for key_prefix \"app/\"",
            ),
            (
                "operator = \"list\"",
                "invalid policy level \"list\" for operator",
            ),
            ("acl = \"list\"", "invalid policy level \"list\" for acl"),
            ("acl = \"admin\"", "invalid policy level \"admin\" for acl"),
            (
                "session \"n\" { policy = \"list\" }",
                "invalid policy level \"list\" for session \"n\"",
            ),
            (
                "event_prefix \"\" { policy = \"list\" }",
                "invalid policy level \"list\" for event_prefix \"\"",
            ),
            (
                "key \"a\" { policy = read }",
                "policy in key \"a\" must be a quoted string",
            ),
            // Shape errors.
            (
                "key_prefix \"a\" { intentions = \"read\" }",
                "unknown attribute \"intentions\" in key_prefix \"a\"",
            ),
            ("key \"a\" { }", "missing policy in key \"a\""),
            (
                "key \"a\" { policy = \"read\" policy = \"write\" }",
                "duplicate policy in key \"a\"",
            ),
            ("key { policy = \"read\" }", "key needs a quoted name"),
            ("key \"a\" = \"read\"", "key \"a\" must be a block"),
            (
                "operator { policy = \"read\" }",
                "operator takes a quoted level",
            ),
            ("operator = read", "operator takes a quoted level"),
            ("operator \"x\" = \"read\"", "operator takes no name"),
            (
                "key \"a\" \"b\" { policy = \"read\" }",
                "too many names for key \"a\"",
            ),
            (
                "key \"a\" { policy = { } }",
                "unexpected \"{\" as the value of \"policy\" in key \"a\"",
            ),
            (
                "key \"a\" { policy = \"read\" } }",
                "unexpected \"}\", expected a rule",
            ),
            ("= \"read\"", "unexpected \"=\""),
            (
                "key \"a\" { policy = \"read\" } @",
                "unexpected character '@'",
            ),
            (
                "key \"\\q\" { policy = \"read\" }",
                "invalid escape \"\\q\"",
            ),
            ("key \"\\u12\" { policy = \"read\" }", "invalid \\u escape"),
            (
                "key \"\\ud800x\" { policy = \"read\" }",
                "invalid \\u escape",
            ),
            // JSON.
            (
                "{\"kye_prefix\": {}}",
                "line 1: unknown rule \"kye_prefix\"",
            ),
            (
                "{\n\"key_prefix\": {\"app/\": {\"policy\": \"admin\"}}}",
                "line 2: invalid policy level \"admin\" for key_prefix \"app/\"",
            ),
            (
                "{\"key\": {\"a\": {\"policy\": \"read\", \"x\": \"y\"}}}",
                "unknown attribute \"x\" in key \"a\"",
            ),
            ("{\"key\": {\"a\": {}}}", "missing policy in key \"a\""),
            (
                "{\"key\": {\"a\": {\"policy\": \"read\"}}",
                "unterminated object for the policy",
            ),
            (
                "{\"key\": {\"a\": {\"policy\": \"read\"",
                "unterminated object for key \"a\"",
            ),
            ("{\"key\" {}}", "missing \":\" after \"key\" in the policy"),
            (
                "{\"operator\": \"list\"}",
                "invalid policy level \"list\" for operator",
            ),
            (
                "{\"acl\": {\"policy\": \"write\"}}",
                "acl takes a level string",
            ),
            ("{\"key\": \"read\"}", "expected \"{\" for key"),
            (
                "{\"key\": {\"a\": {\"policy\": \"read\"}} \"x\": 1}",
                "expected \",\" or \"}\"",
            ),
            ("{} {}", "unexpected \"{\" after the policy"),
            ("{\"node\": }", "unexpected \"}\" in the value of node"),
            ("{\"node\": [1, 2}", "unexpected \"}\" in the value of node"),
            ("{\"node\": [1, 2", "unterminated value for node"),
            (
                "{key: {}}",
                "unexpected \"key\" in the policy, expected a quoted name",
            ),
        ];
        for (text, expected) in cases {
            let message = error(text);
            assert!(
                message.contains(expected),
                "{text:?}: got {message:?}, want it to contain {expected:?}"
            );
            assert!(
                message.starts_with("line "),
                "{text:?}: {message:?} has no line"
            );
        }
    }

    #[test]
    fn ignored_resources_in_both_forms() {
        let text = r#"
agent "a" { policy = "read" }
agent_prefix "" { policy = "write" }
node "n" { policy = "read" }
node_prefix "" { policy = "deny" }
query "q" { policy = "read" }
query_prefix "" { policy = "write" }
service "s" { policy = "write" intentions = "read" }
service_prefix "" { policy = "read", intentions = "deny" }
keyring = "write"
mesh = "read"
peering = "deny"
"#;
        assert_eq!(parse(text), Rules::default());
    }

    /// Every truncation, and many one-character corruptions, of valid policies must come back
    /// as Ok or Err, never a panic.
    #[test]
    fn truncated_and_mangled_text_never_panics() {
        let texts = [
            HCL,
            JSON,
            GLOBAL_MANAGEMENT_RULES,
            r#"key "\u00e9\ud83d\ude00" { policy = "read" }"#,
        ];
        let junk = [
            '"', '{', '}', '[', ']', '=', ':', ',', '\\', '/', '*', '#', '\n', 'x', 'é',
        ];
        for text in texts {
            for (end, _) in text.char_indices().chain([(text.len(), ' ')]) {
                let _ = parse_rules(&text[..end]);
                let _ = parse_rules(&text[end..]);
            }
            let chars: Vec<char> = text.chars().collect();
            for i in 0..chars.len() {
                for &j in &junk {
                    let mut mangled = chars.clone();
                    mangled[i] = j;
                    let mangled: String = mangled.into_iter().collect();
                    let _ = parse_rules(&mangled);
                }
            }
        }
        // Deep nesting inside an ignored JSON value is skipped without recursion.
        let deep = format!(
            "{{\"node\": {}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(parse(&deep), Rules::default());
    }
}
