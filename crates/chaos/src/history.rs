//! One line of the history file (`history.jsonl`): a completed client operation with its
//! invocation and completion times. The format is the contract with the Go checker in
//! `chaos/checker` (documented at the top of its `main.go`).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ChaosError;

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// GET (HTTP or RESP).
    Read,
    /// PUT / SET.
    Write,
    /// PUT `?cas=` with the index of a value read just before.
    Cas,
    /// DELETE / DEL.
    Delete,
    /// `PUT /v1/txn` on the keys of one group (`key` names the group).
    Txn,
    /// `PUT ?acquire=` of a lock key.
    Acquire,
    /// `PUT ?release=` of a lock key.
    Release,
    /// `PUT /v1/session/renew`.
    Renew,
    /// `PUT /v1/session/create`.
    SessionCreate,
    /// `PUT /v1/session/destroy`.
    SessionDestroy,
}

/// One operation of a transaction, as the checker reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnStep {
    /// `get`, `set`, `delete` or `check-not-exists`; `read` for a key of a group read in one
    /// request (MGET, a listing), which never fails.
    pub verb: String,
    /// The key.
    pub key: String,
    /// Set: the value written. Get: the value read (when the transaction applied). Read: the
    /// value seen, `None` when the key was absent.
    pub value: Option<String>,
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Completed; the result is known.
    Ok,
    /// Certainly did not take effect (refused before it could be proposed).
    Fail,
    /// May or may not have taken effect (timed out, connection broken, outcome unknown).
    Unknown,
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The client that issued it; a client issues one operation at a time.
    pub client: u32,
    /// The node it was sent to.
    pub node: String,
    /// `http` or `resp`.
    pub proto: String,
    /// What it did.
    pub op: OpKind,
    /// The key.
    pub key: String,
    /// Reads: `default`, `consistent` or `stale`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mode: Option<String>,
    /// Read: the value seen (None = absent). Write and cas: the value written.
    pub value: Option<String>,
    /// Cas: the value the key had to hold (None = absent: create only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expect: Option<String>,
    /// Cas and txn: whether it applied. Acquire and release: whether the lock was taken or
    /// released.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub result: Option<bool>,
    /// HTTP reads that found a value: its ModifyIndex.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub index: Option<u64>,
    /// Stale reads: how old the answer said it may be (`X-Consul-LastContact`), in
    /// nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bound: Option<u64>,
    /// How it ended.
    pub status: Status,
    /// Invocation, nanoseconds since the run's clock started.
    pub call: u64,
    /// Completion, nanoseconds since the run's clock started.
    #[serde(rename = "return")]
    pub ret: u64,
    /// Txn: its operations, in order.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub txn: Option<Vec<TxnStep>>,
    /// Lock and session operations: the session.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub session: Option<String>,
    /// Session create: for how long after the call of a successful create or renew no other
    /// session may take a lock this one holds (nanoseconds).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub lease: Option<u64>,
}

impl Event {
    /// An operation of `client` on `node`, called at `call`, not yet finished.
    #[must_use]
    pub fn new(client: u32, node: &str, proto: &str, op: OpKind, key: &str, call: u64) -> Self {
        Event {
            client,
            node: node.to_string(),
            proto: proto.to_string(),
            op,
            key: key.to_string(),
            mode: None,
            value: None,
            expect: None,
            result: None,
            index: None,
            bound: None,
            status: Status::Ok,
            call,
            ret: call,
            txn: None,
            session: None,
            lease: None,
        }
    }
}

/// Writes `events`, sorted by invocation time, one JSON object per line.
pub fn write(path: &Path, events: &mut [Event]) -> Result<(), ChaosError> {
    events.sort_by_key(|e| (e.call, e.client));
    let file = std::fs::File::create(path).map_err(|e| ChaosError::io(path.display(), e))?;
    let mut out = std::io::BufWriter::new(file);
    for event in events.iter() {
        let line = serde_json::to_string(event)
            .map_err(|e| ChaosError::io(path.display(), std::io::Error::other(e.to_string())))?;
        writeln!(out, "{line}").map_err(|e| ChaosError::io(path.display(), e))?;
    }
    out.flush().map_err(|e| ChaosError::io(path.display(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_match_the_checker_format() {
        let mut events = vec![
            Event {
                client: 2,
                node: "n1".into(),
                proto: "http".into(),
                op: OpKind::Cas,
                key: "k1".into(),
                mode: None,
                value: Some("c2-5".into()),
                expect: None,
                result: Some(false),
                index: None,
                bound: None,
                status: Status::Ok,
                call: 20,
                ret: 30,
                txn: None,
                session: None,
                lease: None,
            },
            Event {
                client: 1,
                node: "n2".into(),
                proto: "resp".into(),
                op: OpKind::Read,
                key: "k1".into(),
                mode: Some("default".into()),
                value: None,
                expect: None,
                result: None,
                index: None,
                bound: None,
                status: Status::Unknown,
                call: 10,
                ret: 40,
                txn: None,
                session: None,
                lease: None,
            },
            Event {
                op: OpKind::SessionCreate,
                session: Some("s1".into()),
                lease: Some(5),
                ..Event::new(3, "n3", "http", OpKind::SessionCreate, "", 50)
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        write(&path, &mut events).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"{"client":1,"node":"n2","proto":"resp","op":"read","key":"k1","mode":"default","value":null,"status":"unknown","call":10,"return":40}"#,
                r#"{"client":2,"node":"n1","proto":"http","op":"cas","key":"k1","value":"c2-5","result":false,"status":"ok","call":20,"return":30}"#,
                r#"{"client":3,"node":"n3","proto":"http","op":"session-create","key":"","value":null,"status":"ok","call":50,"return":50,"session":"s1","lease":5}"#,
            ]
        );
        let back: Event = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(back, events[1]);
    }
}
