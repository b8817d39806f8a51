//! Key layouts inside the keyspaces: a big-endian group or shard number first, so each
//! group's or shard's rows are contiguous and ordered.

/// A key prefixed by a 4-byte owner (a shard): `data`, `data_meta`.
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
