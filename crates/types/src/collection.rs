//! How a Redis collection is stored: its key holds a [`Record`](crate::Record) of a collection
//! [`ValueKind`](crate::record::ValueKind) (whose value is the member count), and each member
//! is a row of its own under an internal *member key*, so that changing one field of a large
//! hash writes one small row, not the whole hash.
//!
//! A member key is [`INTERNAL_KEY_PREFIX`] ‖ `m/` ‖ the collection key's slot (2 bytes) ‖ the
//! collection key's length (4 bytes) ‖ the key ‖ the member. Its slot is the one written in
//! it ([`crate::key_slot`] reads it back), so a collection's rows stay in its key's shard
//! through splits and moves; front ends never see member keys (they are internal), and one
//! collection's members are one contiguous range, in member order.
//!
//! A sorted set has a second row per member, its *score row*, under `z/` in place of `m/`
//! and laid out alike (see [`crate::sorted`]).

use crate::session::INTERNAL_KEY_PREFIX;
use bytes::Bytes;

/// What follows [`INTERNAL_KEY_PREFIX`] in every member key.
const MEMBERS: &[u8] = b"m/";
/// What follows [`INTERNAL_KEY_PREFIX`] in every score row of a sorted set.
pub(crate) const SCORES: &[u8] = b"z/";

/// The first bytes of the rows of `kind` (`m/` or `z/`) of the collection at `key`.
pub(crate) fn internal_rows_prefix(kind: &[u8], key: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(INTERNAL_KEY_PREFIX.len() + kind.len() + 6 + key.len());
    out.extend_from_slice(INTERNAL_KEY_PREFIX);
    out.extend_from_slice(kind);
    out.extend_from_slice(&crate::slot::key_slot(key).to_be_bytes());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    Bytes::from(out)
}

/// The first bytes of every member row of the collection at `key`.
pub fn member_prefix(key: &[u8]) -> Bytes {
    internal_rows_prefix(MEMBERS, key)
}

/// The row of `member` in the collection at `key`.
pub fn member_key(key: &[u8], member: &[u8]) -> Bytes {
    let mut out = member_prefix(key).to_vec();
    out.extend_from_slice(member);
    Bytes::from(out)
}

/// The slot written in a member key or a score row; `None` for any other key.
pub fn member_slot(key: &[u8]) -> Option<u16> {
    let rest = key.strip_prefix(INTERNAL_KEY_PREFIX)?;
    let rest = rest
        .strip_prefix(MEMBERS)
        .or_else(|| rest.strip_prefix(SCORES))?;
    let slot: [u8; 2] = rest.get(..2)?.try_into().ok()?;
    Some(u16::from_be_bytes(slot))
}

/// The collection key and the member a member key names (`None` for a score row or any
/// other key): the inverse of [`member_key`].
pub fn split_member_key(row: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = row
        .strip_prefix(INTERNAL_KEY_PREFIX)?
        .strip_prefix(MEMBERS)?;
    let len: [u8; 4] = rest.get(2..6)?.try_into().ok()?;
    let len = u32::from_be_bytes(len) as usize;
    let key = rest.get(6..6usize.checked_add(len)?)?;
    Some((key, &rest[6 + len..]))
}

/// The member a member key names, given its collection's prefix.
pub fn member_of<'k>(prefix: &[u8], member_key: &'k [u8]) -> Option<&'k [u8]> {
    member_key.strip_prefix(prefix)
}

/// The member count a collection's record holds (its first 8 bytes; a list's record holds
/// its first position after them).
pub fn decode_count(value: &[u8]) -> u64 {
    value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or_default()
}

/// A list's record: its length and the position of its first element.
pub fn decode_list(value: &[u8]) -> (u64, i64) {
    let first = value
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_be_bytes)
        .unwrap_or_default();
    (decode_count(value), first)
}

/// A list's record value for `len` elements from position `first`.
pub fn encode_list(len: u64, first: i64) -> Bytes {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&first.to_be_bytes());
    Bytes::from(out)
}

/// The member name of a list element at `position`: big-endian with the sign bit flipped,
/// so that the rows of a list sort by position, negative ones first.
pub fn list_position(position: i64) -> [u8; 8] {
    ((position as u64) ^ (1 << 63)).to_be_bytes()
}

/// A collection record's value for `count` members.
pub fn encode_count(count: u64) -> Bytes {
    Bytes::copy_from_slice(&count.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_slot;

    #[test]
    fn member_rows_live_in_their_collections_slot_and_nowhere_else() {
        for key in [&b"user:1"[..], b"{tag}h", b"", b"\xff\x00"] {
            let row = member_key(key, b"field");
            assert_eq!(key_slot(&row), key_slot(key));
            assert_eq!(member_slot(&row), Some(key_slot(key)));
            assert!(crate::session::is_internal_key(&row));
            assert_eq!(member_of(&member_prefix(key), &row), Some(&b"field"[..]));
            assert_eq!(split_member_key(&row), Some((key, &b"field"[..])));
        }
        // A key that is a prefix of another does not share its members' range.
        assert!(!member_key(b"ab", b"c").starts_with(&member_prefix(b"a")));
        assert_eq!(member_slot(b"plain"), None);
        let score = crate::sorted::Score::new(1.0).expect("a number");
        let row = crate::sorted::score_key(b"{tag}z", score, b"m");
        assert_eq!(member_slot(&row), Some(key_slot(b"{tag}z")));
        assert_eq!(split_member_key(&row), None);
        assert_eq!(split_member_key(b"plain"), None);
        assert_eq!(key_slot(&row), key_slot(b"{tag}z"));
        // A row cut short names no member.
        let short = member_key(b"long key", b"");
        assert_eq!(split_member_key(&short[..short.len() - 1]), None);
        assert_eq!(decode_count(&encode_count(42)), 42);
        assert_eq!(decode_list(&encode_list(3, -7)), (3, -7));
        assert!(list_position(-1) < list_position(0) && list_position(0) < list_position(1));
    }
}
