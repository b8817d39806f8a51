//! How a Redis collection is stored: its key holds a [`Record`](crate::Record) of a collection
//! [`ValueKind`](crate::record::ValueKind) (whose value is the member count), and each member
//! is a row of its own under an internal *member key*, so that changing one field of a large
//! hash writes one small row, not the whole hash.
//!
//! A member key is [`INTERNAL_KEY_PREFIX`] ‖ `M/` ‖ the collection key's slot (2 bytes) ‖ the
//! collection key's length (4 bytes) ‖ the key ‖ the collection's *version* (8 bytes) ‖ the
//! member. The version is the record's `create_index`: each incarnation of a key (created,
//! deleted or overwritten, created again) has its own, so deleting or replacing a collection
//! of any size changes one record, and the rows of the old version are dead at once and
//! purged in the background. The slot written in a member key is the one of its collection
//! ([`crate::key_slot`] reads it back), so a collection's rows stay in its key's shard through
//! splits and moves; front ends never see member keys (they are internal), and one
//! collection's members are one contiguous range, in member order.
//!
//! A sorted set has a second row per member, its *score row*, under `Z/` in place of `M/`
//! and laid out alike (see [`crate::sorted`]).
//!
//! Rows laid out without the version, under `m/` and `z/` (the *unversioned* layout), are
//! what data format 3 stored and what snapshots carry: a snapshot holds live rows only, and
//! the receiver adds the version of the record it installs ([`versioned_row`]).

use crate::session::INTERNAL_KEY_PREFIX;
use bytes::Bytes;

/// What follows [`INTERNAL_KEY_PREFIX`] in every member key.
const MEMBERS: &[u8] = b"M/";
/// What follows [`INTERNAL_KEY_PREFIX`] in every score row of a sorted set.
pub(crate) const SCORES: &[u8] = b"Z/";
/// The unversioned layout's member rows.
const UNVERSIONED_MEMBERS: &[u8] = b"m/";
/// The unversioned layout's score rows.
const UNVERSIONED_SCORES: &[u8] = b"z/";

/// The first bytes of the rows of `kind` (`M/` or `Z/`) of version `version` of the
/// collection at `key`.
pub(crate) fn internal_rows_prefix(kind: &[u8], key: &[u8], version: u64) -> Bytes {
    Bytes::from(rows_prefix(kind, key, Some(version)))
}

/// The first bytes of the rows of `kind` of the collection at `key`: of `version`, or in the
/// unversioned layout.
fn rows_prefix(kind: &[u8], key: &[u8], version: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(INTERNAL_KEY_PREFIX.len() + kind.len() + 14 + key.len());
    out.extend_from_slice(INTERNAL_KEY_PREFIX);
    out.extend_from_slice(kind);
    out.extend_from_slice(&crate::slot::key_slot(key).to_be_bytes());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    if let Some(version) = version {
        out.extend_from_slice(&version.to_be_bytes());
    }
    out
}

/// The first bytes of every member row of version `version` of the collection at `key`.
pub fn member_prefix(key: &[u8], version: u64) -> Bytes {
    internal_rows_prefix(MEMBERS, key, version)
}

/// The row of `member` in version `version` of the collection at `key`.
pub fn member_key(key: &[u8], version: u64, member: &[u8]) -> Bytes {
    let mut out = member_prefix(key, version).to_vec();
    out.extend_from_slice(member);
    Bytes::from(out)
}

/// The slot written in a member key or a score row, of either layout; `None` for any other
/// key.
pub fn member_slot(key: &[u8]) -> Option<u16> {
    let rest = key.strip_prefix(INTERNAL_KEY_PREFIX)?;
    let rest = [MEMBERS, SCORES, UNVERSIONED_MEMBERS, UNVERSIONED_SCORES]
        .iter()
        .find_map(|kind| rest.strip_prefix(*kind))?;
    let slot: [u8; 2] = rest.get(..2)?.try_into().ok()?;
    Some(u16::from_be_bytes(slot))
}

/// Which rows of a collection a row is one of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowTable {
    /// One row per member (field, element).
    Members,
    /// A sorted set's second row per member, ordered by score.
    Scores,
}

impl RowTable {
    fn tag(self, versioned: bool) -> &'static [u8] {
        match (self, versioned) {
            (RowTable::Members, true) => MEMBERS,
            (RowTable::Scores, true) => SCORES,
            (RowTable::Members, false) => UNVERSIONED_MEMBERS,
            (RowTable::Scores, false) => UNVERSIONED_SCORES,
        }
    }

    /// The first bytes of this table's rows of version `version` of the collection at `key`.
    pub fn prefix(self, key: &[u8], version: u64) -> Bytes {
        internal_rows_prefix(self.tag(true), key, version)
    }
}

/// A collection row cut in its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowParts<'r> {
    /// Member or score row.
    pub table: RowTable,
    /// The collection's key.
    pub key: &'r [u8],
    /// The collection's version (`None` in the unversioned layout).
    pub version: Option<u64>,
    /// What follows: the member (a score row: the score, then the member).
    pub rest: &'r [u8],
}

/// The parts of a collection row of either layout; `None` for any other key.
pub fn row_parts(row: &[u8]) -> Option<RowParts<'_>> {
    let rest = row.strip_prefix(INTERNAL_KEY_PREFIX)?;
    let (table, versioned, rest) = [
        (RowTable::Members, true),
        (RowTable::Scores, true),
        (RowTable::Members, false),
        (RowTable::Scores, false),
    ]
    .into_iter()
    .find_map(|(table, versioned)| {
        rest.strip_prefix(table.tag(versioned))
            .map(|rest| (table, versioned, rest))
    })?;
    let len: [u8; 4] = rest.get(2..6)?.try_into().ok()?;
    let len = u32::from_be_bytes(len) as usize;
    let key_end = 6usize.checked_add(len)?;
    let key = rest.get(6..key_end)?;
    let (version, rest) = if versioned {
        let version: [u8; 8] = rest.get(key_end..key_end + 8)?.try_into().ok()?;
        (Some(u64::from_be_bytes(version)), &rest[key_end + 8..])
    } else {
        (None, &rest[key_end..])
    };
    Some(RowParts {
        table,
        key,
        version,
        rest,
    })
}

/// The collection key, version and member a member key names (`None` for a score row, a row
/// of the unversioned layout, or any other key): the inverse of [`member_key`].
pub fn split_member_key(row: &[u8]) -> Option<(&[u8], u64, &[u8])> {
    match row_parts(row)? {
        RowParts {
            table: RowTable::Members,
            key,
            version: Some(version),
            rest,
        } => Some((key, version, rest)),
        _ => None,
    }
}

/// The row of the unversioned layout `row` under version `version` (`None` if `row` is not
/// one of that layout).
pub fn versioned_row(row: &[u8], version: u64) -> Option<Bytes> {
    let parts = row_parts(row)?;
    if parts.version.is_some() {
        return None;
    }
    let mut out = parts.table.prefix(parts.key, version).to_vec();
    out.extend_from_slice(parts.rest);
    Some(Bytes::from(out))
}

/// The versioned row `row` in the unversioned layout (`None` if `row` is not a versioned
/// collection row).
pub fn unversioned_row(row: &[u8]) -> Option<Bytes> {
    let parts = row_parts(row)?;
    parts.version?;
    let mut out = rows_prefix(parts.table.tag(false), parts.key, None);
    out.extend_from_slice(parts.rest);
    Some(Bytes::from(out))
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

/// The indexes from `start` to `stop` of a list of `len`, as Redis's `LRANGE` reads them (negative from
/// the tail, clamped to the list); `None` when the range is empty.
pub fn list_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).ok()?;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as u64, stop as u64))
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
            let row = member_key(key, 7, b"field");
            assert_eq!(key_slot(&row), key_slot(key));
            assert_eq!(member_slot(&row), Some(key_slot(key)));
            assert!(crate::session::is_internal_key(&row));
            assert_eq!(member_of(&member_prefix(key, 7), &row), Some(&b"field"[..]));
            assert_eq!(split_member_key(&row), Some((key, 7, &b"field"[..])));
        }
        // A key that is a prefix of another does not share its members' range, nor does
        // another version of the same key.
        assert!(!member_key(b"ab", 1, b"c").starts_with(&member_prefix(b"a", 1)));
        assert!(!member_key(b"a", 2, b"c").starts_with(&member_prefix(b"a", 1)));
        assert_eq!(member_slot(b"plain"), None);
        let score = crate::sorted::Score::new(1.0).expect("a number");
        let row = crate::sorted::score_key(b"{tag}z", 3, score, b"m");
        assert_eq!(member_slot(&row), Some(key_slot(b"{tag}z")));
        assert_eq!(split_member_key(&row), None);
        assert_eq!(split_member_key(b"plain"), None);
        assert_eq!(key_slot(&row), key_slot(b"{tag}z"));
        // A row cut short names no member.
        let short = member_key(b"long key", 1, b"");
        assert_eq!(split_member_key(&short[..short.len() - 1]), None);
        assert_eq!(decode_count(&encode_count(42)), 42);
        assert_eq!(decode_list(&encode_list(3, -7)), (3, -7));
        assert!(list_position(-1) < list_position(0) && list_position(0) < list_position(1));
    }

    #[test]
    fn a_row_goes_between_the_layouts_and_back() {
        let score = crate::sorted::Score::new(-2.5).expect("a number");
        for row in [
            member_key(b"{h}k", 42, b"field"),
            crate::sorted::score_key(b"z", 9, score, b"member"),
            member_key(b"", u64::MAX, b""),
        ] {
            let parts = row_parts(&row).expect("a collection row");
            let plain = unversioned_row(&row).expect("a versioned row");
            let plain_parts = row_parts(&plain).expect("an unversioned row");
            assert_eq!(plain_parts.version, None);
            assert_eq!((plain_parts.key, plain_parts.rest), (parts.key, parts.rest));
            assert_eq!(member_slot(&plain), member_slot(&row));
            assert_eq!(unversioned_row(&plain), None);
            assert_eq!(versioned_row(&row, 1), None);
            let version = parts.version.expect("versioned");
            assert_eq!(versioned_row(&plain, version), Some(row.clone()));
        }
        assert_eq!(row_parts(b"plain"), None);
    }
}
