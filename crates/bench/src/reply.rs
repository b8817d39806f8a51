//! RESP2 and RESP3 replies as a client reads them: one parser shared by the bench's RESP driver and the
//! tests that talk to Trireme's RESP port byte by byte, so both read replies the same way.
//!
//! [`parse_reply`] reads one reply from the start of a buffer that may hold only part of it
//! (it then asks for more) or several (it says how many bytes the first one took), without
//! copying anything but the reply's own strings.

use bytes::Bytes;

use crate::driver::DriverError;

/// Nesting limit for array replies; deeper replies are treated as a protocol error.
const MAX_DEPTH: usize = 32;

/// A RESP2 or RESP3 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// RESP3 `_`.
    Null,
    /// RESP3 `#t` / `#f`.
    Boolean(bool),
    /// RESP3 `,1.5` (the text as sent: `inf`, exponents).
    Double(String),
    /// RESP3 `(12345678901234567890`.
    BigNumber(String),
    /// RESP3 `=n` followed by `fmt:` and the text.
    Verbatim(Bytes),
    /// RESP3 `!n` followed by the error text.
    BulkError(Bytes),
    /// RESP3 `%n` followed by n keys and values.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~n` followed by n members.
    Set(Vec<Reply>),
    /// RESP3 `>n` followed by n items, sent without a request (pub/sub messages).
    Push(Vec<Reply>),
    /// `+OK`
    Simple(String),
    /// `-ERR message`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$n` followed by n bytes; `$-1` is `None`.
    Bulk(Option<Bytes>),
    /// `*n` followed by n replies; `*-1` is `None`.
    Array(Option<Vec<Reply>>),
}

/// Parses one reply from the start of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a reply, or the reply and the number
/// of bytes it took.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, DriverError> {
    parse_at(buf, 0, 0).map_err(DriverError::Protocol)
}

impl Reply {
    /// Parses `bytes` as exactly one complete reply: a part of one, or anything after it, is
    /// a protocol error.
    pub fn parse_one(bytes: &[u8]) -> Result<Reply, DriverError> {
        match parse_reply(bytes)? {
            Some((reply, used)) if used == bytes.len() => Ok(reply),
            Some((_, used)) => Err(DriverError::Protocol(format!(
                "{} bytes after the reply",
                bytes.len() - used
            ))),
            None => Err(DriverError::Protocol("incomplete reply".to_owned())),
        }
    }

    /// The value of an integer reply.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// The items of an array reply (not the null array).
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// The bytes of a bulk reply (not the null bulk string).
    pub fn as_bulk(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(Some(data)) => Some(data),
            _ => None,
        }
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_int(line: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| format!("bad integer {:?}", String::from_utf8_lossy(line)))
}

/// A length field: `-1` is `None`, other negatives are errors.
fn parse_len(line: &[u8]) -> Result<Option<usize>, String> {
    match parse_int(line)? {
        -1 => Ok(None),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| format!("bad length {n}")),
    }
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if depth > MAX_DEPTH {
        return Err("reply nested too deeply".to_owned());
    }
    let Some(&tag) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(buf, pos + 1) else {
        return Ok(None);
    };
    let line = &buf[pos + 1..line_end];
    let next = line_end + 2;
    let reply = match tag {
        b'+' => (
            Reply::Simple(String::from_utf8_lossy(line).into_owned()),
            next,
        ),
        b'-' => (
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            next,
        ),
        b':' => (Reply::Integer(parse_int(line)?), next),
        b'$' => match parse_len(line)? {
            None => (Reply::Bulk(None), next),
            Some(n) => match blob(buf, next, n)? {
                Some((data, after)) => (Reply::Bulk(Some(data)), after),
                None => return Ok(None),
            },
        },
        b'*' => match parse_len(line)? {
            None => (Reply::Array(None), next),
            Some(n) => match items(buf, next, n, depth)? {
                Some((items, after)) => (Reply::Array(Some(items)), after),
                None => return Ok(None),
            },
        },
        b'_' => (Reply::Null, next),
        b'#' => match line {
            b"t" => (Reply::Boolean(true), next),
            b"f" => (Reply::Boolean(false), next),
            _ => return Err("a boolean is #t or #f".to_owned()),
        },
        b',' => (
            Reply::Double(String::from_utf8_lossy(line).into_owned()),
            next,
        ),
        b'(' => (
            Reply::BigNumber(String::from_utf8_lossy(line).into_owned()),
            next,
        ),
        b'=' | b'!' => {
            let n = parse_len(line)?.ok_or("a verbatim string or bulk error has a length")?;
            let Some((data, after)) = blob(buf, next, n)? else {
                return Ok(None);
            };
            let reply = if tag == b'=' {
                Reply::Verbatim(data)
            } else {
                Reply::BulkError(data)
            };
            (reply, after)
        }
        b'%' | b'~' | b'>' | b'|' => {
            let n = parse_len(line)?.ok_or("an aggregate has a length")?;
            let count = if matches!(tag, b'%' | b'|') {
                n.checked_mul(2).ok_or_else(|| format!("bad length {n}"))?
            } else {
                n
            };
            let Some((items, at)) = items(buf, next, count, depth)? else {
                return Ok(None);
            };
            match tag {
                b'%' => (Reply::Map(pairs(items)), at),
                b'~' => (Reply::Set(items), at),
                b'>' => (Reply::Push(items), at),
                // An attribute describes the reply after it, which is what the caller wants.
                _ => return parse_at(buf, at, depth + 1),
            }
        }
        other => return Err(format!("unknown reply type byte 0x{other:02x}")),
    };
    Ok(Some(reply))
}

/// The `n` bytes at `at` followed by CRLF (a bulk string's body), and where the next reply
/// starts; `None` when more bytes are needed.
fn blob(buf: &[u8], at: usize, n: usize) -> Result<Option<(Bytes, usize)>, String> {
    let end = at.checked_add(n).ok_or_else(|| format!("bad length {n}"))?;
    let Some(trailer) = buf.get(end..end + 2) else {
        return Ok(None);
    };
    if trailer != b"\r\n" {
        return Err("bulk string not terminated by CRLF".to_owned());
    }
    Ok(Some((Bytes::copy_from_slice(&buf[at..end]), end + 2)))
}

/// `count` replies one after another from `at`, and where the next reply starts; `None`
/// when more bytes are needed.
fn items(
    buf: &[u8],
    mut at: usize,
    count: usize,
    depth: usize,
) -> Result<Option<(Vec<Reply>, usize)>, String> {
    let mut items = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        match parse_at(buf, at, depth + 1)? {
            Some((item, after)) => {
                items.push(item);
                at = after;
            }
            None => return Ok(None),
        }
    }
    Ok(Some((items, at)))
}

fn pairs(items: Vec<Reply>) -> Vec<(Reply, Reply)> {
    let mut items = items.into_iter();
    let mut out = Vec::new();
    while let (Some(key), Some(value)) = (items.next(), items.next()) {
        out.push((key, value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(text: &[u8]) -> Reply {
        let (reply, used) = parse_reply(text).unwrap().unwrap();
        assert_eq!(used, text.len());
        reply
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parse_all(b"+OK\r\n"), Reply::Simple("OK".into()));
        assert_eq!(
            parse_all(b"-ERR wrong type\r\n"),
            Reply::Error("ERR wrong type".into())
        );
        assert_eq!(parse_all(b":-42\r\n"), Reply::Integer(-42));
        assert_eq!(
            parse_all(b"$5\r\nh\r\nlo\r\n"),
            Reply::Bulk(Some(Bytes::from_static(b"h\r\nlo")))
        );
        assert_eq!(parse_all(b"$0\r\n\r\n"), Reply::Bulk(Some(Bytes::new())));
        assert_eq!(parse_all(b"$-1\r\n"), Reply::Bulk(None));
        assert_eq!(parse_all(b"*-1\r\n"), Reply::Array(None));
        assert_eq!(
            parse_all(b"*3\r\n:1\r\n$1\r\na\r\n*1\r\n+x\r\n"),
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Bulk(Some(Bytes::from_static(b"a"))),
                Reply::Array(Some(vec![Reply::Simple("x".into())])),
            ]))
        );
    }

    #[test]
    fn parses_resp3_types() {
        assert_eq!(parse_all(b"_\r\n"), Reply::Null);
        assert_eq!(parse_all(b"#t\r\n"), Reply::Boolean(true));
        assert_eq!(parse_all(b",-inf\r\n"), Reply::Double("-inf".into()));
        assert_eq!(parse_all(b"(123\r\n"), Reply::BigNumber("123".into()));
        assert_eq!(
            parse_all(b"=7\r\ntxt:a\r\n\r\n"),
            Reply::Verbatim(Bytes::from_static(b"txt:a\r\n"))
        );
        assert_eq!(
            parse_all(b"%1\r\n+k\r\n:1\r\n"),
            Reply::Map(vec![(Reply::Simple("k".into()), Reply::Integer(1))])
        );
        assert_eq!(
            parse_all(b"~2\r\n:1\r\n:2\r\n"),
            Reply::Set(vec![Reply::Integer(1), Reply::Integer(2)])
        );
        assert_eq!(
            parse_all(b">2\r\n+message\r\n$1\r\nx\r\n"),
            Reply::Push(vec![
                Reply::Simple("message".into()),
                Reply::Bulk(Some(Bytes::from_static(b"x")))
            ])
        );
        assert_eq!(
            parse_all(b"|1\r\n+ttl\r\n:3\r\n:42\r\n"),
            Reply::Integer(42)
        );
        assert_eq!(parse_reply(b"%2\r\n+k\r\n:1\r\n").unwrap(), None);
        assert!(parse_reply(b"#x\r\n").is_err());
    }

    #[test]
    fn partial_input_waits_for_more() {
        let full = b"*2\r\n$3\r\nabc\r\n:7\r\n+next\r\n";
        for cut in 0..full.len() - 7 {
            assert_eq!(parse_reply(&full[..cut]).unwrap(), None, "cut {cut}");
        }
        let (_, used) = parse_reply(full).unwrap().unwrap();
        assert_eq!(&full[used..], b"+next\r\n");
    }

    #[test]
    fn malformed_input_is_a_protocol_error() {
        for bad in [&b"?x\r\n"[..], b":abc\r\n", b"$-2\r\n", b"$1\r\nab\r\n"] {
            let err = parse_reply(bad).unwrap_err();
            assert_eq!(err.kind(), "protocol", "{bad:?}");
        }
    }

    #[test]
    fn one_complete_reply_and_its_parts() {
        let reply = Reply::parse_one(b"*2\r\n:5\r\n$2\r\nab\r\n").unwrap();
        let items = reply.as_array().unwrap();
        assert_eq!(items[0].as_integer(), Some(5));
        assert_eq!(items[1].as_bulk(), Some(&b"ab"[..]));
        assert_eq!(items[1].as_integer(), None);
        assert_eq!(Reply::Bulk(None).as_bulk(), None);
        assert_eq!(Reply::Array(None).as_array(), None);
        assert!(Reply::parse_one(b":5\r\n:6\r\n").is_err(), "trailing bytes");
        assert!(Reply::parse_one(b"$3\r\nab").is_err(), "incomplete");
    }
}
