//! Request limits (docs/architecture.md, "limits"): what Consul, etcd and Redis enforce.

use crate::error::{ErrorCode, TriremeError};
use serde::{Deserialize, Serialize};

/// Size limits enforced by every front end before anything reaches the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Longest key, bytes.
    pub max_key_bytes: usize,
    /// Longest value, bytes.
    pub max_value_bytes: usize,
    /// How long an HTTP client may take to send its request headers, milliseconds.
    pub header_read_timeout_ms: u64,
    /// Most commands one Redis `MULTI` may queue before `EXEC`.
    pub max_multi_commands: usize,
    /// Bytes of pub/sub messages queued for one subscriber that does not read before its
    /// connection is closed (Redis's pub/sub output buffer limit).
    pub pubsub_buffer_bytes: usize,
    /// Most operations in one Consul transaction (`/v1/txn`; Consul's default is 128).
    pub max_txn_ops: usize,
    /// Shortest TTL a Consul session may ask for, milliseconds (Consul's `session_ttl_min`,
    /// 10 s by default); the longest is 24 hours.
    pub session_ttl_min_ms: u64,
    /// Most members one Redis collection (a hash's fields) may hold.
    pub max_collection_members: u64,
    /// Most members one read of a whole collection (`HGETALL`, `SMEMBERS`, `LRANGE 0 -1`,
    /// `ZRANGE 0 -1`) answers: past it the read is refused with an error that names the
    /// paging command, instead of building a reply the node may not have the memory for.
    pub max_collection_read: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_key_bytes: 8 * 1024,
            max_value_bytes: 512 * 1024,
            header_read_timeout_ms: 10_000,
            max_multi_commands: 10_000,
            pubsub_buffer_bytes: 32 << 20,
            max_txn_ops: 128,
            session_ttl_min_ms: 10_000,
            max_collection_members: 10_000_000,
            max_collection_read: 1_000_000,
        }
    }
}

impl Limits {
    /// Longest HTTP request body: the value limit plus headroom, at least 1 MiB.
    pub fn max_body_bytes(&self) -> usize {
        (self.max_value_bytes + 64 * 1024).max(1024 * 1024 + 64 * 1024)
    }

    /// Checks a key.
    pub fn check_key(&self, key: &[u8]) -> Result<(), TriremeError> {
        if crate::session::is_internal_key(key) {
            return Err(TriremeError::new(
                ErrorCode::InvalidArgument,
                "keys starting with the bytes FF \"trireme\" 00 are reserved for Trireme's own rows",
            ));
        }
        if key.len() > self.max_key_bytes {
            return Err(TriremeError::new(
                ErrorCode::KeyTooLarge,
                format!(
                    "key is {} bytes, the limit is {}",
                    key.len(),
                    self.max_key_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Checks a collection member's name (a hash field): as long as a key may be.
    pub fn check_member(&self, member: &[u8]) -> Result<(), TriremeError> {
        if member.len() > self.max_key_bytes {
            return Err(TriremeError::new(
                ErrorCode::KeyTooLarge,
                format!(
                    "member is {} bytes, the limit is {} (that of a key)",
                    member.len(),
                    self.max_key_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Checks a value.
    pub fn check_value(&self, value: &[u8]) -> Result<(), TriremeError> {
        if value.len() > self.max_value_bytes {
            return Err(TriremeError::new(
                ErrorCode::ValueTooLarge,
                format!(
                    "value is {} bytes, the limit is {}",
                    value.len(),
                    self.max_value_bytes
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_reject_oversized_input() {
        let limits = Limits::default();
        assert!(limits.check_key(&[b'k'; 8192]).is_ok());
        assert_eq!(
            limits.check_key(&[b'k'; 8193]).map_err(|e| e.code),
            Err(ErrorCode::KeyTooLarge)
        );
        assert!(limits.check_value(&vec![0; 512 * 1024]).is_ok());
        assert_eq!(
            limits
                .check_value(&vec![0; 512 * 1024 + 1])
                .map_err(|e| e.code),
            Err(ErrorCode::ValueTooLarge)
        );
        assert!(limits.max_body_bytes() > 1024 * 1024);
    }
}
