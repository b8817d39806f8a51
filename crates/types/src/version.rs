//! Which build a node runs and which protocol it speaks, as nodes tell each other when they
//! link. During a rolling upgrade nodes of adjacent protocols (N and N+1) serve together;
//! a node further apart is refused at the handshake, with both versions in the message.
//!
//! The protocol number covers everything another node reads: peer frames, forwarded requests
//! and replies, log entries, snapshots. Raise it with any change to them, and keep the golden
//! encodings (`golden/` in each crate) decoding.
//!
//! Linking is not enough for a change to what is replicated: a new log command reaches every
//! replica, old ones included. Such a feature waits for the *cluster version*, which the
//! metadata group records and raises only once every member announces a protocol that knows
//! it (see [`since`]); from then on a node older than the cluster version is refused too, so
//! the feature stays safe to use.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The protocol this build speaks. Builds from before versions were announced count as 0.
///
/// - 1: the handshake announces the build, the protocol and the node's name.
/// - 2: the cluster version; popping the first sorted set of several keys (`BZPOPMIN`,
///   `BZPOPMAX` on more than one key).
/// - 3: transactions across shards (prepare, decide, resolve and forget commands; intents).
/// - 4: transactions across shards resolved at their prepares' indexes, many at once;
///   prefix reads and deletes in them (`get-tree`, `delete-tree`, recursive deletes), with
///   prefix holds.
/// - 5: AppendEntries carry the leader's freshness stamp (what bounds a stale read's age);
///   regions: a home region and learners in the cluster map.
pub const PROTOCOL: u32 = 5;

/// The cluster version from which each replicated feature may be used: the protocol that
/// brought it. Below it, the feature answers an error naming both versions.
pub mod since {
    /// [`crate::SortedSetOp::PopFirst`]: one pop across several sorted sets.
    pub const SORTED_SET_POP_FIRST: u32 = 2;
    /// [`crate::Command::Prepare`] and the rest of [`crate::txn`]: transactions across shards.
    pub const CROSS_SHARD_TRANSACTIONS: u32 = 3;
    /// [`crate::Command::ResolveMany`], [`crate::Command::ReadPrefix`] and prefix holds:
    /// transactions across shards answered once decided, and over prefixes.
    pub const PREFIX_TRANSACTIONS: u32 = 4;
    /// Stamped AppendEntries on a peer link. Nothing replicated changes, so this waits only
    /// for the peer's own protocol, as its link announced it, not for the cluster version.
    pub const STAMPED_APPENDS: u32 = 5;
    /// A home region and learners in the cluster map, which a metadata leader of an older
    /// build would drop when it rewrites the map.
    pub const REGIONS: u32 = 5;
}

/// The environment variable that makes a node announce another protocol number than
/// [`PROTOCOL`]: for tests of mixed-version clusters only, never in production (the node still
/// speaks its own protocol).
pub const ANNOUNCE_PROTOCOL_ENV: &str = "TRIREME_TEST_ANNOUNCE_PROTOCOL";

/// A node's build and protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The protocol it speaks (see [`PROTOCOL`]).
    pub protocol: u32,
    /// Its release, as Cargo knows it (`0.1.0`).
    pub build: String,
}

impl Version {
    /// This build's version, with the protocol a test may have asked it to announce.
    pub fn current() -> Version {
        let protocol = std::env::var(ANNOUNCE_PROTOCOL_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(PROTOCOL);
        Version {
            protocol,
            build: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// A node of a build from before versions were announced.
    pub fn unversioned() -> Version {
        Version {
            protocol: 0,
            build: "unknown (before protocol 1)".into(),
        }
    }

    /// Whether a node of this version may link with one of `peer`'s in a cluster at
    /// `cluster_version`: their protocols are at most one apart, and the peer's is not below
    /// the cluster's (features it does not know may be in use). `Err` says why not, naming
    /// the versions.
    pub fn admits(&self, peer: &Version, cluster_version: u32) -> Result<(), String> {
        if self.protocol.abs_diff(peer.protocol) > 1 {
            return Err(format!(
                "the peer runs {peer}, this node {self}: nodes more than one protocol apart cannot serve together; upgrade one version at a time"
            ));
        }
        if peer.protocol < cluster_version {
            return Err(format!(
                "the peer runs {peer}, older than the cluster version {cluster_version} (this node runs {self}): once every node was upgraded the cluster moved on, so older builds cannot rejoin; start it with a build of protocol {cluster_version} or later"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "build {} (protocol {})", self.build, self.protocol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(protocol: u32) -> Version {
        Version {
            protocol,
            build: format!("0.{protocol}.0"),
        }
    }

    #[test]
    fn adjacent_protocols_link_and_farther_ones_are_refused_by_both_sides() {
        assert!(at(3).admits(&at(3), 3).is_ok());
        assert!(at(3).admits(&at(4), 3).is_ok());
        assert!(at(4).admits(&at(3), 3).is_ok());
        let refused = at(3).admits(&at(5), 3).expect_err("two apart");
        assert!(refused.contains("build 0.5.0 (protocol 5)"), "{refused}");
        assert!(refused.contains("build 0.3.0 (protocol 3)"), "{refused}");
        assert!(at(5).admits(&at(3), 3).is_err());
        assert!(at(1).admits(&Version::unversioned(), 0).is_ok());
        assert!(at(2).admits(&Version::unversioned(), 0).is_err());
    }

    #[test]
    fn a_peer_older_than_the_cluster_version_is_refused_with_both_versions() {
        assert!(at(4).admits(&at(3), 3).is_ok());
        let refused = at(4).admits(&at(3), 4).expect_err("older than the cluster");
        assert!(refused.contains("cluster version 4"), "{refused}");
        assert!(refused.contains("build 0.3.0 (protocol 3)"), "{refused}");
        // The cluster version never refuses a newer peer.
        assert!(at(4).admits(&at(5), 4).is_ok());
    }
}
