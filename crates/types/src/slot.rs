//! Key → slot → shard, exactly as Redis Cluster does it, so cluster-aware Redis clients
//! can route by themselves.

use crate::ids::ShardId;
use std::ops::RangeInclusive;

/// Number of hash slots; fixed forever, as in Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` that is hashed: the content of the first non-empty `{...}` if there is
/// one, otherwise the whole key (Redis Cluster's hash tags).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}')
            && close > 0
        {
            return &rest[..close];
        }
    }
    key
}

/// The slot of a key: CRC16 of its hash tag modulo 16384. A collection's member row is in
/// its collection's slot, which the row's key carries (see [`crate::collection`]), and so is
/// a transaction's intent on a key (see [`crate::txn`]).
pub fn key_slot(key: &[u8]) -> u16 {
    if let Some(slot) = crate::collection::member_slot(key).or_else(|| crate::txn::intent_slot(key))
    {
        return slot % SLOT_COUNT;
    }
    crc16(hash_tag(key)) % SLOT_COUNT
}

/// Which shard owns which slots: every shard owns one contiguous slot range, and every slot
/// has exactly one owner. A cluster starts with equal ranges; a split gives the upper part of
/// a shard's range to a new shard, whose id is the next free one, so ids stay dense but are
/// not in slot order. The epoch is the cluster map's version this routing was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    /// Inclusive slot range of each shard, by shard id.
    ranges: Vec<(u16, u16)>,
    /// The owner of every slot, by slot: one lookup per key.
    owners: Vec<u32>,
    epoch: u64,
}

impl ShardMap {
    /// A map of `shard_count` equal shards; `None` if the count is 0 or more than there are
    /// slots.
    pub fn new(shard_count: u32) -> Option<Self> {
        if !(1..=u32::from(SLOT_COUNT)).contains(&shard_count) {
            return None;
        }
        Self::from_ranges(even_ranges(shard_count), 0)
    }

    /// A map from each shard's inclusive slot range, by shard id; `None` unless the ranges
    /// cover every slot exactly once.
    pub fn from_ranges(ranges: Vec<(u16, u16)>, epoch: u64) -> Option<Self> {
        let mut owners = vec![u32::MAX; usize::from(SLOT_COUNT)];
        for (shard, &(start, end)) in ranges.iter().enumerate() {
            if start > end || end >= SLOT_COUNT {
                return None;
            }
            for owner in &mut owners[usize::from(start)..=usize::from(end)] {
                if *owner != u32::MAX {
                    return None;
                }
                *owner = shard as u32;
            }
        }
        if owners.contains(&u32::MAX) {
            return None;
        }
        Some(Self {
            ranges,
            owners,
            epoch,
        })
    }

    /// How many shards there are; shard ids run from 0 to this, exclusive.
    pub fn shard_count(&self) -> u32 {
        self.ranges.len() as u32
    }

    /// Every shard id, in id order.
    pub fn shards(&self) -> impl Iterator<Item = ShardId> + use<> {
        (0..self.shard_count()).map(ShardId)
    }

    /// The version of the cluster map this was read from (0 for a map made from a count).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The shard that owns `slot`.
    pub fn shard_of_slot(&self, slot: u16) -> ShardId {
        ShardId(self.owners[usize::from(slot % SLOT_COUNT)])
    }

    /// The shard that owns `key`.
    pub fn shard_of_key(&self, key: &[u8]) -> ShardId {
        self.shard_of_slot(key_slot(key))
    }

    /// The inclusive slot range a shard owns (empty for a shard the map does not have).
    pub fn slots_of(&self, shard: ShardId) -> RangeInclusive<u16> {
        match self.ranges.get(shard.0 as usize) {
            Some(&(start, end)) => start..=end,
            #[allow(clippy::reversed_empty_ranges)]
            None => 1..=0,
        }
    }

    /// Every shard's inclusive slot range, by shard id.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges
    }
}

/// `count` contiguous ranges of (nearly) equal size covering every slot: the layout a cluster
/// is bootstrapped with.
pub fn even_ranges(count: u32) -> Vec<(u16, u16)> {
    let count = count.clamp(1, u32::from(SLOT_COUNT));
    (0..count)
        .filter_map(|shard| even_range(count, ShardId(shard)))
        .collect()
}

/// The slots of shard `shard` in the layout of `count` equal shards ([`even_ranges`]); `None`
/// for a shard beyond it (or a count of 0 or more than there are slots).
pub fn even_range(count: u32, shard: ShardId) -> Option<(u16, u16)> {
    let shard = shard.0;
    if shard >= count || count > u32::from(SLOT_COUNT) {
        return None;
    }
    // At most SLOT_COUNT (16384), which fits in a u16.
    let first = |s: u32| (u64::from(s) * u64::from(SLOT_COUNT) / u64::from(count)) as u16;
    Some((first(shard), first(shard + 1) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags_pick_the_first_non_empty_braces() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"no-close{here"), b"no-close{here");
    }

    #[test]
    fn shards_cover_every_slot_once_in_order() {
        for count in [1u32, 3, 7, 16, 100, 16384] {
            let map = ShardMap::new(count).expect("valid count");
            let mut next = 0u32;
            for shard in map.shards() {
                let range = map.slots_of(shard);
                assert_eq!(
                    u32::from(*range.start()),
                    next,
                    "shard {shard:?} of {count}"
                );
                assert!(range.start() <= range.end());
                for slot in [*range.start(), *range.end()] {
                    assert_eq!(map.shard_of_slot(slot), shard, "slot {slot} of {count}");
                }
                next = u32::from(*range.end()) + 1;
            }
            assert_eq!(next, u32::from(SLOT_COUNT));
        }
        for slot in 0..SLOT_COUNT {
            let map = ShardMap::new(16).expect("valid count");
            assert!(map.slots_of(map.shard_of_slot(slot)).contains(&slot));
        }
    }

    #[test]
    fn shard_count_is_bounded() {
        assert!(ShardMap::new(0).is_none());
        assert!(ShardMap::new(16385).is_none());
    }

    #[test]
    fn ranges_after_a_split_route_the_upper_slots_to_the_new_shard() {
        let mut ranges = even_ranges(2);
        assert_eq!(ranges, vec![(0, 8191), (8192, 16383)]);
        ranges[0] = (0, 4095);
        ranges.push((4096, 8191));
        let map = ShardMap::from_ranges(ranges, 7).expect("a cover");
        assert_eq!(map.epoch(), 7);
        assert_eq!(map.shard_count(), 3);
        assert_eq!(map.shard_of_slot(4095), ShardId(0));
        assert_eq!(map.shard_of_slot(4096), ShardId(2));
        assert_eq!(map.shard_of_slot(8192), ShardId(1));
        assert_eq!(map.slots_of(ShardId(2)), 4096..=8191);
        assert!(map.slots_of(ShardId(3)).is_empty());
    }

    #[test]
    fn ranges_that_overlap_or_leave_a_gap_are_refused() {
        assert!(ShardMap::from_ranges(vec![(0, 100), (100, 16383)], 1).is_none());
        assert!(ShardMap::from_ranges(vec![(0, 100), (102, 16383)], 1).is_none());
        assert!(ShardMap::from_ranges(vec![(0, 16384)], 1).is_none());
        assert!(ShardMap::from_ranges(vec![(5, 4), (0, 16383)], 1).is_none());
        assert!(ShardMap::from_ranges(Vec::new(), 1).is_none());
    }
}
