//! The `orchestrate` driver: Trireme's documents API (`/v0/{collection}/{key}`), the shape of
//! the Orchestrate report's workload, over one keep-alive HTTP/1.1 connection per worker to
//! one node (any node serves any document; the cluster forwards).
//!
//! Every key lives in the collection [`COLLECTION`]. A written value becomes the document
//! `{"n": <key index>, "group": "g<index mod 100>", "text": "<the value as words>"}`, so the
//! document grows with the value generator's size, every document belongs to one of 100
//! groups, and its text has words (drawn by the value's bytes from a vocabulary of
//! [`VOCABULARY`] words) for a search index to hold. `get` reads a document (404 is a miss, not an error, as
//! with the other drivers), `put` and `update` write it, `delete` removes it, `cas` reads its
//! ref (`ETag`) and writes with `If-Match` (`If-None-Match: *` when absent; a 412 is a
//! `conflict`), `list` reads ten documents from the key on (`?limit=10&startKey=`) and
//! `search` asks for ten documents of a random group (`?query=group:g<0..99>&limit=10`).

use super::DriverError;
use super::http1::{HttpConnection, Response};
use crate::BenchRng;
use crate::scenario::{Consistency, Operation};
use rand::Rng;

/// The collection every document of a run goes in.
pub const COLLECTION: &str = "bench";

/// Groups a document can belong to (`g0` .. `g99`); a search asks for one of them.
pub const GROUPS: u64 = 100;

/// One worker's connection to a node that serves `/v0`.
pub struct OrchestrateDriver {
    target: String,
    /// `?consistent`, `?stale` or nothing, for reads.
    read_mode: &'static str,
    conn: HttpConnection,
}

impl OrchestrateDriver {
    /// A driver for `target` (`http://host:port`); reads use `consistency`.
    pub fn new(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        Ok(Self {
            target: target.to_owned(),
            read_mode: match consistency {
                Consistency::Default => "",
                Consistency::Consistent => "consistent",
                Consistency::Stale => "stale",
            },
            conn: HttpConnection::new(
                super::host_port(target, "http")?,
                super::headers_for("Content-Type: application/json\r\n", target),
            )
            .with_tls(super::is_tls(target)),
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

    /// Every operation but the transactions has a documents-API counterpart.
    #[must_use]
    pub fn supports(op: Operation) -> bool {
        !matches!(op, Operation::Txn | Operation::TxnShards)
    }

    /// The read mode as a query parameter after `separator` (`?` or `&`); empty by default.
    fn mode(&self, separator: char) -> String {
        if self.read_mode.is_empty() {
            String::new()
        } else {
            format!("{separator}{}", self.read_mode)
        }
    }

    fn unexpected(response: &Response) -> DriverError {
        let body = &response.body[..response.body.len().min(200)];
        DriverError::Server(format!(
            "HTTP {}: {}",
            response.status,
            String::from_utf8_lossy(body)
        ))
    }

    /// Reads a document; `None` when it does not exist. With it, its ref (`ETag`, quoted).
    pub async fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, String)>, DriverError> {
        let path = format!("/v0/{COLLECTION}/{key}{}", self.mode('?'));
        let response = self.conn.request("GET", &path, b"").await?;
        match response.status {
            200 => {
                let etag = response.etag.ok_or_else(|| {
                    DriverError::Protocol(format!("GET {path} answered without an ETag"))
                })?;
                Ok(Some((response.body, etag)))
            }
            404 => Ok(None),
            _ => Err(Self::unexpected(&response)),
        }
    }

    /// Writes the document for `key` made from `value`, under `condition` (a header line or
    /// empty); whether the condition held.
    async fn write(
        &mut self,
        key: &str,
        value: &[u8],
        condition: &str,
    ) -> Result<bool, DriverError> {
        let path = format!("/v0/{COLLECTION}/{key}");
        let body = document(key, value);
        let response = self
            .conn
            .request_with("PUT", &path, condition, &body)
            .await?;
        match response.status {
            201 => Ok(true),
            412 => Ok(false),
            _ => Err(Self::unexpected(&response)),
        }
    }

    /// Writes a document (the load phase, `put`, `update`).
    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        match self.write(key, value, "").await? {
            true => Ok(()),
            false => Err(DriverError::Protocol(format!(
                "an unconditional PUT of {key} answered 412"
            ))),
        }
    }

    /// Deletes a document.
    pub async fn delete(&mut self, key: &str) -> Result<(), DriverError> {
        let path = format!("/v0/{COLLECTION}/{key}");
        let response = self.conn.request("DELETE", &path, b"").await?;
        match response.status {
            204 => Ok(()),
            _ => Err(Self::unexpected(&response)),
        }
    }

    /// Writes `key` only if it is still at the ref just read (or still absent); a lost race
    /// is a [`DriverError::Conflict`].
    pub async fn cas(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        let etag = self.get(key).await?.map(|(_, etag)| etag);
        self.write_if(key, value, etag.as_deref()).await
    }

    /// Writes `key` only if its ref is still `etag` (as the server sent it, quoted), or with
    /// `None` only if it does not exist; otherwise a [`DriverError::Conflict`].
    pub async fn write_if(
        &mut self,
        key: &str,
        value: &[u8],
        etag: Option<&str>,
    ) -> Result<(), DriverError> {
        let condition = match etag {
            Some(etag) => format!("If-Match: {etag}\r\n"),
            None => "If-None-Match: *\r\n".to_owned(),
        };
        if self.write(key, value, &condition).await? {
            Ok(())
        } else {
            Err(DriverError::Conflict(format!(
                "{key} changed after it was read ({})",
                condition.trim_end()
            )))
        }
    }

    /// A page of at most `limit` documents from `start` on; how many came back.
    pub async fn list(&mut self, start: &str, limit: u32) -> Result<u64, DriverError> {
        let path = format!(
            "/v0/{COLLECTION}?limit={limit}&startKey={}{}",
            encode(start),
            self.mode('&')
        );
        Ok(self.page(&path).await?.0)
    }

    /// Searches the collection: `(count, total_count)` of the first page.
    pub async fn search(&mut self, query: &str, limit: u32) -> Result<(u64, u64), DriverError> {
        let path = format!(
            "/v0/{COLLECTION}?query={}&limit={limit}{}",
            encode(query),
            self.mode('&')
        );
        self.page(&path).await
    }

    async fn page(&mut self, path: &str) -> Result<(u64, u64), DriverError> {
        let response = self.conn.request("GET", path, b"").await?;
        if response.status != 200 {
            return Err(Self::unexpected(&response));
        }
        let page: serde_json::Value = serde_json::from_slice(&response.body)
            .map_err(|e| DriverError::Protocol(format!("GET {path}: not JSON: {e}")))?;
        let count = page["count"]
            .as_u64()
            .ok_or_else(|| DriverError::Protocol(format!("GET {path}: no count")))?;
        Ok((count, page["total_count"].as_u64().unwrap_or(count)))
    }

    /// Performs `op` on `key` (`value` for writes); a search draws its group from `rng`, the
    /// worker's seeded generator, so a run with the same seed asks the same questions.
    pub async fn execute(
        &mut self,
        op: Operation,
        key: &str,
        value: Option<&[u8]>,
        rng: &mut BenchRng,
    ) -> Result<(), DriverError> {
        let value = value.unwrap_or_default();
        match op {
            Operation::Get => self.get(key).await.map(drop),
            Operation::Put | Operation::Update => self.put(key, value).await,
            Operation::Delete => self.delete(key).await,
            Operation::Cas => self.cas(key, value).await,
            Operation::List => self.list(key, 10).await.map(drop),
            Operation::Search => {
                let group = rng.random_range(0..GROUPS);
                self.search(&format!("group:g{group}"), 10).await.map(drop)
            }
            Operation::Txn | Operation::TxnShards => Err(DriverError::Unsupported {
                op,
                driver: "orchestrate",
            }),
        }
    }
}

/// The index at the end of a generated key (`key:000000000042` → 42); 0 for other keys.
#[must_use]
pub fn key_index(key: &str) -> u64 {
    let digits = key.len() - key.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    key[key.len() - digits..].parse().unwrap_or(0)
}

/// Words the text of a document is made of.
pub const VOCABULARY: u16 = 4_096;

/// The document written for `key`: its index, its group, and `value` as text of the same
/// length: words of lowercase letters separated by spaces, each drawn from the vocabulary by
/// two bytes of the value (so the JSON needs no escapes and words repeat as in prose).
#[must_use]
pub fn document(key: &str, value: &[u8]) -> Vec<u8> {
    let n = key_index(key);
    let head = format!(r#"{{"n":{n},"group":"g{}","text":""#, n % GROUPS);
    let mut doc = Vec::with_capacity(head.len() + value.len() + 8);
    doc.extend_from_slice(head.as_bytes());
    let start = doc.len();
    for pair in value.chunks(2).cycle().take(value.len()) {
        if doc.len() - start >= value.len() {
            break;
        }
        if doc.len() > start {
            doc.push(b' ');
        }
        let drawn = u16::from_le_bytes([pair[0], *pair.get(1).unwrap_or(&0)]) % VOCABULARY;
        word(drawn, &mut doc);
    }
    doc.truncate(start + value.len());
    doc.extend_from_slice(b"\"}");
    doc
}

/// The vocabulary's word number `i`: two to four lowercase letters.
fn word(i: u16, out: &mut Vec<u8>) {
    let mut rest = usize::from(i);
    let len = 2 + rest % 3;
    for _ in 0..len {
        out.push(b'a' + (rest % 26) as u8);
        rest /= 26;
    }
}

/// Percent-encodes a query-string value (letters, digits and `-._~` stay as they are).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_carry_the_index_a_group_and_the_value_as_text() {
        assert_eq!(key_index("key:000000000042"), 42);
        assert_eq!(key_index("key:7"), 7);
        assert_eq!(key_index("plain"), 0);
        assert_eq!(key_index(""), 0);
        let value: Vec<u8> = (0u8..=255).collect();
        let doc = document("key:000000000142", &value);
        let parsed: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(parsed["n"], 142);
        assert_eq!(parsed["group"], "g42");
        let text = parsed["text"].as_str().unwrap();
        assert_eq!(
            text.len(),
            value.len(),
            "the document tracks the value's size"
        );
        assert!(text.bytes().all(|b| b.is_ascii_lowercase() || b == b' '));
        assert!(text.split(' ').count() > 10, "the text is words");
        assert_eq!(parsed.as_object().unwrap().len(), 3);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("group:g7"), "group%3Ag7");
        assert_eq!(encode("key:000000000042"), "key%3A000000000042");
        assert_eq!(encode("a b\"c"), "a%20b%22c");
    }

    #[test]
    fn targets_are_http_host_port() {
        assert!(OrchestrateDriver::new("http://127.0.0.1:7700", Consistency::Default).is_ok());
        assert!(OrchestrateDriver::new("redis://127.0.0.1:7701", Consistency::Default).is_err());
        let d = OrchestrateDriver::new("http://127.0.0.1:7700", Consistency::Stale).unwrap();
        assert_eq!(
            (d.mode('?'), d.mode('&')),
            ("?stale".into(), "&stale".into())
        );
    }
}
