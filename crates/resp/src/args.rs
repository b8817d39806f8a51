//! Reading the arguments of a decoded request.
//!
//! A command implementation receives an [`Args`]: a cursor over the request's arguments
//! that knows the command's name, parses integers exactly as Redis does, and produces the
//! error texts Redis clients expect (`wrong number of arguments for 'get' command`, ...).

use bytes::Bytes;

use crate::reply::Reply;

/// Why a request's arguments were rejected; the text is what Redis puts after `-ERR `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// Too few (or, for fixed-arity commands, too many) arguments; holds the lowercased
    /// command name.
    #[error("wrong number of arguments for '{0}' command")]
    WrongArity(String),
    /// An argument that should be an integer is not one, or does not fit.
    #[error("value is not an integer or out of range")]
    NotInteger,
    /// Arguments left over, an unknown option, or a malformed keyword.
    #[error("syntax error")]
    Syntax,
}

impl From<ArgError> for Reply {
    fn from(err: ArgError) -> Self {
        Reply::err(err)
    }
}

/// A cursor over one decoded request: the command name first, then its arguments.
///
/// The `next_*` methods consume arguments in order; running out of arguments is a
/// [`ArgError::WrongArity`] naming the command, and [`Args::finish`] reports leftovers
/// as a [`ArgError::Syntax`].
#[derive(Debug, Clone)]
pub struct Args {
    name: String,
    /// The command name as the client wrote it (Redis's errors quote it so).
    written_name: String,
    rest: std::vec::IntoIter<Bytes>,
    total: usize,
}

impl Args {
    /// A request from words, for tests of the parsers.
    #[cfg(test)]
    pub(crate) fn from_words(words: &[&str]) -> Self {
        Args::new(
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect(),
        )
    }

    /// Wraps a request as decoded by [`crate::RespCodec`]; its first element is the command.
    pub fn new(request: Vec<Bytes>) -> Self {
        let total = request.len();
        let mut rest = request.into_iter();
        let written_name = rest
            .next()
            .map(|name| String::from_utf8_lossy(&name).into_owned())
            .unwrap_or_default();
        Self {
            name: written_name.to_ascii_lowercase(),
            written_name,
            rest,
            total,
        }
    }

    /// The command name as the client wrote it.
    pub fn written_name(&self) -> &str {
        &self.written_name
    }

    /// The command name (the first argument), ASCII-lowercased.
    pub fn command_name(&self) -> String {
        self.name.clone()
    }

    /// The command name (the first argument), ASCII-lowercased, without a copy.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many arguments the request had, the command name included (Redis's `argc`).
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether the request was empty (not even a command name).
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// How many arguments after the command name have not been consumed yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The error for a wrong number of arguments to this command.
    pub fn wrong_arity(&self) -> ArgError {
        ArgError::WrongArity(self.name.clone())
    }

    /// The next argument, without consuming it.
    pub fn peek(&self) -> Option<&Bytes> {
        self.rest.as_slice().first()
    }

    /// The next argument as raw bytes.
    pub fn next_bytes(&mut self) -> Result<Bytes, ArgError> {
        match self.rest.next() {
            Some(arg) => Ok(arg),
            None => Err(self.wrong_arity()),
        }
    }

    /// The next argument as UTF-8 text; bytes that are not UTF-8 are a syntax error.
    pub fn next_str(&mut self) -> Result<String, ArgError> {
        let arg = self.next_bytes()?;
        String::from_utf8(arg.to_vec()).map_err(|_| ArgError::Syntax)
    }

    /// The next argument as a signed 64-bit integer, by Redis's rules (see [`parse_i64`]).
    pub fn next_i64(&mut self) -> Result<i64, ArgError> {
        let arg = self.next_bytes()?;
        parse_i64(&arg).ok_or(ArgError::NotInteger)
    }

    /// The next argument as an unsigned 64-bit integer, by Redis's rules without the sign
    /// (see [`parse_u64`]).
    pub fn next_u64(&mut self) -> Result<u64, ArgError> {
        let arg = self.next_bytes()?;
        parse_u64(&arg).ok_or(ArgError::NotInteger)
    }

    /// Whether the next argument is `keyword`, compared ASCII case-insensitively; consumes
    /// nothing.
    pub fn peek_keyword(&self, keyword: &str) -> bool {
        self.peek()
            .is_some_and(|arg| arg.eq_ignore_ascii_case(keyword.as_bytes()))
    }

    /// Consumes the next argument if it is `keyword` (ASCII case-insensitive) and says
    /// whether it did.
    pub fn next_keyword(&mut self, keyword: &str) -> bool {
        let matched = self.peek_keyword(keyword);
        if matched {
            self.rest.next();
        }
        matched
    }

    /// Consumes and returns every argument not yet consumed.
    pub fn rest(&mut self) -> Vec<Bytes> {
        self.rest.by_ref().collect()
    }

    /// Succeeds if every argument was consumed; leftovers are a syntax error.
    pub fn finish(&self) -> Result<(), ArgError> {
        if self.rest.len() == 0 {
            Ok(())
        } else {
            Err(ArgError::Syntax)
        }
    }
}

pub use trireme_types::int::{parse_i64, parse_u64};

#[cfg(test)]
mod tests {
    use super::*;

    fn args(items: &[&str]) -> Args {
        Args::new(
            items
                .iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect(),
        )
    }

    #[test]
    fn command_name_is_lowercased() {
        let a = args(&["SeT", "Key", "Value"]);
        assert_eq!(a.command_name(), "set");
        assert_eq!(a.name(), "set");
        assert_eq!(a.len(), 3);
        assert!(!a.is_empty());
        assert_eq!(a.remaining(), 2);
    }

    #[test]
    fn empty_request_has_empty_name() {
        let mut a = Args::new(Vec::new());
        assert_eq!(a.command_name(), "");
        assert_eq!(a.len(), 0);
        assert!(a.is_empty());
        assert_eq!(a.remaining(), 0);
        assert_eq!(a.next_bytes(), Err(ArgError::WrongArity(String::new())));
    }

    #[test]
    fn next_bytes_walks_in_order_then_reports_arity() {
        let mut a = args(&["GET", "k1", "k2"]);
        assert_eq!(a.next_bytes().unwrap(), Bytes::from_static(b"k1"));
        assert_eq!(a.remaining(), 1);
        assert_eq!(a.next_bytes().unwrap(), Bytes::from_static(b"k2"));
        assert_eq!(a.remaining(), 0);
        let err = a.next_bytes().unwrap_err();
        assert_eq!(err, ArgError::WrongArity("get".into()));
        assert_eq!(
            err.to_string(),
            "wrong number of arguments for 'get' command"
        );
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn next_str_accepts_utf8_and_rejects_other_bytes() {
        let mut a = Args::new(vec![
            Bytes::from_static(b"echo"),
            Bytes::from_static("héllo".as_bytes()),
            Bytes::from_static(b"\xff\xfe"),
        ]);
        assert_eq!(a.next_str().unwrap(), "héllo");
        assert_eq!(a.next_str(), Err(ArgError::Syntax));
        assert_eq!(a.next_str(), Err(ArgError::WrongArity("echo".into())));
    }

    #[test]
    fn next_i64_follows_redis_rules() {
        let accepted: &[(&str, i64)] = &[
            ("0", 0),
            ("-1", -1),
            ("1", 1),
            ("42", 42),
            ("-9223372036854775808", i64::MIN),
            ("9223372036854775807", i64::MAX),
        ];
        for (text, want) in accepted {
            let mut a = args(&["incrby", text]);
            assert_eq!(a.next_i64(), Ok(*want), "{text:?}");
        }
        let rejected = [
            "-0",
            "+1",
            " 1",
            "1 ",
            "01",
            "-01",
            "",
            "-",
            "1a",
            "0x10",
            "1.5",
            "9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999999",
        ];
        for text in rejected {
            let mut a = args(&["incrby", text]);
            let err = a.next_i64().unwrap_err();
            assert_eq!(err, ArgError::NotInteger, "{text:?}");
            assert_eq!(err.to_string(), "value is not an integer or out of range");
        }
        let mut a = args(&["incrby"]);
        assert_eq!(a.next_i64(), Err(ArgError::WrongArity("incrby".into())));
    }

    #[test]
    fn next_u64_follows_redis_rules_without_sign() {
        let accepted: &[(&str, u64)] = &[
            ("0", 0),
            ("7", 7),
            ("9223372036854775808", 1 << 63),
            ("18446744073709551615", u64::MAX),
        ];
        for (text, want) in accepted {
            let mut a = args(&["scan", text]);
            assert_eq!(a.next_u64(), Ok(*want), "{text:?}");
        }
        for text in ["-1", "-0", "+1", "01", "", " 1", "18446744073709551616"] {
            let mut a = args(&["scan", text]);
            assert_eq!(a.next_u64(), Err(ArgError::NotInteger), "{text:?}");
        }
        let mut a = args(&["scan"]);
        assert_eq!(a.next_u64(), Err(ArgError::WrongArity("scan".into())));
    }

    #[test]
    fn peek_keyword_is_case_insensitive_and_does_not_consume() {
        let a = args(&["set", "ex"]);
        assert!(a.peek_keyword("EX"));
        assert!(a.peek_keyword("ex"));
        assert!(!a.peek_keyword("px"));
        assert!(!a.peek_keyword("e"));
        assert_eq!(a.remaining(), 1);
        assert_eq!(a.peek(), Some(&Bytes::from_static(b"ex")));
        let done = args(&["set"]);
        assert!(!done.peek_keyword("ex"));
    }

    #[test]
    fn next_keyword_consumes_only_on_match() {
        let mut a = args(&["set", "NX", "10"]);
        assert!(!a.next_keyword("xx"));
        assert_eq!(a.remaining(), 2);
        assert!(a.next_keyword("nx"));
        assert_eq!(a.remaining(), 1);
        assert_eq!(a.next_i64(), Ok(10));
    }

    #[test]
    fn rest_takes_everything_left() {
        let mut a = args(&["mget", "a", "b", "c"]);
        assert_eq!(a.next_bytes().unwrap(), Bytes::from_static(b"a"));
        assert_eq!(
            a.rest(),
            vec![Bytes::from_static(b"b"), Bytes::from_static(b"c")]
        );
        assert_eq!(a.remaining(), 0);
        assert_eq!(a.rest(), Vec::<Bytes>::new());
        assert_eq!(a.finish(), Ok(()));
    }

    #[test]
    fn finish_reports_leftovers_as_syntax_error() {
        let mut a = args(&["set", "k", "v", "bogus"]);
        a.next_bytes().unwrap();
        a.next_bytes().unwrap();
        let err = a.finish().unwrap_err();
        assert_eq!(err, ArgError::Syntax);
        assert_eq!(err.to_string(), "syntax error");
        a.next_bytes().unwrap();
        assert_eq!(a.finish(), Ok(()));
    }

    #[test]
    fn arg_error_becomes_err_reply() {
        assert_eq!(
            Reply::from(ArgError::Syntax),
            Reply::Error("ERR syntax error".into())
        );
        assert_eq!(
            Reply::from(ArgError::WrongArity("get".into())),
            Reply::Error("ERR wrong number of arguments for 'get' command".into())
        );
        assert_eq!(
            Reply::from(ArgError::NotInteger),
            Reply::Error("ERR value is not an integer or out of range".into())
        );
    }
}
