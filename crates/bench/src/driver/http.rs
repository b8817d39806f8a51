//! The Consul KV HTTP driver: `/v1/kv/<key>` over one keep-alive HTTP/1.1 connection per
//! worker (the client shared with the etcd driver). It serves `driver = "consul"` (Consul
//! itself, or one Trireme node) and carries each request of the slot-aware `trireme` driver.
//!
//! `cas` is Consul's check-and-set: a read of the key's `ModifyIndex` (in the scenario's read
//! consistency), then `PUT ?cas=<index>`, which writes only if nobody wrote in between
//! (`?cas=0`: only if the key is still absent). `list` is `GET ?recurse` on the key's prefix
//! without its last character: for the generator's `key:000000000042` that is the ten keys
//! `key:00000000004*`, a short scan like YCSB's, in the API's own terms (Consul's KV API has
//! no start key or limit). `search` has no Consul counterpart.

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
            conn: HttpConnection::new(parse_target(target)?, super::headers_for("", target))
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

    /// Whether this driver can perform `op`.
    pub fn supports(op: Operation) -> bool {
        op != Operation::Search
    }

    /// A transaction of four `set`s on `{key}/0` to `{key}/3` (one shard: the braces make
    /// `key` their hash tag); a 409 is a [`DriverError::Conflict`].
    pub async fn txn(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        let keys: Vec<String> = (0..4).map(|i| format!("{{{key}}}/{i}")).collect();
        self.txn_over(&keys, value).await
    }

    /// A transaction of one `set` of `value` on each of `keys`.
    pub async fn txn_over(&mut self, keys: &[String], value: &[u8]) -> Result<(), DriverError> {
        use base64::Engine as _;
        let value = base64::engine::general_purpose::STANDARD.encode(value);
        let ops: Vec<serde_json::Value> = keys
            .iter()
            .map(|key| serde_json::json!({"KV": {"Verb": "set", "Key": key, "Value": value}}))
            .collect();
        let body = serde_json::to_vec(&ops)
            .map_err(|e| DriverError::Protocol(format!("cannot encode a transaction: {e}")))?;
        match self.request("PUT", "/v1/txn", &body).await? {
            (200, _) => Ok(()),
            (409, body) => Err(DriverError::Conflict(
                String::from_utf8_lossy(&body).into_owned(),
            )),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
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

    /// The key's `ModifyIndex`; `None` when it does not exist.
    pub async fn modify_index(&mut self, key: &str) -> Result<Option<u64>, DriverError> {
        let query = self.read_suffix.strip_prefix('&').unwrap_or_default();
        let path = format!("/v1/kv/{key}?{query}");
        match self.request("GET", &path, b"").await? {
            (200, body) => parse_modify_index(&body).map(Some),
            (404, _) => Ok(None),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
    }

    /// Writes `key` only if its `ModifyIndex` is still `index` (0: only if it does not exist);
    /// whether the write happened.
    pub async fn cas(&mut self, key: &str, index: u64, value: &[u8]) -> Result<bool, DriverError> {
        let path = format!("/v1/kv/{key}?cas={index}");
        match self.request("PUT", &path, value).await? {
            (200, body) if body.trim_ascii() == b"true" => Ok(true),
            (200, body) if body.trim_ascii() == b"false" => Ok(false),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
    }

    /// The keys under `prefix` with their values (`?recurse`); empty when there are none.
    pub async fn list(&mut self, prefix: &str) -> Result<Vec<(String, u64)>, DriverError> {
        let path = format!("/v1/kv/{prefix}?recurse{}", self.read_suffix);
        match self.request("GET", &path, b"").await? {
            (200, body) => parse_listing(&body),
            (404, _) => Ok(Vec::new()),
            (status, body) => Err(Self::unexpected(status, &body)),
        }
    }

    /// Performs `op` on `key` (`value` for writes).
    ///
    /// A `cas` that loses the race to another writer is a [`DriverError::Conflict`], counted
    /// apart from failures, so contention shows in the report instead of passing for a write.
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
            Operation::Cas => {
                let index = self.modify_index(key).await?.unwrap_or(0);
                if self.cas(key, index, value).await? {
                    Ok(())
                } else {
                    Err(DriverError::Conflict(format!(
                        "{key} changed after index {index}"
                    )))
                }
            }
            Operation::List => self.list(list_prefix(key)).await.map(drop),
            Operation::Txn => self.txn(key, value).await,
            Operation::TxnShards => self.txn_over(&spread_keys(key), value).await,
            Operation::Search => Err(DriverError::Unsupported {
                op,
                driver: "consul",
            }),
        }
    }
}

/// The prefix a `list` of `key` reads: the key without its last character (ten keys for the
/// generator's zero-padded decimal keys).
#[must_use]
pub fn list_prefix(key: &str) -> &str {
    key.char_indices().last().map_or("", |(i, _)| &key[..i])
}

/// The `ModifyIndex` of the one entry in a `GET /v1/kv/<key>` answer.
fn parse_modify_index(body: &[u8]) -> Result<u64, DriverError> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(body)
        .map_err(|e| DriverError::Protocol(format!("KV answer is not a JSON array: {e}")))?;
    entries
        .first()
        .and_then(|e| e["ModifyIndex"].as_u64())
        .ok_or_else(|| DriverError::Protocol("KV answer without a ModifyIndex".into()))
}

/// `(Key, ModifyIndex)` of each entry in a `GET ?recurse` answer.
fn parse_listing(body: &[u8]) -> Result<Vec<(String, u64)>, DriverError> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(body)
        .map_err(|e| DriverError::Protocol(format!("KV listing is not a JSON array: {e}")))?;
    entries
        .iter()
        .map(|e| match (e["Key"].as_str(), e["ModifyIndex"].as_u64()) {
            (Some(key), Some(index)) => Ok((key.to_owned(), index)),
            _ => Err(DriverError::Protocol(format!(
                "KV listing entry without Key or ModifyIndex: {e}"
            ))),
        })
        .collect()
}

/// Four keys derived from `key`, one in each quarter of the slot space: `{key/qN}/0`, with the
/// smallest N whose hash tag's slot falls in that quarter.
fn spread_keys(key: &str) -> Vec<String> {
    let quarter = trireme_types::SLOT_COUNT / 4;
    let mut keys = vec![String::new(); 4];
    let mut found = 0;
    for n in 0u32.. {
        let tag = format!("{key}/q{n}");
        let which = usize::from(trireme_types::key_slot(tag.as_bytes()) / quarter);
        if keys[which].is_empty() {
            keys[which] = format!("{{{tag}}}/0");
            found += 1;
            if found == keys.len() {
                break;
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {

    #[test]
    fn spread_keys_land_in_four_quarters_of_the_slots() {
        for key in ["key0000001", "user42", ""] {
            let keys = spread_keys(key);
            let mut quarters: Vec<u16> = keys
                .iter()
                .map(|k| trireme_types::key_slot(k.as_bytes()) / (trireme_types::SLOT_COUNT / 4))
                .collect();
            quarters.sort_unstable();
            assert_eq!(quarters, vec![0, 1, 2, 3], "{keys:?}");
            assert!(
                keys.iter().all(|k| k.starts_with(&format!("{{{key}/q"))),
                "{keys:?}"
            );
        }
    }

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

    #[test]
    fn a_list_reads_the_ten_keys_that_share_all_but_the_last_digit() {
        assert_eq!(list_prefix("key:000000000042"), "key:00000000004");
        assert_eq!(list_prefix("k"), "");
        assert_eq!(list_prefix(""), "");
        assert_eq!(list_prefix("ké"), "k", "cut at a character boundary");
    }

    #[test]
    fn kv_answers_are_parsed_or_rejected() {
        let one = br#"[{"Key":"a","ModifyIndex":7,"CreateIndex":3,"Value":null}]"#;
        assert_eq!(parse_modify_index(one).unwrap(), 7);
        assert!(parse_modify_index(b"[]").is_err());
        assert!(parse_modify_index(b"true").is_err());
        let two = br#"[{"Key":"a","ModifyIndex":7},{"Key":"b","ModifyIndex":9}]"#;
        assert_eq!(
            parse_listing(two).unwrap(),
            vec![("a".to_owned(), 7), ("b".to_owned(), 9)]
        );
        assert!(parse_listing(br#"[{"Key":"a"}]"#).is_err());
    }
}
