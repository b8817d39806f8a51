//! Snapshots travel in chunks: a leader sends a lagging follower its snapshot file as a run of
//! [`wire::Request::SnapshotChunk`](super::wire::Request::SnapshotChunk)s, each answered before
//! the next goes out, and the follower installs the snapshot once the last chunk is in.
//!
//! One frame per snapshot held the shared peer link for as long as the whole file took to
//! send (heartbeats and appends of every other group waited behind it), bounded a shard by the
//! frame limit, and had to arrive within one RPC timeout. Chunks interleave with the rest of
//! the link's traffic, and each has its own timeout.

use openraft::type_config::alias::SnapshotMetaOf;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::TypeConfig;

/// Most bytes reserved up front for an incoming snapshot: the announced total is the peer's
/// word, and memory is only committed as chunks actually arrive.
const MAX_RESERVE: u64 = 64 << 20;

/// One snapshot being received.
struct Upload {
    meta: SnapshotMetaOf<TypeConfig>,
    total: u64,
    data: Vec<u8>,
    chunks: u32,
}

/// A snapshot whose last chunk has arrived.
pub(crate) struct Received {
    pub(crate) data: Vec<u8>,
    pub(crate) chunks: u32,
}

/// Snapshots being received on this node, at most one per (peer, group): a new snapshot from
/// the same leader for the same group replaces an unfinished one.
#[derive(Default)]
pub(crate) struct Uploads {
    open: HashMap<(u64, u32), Upload>,
}

impl Uploads {
    /// Drops what `peer` has sent so far of a snapshot of `group` (a chunk was refused: the
    /// sender starts over from the first).
    pub(crate) fn drop_upload(&mut self, peer: u64, group: u32) {
        self.open.remove(&(peer, group));
    }

    /// Adds a chunk from `peer` for `group`. Returns the whole snapshot with the last chunk,
    /// `None` while more are expected, or why the chunk does not fit (the sender then starts
    /// over: openraft retries a failed snapshot from the beginning).
    pub(crate) fn add(
        &mut self,
        peer: u64,
        group: u32,
        meta: &SnapshotMetaOf<TypeConfig>,
        offset: u64,
        total: u64,
        chunk: Vec<u8>,
    ) -> Result<Option<Received>, String> {
        let key = (peer, group);
        if offset == 0 {
            self.open.insert(
                key,
                Upload {
                    meta: meta.clone(),
                    total,
                    data: Vec::with_capacity(total.min(MAX_RESERVE) as usize),
                    chunks: 0,
                },
            );
        }
        let Some(upload) = self.open.get_mut(&key) else {
            return Err(format!(
                "snapshot chunk at offset {offset} (snapshot up to {:?}) arrived before its first \
                 chunk",
                meta.last_log_id
            ));
        };
        let fits = upload.meta == *meta
            && upload.total == total
            && upload.data.len() as u64 == offset
            && offset.saturating_add(chunk.len() as u64) <= total;
        if !fits {
            let expected = upload.data.len();
            self.open.remove(&key);
            return Err(format!(
                "snapshot chunk of {} bytes at offset {offset} (of {total}, snapshot up to {:?}) \
                 does not follow the {expected} bytes received so far",
                chunk.len(),
                meta.last_log_id
            ));
        }
        upload.data.extend_from_slice(&chunk);
        upload.chunks += 1;
        if (upload.data.len() as u64) < total {
            return Ok(None);
        }
        let Some(done) = self.open.remove(&key) else {
            return Ok(None);
        };
        Ok(Some(Received {
            data: done.data,
            chunks: done.chunks,
        }))
    }

    /// Drops every unfinished snapshot from `peer` (its link closed: the sender starts over).
    pub(crate) fn forget_peer(&mut self, peer: u64) {
        self.open.retain(|(from, _), _| *from != peer);
    }
}

/// Snapshots this node is sending, by (group, target): bytes acknowledged so far and the
/// total, so a replica move shows its progress in bytes rather than only in log entries.
#[derive(Default)]
pub(crate) struct Outgoing {
    open: Mutex<HashMap<(u32, u64), Sending>>,
    next_serial: AtomicU64,
}

#[derive(Clone, Copy)]
struct Sending {
    serial: u64,
    sent: u64,
    total: u64,
}

impl Outgoing {
    /// Records a transfer of `total` bytes of `group` to `target`, until the guard drops.
    pub(crate) fn start(&self, group: u32, target: u64, total: u64) -> Transfer<'_> {
        let serial = self.next_serial.fetch_add(1, Ordering::Relaxed);
        let sending = Sending {
            serial,
            sent: 0,
            total,
        };
        super::lock(&self.open).insert((group, target), sending);
        Transfer {
            outgoing: self,
            key: (group, target),
            serial,
        }
    }

    /// `(group, target, sent, total)` of every transfer in flight.
    pub(crate) fn list(&self) -> Vec<(u32, u64, u64, u64)> {
        super::lock(&self.open)
            .iter()
            .map(|(&(group, target), s)| (group, target, s.sent, s.total))
            .collect()
    }
}

/// One transfer in flight. Dropping it forgets the transfer however it ended: done, failed,
/// or its future dropped because openraft cancelled the replication.
pub(crate) struct Transfer<'a> {
    outgoing: &'a Outgoing,
    key: (u32, u64),
    /// Tells this transfer from a newer one to the same target that replaced its entry.
    serial: u64,
}

impl Transfer<'_> {
    /// The target has acknowledged the first `sent` bytes.
    pub(crate) fn acknowledged(&self, sent: u64) {
        if let Some(s) = super::lock(&self.outgoing.open).get_mut(&self.key)
            && s.serial == self.serial
        {
            s.sent = sent;
        }
    }
}

impl Drop for Transfer<'_> {
    fn drop(&mut self) {
        let mut open = super::lock(&self.outgoing.open);
        if open.get(&self.key).is_some_and(|s| s.serial == self.serial) {
            open.remove(&self.key);
        }
    }
}

/// How long the last chunk may take to be answered: the follower installs the snapshot before
/// it answers, writing every row of the shard. A timeout makes the leader send the whole
/// snapshot again, so it grows with the snapshot (a second per 16 MiB) rather than cut a large
/// install short forever.
pub(crate) fn install_timeout(chunk_timeout: Duration, total: u64) -> Duration {
    chunk_timeout + Duration::from_secs(total / (16 << 20))
}

/// The chunks `data` is sent in: `(offset, bytes)`, at least one even for an empty file.
pub(crate) fn chunks(data: &[u8], chunk_bytes: usize) -> impl Iterator<Item = (u64, &[u8])> {
    let chunk_bytes = chunk_bytes.max(1);
    let count = data.len().div_ceil(chunk_bytes).max(1);
    (0..count).map(move |i| {
        let start = i * chunk_bytes;
        let end = (start + chunk_bytes).min(data.len());
        (start as u64, &data[start..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use openraft::LogId;
    use openraft::impls::leader_id_adv::LeaderId;

    /// The meta of a snapshot up to log index `index`.
    fn meta(index: u64) -> SnapshotMetaOf<TypeConfig> {
        let leader = LeaderId {
            term: 1,
            node_id: 1,
        };
        SnapshotMetaOf::<TypeConfig> {
            last_log_id: Some(LogId::new(leader, index)),
            ..Default::default()
        }
    }

    fn send(uploads: &mut Uploads, id: u64, data: &[u8], chunk_bytes: usize) -> Received {
        let mut done = None;
        for (offset, chunk) in chunks(data, chunk_bytes) {
            let got = uploads
                .add(1, 7, &meta(id), offset, data.len() as u64, chunk.to_vec())
                .unwrap();
            assert!(done.is_none(), "a snapshot completed before its last chunk");
            done = got;
        }
        done.expect("the last chunk completes the snapshot")
    }

    #[test]
    fn chunks_reassemble_into_the_file() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut uploads = Uploads::default();
        let got = send(&mut uploads, 1, &data, 300);
        assert_eq!(got.data, data);
        assert_eq!(got.chunks, 4, "300 + 300 + 300 + 100");
        assert!(uploads.open.is_empty());
        let exact = send(&mut uploads, 2, &data, 500);
        assert_eq!((exact.data, exact.chunks), (data, 2));
        let empty = send(&mut uploads, 3, &[], 500);
        assert_eq!((empty.data.len(), empty.chunks), (0, 1));
    }

    #[test]
    fn a_transfer_is_listed_until_its_guard_drops() {
        let outgoing = Outgoing::default();
        let first = outgoing.start(7, 2, 10);
        assert_eq!(outgoing.list(), [(7, 2, 0, 10)]);
        first.acknowledged(4);
        assert_eq!(outgoing.list(), [(7, 2, 4, 10)]);
        // A new transfer to the same target replaces the entry; the old guard leaves it be.
        let second = outgoing.start(7, 2, 20);
        first.acknowledged(8);
        drop(first);
        assert_eq!(outgoing.list(), [(7, 2, 0, 20)]);
        drop(second);
        assert!(outgoing.list().is_empty());
    }

    #[test]
    fn a_large_install_gets_more_time() {
        let base = Duration::from_secs(10);
        assert_eq!(install_timeout(base, 1 << 20), base);
        assert_eq!(
            install_timeout(base, 1 << 30),
            base + Duration::from_secs(64)
        );
    }

    #[test]
    fn a_chunk_out_of_place_drops_the_upload() {
        let mut uploads = Uploads::default();
        let m = meta(1);
        assert!(uploads.add(1, 7, &m, 0, 10, vec![0; 4]).unwrap().is_none());
        // A gap.
        assert!(uploads.add(1, 7, &m, 8, 10, vec![0; 2]).is_err());
        assert!(uploads.open.is_empty(), "the broken upload is dropped");
        assert!(
            uploads.add(1, 7, &m, 4, 10, vec![0; 6]).is_err(),
            "nothing continues a dropped upload"
        );
        // Another snapshot's chunk, and a chunk running past the announced total.
        assert!(uploads.add(1, 7, &m, 0, 10, vec![0; 4]).unwrap().is_none());
        assert!(uploads.add(1, 7, &meta(2), 4, 10, vec![0; 6]).is_err());
        assert!(uploads.add(1, 7, &m, 0, 10, vec![0; 4]).unwrap().is_none());
        assert!(uploads.add(1, 7, &m, 4, 10, vec![0; 7]).is_err());
    }

    #[test]
    fn a_new_first_chunk_restarts_and_peers_are_kept_apart() {
        let mut uploads = Uploads::default();
        let m = meta(1);
        assert!(uploads.add(1, 7, &m, 0, 6, vec![1; 3]).unwrap().is_none());
        assert!(uploads.add(2, 7, &m, 0, 6, vec![2; 3]).unwrap().is_none());
        // Peer 1 starts over (a retry after a timeout): the old bytes are gone.
        assert!(uploads.add(1, 7, &m, 0, 6, vec![3; 3]).unwrap().is_none());
        let one = uploads.add(1, 7, &m, 3, 6, vec![4; 3]).unwrap().unwrap();
        assert_eq!(one.data, [3, 3, 3, 4, 4, 4]);
        uploads.forget_peer(2);
        assert!(
            uploads.add(2, 7, &m, 3, 6, vec![5; 3]).is_err(),
            "peer 2's upload was forgotten with its link"
        );
    }
}
