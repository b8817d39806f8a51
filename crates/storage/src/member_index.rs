//! Which members each hash, set and sorted set of a shard replica holds, in memory, so that
//! `HSET`, `SADD` and `ZADD` tell a new member from an old one without reading its row (a
//! point read that missed the caches was over a quarter of an `HSET`'s CPU). Each member
//! keeps one number: a sorted set member its score's bits (a changed score must remove the
//! old score row), a hash field its row's `CreateIndex` (kept when the field is rewritten).
//!
//! The index holds whole collections or none of a collection. Memory is bounded node-wide by
//! `[storage] member_index_bytes`: a collection that would take the total past it is *left
//! out*, and writes to it read its member rows as before, until the shard's index is next
//! built. The keys of left-out collections are remembered and counted too (they may take the
//! total a little past the bound). A bound of 0 turns the index off. Lists are not indexed:
//! no list write asks whether an element exists.
//!
//! The one rule the lookups rest on: a collection neither indexed nor left out has no member
//! rows under the version its record holds. The build puts every collection with live rows
//! in one of the two; the apply loop adds a collection when its first rows are written and
//! forgets one when its record goes or is replaced (that version's rows are dead then, see
//! [`crate::purge`]). Lookups are made for rows of the stored version only.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};

/// The node-wide bound on every shard's member index, and what they take now.
#[derive(Debug)]
pub(crate) struct MemberBudget {
    limit: u64,
    used: AtomicU64,
}

impl MemberBudget {
    pub(crate) fn new(limit: u64) -> Arc<Self> {
        Arc::new(MemberBudget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Bytes every member index of the node takes, as [`MEMBER_BYTES`] counts them.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether there is an index at all (a bound of 0 turns it off).
    pub(crate) fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// Counts `bytes` that must be kept whatever the limit.
    fn charge(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` if they fit under the limit.
    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What one member takes besides its name: its table entry (a boxed name and a number) and
/// the table's control byte at the table's lowest load (7/16 full right after growing), and
/// the name's heap block header.
pub(crate) const MEMBER_BYTES: u64 =
    ((std::mem::size_of::<(Box<[u8]>, u64)>() as u64 + 1) * 16 / 7) + 16;
// A 24-byte entry and a control byte at worst 7/16 full, and the name's block: the figure
// docs/architecture.md gives.
const _: () = assert!(MEMBER_BYTES == 73);

/// What one indexed collection takes besides its key and members.
const COLLECTION_BYTES: u64 =
    ((std::mem::size_of::<(Box<[u8]>, Members)>() as u64 + 1) * 16 / 7) + 16;
/// What one left-out collection takes besides its key.
const LEFT_OUT_BYTES: u64 = ((std::mem::size_of::<Box<[u8]>>() as u64 + 1) * 16 / 7) + 16;

/// One indexed collection: member → its number.
#[derive(Debug, Default)]
struct Members {
    rows: HashMap<Box<[u8]>, u64>,
    /// What this collection counts against the budget.
    bytes: u64,
}

/// The members of one shard replica's collections (see the module's documentation).
#[derive(Debug)]
pub(crate) struct MemberIndex {
    collections: HashMap<Box<[u8]>, Members>,
    /// Collections with rows that are not indexed: their members are read from the rows.
    left_out: HashSet<Box<[u8]>>,
    budget: Arc<MemberBudget>,
}

impl Drop for MemberIndex {
    fn drop(&mut self) {
        let indexed: u64 = self.collections.values().map(|c| c.bytes).sum();
        let left_out: u64 = self.left_out.iter().map(|k| left_out_bytes(k)).sum();
        self.budget.give_back(indexed + left_out);
    }
}

fn left_out_bytes(key: &[u8]) -> u64 {
    LEFT_OUT_BYTES + key.len() as u64
}

impl MemberIndex {
    pub(crate) fn new(budget: Arc<MemberBudget>) -> Self {
        MemberIndex {
            collections: HashMap::new(),
            left_out: HashSet::new(),
            budget,
        }
    }

    /// What the index says of `member` of the collection at `key`: `Some(None)` absent,
    /// `Some(Some(number))` present, `None` not known (left out: read the row).
    pub(crate) fn lookup(&self, key: &[u8], member: &[u8]) -> Option<Option<u64>> {
        if !self.budget.enabled() {
            return None;
        }
        match self.collections.get(key) {
            Some(members) => Some(members.rows.get(member).copied()),
            None if self.left_out.contains(key) => None,
            None => Some(None),
        }
    }

    /// Whether the collection at `key` is indexed.
    #[cfg(test)]
    fn holds(&self, key: &[u8]) -> bool {
        self.collections.contains_key(key)
    }

    /// The collection at `key` is gone or replaced, and every row it had with it.
    pub(crate) fn forget(&mut self, key: &[u8]) {
        if let Some(members) = self.collections.remove(key) {
            self.budget.give_back(members.bytes);
            discard(members.rows);
        }
        if self.left_out.remove(key) {
            self.budget.give_back(left_out_bytes(key));
        }
    }

    /// Marks the collection at `key` (which has rows, or is about to) as not indexed.
    pub(crate) fn leave_out(&mut self, key: &[u8]) {
        if !self.budget.enabled() {
            return;
        }
        if let Some(members) = self.collections.remove(key) {
            self.budget.give_back(members.bytes);
            discard(members.rows);
        }
        if !self.left_out.contains(key) {
            self.budget.charge(left_out_bytes(key));
            self.left_out.insert(Box::from(key));
        }
    }

    /// Records that the collection at `key` holds `member` with `number`. A collection seen
    /// for the first time (it has no other rows) is indexed while the budget allows; one the
    /// budget cannot take any more is left out.
    pub(crate) fn insert(&mut self, key: &[u8], member: &[u8], number: u64) {
        if !self.budget.enabled() || self.left_out.contains(key) {
            return;
        }
        let members = match self.collections.get_mut(key) {
            Some(members) => members,
            None => {
                let bytes = COLLECTION_BYTES + key.len() as u64;
                if !self.budget.take(bytes) {
                    self.leave_out(key);
                    return;
                }
                self.collections.entry(Box::from(key)).or_insert(Members {
                    rows: HashMap::new(),
                    bytes,
                })
            }
        };
        if let Some(old) = members.rows.get_mut(member) {
            *old = number;
            return;
        }
        let bytes = MEMBER_BYTES + member.len() as u64;
        if !self.budget.take(bytes) {
            self.leave_out(key);
            return;
        }
        members.bytes += bytes;
        members.rows.insert(Box::from(member), number);
    }

    /// Records that the collection at `key` no longer holds `member`.
    pub(crate) fn remove(&mut self, key: &[u8], member: &[u8]) {
        let Some(members) = self.collections.get_mut(key) else {
            return;
        };
        if members.rows.remove(member).is_some() {
            let bytes = MEMBER_BYTES + member.len() as u64;
            members.bytes -= bytes;
            self.budget.give_back(bytes);
        }
        if members.rows.is_empty() {
            self.forget(key);
        }
    }
}

/// Members of a collection the index lets go of from which on they are freed by the
/// discard thread rather than where they were let go of.
const DISCARD_IN_BACKGROUND: usize = 4096;

/// Collections the discard thread may have waiting at once. Their budget is given back when
/// they are let go of, so their memory is not counted while they wait: past this many, the
/// next is freed where it was let go of.
const DISCARD_QUEUE: usize = 8;

/// Frees `rows` of a forgotten collection. The index lets go of a collection inside the
/// applying batch that deletes or replaces it, and freeing a million boxed members there
/// took 0.3 s (2.5 GHz Xeon), every other write of the shard waiting behind it; so a big
/// one goes to a thread that frees it while the batch goes on. Small ones are freed here
/// (a send costs more than their drop), and so is a big one when there is no thread or it
/// has [`DISCARD_QUEUE`] waiting.
fn discard<T: Send + 'static>(rows: HashMap<Box<[u8]>, T>) {
    static DISCARD: OnceLock<Option<mpsc::SyncSender<Box<dyn Send>>>> = OnceLock::new();
    if rows.len() < DISCARD_IN_BACKGROUND {
        return;
    }
    let sender = DISCARD.get_or_init(|| {
        let (sender, receiver) = mpsc::sync_channel::<Box<dyn Send>>(DISCARD_QUEUE);
        std::thread::Builder::new()
            .name("trireme-discard".into())
            .spawn(move || receiver.into_iter().for_each(drop))
            .ok()
            .map(|_| sender)
    });
    if let Some(sender) = sender {
        // Full (or, never, closed): the rows come back in the error and are dropped here.
        let _ = sender.try_send(Box::new(rows));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_say_absent_present_or_unknown() {
        let budget = MemberBudget::new(u64::MAX);
        let mut index = MemberIndex::new(budget.clone());
        assert_eq!(index.lookup(b"h", b"f"), Some(None));
        index.insert(b"h", b"f", 7);
        assert_eq!(index.lookup(b"h", b"f"), Some(Some(7)));
        assert_eq!(index.lookup(b"h", b"g"), Some(None));
        index.insert(b"h", b"f", 9);
        assert_eq!(index.lookup(b"h", b"f"), Some(Some(9)));
        index.leave_out(b"l");
        assert_eq!(index.lookup(b"l", b"x"), None);
        index.insert(b"l", b"x", 1);
        assert_eq!(index.lookup(b"l", b"x"), None);
        // The last member removed takes the collection with it.
        index.remove(b"h", b"f");
        assert!(!index.holds(b"h"));
        assert_eq!(
            budget.used(),
            LEFT_OUT_BYTES + 1,
            "the left-out key is counted"
        );
        index.forget(b"l");
        assert_eq!(index.lookup(b"l", b"x"), Some(None));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_bound_of_zero_knows_nothing_and_keeps_nothing() {
        let budget = MemberBudget::new(0);
        let mut index = MemberIndex::new(budget.clone());
        index.insert(b"h", b"f", 1);
        index.leave_out(b"l");
        assert_eq!(index.lookup(b"h", b"f"), None);
        assert_eq!(index.lookup(b"x", b"y"), None);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn the_budget_leaves_out_what_does_not_fit_and_is_given_back() {
        let one = COLLECTION_BYTES + 1 + MEMBER_BYTES + 2;
        let budget = MemberBudget::new(one + COLLECTION_BYTES + 1);
        let mut index = MemberIndex::new(budget.clone());
        index.insert(b"a", b"m1", 0);
        assert_eq!(budget.used(), one);
        // `b` is taken in, but its first member does not fit: it is left out whole, and its
        // key is counted.
        index.insert(b"b", b"m1", 0);
        assert_eq!(index.lookup(b"b", b"m1"), None);
        assert_eq!(budget.used(), one + LEFT_OUT_BYTES + 1);
        // Another index on the same node shares the budget.
        let mut other = MemberIndex::new(budget.clone());
        other.insert(b"c", b"m", 0);
        assert_eq!(other.lookup(b"c", b"m"), None);
        drop(index);
        assert_eq!(budget.used(), LEFT_OUT_BYTES + 1);
        other.forget(b"c");
        assert_eq!(budget.used(), 0);
        other.leave_out(b"d");
        drop(other);
        assert_eq!(budget.used(), 0);
    }

    /// Tells on which thread it was dropped.
    struct DropProbe(mpsc::Sender<std::thread::ThreadId>);

    impl Drop for DropProbe {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    fn probed_rows(
        n: usize,
    ) -> (
        HashMap<Box<[u8]>, DropProbe>,
        mpsc::Receiver<std::thread::ThreadId>,
    ) {
        let (sender, dropped) = mpsc::channel();
        let rows = (0..n)
            .map(|i| {
                (
                    Box::from(i.to_be_bytes().as_slice()),
                    DropProbe(sender.clone()),
                )
            })
            .collect();
        (rows, dropped)
    }

    #[test]
    fn a_big_collection_let_go_of_is_freed_on_another_thread() {
        let here = std::thread::current().id();
        let (small, dropped) = probed_rows(DISCARD_IN_BACKGROUND - 1);
        discard(small);
        // Freed before `discard` returned, here.
        let small_drops: Vec<_> = dropped.try_iter().collect();
        assert_eq!(small_drops.len(), DISCARD_IN_BACKGROUND - 1);
        assert!(small_drops.iter().all(|id| *id == here));

        let (big, dropped) = probed_rows(DISCARD_IN_BACKGROUND);
        discard(big);
        for n in 0..DISCARD_IN_BACKGROUND {
            let id = dropped
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("member {n} of the big collection never freed: {e}"));
            assert_ne!(
                id, here,
                "a big collection was freed by the thread that let it go"
            );
        }
    }
}
