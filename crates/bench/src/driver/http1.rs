//! The keep-alive HTTP/1.1 client every HTTP-speaking driver sits on (Consul KV in
//! [`super::http`], etcd's JSON gateway in [`super::etcd`], documents in
//! [`super::orchestrate`]).
//!
//! Hand-written on purpose: the load generator must not be what limits a run, and a request
//! is a few formatted lines and one read of a length-delimited or chunked answer. One
//! connection, one request at a time (no pipelining); after an I/O error, a timeout or an
//! answer that cannot be parsed the connection is dropped and the next request opens a new
//! one, so a restarted server is picked up again.

use super::{DriverError, REQUEST_TIMEOUT};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use trireme_tls::MaybeTls;

/// Longest header (or trailer) section accepted from a server.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Largest body accepted from a server. Far above what the targets send (Consul values are at
/// most 512 KiB, etcd requests 1.5 MiB by default), but it keeps a broken or hostile
/// `Content-Length` from making the load generator allocate without bound.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A server's answer: status code and the (de-chunked) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// The status code, e.g. 200.
    pub status: u16,
    /// The body, with any chunked transfer coding removed.
    pub body: Vec<u8>,
    /// The `ETag` header, as sent (quotes included), for the documents driver's
    /// check-and-set.
    pub etag: Option<String>,
    /// `X-Consul-Index`, for the blocking queries of `bench watch`. The only other header
    /// kept.
    pub index: Option<u64>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One keep-alive HTTP/1.1 connection to `host:port`, opened lazily and reopened after
/// failures.
pub(crate) struct HttpConnection {
    addr: String,
    /// Header lines sent with every request after `Host` and `Content-Length`, each ending
    /// in CRLF: fixed per driver, so they are formatted once rather than per request.
    headers: &'static str,
    conn: Option<BufReader<MaybeTls>>,
    timeout: Duration,
    /// Speak TLS (an `https://` target).
    tls: bool,
}

impl HttpConnection {
    /// A connection to `addr` (`host:port`) that sends `headers` (complete lines, each ending
    /// in `\r\n`, or empty) with every request; nothing is opened yet.
    pub fn new(addr: String, headers: &'static str) -> Self {
        Self {
            addr,
            headers,
            conn: None,
            timeout: REQUEST_TIMEOUT,
            tls: false,
        }
    }

    /// The same connection over TLS when `tls` (an `https://` target).
    #[must_use]
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Opens the connection now (within the request timeout), so an unreachable target is
    /// reported before a run starts rather than as errors during it.
    /// The same connection with another per-request time limit (a blocking query is held
    /// for as long as it asks).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub async fn open(&mut self) -> Result<(), DriverError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.ensure_open()).await {
            Ok(result) => result.map(drop),
            Err(_) => Err(DriverError::Timeout(timeout)),
        }
    }

    async fn ensure_open(&mut self) -> Result<&mut BufReader<MaybeTls>, DriverError> {
        if self.conn.is_none() {
            let stream = super::open_stream(&self.addr, self.tls).await?;
            self.conn = Some(BufReader::new(stream));
        }
        self.conn
            .as_mut()
            .ok_or_else(|| DriverError::Protocol("connection vanished".into()))
    }

    /// Sends one request and returns the answer, whatever its status. Any failure drops the
    /// connection (it may hold half an answer, or a late one); the next request opens a new
    /// one.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<Response, DriverError> {
        self.request_with(method, path, "", body).await
    }

    /// [`HttpConnection::request`] with `extra` header lines (each ending in CRLF) for this
    /// request only, such as a condition (`If-Match`).
    pub async fn request_with(
        &mut self,
        method: &str,
        path: &str,
        extra: &str,
        body: &[u8],
    ) -> Result<Response, DriverError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.exchange(method, path, extra, body)).await {
            Ok(Ok(response)) => Ok(response),
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
        extra: &str,
        body: &[u8],
    ) -> Result<Response, DriverError> {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n{}{extra}\r\n",
            self.addr,
            body.len(),
            self.headers
        )
        .into_bytes();
        request.extend_from_slice(body);
        let conn = self.ensure_open().await?;
        conn.get_mut().write_all(&request).await?;
        // TLS holds the last records until flushed.
        conn.get_mut().flush().await?;

        let mut line = String::new();
        conn.read_line(&mut line).await?;
        if line.is_empty() {
            return Err(DriverError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed by the server",
            )));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| DriverError::Protocol(format!("bad status line {line:?}")))?;

        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut close = false;
        let mut etag = None;
        let mut index = None;
        let mut header_bytes = 0usize;
        loop {
            line.clear();
            let header = read_header_line(conn, &mut line, &mut header_bytes).await?;
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length =
                    Some(value.parse().map_err(|_| {
                        DriverError::Protocol(format!("bad content-length {value:?}"))
                    })?);
            } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close")
            {
                close = true;
            } else if name.eq_ignore_ascii_case("etag") {
                etag = Some(value.to_owned());
            } else if name.eq_ignore_ascii_case("x-consul-index") {
                index = value.parse().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                // etcd's gateway answers errors chunked (it sends gRPC trailers); no target
                // compresses, so any other coding is a server this client does not understand.
                if !value.eq_ignore_ascii_case("chunked") {
                    return Err(DriverError::Protocol(format!(
                        "transfer-encoding {value} is not supported"
                    )));
                }
                chunked = true;
            }
        }

        // RFC 9112 §6.3: chunked framing wins over a Content-Length sent alongside it.
        let body = if chunked {
            read_chunked(conn).await?
        } else {
            let length = length.unwrap_or(0);
            if length > MAX_BODY_BYTES {
                return Err(DriverError::Protocol(format!(
                    "body of {length} bytes is larger than {MAX_BODY_BYTES}"
                )));
            }
            let mut body = vec![0u8; length];
            conn.read_exact(&mut body).await?;
            body
        };
        if close {
            self.conn = None;
        }
        Ok(Response {
            status,
            body,
            etag,
            index,
        })
    }
}

/// Reads one header or trailer line into `line` and returns it without its line ending,
/// counting it against [`MAX_HEADER_BYTES`].
async fn read_header_line<'a>(
    conn: &mut BufReader<MaybeTls>,
    line: &'a mut String,
    total: &mut usize,
) -> Result<&'a str, DriverError> {
    let n = conn.read_line(line).await?;
    *total += n;
    if n == 0 || *total > MAX_HEADER_BYTES {
        return Err(DriverError::Protocol(
            "unterminated or oversized headers".into(),
        ));
    }
    Ok(line.trim_end())
}

/// Reads a chunked body (RFC 9112 §7.1): hex-sized chunks, chunk extensions ignored, then
/// the trailer section, which is read to keep the connection in step and otherwise dropped.
async fn read_chunked(conn: &mut BufReader<MaybeTls>) -> Result<Vec<u8>, DriverError> {
    let mut body = Vec::new();
    let mut line = String::new();
    let mut line_bytes = 0usize;
    loop {
        line.clear();
        let size_line = read_header_line(conn, &mut line, &mut line_bytes).await?;
        let digits = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(digits, 16)
            .map_err(|_| DriverError::Protocol(format!("bad chunk size {size_line:?}")))?;
        if size == 0 {
            break;
        }
        if size > MAX_BODY_BYTES - body.len() {
            return Err(DriverError::Protocol(format!(
                "chunked body is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        let start = body.len();
        body.resize(start + size, 0);
        conn.read_exact(&mut body[start..]).await?;
        let mut crlf = [0u8; 2];
        conn.read_exact(&mut crlf).await?;
        if &crlf != b"\r\n" {
            return Err(DriverError::Protocol("chunk not terminated by CRLF".into()));
        }
        // Chunk data does not count against the header limit; only size lines do.
        line_bytes = 0;
    }
    let mut trailer_bytes = 0usize;
    loop {
        line.clear();
        if read_header_line(conn, &mut line, &mut trailer_bytes)
            .await?
            .is_empty()
        {
            return Ok(body);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Serves `answers` in turn, one per request read, on a loopback port; returns its
    /// address. Each request is read up to the end of its headers (the tests send no body).
    async fn serve(answers: Vec<&'static [u8]>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            for answer in answers {
                let mut line = String::new();
                loop {
                    line.clear();
                    if stream.read_line(&mut line).await.unwrap() == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                stream.get_mut().write_all(answer).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn reads_length_delimited_and_chunked_bodies_on_one_connection() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\netag: \"7\"\r\n\r\nhello",
            b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n\
              3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nGrpc-Trailer: x\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ])
        .await;
        let mut conn = HttpConnection::new(addr, "Content-Type: application/json\r\n");
        let first = conn.request("GET", "/a", b"").await.unwrap();
        assert_eq!((first.status, &first.body[..]), (200, &b"hello"[..]));
        assert_eq!(first.etag.as_deref(), Some("\"7\""));
        assert!(first.is_success());
        let second = conn.request("POST", "/b", b"").await.unwrap();
        assert_eq!(second.status, 400);
        assert_eq!(second.body, b"abc0123456789");
        assert_eq!(second.etag, None, "headers do not leak between answers");
        assert!(!second.is_success());
        let third = conn.request("GET", "/c", b"").await.unwrap();
        assert_eq!((third.status, third.body.len()), (204, 0));
    }

    #[tokio::test]
    async fn malformed_answers_are_protocol_errors() {
        for answer in [
            &b"garbage\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        ] {
            let mut conn = HttpConnection::new(serve(vec![answer]).await, "");
            let err = conn.request("GET", "/", b"").await.unwrap_err();
            assert_eq!(err.kind(), "protocol", "{err} for {answer:?}");
            assert!(conn.conn.is_none(), "connection kept after {err}");
        }
    }

    #[tokio::test]
    async fn a_closed_connection_is_an_io_error() {
        let mut conn = HttpConnection::new(serve(vec![]).await, "");
        let err = conn.request("GET", "/", b"").await.unwrap_err();
        assert_eq!(err.kind(), "io", "{err}");
    }
}
