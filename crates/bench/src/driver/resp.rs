//! The RESP driver: Redis, Trireme's RESP listener, Dynomite, anything Redis-speaking.
//!
//! One TCP connection per driver, requests sent one at a time (no pipelining). Commands are
//! RESP2 arrays of bulk strings; replies are parsed by [`crate::reply::parse_reply`]. After an I/O error,
//! a timeout or an unparsable reply the connection is dropped and the next request opens a
//! new one, so a restarted server is picked up again.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{DriverError, REQUEST_TIMEOUT};
use crate::reply::{Reply, parse_reply};
use crate::scenario::Operation;

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
    stream: trireme_tls::MaybeTls,
    buf: BytesMut,
}

/// A RESP client on one connection, opened lazily and reopened after failures.
pub struct RespDriver {
    addr: String,
    /// Speak TLS (a `rediss://` target).
    tls: bool,
    /// The target's ACL token, sent with `AUTH` on every new connection.
    token: Option<String>,
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
            tls: super::is_tls(target),
            token: super::target_token(target),
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
            let stream = super::open_stream(&self.addr, self.tls).await?;
            let mut conn = Connection {
                stream,
                buf: BytesMut::with_capacity(16 * 1024),
            };
            if let Some(token) = &self.token {
                let mut out = Vec::new();
                encode(&[b"AUTH", token.as_bytes()], &mut out);
                conn.stream.write_all(&out).await?;
                // TLS holds the last records until flushed.
                conn.stream.flush().await?;
                let reply = loop {
                    if let Some((reply, used)) = parse_reply(&conn.buf)? {
                        conn.buf.advance(used);
                        break reply;
                    }
                    if conn.stream.read_buf(&mut conn.buf).await? == 0 {
                        return Err(DriverError::Protocol(
                            "the server closed the connection at AUTH".into(),
                        ));
                    }
                };
                if let Reply::Error(message) = reply {
                    return Err(DriverError::Server(format!("AUTH: {message}")));
                }
            }
            self.conn = Some(conn);
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
            // TLS holds the last records until flushed.
            conn.stream.flush().await?;
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
            Operation::List
            | Operation::Search
            | Operation::Cas
            | Operation::Txn
            | Operation::TxnShards => Err(DriverError::Unsupported { op, driver: "resp" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // A password is the target's ACL token, not part of the address.
        assert_eq!(
            parse_target("redis://default:s3cret@127.0.0.1:6379").unwrap(),
            "127.0.0.1:6379"
        );
        assert_eq!(
            super::super::target_token("redis://default:s3cret@127.0.0.1:6379").as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            super::super::target_token("http://:a%40b@127.0.0.1:7700").as_deref(),
            Some("a@b")
        );
        assert_eq!(super::super::target_token("redis://127.0.0.1:6379"), None);
        assert_eq!(
            super::super::redact_target("rediss://default:s3cret@127.0.0.1:6379"),
            "rediss://default:***@127.0.0.1:6379"
        );
        assert_eq!(
            super::super::redact_target("http://127.0.0.1:7700"),
            "http://127.0.0.1:7700"
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
