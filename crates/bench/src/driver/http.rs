//! The Consul KV HTTP driver: GET/PUT/DELETE on `/v1/kv/<key>` over one keep-alive HTTP/1.1
//! connection per worker. It serves `driver = "consul"` (Consul itself) and, until the
//! slot-aware client exists, `driver = "trireme"` (Trireme speaks the same API).
//!
//! A small hand-written client on purpose: the load generator must not be what limits a run,
//! and a request is a few formatted lines and one read of a length-delimited answer.

use super::{DriverError, REQUEST_TIMEOUT};
use crate::scenario::{Consistency, Operation};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Longest header section accepted from a server.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// One worker's connection to a Consul-KV-speaking server.
pub struct HttpDriver {
    target: String,
    addr: String,
    read_suffix: &'static str,
    conn: Option<BufReader<TcpStream>>,
    timeout: Duration,
}

/// `http://host:port` (an optional trailing `/`) → `host:port`.
pub fn parse_target(target: &str) -> Result<String, DriverError> {
    super::host_port(target, "http")
}

impl HttpDriver {
    /// A driver for `target`; reads use `consistency` (`?consistent`, `?stale`, or neither).
    pub fn new(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        Ok(Self {
            target: target.to_string(),
            addr: parse_target(target)?,
            read_suffix: match consistency {
                Consistency::Default => "",
                Consistency::Consistent => "&consistent",
                Consistency::Stale => "&stale",
            },
            conn: None,
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// Connects now, so an unreachable target is reported before a run starts.
    pub async fn connect(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        let mut driver = Self::new(target, consistency)?;
        driver.conn = Some(BufReader::new(TcpStream::connect(&driver.addr).await?));
        Ok(driver)
    }

    /// The target this driver talks to.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Whether this driver can perform `op`.
    pub fn supports(op: Operation) -> bool {
        matches!(
            op,
            Operation::Get | Operation::Put | Operation::Update | Operation::Delete
        )
    }

    /// Sends one request and returns the status and body. Any failure drops the connection;
    /// the next request opens a new one.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), DriverError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.exchange(method, path, body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => {
                self.conn = None;
                Err(e)
            }
            Err(_) => {
                self.conn = None;
                Err(DriverError::Timeout(timeout))
            }
        }
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), DriverError> {
        if self.conn.is_none() {
            self.conn = Some(BufReader::new(TcpStream::connect(&self.addr).await?));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(DriverError::Protocol("no connection".into()));
        };
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        conn.get_mut().write_all(&request).await?;

        let mut line = String::new();
        let mut header_bytes = 0usize;
        conn.read_line(&mut line).await?;
        if line.is_empty() {
            return Err(DriverError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| DriverError::Protocol(format!("bad status line {line:?}")))?;
        let mut length: Option<usize> = None;
        let mut close = false;
        loop {
            line.clear();
            let n = conn.read_line(&mut line).await?;
            header_bytes += n;
            if n == 0 || header_bytes > MAX_HEADER_BYTES {
                return Err(DriverError::Protocol(
                    "unterminated or oversized headers".into(),
                ));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.parse().map_err(|_| {
                        DriverError::Protocol(format!("bad content-length {value:?}"))
                    })?);
                } else if name.eq_ignore_ascii_case("connection")
                    && value.eq_ignore_ascii_case("close")
                {
                    close = true;
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    return Err(DriverError::Protocol(format!(
                        "transfer-encoding {value} is not supported"
                    )));
                }
            }
        }
        let mut body = vec![0u8; length.unwrap_or(0)];
        conn.read_exact(&mut body).await?;
        if close {
            self.conn = None;
        }
        Ok((status, body))
    }

    fn unexpected(status: u16, body: &[u8]) -> DriverError {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        DriverError::Server(format!("HTTP {status}: {text}"))
    }

    /// Reads a key's raw value; `None` when it does not exist.
    pub async fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, DriverError> {
        let path = format!("/v1/kv/{key}?raw{}", self.read_suffix);
        match self.request("GET", &path, b"").await? {
            (200, body) => Ok(Some(body)),
            (404, _) => Ok(None),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
    }

    /// Writes a key.
    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        match self.request("PUT", &format!("/v1/kv/{key}"), value).await? {
            (200, _) => Ok(()),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
    }

    /// Deletes a key.
    pub async fn delete(&mut self, key: &str) -> Result<(), DriverError> {
        match self
            .request("DELETE", &format!("/v1/kv/{key}"), b"")
            .await?
        {
            (200, _) => Ok(()),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
    }

    /// Performs `op` on `key` (`value` for writes).
    pub async fn execute(
        &mut self,
        op: Operation,
        key: &str,
        value: Option<&[u8]>,
    ) -> Result<(), DriverError> {
        let value = value.unwrap_or_default();
        match op {
            Operation::Get => self.get(key).await.map(drop),
            Operation::Put | Operation::Update => self.put(key, value).await,
            Operation::Delete => self.delete(key).await,
            Operation::List | Operation::Search | Operation::Cas => Err(DriverError::Unsupported {
                op,
                driver: "consul",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_must_be_http_host_port() {
        assert_eq!(
            parse_target("http://127.0.0.1:8500").unwrap(),
            "127.0.0.1:8500"
        );
        assert_eq!(
            parse_target("http://localhost:8500/").unwrap(),
            "localhost:8500"
        );
        for bad in [
            "redis://127.0.0.1:1",
            "http://",
            "http://host",
            "http://h:1/v1/kv",
            "127.0.0.1:1",
        ] {
            assert!(parse_target(bad).is_err(), "{bad} accepted");
        }
    }
}
