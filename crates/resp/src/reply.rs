//! Replies to Redis clients, encoded as RESP2 (or, for a connection that sent `HELLO 3`,
//! RESP3) straight into the output buffer.
//!
//! A command answers with a [`Reply`]; the connection encodes it with [`Reply::encode_for`]
//! in its protocol (or through [`crate::RespCodec`]'s `Encoder` impl, RESP2). The two differ
//! only where RESP3 has a type of its own that a reply uses: nulls are `_`, maps are `%`. Integers and lengths are written
//! without heap allocation, and status and error texts can never break the framing.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::Encoder;

use crate::codec::{ProtocolError, RespCodec};

/// The protocol a connection speaks: RESP2 until it sends `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, what every Redis client speaks without `HELLO`.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// The kind of an aggregate reply, as its header announces it. A reply streamed in pieces
/// (a whole collection read page by page) writes its header first, then its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aggregate {
    /// `*n`.
    Array,
    /// A RESP3 push (`>n`), an array in RESP2.
    Push,
    /// A RESP3 set (`~n`), an array in RESP2.
    Set,
    /// A RESP3 map of n pairs (`%n`), a flat array of 2n items in RESP2.
    Map,
    /// n pairs: a RESP3 array of two-item arrays, a flat array of 2n items in RESP2.
    Pairs,
}

impl Aggregate {
    /// Appends the header of this aggregate with `len` items (pairs, for a map or pairs).
    pub(crate) fn encode_header(self, len: u64, out: &mut BytesMut, protocol: Protocol) {
        let (marker, count) = match (self, protocol) {
            (Aggregate::Map, Protocol::Resp3) => (b'%', len),
            (Aggregate::Set, Protocol::Resp3) => (b'~', len),
            (Aggregate::Push, Protocol::Resp3) => (b'>', len),
            (Aggregate::Map | Aggregate::Pairs, Protocol::Resp2) => (b'*', len.saturating_mul(2)),
            _ => (b'*', len),
        };
        out.reserve(24);
        out.put_u8(marker);
        put_u64(out, count);
        out.put_slice(b"\r\n");
    }

    /// Appends one pair of a map or of pairs.
    pub(crate) fn encode_pair(
        self,
        first: &Reply,
        second: &Reply,
        out: &mut BytesMut,
        protocol: Protocol,
    ) {
        if self == Aggregate::Pairs && protocol == Protocol::Resp3 {
            out.put_slice(b"*2\r\n");
        }
        first.encode_for(out, protocol);
        second.encode_for(out, protocol);
    }
}

/// One reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A status reply: `+OK\r\n`.
    Simple(Cow<'static, str>),
    /// An error reply; the full text after `-`, prefix included, e.g. `ERR syntax error`.
    Error(String),
    /// An integer reply: `:42\r\n`.
    Integer(i64),
    /// A bulk string: `$5\r\nhello\r\n`.
    Bulk(Bytes),
    /// A double (a sorted set's score): a RESP3 double (`,1.5\r\n`), a bulk string in RESP2,
    /// written as Redis writes it (see [`format_double`]).
    Double(f64),
    /// Text meant for people (`INFO`): a RESP3 verbatim string (`=...\r\ntxt:...`), a bulk
    /// string in RESP2.
    Verbatim(String),
    /// The null bulk string: `$-1\r\n`.
    Null,
    /// The null array: `*-1\r\n`.
    NullArray,
    /// An array of replies: `*2\r\n...`.
    Array(Vec<Reply>),
    /// Field-value pairs: a RESP3 map (`%2\r\n...`), a flat array of twice as many items in
    /// RESP2.
    Map(Vec<(Reply, Reply)>),
    /// Pairs in order (`ZRANGE ... WITHSCORES`): a RESP3 array of two-item arrays, a flat
    /// array of twice as many items in RESP2.
    Pairs(Vec<(Reply, Reply)>),
    /// Out-of-band data (pub/sub): a RESP3 push (`>3\r\n...`), an array in RESP2.
    Push(Vec<Reply>),
    /// An unordered collection (`SMEMBERS`): a RESP3 set (`~2\r\n...`), an array in RESP2.
    Set(Vec<Reply>),
    /// Several replies to one command, sent one after another (`SUBSCRIBE a b` answers
    /// one confirmation per channel).
    Several(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Self {
        Reply::Simple(Cow::Borrowed("OK"))
    }

    /// A status reply with the given text.
    pub fn simple(text: impl Into<Cow<'static, str>>) -> Self {
        Reply::Simple(text.into())
    }

    /// An error reply with its prefix included, e.g. `Reply::error("WRONGTYPE Operation ...")`.
    pub fn error(text: impl Into<String>) -> Self {
        Reply::Error(text.into())
    }

    /// An `ERR` error reply: `Reply::err("syntax error")` is `-ERR syntax error`.
    pub fn err(message: impl std::fmt::Display) -> Self {
        Reply::Error(format!("ERR {message}"))
    }

    /// A bulk string reply.
    pub fn bulk(data: impl Into<Bytes>) -> Self {
        Reply::Bulk(data.into())
    }

    /// An integer reply.
    pub fn integer(value: i64) -> Self {
        Reply::Integer(value)
    }

    /// An array reply.
    pub fn array(items: Vec<Reply>) -> Self {
        Reply::Array(items)
    }

    /// Whether this is an error reply (or, for several replies, whether one is).
    pub fn is_error(&self) -> bool {
        match self {
            Reply::Error(_) => true,
            Reply::Several(replies) => replies.iter().any(Reply::is_error),
            _ => false,
        }
    }

    /// Appends this reply's RESP2 encoding to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        self.encode_for(out, Protocol::Resp2);
    }

    /// Appends this reply's encoding in `protocol` to `out`.
    pub fn encode_for(&self, out: &mut BytesMut, protocol: Protocol) {
        match self {
            Reply::Null | Reply::NullArray if protocol == Protocol::Resp3 => {
                out.put_slice(b"_\r\n");
            }
            Reply::Map(pairs) => {
                Aggregate::Map.encode_header(len_u64(pairs.len()), out, protocol);
                for (field, value) in pairs {
                    Aggregate::Map.encode_pair(field, value, out, protocol);
                }
            }
            Reply::Pairs(pairs) => {
                Aggregate::Pairs.encode_header(len_u64(pairs.len()), out, protocol);
                for (first, second) in pairs {
                    Aggregate::Pairs.encode_pair(first, second, out, protocol);
                }
            }
            Reply::Several(replies) => {
                for reply in replies {
                    reply.encode_for(out, protocol);
                }
            }
            Reply::Verbatim(text) if protocol == Protocol::Resp3 => {
                out.reserve(text.len().saturating_add(32));
                out.put_u8(b'=');
                put_u64(out, len_u64(text.len().saturating_add(4)));
                out.put_slice(b"\r\ntxt:");
                out.put_slice(text.as_bytes());
                out.put_slice(b"\r\n");
            }
            Reply::Verbatim(text) => Reply::bulk(text.clone()).encode_scalar(out),
            Reply::Double(value) if protocol == Protocol::Resp3 => {
                put_text_line(out, b',', &format_double(*value));
            }
            Reply::Double(value) => {
                Reply::Bulk(Bytes::from(format_double(*value))).encode_scalar(out)
            }
            Reply::Array(items) | Reply::Push(items) | Reply::Set(items) => {
                let kind = match self {
                    Reply::Push(_) => Aggregate::Push,
                    Reply::Set(_) => Aggregate::Set,
                    _ => Aggregate::Array,
                };
                kind.encode_header(len_u64(items.len()), out, protocol);
                for item in items {
                    item.encode_for(out, protocol);
                }
            }
            other => other.encode_scalar(out),
        }
    }

    /// The encodings RESP2 and RESP3 share.
    fn encode_scalar(&self, out: &mut BytesMut) {
        match self {
            Reply::Simple(text) => put_text_line(out, b'+', text),
            Reply::Error(text) => put_text_line(out, b'-', text),
            Reply::Integer(value) => {
                out.reserve(24);
                out.put_u8(b':');
                put_i64(out, *value);
                out.put_slice(b"\r\n");
            }
            Reply::Bulk(data) => {
                out.reserve(data.len().saturating_add(24));
                out.put_u8(b'$');
                put_u64(out, len_u64(data.len()));
                out.put_slice(b"\r\n");
                out.put_slice(data);
                out.put_slice(b"\r\n");
            }
            Reply::Null => out.put_slice(b"$-1\r\n"),
            Reply::NullArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(_)
            | Reply::Double(_)
            | Reply::Verbatim(_)
            | Reply::Pairs(_)
            | Reply::Map(_)
            | Reply::Push(_)
            | Reply::Set(_)
            | Reply::Several(_) => self.encode_for(out, Protocol::Resp2),
        }
    }

    /// This reply's RESP2 encoding as a fresh buffer (handy in tests and tools).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.freeze()
    }
}

/// A double as Redis 7.0 writes one: `inf` / `-inf`, else C's `%.17g` (17 significant
/// digits, trailing zeros dropped, an exponent of at least two digits below 1e-4 and from
/// 1e17), so that every score reads back as the same double.
pub fn format_double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // 17 significant digits: d.dddddddddddddddd, then the decimal exponent.
    let scientific = format!("{:.16e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if value < 0.0 { "-" } else { "" };
    if !(-4..17).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let rest = rest.trim_end_matches('0');
        let dot = if rest.is_empty() { "" } else { "." };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}{rest}e{exp_sign}{:02}", exponent.abs());
    }
    let (whole, fraction) = if exponent >= 0 {
        let point = exponent as usize + 1;
        (digits[..point].to_string(), digits[point..].to_string())
    } else {
        let zeros = "0".repeat((-exponent - 1) as usize);
        ("0".to_string(), format!("{zeros}{digits}"))
    };
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

impl From<ProtocolError> for Reply {
    fn from(err: ProtocolError) -> Self {
        Reply::err(err)
    }
}

impl From<&ProtocolError> for Reply {
    fn from(err: &ProtocolError) -> Self {
        Reply::err(err)
    }
}

impl Encoder<Reply> for RespCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: Reply, dst: &mut BytesMut) -> Result<(), Self::Error> {
        item.encode(dst);
        Ok(())
    }
}

impl Encoder<&Reply> for RespCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: &Reply, dst: &mut BytesMut) -> Result<(), Self::Error> {
        item.encode(dst);
        Ok(())
    }
}

/// Writes `<kind><text>\r\n`, turning any `\r` or `\n` inside `text` into a space.
fn put_text_line(out: &mut BytesMut, kind: u8, text: &str) {
    let text = text.as_bytes();
    out.reserve(text.len().saturating_add(3));
    out.put_u8(kind);
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    } else {
        out.put_slice(text);
    }
    out.put_slice(b"\r\n");
}

fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// Writes `value` in decimal without allocating.
fn put_u64(out: &mut BytesMut, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    for slot in digits.iter_mut().rev() {
        // `value % 10` is below 10, so the cast cannot truncate.
        *slot = b'0' + (value % 10) as u8;
        start -= 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.put_slice(digits.get(start..).unwrap_or_default());
}

/// Writes `value` in decimal, with a leading `-` when negative, without allocating.
fn put_i64(out: &mut BytesMut, value: i64) {
    if value < 0 {
        out.put_u8(b'-');
    }
    put_u64(out, value.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(reply: &Reply) -> Vec<u8> {
        reply.to_bytes().to_vec()
    }

    fn encoded3(reply: &Reply) -> Vec<u8> {
        let mut out = BytesMut::new();
        reply.encode_for(&mut out, Protocol::Resp3);
        out.to_vec()
    }

    #[test]
    fn doubles_print_as_c_prints_them_with_17_digits() {
        // Expected texts from C's printf("%.17g").
        for (value, text) in [
            (1.1, "1.1000000000000001"),
            (2.0, "2"),
            (1e20, "1e+20"),
            (3e-5, "3.0000000000000001e-05"),
            (0.5, "0.5"),
            (-2.5, "-2.5"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (-1e-300, "-1e-300"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "4.9406564584124654e-324"),
            (100.0, "100"),
            (1234.5678, "1234.5678"),
            (0.1, "0.10000000000000001"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(format_double(value), text, "{value:e}");
        }
        assert_eq!(encoded3(&Reply::Double(1.5)), b",1.5\r\n");
        assert_eq!(encoded(&Reply::Double(1.5)), b"$3\r\n1.5\r\n");
        assert_eq!(encoded3(&Reply::Double(f64::NEG_INFINITY)), b",-inf\r\n");
        assert_eq!(
            encoded3(&Reply::Verbatim("a:1".into())),
            b"=7\r\ntxt:a:1\r\n"
        );
        assert_eq!(encoded(&Reply::Verbatim("a:1".into())), b"$3\r\na:1\r\n");
        let pairs = Reply::Pairs(vec![(Reply::bulk("a"), Reply::Double(2.0))]);
        assert_eq!(encoded3(&pairs), b"*1\r\n*2\r\n$1\r\na\r\n,2\r\n");
        assert_eq!(encoded(&pairs), b"*2\r\n$1\r\na\r\n$1\r\n2\r\n");
    }

    #[test]
    fn resp3_has_its_own_null_and_map_and_resp2_keeps_its_bytes() {
        assert_eq!(encoded3(&Reply::Null), b"_\r\n");
        assert_eq!(encoded3(&Reply::NullArray), b"_\r\n");
        assert_eq!(encoded(&Reply::Null), b"$-1\r\n");
        assert_eq!(encoded(&Reply::NullArray), b"*-1\r\n");
        let map = Reply::Map(vec![
            (Reply::bulk("proto"), Reply::integer(3)),
            (Reply::bulk("x"), Reply::Null),
        ]);
        assert_eq!(
            encoded3(&map),
            b"%2\r\n$5\r\nproto\r\n:3\r\n$1\r\nx\r\n_\r\n"
        );
        assert_eq!(
            encoded(&map),
            b"*4\r\n$5\r\nproto\r\n:3\r\n$1\r\nx\r\n$-1\r\n"
        );
        // Nested in an array, each item follows the protocol.
        let nested = Reply::array(vec![Reply::Null, map]);
        assert!(encoded3(&nested).starts_with(b"*2\r\n_\r\n%2\r\n"));
        assert_eq!(encoded3(&Reply::integer(7)), b":7\r\n");
        assert_eq!(encoded3(&Reply::bulk("a")), b"$1\r\na\r\n");
    }

    #[test]
    fn simple_and_ok() {
        assert_eq!(encoded(&Reply::ok()), b"+OK\r\n");
        assert_eq!(encoded(&Reply::simple("PONG")), b"+PONG\r\n");
        assert_eq!(
            encoded(&Reply::simple(String::from("QUEUED"))),
            b"+QUEUED\r\n"
        );
        assert_eq!(encoded(&Reply::simple("")), b"+\r\n");
    }

    #[test]
    fn errors_keep_prefix_and_err_adds_it() {
        assert_eq!(
            encoded(&Reply::error("WRONGTYPE Operation against a key")),
            b"-WRONGTYPE Operation against a key\r\n"
        );
        assert_eq!(
            encoded(&Reply::err("syntax error")),
            b"-ERR syntax error\r\n"
        );
        assert_eq!(Reply::err("x"), Reply::Error("ERR x".into()));
        assert!(Reply::err("x").is_error());
        assert!(!Reply::ok().is_error());
    }

    #[test]
    fn line_breaks_in_text_become_spaces() {
        assert_eq!(
            encoded(&Reply::err("bad\r\nthing\nhere\r")),
            b"-ERR bad  thing here \r\n"
        );
        assert_eq!(encoded(&Reply::simple("a\nb")), b"+a b\r\n");
    }

    #[test]
    fn integers_including_extremes() {
        let cases: &[(i64, &[u8])] = &[
            (0, b":0\r\n"),
            (7, b":7\r\n"),
            (-1, b":-1\r\n"),
            (10, b":10\r\n"),
            (1000, b":1000\r\n"),
            (-1234567890, b":-1234567890\r\n"),
            (i64::MAX, b":9223372036854775807\r\n"),
            (i64::MIN, b":-9223372036854775808\r\n"),
        ];
        for (value, want) in cases {
            assert_eq!(encoded(&Reply::integer(*value)), *want, "{value}");
        }
    }

    #[test]
    fn u64_formatting_reaches_twenty_digits() {
        let mut out = BytesMut::new();
        put_u64(&mut out, u64::MAX);
        assert_eq!(&out[..], b"18446744073709551615");
    }

    #[test]
    fn bulk_null_and_arrays() {
        assert_eq!(encoded(&Reply::bulk("hello")), b"$5\r\nhello\r\n");
        assert_eq!(encoded(&Reply::bulk(Bytes::new())), b"$0\r\n\r\n");
        assert_eq!(
            encoded(&Reply::bulk(Bytes::from_static(b"a\r\nb"))),
            b"$4\r\na\r\nb\r\n"
        );
        assert_eq!(encoded(&Reply::Null), b"$-1\r\n");
        assert_eq!(encoded(&Reply::NullArray), b"*-1\r\n");
        assert_eq!(encoded(&Reply::array(Vec::new())), b"*0\r\n");
        let nested = Reply::array(vec![
            Reply::bulk(vec![b'x'; 12]),
            Reply::Null,
            Reply::integer(-3),
            Reply::array(vec![Reply::ok(), Reply::err("no")]),
        ]);
        assert_eq!(
            encoded(&nested),
            b"*4\r\n$12\r\nxxxxxxxxxxxx\r\n$-1\r\n:-3\r\n*2\r\n+OK\r\n-ERR no\r\n"
        );
    }

    #[test]
    fn encode_appends_to_existing_buffer() {
        let mut out = BytesMut::from(&b"+first\r\n"[..]);
        Reply::integer(2).encode(&mut out);
        assert_eq!(&out[..], b"+first\r\n:2\r\n");
    }

    #[test]
    fn codec_encoder_writes_the_same_bytes() {
        let mut codec = RespCodec::default();
        let mut out = BytesMut::new();
        codec.encode(Reply::ok(), &mut out).unwrap();
        codec.encode(&Reply::bulk("v"), &mut out).unwrap();
        assert_eq!(&out[..], b"+OK\r\n$1\r\nv\r\n");
    }

    #[test]
    fn protocol_error_becomes_err_reply() {
        let reply = Reply::from(ProtocolError::InvalidBulkLength);
        assert_eq!(
            encoded(&reply),
            b"-ERR Protocol error: invalid bulk length\r\n"
        );
    }
}
