//! The stored form of a value: the bytes plus the indexes and flags Consul clients expect.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// A value as stored in a shard's state machine.
///
/// `create_index` and `modify_index` are the shard's Raft log indexes of the write that created
/// the key and of the last write that changed it (Consul's `CreateIndex` / `ModifyIndex`, used
/// for check-and-set). `expires_at_ms` is wall-clock milliseconds since the Unix epoch as the
/// leader saw them when it proposed the write, so every replica expires the key identically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The value bytes.
    pub value: Bytes,
    /// Opaque client flags (Consul's `Flags`).
    pub flags: u64,
    /// Log index of the write that created the key.
    pub create_index: u64,
    /// Log index of the last write that changed the key.
    pub modify_index: u64,
    /// When the key expires, in Unix milliseconds; `None` for never.
    pub expires_at_ms: Option<u64>,
}

/// Encoding version byte; bump when the layout changes.
const FORMAT: u8 = 1;
const HEADER_LEN: usize = 1 + 8 * 4;

/// Why stored bytes could not be read back as a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record: {0}")]
pub struct CorruptRecord(&'static str);

impl Record {
    /// Whether the record has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= now_ms)
    }

    /// Encodes the record: a fixed 33-byte header, then the value. Hand-written because it is
    /// on every read and write path.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(HEADER_LEN + self.value.len());
        out.put_u8(FORMAT);
        out.put_u64(self.flags);
        out.put_u64(self.create_index);
        out.put_u64(self.modify_index);
        out.put_u64(self.expires_at_ms.unwrap_or(0));
        out.put_slice(&self.value);
        out.freeze()
    }

    /// Decodes what [`Record::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, CorruptRecord> {
        if bytes.len() < HEADER_LEN {
            return Err(CorruptRecord("shorter than the header"));
        }
        if bytes[0] != FORMAT {
            return Err(CorruptRecord("unknown format version"));
        }
        let word = |i: usize| {
            let start = 1 + 8 * i;
            let mut buf = [0u8; 8];
            buf.copy_from_slice(&bytes[start..start + 8]);
            u64::from_be_bytes(buf)
        };
        let expires = word(3);
        Ok(Record {
            flags: word(0),
            create_index: word(1),
            modify_index: word(2),
            expires_at_ms: (expires != 0).then_some(expires),
            value: Bytes::copy_from_slice(&bytes[HEADER_LEN..]),
        })
    }

    /// The value in encoded bytes, borrowed rather than copied (`None` when the bytes are too
    /// short to be a record), for a caller that looks at many values and keeps few.
    pub fn peek_value(bytes: &[u8]) -> Option<&[u8]> {
        bytes.get(HEADER_LEN..)
    }

    /// Reads only the expiry from encoded bytes, without copying the value.
    pub fn peek_expiry(bytes: &[u8]) -> Option<u64> {
        let raw = bytes.get(25..33)?;
        let mut buf = [0u8; 8];
        buf.copy_from_slice(raw);
        let at = u64::from_be_bytes(buf);
        (at != 0).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let record = Record {
            value: Bytes::from_static(b"hello"),
            flags: 42,
            create_index: 7,
            modify_index: 9,
            expires_at_ms: Some(1_700_000_000_000),
        };
        let bytes = record.encode();
        assert_eq!(bytes.len(), HEADER_LEN + 5);
        assert_eq!(Record::decode(&bytes), Ok(record));
        assert_eq!(Record::peek_expiry(&bytes), Some(1_700_000_000_000));
        assert_eq!(Record::peek_value(&bytes), Some(&b"hello"[..]));
        assert_eq!(Record::peek_value(b"short"), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Record::decode(b"short").is_err());
        let mut bytes = Record {
            value: Bytes::new(),
            flags: 0,
            create_index: 1,
            modify_index: 1,
            expires_at_ms: None,
        }
        .encode()
        .to_vec();
        assert_eq!(Record::peek_expiry(&bytes), None);
        bytes[0] = 99;
        assert!(Record::decode(&bytes).is_err());
    }

    #[test]
    fn expiry_is_inclusive() {
        let record = Record {
            value: Bytes::new(),
            flags: 0,
            create_index: 1,
            modify_index: 1,
            expires_at_ms: Some(100),
        };
        assert!(!record.is_expired(99));
        assert!(record.is_expired(100));
    }
}
