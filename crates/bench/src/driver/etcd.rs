//! The etcd driver: etcd's v3 API through its JSON gRPC gateway (`POST /v3/kv/range`, `put`,
//! `deleterange`, `txn`), over one keep-alive HTTP/1.1 connection per worker (the client
//! shared with the Consul driver).
//!
//! The gateway rather than gRPC because it keeps the load generator free of a protobuf and
//! HTTP/2 stack and needs no code generation, and it is the same request path etcd's own
//! `curl` examples use. Keys and values travel base64-encoded inside the JSON; 64-bit numbers
//! come back as JSON strings (proto3's JSON mapping).
//!
//! Reads are linearizable (etcd's default) unless the scenario asks for `stale`, which sends
//! `"serializable": true`: the member answers from its own store without a round through
//! the leader. `cas` is a read followed by a transaction that writes only if the key's
//! `mod_revision` is still the one read; `list` is a short scan like YCSB's; `search` has no
//! etcd counterpart.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Deserializer, Serialize};

use super::DriverError;
use super::http1::{HttpConnection, Response};
use crate::scenario::{Consistency, Operation};

/// How many keys a `list` operation reads: a short scan, as in YCSB workload E (whose scans
/// are 1 to 100 records long), kept small so a list costs about as much as a few gets.
pub const LIST_LIMIT: u64 = 10;

/// One key/value pair as a `list` returns it.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// `http://host:port` or `https://host:port` (an optional trailing `/`) → `host:port`.
pub fn parse_target(target: &str) -> Result<String, DriverError> {
    super::host_port(target, "http")
}

/// The end of the range holding every key that starts with `prefix` (etcd's `range_end`):
/// `prefix` with its last byte below 0xff incremented and what follows it dropped. A prefix
/// of only 0xff bytes, or an empty one, has no such bound; etcd reads `"\0"` as "to the end
/// of the key space".
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The prefix a `list` starting at `key` scans within: everything up to and including the
/// key's last `:` (`key:` for the generator's `key:000000000042`), so a scan runs on through
/// the following keys of the same key space rather than stopping at the one key.
fn scan_prefix(key: &str) -> &str {
    key.rfind(':').map_or("", |i| &key[..=i])
}

#[derive(Serialize)]
struct RangeRequest {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    range_end: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    serializable: bool,
}

#[derive(Serialize)]
struct PutRequest {
    key: String,
    value: String,
}

#[derive(Serialize)]
struct DeleteRangeRequest {
    key: String,
}

#[derive(Serialize)]
struct Compare {
    key: String,
    target: &'static str,
    result: &'static str,
    /// A string, as proto3's JSON mapping writes 64-bit integers.
    mod_revision: String,
}

#[derive(Serialize)]
struct RequestOp {
    request_put: PutRequest,
}

#[derive(Serialize)]
struct TxnRequest {
    compare: Vec<Compare>,
    success: Vec<RequestOp>,
}

/// A stored pair in a range answer; absent fields are proto3 defaults (empty, zero).
#[derive(Deserialize)]
struct StoredKeyValue {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default, deserialize_with = "int64")]
    mod_revision: i64,
}

#[derive(Deserialize)]
struct RangeResponse {
    #[serde(default)]
    kvs: Vec<StoredKeyValue>,
}

#[derive(Deserialize)]
struct DeleteRangeResponse {
    #[serde(default, deserialize_with = "int64")]
    deleted: i64,
}

#[derive(Deserialize)]
struct TxnResponse {
    /// Omitted by the gateway when false (a proto3 default).
    #[serde(default)]
    succeeded: bool,
}

/// The gateway's error body (`{"error": ..., "message": ..., "code": N}`).
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    error: String,
}

/// A 64-bit integer written as a JSON string (proto3's mapping) or, leniently, a number.
fn int64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int64 {
        Text(String),
        Number(i64),
    }
    match Int64::deserialize(deserializer)? {
        Int64::Number(n) => Ok(n),
        Int64::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

fn decode(field: &str, text: &str) -> Result<Vec<u8>, DriverError> {
    BASE64
        .decode(text)
        .map_err(|e| DriverError::Protocol(format!("{field} is not base64: {e}")))
}

/// One worker's connection to an etcd member's JSON gateway.
pub struct EtcdDriver {
    target: String,
    serializable: bool,
    conn: HttpConnection,
}

impl EtcdDriver {
    /// A driver for `target` (`http://host:port`, the member's client URL, or `https://` for
    /// a member serving TLS, whose CA `--ca-file` names); reads are
    /// serializable when `consistency` is `stale`, linearizable otherwise. Connects on the
    /// first request.
    pub fn new(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        Ok(Self {
            target: target.to_string(),
            serializable: consistency == Consistency::Stale,
            conn: HttpConnection::new(parse_target(target)?, "Content-Type: application/json\r\n")
                .with_tls(super::is_tls(target)),
        })
    }

    /// A driver for `target`, connected now, so an unreachable target is reported before a
    /// run starts.
    pub async fn connect(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        let mut driver = Self::new(target, consistency)?;
        driver.conn.open().await?;
        Ok(driver)
    }

    /// The target this driver talks to.
    #[must_use]
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Whether the etcd driver can perform `op`: everything but `search`, which etcd has no
    /// way to do (it cannot look inside values).
    #[must_use]
    pub fn supports(op: Operation) -> bool {
        !matches!(
            op,
            Operation::Search | Operation::Txn | Operation::TxnShards
        )
    }

    /// POSTs `request` as JSON to `path` and parses the 2xx answer as `T`; any other status
    /// is a [`DriverError::Server`] carrying the gateway's error message.
    async fn call<T: for<'de> Deserialize<'de>>(
        &mut self,
        path: &str,
        request: &impl Serialize,
    ) -> Result<T, DriverError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| DriverError::Protocol(format!("cannot encode the request: {e}")))?;
        let response = self.conn.request("POST", path, &body).await?;
        if !response.is_success() {
            return Err(server_error(&response));
        }
        serde_json::from_slice(&response.body)
            .map_err(|e| DriverError::Protocol(format!("unexpected answer from {path}: {e}")))
    }

    /// Reads `key`: its value and `mod_revision` (the revision of its last write), or `None`
    /// when it does not exist.
    pub async fn get_with_revision(
        &mut self,
        key: &str,
    ) -> Result<Option<(Vec<u8>, i64)>, DriverError> {
        let request = RangeRequest {
            key: BASE64.encode(key),
            range_end: None,
            limit: None,
            serializable: self.serializable,
        };
        let response: RangeResponse = self.call("/v3/kv/range", &request).await?;
        match response.kvs.into_iter().next() {
            Some(kv) => Ok(Some((decode("value", &kv.value)?, kv.mod_revision))),
            None => Ok(None),
        }
    }

    /// Reads `key`'s value; `None` when it does not exist.
    pub async fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, DriverError> {
        Ok(self.get_with_revision(key).await?.map(|(value, _)| value))
    }

    /// Writes `key` (creating or overwriting it).
    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        let request = PutRequest {
            key: BASE64.encode(key),
            value: BASE64.encode(value),
        };
        // Nothing in the answer is needed, but it must be the gateway's JSON.
        let _: serde::de::IgnoredAny = self.call("/v3/kv/put", &request).await?;
        Ok(())
    }

    /// Deletes `key`; whether it existed.
    pub async fn delete(&mut self, key: &str) -> Result<bool, DriverError> {
        let request = DeleteRangeRequest {
            key: BASE64.encode(key),
        };
        let response: DeleteRangeResponse = self.call("/v3/kv/deleterange", &request).await?;
        Ok(response.deleted > 0)
    }

    /// Writes `key` only if its `mod_revision` is still `mod_revision` (0: only if it does
    /// not exist), in one transaction; whether the write happened.
    pub async fn cas(
        &mut self,
        key: &str,
        mod_revision: i64,
        value: &[u8],
    ) -> Result<bool, DriverError> {
        let key = BASE64.encode(key);
        let request = TxnRequest {
            compare: vec![Compare {
                key: key.clone(),
                target: "MOD",
                result: "EQUAL",
                mod_revision: mod_revision.to_string(),
            }],
            success: vec![RequestOp {
                request_put: PutRequest {
                    key,
                    value: BASE64.encode(value),
                },
            }],
        };
        let response: TxnResponse = self.call("/v3/kv/txn", &request).await?;
        Ok(response.succeeded)
    }

    /// Reads up to `limit` pairs in key order, starting at `from` and staying within the keys
    /// that start with `prefix`.
    pub async fn list(
        &mut self,
        from: &str,
        prefix: &str,
        limit: u64,
    ) -> Result<Vec<KeyValue>, DriverError> {
        let request = RangeRequest {
            key: BASE64.encode(from),
            range_end: Some(BASE64.encode(prefix_end(prefix.as_bytes()))),
            limit: Some(limit),
            serializable: self.serializable,
        };
        let response: RangeResponse = self.call("/v3/kv/range", &request).await?;
        response
            .kvs
            .into_iter()
            .map(|kv| Ok((decode("key", &kv.key)?, decode("value", &kv.value)?)))
            .collect()
    }

    /// Performs `op` on `key` (`value` for put, update and cas; an empty value if absent).
    ///
    /// `cas` reads the key and writes `value` if nobody wrote it in between; losing that race
    /// is a [`DriverError::Conflict`], counted apart from failures, so contention shows in
    /// the report instead of passing for a successful write. `list` scans [`LIST_LIMIT`]
    /// keys from `key` on. `search` fails with [`DriverError::Unsupported`].
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
            Operation::Delete => self.delete(key).await.map(drop),
            Operation::Cas => {
                let revision = self.get_with_revision(key).await?.map_or(0, |(_, r)| r);
                if self.cas(key, revision, value).await? {
                    Ok(())
                } else {
                    Err(DriverError::Conflict(format!(
                        "{key} changed after revision {revision}"
                    )))
                }
            }
            Operation::List => self.list(key, scan_prefix(key), LIST_LIMIT).await.map(drop),
            Operation::Search | Operation::Txn | Operation::TxnShards => {
                Err(DriverError::Unsupported { op, driver: "etcd" })
            }
        }
    }
}

/// The [`DriverError::Server`] for a non-2xx answer: the status and the gateway's message,
/// or the start of the body when it is not the gateway's JSON error.
fn server_error(response: &Response) -> DriverError {
    let message = match serde_json::from_slice::<ErrorBody>(&response.body) {
        Ok(body) if !body.message.is_empty() => body.message,
        Ok(body) if !body.error.is_empty() => body.error,
        _ => {
            let shown = &response.body[..response.body.len().min(200)];
            String::from_utf8_lossy(shown).trim().to_owned()
        }
    };
    DriverError::Server(format!("HTTP {}: {message}", response.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_bound_exactly_the_prefixed_keys() {
        assert_eq!(prefix_end(b"key:"), b"key;");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
        assert_eq!(scan_prefix("key:000000000042"), "key:");
        assert_eq!(scan_prefix("a:b:c"), "a:b:");
        assert_eq!(scan_prefix("plain"), "");
    }

    #[test]
    fn requests_are_the_gateway_json() {
        let range = RangeRequest {
            key: BASE64.encode("k"),
            range_end: None,
            limit: None,
            serializable: false,
        };
        assert_eq!(serde_json::to_string(&range).unwrap(), r#"{"key":"aw=="}"#);
        let stale = RangeRequest {
            serializable: true,
            range_end: Some(BASE64.encode("l")),
            limit: Some(10),
            ..range
        };
        assert_eq!(
            serde_json::to_string(&stale).unwrap(),
            r#"{"key":"aw==","range_end":"bA==","limit":10,"serializable":true}"#
        );
    }

    #[test]
    fn answers_parse_with_string_or_absent_numbers() {
        let r: RangeResponse = serde_json::from_str(
            r#"{"header":{"revision":"7"},"kvs":[{"key":"aw==","value":"dg==",
                "mod_revision":"7","version":"1"}],"count":"1"}"#,
        )
        .unwrap();
        assert_eq!(r.kvs[0].mod_revision, 7);
        let empty: RangeResponse = serde_json::from_str(r#"{"header":{}}"#).unwrap();
        assert!(empty.kvs.is_empty());
        let t: TxnResponse = serde_json::from_str(r#"{"header":{}}"#).unwrap();
        assert!(!t.succeeded);
        let d: DeleteRangeResponse = serde_json::from_str(r#"{"deleted":2}"#).unwrap();
        assert_eq!(d.deleted, 2);
    }

    #[test]
    fn error_answers_carry_the_gateway_message() {
        let err = server_error(&Response {
            status: 400,
            body: br#"{"error":"etcdserver: key is not provided","message":"etcdserver: key is not provided","code":3}"#.to_vec(),
            etag: None,
            index: None,
        });
        assert_eq!(err.kind(), "server");
        assert_eq!(
            err.to_string(),
            "server error: HTTP 400: etcdserver: key is not provided"
        );
        let plain = server_error(&Response {
            status: 404,
            body: b"Not Found\n".to_vec(),
            etag: None,
            index: None,
        });
        assert_eq!(plain.to_string(), "server error: HTTP 404: Not Found");
    }
}
