//! Transactions across shards: two-phase commit over the shards' Raft groups.
//!
//! A transaction whose keys live in several shards is *prepared* in each of them
//! ([`crate::Command::Prepare`]): the shard judges the transaction's conditions on its own keys
//! and, if they hold, writes an *intent* on every one of those keys instead of changing them.
//! An intent holds the key's part of the transaction (its commands, in order) and names the
//! transaction's *record*, a row in one of the participating shards that the first of them
//! writes as it prepares. The transaction commits when its record says so
//! ([`crate::Command::Decide`]), one entry of one log; each shard then *resolves* its intents
//! ([`crate::Command::Resolve`]): applies their commands, or drops them.
//!
//! While an intent is on a key, every other command on that key is refused unapplied
//! ([`crate::CommandResult::InTransaction`]) and every read of it answers
//! [`crate::ErrorCode::KeyInTransaction`]: the node that asked waits for the intent to go and
//! asks again, so no reader sees a value the transaction may still change, and no writer
//! changes a key whose condition the transaction relies on. A transaction has until its
//! record's `expires_ms` to commit; past it, whoever meets one of its intents may abort it
//! (an abort written to a pending record, or a record written aborted where none is yet),
//! and then resolve the intent: a coordinator that died never leaves a key held for longer.
//!
//! Intents and records are internal rows. An intent's key carries its key's slot (as a
//! collection's member rows do, see [`crate::collection`]), so it stays with the key through
//! splits and moves; a record's key is routed like any key, and the coordinator picks the
//! transaction's id so that its record lands in the first participant's shard.

use crate::Command;
use crate::session::INTERNAL_KEY_PREFIX;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What follows [`INTERNAL_KEY_PREFIX`] in every intent's key.
const INTENTS: &[u8] = b"I/";
/// What follows [`INTERNAL_KEY_PREFIX`] in every transaction record's key.
const RECORDS: &[u8] = b"txn/";
/// What follows [`INTERNAL_KEY_PREFIX`] in every prefix hold's key.
const HOLDS: &[u8] = b"H/";

/// The most keys one shard's part of a transaction may hold through its prefix deletes: the
/// prepare and resolve of each are one log entry, which must stay small enough to commit
/// within the transaction's lease. A prepare past it answers `TooLarge`.
pub const MAX_PREFIX_DELETE_KEYS: u64 = 10_000;

/// The first bytes of every intent's key.
pub fn intents_prefix() -> Bytes {
    let mut out = INTERNAL_KEY_PREFIX.to_vec();
    out.extend_from_slice(INTENTS);
    Bytes::from(out)
}

/// The key of the intent on `key`: the prefix, `key`'s slot (2 bytes), then `key`.
pub fn intent_key(key: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(INTERNAL_KEY_PREFIX.len() + INTENTS.len() + 2 + key.len());
    out.extend_from_slice(INTERNAL_KEY_PREFIX);
    out.extend_from_slice(INTENTS);
    out.extend_from_slice(&crate::slot::key_slot(key).to_be_bytes());
    out.extend_from_slice(key);
    Bytes::from(out)
}

/// The key an intent's key is on; `None` for any other key.
pub fn intent_target(intent_key: &[u8]) -> Option<&[u8]> {
    intent_key
        .strip_prefix(INTERNAL_KEY_PREFIX)?
        .strip_prefix(INTENTS)?
        .get(2..)
}

/// The slot written in an intent's key; `None` for any other key.
pub fn intent_slot(key: &[u8]) -> Option<u16> {
    let rest = key
        .strip_prefix(INTERNAL_KEY_PREFIX)?
        .strip_prefix(INTENTS)?;
    let slot: [u8; 2] = rest.get(..2)?.try_into().ok()?;
    Some(u16::from_be_bytes(slot))
}

/// Whether `key` is an intent's, a prefix hold's or a transaction record's.
pub fn is_txn_row(key: &[u8]) -> bool {
    key.strip_prefix(INTERNAL_KEY_PREFIX).is_some_and(|rest| {
        rest.starts_with(INTENTS) || rest.starts_with(RECORDS) || rest.starts_with(HOLDS)
    })
}

/// The first bytes of every prefix hold's key.
pub fn holds_prefix() -> Bytes {
    let mut out = INTERNAL_KEY_PREFIX.to_vec();
    out.extend_from_slice(HOLDS);
    Bytes::from(out)
}

/// The key of transaction `txn`'s hold on `prefix`: a row in every shard whose keys under
/// `prefix` the transaction reads or deletes as a whole (`get-tree`, `delete-tree`), which
/// keeps every other write out from under it until the transaction is resolved (reads of
/// one prefix share it). Unlike an intent's, its key names no slot: a split leaves it in
/// both shards, and it is resolved in every shard.
pub fn hold_key(txn: u128, prefix: &[u8]) -> Bytes {
    let mut out = holds_prefix().to_vec();
    out.extend_from_slice(&txn.to_be_bytes());
    out.extend_from_slice(prefix);
    Bytes::from(out)
}

/// The transaction and the prefix a hold's key names; `None` for any other key.
pub fn hold_target(key: &[u8]) -> Option<(u128, &[u8])> {
    let rest = key.strip_prefix(INTERNAL_KEY_PREFIX)?.strip_prefix(HOLDS)?;
    let txn: [u8; 16] = rest.get(..16)?.try_into().ok()?;
    Some((u128::from_be_bytes(txn), &rest[16..]))
}

/// Whether `key` is a transaction record's.
pub fn is_record_key(key: &[u8]) -> bool {
    key.strip_prefix(INTERNAL_KEY_PREFIX)
        .is_some_and(|rest| rest.starts_with(RECORDS))
}

/// The transaction whose record is at `key`; `None` for any other key.
pub fn record_txn(key: &[u8]) -> Option<u128> {
    let hex = key
        .strip_prefix(INTERNAL_KEY_PREFIX)?
        .strip_prefix(RECORDS)?;
    u128::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// The first bytes of every transaction record's key.
pub fn records_prefix() -> Bytes {
    let mut out = INTERNAL_KEY_PREFIX.to_vec();
    out.extend_from_slice(RECORDS);
    Bytes::from(out)
}

/// The key of transaction `txn`'s record.
pub fn record_key(txn: u128) -> Bytes {
    let mut out = records_prefix().to_vec();
    out.extend_from_slice(format!("{txn:032x}").as_bytes());
    Bytes::from(out)
}

/// Where a transaction stands, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    /// Prepared somewhere, not decided: its intents hold their keys.
    Pending,
    /// Committed: its intents are to be applied.
    Committed,
    /// Aborted (by its coordinator, or by another request after it expired): its intents
    /// are to be dropped.
    Aborted,
}

/// A transaction record, the value of the row at [`record_key`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    /// Where it stands.
    pub state: TxnState,
    /// Unix milliseconds (the coordinator's clock) after which a pending transaction may be
    /// aborted by anyone.
    pub expires_ms: u64,
    /// Every key that holds (or will hold) an intent of it, so that its record's shard can
    /// resolve them all when its coordinator is gone.
    pub keys: Vec<Bytes>,
}

impl TxnRecord {
    /// Its stored form.
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).unwrap_or_default())
    }

    /// Reads a stored record.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        postcard::from_bytes(bytes).ok()
    }
}

/// An intent, the value of the row at [`intent_key`] of its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The transaction.
    pub txn: u128,
    /// The key of its record.
    pub record: Bytes,
    /// When the transaction may be aborted by others (see [`TxnRecord::expires_ms`]).
    pub expires_ms: u64,
    /// The transaction's commands on this key, in order: applied when it commits.
    pub commands: Vec<Command>,
}

impl Intent {
    /// Its stored form.
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).unwrap_or_default())
    }

    /// Reads a stored intent.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        postcard::from_bytes(bytes).ok()
    }
}

/// A [`crate::Command::ResolveMany`]'s part for one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The transaction.
    pub txn: u128,
    /// Keys that may hold its intents, and keys of holds ([`hold_key`]) it may have.
    pub keys: Vec<Bytes>,
    /// Apply (true) or drop.
    pub commit: bool,
}

/// How a [`crate::Command::Decide`] wants the transaction to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// The coordinator commits: a pending record becomes committed, unless it expired by
    /// the command's time (then aborted).
    Commit,
    /// The coordinator gives up (a condition failed, or another transaction held a key).
    Abort,
    /// Another request met an intent of the transaction after it expired: abort it unless
    /// it was decided already, or it has not expired by the command's time.
    AbortIfExpired,
    /// The coordinator commits a pending record whatever its lease: only a command that
    /// writes the record ever aborts it, so a commit that comes late to a record nobody
    /// aborted is as safe as one on time (a busy node's decision may take longer than the
    /// lease; its prepares may not). From protocol 4.
    CommitIfPending,
}

/// What a shard answers to a [`crate::Command::Prepare`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PrepareOutcome {
    /// Its conditions hold and its intents are written: the shard is ready to commit. With
    /// what each of its commands returned as it was judged: what the resolve will return,
    /// but for the indexes of its writes (the prepare's, not the resolve's). The coordinator
    /// answers from them for a key whose intent somebody else resolved (empty when the
    /// prepare was sent twice).
    Ready(Vec<crate::CommandResult>),
    /// The condition at this position of the prepared commands failed; nothing written.
    Failed(u32),
    /// This key holds another transaction's intent; nothing written.
    Busy(Bytes),
    /// The transaction was aborted already, or expired; nothing written.
    Aborted,
    /// A prefix delete found more keys than a transaction may hold in one shard (this many
    /// at least); nothing written. From protocol 4.
    TooLarge(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intent_key_stays_in_its_keys_slot_and_names_it() {
        for key in [&b"app/config"[..], b"{user1}:balance", b""] {
            let intent = intent_key(key);
            assert_eq!(crate::key_slot(&intent), crate::key_slot(key));
            assert_eq!(intent_target(&intent), Some(key));
            assert!(crate::session::is_internal_key(&intent));
        }
        assert_eq!(intent_target(&record_key(7)), None);
        assert_eq!(record_txn(&record_key(u128::MAX - 7)), Some(u128::MAX - 7));
        assert!(is_record_key(&record_key(7)) && !is_record_key(&intent_key(b"k")));
        assert_eq!(record_txn(b"app/config"), None);
        assert_eq!(intent_slot(b"app/config"), None);
        let hold = hold_key(7, b"vault/");
        assert_eq!(hold_target(&hold), Some((7, &b"vault/"[..])));
        assert!(is_txn_row(&hold) && crate::session::is_internal_key(&hold));
        assert_eq!(hold_target(&intent_key(b"vault/")), None);
        assert_eq!(intent_target(&hold), None);
    }

    #[test]
    fn records_and_intents_read_back() {
        let record = TxnRecord {
            state: TxnState::Pending,
            expires_ms: 12,
            keys: vec![Bytes::from_static(b"a")],
        };
        assert_eq!(TxnRecord::decode(&record.encode()), Some(record));
        let intent = Intent {
            txn: u128::MAX - 3,
            record: record_key(u128::MAX - 3),
            expires_ms: 99,
            commands: vec![Command::Delete {
                keys: vec![Bytes::from_static(b"a")],
                cas: None,
            }],
        };
        assert_eq!(Intent::decode(&intent.encode()), Some(intent));
    }
}
