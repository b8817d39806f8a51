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
    /// The Consul lock on the key (`LockIndex`, `Session`); default for most keys.
    pub lock: LockInfo,
    /// What the key holds: a string (the value is the value), or a Redis collection (the
    /// value is its metadata, its members are rows of their own: see [`crate::collection`]).
    pub kind: ValueKind,
}

/// The Redis type of a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValueKind {
    /// A string: every key Consul, the document API and Redis string commands write.
    #[default]
    String,
    /// A Redis hash: the record's value is its field count, each field a member row.
    Hash,
    /// A Redis set: the record's value is its member count, each member a row.
    Set,
    /// A Redis list: the record's value is its length and first position, each element a
    /// row named by its position.
    List,
    /// A Redis sorted set: the record's value is its member count, each member a row (its
    /// value the score) and a score row (see [`crate::sorted`]).
    SortedSet,
}

impl ValueKind {
    /// The name Redis's `TYPE` answers.
    pub fn type_name(self) -> &'static str {
        match self {
            ValueKind::String => "string",
            ValueKind::Hash => "hash",
            ValueKind::Set => "set",
            ValueKind::List => "list",
            ValueKind::SortedSet => "zset",
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            ValueKind::String => 0,
            ValueKind::Hash => 1,
            ValueKind::Set => 2,
            ValueKind::List => 3,
            ValueKind::SortedSet => 4,
        }
    }

    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(ValueKind::String),
            1 => Some(ValueKind::Hash),
            2 => Some(ValueKind::Set),
            3 => Some(ValueKind::List),
            4 => Some(ValueKind::SortedSet),
            _ => None,
        }
    }
}

/// A key's Consul lock: which session holds it, how many times it was acquired, and until
/// when nobody may take it after its holder's session was invalidated (the lock-delay).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// Times the lock was acquired (Consul's `LockIndex`).
    pub index: u64,
    /// The session holding it (Consul's `Session`), if any.
    pub session: Option<Bytes>,
    /// Unix milliseconds until which no session may acquire it; 0 for none.
    pub delay_until_ms: u64,
}

impl LockInfo {
    fn is_default(&self) -> bool {
        self.index == 0 && self.session.is_none() && self.delay_until_ms == 0
    }
}

/// Encoding version byte of a record without lock information.
const FORMAT: u8 = 1;
/// Encoding version byte of a record with it: after the header, the lock index, the delay,
/// the session's length (one byte) and the session, then the value.
const FORMAT_LOCKED: u8 = 2;
/// Encoding version byte of a collection's record (never locked): after the header, one
/// byte of [`ValueKind`], then the value.
const FORMAT_TYPED: u8 = 3;
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
        let locked = !self.lock.is_default();
        let typed = self.kind != ValueKind::String;
        let mut out = BytesMut::with_capacity(HEADER_LEN + 64 + self.value.len());
        out.put_u8(if typed {
            FORMAT_TYPED
        } else if locked {
            FORMAT_LOCKED
        } else {
            FORMAT
        });
        out.put_u64(self.flags);
        out.put_u64(self.create_index);
        out.put_u64(self.modify_index);
        out.put_u64(self.expires_at_ms.unwrap_or(0));
        if typed {
            // A collection takes no Consul lock (the front ends refuse it), so none is kept.
            out.put_u8(self.kind.to_byte());
        } else if locked {
            out.put_u64(self.lock.index);
            out.put_u64(self.lock.delay_until_ms);
            let session = self.lock.session.as_deref().unwrap_or_default();
            // Session ids are 36-byte UUIDs; anything longer is cut rather than corrupt.
            let session = &session[..session.len().min(255)];
            out.put_u8(session.len() as u8);
            out.put_slice(session);
        }
        out.put_slice(&self.value);
        out.freeze()
    }

    /// Where the value starts in encoded bytes, and the lock information and kind before it.
    fn value_start(bytes: &[u8]) -> Result<(usize, LockInfo, ValueKind), CorruptRecord> {
        if bytes.len() < HEADER_LEN {
            return Err(CorruptRecord("shorter than the header"));
        }
        match bytes[0] {
            FORMAT => Ok((HEADER_LEN, LockInfo::default(), ValueKind::String)),
            FORMAT_TYPED => {
                let kind = bytes
                    .get(HEADER_LEN)
                    .and_then(|b| ValueKind::from_byte(*b))
                    .ok_or(CorruptRecord("an unknown or missing kind"))?;
                Ok((HEADER_LEN + 1, LockInfo::default(), kind))
            }
            FORMAT_LOCKED => {
                let fixed = HEADER_LEN + 8 + 8 + 1;
                if bytes.len() < fixed {
                    return Err(CorruptRecord("shorter than the lock header"));
                }
                let word = |at: usize| {
                    let mut buf = [0u8; 8];
                    buf.copy_from_slice(&bytes[at..at + 8]);
                    u64::from_be_bytes(buf)
                };
                let len = bytes[fixed - 1] as usize;
                let session = bytes
                    .get(fixed..fixed + len)
                    .ok_or(CorruptRecord("shorter than its session"))?;
                Ok((
                    fixed + len,
                    LockInfo {
                        index: word(HEADER_LEN),
                        delay_until_ms: word(HEADER_LEN + 8),
                        session: (len > 0).then(|| Bytes::copy_from_slice(session)),
                    },
                    ValueKind::String,
                ))
            }
            _ => Err(CorruptRecord("unknown format version")),
        }
    }

    /// Decodes what [`Record::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, CorruptRecord> {
        let (value_at, lock, kind) = Self::value_start(bytes)?;
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
            value: Bytes::copy_from_slice(&bytes[value_at..]),
            lock,
            kind,
        })
    }

    /// The value in encoded bytes, borrowed rather than copied (`None` when the bytes are too
    /// short to be a record), for a caller that looks at many values and keeps few.
    pub fn peek_value(bytes: &[u8]) -> Option<&[u8]> {
        let (at, _, _) = Self::value_start(bytes).ok()?;
        bytes.get(at..)
    }

    /// Reads only the kind from encoded bytes (a string when they do not decode).
    pub fn peek_kind(bytes: &[u8]) -> ValueKind {
        match (bytes.first(), bytes.get(HEADER_LEN)) {
            (Some(&FORMAT_TYPED), Some(&b)) => ValueKind::from_byte(b).unwrap_or_default(),
            _ => ValueKind::String,
        }
    }

    /// A string record as a write creates it at `index`.
    pub fn string(value: Bytes, index: u64) -> Self {
        Record {
            value,
            flags: 0,
            create_index: index,
            modify_index: index,
            expires_at_ms: None,
            lock: LockInfo::default(),
            kind: ValueKind::String,
        }
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
            lock: LockInfo::default(),
            kind: ValueKind::String,
        };
        let bytes = record.encode();
        assert_eq!(bytes.len(), HEADER_LEN + 5);
        assert_eq!(Record::decode(&bytes), Ok(record));
        assert_eq!(Record::peek_expiry(&bytes), Some(1_700_000_000_000));
        assert_eq!(Record::peek_value(&bytes), Some(&b"hello"[..]));
        assert_eq!(Record::peek_value(b"short"), None);
    }

    #[test]
    fn a_locked_record_round_trips_and_keeps_its_value_where_peeks_find_it() {
        let record = Record {
            value: Bytes::from_static(b"leader=n2"),
            flags: 3_304_740_253_564_472_344,
            create_index: 4,
            modify_index: 8,
            expires_at_ms: Some(1_700_000_000_000),
            lock: LockInfo {
                index: 2,
                session: Some(Bytes::from_static(b"adf4238a-882b-9ddc-4a9d-5b6758e4159e")),
                delay_until_ms: 1_700_000_015_000,
            },
            kind: ValueKind::String,
        };
        let bytes = record.encode();
        assert_eq!(bytes[0], FORMAT_LOCKED);
        assert_eq!(Record::decode(&bytes), Ok(record.clone()));
        assert_eq!(Record::peek_value(&bytes), Some(&b"leader=n2"[..]));
        assert_eq!(Record::peek_expiry(&bytes), Some(1_700_000_000_000));
        let released = Record {
            lock: LockInfo {
                session: None,
                ..record.lock.clone()
            },
            ..record
        };
        assert_eq!(Record::decode(&released.encode()), Ok(released));
        let mut cut = bytes.to_vec();
        cut.truncate(HEADER_LEN + 17 + 3);
        assert!(Record::decode(&cut).is_err());
    }

    #[test]
    fn a_collection_record_keeps_its_kind_and_its_value_where_peeks_find_it() {
        let record = Record {
            value: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 3]),
            flags: 0,
            create_index: 5,
            modify_index: 6,
            expires_at_ms: Some(1_700_000_000_000),
            lock: LockInfo::default(),
            kind: ValueKind::Hash,
        };
        let bytes = record.encode();
        assert_eq!(bytes[0], FORMAT_TYPED);
        assert_eq!(Record::decode(&bytes), Ok(record.clone()));
        assert_eq!(Record::peek_kind(&bytes), ValueKind::Hash);
        assert_eq!(Record::peek_expiry(&bytes), Some(1_700_000_000_000));
        assert_eq!(Record::peek_value(&bytes), Some(&record.value[..]));
        let string = Record::string(Bytes::from_static(b"v"), 1).encode();
        assert_eq!(Record::peek_kind(&string), ValueKind::String);
        let mut unknown = bytes.to_vec();
        unknown[HEADER_LEN] = 200;
        assert!(Record::decode(&unknown).is_err());
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
            lock: LockInfo::default(),
            kind: ValueKind::String,
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
            lock: LockInfo::default(),
            kind: ValueKind::String,
        };
        assert!(!record.is_expired(99));
        assert!(record.is_expired(100));
    }
}
