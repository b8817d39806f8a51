//! Consul sessions and locks, across shards.
//!
//! A session is one row under an internal key, in the shard its id hashes to; a lock is
//! recorded in the locked key's own row (`Session`, `LockIndex`), in the key's shard. The two
//! usually live in different shards, so taking and ending are ordered to stay safe without a
//! cluster-wide lock:
//!
//! - **acquire**: first the session notes the key (`Hold`, refused once the session is
//!   invalidated), then the key's shard takes the lock (refused to a session it knows ended);
//! - **end** (destroy, TTL run out): first the session is marked invalidated (no `Hold` gets
//!   through after that), then every key it noted is sent `SessionEnded`, which releases the
//!   lock if the session holds it (or deletes the key) and makes that shard refuse the session
//!   from then on; then the row is removed.
//!
//! An acquire that noted its key before the end is then either applied before `SessionEnded`
//! reaches the key's shard (and released by it) or refused after; one that comes after the
//! invalidation is refused at `Hold`. No lock outlives its session. The leader of each shard
//! checks the sessions stored there every second: it ends those whose TTL ran out (twice
//! the TTL after their last renewal, Consul's grace) and finishes ends that a crash cut short.

use crate::request::Records;
use crate::{Blocking, ClusterError, Node, ReadMeta};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use trireme_raft::ReadMode;
use trireme_storage::WatchTarget;
use trireme_types::session::{SessionBehavior, SessionState, session_key, sessions_prefix};
use trireme_types::{Command, ErrorCode, LockOp, LockOutcome, Record, SessionOp, TriremeError};

/// How often each shard leader looks for sessions to end.
const SESSION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What a new session is to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// Consul's `Name`.
    pub name: String,
    /// The node it belongs to (Consul's `Node`); this node's name when not given.
    pub node: Option<String>,
    /// How long a lock it held stays unavailable after it ends.
    pub lock_delay: Duration,
    /// What its end does to the keys it holds.
    pub behavior: SessionBehavior,
    /// Its TTL, if any.
    pub ttl: Option<Duration>,
}

/// A session as stored, with the indexes of its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session.
    pub state: SessionState,
    /// Log index of the write that created it.
    pub create_index: u64,
    /// Log index of its last change (a renewal, a key noted).
    pub modify_index: u64,
}

impl SessionInfo {
    fn of(record: &Record) -> Option<Self> {
        let state = SessionState::decode(&record.value)?;
        Some(SessionInfo {
            state,
            create_index: record.create_index,
            modify_index: record.modify_index,
        })
    }
}

/// Whether `id` is a UUID in text (what Consul accepts as a session id).
pub fn is_session_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

fn invalid_session(id: &str) -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::InvalidSession,
        format!("invalid session \"{id}\""),
    ))
}

impl Node {
    /// Applies `op` to session `id`'s row: the row after it, or `None` when there is no
    /// valid session to change.
    async fn session_op(
        &self,
        id: &str,
        op: SessionOp,
    ) -> Result<Option<SessionInfo>, ClusterError> {
        let key = session_key(id);
        let command = Command::Session {
            key: key.clone(),
            op,
        };
        let Records(mut rows) = self.write_unchecked(&key, command).await?;
        Ok(rows.pop().flatten().as_ref().and_then(SessionInfo::of))
    }

    /// Creates a session (Consul's `PUT /v1/session/create`).
    pub async fn session_create(
        &self,
        request: SessionRequest,
    ) -> Result<SessionInfo, ClusterError> {
        let state = SessionState {
            id: crate::new_uuid(),
            name: request.name,
            node: request.node.unwrap_or_else(|| self.config.name.clone()),
            lock_delay_ms: u64::try_from(request.lock_delay.as_millis()).unwrap_or(u64::MAX),
            behavior: request.behavior,
            ttl_ms: request
                .ttl
                .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            renewed_at_ms: crate::now_ms(),
            invalidated: false,
            held: Vec::new(),
        };
        let id = state.id.clone();
        self.session_op(&id, SessionOp::Create(state))
            .await?
            .ok_or_else(|| ClusterError::Internal(format!("session {id} was not created")))
    }

    /// Session `id` until its end is complete, with the index of its row (the row's
    /// ModifyIndex, or its shard's removal watermark once the row is gone, as for any key);
    /// with `block`, once that index passes the client's, or when the wait is over.
    ///
    /// A session being ended (invalidated, its locks not yet all released) is still shown:
    /// in Consul a session's end and the release of its locks are one write, so a client
    /// that sees the session gone may rely on its locks being free. Here they are several
    /// writes on several shards, and the row goes last.
    pub async fn session_info(
        &self,
        id: &str,
        mode: ReadMode,
        block: Option<Blocking>,
    ) -> Result<(Option<SessionInfo>, ReadMeta), ClusterError> {
        let key = session_key(id);
        let (record, meta) = self
            .read_or_block(WatchTarget::Key(key.clone()), block, || {
                self.get_unchecked(&key, mode)
            })
            .await?;
        Ok((record.as_ref().and_then(SessionInfo::of), meta))
    }

    /// Every session whose end is not complete (see [`Node::session_info`]), in id order,
    /// with the index of the sessions' rows (a renewal moves it too); with `block`, once
    /// that index passes the client's, or when the wait is over.
    pub async fn session_list(
        &self,
        mode: ReadMode,
        block: Option<Blocking>,
    ) -> Result<(Vec<SessionInfo>, ReadMeta), ClusterError> {
        let prefix = sessions_prefix();
        let (rows, meta) = self
            .read_or_block(WatchTarget::Prefix(prefix.clone()), block, || {
                self.list_indexed(&prefix, std::ops::Bound::Unbounded, mode, usize::MAX)
            })
            .await?;
        let live = rows
            .iter()
            .filter_map(|(_, r)| SessionInfo::of(r))
            .collect();
        Ok((live, meta))
    }

    /// Restarts session `id`'s TTL; `None` when it does not exist or has ended.
    pub async fn session_renew(&self, id: &str) -> Result<Option<SessionInfo>, ClusterError> {
        self.session_op(id, SessionOp::Renew).await
    }

    /// Ends session `id` (Consul's destroy): every lock it holds is released (or its key
    /// deleted), on whatever shard the key lives. Ending a session that does not exist does
    /// nothing.
    pub async fn session_destroy(&self, id: &str) -> Result<(), ClusterError> {
        self.end_session(id, false).await
    }

    /// The end of a session (see the module's doc); with `only_if_expired`, only if its TTL
    /// ran out by the time the invalidation applies.
    async fn end_session(&self, id: &str, only_if_expired: bool) -> Result<(), ClusterError> {
        let Some(session) = self
            .session_op(id, SessionOp::Invalidate { only_if_expired })
            .await?
        else {
            return Ok(());
        };
        let state = session.state;
        for key in &state.held {
            let op = LockOp::SessionEnded {
                session: Bytes::copy_from_slice(id.as_bytes()),
                delete: state.behavior == SessionBehavior::Delete,
                lock_delay_ms: state.lock_delay_ms,
            };
            self.lock_key(key.clone(), op).await?;
        }
        self.session_op(id, SessionOp::Remove).await?;
        tracing::debug!(session = id, keys = state.held.len(), "session ended");
        Ok(())
    }

    /// Takes the lock on `key` for `session` and writes the value (Consul's `?acquire=`):
    /// `false` while another session holds it or its lock-delay runs.
    pub async fn acquire(
        &self,
        key: Bytes,
        value: Bytes,
        flags: u64,
        session: &str,
    ) -> Result<bool, ClusterError> {
        self.check_key(&key)?;
        self.config.limits.check_value(&value)?;
        self.note_lock(session, key.clone()).await?;
        let op = LockOp::Acquire {
            session: Bytes::copy_from_slice(session.as_bytes()),
            value,
            flags,
        };
        match self.lock_key(key, op).await? {
            LockOutcome::Done(taken) => Ok(taken),
            LockOutcome::SessionEnded => Err(invalid_session(session)),
        }
    }

    /// Notes in session `session`'s row that it is about to lock `key`: the first step of an
    /// acquire, here or in a transaction (whose `Lock` command is the second).
    pub async fn note_lock(&self, session: &str, key: Bytes) -> Result<(), ClusterError> {
        if !is_session_id(session) {
            return Err(invalid_session(session));
        }
        match self.session_op(session, SessionOp::Hold { key }).await? {
            Some(_) => Ok(()),
            None => Err(invalid_session(session)),
        }
    }

    /// Gives the lock on `key` back and writes the value, if `session` holds it (Consul's
    /// `?release=`).
    pub async fn release(
        &self,
        key: Bytes,
        value: Bytes,
        flags: u64,
        session: &str,
    ) -> Result<bool, ClusterError> {
        self.check_key(&key)?;
        self.config.limits.check_value(&value)?;
        if !is_session_id(session) {
            return Err(invalid_session(session));
        }
        let op = LockOp::Release {
            session: Bytes::copy_from_slice(session.as_bytes()),
            value,
            flags,
        };
        match self.lock_key(key, op).await? {
            LockOutcome::Done(released) => Ok(released),
            LockOutcome::SessionEnded => Ok(false),
        }
    }

    async fn lock_key(&self, key: Bytes, op: LockOp) -> Result<LockOutcome, ClusterError> {
        let command = Command::Lock {
            key: key.clone(),
            op,
        };
        self.write_key(&key, command).await
    }
}

pub(crate) fn spawn_session_reaper(node: &Arc<Node>) {
    crate::node::spawn_periodic(
        Arc::downgrade(node),
        SESSION_CHECK_INTERVAL,
        end_due_sessions,
    );
}

/// On every shard this node leads: ends the sessions whose TTL ran out, and finishes ends
/// that were cut short.
async fn end_due_sessions(node: Arc<Node>) {
    let prefix = sessions_prefix();
    for group in node.local_groups() {
        if !group.is_leader() {
            continue;
        }
        let shard = group.shard();
        let now = crate::now_ms();
        let rows = match node
            .storage
            .scan(shard, &prefix, None, usize::MAX, now, None)
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(shard = shard.0, error = %e, "session scan failed");
                continue;
            }
        };
        for (_, record) in rows {
            let Some(info) = SessionInfo::of(&record) else {
                continue;
            };
            let state = info.state;
            if !state.invalidated && !state.expired(now) {
                continue;
            }
            if let Err(e) = node.end_session(&state.id, !state.invalidated).await {
                tracing::debug!(session = state.id, error = %e, "session end not finished");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_version_4_uuids() {
        let id = crate::new_uuid();
        assert!(is_session_id(&id), "{id}");
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, crate::new_uuid());
        for bad in [
            "",
            "not-a-uuid",
            "adf4238a-882b-9ddc-4a9d-5b6758e4159",
            "adf4238a_882b-9ddc-4a9d-5b6758e4159e",
        ] {
            assert!(!is_session_id(bad), "{bad}");
        }
    }
}
