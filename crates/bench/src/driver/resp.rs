//! The RESP driver: Redis, Trireme's RESP listener, Dynomite, anything Redis-speaking.
//!
//! One TCP connection per driver, requests sent one at a time (no pipelining). Commands are
//! RESP2 arrays of bulk strings; replies are parsed by [`parse_reply`]. After an I/O error,
//! a timeout or an unparsable reply the connection is dropped and the next request opens a
//! new one, so a restarted server is picked up again.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{DriverError, REQUEST_TIMEOUT};
use crate::scenario::Operation;

/// Nesting limit for array replies; deeper replies are treated as a protocol error.
const MAX_DEPTH: usize = 32;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
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
            Some(n) => {
                let end = next
                    .checked_add(n)
                    .ok_or_else(|| format!("bad length {n}"))?;
                let Some(trailer) = buf.get(end..end + 2) else {
                    return Ok(None);
                };
                if trailer != b"\r\n" {
                    return Err("bulk string not terminated by CRLF".to_owned());
                }
                (
                    Reply::Bulk(Some(Bytes::copy_from_slice(&buf[next..end]))),
                    end + 2,
                )
            }
        },
        b'*' => match parse_len(line)? {
            None => (Reply::Array(None), next),
            Some(n) => {
                let mut items = Vec::with_capacity(n.min(1024));
                let mut at = next;
                for _ in 0..n {
                    match parse_at(buf, at, depth + 1)? {
                        Some((item, after)) => {
                            items.push(item);
                            at = after;
                        }
                        None => return Ok(None),
                    }
                }
                (Reply::Array(Some(items)), at)
            }
        },
        other => return Err(format!("unknown reply type byte 0x{other:02x}")),
    };
    Ok(Some(reply))
}

/// Encodes a command as a RESP array of bulk strings.
fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Parses a `redis://host:port` target (a trailing `/` is allowed) into `host:port`.
pub fn parse_target(target: &str) -> Result<String, DriverError> {
    super::host_port(target, "redis")
}

struct Connection {
    stream: TcpStream,
    buf: BytesMut,
}

/// A RESP client on one connection, opened lazily and reopened after failures.
pub struct RespDriver {
    addr: String,
    timeout: Duration,
    conn: Option<Connection>,
    out: Vec<u8>,
}

impl std::fmt::Debug for RespDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespDriver")
            .field("addr", &self.addr)
            .field("connected", &self.conn.is_some())
            .finish()
    }
}

impl RespDriver {
    /// A driver for `target` (`redis://host:port`); connects on the first request.
    pub fn new(target: &str) -> Result<Self, DriverError> {
        Ok(RespDriver {
            addr: parse_target(target)?,
            timeout: REQUEST_TIMEOUT,
            conn: None,
            out: Vec::new(),
        })
    }

    /// A driver for `target`, connected now (fails if the target cannot be reached).
    pub async fn connect(target: &str) -> Result<Self, DriverError> {
        let mut driver = Self::new(target)?;
        let timeout = driver.timeout;
        match tokio::time::timeout(timeout, driver.ensure_connected()).await {
            Ok(result) => drop(result?),
            Err(_) => return Err(DriverError::Timeout(timeout)),
        }
        Ok(driver)
    }

    /// Changes the per-request timeout (default [`REQUEST_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `host:port` this driver talks to.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the RESP driver can perform `op`: get, put, delete and update.
    #[must_use]
    pub fn supports(op: Operation) -> bool {
        matches!(
            op,
            Operation::Get | Operation::Put | Operation::Delete | Operation::Update
        )
    }

    async fn ensure_connected(&mut self) -> Result<&mut Connection, DriverError> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(&self.addr).await?;
            stream.set_nodelay(true)?;
            self.conn = Some(Connection {
                stream,
                buf: BytesMut::with_capacity(16 * 1024),
            });
        }
        match self.conn.as_mut() {
            Some(conn) => Ok(conn),
            None => Err(DriverError::Protocol("connection vanished".to_owned())),
        }
    }

    async fn exchange(&mut self, args: &[&[u8]]) -> Result<Reply, DriverError> {
        let mut out = std::mem::take(&mut self.out);
        encode(args, &mut out);
        let result = async {
            let conn = self.ensure_connected().await?;
            conn.stream.write_all(&out).await?;
            loop {
                if let Some((reply, used)) = parse_reply(&conn.buf)? {
                    conn.buf.advance(used);
                    return Ok(reply);
                }
                if conn.stream.read_buf(&mut conn.buf).await? == 0 {
                    return Err(DriverError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed by the server",
                    )));
                }
            }
        }
        .await;
        self.out = out;
        result
    }

    /// Sends one command and waits for its reply. An error reply becomes
    /// [`DriverError::Server`]; after any other failure the connection is dropped.
    pub async fn request(&mut self, args: &[&[u8]]) -> Result<Reply, DriverError> {
        let timeout = self.timeout;
        let result = match tokio::time::timeout(timeout, self.exchange(args)).await {
            Ok(result) => result,
            Err(_) => Err(DriverError::Timeout(timeout)),
        };
        match result {
            Ok(Reply::Error(message)) => Err(DriverError::Server(message)),
            Ok(reply) => Ok(reply),
            Err(e) => {
                // The stream may hold half a reply or a late one: start afresh next time.
                self.conn = None;
                Err(e)
            }
        }
    }

    fn unexpected(command: &str, reply: &Reply) -> DriverError {
        DriverError::Protocol(format!("unexpected reply to {command}: {reply:?}"))
    }

    /// `PING`; succeeds on `+PONG`.
    pub async fn ping(&mut self) -> Result<(), DriverError> {
        match self.request(&[b"PING"]).await? {
            Reply::Simple(s) if s == "PONG" => Ok(()),
            other => Err(Self::unexpected("PING", &other)),
        }
    }

    /// `GET key`: the value, or `None` when the key does not exist.
    pub async fn get(&mut self, key: &str) -> Result<Option<Bytes>, DriverError> {
        match self.request(&[b"GET", key.as_bytes()]).await? {
            Reply::Bulk(value) => Ok(value),
            other => Err(Self::unexpected("GET", &other)),
        }
    }

    /// `SET key value`.
    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        match self.request(&[b"SET", key.as_bytes(), value]).await? {
            Reply::Simple(s) if s == "OK" => Ok(()),
            other => Err(Self::unexpected("SET", &other)),
        }
    }

    /// Same as [`RespDriver::put`] (no `XX`: a missing key is created).
    pub async fn update(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        self.put(key, value).await
    }

    /// `DEL key`: whether the key existed.
    pub async fn delete(&mut self, key: &str) -> Result<bool, DriverError> {
        match self.request(&[b"DEL", key.as_bytes()]).await? {
            Reply::Integer(n) => Ok(n > 0),
            other => Err(Self::unexpected("DEL", &other)),
        }
    }

    /// Performs `op` on `key` (`value` is used by put and update; an empty value if absent).
    /// `cas`, `list` and `search` fail with [`DriverError::Unsupported`].
    pub async fn execute(
        &mut self,
        op: Operation,
        key: &str,
        value: Option<&[u8]>,
    ) -> Result<(), DriverError> {
        let value = value.unwrap_or_default();
        match op {
            Operation::Get => self.get(key).await.map(drop),
            Operation::Put => self.put(key, value).await,
            Operation::Update => self.update(key, value).await,
            Operation::Delete => self.delete(key).await.map(drop),
            Operation::List | Operation::Search | Operation::Cas => {
                Err(DriverError::Unsupported { op, driver: "resp" })
            }
        }
    }
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
    fn encodes_commands_as_bulk_arrays() {
        let mut out = Vec::new();
        encode(&[b"SET", b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn targets_must_be_redis_urls() {
        assert_eq!(
            parse_target("redis://127.0.0.1:6379").unwrap(),
            "127.0.0.1:6379"
        );
        assert_eq!(
            parse_target("redis://localhost:7000/").unwrap(),
            "localhost:7000"
        );
        for bad in [
            "127.0.0.1:6379",
            "http://127.0.0.1:6379",
            "redis://127.0.0.1",
            "redis://:6379",
            "redis://host:0",
            "redis://host:99999",
            "redis://host:6379/0",
        ] {
            let err = parse_target(bad).unwrap_err();
            assert_eq!(err.kind(), "target", "{bad}");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
