//! Consul sessions as Trireme stores them: one row per session, under an internal key that
//! front ends never show and clients cannot write, in the shard the key hashes to.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The first bytes of every internal key. Listings, scans and prefix deletes skip such keys
/// unless asked for this prefix itself, and client writes to them are refused.
pub const INTERNAL_KEY_PREFIX: &[u8] = b"\xfftrireme\x00";

/// Where session rows live, after [`INTERNAL_KEY_PREFIX`].
const SESSIONS: &[u8] = b"session/";

/// Whether `key` is an internal key.
pub fn is_internal_key(key: &[u8]) -> bool {
    key.starts_with(INTERNAL_KEY_PREFIX)
}

/// The prefix under which every session row lives.
pub fn sessions_prefix() -> Bytes {
    let mut key = INTERNAL_KEY_PREFIX.to_vec();
    key.extend_from_slice(SESSIONS);
    Bytes::from(key)
}

/// The internal key of session `id`.
pub fn session_key(id: &str) -> Bytes {
    let mut key = sessions_prefix().to_vec();
    key.extend_from_slice(id.as_bytes());
    Bytes::from(key)
}

/// What happens to the keys a session holds when it ends (Consul's `Behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionBehavior {
    /// Their locks are released.
    Release,
    /// They are deleted.
    Delete,
}

/// A session's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// The session's id, a UUID in text.
    pub id: String,
    /// Consul's `Name`.
    pub name: String,
    /// The node it was created through (Consul's `Node`).
    pub node: String,
    /// Milliseconds during which a lock it held cannot be taken after it ends.
    pub lock_delay_ms: u64,
    /// What its end does to the keys it holds.
    pub behavior: SessionBehavior,
    /// Its TTL in milliseconds; 0 for none. It ends once twice this has passed since it was
    /// created or last renewed, as in Consul.
    pub ttl_ms: u64,
    /// When it was created or last renewed (the proposer's clock).
    pub renewed_at_ms: u64,
    /// Whether it has ended: no key can be acquired with it, and the locks it held are
    /// being released.
    pub invalidated: bool,
    /// Keys it acquired (or tried to): released when it ends.
    pub held: Vec<Bytes>,
}

impl SessionState {
    /// The row's value.
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_stdvec(self).unwrap_or_default())
    }

    /// Reads a row's value back; `None` when it is not a session.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        postcard::from_bytes(bytes).ok()
    }

    /// Whether its TTL ran out at `now_ms` (twice the TTL after its last renewal).
    pub fn expired(&self, now_ms: u64) -> bool {
        self.ttl_ms > 0
            && now_ms
                >= self
                    .renewed_at_ms
                    .saturating_add(self.ttl_ms.saturating_mul(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_row_round_trips_and_expires_after_twice_its_ttl() {
        let state = SessionState {
            id: "adf4238a-882b-9ddc-4a9d-5b6758e4159e".into(),
            name: "leader".into(),
            node: "n1".into(),
            lock_delay_ms: 15_000,
            behavior: SessionBehavior::Release,
            ttl_ms: 10_000,
            renewed_at_ms: 1_000,
            invalidated: false,
            held: vec![Bytes::from_static(b"service/leader")],
        };
        assert_eq!(SessionState::decode(&state.encode()), Some(state.clone()));
        assert!(!state.expired(20_999));
        assert!(state.expired(21_000));
        let key = session_key(&state.id);
        assert!(is_internal_key(&key) && key.starts_with(&sessions_prefix()));
        assert!(!is_internal_key(b"service/leader"));
    }
}
