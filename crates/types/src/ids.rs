//! Identifiers of nodes, shards and Raft groups.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's numeric id inside Raft. Users name nodes (`n1`, `db-east-2`); the number is a
/// stable 64-bit FNV-1a hash of that name, so every node derives the same id without
/// coordination. Collisions are checked where the member list is known.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct NodeId(pub u64);

impl NodeId {
    /// The id a node called `name` has in Raft.
    pub fn from_name(name: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        NodeId(hash)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Hex at a width other than [`Display`]'s 16 digits (a Redis Cluster node id has 40).
impl fmt::LowerHex for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

/// A shard: a contiguous slot range with its own Raft group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShardId(pub u32);

impl fmt::Display for ShardId {
    /// The bare number, honouring width and fill (`{:<4}` in tables).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A Raft group on a node. Group 0 is reserved for cluster metadata; shard `s` is group `s + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupId(pub u32);

impl GroupId {
    /// The metadata group.
    pub const META: GroupId = GroupId(0);

    /// The group that replicates `shard`.
    pub fn of_shard(shard: ShardId) -> Self {
        GroupId(shard.0 + 1)
    }

    /// The shard this group replicates, if it is a shard group.
    pub fn shard(self) -> Option<ShardId> {
        self.0.checked_sub(1).map(ShardId)
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_stable_and_distinct() {
        assert_eq!(NodeId::from_name("n1"), NodeId::from_name("n1"));
        assert_ne!(NodeId::from_name("n1"), NodeId::from_name("n2"));
        // FNV-1a of the empty string is its offset basis.
        assert_eq!(NodeId::from_name("").0, 0xcbf2_9ce4_8422_2325);
        assert_eq!(format!("{:08x}", NodeId(0xab)), "000000ab");
        assert_eq!(NodeId(0xab).to_string(), format!("{:016x}", 0xab));
    }

    #[test]
    fn groups_map_to_shards_and_back() {
        assert_eq!(GroupId::META.shard(), None);
        assert_eq!(GroupId::of_shard(ShardId(0)), GroupId(1));
        assert_eq!(GroupId(5).shard(), Some(ShardId(4)));
    }

    /// Fields once typed `u32`/`u64` became these newtypes; documents already written and
    /// peers already running must read the same bytes.
    #[test]
    fn ids_encode_as_their_bare_numbers() {
        assert_eq!(serde_json::to_string(&ShardId(3)).unwrap(), "3");
        assert_eq!(serde_json::from_str::<ShardId>("3").unwrap(), ShardId(3));
        assert_eq!(serde_json::to_string(&NodeId(7)).unwrap(), "7");
        let keyed = std::collections::BTreeMap::from([(NodeId(7), 1)]);
        assert_eq!(serde_json::to_string(&keyed).unwrap(), r#"{"7":1}"#);
        assert_eq!(
            postcard::to_stdvec(&ShardId(300)).unwrap(),
            postcard::to_stdvec(&300u32).unwrap()
        );
        assert_eq!(
            postcard::to_stdvec(&NodeId(u64::MAX)).unwrap(),
            postcard::to_stdvec(&u64::MAX).unwrap()
        );
        assert_eq!(format!("[{:<4}]", ShardId(3)), "[3   ]");
    }
}
