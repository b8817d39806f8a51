//! The peer transport: one TCP connection per pair of nodes, shared by every Raft group and by
//! forwarded client requests (docs/architecture.md, "peer traffic").
//!
//! Of each pair, the node with the lower id dials and keeps redialling while the other is
//! down; the higher one only accepts. Either side then sends requests over the link. The
//! dialer opens with a `Hello` naming the cluster and both node ids; a node of another
//! cluster, or one that reached the wrong node, is refused and logged. A frame that fails to
//! decode closes the link (the dialer reconnects); it never takes the node down.
//!
//! [`PeerTransport`] implements openraft-multi's [`GroupRouter`], so every group's
//! `RaftNetworkV2` is a thin adapter binding (target node, group id) to it.

mod link;
mod snapshot;
mod stream;
pub(crate) mod wire;

use stream::PeerStream;

use crate::freshness::Freshness;
use crate::{PeerNode, TypeConfig};
use bytes::BytesMut;
use futures::StreamExt;
use futures::future::BoxFuture;
use link::{CallError, Inbound, Link};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::{SnapshotOf, VoteOf};
use openraft::{AnyError, Raft, RaftNetworkFactory};
use openraft_multi::{GroupNetworkAdapter, GroupNetworkFactory, GroupRouter};
use std::collections::{HashMap, HashSet};
use std::io::Cursor;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use trireme_types::version::{Version, since::STAMPED_APPENDS};
use trireme_types::{GroupId, NodeId};

/// How long a dialer waits for a connection and for the answer to its `Hello`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Redial backoff bounds.
const REDIAL_MIN: Duration = Duration::from_millis(50);
const REDIAL_MAX: Duration = Duration::from_millis(1000);
/// How long a forwarded request waits for a link to a node that has none: a little over one
/// redial interval, so a node that is back is found, and one that is down costs no more.
const LINK_WAIT: Duration = Duration::from_millis(1500);

/// See [`crate::decode_peer_frame`].
pub(crate) fn decode_frame(body: &[u8]) -> Result<(), String> {
    wire::decode(body).map(drop).map_err(|e| e.to_string())
}

/// The Raft handle type of every group.
pub(crate) type GroupRaft = Raft<TypeConfig, crate::ShardStateMachine>;

/// Serves client requests forwarded by other nodes. The cluster layer implements it; the
/// transport only carries the bytes.
pub trait ForwardHandler: Send + Sync + 'static {
    /// Answers the encoded request `payload` from node `from` with an encoded response.
    fn handle(&self, from: NodeId, payload: Vec<u8>) -> BoxFuture<'static, Vec<u8>>;
}

/// Answers a node that asks to join the cluster (the cluster layer implements it): its
/// encoded answer, or why it is refused.
pub trait JoinHandler: Send + Sync + 'static {
    /// Answers the encoded join request `payload` from a peer that proved `identity` (with
    /// `[peer_tls]`, its certificate must name the node the request names).
    fn handle(
        &self,
        payload: Vec<u8>,
        identity: trireme_tls::PeerIdentity,
    ) -> BoxFuture<'static, Result<Vec<u8>, String>>;
}

/// The reason a node gives when it refuses a link from a removed node; the refused node
/// recognises it and stops (see [`PeerTransport::told_removed`]).
const REMOVED_REASON: &str = "was removed from the cluster";

/// Why a forwarded request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// No link to the node; the request was not sent.
    #[error("node {0:016x} is unreachable: {1}")]
    Unreachable(NodeId, String),
    /// The link broke after the request was sent; it may have been served.
    #[error("lost the link to node {0:016x}: {1}")]
    Lost(NodeId, String),
    /// No answer in time; the request may have been served.
    #[error("node {0:016x} did not answer within {1:?}")]
    Timeout(NodeId, Duration),
    /// The node received the request but could not serve it.
    #[error("node {0:016x} could not serve the request: {1}")]
    Failed(NodeId, String),
}

/// A snapshot being sent (see [`PeerTransport::snapshot_transfers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotTransfer {
    /// The group whose snapshot it is.
    pub group: GroupId,
    /// The node it is sent to.
    pub target: NodeId,
    /// Bytes the target has acknowledged.
    pub sent: u64,
    /// The snapshot's size.
    pub total: u64,
}

/// A group registered with the transport, so RPCs addressed to it reach its Raft.
struct GroupEntry {
    raft: GroupRaft,
    /// When this node last received AppendEntries for the group (heartbeats included).
    last_append: Arc<Mutex<Option<Instant>>>,
    /// The group's freshness stamps, sent as leader and received as follower.
    freshness: Arc<Freshness>,
}

/// Node ids are kept as the `u64` that `Hello` frames and openraft's targets carry; the
/// public methods take and give [`NodeId`].
struct Inner {
    me: u64,
    /// This node's `--node-id`, which its certificate names (see [`check_identity`]).
    name: String,
    cluster: String,
    groups: RwLock<HashMap<u32, GroupEntry>>,
    links: Mutex<HashMap<u64, Arc<Link>>>,
    addrs: Mutex<HashMap<u64, String>>,
    dialers: Mutex<HashSet<u64>>,
    /// Woken whenever a link comes up, for callers waiting to forward.
    link_up: Notify,
    /// Woken whenever a link goes down (or the transport stops), for the dialers.
    link_down: Notify,
    next_serial: AtomicU64,
    forward: OnceLock<Arc<dyn ForwardHandler>>,
    admin: OnceLock<Arc<dyn ForwardHandler>>,
    join: OnceLock<Arc<dyn JoinHandler>>,
    /// Says, for a group, why this node takes no more of its entries or snapshots right now
    /// (its disk is nearly full), or nothing.
    intake: OnceLock<IntakeGate>,
    /// Nodes removed from the cluster: their links are refused, they are not dialled.
    removed: RwLock<HashSet<u64>>,
    /// Set when a peer refused this node's link because this node was removed.
    told_removed: AtomicBool,
    /// Snapshot bytes sent to and received from peers, for `/metrics`.
    snapshot_bytes_sent: AtomicU64,
    snapshot_bytes_received: AtomicU64,
    /// Snapshots being received in chunks.
    uploads: Mutex<snapshot::Uploads>,
    /// Snapshots being sent, with their progress.
    outgoing: snapshot::Outgoing,
    stopped: AtomicBool,
    /// Mutual TLS on every link, when the cluster has `[peer_tls]`.
    tls: OnceLock<Arc<trireme_tls::PeerTls>>,
    /// What this node announces at each handshake.
    version: Version,
    /// What each linked peer announced at its last handshake.
    peer_versions: Mutex<HashMap<u64, Version>>,
    /// The cluster version as this node last read it from the metadata group: peers that
    /// announce an older protocol are refused.
    cluster_version: AtomicU32,
    /// Set when the node is about to stop: leadership handed to it is refused.
    refusing_leadership: AtomicBool,
}

/// The node's peer transport; cheap to clone.
#[derive(Clone)]
pub struct PeerTransport {
    inner: Arc<Inner>,
    /// Size of the chunks this node sends snapshots in.
    snapshot_chunk_bytes: usize,
    /// The pace of each snapshot transfer in bytes per second (0: as fast as it goes).
    snapshot_rate: u64,
}

/// Default size of a snapshot chunk: large enough that a chunk's round trip is cheap next to
/// its transfer, small enough that other groups' heartbeats never wait long behind one.
pub const DEFAULT_SNAPSHOT_CHUNK_BYTES: usize = 4 << 20;
/// Largest snapshot chunk a node may be configured to send: a chunk travels as one frame.
pub const MAX_SNAPSHOT_CHUNK_BYTES: usize = wire::MAX_FRAME / 2;

impl PeerTransport {
    /// A transport for node `name` of `cluster`. Nothing is dialled or served until
    /// [`PeerTransport::serve`] and [`PeerTransport::set_peer_addr`] are called.
    pub fn new(name: &str, cluster: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                me: NodeId::from_name(name).0,
                name: name.to_string(),
                cluster: cluster.into(),
                groups: RwLock::new(HashMap::new()),
                links: Mutex::new(HashMap::new()),
                addrs: Mutex::new(HashMap::new()),
                dialers: Mutex::new(HashSet::new()),
                link_up: Notify::new(),
                link_down: Notify::new(),
                next_serial: AtomicU64::new(1),
                forward: OnceLock::new(),
                admin: OnceLock::new(),
                join: OnceLock::new(),
                intake: OnceLock::new(),
                removed: RwLock::new(HashSet::new()),
                told_removed: AtomicBool::new(false),
                snapshot_bytes_sent: AtomicU64::new(0),
                snapshot_bytes_received: AtomicU64::new(0),
                uploads: Mutex::default(),
                outgoing: snapshot::Outgoing::default(),
                stopped: AtomicBool::new(false),
                tls: OnceLock::new(),
                version: announced_version(),
                peer_versions: Mutex::default(),
                cluster_version: AtomicU32::new(0),
                refusing_leadership: AtomicBool::new(false),
            }),
            snapshot_chunk_bytes: DEFAULT_SNAPSHOT_CHUNK_BYTES,
            snapshot_rate: 0,
        }
    }

    /// Installs `gate`, asked before each append that carries entries, each snapshot chunk
    /// and each leadership handed over: an `Err` refuses it with that reason. The leader then
    /// tries again later, as after a lost message, and the group goes on with its other
    /// replicas; heartbeats and votes still pass, so the refusing replica neither stands for
    /// election nor is replaced. What a replica whose disk is nearly full does instead of
    /// failing on it.
    pub fn with_intake_gate(self, gate: IntakeGate) -> Self {
        let _ = self.inner.intake.set(gate);
        self
    }

    /// Makes every link mutual TLS with `tls`: links are refused both ways with a node whose
    /// certificate the cluster CA did not sign. Set before [`PeerTransport::serve`].
    pub fn with_tls(self, tls: Option<Arc<trireme_tls::PeerTls>>) -> Self {
        if let Some(tls) = tls {
            let _ = self.inner.tls.set(tls);
        }
        self
    }

    /// Paces every snapshot sent to `bytes_per_sec` (0: unpaced). A replica move sends a
    /// whole shard; unpaced on a busy machine it competes with client requests for the disk,
    /// the CPU and the link every group shares.
    pub fn with_snapshot_rate(mut self, bytes_per_sec: u64) -> Self {
        self.snapshot_rate = bytes_per_sec;
        self
    }

    /// Sends snapshots in chunks of `bytes` instead of the default.
    pub fn with_snapshot_chunk_bytes(mut self, bytes: usize) -> Self {
        self.snapshot_chunk_bytes = bytes;
        self
    }

    /// This node's id.
    pub fn me(&self) -> NodeId {
        NodeId(self.inner.me)
    }

    /// Installs the handler for forwarded client requests (once).
    pub fn set_forward_handler(&self, handler: Arc<dyn ForwardHandler>) {
        let _ = self.inner.forward.set(handler);
    }

    /// Installs the handler for membership operations asked by the metadata leader (once).
    pub fn set_admin_handler(&self, handler: Arc<dyn ForwardHandler>) {
        let _ = self.inner.admin.set(handler);
    }

    /// Installs the handler for nodes asking to join (once).
    pub fn set_join_handler(&self, handler: Arc<dyn JoinHandler>) {
        let _ = self.inner.join.set(handler);
    }

    /// Marks nodes as removed from the cluster: new links from them are refused with a reason
    /// they recognise, and instead of being dialled they are told. A link that is up stays up,
    /// so that a removed node still receives the metadata entry that removes it.
    pub fn set_removed(&self, ids: impl IntoIterator<Item = NodeId>) {
        *write_lock(&self.inner.removed) = ids.into_iter().map(|id| id.0).collect();
    }

    /// Refuses leadership handed over by other nodes from now on (this node is stopping).
    pub fn refuse_leadership(&self) {
        self.inner
            .refusing_leadership
            .store(true, Ordering::Release);
    }

    /// What this node announces: its build and protocol.
    pub fn own_version(&self) -> Version {
        self.inner.version.clone()
    }

    /// Records the cluster version read from the metadata group: from then on, links with
    /// nodes that announce an older protocol are refused both ways. It only rises.
    pub fn set_cluster_version(&self, version: u32) {
        self.inner
            .cluster_version
            .fetch_max(version, Ordering::AcqRel);
    }

    /// Whether a peer refused this node's link because this node was removed from the
    /// cluster.
    pub fn told_removed(&self) -> bool {
        self.inner.told_removed.load(Ordering::Acquire)
    }

    /// Snapshot bytes sent to and received from peers since start.
    pub fn snapshot_bytes(&self) -> (u64, u64) {
        (
            self.inner.snapshot_bytes_sent.load(Ordering::Relaxed),
            self.inner.snapshot_bytes_received.load(Ordering::Relaxed),
        )
    }

    /// The snapshots this node is sending now, each with the bytes its target has
    /// acknowledged: a replica move's progress in bytes.
    pub fn snapshot_transfers(&self) -> Vec<SnapshotTransfer> {
        self.inner
            .outgoing
            .list()
            .into_iter()
            .map(|(group, target, sent, total)| SnapshotTransfer {
                group: GroupId(group),
                target: NodeId(target),
                sent,
                total,
            })
            .collect()
    }

    /// Asks the member at `addr` to let this node join `cluster`, on a connection of its own
    /// (this node has no id the member knows yet). Returns the member's encoded answer, or why
    /// it refused or could not be asked.
    pub async fn ask_to_join(
        addr: &str,
        name: &str,
        cluster: &str,
        payload: Vec<u8>,
        timeout: Duration,
        tls: Option<&trireme_tls::PeerTls>,
    ) -> Result<Vec<u8>, String> {
        let attempt = async {
            let mut stream = stream::dial(addr, tls).await?;
            // With this build's version after it, so a cluster past it can refuse at once.
            let mut buf = BytesMut::new();
            let join = wire::Frame::Join {
                cluster: cluster.to_string(),
                payload,
            };
            wire::encode_handshake(&join, &announced_version(), name, &mut buf)
                .map_err(|e| e.to_string())?;
            stream.write_all(&buf).await.map_err(|e| e.to_string())?;
            stream.flush().await.map_err(|e| e.to_string())?;
            match read_frame(&mut stream, 1 << 20, timeout).await? {
                (wire::Frame::Joined { payload }, _) => Ok(payload),
                (wire::Frame::Refused { reason }, _) => Err(format!("{addr} refused: {reason}")),
                (other, _) => Err(format!("unexpected answer from {addr}: {other:?}")),
            }
        };
        tokio::time::timeout(timeout, attempt)
            .await
            .map_err(|_| format!("{addr} did not answer within {timeout:?}"))?
    }

    /// Accepts links from peers on `listener` until the transport stops.
    pub fn serve(&self, listener: TcpListener) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let (stream, from) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "peer accept failed");
                        tokio::time::sleep(REDIAL_MIN).await;
                        continue;
                    }
                };
                if inner.stopped.load(Ordering::Acquire) {
                    return;
                }
                let inner = inner.clone();
                tokio::spawn(async move {
                    let stream = match stream::accepted(stream, inner.tls.get().map(|t| &**t)).await
                    {
                        Ok(stream) => stream,
                        Err(reason) => {
                            tracing::warn!(remote = %from, %reason, "refused a peer link at its TLS handshake");
                            return;
                        }
                    };
                    if let Err(reason) = accept(inner, stream).await {
                        tracing::warn!(remote = %from, %reason, "refused a peer link");
                    }
                });
            }
        });
    }

    /// Records where node `id` listens for peers. Of each pair the lower id dials, so this
    /// starts (once) a task that keeps a link to `id` up when `id` is higher than this node.
    pub fn set_peer_addr(&self, id: NodeId, addr: &str) {
        let id = id.0;
        if id == self.inner.me || addr.is_empty() {
            return;
        }
        let changed = {
            let mut addrs = lock(&self.inner.addrs);
            addrs.insert(id, addr.to_string()).as_deref() != Some(addr)
        };
        if changed && id > self.inner.me && lock(&self.inner.dialers).insert(id) {
            tokio::spawn(dial_loop(self.inner.clone(), id));
        }
    }

    /// Whether a link to `id` is up.
    pub fn is_linked(&self, id: NodeId) -> bool {
        self.inner.link(id.0).is_some()
    }

    /// What node `id` announced at the handshake of its live link (this node's own version
    /// for itself); `None` without a link.
    pub fn peer_version(&self, id: NodeId) -> Option<Version> {
        if id.0 == self.inner.me {
            return Some(self.inner.version.clone());
        }
        self.inner.link(id.0)?;
        lock(&self.inner.peer_versions).get(&id.0).cloned()
    }

    /// Registers a group's Raft so RPCs for `group` reach it; returns the cell the transport
    /// stamps on every AppendEntries received for the group (how fresh a follower is).
    pub(crate) fn register(
        &self,
        group: u32,
        raft: GroupRaft,
        freshness: Arc<Freshness>,
    ) -> Arc<Mutex<Option<Instant>>> {
        let last_append = Arc::new(Mutex::new(None));
        write_lock(&self.inner.groups).insert(
            group,
            GroupEntry {
                raft,
                last_append: last_append.clone(),
                freshness,
            },
        );
        last_append
    }

    /// Removes a group (it stopped or left this node).
    pub(crate) fn unregister(&self, group: u32) {
        write_lock(&self.inner.groups).remove(&group);
    }

    /// Sends a client request to node `to` and returns its answer. Waits up to `timeout`,
    /// including for the link to come up.
    pub async fn forward(
        &self,
        to: NodeId,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, PeerError> {
        self.call_handler(to, wire::Request::Forward { payload }, timeout, false)
            .await
    }

    /// Like [`PeerTransport::forward`], for a request that only waits: when the caller
    /// stops waiting (its future is dropped, or the time is up), `to` is told to stop
    /// serving it. Never for a write, whose serving must not be cut short.
    pub async fn forward_cancellable(
        &self,
        to: NodeId,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, PeerError> {
        self.call_handler(to, wire::Request::Forward { payload }, timeout, true)
            .await
    }

    /// Sends a membership operation to node `to` (see [`PeerTransport::set_admin_handler`]);
    /// like [`PeerTransport::forward`] otherwise.
    pub async fn admin(
        &self,
        to: NodeId,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, PeerError> {
        self.call_handler(to, wire::Request::Admin { payload }, timeout, false)
            .await
    }

    /// A request for one of the cluster layer's handlers, answered with bytes.
    async fn call_handler(
        &self,
        to: NodeId,
        request: wire::Request,
        timeout: Duration,
        cancellable: bool,
    ) -> Result<Vec<u8>, PeerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // A node without a link now is most likely down: wait for a dial in progress, but
        // not for the whole request, which another node may serve meanwhile.
        let link_deadline = deadline.min(tokio::time::Instant::now() + LINK_WAIT);
        let link = loop {
            let notified = self.inner.link_up.notified();
            if let Some(link) = self.inner.link(to.0) {
                break link;
            }
            if tokio::time::timeout_at(link_deadline, notified)
                .await
                .is_err()
            {
                return Err(PeerError::Unreachable(to, "no link".into()));
            }
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let answer = if cancellable {
            link.call_cancellable(request, left).await
        } else {
            link.call(request, left).await
        };
        match answer {
            Ok(wire::Response::Forward(answer)) => Ok(answer),
            // Only a node that has not started serving answers with `Failed`: the request was
            // not served, and the caller may send it elsewhere.
            Ok(wire::Response::Failed(reason)) => Err(PeerError::Failed(to, reason)),
            // Any other answer is a peer speaking another protocol: whether it served the
            // request is unknown, so a write must not be retried as if unsent.
            Ok(other) => Err(PeerError::Lost(
                to,
                format!("unexpected answer to a forward: {other:?}"),
            )),
            Err(CallError::Unreachable(reason)) => Err(PeerError::Unreachable(to, reason)),
            Err(CallError::Lost(reason)) => Err(PeerError::Lost(to, reason)),
            Err(CallError::Timeout(t)) => Err(PeerError::Timeout(to, t)),
        }
    }

    /// Stops accepting and dialling and closes every link.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::Release);
        let links: Vec<Arc<Link>> = lock(&self.inner.links).drain().map(|(_, l)| l).collect();
        for link in links {
            link.close();
        }
        self.inner.link_down.notify_waiters();
    }

    /// A Raft RPC: `request` to `target` within the RPC's hard time limit, answered by `T`.
    async fn rpc<T: wire::Answer>(
        &self,
        target: u64,
        request: wire::Request,
        option: &RPCOption,
    ) -> Result<T, RPCError<TypeConfig>> {
        T::from_response(self.call(target, request, option.hard_ttl()).await?).map_err(unexpected)
    }

    async fn call(
        &self,
        target: u64,
        request: wire::Request,
        timeout: Duration,
    ) -> Result<wire::Response, RPCError<TypeConfig>> {
        let Some(link) = self.inner.link(target) else {
            return Err(unreachable(format!("no link to node {target:016x}")));
        };
        match link.call(request, timeout).await {
            Ok(wire::Response::Failed(reason)) => Err(unreachable(reason)),
            Ok(response) => Ok(response),
            Err(CallError::Unreachable(reason) | CallError::Lost(reason)) => {
                Err(unreachable(reason))
            }
            Err(CallError::Timeout(t)) => Err(RPCError::Network(NetworkError::new(
                &AnyError::error(format!("no answer from node {target:016x} within {t:?}")),
            ))),
        }
    }
}

fn unreachable(reason: String) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&AnyError::error(reason)))
}

fn unexpected(response: wire::Response) -> RPCError<TypeConfig> {
    unexpected_text(format!("unexpected answer {response:?}"))
}

fn unexpected_text(text: String) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&AnyError::error(text)))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every map here stays consistent even if a holder panicked mid-way.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// See [`PeerTransport::with_intake_gate`]: given a group id and the bytes about to be
/// written beyond what the reserve covers (a snapshot's), `Err(reason)` to refuse.
pub type IntakeGate = Arc<dyn Fn(u32, u64) -> Result<(), String> + Send + Sync>;

impl Inner {
    fn intake_allows(&self, group: u32, incoming: u64) -> Result<(), String> {
        match self.intake.get() {
            Some(gate) => gate(group, incoming),
            None => Ok(()),
        }
    }

    fn link(&self, peer: u64) -> Option<Arc<Link>> {
        lock(&self.links)
            .get(&peer)
            .filter(|l| !l.is_closed())
            .cloned()
    }

    fn group(&self, group: u32) -> Option<(GroupRaft, Arc<Mutex<Option<Instant>>>)> {
        self.groups
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&group)
            .map(|g| (g.raft.clone(), g.last_append.clone()))
    }

    fn freshness(&self, group: u32) -> Option<Arc<Freshness>> {
        self.groups
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&group)
            .map(|g| g.freshness.clone())
    }

    /// The stamp a leader puts on an AppendEntries for `group` to `peer` (see
    /// `freshness.rs`): only for a peer that reads [`wire::Request::AppendStamped`], and only
    /// when this leader can back it.
    fn stamp_for(
        &self,
        peer: u64,
        group: u32,
        rpc: &AppendEntriesRequest<TypeConfig>,
    ) -> Option<u64> {
        let commit = rpc.leader_commit.as_ref()?;
        let speaks = lock(&self.peer_versions)
            .get(&peer)
            .is_some_and(|v| v.protocol >= STAMPED_APPENDS);
        if !speaks {
            return None;
        }
        self.freshness(group)?
            .stamp(commit.index, commit.leader_id.term)
    }

    /// Whether a peer that announced `peer` may link with this node (see [`Version::admits`]).
    fn admits(&self, peer: &Version) -> Result<(), String> {
        self.version
            .admits(peer, self.cluster_version.load(Ordering::Acquire))
    }

    fn install(self: &Arc<Self>, peer: u64, stream: PeerStream, version: Version) -> Arc<Link> {
        tracing::info!(peer = %format_args!("{peer:016x}"), %version, "peer link up");
        lock(&self.peer_versions).insert(peer, version);
        let serial = self.next_serial.fetch_add(1, Ordering::Relaxed);
        let link = Link::start(stream, peer, serial, self.clone());
        if let Some(old) = lock(&self.links).insert(peer, link.clone()) {
            old.close();
        }
        self.link_up.notify_waiters();
        link
    }
    /// AppendEntries for `group`, with the leader's freshness stamp if it sent one.
    async fn serve_append(
        &self,
        group: u32,
        rpc: AppendEntriesRequest<TypeConfig>,
        stamped_at: Option<u64>,
    ) -> wire::Response {
        use wire::Response;
        let Some((raft, last_append)) = self.group(group) else {
            return Response::Failed(format!("group {group} is not open on this node"));
        };
        *lock(&last_append) = Some(Instant::now());
        if let (Some(leader_ms), Some(commit)) = (stamped_at, rpc.leader_commit.as_ref())
            && let Some(freshness) = self.freshness(group)
        {
            freshness.received(leader_ms, commit.index);
        }
        if !rpc.entries.is_empty()
            && let Err(reason) = self.intake_allows(group, 0)
        {
            return Response::Failed(reason);
        }
        match raft.append_entries(rpc).await {
            Ok(r) => Response::Append(r),
            Err(e) => Response::Failed(e.to_string()),
        }
    }
}

impl Inbound for Inner {
    async fn serve(self: Arc<Self>, peer: u64, request: wire::Request) -> wire::Response {
        use wire::{Request, Response};
        let no_group =
            |group: u32| Response::Failed(format!("group {group} is not open on this node"));
        match request {
            Request::Append { group, rpc } => self.serve_append(group, rpc, None).await,
            Request::AppendStamped {
                group,
                rpc,
                leader_ms,
            } => self.serve_append(group, rpc, Some(leader_ms)).await,
            Request::Vote { group, rpc } => match self.group(group) {
                Some((raft, _)) => match raft.vote(rpc).await {
                    Ok(r) => Response::Vote(r),
                    Err(e) => Response::Failed(e.to_string()),
                },
                None => no_group(group),
            },
            Request::PreVote { group, rpc } => match self.group(group) {
                Some((raft, _)) => match raft.pre_vote(rpc).await {
                    Ok(r) => Response::Vote(r),
                    Err(e) => Response::Failed(e.to_string()),
                },
                None => no_group(group),
            },
            Request::SnapshotChunk {
                group,
                vote,
                meta,
                offset,
                total,
                data,
            } => {
                let Some((raft, last_append)) = self.group(group) else {
                    return no_group(group);
                };
                // A leader sending a snapshot is as alive as one sending entries.
                *lock(&last_append) = Some(Instant::now());
                // Installing it writes the rows and then the snapshot file: room for twice
                // its size is asked before any chunk is kept.
                if let Err(reason) = self.intake_allows(group, total.saturating_mul(2)) {
                    lock(&self.uploads).drop_upload(peer, group);
                    return Response::Failed(reason);
                }
                self.snapshot_bytes_received
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                let added = lock(&self.uploads).add(peer, group, &meta, offset, total, data);
                let received = match added {
                    Ok(Some(received)) => received,
                    Ok(None) => return Response::ChunkReceived,
                    Err(reason) => return Response::Failed(reason),
                };
                tracing::info!(
                    group,
                    up_to = ?meta.last_log_id,
                    bytes = received.data.len(),
                    chunks = received.chunks,
                    "snapshot received; installing"
                );
                let snapshot = SnapshotOf::<TypeConfig, Cursor<Vec<u8>>> {
                    meta,
                    snapshot: Cursor::new(received.data),
                };
                match raft.install_full_snapshot(vote, snapshot).await {
                    Ok(r) => Response::Snapshot(r),
                    Err(e) => Response::Failed(e.to_string()),
                }
            }
            // A node that takes no entries must not lead: it would refuse every write.
            Request::TransferLeader { group, rpc } => match self.group(group) {
                Some(_) if let Err(reason) = self.intake_allows(group, 0) => {
                    Response::Failed(reason)
                }
                Some(_) if self.refusing_leadership.load(Ordering::Acquire) => {
                    Response::Failed("this node is stopping".into())
                }
                Some((raft, _)) => match raft.handle_transfer_leader(rpc).await {
                    Ok(r) => Response::TransferLeader(r),
                    Err(e) => Response::Failed(e.to_string()),
                },
                None => no_group(group),
            },
            Request::Forward { payload } => match self.forward.get() {
                Some(handler) => Response::Forward(handler.handle(NodeId(peer), payload).await),
                None => Response::Failed("this node is still starting".into()),
            },
            Request::Admin { payload } => match self.admin.get() {
                Some(handler) => Response::Forward(handler.handle(NodeId(peer), payload).await),
                None => Response::Failed("this node is still starting".into()),
            },
        }
    }

    fn closed(&self, peer: u64, serial: u64) {
        let mut links = lock(&self.links);
        if links.get(&peer).is_some_and(|l| l.serial == serial) {
            links.remove(&peer);
            lock(&self.uploads).forget_peer(peer);
            tracing::info!(peer = %format_args!("{peer:016x}"), "peer link down");
        }
        drop(links);
        self.link_down.notify_waiters();
    }
}

/// This build's version, as it announces it; a test may make it announce another protocol,
/// which is said loudly.
fn announced_version() -> Version {
    let version = Version::current();
    if version.protocol != trireme_types::version::PROTOCOL {
        tracing::warn!(
            announced = version.protocol,
            speaks = trireme_types::version::PROTOCOL,
            "announcing another protocol than this build speaks: {} is set, which is for tests only",
            trireme_types::version::ANNOUNCE_PROTOCOL_ENV
        );
    }
    version
}

/// Reads one handshake frame from a fresh connection, with what its sender announced.
async fn read_handshake(stream: &mut PeerStream) -> Result<(wire::Frame, wire::Announced), String> {
    read_frame(stream, 64 * 1024, HANDSHAKE_TIMEOUT).await
}

/// Reads one frame of at most `max` bytes, before anything else is sent on the connection,
/// and what its sender announced after it, if anything (see [`wire::decode_handshake`]).
async fn read_frame(
    stream: &mut PeerStream,
    max: usize,
    timeout: Duration,
) -> Result<(wire::Frame, wire::Announced), String> {
    let mut frames = FramedRead::new(
        stream,
        LengthDelimitedCodec::builder()
            .max_frame_length(max)
            .new_codec(),
    );
    let body = tokio::time::timeout(timeout, frames.next())
        .await
        .map_err(|_| "no handshake in time".to_string())?
        .ok_or_else(|| "closed during the handshake".to_string())?
        .map_err(|e| format!("handshake: {e}"))?;
    if !frames.read_buffer().is_empty() {
        // Nothing may follow the handshake before it is answered.
        return Err("data after the handshake frame".into());
    }
    wire::decode_handshake(&body).map_err(|e| format!("undecodable handshake: {e}"))
}

/// Sends a handshake frame with this node's version and name after it.
async fn send_handshake(
    stream: &mut PeerStream,
    frame: &wire::Frame,
    inner: &Inner,
) -> Result<(), String> {
    let mut buf = BytesMut::new();
    wire::encode_handshake(frame, &inner.version, &inner.name, &mut buf)
        .map_err(|e| e.to_string())?;
    stream.write_all(&buf).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())
}

async fn send_frame(stream: &mut PeerStream, frame: &wire::Frame) -> Result<(), String> {
    let mut buf = BytesMut::new();
    wire::encode(frame, &mut buf).map_err(|e| e.to_string())?;
    stream.write_all(&buf).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())
}

/// The accepting side of a handshake.
async fn accept(inner: Arc<Inner>, mut stream: PeerStream) -> Result<(), String> {
    let (hello, announced) = read_handshake(&mut stream).await?;
    if let wire::Frame::Join { cluster, payload } = hello {
        // Builds before protocol 2 announce nothing with a join (they count as protocol 0
        // here, though they may speak 1): only the cluster version can refuse them.
        let cluster_version = inner.cluster_version.load(Ordering::Acquire);
        let checked = if announced.name.is_some() {
            inner.admits(&announced.version)
        } else if cluster_version >= 2 {
            Err(format!(
                "it runs a build from before protocol 2, older than the cluster version {cluster_version}; start it with a build of protocol {cluster_version} or later"
            ))
        } else {
            Ok(())
        };
        if let Err(reason) = checked {
            return refuse(stream, format!("a node asking to join: {reason}")).await;
        }
        return answer_join(&inner, stream, cluster, payload).await;
    }
    if let wire::Frame::Refused { reason } = &hello {
        if reason.ends_with(REMOVED_REASON) && reason.contains(&format!("{:016x}", inner.me)) {
            // With `[peer_tls]`, only a node this one knows, proving it is that node, can
            // tell it to stop.
            let sender = announced.name.as_deref().map(|n| NodeId::from_name(n).0);
            let known = sender.is_some_and(|id| lock(&inner.addrs).contains_key(&id));
            let proven =
                sender.is_some_and(|id| check_identity(&inner, &stream, id, &announced).is_ok());
            if inner.tls.get().is_some() && !(known && proven) {
                return Err(format!(
                    "ignored a removal notice from a peer that did not prove it is a member ({:?})",
                    announced.name
                ));
            }
            tracing::warn!(%reason, "a peer says this node was removed from the cluster");
            inner.told_removed.store(true, Ordering::Release);
        }
        return Ok(());
    }
    let wire::Frame::Hello { cluster, from, to } = hello else {
        return refuse(stream, format!("expected a hello, got {hello:?}")).await;
    };
    if cluster != inner.cluster {
        return refuse(
            stream,
            format!(
                "node {from:016x} belongs to cluster {cluster:?}, this node to {:?}",
                inner.cluster
            ),
        )
        .await;
    }
    if inner
        .removed
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&from)
    {
        return refuse(stream, format!("node {from:016x} {REMOVED_REASON}")).await;
    }
    if to != inner.me {
        return refuse(
            stream,
            format!(
                "node {from:016x} meant to reach node {to:016x}, this is {:016x}",
                inner.me
            ),
        )
        .await;
    }
    if from >= inner.me {
        return refuse(
            stream,
            format!(
                "node {from:016x} must wait for this node ({:016x}) to dial it",
                inner.me
            ),
        )
        .await;
    }
    if let Err(reason) = inner.admits(&announced.version) {
        return refuse(stream, format!("node {from:016x}: {reason}")).await;
    }
    if let Err(reason) = check_identity(&inner, &stream, from, &announced) {
        return refuse(stream, format!("node {from:016x}: {reason}")).await;
    }
    send_handshake(&mut stream, &wire::Frame::Welcome, &inner).await?;
    inner.install(from, stream, announced.version);
    Ok(())
}

/// With `[peer_tls]`, whether the other end of `stream` is node `id`: the name it announced
/// must be the one `id` was derived from, and its certificate must name that node (see
/// [`trireme_tls::node_dns_name`]). A certificate the cluster CA signed for another node, or
/// for addresses only, does not let its holder speak as this one.
fn check_identity(
    inner: &Inner,
    stream: &PeerStream,
    id: u64,
    announced: &wire::Announced,
) -> Result<(), String> {
    if inner.tls.get().is_none() {
        return Ok(());
    }
    let Some(name) = &announced.name else {
        return Err("it announced no node name for its certificate to match (a build from before protocol 1)".into());
    };
    trireme_tls::check_node_name(name)?;
    if NodeId::from_name(name).0 != id {
        return Err(format!(
            "it calls itself {name:?}, which is node {:016x}",
            NodeId::from_name(name).0
        ));
    }
    stream.peer_identity().check_is_node(name)
}

/// Answers a node asking to join, through the cluster layer's handler.
async fn answer_join(
    inner: &Arc<Inner>,
    mut stream: PeerStream,
    cluster: String,
    payload: Vec<u8>,
) -> Result<(), String> {
    if cluster != inner.cluster {
        return refuse(
            stream,
            format!(
                "this node belongs to cluster {:?}, not {cluster:?}",
                inner.cluster
            ),
        )
        .await;
    }
    let Some(handler) = inner.join.get().cloned() else {
        let _ = refuse(stream, "this node is still starting".into()).await;
        return Ok(());
    };
    match handler.handle(payload, stream.peer_identity()).await {
        Ok(payload) => send_frame(&mut stream, &wire::Frame::Joined { payload }).await,
        Err(reason) => {
            tracing::info!(%reason, "refused a join request");
            let _ = refuse(stream, reason).await;
            Ok(())
        }
    }
}

/// Tells the dialer why its link is refused, then drops the connection.
async fn refuse(mut stream: PeerStream, reason: String) -> Result<(), String> {
    let _ = send_frame(
        &mut stream,
        &wire::Frame::Refused {
            reason: reason.clone(),
        },
    )
    .await;
    Err(reason)
}

/// Keeps a link to `peer` up while the transport runs: dial, handshake, wait for the link to
/// close, redial with backoff.
async fn dial_loop(inner: Arc<Inner>, peer: u64) {
    let mut backoff = REDIAL_MIN;
    loop {
        // Registered before the check, so a link that closes right after it still wakes us.
        let down = inner.link_down.notified();
        tokio::pin!(down);
        down.as_mut().enable();
        if inner.stopped.load(Ordering::Acquire) {
            return;
        }
        let removed = inner
            .removed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&peer);
        if removed && inner.link(peer).is_none() {
            // A removed node that is still running learns it here, if it missed the map
            // entry that removed it: it stops instead of waiting for peers that never call.
            // Often enough that a removed node restarted on its old data directory stops
            // within a few seconds (it waits for its groups until it hears).
            tell_removed(&inner, peer).await;
            tokio::time::sleep(REDIAL_MAX * 2).await;
            continue;
        }
        if inner.link(peer).is_none() {
            match dial(&inner, peer).await {
                Ok(()) => backoff = REDIAL_MIN,
                Err(reason) => {
                    tracing::debug!(peer = %format_args!("{peer:016x}"), %reason, "dial failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(REDIAL_MAX);
                    continue;
                }
            }
        }
        // Linked: sleep until some link goes down (the peer went away, or a frame was bad),
        // and look again every second in case a link was closed from its writer side.
        let _ = tokio::time::timeout(REDIAL_MAX, down).await;
    }
}

/// Tells `peer`, on a connection of its own, that it was removed from the cluster.
async fn tell_removed(inner: &Arc<Inner>, peer: u64) {
    let Some(addr) = lock(&inner.addrs).get(&peer).cloned() else {
        return;
    };
    let tls = inner.tls.get().map(|t| &**t);
    let Ok(Ok(mut stream)) =
        tokio::time::timeout(HANDSHAKE_TIMEOUT, stream::dial(&addr, tls)).await
    else {
        return;
    };
    let reason = format!("node {peer:016x} {REMOVED_REASON}");
    let _ = send_handshake(&mut stream, &wire::Frame::Refused { reason }, inner).await;
}

async fn dial(inner: &Arc<Inner>, peer: u64) -> Result<(), String> {
    let Some(addr) = lock(&inner.addrs).get(&peer).cloned() else {
        return Err("address unknown".into());
    };
    let tls = inner.tls.get().map(|t| &**t);
    let mut stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream::dial(&addr, tls))
        .await
        .map_err(|_| format!("connect to {addr} timed out"))??;
    send_handshake(
        &mut stream,
        &wire::Frame::Hello {
            cluster: inner.cluster.clone(),
            from: inner.me,
            to: peer,
        },
        inner,
    )
    .await?;
    match read_handshake(&mut stream).await? {
        (wire::Frame::Welcome, announced) => {
            // A build from before versions admits anyone: the check is this side's to make.
            let checked = inner
                .admits(&announced.version)
                .and_then(|()| check_identity(inner, &stream, peer, &announced));
            if let Err(reason) = checked {
                tracing::warn!(peer = %format_args!("{peer:016x}"), %addr, %reason, "refused the link a peer welcomed");
                return Err(reason);
            }
            inner.install(peer, stream, announced.version);
            Ok(())
        }
        (wire::Frame::Refused { reason }, _) => {
            if reason.ends_with(REMOVED_REASON) && reason.contains(&format!("{:016x}", inner.me)) {
                inner.told_removed.store(true, Ordering::Release);
            }
            tracing::warn!(peer = %format_args!("{peer:016x}"), %addr, %reason, "peer refused the link");
            Err(reason)
        }
        (other, _) => Err(format!("unexpected handshake answer {other:?}")),
    }
}

impl GroupRouter<TypeConfig, u32> for PeerTransport {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &self,
        target: u64,
        group: u32,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let request = match self.inner.stamp_for(target, group, &rpc) {
            Some(leader_ms) => wire::Request::AppendStamped {
                group,
                rpc,
                leader_ms,
            },
            None => wire::Request::Append { group, rpc },
        };
        self.rpc(target, request, &option).await
    }

    async fn vote(
        &self,
        target: u64,
        group: u32,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.rpc(target, wire::Request::Vote { group, rpc }, &option)
            .await
    }

    async fn pre_vote(
        &self,
        target: u64,
        group: u32,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.rpc(target, wire::Request::PreVote { group, rpc }, &option)
            .await
    }

    async fn transfer_leader(
        &self,
        target: u64,
        group: u32,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.rpc(
            target,
            wire::Request::TransferLeader { group, rpc },
            &option,
        )
        .await
    }

    async fn full_snapshot(
        &self,
        target: u64,
        group: u32,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let data = snapshot.snapshot.into_inner();
        let total = data.len() as u64;
        let started = Instant::now();
        let transfer = self.inner.outgoing.start(group, target, total);
        let send_all = async {
            for (offset, chunk) in snapshot::chunks(&data, self.snapshot_chunk_bytes) {
                if self.snapshot_rate > 0 {
                    // Not ahead of the pace: the bytes sent so far may have taken this long.
                    let due = Duration::from_secs_f64(offset as f64 / self.snapshot_rate as f64);
                    if let Some(early) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(early).await;
                    }
                }
                let last = offset + chunk.len() as u64 == total;
                let timeout = if last {
                    snapshot::install_timeout(option.hard_ttl(), total)
                } else {
                    option.hard_ttl()
                };
                let request = wire::Request::SnapshotChunk {
                    group,
                    vote,
                    meta: snapshot.meta.clone(),
                    offset,
                    total,
                    data: chunk.to_vec(),
                };
                // Every chunk but the last is acknowledged; the last is answered by the install.
                match (last, self.call(target, request, timeout).await?) {
                    (false, wire::Response::ChunkReceived) => {
                        self.inner
                            .snapshot_bytes_sent
                            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        transfer.acknowledged(offset + chunk.len() as u64);
                    }
                    (true, wire::Response::Snapshot(r)) => {
                        self.inner
                            .snapshot_bytes_sent
                            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        return Ok(r);
                    }
                    (_, other) => return Err(unexpected(other)),
                }
            }
            Err(unexpected_text(format!(
                "snapshot up to {:?} of {total} bytes yielded no last chunk",
                snapshot.meta.last_log_id
            )))
        };
        let answer = tokio::select! {
            answer = send_all => answer,
            closed = cancel => return Err(StreamingError::Closed(closed)),
        };
        match answer {
            Ok(r) => Ok(r),
            Err(RPCError::Unreachable(e)) => Err(StreamingError::Unreachable(e)),
            Err(e) => Err(StreamingError::Network(NetworkError::new(
                &AnyError::error(e.to_string()),
            ))),
        }
    }
}

/// Each group's network: the shared transport bound to the group id. Learns peer addresses
/// from the group's membership as openraft opens a client per target.
impl RaftNetworkFactory<TypeConfig> for GroupNetworkFactory<PeerTransport, u32> {
    type Network = GroupNetworkAdapter<TypeConfig, u32, PeerTransport>;

    async fn new_client(&mut self, target: u64, node: &PeerNode) -> Self::Network {
        self.factory.set_peer_addr(NodeId(target), &node.peer_addr);
        GroupNetworkAdapter::new(self.factory.clone(), target, self.group_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::impls::Vote;
    use tokio::sync::{mpsc, oneshot};
    use tokio::task::JoinHandle;

    /// A chunk a [`Receiver`] got, with the means to answer it.
    type Chunk = (u64, oneshot::Sender<wire::Response>);

    /// A peer that hands every snapshot chunk it receives to the test, which answers it.
    struct Receiver {
        chunks: mpsc::UnboundedSender<Chunk>,
    }

    impl Inbound for Receiver {
        async fn serve(self: Arc<Self>, _peer: u64, request: wire::Request) -> wire::Response {
            let wire::Request::SnapshotChunk { offset, .. } = request else {
                return wire::Response::Failed("only snapshot chunks here".into());
            };
            let (answer, answered) = oneshot::channel();
            let _ = self.chunks.send((offset, answer));
            answered
                .await
                .unwrap_or_else(|_| wire::Response::Failed("not answered".into()))
        }

        fn closed(&self, _peer: u64, _serial: u64) {}
    }

    /// A transport of node `n1` that sends snapshots in chunks of 4 bytes, linked to a
    /// [`Receiver`] as node `n2`.
    async fn linked() -> (PeerTransport, u64, mpsc::UnboundedReceiver<Chunk>) {
        let sender = PeerTransport::new("n1", "c").with_snapshot_chunk_bytes(4);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (dialed, accepted) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let target = NodeId::from_name("n2").0;
        let stream = PeerStream::Plain(dialed.unwrap());
        sender.inner.install(target, stream, announced_version());
        let (chunks, received) = mpsc::unbounded_channel();
        let stream = PeerStream::Plain(accepted.unwrap().0);
        Link::start(stream, sender.inner.me, 1, Arc::new(Receiver { chunks }));
        (sender, target, received)
    }

    type Sent = Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>>;

    /// Sends a 10-byte snapshot of group 5 to `target` (chunks at 0, 4 and 8).
    fn send(
        sender: &PeerTransport,
        target: u64,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
    ) -> JoinHandle<Sent> {
        let sender = sender.clone();
        tokio::spawn(async move {
            let snapshot = SnapshotOf::<TypeConfig, Cursor<Vec<u8>>> {
                meta: Default::default(),
                snapshot: Cursor::new(vec![7; 10]),
            };
            let option = RPCOption::new(Duration::from_secs(30));
            sender
                .full_snapshot(target, 5, Vote::new(1, 1), snapshot, cancel, option)
                .await
        })
    }

    fn progress(sender: &PeerTransport) -> Vec<(u32, u64, u64, u64)> {
        sender
            .snapshot_transfers()
            .into_iter()
            .map(|t| (t.group.0, t.target.0, t.sent, t.total))
            .collect()
    }

    async fn next(chunks: &mut mpsc::UnboundedReceiver<Chunk>, offset: u64) -> Chunk {
        let chunk = chunks.recv().await.expect("a chunk");
        assert_eq!(chunk.0, offset);
        chunk
    }

    /// What the console shows of a move in bytes: listed from the first chunk, the bytes
    /// acknowledged as they are, gone once the target installed it.
    #[tokio::test]
    async fn a_snapshot_being_sent_is_listed_until_it_is_installed() {
        let (sender, n2, mut chunks) = linked().await;
        let sending = send(&sender, n2, futures::future::pending());
        for offset in [0, 4] {
            let (_, answer) = next(&mut chunks, offset).await;
            assert_eq!(progress(&sender), [(5, n2, offset, 10)]);
            answer.send(wire::Response::ChunkReceived).unwrap();
        }
        let (_, answer) = next(&mut chunks, 8).await;
        assert_eq!(progress(&sender), [(5, n2, 8, 10)]);
        let installed = SnapshotResponse::new(Vote::new(1, 1));
        answer.send(wire::Response::Snapshot(installed)).unwrap();
        assert!(sending.await.unwrap().is_ok());
        assert_eq!(progress(&sender), []);
    }

    /// A refused chunk, a cancelled replication and a dropped send leave nothing listed.
    #[tokio::test]
    async fn a_snapshot_that_fails_or_is_dropped_is_no_longer_listed() {
        let (sender, n2, mut chunks) = linked().await;

        let refused = send(&sender, n2, futures::future::pending());
        let (_, answer) = next(&mut chunks, 0).await;
        answer
            .send(wire::Response::Failed("disk full".into()))
            .unwrap();
        assert!(refused.await.unwrap().is_err());
        assert_eq!(progress(&sender), []);

        let (close, closed) = oneshot::channel::<()>();
        let cancelled = send(&sender, n2, async move {
            let _ = closed.await;
            ReplicationClosed::new("replication stopped")
        });
        let (_, _unanswered) = next(&mut chunks, 0).await;
        assert_eq!(progress(&sender), [(5, n2, 0, 10)]);
        close.send(()).unwrap();
        assert!(matches!(
            cancelled.await.unwrap(),
            Err(StreamingError::Closed(_))
        ));
        assert_eq!(progress(&sender), []);

        let dropped = send(&sender, n2, futures::future::pending());
        let (_, answer) = next(&mut chunks, 0).await;
        answer.send(wire::Response::ChunkReceived).unwrap();
        let (_, _unanswered) = next(&mut chunks, 4).await;
        assert_eq!(progress(&sender), [(5, n2, 4, 10)]);
        dropped.abort();
        assert!(dropped.await.unwrap_err().is_cancelled());
        assert_eq!(progress(&sender), []);
    }

    /// Forwarding errors reach clients in messages; a `NodeId` prints as the bare id did.
    #[test]
    fn peer_errors_name_the_node_as_before() {
        let error = PeerError::Unreachable(NodeId(0xab), "no link".into());
        assert_eq!(
            error.to_string(),
            "node 00000000000000ab is unreachable: no link"
        );
    }
}
