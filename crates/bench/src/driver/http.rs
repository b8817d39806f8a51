//! The Consul KV HTTP driver: GET/PUT/DELETE on `/v1/kv/<key>` over one keep-alive HTTP/1.1
//! connection per worker (the client shared with the etcd driver). It serves
//! `driver = "consul"` (Consul itself) and, until the slot-aware client exists,
//! `driver = "trireme"` (Trireme speaks the same API).

use super::DriverError;
use super::http1::HttpConnection;
use crate::scenario::{Consistency, Operation};

/// One worker's connection to a Consul-KV-speaking server.
pub struct HttpDriver {
    target: String,
    read_suffix: &'static str,
    conn: HttpConnection,
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
            read_suffix: match consistency {
                Consistency::Default => "",
                Consistency::Consistent => "&consistent",
                Consistency::Stale => "&stale",
            },
            conn: HttpConnection::new(parse_target(target)?, ""),
        })
    }

    /// Connects now, so an unreachable target is reported before a run starts.
    pub async fn connect(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        let mut driver = Self::new(target, consistency)?;
        driver.conn.open().await?;
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
        let response = self.conn.request(method, path, body).await?;
        Ok((response.status, response.body))
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
