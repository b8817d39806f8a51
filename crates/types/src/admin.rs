//! The JSON documents a node serves about the cluster itself (`/v1/cluster/shards`,
//! `/v1/health`), as one set of types that the server writes and every client reads: the
//! `cluster status` command, the bench's slot-aware driver, the chaos runner and the tests.
//! A field added or renamed here changes all of them at once, instead of each one finding
//! out at run time that its own copy of the shape is stale.

use serde::{Deserialize, Serialize};

/// Exit status of `trireme server` when the node was removed from the cluster: drained and
/// removed while it ran, or found removed when it started (removed by force while it was
/// down, or its data directory belongs to a removed node). Supervisors (the chaos runner,
/// `cluster up`) tell it from a crash by this number, and must not restart the node.
pub const EXIT_REMOVED: u8 = 3;

/// A node's name and addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddrs {
    /// The node's name (its `--node-id`).
    pub name: String,
    /// The peer (Raft and forwarding) address, `host:port`.
    pub peer: String,
    /// The HTTP address, `host:port`.
    pub http: String,
    /// The RESP address, `host:port`.
    pub resp: String,
    /// The build and protocol the node announced when it linked with the answering node
    /// (the answering node's own for itself); absent without a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<crate::version::Version>,
    /// The node's region label (`--region`), `null` without one.
    #[serde(default)]
    pub region: Option<String>,
    /// As a shard's replica: `voter` or `learner`. Absent elsewhere (a shard's leader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// `GET /v1/cluster/shards`: the shard map as the answering node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardsDoc {
    /// The name of the node that answered.
    pub node: String,
    /// The version of the cluster's placement: it changes whenever a shard's replicas do, so
    /// a client that cached the map can tell it is stale. (A server from before epochs sends
    /// none, read as 0.)
    #[serde(default)]
    pub epoch: u64,
    /// How many shards the key space is cut into.
    pub shard_count: u32,
    /// Every shard, in shard order.
    pub shards: Vec<ShardDoc>,
}

impl ShardsDoc {
    /// The shard whose slot range holds `slot`.
    pub fn shard_of_slot(&self, slot: u16) -> Option<&ShardDoc> {
        self.shards.iter().find(|s| s.holds(slot))
    }
}

/// One shard in [`ShardsDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardDoc {
    /// The shard's number.
    pub shard: crate::ShardId,
    /// Its inclusive slot range, first and last.
    pub slots: [u16; 2],
    /// The leader, when the answering node knows it (it holds a replica).
    pub leader: Option<NodeAddrs>,
    /// The voters.
    pub replicas: Vec<NodeAddrs>,
    /// The answering node's role in the shard's group (`Leader`, `Follower`, ...), `None`
    /// when it holds no replica; then the numbers below are 0.
    pub local_role: Option<String>,
    /// The current term, as the answering node knows it.
    pub term: u64,
    /// The last log index applied on the answering node.
    pub applied_index: u64,
    /// The last log index the answering node knows committed.
    pub committed_index: u64,
}

impl ShardDoc {
    /// Whether `slot` is in this shard's range.
    pub fn holds(&self, slot: u16) -> bool {
        (self.slots[0]..=self.slots[1]).contains(&slot)
    }

    /// Whether the answering node holds a replica of this shard.
    pub fn is_local(&self) -> bool {
        self.local_role.is_some()
    }

    /// Whether the answering node leads this shard.
    pub fn is_led_here(&self) -> bool {
        self.local_role.as_deref() == Some("Leader")
    }
}

/// Whether a node can serve, in [`HealthDoc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Every shard has a leader and storage is sound (HTTP 200).
    Ok,
    /// Something is missing; the fields say what (HTTP 503).
    Unavailable,
}

/// `GET /v1/health`: whether the node can serve, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthDoc {
    /// `ok` or `unavailable`; the HTTP status says the same.
    pub status: HealthStatus,
    /// The name of the node that answered.
    pub node: String,
    /// Every shard held here, and the metadata group, has a known leader.
    pub all_shards_led: bool,
    /// Storage has not been poisoned by a failed sync.
    pub storage_ok: bool,
    /// Seconds since the node started.
    pub uptime_secs: u64,
}

/// `<data dir>/endpoints.json`, which a node writes once it listens: the socket addresses
/// it bound (port 0 becomes the port it got), what it tells others, and its PID, for the
/// scripts, supervisors and tests that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointsDoc {
    /// The node's name (its `--node-id`).
    pub node: String,
    /// The bound client HTTP address.
    pub http: String,
    /// The bound client RESP address.
    pub resp: String,
    /// The bound peer address.
    pub peer: String,
    /// The addresses other nodes and clients are told. (A server from before it sends
    /// none.)
    #[serde(default)]
    pub advertised: Option<AdvertisedDoc>,
    /// The server's process id.
    pub pid: u32,
    /// Whether the client ports speak TLS (`https://`, `rediss://`).
    #[serde(default)]
    pub tls: bool,
}

/// The addresses a node tells other nodes and clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvertisedDoc {
    /// Client HTTP address.
    pub http: String,
    /// Client RESP address.
    pub resp: String,
    /// Peer address.
    pub peer: String,
}

/// `POST /v1/backup/restore`'s answer: how many entries of the piece were written (an
/// entry already expired is skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreAnswer {
    /// Entries written.
    pub written: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(name: &str) -> NodeAddrs {
        NodeAddrs {
            name: name.into(),
            peer: format!("{name}:1"),
            http: format!("{name}:2"),
            resp: format!("{name}:3"),
            version: None,
            region: None,
            role: None,
        }
    }

    #[test]
    fn the_shard_map_reads_back_and_finds_slots() {
        let doc = ShardsDoc {
            node: "n1".into(),
            epoch: 3,
            shard_count: 2,
            shards: vec![
                ShardDoc {
                    shard: crate::ShardId(0),
                    slots: [0, 8191],
                    leader: Some(addrs("n1")),
                    replicas: vec![addrs("n1")],
                    local_role: Some("Leader".into()),
                    term: 2,
                    applied_index: 9,
                    committed_index: 9,
                },
                ShardDoc {
                    shard: crate::ShardId(1),
                    slots: [8192, 16383],
                    leader: None,
                    replicas: vec![addrs("n2")],
                    local_role: None,
                    term: 0,
                    applied_index: 0,
                    committed_index: 0,
                },
            ],
        };
        let text = serde_json::to_string(&doc).unwrap();
        assert!(text.contains(r#""slots":[0,8191]"#), "{text}");
        assert!(text.contains(r#""leader":null"#), "{text}");
        assert_eq!(serde_json::from_str::<ShardsDoc>(&text).unwrap(), doc);
        assert!(text.contains(r#""shard":1,"#), "the bare number: {text}");
        assert_eq!(doc.shard_of_slot(8191).unwrap().shard, crate::ShardId(0));
        assert_eq!(doc.shard_of_slot(8192).unwrap().shard, crate::ShardId(1));
        assert!(doc.shards[0].is_led_here() && !doc.shards[1].is_local());

        let without_epoch = text.replace(r#""epoch":3,"#, "");
        assert_eq!(
            serde_json::from_str::<ShardsDoc>(&without_epoch)
                .unwrap()
                .epoch,
            0
        );
    }

    #[test]
    fn health_status_is_lowercase() {
        let doc = HealthDoc {
            status: HealthStatus::Unavailable,
            node: "n1".into(),
            all_shards_led: false,
            storage_ok: true,
            uptime_secs: 5,
        };
        let text = serde_json::to_string(&doc).unwrap();
        assert!(
            text.starts_with(r#"{"status":"unavailable","node":"n1""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<HealthDoc>(&text).unwrap(), doc);
    }
}
