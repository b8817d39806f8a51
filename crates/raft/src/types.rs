use serde::{Deserialize, Serialize};
use std::fmt;
use trireme_types::{CommandResult, LogCommand};

/// How to reach a node: what every member of a group knows about the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerNode {
    /// The node's name (`n1`); its Raft id is derived from it.
    pub name: String,
    /// Peer (Raft and forwarding) address.
    pub peer_addr: String,
    /// Client HTTP address.
    pub http_addr: String,
    /// Client RESP address.
    pub resp_addr: String,
}

impl fmt::Display for PeerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.peer_addr)
    }
}

openraft::declare_raft_types!(
    /// Trireme's Raft types: log entries carry [`LogCommand`]s, applying one yields a
    /// [`CommandResult`]; node ids are the 64-bit hashes of node names.
    pub TypeConfig:
        D = LogCommand,
        R = CommandResult,
        NodeId = u64,
        Node = PeerNode,
);
