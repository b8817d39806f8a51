//! Key layouts inside the keyspaces: a big-endian group or shard number first, so each
//! group's or shard's rows are contiguous and ordered.

/// `raft_log` key: group ‖ index.
pub(crate) fn log_key(group: u32, index: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(&group.to_be_bytes());
    key[4..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The index part of a `raft_log` key.
pub(crate) fn log_index(key: &[u8]) -> Option<u64> {
    let raw: [u8; 8] = key.get(4..12)?.try_into().ok()?;
    Some(u64::from_be_bytes(raw))
}

/// A key prefixed by a 4-byte owner (group or shard): `raft_meta`, `data`, `data_meta`.
pub(crate) fn owned_key(owner: u32, suffix: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(4 + suffix.len());
    key.extend_from_slice(&owner.to_be_bytes());
    key.extend_from_slice(suffix);
    key
}

/// `expiry` key: shard ‖ expires-at (Unix ms) ‖ key, so due keys are a range scan.
pub(crate) fn expiry_key(shard: u32, at_ms: u64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + key.len());
    out.extend_from_slice(&shard.to_be_bytes());
    out.extend_from_slice(&at_ms.to_be_bytes());
    out.extend_from_slice(key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_by_group_then_index() {
        assert!(log_key(1, u64::MAX) < log_key(2, 0));
        assert!(log_key(1, 255) < log_key(1, 256));
        assert_eq!(log_index(&log_key(7, 123_456)), Some(123_456));
        assert_eq!(log_index(b"short"), None);
    }
}
