//! Whole-collection reads in pages (see [`trireme_types::whole`]): `HGETALL`, `SMEMBERS`,
//! `LRANGE` and `ZRANGE` by rank over collections of any size.
//!
//! The replica that may serve the read (the shard's leader, or any replica for a `stale`
//! read) opens it on a pinned view of its store, measures it from the collection's record
//! and answers the first page. When there is more, it keeps the view and the walk under a
//! number and hands out the next pages to whoever asks for that number: the node the client
//! is connected to, itself or another over the peer link. Every page comes from the one
//! view, so the answer is the collection at one point of the log, as a Redis whole read is,
//! while no node holds more than a page of it at a time. A read that nobody asks for within
//! [`IDLE_LIMIT`] is closed, its view dropped.
//!
//! A node of a build from before these reads cannot decode the request and says so; the
//! read is then made as before, in one message.

use crate::forward::{ShardRequest, UNDECODABLE_FORWARD, WireOp, slots_to_read};
use crate::read_limit::too_many_to_read;
use crate::{ClusterError, Node};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use trireme_raft::{ReadMode, ShardGroup};
use trireme_storage::{ShardView, Storage, WholeScan};
use trireme_types::whole::{WholeItems, WholeOpened, WholePage, WholeRead, WholeRest};
use trireme_types::{
    ErrorCode, HashAnswer, HashRead, ListAnswer, ListRead, SetAnswer, SetRead, ShardId,
    SortedSetAnswer, SortedSetRead, TriremeError, ZRange,
};

/// Most items in a page.
pub const PAGE_ITEMS: u64 = 1024;
/// The bytes of members and values past which a page ends early.
const PAGE_BYTES: usize = 1 << 20;
/// Items read from the view at a time while a page fills.
const CHUNK_ITEMS: u64 = 64;
/// How long an open read waits for its next page before it is closed.
const IDLE_LIMIT: Duration = Duration::from_secs(30);
/// How often open reads are checked for idleness.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// Most reads one node holds open; past it, new ones are refused until some end.
const MAX_OPEN: usize = 256;
/// How long a request waits for a replica to close a read whose answer it threw away.
const DISCARD_CLOSE_WAIT: Duration = Duration::from_millis(500);

/// One read held open between pages.
struct OpenRead {
    view: ShardView<'static>,
    scan: WholeScan,
    last_used: Instant,
}

/// The whole reads this node serves and holds open between pages.
pub(crate) struct OpenReads {
    /// The next read's number. It starts at a random point, so that a number handed out
    /// before this node restarted never names a read opened after it.
    next: AtomicU64,
    reads: Mutex<HashMap<u64, OpenRead>>,
}

impl Default for OpenReads {
    fn default() -> Self {
        OpenReads {
            next: AtomicU64::new(rand::random::<u64>() >> 1),
            reads: Mutex::default(),
        }
    }
}

impl OpenReads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, OpenRead>> {
        // The map holds no invariant a panicking holder could break.
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `view` and `scan` open; the read's number.
    fn insert(&self, view: ShardView<'static>, scan: WholeScan) -> Result<u64, ClusterError> {
        let mut reads = self.lock();
        if reads.len() >= MAX_OPEN {
            return Err(ClusterError::Request(TriremeError::new(
                ErrorCode::Unavailable,
                format!(
                    "this node already serves {MAX_OPEN} whole-collection reads in pages; try again when some end"
                ),
            )));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        reads.insert(
            id,
            OpenRead {
                view,
                scan,
                last_used: Instant::now(),
            },
        );
        Ok(id)
    }

    /// How many reads are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn close(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn expire_idle(&self) {
        self.lock()
            .retain(|_, read| read.last_used.elapsed() < IDLE_LIMIT);
    }

    /// The next page of read `id`, which closes once its last page is out. The read is taken
    /// out of the map while its page is read (off the async threads), so one read's pages
    /// never interleave.
    async fn next_page(self: &Arc<Self>, id: u64) -> Result<WholePage, ClusterError> {
        let Some(mut read) = self.lock().remove(&id) else {
            return Err(ClusterError::Request(TriremeError::new(
                ErrorCode::NotFound,
                format!(
                    "whole-collection read {id} is not open here: it ended, or waited more than {} s for its next page",
                    IDLE_LIMIT.as_secs()
                ),
            )));
        };
        let (read, items) = tokio::task::spawn_blocking(move || {
            let items = fill_page(&read.view, &mut read.scan);
            (read, items)
        })
        .await
        .map_err(|e| ClusterError::Internal(format!("whole read task: {e}")))?;
        let items = items?;
        let last = read.scan.is_done();
        if !last {
            let mut read = read;
            read.last_used = Instant::now();
            self.lock().insert(id, read);
        }
        Ok(WholePage { items, last })
    }
}

/// Reads the next page of `scan` from `view`: up to [`PAGE_ITEMS`] items, fewer when they
/// pass [`PAGE_BYTES`].
fn fill_page(view: &ShardView<'_>, scan: &mut WholeScan) -> Result<WholeItems, ClusterError> {
    let mut page = WholeItems::empty(scan.read());
    let mut bytes = 0;
    while !scan.is_done() && (page.len() as u64) < PAGE_ITEMS && bytes < PAGE_BYTES {
        let chunk = view.whole_page(scan, CHUNK_ITEMS.min(PAGE_ITEMS - page.len() as u64))?;
        if chunk.is_empty() {
            break;
        }
        bytes += chunk.bytes();
        page.extend(chunk);
    }
    Ok(page)
}

/// Opens a whole read and answers its first page, on the replica that serves it: the
/// answer, and the applied index of the view it came from (for a `stale` read's floor).
#[derive(Debug, Clone)]
pub(crate) struct OpenWhole {
    pub mode: ReadMode,
    pub slots: Option<(u16, u16)>,
    pub query: WholeQuery,
}

/// What a whole read reads, on the peer link.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WholeQuery {
    pub key: Bytes,
    pub read: WholeRead,
}

impl ShardRequest for OpenWhole {
    type Answer = (Result<WholeOpened, ErrorCode>, u64);
    const WRITES: bool = false;

    fn any_replica(&self) -> bool {
        self.mode == ReadMode::Stale
    }

    fn at_once(&self, _: &Node, _: ShardId) -> Option<Result<Self::Answer, ClusterError>> {
        None
    }

    async fn serve(self, node: &Node, group: &ShardGroup) -> Result<Self::Answer, ClusterError> {
        group.read_barrier(self.mode).await?;
        let shard = group.shard();
        let storage: Arc<Storage> = node.storage.clone();
        let (bootstrap, slots) = (node.bootstrap_shards, self.slots);
        let WholeQuery { key, read } = self.query;
        let opened = tokio::task::spawn_blocking(move || {
            let ((view, scan), _) =
                storage.read_with_removals(shard, || -> Result<_, ClusterError> {
                    slots_to_read(&storage, bootstrap, shard, slots)?;
                    let view = storage.pinned_view(shard);
                    let scan = view.open_whole(&key, read, crate::now_ms())?;
                    Ok((view, scan))
                })?;
            let applied = view.applied_index()?;
            let mut scan = match scan {
                Ok(scan) => scan,
                Err(code) => return Ok::<_, ClusterError>((Err(code), applied)),
            };
            let first = fill_page(&view, &mut scan)?;
            Ok((Ok((view, scan, first)), applied))
        })
        .await
        .map_err(|e| ClusterError::Internal(format!("whole read task: {e}")))??;
        let (found, applied) = opened;
        let (view, scan, first) = match found {
            Ok(open) => open,
            Err(code) => return Ok((Err(code), applied)),
        };
        let total = scan.total();
        let rest = if scan.is_done() {
            None
        } else {
            Some(WholeRest {
                node: node.node_id,
                read: node.open_reads.insert(view, scan)?,
            })
        };
        Ok((Ok(WholeOpened { total, first, rest }), applied))
    }

    fn to_wire(&self) -> WireOp {
        WireOp::OpenWhole(self.mode.into(), self.slots, self.query.clone())
    }

    fn applied(answer: &Self::Answer) -> Option<u64> {
        Some(answer.1)
    }

    /// A read opened by a replica behind the floor is closed there at once, rather than
    /// pin that replica's view until it has idled out. The request's retry waits for it, so
    /// not for long: a replica that does not answer within [`DISCARD_CLOSE_WAIT`] closes
    /// the read when it idles out.
    async fn discarded(answer: Self::Answer, node: &Node, shard: ShardId, served_by: u64) {
        if let (
            Ok(WholeOpened {
                rest: Some(rest), ..
            }),
            _,
        ) = answer
        {
            debug_assert_eq!(rest.node, served_by);
            node.close_whole_elsewhere(shard, rest, DISCARD_CLOSE_WAIT)
                .await;
        }
    }
}

/// A whole read this node opened for a client: its size, and the pages still to come.
/// Dropped before its last page, it closes the read where it is held.
pub struct WholeReader {
    node: Weak<Node>,
    shard: ShardId,
    total: u64,
    first: Option<WholeItems>,
    rest: Option<WholeRest>,
}

impl WholeReader {
    /// How many items the pages add up to.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether the first page is the whole answer (no page waits anywhere).
    pub fn is_one_page(&self) -> bool {
        self.rest.is_none()
    }

    /// The next page; `None` once every page was given.
    pub async fn next_page(&mut self) -> Result<Option<WholeItems>, ClusterError> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        let Some(rest) = self.rest else {
            return Ok(None);
        };
        let node = self
            .node
            .upgrade()
            .ok_or_else(|| ClusterError::Internal("the node is shutting down".into()))?;
        let page = if rest.node == node.node_id {
            node.open_reads.next_page(rest.read).await?
        } else {
            let left = node.config.timing.request_timeout;
            let op = WireOp::WholePage { read: rest.read };
            node.forward_wait_op::<WholePage>(
                trireme_types::NodeId(rest.node),
                self.shard,
                op,
                left,
            )
            .await?
            .ok_or_else(|| {
                ClusterError::Internal(format!(
                    "node {:016x} no longer serves whole read {}",
                    rest.node, rest.read
                ))
            })?
        };
        if page.last {
            self.rest = None;
        }
        Ok(Some(page.items))
    }
}

impl Drop for WholeReader {
    fn drop(&mut self) {
        let (Some(rest), Some(node)) = (self.rest.take(), self.node.upgrade()) else {
            return;
        };
        if rest.node == node.node_id {
            node.open_reads.close(rest.read);
            return;
        }
        // Outside a runtime (never on the request path) the read is left to the idle sweep.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shard = self.shard;
        runtime.spawn(async move {
            let wait = node.config.timing.request_timeout;
            node.close_whole_elsewhere(shard, rest, wait).await;
        });
    }
}

impl Node {
    /// Opens `read` of the collection at `key`, the way `mode` says, and answers its size and
    /// first page; the rest comes page by page from [`WholeReader::next_page`]. Refused with
    /// `WRONGTYPE` for a key of another type, and past `[limits] max_collection_read`
    /// items, as the whole reads it replaces.
    pub async fn open_whole(
        self: &Arc<Self>,
        key: &[u8],
        read: WholeRead,
        mode: ReadMode,
    ) -> Result<WholeReader, ClusterError> {
        self.check_key(key)?;
        let key = Bytes::copy_from_slice(key);
        let query = WholeQuery {
            key: key.clone(),
            read,
        };
        let opened = self
            .routed(|routing| {
                let shard = routing.shard_of_key(&key);
                let slots = routing.slots_of(shard);
                let op = OpenWhole {
                    mode,
                    slots: Some((*slots.start(), *slots.end())),
                    query: query.clone(),
                };
                async move {
                    // An older build's refusal is an answer here (the read is made the old
                    // way); every other error goes back to `routed`, which waits for the map
                    // after a split moved the key.
                    match self.on_shard(shard, op).await {
                        Ok(found) => Ok((shard, Some(found.0))),
                        Err(ClusterError::Remote(e)) if e.message.contains(UNDECODABLE_FORWARD) => {
                            Ok((shard, None))
                        }
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        let (shard, opened) = match opened {
            (shard, None) => return self.whole_in_one_message(shard, &key, read, mode).await,
            (shard, Some(found)) => (shard, found),
        };
        let opened = match opened {
            Ok(opened) => opened,
            Err(ErrorCode::WrongType) => return Err(crate::request::wrong_type()),
            Err(code) => {
                return Err(ClusterError::Request(TriremeError::new(
                    code,
                    "the whole read was refused",
                )));
            }
        };
        let reader = WholeReader {
            node: Arc::downgrade(self),
            shard,
            total: opened.total,
            first: Some(opened.first),
            rest: opened.rest,
        };
        let max = self.config.limits.max_collection_read;
        if reader.total > max {
            let (noun, paging) = refusal_words(&read);
            return Err(too_many_to_read(noun, max, paging));
        }
        Ok(reader)
    }

    /// A whole read made as before pages existed, for a shard served by an older build: the
    /// whole answer as the first page.
    async fn whole_in_one_message(
        self: &Arc<Self>,
        shard: ShardId,
        key: &[u8],
        read: WholeRead,
        mode: ReadMode,
    ) -> Result<WholeReader, ClusterError> {
        let everything = u64::MAX;
        let items = match read {
            WholeRead::Hash => {
                let read = HashRead::Fields {
                    after: None,
                    limit: everything,
                };
                match self.hash_read(key, read, mode).await?.0 {
                    Ok(HashAnswer::Pairs(pairs)) => WholeItems::Pairs(pairs),
                    _ => WholeItems::empty(&WholeRead::Hash),
                }
            }
            WholeRead::Set => {
                let read = SetRead::Members {
                    after: None,
                    limit: everything,
                };
                match self.set_read(key, read, mode).await?.0 {
                    Ok(SetAnswer::Members(members)) => WholeItems::Members(members),
                    _ => WholeItems::empty(&WholeRead::Set),
                }
            }
            WholeRead::List { start, stop } => {
                let range = ListRead::Range { start, stop };
                match self.list_read(key, range, mode).await?.0 {
                    Ok(ListAnswer::Elements(elements)) => WholeItems::Members(elements),
                    _ => WholeItems::empty(&read),
                }
            }
            WholeRead::SortedSet {
                start,
                stop,
                reverse,
            } => {
                let read = SortedSetRead::Range {
                    range: ZRange::Rank { start, stop },
                    reverse,
                    offset: 0,
                    limit: everything,
                };
                match self.sorted_set_read(key, read, mode).await?.0 {
                    Ok(SortedSetAnswer::Pairs(pairs)) => WholeItems::Scored(pairs),
                    _ => WholeItems::Scored(Vec::new()),
                }
            }
        };
        Ok(WholeReader {
            node: Arc::downgrade(self),
            shard,
            total: items.len() as u64,
            first: Some(items),
            rest: None,
        })
    }

    /// Serves a forwarded request for the next page of read `read` held here.
    pub(crate) async fn serve_whole_page(&self, read: u64) -> Result<WholePage, ClusterError> {
        self.open_reads.next_page(read).await
    }

    /// Closes the read `rest` names, held on another node, waiting at most `wait` for it to
    /// say so. Best effort: a read left open is closed there once it has waited too long.
    async fn close_whole_elsewhere(&self, shard: ShardId, rest: WholeRest, wait: Duration) {
        let op = WireOp::CloseWhole { read: rest.read };
        let to = trireme_types::NodeId(rest.node);
        let _ = self.forward_wait_op::<()>(to, shard, op, wait).await;
    }

    /// Closes read `read` held here, if it is open.
    pub(crate) fn close_whole(&self, read: u64) {
        self.open_reads.close(read);
    }

    /// How many whole reads this node holds open between pages.
    pub fn whole_reads_open(&self) -> usize {
        self.open_reads.len()
    }
}

/// What a whole read's refusal calls the collection, and the command that reads it in pages.
fn refusal_words(read: &WholeRead) -> (&'static str, &'static str) {
    match read {
        WholeRead::Hash => ("hash", "HSCAN"),
        WholeRead::Set => ("set", "SSCAN"),
        WholeRead::List { .. } => ("list", "LRANGE over a shorter range"),
        WholeRead::SortedSet { .. } => ("sorted set", "ZRANGE over a shorter range, or ZSCAN"),
    }
}

/// Closes the whole reads that waited too long for their next page.
pub(crate) fn spawn_sweeper(node: &Arc<Node>) {
    crate::node::spawn_periodic(Arc::downgrade(node), SWEEP_INTERVAL, |node| async move {
        node.open_reads.expire_idle();
    });
}
