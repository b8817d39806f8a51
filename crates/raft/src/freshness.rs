//! How old a replica's state may be: the bound a `stale` read reports (Consul's
//! `X-Consul-LastContact`) and that `max_stale` compares with.
//!
//! The leader stamps its wall-clock time on the AppendEntries it sends (heartbeats included),
//! beside the commit index the request carries. A stamp `(t, c)` claims: every entry
//! committed anywhere before `t` has an index of at most `c`. A replica that has applied `c`
//! therefore holds every write acknowledged before `t`, and its state is at most `now - t`
//! old, give or take how far the two nodes' clocks disagree (the documented allowance).
//!
//! The leader only makes the claim when it can back it:
//! - it holds its lease (a quorum acknowledged it within the election timeout, so no other
//!   leader can have been elected meanwhile) and `c` is an entry of its own term, so every
//!   entry after `c` in its log was appended by it as leader;
//! - `t` is no later than the moment the first entry after `c` was appended to its log, which
//!   the log store records ([`Freshness::appended`]): an entry is committed only after it is
//!   in the leader's log, so nothing after `c` was committed before `t`.

use crate::TypeConfig;
use openraft::type_config::alias::WatchReceiverOf;
use openraft::type_config::async_runtime::WatchReceiver;
use openraft::{RaftMetrics, ServerState};
use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Batches of appended entries remembered on the leader: enough for every entry between the
/// commit index and the log's end under heavy write load (a batch is one `append` call).
const APPENDED_BATCHES: usize = 4096;
/// Stamps a follower keeps until it has applied their commit index.
const PENDING_STAMPS: usize = 256;

/// Milliseconds since the Unix epoch on this node's clock.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One group's freshness bookkeeping, shared by its log store (appends), the transport
/// (stamps sent and received) and its [`crate::ShardGroup`] (reads).
pub(crate) struct Freshness {
    /// The leader lease, as [`holds_lease`] checks it.
    lease: Duration,
    /// The group's Raft metrics, set once the group is open.
    metrics: OnceLock<WatchReceiverOf<TypeConfig, RaftMetrics<TypeConfig>>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freshness")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// Leader side: `(first index, last index, unix ms)` of every recent `append`, in log order.
    appended: VecDeque<(u64, u64, u64)>,
    /// Follower side: `(leader unix ms, commit index)` stamps received, oldest first.
    pending: VecDeque<(u64, u64)>,
    /// The newest stamp whose commit index this replica has applied.
    confirmed_ms: Option<u64>,
}

impl Freshness {
    pub(crate) fn new(lease: Duration) -> Self {
        Self {
            lease,
            metrics: OnceLock::new(),
            state: Mutex::new(State::default()),
        }
    }

    pub(crate) fn set_metrics(
        &self,
        metrics: WatchReceiverOf<TypeConfig, RaftMetrics<TypeConfig>>,
    ) {
        let _ = self.metrics.set(metrics);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The log store appended entries `first..=last`; called before they are written, so the
    /// time recorded is no later than any of them could be committed.
    pub(crate) fn appended(&self, first: u64, last: u64) {
        let now = unix_ms();
        let mut state = self.state();
        if state
            .appended
            .back()
            .is_some_and(|(_, prev_last, _)| *prev_last + 1 != first)
        {
            // A cut tail (a follower's conflicting entries) or a gap: what came before no
            // longer describes this log.
            state.appended.clear();
        }
        state.appended.push_back((first, last, now));
        while state.appended.len() > APPENDED_BATCHES {
            state.appended.pop_front();
        }
    }

    /// The log lost its tail from `from` on.
    pub(crate) fn truncated(&self, from: u64) {
        let mut state = self.state();
        while state
            .appended
            .back()
            .is_some_and(|(first, _, _)| *first >= from)
        {
            state.appended.pop_back();
        }
        if let Some(batch) = state.appended.back_mut() {
            batch.1 = batch.1.min(from.saturating_sub(1));
        }
    }

    /// The stamp this leader may put beside commit index `commit` of term `commit_term`, or
    /// `None` when it cannot back one (see the module's rules).
    pub(crate) fn stamp(&self, commit: u64, commit_term: u64) -> Option<u64> {
        self.stamp_at(commit, commit_term).map(|(_, stamp)| stamp)
    }

    /// [`Freshness::stamp`], with the time it was taken at.
    fn stamp_at(&self, commit: u64, commit_term: u64) -> Option<(u64, u64)> {
        let metrics = self.metrics.get()?;
        {
            let m = metrics.borrow_watched();
            if m.current_term != commit_term || !holds_lease(&m, self.lease) {
                return None;
            }
        }
        let mut state = self.state();
        let now = unix_ms();
        // Batches wholly at or below the commit index are no longer needed: it only grows
        // while this node leads, and a new term clears nothing it relies on (see `appended`).
        while state
            .appended
            .front()
            .is_some_and(|(_, last, _)| *last <= commit)
            && state.appended.len() > 1
        {
            state.appended.pop_front();
        }
        let stamp = match state.appended.front() {
            // Nothing after `commit` was appended, as far as the log store has said: nothing
            // after it can be committed yet.
            None => now,
            Some((_, last, _)) if *last <= commit => now,
            // The first batch holding an entry after `commit`: nothing after it was committed
            // before that batch was appended.
            Some((first, _, at)) if *first <= commit + 1 => (*at).min(now),
            // Entries after `commit` whose append times were forgotten.
            Some(_) => return None,
        };
        Some((now, stamp))
    }

    /// A follower received a leader's stamp beside commit index `commit`.
    pub(crate) fn received(&self, leader_ms: u64, commit: u64) {
        let mut state = self.state();
        if state
            .pending
            .back()
            .is_some_and(|(ms, c)| *ms >= leader_ms && *c <= commit)
        {
            return;
        }
        state.pending.push_back((leader_ms, commit));
        while state.pending.len() > PENDING_STAMPS {
            state.pending.pop_front();
        }
    }

    /// How many milliseconds old a replica that has applied `applied` may be: `None` when no
    /// stamp it received is covered yet.
    pub(crate) fn follower_bound(&self, applied: u64) -> Option<u64> {
        let mut state = self.state();
        while let Some((ms, commit)) = state.pending.front().copied() {
            if commit > applied {
                break;
            }
            state.confirmed_ms = Some(state.confirmed_ms.map_or(ms, |c| c.max(ms)));
            state.pending.pop_front();
        }
        state.confirmed_ms.map(|ms| unix_ms().saturating_sub(ms))
    }

    /// Whether any leader ever stamped what it sent here (a leader of an older build does not).
    pub(crate) fn has_stamps(&self) -> bool {
        let state = self.state();
        state.confirmed_ms.is_some() || !state.pending.is_empty()
    }

    /// How old the leader's own state may be, when it holds its lease: 0 when it has applied
    /// its whole log, else the time since the first entry it has not applied was appended.
    pub(crate) fn leader_bound(&self) -> Option<u64> {
        let (applied, term) = {
            let m = self.metrics.get()?.borrow_watched();
            let applied = m.last_applied.as_ref()?;
            (applied.index, applied.leader_id.term)
        };
        self.stamp_at(applied, term).map(|(now, stamp)| now - stamp)
    }
}

/// Whether the node whose metrics these are may serve reads alone: it leads, a quorum
/// acknowledged it within `lease` (or it is the only voter), and it has applied an entry of
/// its own term, so everything committed by earlier leaders is applied here. Metrics published
/// late can only make this answer `false` too late by at most the lease, which is what the
/// lease is for.
pub(crate) fn holds_lease(m: &RaftMetrics<TypeConfig>, lease: Duration) -> bool {
    if m.state != ServerState::Leader || m.current_leader != Some(m.id) {
        return false;
    }
    if m.last_applied.as_ref().map(|l| l.leader_id.term) != Some(m.current_term) {
        return false;
    }
    let membership = m.membership_config.membership();
    let mut voters = membership.voter_ids();
    let only_voter = matches!((voters.next(), voters.next()), (Some(id), None) if id == m.id);
    only_voter
        || m.last_quorum_acked
            .as_ref()
            .is_some_and(|acked| openraft::Instant::elapsed(&acked.into_inner()) < lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare() -> Freshness {
        Freshness::new(Duration::from_millis(500))
    }

    #[test]
    fn a_follower_trusts_a_stamp_only_once_it_applied_the_stamped_commit() {
        let f = bare();
        let old = unix_ms() - 5_000;
        f.received(old, 10);
        f.received(unix_ms(), 20);
        assert_eq!(
            f.follower_bound(9),
            None,
            "nothing applied that a stamp covers"
        );
        let bound = f.follower_bound(10).expect("the first stamp is covered");
        assert!(bound >= 5_000, "bound {bound} is as old as the stamp");
        let bound = f.follower_bound(25).expect("both are covered");
        assert!(bound < 5_000, "the newer stamp counts: {bound}");
    }

    #[test]
    fn a_truncated_tail_is_forgotten_by_the_append_clock() {
        let f = bare();
        f.appended(1, 5);
        f.appended(6, 9);
        f.truncated(7);
        let state = f.state();
        assert_eq!(
            state
                .appended
                .iter()
                .map(|(a, b, _)| (*a, *b))
                .collect::<Vec<_>>(),
            vec![(1, 5), (6, 6)]
        );
    }

    #[test]
    fn without_metrics_a_leader_makes_no_claim() {
        let f = bare();
        f.appended(1, 3);
        assert_eq!(f.stamp(3, 1), None);
        assert_eq!(f.leader_bound(), None);
    }
}
