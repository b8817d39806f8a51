//! Decoding client requests: RESP2 arrays of bulk strings and inline commands.
//!
//! [`RespCodec`] is a `tokio_util` decoder that yields one request at a time as a list of
//! arguments. It keeps its place between reads, so a large request arriving in many small
//! pieces costs time proportional to its size, and every argument is a zero-copy slice of
//! the read buffer. Every length a client announces is checked against [`CodecLimits`]
//! before any memory is set aside for it; anything malformed ends in a [`ProtocolError`]
//! whose text is what Redis would send after `-ERR ` before closing the connection.

#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// Longest `*<count>` or `$<length>` line accepted, type byte included, CRLF excluded.
const MAX_LENGTH_LINE: usize = 32;

/// Most argument slots reserved up front, whatever count the client announces.
const MAX_PREALLOCATED_ARGS: usize = 1024;

/// Caps on what one request may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecLimits {
    /// Most arguments in one request, the command name included.
    pub max_args: usize,
    /// Longest bulk string (one argument), in bytes.
    pub max_bulk_bytes: usize,
    /// Longest inline command line, in bytes, line ending excluded.
    pub max_inline_bytes: usize,
}

impl Default for CodecLimits {
    /// Redis's argument count cap, room for a 512 KiB value plus an 8 KiB key in one bulk,
    /// and Redis's 64 KiB inline line.
    fn default() -> Self {
        Self {
            max_args: 1_048_576,
            max_bulk_bytes: 512 * 1024 + 8 * 1024,
            max_inline_bytes: 64 * 1024,
        }
    }
}

impl CodecLimits {
    /// The limits for a connection that has not authenticated yet (at most 10
    /// arguments and 16 KiB bulks before `AUTH`).
    pub fn before_auth() -> Self {
        Self {
            max_args: 10,
            max_bulk_bytes: 16 * 1024,
            max_inline_bytes: 16 * 1024,
        }
    }

    /// Sets the most arguments in one request.
    #[must_use]
    pub fn with_max_args(mut self, max_args: usize) -> Self {
        self.max_args = max_args;
        self
    }

    /// Sets the longest bulk string, in bytes.
    #[must_use]
    pub fn with_max_bulk_bytes(mut self, max_bulk_bytes: usize) -> Self {
        self.max_bulk_bytes = max_bulk_bytes;
        self
    }

    /// Sets the longest inline command line, in bytes.
    #[must_use]
    pub fn with_max_inline_bytes(mut self, max_inline_bytes: usize) -> Self {
        self.max_inline_bytes = max_inline_bytes;
        self
    }
}

/// Why a request could not be decoded. The connection replies `-ERR <Display text>` and
/// closes, as Redis does; the texts match Redis's where Redis has one.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The count after `*` is not an integer or is larger than `i32::MAX`.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// No line end within the first 32 bytes of a `*<count>` line.
    #[error("Protocol error: too big mbulk count string")]
    MultibulkCountTooLong,
    /// The length after `$` is not an integer or is negative.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// No line end within the first 32 bytes of a `$<length>` line.
    #[error("Protocol error: too big bulk count string")]
    BulkCountTooLong,
    /// A bulk string was expected but the line starts with another byte (shown as `?`
    /// when it is not printable ASCII).
    #[error("Protocol error: expected '$', got '{}'", shown(.0))]
    ExpectedBulk(u8),
    /// The bytes after a bulk string's data are not `\r\n`.
    #[error("Protocol error: expected CRLF after bulk data")]
    MissingBulkTerminator,
    /// An inline command line longer than the inline limit.
    #[error("Protocol error: too big inline request")]
    InlineTooBig,
    /// An inline command with an unterminated quote, or a closing quote followed by
    /// something other than a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// More arguments than the argument limit.
    #[error("Protocol error: too many arguments (limit {limit})")]
    TooManyArgs {
        /// The limit in force.
        limit: usize,
    },
    /// A bulk string longer than the bulk limit.
    #[error("Protocol error: bulk string of {len} bytes exceeds the limit of {limit}")]
    BulkTooBig {
        /// The announced length.
        len: u64,
        /// The limit in force.
        limit: usize,
    },
    /// Reading from the connection failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// How an unexpected byte appears in an error text: itself when printable ASCII, else `?`.
fn shown(byte: &u8) -> char {
    if byte.is_ascii_graphic() || *byte == b' ' {
        char::from(*byte)
    } else {
        '?'
    }
}

/// Where the decoder is inside the current request.
#[derive(Debug, Default)]
enum State {
    /// Between requests.
    #[default]
    Start,
    /// Inside an inline command; `scanned` bytes are known to hold no `\n`.
    Inline { scanned: usize },
    /// Inside an array of bulk strings; the `*<count>` line has been consumed.
    Multibulk {
        /// Arguments announced.
        expected: usize,
        /// Arguments decoded so far.
        args: Vec<Bytes>,
        /// The length of the current bulk string once its `$<length>` line is consumed.
        bulk_len: Option<usize>,
    },
}

/// Decoder of client requests (and, through [`crate::Reply`], encoder of replies).
///
/// Each decoded item is one request: its arguments in order, the command name first.
/// Empty requests (`*0`, `*-1`, blank inline lines) are skipped as Redis skips them.
#[derive(Debug, Default)]
pub struct RespCodec {
    limits: CodecLimits,
    state: State,
}

impl RespCodec {
    /// A codec enforcing `limits`.
    pub fn new(limits: CodecLimits) -> Self {
        Self {
            limits,
            state: State::Start,
        }
    }

    /// Replaces the limits, e.g. to relax them after `AUTH`. They apply from the next
    /// check on, including to a request already partly decoded.
    pub fn set_limits(&mut self, limits: CodecLimits) {
        self.limits = limits;
    }

    /// The limits in force.
    pub fn limits(&self) -> CodecLimits {
        self.limits
    }

    fn decode_request(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let limits = self.limits;
        loop {
            match &mut self.state {
                State::Start => {
                    let Some(&first) = buf.first() else {
                        return Ok(None);
                    };
                    if first != b'*' {
                        self.state = State::Inline { scanned: 0 };
                        continue;
                    }
                    let (count, used) = match length_line(buf) {
                        Line::Incomplete => return Ok(None),
                        Line::TooLong => return Err(ProtocolError::MultibulkCountTooLong),
                        Line::Malformed => return Err(ProtocolError::InvalidMultibulkLength),
                        Line::Complete { value, used } => (value, used),
                    };
                    if count > i64::from(i32::MAX) {
                        return Err(ProtocolError::InvalidMultibulkLength);
                    }
                    buf.advance(used);
                    // `*0` and `*-1` are empty requests: skipped, as Redis does.
                    let Ok(expected @ 1..) = usize::try_from(count) else {
                        continue;
                    };
                    if expected > limits.max_args {
                        return Err(ProtocolError::TooManyArgs {
                            limit: limits.max_args,
                        });
                    }
                    self.state = State::Multibulk {
                        expected,
                        args: Vec::with_capacity(expected.min(MAX_PREALLOCATED_ARGS)),
                        bulk_len: None,
                    };
                }
                State::Inline { scanned } => {
                    // The line may hold `max_inline_bytes` plus "\r"; its '\n' comes after.
                    let window = buf.len().min(limits.max_inline_bytes.saturating_add(2));
                    let from = (*scanned).min(window);
                    let newline = buf
                        .get(from..window)
                        .and_then(|fresh| fresh.iter().position(|&b| b == b'\n'))
                        .map(|at| at + from);
                    let Some(newline) = newline else {
                        if buf.len() >= limits.max_inline_bytes.saturating_add(2) {
                            return Err(ProtocolError::InlineTooBig);
                        }
                        *scanned = window;
                        return Ok(None);
                    };
                    let line = buf.split_to(newline + 1).freeze();
                    let mut end = newline;
                    if end > 0 && line.get(end - 1) == Some(&b'\r') {
                        end -= 1;
                    }
                    if end > limits.max_inline_bytes {
                        return Err(ProtocolError::InlineTooBig);
                    }
                    self.state = State::Start;
                    let args = split_inline(&line.slice(..end), limits.max_args)?;
                    if !args.is_empty() {
                        return Ok(Some(args));
                    }
                }
                State::Multibulk {
                    expected,
                    args,
                    bulk_len,
                } => match *bulk_len {
                    None => {
                        let Some(&first) = buf.first() else {
                            return Ok(None);
                        };
                        if first != b'$' {
                            return Err(ProtocolError::ExpectedBulk(first));
                        }
                        let (len, used) = match length_line(buf) {
                            Line::Incomplete => return Ok(None),
                            Line::TooLong => return Err(ProtocolError::BulkCountTooLong),
                            Line::Malformed => return Err(ProtocolError::InvalidBulkLength),
                            Line::Complete { value, used } => (value, used),
                        };
                        let len =
                            u64::try_from(len).map_err(|_| ProtocolError::InvalidBulkLength)?;
                        match usize::try_from(len) {
                            Ok(len) if len <= limits.max_bulk_bytes => *bulk_len = Some(len),
                            _ => {
                                return Err(ProtocolError::BulkTooBig {
                                    len,
                                    limit: limits.max_bulk_bytes,
                                });
                            }
                        }
                        buf.advance(used);
                    }
                    Some(len) => {
                        let end = len.saturating_add(2);
                        // Reject a bad terminator as soon as its first byte is here.
                        let have = buf.len().min(end);
                        let terminator = buf.get(len.min(have)..have).unwrap_or_default();
                        if !b"\r\n".starts_with(terminator) {
                            return Err(ProtocolError::MissingBulkTerminator);
                        }
                        if buf.len() < end {
                            return Ok(None);
                        }
                        args.push(buf.split_to(len).freeze());
                        buf.advance(2);
                        *bulk_len = None;
                        if args.len() >= *expected {
                            let args = std::mem::take(args);
                            self.state = State::Start;
                            return Ok(Some(args));
                        }
                    }
                },
            }
        }
    }
}

impl Decoder for RespCodec {
    type Item = Vec<Bytes>;
    type Error = ProtocolError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        let result = self.decode_request(buf);
        if result.is_err() {
            // The connection closes after a protocol error; start clean regardless.
            self.state = State::Start;
        }
        result
    }

    /// At end of input a partial request is dropped silently, as Redis drops it when a
    /// client disconnects: there is nobody left to send an error to.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        match self.decode(buf)? {
            Some(request) => Ok(Some(request)),
            None => {
                buf.clear();
                self.state = State::Start;
                Ok(None)
            }
        }
    }
}

/// What [`length_line`] found at the start of the buffer.
enum Line {
    /// No line end yet.
    Incomplete,
    /// No line end within the allowed length.
    TooLong,
    /// A line that is not `<type><integer>\r\n`.
    Malformed,
    /// A well-formed line: its integer and its length including CRLF.
    Complete { value: i64, used: usize },
}

/// Reads a `*<count>\r\n` or `$<length>\r\n` line; `buf[0]` is the type byte. Looks at
/// no more than `MAX_LENGTH_LINE + 2` bytes.
fn length_line(buf: &[u8]) -> Line {
    let window = buf
        .get(..buf.len().min(MAX_LENGTH_LINE + 2))
        .unwrap_or_default();
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        return if window.len() >= MAX_LENGTH_LINE + 2 {
            Line::TooLong
        } else {
            Line::Incomplete
        };
    };
    let digits = window
        .get(..newline)
        .and_then(|line| line.strip_suffix(b"\r"))
        .and_then(|line| line.get(1..));
    match digits.and_then(crate::args::parse_i64) {
        Some(value) => Line::Complete {
            value,
            used: newline + 1,
        },
        None => Line::Malformed,
    }
}

/// The separators between inline arguments (C's `isspace`, as Redis uses).
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c')
}

/// Splits an inline command line (line ending removed) into arguments the way Redis's
/// `sdssplitargs` does: runs of non-space bytes, with `"..."` (backslash escapes,
/// including `\xHH`) and `'...'` (only `\'`) quoting. Arguments without quotes are
/// zero-copy slices of `line`.
fn split_inline(line: &Bytes, max_args: usize) -> Result<Vec<Bytes>, ProtocolError> {
    let text: &[u8] = line;
    let mut args = Vec::new();
    let mut at = 0;
    loop {
        while text.get(at).is_some_and(|&b| is_space(b)) {
            at += 1;
        }
        if at >= text.len() {
            return Ok(args);
        }
        if args.len() >= max_args {
            return Err(ProtocolError::TooManyArgs { limit: max_args });
        }
        let start = at;
        // Set once a quote is met: from then on the argument is built byte by byte.
        let mut owned: Option<Vec<u8>> = None;
        while let Some(&byte) = text.get(at) {
            if is_space(byte) {
                break;
            }
            if byte == b'"' || byte == b'\'' {
                let mut arg = owned
                    .take()
                    .unwrap_or_else(|| text.get(start..at).unwrap_or_default().to_vec());
                at = read_quoted(text, at, &mut arg)?;
                owned = Some(arg);
                // A closing quote ends the argument (read_quoted checked what follows).
                break;
            }
            if let Some(arg) = owned.as_mut() {
                arg.push(byte);
            }
            at += 1;
        }
        args.push(match owned {
            Some(arg) => Bytes::from(arg),
            None => line.slice(start..at),
        });
    }
}

/// Reads a quoted section starting at the quote `text[open]`, appending its content to
/// `arg`; returns the index just after the closing quote, which must be followed by a
/// space or the end of the line.
fn read_quoted(text: &[u8], open: usize, arg: &mut Vec<u8>) -> Result<usize, ProtocolError> {
    let quote = text.get(open).copied().unwrap_or(b'"');
    let mut at = open + 1;
    loop {
        let Some(&byte) = text.get(at) else {
            return Err(ProtocolError::UnbalancedQuotes);
        };
        let next = text.get(at + 1).copied();
        if byte == quote {
            at += 1;
            if text.get(at).is_some_and(|&b| !is_space(b)) {
                return Err(ProtocolError::UnbalancedQuotes);
            }
            return Ok(at);
        }
        match (quote, byte, next) {
            (b'"', b'\\', Some(b'x')) => {
                let high = text.get(at + 2).copied().and_then(hex_value);
                let low = text.get(at + 3).copied().and_then(hex_value);
                if let (Some(high), Some(low)) = (high, low) {
                    arg.push(high << 4 | low);
                    at += 4;
                } else {
                    arg.push(b'x');
                    at += 2;
                }
            }
            (b'"', b'\\', Some(escaped)) => {
                arg.push(match escaped {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => b'\x08',
                    b'a' => b'\x07',
                    other => other,
                });
                at += 2;
            }
            (b'\'', b'\\', Some(b'\'')) => {
                arg.push(b'\'');
                at += 2;
            }
            _ => {
                arg.push(byte);
                at += 1;
            }
        }
    }
}

fn hex_value(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|digit| u8::try_from(digit).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Request = Vec<Vec<u8>>;

    fn owned(request: Vec<Bytes>) -> Request {
        request.into_iter().map(|arg| arg.to_vec()).collect()
    }

    fn req(args: &[&[u8]]) -> Request {
        args.iter().map(|arg| arg.to_vec()).collect()
    }

    /// Decodes everything in `buf`: the requests, then the error text if one came.
    fn drain(codec: &mut RespCodec, buf: &mut BytesMut) -> (Vec<Request>, Option<String>) {
        let mut requests = Vec::new();
        loop {
            match codec.decode(buf) {
                Ok(Some(request)) => requests.push(owned(request)),
                Ok(None) => return (requests, None),
                Err(err) => return (requests, Some(err.to_string())),
            }
        }
    }

    fn decode_whole(input: &[u8], limits: CodecLimits) -> (Vec<Request>, Option<String>) {
        let mut codec = RespCodec::new(limits);
        let mut buf = BytesMut::from(input);
        drain(&mut codec, &mut buf)
    }

    /// Feeds `input` in two pieces split at `split`, decoding after each piece.
    fn decode_split(
        input: &[u8],
        split: usize,
        limits: CodecLimits,
    ) -> (Vec<Request>, Option<String>) {
        let mut codec = RespCodec::new(limits);
        let mut buf = BytesMut::new();
        let (head, tail) = input.split_at(split);
        buf.extend_from_slice(head);
        let (mut requests, err) = drain(&mut codec, &mut buf);
        if err.is_some() {
            return (requests, err);
        }
        buf.extend_from_slice(tail);
        let (more, err) = drain(&mut codec, &mut buf);
        requests.extend(more);
        (requests, err)
    }

    /// Feeds `input` one byte at a time, decoding after each byte.
    fn decode_bytewise(input: &[u8], limits: CodecLimits) -> (Vec<Request>, Option<String>) {
        let mut codec = RespCodec::new(limits);
        let mut buf = BytesMut::new();
        let mut requests = Vec::new();
        for &byte in input {
            buf.extend_from_slice(&[byte]);
            let (more, err) = drain(&mut codec, &mut buf);
            requests.extend(more);
            if err.is_some() {
                return (requests, err);
            }
        }
        (requests, None)
    }

    /// Asserts that whole, split-anywhere and byte-by-byte feeding all agree with `want`.
    fn assert_decodes(input: &[u8], limits: CodecLimits, want: &[Request], want_err: Option<&str>) {
        let want = (want.to_vec(), want_err.map(str::to_owned));
        assert_eq!(decode_whole(input, limits), want, "whole {input:?}");
        for split in 0..=input.len() {
            assert_eq!(
                decode_split(input, split, limits),
                want,
                "split at {split} of {input:?}"
            );
        }
        assert_eq!(decode_bytewise(input, limits), want, "bytewise {input:?}");
    }

    fn ok(input: &[u8], want: &[Request]) {
        assert_decodes(input, CodecLimits::default(), want, None);
    }

    fn fails(input: &[u8], message: &str) {
        assert_decodes(input, CodecLimits::default(), &[], Some(message));
    }

    #[test]
    fn decodes_an_array_of_bulk_strings() {
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"[..]);
        let request = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(
            request,
            vec![Bytes::from_static(b"GET"), Bytes::from_static(b"key")]
        );
        assert!(buf.is_empty());
        assert!(matches!(codec.state, State::Start));
        assert!(codec.decode(&mut buf).unwrap().is_none());
    }

    #[test]
    fn bulk_strings_are_binary_safe_and_may_be_empty() {
        ok(
            b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$6\r\na\r\n\0\xffb\r\n",
            &[req(&[b"SET", b"", b"a\r\n\0\xffb"])],
        );
    }

    #[test]
    fn arguments_are_slices_of_the_read_buffer() {
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let request = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(request[0].as_ptr() as usize, base + 8);
        assert_eq!(request[1].as_ptr() as usize, base + 17);

        let mut buf = BytesMut::from(&b"SET key value\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let request = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(request[1].as_ptr() as usize, base + 4);
        assert_eq!(request[2].as_ptr() as usize, base + 8);
    }

    #[test]
    fn pipelined_requests_decode_in_order() {
        ok(
            b"*1\r\n$4\r\nPING\r\n*0\r\n*-1\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n\r\nPING x\r\n*1\r\n$4\r\nQUIT\r\n",
            &[
                req(&[b"PING"]),
                req(&[b"ECHO", b"hi"]),
                req(&[b"PING", b"x"]),
                req(&[b"QUIT"]),
            ],
        );
    }

    #[test]
    fn empty_requests_are_skipped() {
        ok(b"*0\r\n", &[]);
        ok(b"*-1\r\n", &[]);
        ok(b"*-5\r\n", &[]);
        ok(b"\r\n\n \t \r\n", &[]);
        ok(b"*0\r\n\r\n*1\r\n$1\r\na\r\n", &[req(&[b"a"])]);
    }

    #[test]
    fn partial_frames_wait_and_keep_their_place() {
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGE"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        // The count and length lines are consumed; only the unfinished data remains.
        assert_eq!(&buf[..], b"GE");
        match &codec.state {
            State::Multibulk {
                expected,
                args,
                bulk_len,
            } => {
                assert_eq!(*expected, 2);
                assert!(args.is_empty());
                assert_eq!(*bulk_len, Some(3));
            }
            other => panic!("unexpected state {other:?}"),
        }
        buf.extend_from_slice(b"T\r\n$1");
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert_eq!(&buf[..], b"$1");
        match &codec.state {
            State::Multibulk { args, bulk_len, .. } => {
                assert_eq!(args, &vec![Bytes::from_static(b"GET")]);
                assert_eq!(*bulk_len, None);
            }
            other => panic!("unexpected state {other:?}"),
        }
        buf.extend_from_slice(b"\r\nk\r\n");
        assert_eq!(
            owned(codec.decode(&mut buf).unwrap().unwrap()),
            req(&[b"GET", b"k"])
        );
        assert!(buf.is_empty());
        assert!(matches!(codec.state, State::Start));
    }

    #[test]
    fn partial_inline_lines_are_not_rescanned() {
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::new();
        for round in 1..=100 {
            buf.extend_from_slice(b"abcdefghij");
            assert!(codec.decode(&mut buf).unwrap().is_none());
            match codec.state {
                State::Inline { scanned } => assert_eq!(scanned, round * 10),
                ref other => panic!("unexpected state {other:?}"),
            }
        }
        buf.extend_from_slice(b" z\r\n");
        let request = owned(codec.decode(&mut buf).unwrap().unwrap());
        assert_eq!(request.len(), 2);
        assert_eq!(request[0].len(), 1000);
        assert_eq!(request[1], b"z");
    }

    #[test]
    fn every_split_point_gives_the_same_requests() {
        type Case<'a> = (&'a [u8], &'a [&'a [&'a [u8]]]);
        let inputs: &[Case] = &[
            (
                b"*3\r\n$3\r\nSET\r\n$5\r\nmykey\r\n$7\r\nmyvalue\r\n",
                &[&[b"SET", b"mykey", b"myvalue"]],
            ),
            (
                b"*2\r\n$3\r\nGET\r\n$0\r\n\r\nPING\r\n*1\r\n$12\r\nhello\r\nworld\r\n",
                &[&[b"GET", b""], &[b"PING"], &[b"hello\r\nworld"]],
            ),
            (
                b"SET k \"a b\\n\"\n  \r\n*1\r\n$1\r\nx\r\n",
                &[&[b"SET", b"k", b"a b\n"], &[b"x"]],
            ),
        ];
        for (input, want) in inputs {
            let want: Vec<Request> = want.iter().map(|r| req(r)).collect();
            ok(input, &want);
        }
    }

    #[test]
    fn malformed_multibulk_counts() {
        let invalid = "Protocol error: invalid multibulk length";
        fails(b"*abc\r\n", invalid);
        fails(b"*\r\n", invalid);
        fails(b"*+1\r\n", invalid);
        fails(b"*01\r\n", invalid);
        fails(b"* 1\r\n", invalid);
        fails(b"*1\n", invalid);
        fails(b"*2147483648\r\n", invalid);
        fails(b"*99999999999999999999\r\n", invalid);
        let long = format!("*{}\r\n", "1".repeat(40));
        fails(
            long.as_bytes(),
            "Protocol error: too big mbulk count string",
        );
        let long = format!("*{}", "1".repeat(33));
        fails(
            long.as_bytes(),
            "Protocol error: too big mbulk count string",
        );
        // 31 digits fit in the line (32 bytes with the '*'), although not in an i64.
        let fits = format!("*{}\r\n", "1".repeat(31));
        fails(fits.as_bytes(), invalid);
    }

    #[test]
    fn malformed_bulk_headers() {
        fails(b"*1\r\nx\r\n", "Protocol error: expected '$', got 'x'");
        fails(b"*1\r\n:1\r\n", "Protocol error: expected '$', got ':'");
        fails(b"*1\r\n\0", "Protocol error: expected '$', got '?'");
        fails(b"*1\r\n\r\n", "Protocol error: expected '$', got '?'");
        fails(
            b"*2\r\n$1\r\na\r\nb",
            "Protocol error: expected '$', got 'b'",
        );
        let invalid = "Protocol error: invalid bulk length";
        fails(b"*1\r\n$abc\r\n", invalid);
        fails(b"*1\r\n$-1\r\n", invalid);
        fails(b"*1\r\n$\r\n", invalid);
        fails(b"*1\r\n$+3\r\n", invalid);
        fails(b"*1\r\n$03\r\n", invalid);
        fails(b"*1\r\n$3\n", invalid);
        fails(b"*1\r\n$99999999999999999999\r\n", invalid);
        let long = format!("*1\r\n${}", "9".repeat(40));
        fails(long.as_bytes(), "Protocol error: too big bulk count string");
    }

    #[test]
    fn bulk_data_must_end_with_crlf() {
        let message = "Protocol error: expected CRLF after bulk data";
        fails(b"*1\r\n$3\r\nabcX\r\n", message);
        fails(b"*1\r\n$3\r\nabc\rX", message);
        fails(b"*1\r\n$3\r\nabc\n\r", message);
        fails(b"*1\r\n$0\r\nx", message);
    }

    #[test]
    fn errors_after_good_requests_keep_the_good_ones() {
        assert_decodes(
            b"*1\r\n$4\r\nPING\r\n*1\r\n$-2\r\n",
            CodecLimits::default(),
            &[req(&[b"PING"])],
            Some("Protocol error: invalid bulk length"),
        );
    }

    #[test]
    fn argument_count_limit() {
        fails(
            b"*1048577\r\n",
            "Protocol error: too many arguments (limit 1048576)",
        );
        fails(
            b"*2147483647\r\n",
            "Protocol error: too many arguments (limit 1048576)",
        );
        // At the limit: accepted, and little is reserved before the arguments arrive.
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*1048576\r\n"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        match &codec.state {
            State::Multibulk { expected, args, .. } => {
                assert_eq!(*expected, 1_048_576);
                assert!(args.capacity() <= MAX_PREALLOCATED_ARGS);
            }
            other => panic!("unexpected state {other:?}"),
        }

        let limits = CodecLimits::default().with_max_args(3);
        assert_decodes(
            b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
            limits,
            &[req(&[b"a", b"b", b"c"])],
            None,
        );
        assert_decodes(
            b"*4\r\n",
            limits,
            &[],
            Some("Protocol error: too many arguments (limit 3)"),
        );
        assert_decodes(b"a b c\r\n", limits, &[req(&[b"a", b"b", b"c"])], None);
        assert_decodes(
            b"a b c d\r\n",
            limits,
            &[],
            Some("Protocol error: too many arguments (limit 3)"),
        );
    }

    #[test]
    fn bulk_size_limit_with_defaults() {
        // 600 KiB is refused as soon as its length line arrives.
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$614400\r\n"[..]);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(matches!(
            err,
            ProtocolError::BulkTooBig {
                len: 614_400,
                limit: 532_480
            }
        ));
        assert_eq!(
            err.to_string(),
            "Protocol error: bulk string of 614400 bytes exceeds the limit of 532480"
        );

        // 500 KiB passes, arriving in 1 KiB reads.
        let value = vec![b'v'; 500 * 1024];
        let mut input = b"*2\r\n$3\r\nSET\r\n$512000\r\n".to_vec();
        input.extend_from_slice(&value);
        input.extend_from_slice(b"\r\n");
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::new();
        let mut requests = Vec::new();
        for chunk in input.chunks(1024) {
            buf.extend_from_slice(chunk);
            if let Some(request) = codec.decode(&mut buf).unwrap() {
                requests.push(request);
            }
        }
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0][0], Bytes::from_static(b"SET"));
        assert_eq!(requests[0][1].len(), 512_000);
        assert!(requests[0][1].iter().all(|&b| b == b'v'));
        assert!(buf.is_empty());

        // Exactly at the limit is fine; one byte more is not.
        let at_limit = format!("*1\r\n${}\r\n", 532_480);
        let mut buf = BytesMut::from(at_limit.as_bytes());
        assert!(RespCodec::default().decode(&mut buf).unwrap().is_none());
        fails(
            b"*1\r\n$532481\r\n",
            "Protocol error: bulk string of 532481 bytes exceeds the limit of 532480",
        );
    }

    #[test]
    fn set_limits_tightens_and_relaxes() {
        let mut codec = RespCodec::new(CodecLimits::before_auth());
        assert_eq!(codec.limits(), CodecLimits::before_auth());
        let mut buf = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(
            codec.decode(&mut buf).unwrap_err().to_string(),
            "Protocol error: too many arguments (limit 10)"
        );
        let mut buf = BytesMut::from(&b"*1\r\n$16385\r\n"[..]);
        assert_eq!(
            codec.decode(&mut buf).unwrap_err().to_string(),
            "Protocol error: bulk string of 16385 bytes exceeds the limit of 16384"
        );
        codec.set_limits(CodecLimits::default());
        let mut buf = BytesMut::from(&b"*11\r\n"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        codec.set_limits(CodecLimits::default().with_max_bulk_bytes(2));
        buf.extend_from_slice(b"$3\r\n");
        assert_eq!(
            codec.decode(&mut buf).unwrap_err().to_string(),
            "Protocol error: bulk string of 3 bytes exceeds the limit of 2"
        );
    }

    #[test]
    fn inline_commands() {
        ok(b"PING\r\n", &[req(&[b"PING"])]);
        ok(b"PING\n", &[req(&[b"PING"])]);
        ok(b"  SET\ta  b \r\n", &[req(&[b"SET", b"a", b"b"])]);
        ok(b"GET a\rb\r\n", &[req(&[b"GET", b"a", b"b"])]);
        ok(
            b"\r\n\nPING\r\nECHO x\n",
            &[req(&[b"PING"]), req(&[b"ECHO", b"x"])],
        );
        // No line end yet: nothing.
        ok(b"PING", &[]);
    }

    #[test]
    fn inline_quotes() {
        ok(
            b"SET k \"hello world\"\r\n",
            &[req(&[b"SET", b"k", b"hello world"])],
        );
        ok(
            b"ECHO \"a\\x41\\n\\r\\t\\b\\a\\\\\\\"\\q\"\r\n",
            &[req(&[b"ECHO", b"aA\n\r\t\x08\x07\\\"q"])],
        );
        ok(b"ECHO \"\\xZZ\"\r\n", &[req(&[b"ECHO", b"xZZ"])]);
        ok(
            b"ECHO 'it\\'s \"x\"'\r\n",
            &[req(&[b"ECHO", b"it's \"x\""])],
        );
        ok(b"ECHO 'a\\nb'\r\n", &[req(&[b"ECHO", b"a\\nb"])]);
        ok(b"ECHO \"\" ''\r\n", &[req(&[b"ECHO", b"", b""])]);
        ok(b"ECHO ab\"c d\"\r\n", &[req(&[b"ECHO", b"abc d"])]);
        let unbalanced = "Protocol error: unbalanced quotes in request";
        fails(b"SET \"abc\r\n", unbalanced);
        fails(b"SET 'abc\r\n", unbalanced);
        fails(b"SET \"a\"b\r\n", unbalanced);
        fails(b"SET \"abc\\\"\r\n", unbalanced);
    }

    #[test]
    fn inline_length_limit() {
        let at_limit = format!("{}\r\n", "a".repeat(64 * 1024));
        let (requests, err) = decode_whole(at_limit.as_bytes(), CodecLimits::default());
        assert_eq!(err, None);
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0][0].len(), 64 * 1024);
        let message = Some("Protocol error: too big inline request".to_owned());
        let over = format!("{}\r\n", "a".repeat(64 * 1024 + 1));
        assert_eq!(
            decode_whole(over.as_bytes(), CodecLimits::default()),
            (vec![], message.clone())
        );
        // Without a line end the error comes once the line cannot fit any more.
        let endless = "a".repeat(64 * 1024 + 2);
        assert_eq!(
            decode_whole(endless.as_bytes(), CodecLimits::default()),
            (vec![], message.clone())
        );
        let waiting = format!("{}\r", "a".repeat(64 * 1024));
        assert_eq!(
            decode_whole(waiting.as_bytes(), CodecLimits::default()),
            (vec![], None)
        );
        // Small limits, checked at every split point.
        let limits = CodecLimits::default().with_max_inline_bytes(5);
        assert_decodes(b"ab cd\r\n", limits, &[req(&[b"ab", b"cd"])], None);
        assert_decodes(b"ab cd\n", limits, &[req(&[b"ab", b"cd"])], None);
        assert_decodes(b"ab cde\r\n", limits, &[], message.as_deref());
        assert_decodes(b"ab cde\n", limits, &[], message.as_deref());
        assert_decodes(b"abcdefgh", limits, &[], message.as_deref());
    }

    #[test]
    fn decode_eof_drops_a_partial_request() {
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n"[..]);
        assert_eq!(
            owned(codec.decode_eof(&mut buf).unwrap().unwrap()),
            req(&[b"PING"])
        );
        assert!(codec.decode_eof(&mut buf).unwrap().is_none());
        assert!(buf.is_empty());
        assert!(matches!(codec.state, State::Start));
    }

    #[test]
    fn state_resets_after_an_error() {
        let mut codec = RespCodec::default();
        let mut buf = BytesMut::from(&b"*2\r\n$1\r\na\r\nx"[..]);
        assert!(codec.decode(&mut buf).is_err());
        assert!(matches!(codec.state, State::Start));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator (xorshift) over protocol-ish bytes; the fuzzer
        // does this properly, this keeps the obvious cases in the unit tests.
        let alphabet = b"*$\r\n-+0123456789 \"'\\xabAB\t\0";
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let limits = CodecLimits::default()
            .with_max_args(4)
            .with_max_bulk_bytes(8)
            .with_max_inline_bytes(12);
        let mut decoded = 0;
        for _ in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..(seed % 24) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                input.push(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            let whole = decode_whole(&input, limits);
            decoded += whole.0.len();
            assert_eq!(decode_bytewise(&input, limits), whole, "{input:?}");
        }
        assert!(decoded > 0);
    }

    #[tokio::test]
    async fn works_inside_framed() {
        use futures::{SinkExt, StreamExt};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_util::codec::Framed;

        use crate::Reply;

        let (mut client, server) = tokio::io::duplex(64);
        let mut framed = Framed::new(server, RespCodec::default());
        client
            .write_all(b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\nPING\r\n")
            .await
            .unwrap();
        let first = framed.next().await.unwrap().unwrap();
        assert_eq!(owned(first), req(&[b"ECHO", b"hello"]));
        let second = framed.next().await.unwrap().unwrap();
        assert_eq!(owned(second), req(&[b"PING"]));
        framed.send(Reply::bulk("hello")).await.unwrap();
        framed.send(&Reply::simple("PONG")).await.unwrap();
        let mut got = [0u8; 18];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"$5\r\nhello\r\n+PONG\r\n");
        drop(client);
        assert!(framed.next().await.is_none());
    }
}
