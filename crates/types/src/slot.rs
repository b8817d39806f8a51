//! Key → slot → shard, exactly as Redis Cluster does it, so cluster-aware Redis clients
//! can route by themselves.

use crate::ids::ShardId;
use serde::{Deserialize, Serialize};
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

/// The slot of a key: CRC16 of its hash tag modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOT_COUNT
}

/// Which shard owns which slots. Shards own contiguous, equal-sized slot ranges; the count is
/// fixed when the cluster is bootstrapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    shard_count: u32,
}

impl ShardMap {
    /// A map of `shard_count` shards; `None` if the count is 0 or more than there are slots.
    pub fn new(shard_count: u32) -> Option<Self> {
        (1..=u32::from(SLOT_COUNT))
            .contains(&shard_count)
            .then_some(Self { shard_count })
    }

    /// How many shards there are.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// Every shard id, in slot order.
    pub fn shards(&self) -> impl Iterator<Item = ShardId> + use<> {
        (0..self.shard_count).map(ShardId)
    }

    /// The shard that owns `slot`.
    pub fn shard_of_slot(&self, slot: u16) -> ShardId {
        // Inverse of `slots_of`: the largest shard whose first slot is <= slot.
        let shard = (u64::from(slot) * u64::from(self.shard_count) + u64::from(self.shard_count)
            - 1)
            / u64::from(SLOT_COUNT);
        let shard = shard as u32;
        if self.first_slot(shard) > u32::from(slot) {
            ShardId(shard - 1)
        } else {
            ShardId(shard)
        }
    }

    /// The shard that owns `key`.
    pub fn shard_of_key(&self, key: &[u8]) -> ShardId {
        self.shard_of_slot(key_slot(key))
    }

    fn first_slot(&self, shard: u32) -> u32 {
        (u64::from(shard) * u64::from(SLOT_COUNT) / u64::from(self.shard_count)) as u32
    }

    /// The inclusive slot range a shard owns.
    pub fn slots_of(&self, shard: ShardId) -> RangeInclusive<u16> {
        let start = self.first_slot(shard.0) as u16;
        let end = (self.first_slot(shard.0 + 1) - 1) as u16;
        start..=end
    }
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
}
