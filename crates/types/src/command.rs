//! Commands that go through a shard's Raft log, and what applying them returns.
//!
//! A command is applied on every replica in log order, so applying must be deterministic:
//! time comes from [`LogCommand::now_ms`] (the proposer's clock), never from the replica's.

use crate::error::ErrorCode;
use crate::record::Record;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A command with the time at which it was proposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCommand {
    /// The proposing leader's wall clock, Unix milliseconds. Expiry decisions use it.
    pub now_ms: u64,
    /// What to do.
    pub command: Command,
}

impl fmt::Display for LogCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.command.name(), self.now_ms)
    }
}

/// When a put may happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PutCondition {
    /// Always.
    Always,
    /// Only if the key does not exist (Redis `NX`, Consul `?cas=0`).
    IfAbsent,
    /// Only if the key exists (Redis `XX`).
    IfPresent,
    /// Only if the key exists with this `ModifyIndex` (Consul `?cas=N`, N > 0).
    IfModifyIndex(u64),
    /// Unless the key holds a Redis collection (a hash): the HTTP APIs' plain writes, which
    /// must not replace one by mistake, and Redis's `SET ... GET` and `GETSET`, which
    /// refuse one (`WRONGTYPE`) before writing.
    IfNotCollection,
    /// Only if the key exists and holds a string (`SET ... XX GET`).
    IfPresentString,
}

/// What a write does to a key's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TtlUpdate {
    /// Remove any expiry (a plain `SET`, `PERSIST`, a Consul PUT).
    Clear,
    /// Keep whatever expiry the key has (`SET ... KEEPTTL`, `INCR`).
    Keep,
    /// Expire at this Unix millisecond.
    At(u64),
}

/// A change to one shard's keys. Every key in one command belongs to the same shard; the
/// router splits multi-key requests per shard, so each command is atomic within its shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Write one key.
    Put {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// Client flags; `None` keeps the existing flags (0 for a new key).
        flags: Option<u64>,
        /// When the write may happen.
        condition: PutCondition,
        /// What happens to the expiry.
        ttl: TtlUpdate,
        /// Whether the result carries the record the write replaced (`SET ... GET`, a
        /// transaction's answer). Without it, a write whose condition holds is blind: it
        /// reads nothing of the old record beyond what the key index keeps.
        return_previous: bool,
    },
    /// Write several keys at once (`MSET`).
    PutMany {
        /// Key-value pairs, in order; a later pair wins over an earlier one with the same key.
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// Delete keys; with `cas`, only a single key whose `ModifyIndex` matches.
    Delete {
        /// The keys.
        keys: Vec<Bytes>,
        /// Consul `?cas=N`.
        cas: Option<u64>,
    },
    /// Delete every key that starts with the prefix (Consul `?recurse`), within the shard.
    DeletePrefix {
        /// The prefix; empty deletes the shard's every key.
        prefix: Bytes,
    },
    /// Add to an integer value, creating it at 0.
    Incr {
        /// The key.
        key: Bytes,
        /// How much to add.
        delta: i64,
    },
    /// Change the expiry of an existing key.
    SetTtl {
        /// The key.
        key: Bytes,
        /// The new expiry.
        ttl: TtlUpdate,
    },
    /// Remove keys that have expired at `now_ms`; keys not expired (rewritten since) stay.
    Reap {
        /// Candidates found by the leader's expiry scan.
        keys: Vec<Bytes>,
    },
    /// Several clients' commands proposed as one log entry, applied in order. The proposer
    /// only batches commands that touch different keys, so every change of a key still gets
    /// its own `ModifyIndex`.
    Batch(Vec<Command>),
    /// Give the slots from `at_slot` to the end of this shard's range to the new shard
    /// `child`. Applying it moves those rows out of this shard on every replica (a replica
    /// that voted in this shard when it was split keeps them as the new shard's first state)
    /// and from then on refuses commands for those slots with [`CommandResult::Moved`].
    Split {
        /// The first slot the new shard owns.
        at_slot: u16,
        /// The new shard's id.
        child: u32,
        /// This shard's inclusive slot range before the split, as the proposer knew it: a
        /// replica whose shard owns another range by then (split already) ignores the entry.
        range: (u16, u16),
    },
    /// Change the string at one key in place, decided on each replica from the value it
    /// holds (`APPEND`, `SETRANGE`, `INCRBYFLOAT`, `GETDEL`, `GETEX`).
    Edit {
        /// The key.
        key: Bytes,
        /// The change.
        edit: StringEdit,
    },
    /// Inside a [`Command::Transaction`]: `check` must hold of `key` at this point, or the
    /// whole transaction is undone.
    Check {
        /// The key.
        key: Bytes,
        /// What must hold.
        check: KeyCheck,
    },
    /// Read keys as they are at this point of the log: only inside a [`Command::Transaction`],
    /// where a read must see the transaction's earlier writes (`GET` after `MULTI`).
    Read {
        /// The keys.
        keys: Vec<Bytes>,
    },
    /// A transaction (Redis `MULTI` ... `EXEC`, Consul `/v1/txn`), all in this one entry:
    /// the watches are checked first (Redis `WATCH`), then the commands applied in order; a
    /// [`Command::Check`] among them is judged on the state the commands before it left (a
    /// Consul `cas` or `check-index`). If any check fails, nothing of the transaction is
    /// applied, and the result names the check: a watch by its position, a `Check` by the
    /// number of watches plus its position among the commands.
    Transaction {
        /// Keys and what must hold of each before any command is applied.
        watches: Vec<(Bytes, KeyCheck)>,
        /// The queued commands; each answers on its own, as in a batch.
        commands: Vec<Command>,
    },
    /// A Consul lock operation on one key (`?acquire=`, `?release=`, a session's end). Inside
    /// a [`Command::Transaction`] it is a condition too: one that answers `false` undoes the
    /// transaction, as a failed [`Command::Check`] does.
    Lock {
        /// The key.
        key: Bytes,
        /// What to do.
        op: LockOp,
    },
    /// A change to one Consul session's row, kept under the internal key
    /// [`crate::session::session_key`] of its id.
    Session {
        /// The session's internal key.
        key: Bytes,
        /// What to do.
        op: SessionOp,
    },
    /// A Redis hash command on the hash at `key` (creating it, or refusing a key of another
    /// type with [`ErrorCode::WrongType`]). Answered with [`CommandResult::Hash`].
    Hash {
        /// The hash's key.
        key: Bytes,
        /// What to do.
        op: HashOp,
    },
    /// A Redis set command on the set at `key` (creating it, or refusing a key of another
    /// type with [`ErrorCode::WrongType`]). Answered with [`CommandResult::SetMembers`].
    SetMembers {
        /// The set's key.
        key: Bytes,
        /// What to do.
        op: SetOp,
    },
    /// A Redis list command on the list at `key` (creating it, or refusing a key of another
    /// type with [`ErrorCode::WrongType`]). Answered with [`CommandResult::List`].
    List {
        /// The list's key.
        key: Bytes,
        /// What to do.
        op: ListOp,
    },
    /// A Redis sorted set command on the sorted set at `key` (creating it, or refusing a key
    /// of another type with [`ErrorCode::WrongType`]). Answered with
    /// [`CommandResult::SortedSet`].
    SortedSet {
        /// The sorted set's key.
        key: Bytes,
        /// What to do.
        op: crate::SortedSetOp,
    },
    /// Prepare this shard's part of a transaction across shards (see [`crate::txn`]): judge
    /// `commands` as a [`Command::Transaction`] would, without applying them, and if every
    /// condition holds write an intent on each of their keys. The shard that holds the
    /// transaction's record (`creates_record`) writes it too, pending. Answered with
    /// [`CommandResult::Prepared`].
    Prepare {
        /// The transaction.
        txn: u128,
        /// The key of its record.
        record: Bytes,
        /// Unix milliseconds after which it may be aborted by others; a prepare applied
        /// after it is refused.
        expires_ms: u64,
        /// Whether this shard writes the record (with `all_keys`).
        creates_record: bool,
        /// Every key of the whole transaction, kept in its record.
        all_keys: Vec<Bytes>,
        /// This shard's commands, in the transaction's order.
        commands: Vec<Command>,
    },
    /// Decide a transaction: change its record (see [`crate::txn::Decision`]). Answered with
    /// [`CommandResult::Decided`]: where the transaction stands after.
    Decide {
        /// The key of its record.
        record: Bytes,
        /// What the proposer wants.
        decision: crate::txn::Decision,
    },
    /// Resolve a decided transaction's intents on `keys`: apply their commands (`commit`) or
    /// drop them. A key with no intent of `txn` is left alone, so resolving twice is
    /// harmless. Answered with [`CommandResult::Resolved`].
    Resolve {
        /// The transaction.
        txn: u128,
        /// Keys that may hold its intents.
        keys: Vec<Bytes>,
        /// Apply (true) or drop.
        commit: bool,
    },
    /// Delete finished transactions' records, once every intent of them is resolved.
    Forget {
        /// The keys of their records.
        records: Vec<Bytes>,
    },
    /// Resolve the intents (and prefix holds) of decided transactions, several at once: as
    /// [`Command::Resolve`], but each key's commands are applied at the index of the prepare
    /// that wrote its intent, so what the prepare judged (indexes included) is what they
    /// return, and the coordinator can answer its client before they are resolved.
    /// Answered with [`CommandResult::Done`]. From protocol 4.
    ResolveMany {
        /// The slots the sender believes the shard owns: a shard that owns others (split
        /// since) applies nothing and answers [`CommandResult::Moved`], since a hold's key
        /// names no slot and would not be refused by itself.
        slots: Option<(u16, u16)>,
        /// Which transactions, on which keys (a hold's internal key for a held prefix).
        resolutions: Vec<crate::txn::Resolution>,
    },
    /// Read every key under `prefix` as it is at this point of the log (Consul's `get-tree`
    /// in a transaction), in key order. Answered with [`CommandResult::Entries`]. From
    /// protocol 4.
    ReadPrefix {
        /// The prefix; internal keys are left out unless it is one.
        prefix: Bytes,
    },
    /// Inside a [`Command::Prepare`] (first among its commands): the shard owns exactly
    /// `slots` (and the record's key, if it writes the record), or the prepare is refused
    /// unapplied with [`CommandResult::Moved`]. A prefix names no key, so this is what keeps
    /// a coordinator whose map is older than a split from preparing half of a prefix. It also
    /// marks a prepare of protocol 4: one that removes its keys' expired records and whose
    /// intents are resolved as judged. From protocol 4.
    OwnsSlots {
        /// The first and last slot.
        slots: (u16, u16),
    },
}

/// An end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// The head (`LPUSH`, `LPOP`, `LEFT`).
    Left,
    /// The tail (`RPUSH`, `RPOP`, `RIGHT`).
    Right,
}

/// A change to, or inside a transaction a read of, one list: see [`Command::List`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListOp {
    /// Push elements at an end, one after the other (`LPUSH`, `RPUSH`; with `only_existing`,
    /// `LPUSHX`, `RPUSHX`); answers the length after.
    Push {
        /// The elements.
        elements: Vec<Bytes>,
        /// Where.
        end: End,
        /// Only onto a list that exists.
        only_existing: bool,
        /// The most elements the list may have after the change (the proposer's limit).
        max_len: u64,
    },
    /// Remove and answer up to `count` elements from an end (`LPOP`, `RPOP`);
    /// [`ListAnswer::Popped`] with nothing when there is no list.
    Pop {
        /// Where.
        end: End,
        /// How many.
        count: u64,
    },
    /// Pop one element from the first non-empty list of this key and `others` (`BLPOP`,
    /// `BRPOP` once a list has one); answers the key and the element.
    PopFirst {
        /// Where.
        end: End,
        /// The other lists, in the same slot, in order.
        others: Vec<Bytes>,
    },
    /// Overwrite the element at `index` (`LSET`); negative counts from the tail.
    Set {
        /// The index.
        index: i64,
        /// The new element.
        element: Bytes,
    },
    /// Keep only the elements from `start` to `stop` (`LTRIM`), as Redis reads the bounds.
    Trim {
        /// First index kept.
        start: i64,
        /// Last index kept.
        stop: i64,
    },
    /// Remove elements equal to `element` (`LREM`): `count` > 0 the first that many from the
    /// head, < 0 from the tail, 0 all; answers how many went.
    Remove {
        /// How many and from where.
        count: i64,
        /// The element.
        element: Bytes,
    },
    /// Insert `element` before or after the first `pivot` (`LINSERT`); answers the length
    /// after, -1 without the pivot, 0 without the list.
    Insert {
        /// Before the pivot (else after).
        before: bool,
        /// The element to find.
        pivot: Bytes,
        /// The element to insert.
        element: Bytes,
        /// As in [`ListOp::Push`].
        max_len: u64,
    },
    /// Pop an element from one end of this list and push it onto an end of the list at
    /// `to`, in the same slot (`LMOVE`, `RPOPLPUSH`); answers it, or nothing when empty.
    Move {
        /// The list it goes to.
        to: Bytes,
        /// Where it leaves this list.
        from: End,
        /// Where it joins the other.
        onto: End,
        /// As in [`ListOp::Push`], for `to`.
        max_len: u64,
    },
    /// A read at this point of a transaction (`LRANGE` after `MULTI`).
    Read(ListRead),
    /// Append `elements` as the list's elements from index `from` on (a piece of a
    /// restored backup): only when the list has exactly `from` elements, so that a piece
    /// sent twice is appended once; answers the length.
    Restore {
        /// The elements.
        elements: Vec<Bytes>,
        /// The index of the first of them.
        from: u64,
        /// As in [`ListOp::Push`].
        max_len: u64,
    },
}

/// A read of one list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListRead {
    /// The length (`LLEN`): [`ListAnswer::Count`].
    Len,
    /// Elements from `start` to `stop`, as Redis reads the bounds (`LRANGE`):
    /// [`ListAnswer::Elements`].
    Range {
        /// First index.
        start: i64,
        /// Last index.
        stop: i64,
    },
    /// The element at `index` (`LINDEX`): [`ListAnswer::Elements`], empty when out of range.
    Index(i64),
    /// Indexes of `element` (`LPOS`): the `rank`-th match on (negative: from the tail), at
    /// most `count` of them (0: all), looking at `max_len` elements at most (0: all):
    /// [`ListAnswer::Positions`].
    Positions {
        /// The element.
        element: Bytes,
        /// Which match first.
        rank: i64,
        /// How many.
        count: u64,
        /// How far to look.
        max_len: u64,
    },
}

/// What a [`Command::List`] or a list read answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListAnswer {
    /// A length or a number of elements removed.
    Count(u64),
    /// `LINSERT`'s answer: the length, or -1 / 0.
    Int(i64),
    /// Elements, in order.
    Elements(Vec<Bytes>),
    /// The key an element was popped from, and the element (none: every list was empty).
    Popped(Option<(Bytes, Bytes)>),
    /// Indexes.
    Positions(Vec<u64>),
    /// Done (`LSET`, `LTRIM`).
    Done,
}

/// A change to, or inside a transaction a read of, one set: see [`Command::SetMembers`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetOp {
    /// Add members (`SADD`); answers how many were new. A set may not grow past
    /// `max_members` (the proposer's limit, carried so every replica decides alike).
    Add {
        /// The members.
        members: Vec<Bytes>,
        /// The most members the set may have after the change.
        max_members: u64,
    },
    /// Remove members (`SREM`), and the set with its last one; answers how many went.
    Remove {
        /// The members.
        members: Vec<Bytes>,
    },
    /// Remove and answer up to `count` members chosen by `seed` (`SPOP`): the proposer draws
    /// the seed, so every replica removes the same members.
    Pop {
        /// How many.
        count: u64,
        /// Chooses the members.
        seed: u64,
    },
    /// Move `member` from this set to the set at `to`, in the same slot (`SMOVE`); answers
    /// 1 if it moved.
    Move {
        /// The set it goes to.
        to: Bytes,
        /// The member.
        member: Bytes,
        /// As in [`SetOp::Add`], for `to`.
        max_members: u64,
    },
    /// Replace this key with the combination of the `sources` sets (`SINTERSTORE`,
    /// `SUNIONSTORE`, `SDIFFSTORE`), all in this key's slot; answers its size.
    Store {
        /// How the sources combine.
        combine: SetCombine,
        /// The sets, the first one first (it matters for a difference).
        sources: Vec<Bytes>,
        /// As in [`SetOp::Add`].
        max_members: u64,
    },
    /// A read at this point of a transaction (`SISMEMBER` after `MULTI`).
    Read(SetRead),
}

/// How several sets combine into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetCombine {
    /// Members of every set (`SINTER`).
    Intersection,
    /// Members of any set (`SUNION`).
    Union,
    /// Members of the first set in none of the others (`SDIFF`).
    Difference,
}

/// A read of one set (or, combining, of several in its slot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetRead {
    /// Whether each member is in the set (`SISMEMBER`, `SMISMEMBER`): [`SetAnswer::Flags`].
    Contains {
        /// The members.
        members: Vec<Bytes>,
    },
    /// The number of members (`SCARD`): [`SetAnswer::Count`].
    Len,
    /// Members in order after `after`, at most `limit` (`SMEMBERS`, `SSCAN`,
    /// `SRANDMEMBER`): [`SetAnswer::Members`].
    Members {
        /// Start after this member.
        after: Option<Bytes>,
        /// The most members to return.
        limit: u64,
    },
    /// The combination of this set with `others` (`SINTER`, `SUNION`, `SDIFF`), in order:
    /// [`SetAnswer::Members`].
    Combine {
        /// How they combine.
        combine: SetCombine,
        /// The other sets, in the same slot.
        others: Vec<Bytes>,
    },
}

/// What a [`Command::SetMembers`] or a set read answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetAnswer {
    /// A number of members.
    Count(u64),
    /// Members, in order.
    Members(Vec<Bytes>),
    /// For each member asked about, whether the set holds it.
    Flags(Vec<bool>),
}

/// A change to, or inside a transaction a read of, one hash: see [`Command::Hash`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashOp {
    /// Set fields (`HSET`, `HMSET`), or with `only_new` a field that is not there yet
    /// (`HSETNX`); answers the number of fields added. A hash may not grow past
    /// `max_fields` (the proposer's limit, carried so every replica decides alike).
    Set {
        /// Field-value pairs, in order; a later pair wins over an earlier one.
        pairs: Vec<(Bytes, Bytes)>,
        /// Only set fields that do not exist.
        only_new: bool,
        /// The most fields the hash may have after the change.
        max_fields: u64,
    },
    /// Remove fields (`HDEL`), and the hash with its last one; answers how many went.
    Delete {
        /// The fields.
        fields: Vec<Bytes>,
    },
    /// Add to an integer field, creating it at 0 (`HINCRBY`); answers the new value.
    IncrBy {
        /// The field.
        field: Bytes,
        /// How much to add.
        delta: i64,
        /// As in [`HashOp::Set`].
        max_fields: u64,
    },
    /// Add a decimal number (checked by the proposer) to a decimal field, creating it at 0
    /// (`HINCRBYFLOAT`); answers the new value as Redis prints it.
    IncrByFloat {
        /// The field.
        field: Bytes,
        /// The increment as the client wrote it.
        increment: Bytes,
        /// As in [`HashOp::Set`].
        max_fields: u64,
    },
    /// A read at this point of a transaction (`HGET` after `MULTI`).
    Read(HashRead),
}

/// A read of one hash; the same reads serve a transaction ([`HashOp::Read`]) and a plain
/// read of a replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashRead {
    /// These fields' values (`HGET`, `HMGET`, `HEXISTS`, `HSTRLEN`):
    /// [`HashAnswer::Values`].
    Get {
        /// The fields.
        fields: Vec<Bytes>,
    },
    /// The number of fields (`HLEN`): [`HashAnswer::Count`].
    Len,
    /// Fields and values in field order after `after`, at most `limit` of them (`HGETALL`,
    /// `HKEYS`, `HVALS`, `HSCAN`, `HRANDFIELD`): [`HashAnswer::Pairs`].
    Fields {
        /// Start after this field.
        after: Option<Bytes>,
        /// The most pairs to return.
        limit: u64,
    },
}

/// What a [`Command::Hash`] or a hash read answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashAnswer {
    /// A number of fields (added, removed, or held).
    Count(u64),
    /// An integer field's new value.
    Int(i64),
    /// A decimal field's new value, as Redis prints it.
    Float(Bytes),
    /// Values of the fields asked for, in order; `None` for a missing field.
    Values(Vec<Option<Bytes>>),
    /// Field-value pairs in field order.
    Pairs(Vec<(Bytes, Bytes)>),
}

/// A Consul lock operation: see [`Command::Lock`]. Answered with [`CommandResult::Lock`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockOp {
    /// Take the lock for `session` and write the value: refused while another session holds
    /// it or its lock-delay runs; by the holder itself, only the value changes.
    Acquire {
        /// The session id.
        session: Bytes,
        /// The new value.
        value: Bytes,
        /// The new flags.
        flags: u64,
    },
    /// Give the lock back and write the value, if `session` holds it.
    Release {
        /// The session id.
        session: Bytes,
        /// The new value.
        value: Bytes,
        /// The new flags.
        flags: u64,
    },
    /// Change nothing; `true` if `session` holds the lock (Consul's `check-session`).
    CheckHeld {
        /// The session id.
        session: Bytes,
    },
    /// `session` ended: if it holds the lock, release it and start the lock-delay (or delete
    /// the key, `delete`). The shard refuses the session from then on, so an acquire that
    /// was on its way when the session ended cannot take the lock after this.
    SessionEnded {
        /// The session id.
        session: Bytes,
        /// Delete the key instead of releasing it (Consul's `Behavior: delete`).
        delete: bool,
        /// Milliseconds during which no session may take the lock.
        lock_delay_ms: u64,
    },
}

/// A change to a Consul session's row: see [`Command::Session`]. Answered with
/// [`CommandResult::Records`]: the row after the change, or `None` when there is no valid
/// session to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionOp {
    /// Create the session.
    Create(crate::session::SessionState),
    /// Restart its TTL, unless it was invalidated.
    Renew,
    /// Note that it acquires `key`, unless it was invalidated: its end releases the key.
    Hold {
        /// The key.
        key: Bytes,
    },
    /// Mark it invalidated: no key can be acquired with it from now on. With
    /// `only_if_expired`, only if its TTL ran out by this command's time (a renewal that got
    /// in first keeps it).
    Invalidate {
        /// Whether only an expired session is invalidated.
        only_if_expired: bool,
    },
    /// Delete the row (after every lock it held was released).
    Remove,
}

/// The answer to a [`LockOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockOutcome {
    /// Whether the operation took effect (Consul's `true` / `false`).
    Done(bool),
    /// The session has ended: this shard refuses it.
    SessionEnded,
}

/// What a transaction requires of a key before it applies anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyCheck {
    /// The key's `ModifyIndex` is this one; `None`: the key does not exist.
    At(Option<u64>),
    /// The key exists, at any index.
    Exists,
    /// The key is at this `ModifyIndex` or does not exist (Consul's `delete-cas`: deleting
    /// a key that is already gone succeeds).
    AtOrMissing(u64),
}

/// An in-place change of a string value: see [`Command::Edit`]. Size limits travel in the
/// command, so every replica decides the same way whatever its own configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StringEdit {
    /// Add bytes at the end, creating the key if it is missing (`APPEND`); keeps the expiry.
    Append {
        /// The bytes to add.
        bytes: Bytes,
        /// Longest value allowed after the change.
        max_len: u64,
    },
    /// Overwrite from `offset`, padding a shorter value with zero bytes (`SETRANGE`); creates
    /// the key unless `bytes` is empty; keeps the expiry.
    SetRange {
        /// Where the bytes go.
        offset: u64,
        /// The bytes to write.
        bytes: Bytes,
        /// Longest value allowed after the change.
        max_len: u64,
    },
    /// Add a decimal number, as the client wrote it (checked by the proposer), to a decimal
    /// value, creating it at 0 (`INCRBYFLOAT`); keeps the expiry.
    IncrByFloat(Bytes),
    /// Delete the key (`GETDEL`).
    GetDel,
    /// Change the key's expiry (`GETEX` with an option).
    GetEx(TtlUpdate),
}

impl Command {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Put { .. } => "put",
            Command::PutMany { .. } => "put_many",
            Command::Delete { .. } => "delete",
            Command::DeletePrefix { .. } => "delete_prefix",
            Command::Incr { .. } => "incr",
            Command::SetTtl { .. } => "set_ttl",
            Command::Reap { .. } => "reap",
            Command::Batch(_) => "batch",
            Command::Split { .. } => "split",
            Command::Edit { .. } => "edit",
            Command::Read { .. } => "read",
            Command::Check { .. } => "check",
            Command::Transaction { .. } => "transaction",
            Command::Lock { .. } => "lock",
            Command::Session { .. } => "session",
            Command::Hash { .. } => "hash",
            Command::SetMembers { .. } => "set_members",
            Command::List { .. } => "list",
            Command::SortedSet { .. } => "sorted_set",
            Command::Prepare { .. } => "prepare",
            Command::Decide { .. } => "decide",
            Command::Resolve { .. } => "resolve",
            Command::Forget { .. } => "forget",
            Command::ResolveMany { .. } => "resolve_many",
            Command::ReadPrefix { .. } => "read_prefix",
            Command::OwnsSlots { .. } => "owns_slots",
        }
    }

    /// Whether the command names every key it writes, so it can share a log entry with
    /// others; a prefix delete (whose keys are known only when applied) or a batch cannot.
    /// A transaction can: it is applied whole or undone whole where it stands in the entry,
    /// and one in-flight entry per shard would otherwise serialize every transaction behind
    /// its own fdatasync.
    pub fn can_share_an_entry(&self) -> bool {
        !matches!(
            self,
            Command::DeletePrefix { .. }
                | Command::ReadPrefix { .. }
                | Command::Batch(_)
                | Command::Split { .. }
                | Command::Check { .. }
        )
    }

    /// The keys the command names (none for a prefix delete, a split or a batch; for a
    /// transaction, its watched keys and its commands' keys).
    pub fn keys(&self) -> Vec<&Bytes> {
        match self {
            Command::Put { key, .. }
            | Command::Incr { key, .. }
            | Command::SetTtl { key, .. }
            | Command::Edit { key, .. }
            | Command::Lock { key, .. }
            | Command::Session { key, .. }
            | Command::Hash { key, .. }
            | Command::Check { key, .. } => vec![key],
            Command::Prepare { commands, .. } => commands.iter().flat_map(Command::keys).collect(),
            Command::Resolve { keys, .. } => keys.iter().collect(),
            Command::Decide { record, .. } => vec![record],
            Command::Forget { records } => records.iter().collect(),
            Command::ResolveMany { resolutions, .. } => {
                resolutions.iter().flat_map(|r| r.keys.iter()).collect()
            }
            Command::SortedSet { key, op } => {
                let mut keys = vec![key];
                if let crate::SortedSetOp::PopFirst { others, .. } = op {
                    keys.extend(others);
                }
                keys
            }
            Command::PutMany { pairs } => pairs.iter().map(|(k, _)| k).collect(),
            Command::Delete { keys, .. } | Command::Reap { keys } | Command::Read { keys } => {
                keys.iter().collect()
            }
            Command::SetMembers { key, op } => {
                let mut keys = vec![key];
                match op {
                    SetOp::Move { to, .. } => keys.push(to),
                    SetOp::Store { sources, .. } => keys.extend(sources),
                    SetOp::Read(SetRead::Combine { others, .. }) => keys.extend(others),
                    _ => {}
                }
                keys
            }
            Command::List { key, op } => {
                let mut keys = vec![key];
                match op {
                    ListOp::Move { to, .. } => keys.push(to),
                    ListOp::PopFirst { others, .. } => keys.extend(others),
                    _ => {}
                }
                keys
            }
            Command::Transaction { watches, commands } => watches
                .iter()
                .map(|(k, _)| k)
                .chain(commands.iter().flat_map(Command::keys))
                .collect(),
            Command::DeletePrefix { .. }
            | Command::ReadPrefix { .. }
            | Command::OwnsSlots { .. }
            | Command::Batch(_)
            | Command::Split { .. } => Vec::new(),
        }
    }
}

/// What applying a command returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    /// A put: whether it was written, the live record it replaced, and the log index.
    Put {
        /// False when the condition failed.
        written: bool,
        /// The live (unexpired) record before the write, if any.
        previous: Option<Record>,
        /// The index the write got (or would have got).
        index: u64,
    },
    /// Keys removed (for a CAS delete: 1 if it matched, else 0).
    Deleted(u64),
    /// The new integer value, or why it could not be computed.
    Incr(Result<i64, ErrorCode>),
    /// Whether the key existed and its expiry changed (clearing: whether it had one).
    TtlSet(bool),
    /// Nothing to report (blank and membership entries, `PutMany`, `Reap`).
    Done,
    /// One result per command of a [`Command::Batch`], in order.
    Batch(Vec<CommandResult>),
    /// Not applied: a key of the command is in a slot this shard no longer owns (it was split
    /// off). The command changed nothing; the sender routes it again with a newer map.
    Moved,
    /// A [`Command::Edit`]: the value after the change (`APPEND`, `SETRANGE`,
    /// `INCRBYFLOAT`) or the value found (`GETDEL`, `GETEX`; `None` if the key is missing),
    /// or why nothing changed.
    Edited(Result<Option<Bytes>, ErrorCode>),
    /// A [`Command::Read`]: each key's live record, in order.
    Records(Vec<Option<Record>>),
    /// A [`Command::Transaction`]: one result per command, or the position of the first
    /// check that failed (nothing was applied).
    Transaction(Result<Vec<CommandResult>, u32>),
    /// A [`Command::Lock`].
    Lock(LockOutcome),
    /// A [`Command::Hash`]: its answer, or why nothing changed.
    Hash(Result<HashAnswer, ErrorCode>),
    /// A [`Command::SetMembers`]: its answer, or why nothing changed.
    SetMembers(Result<SetAnswer, ErrorCode>),
    /// A [`Command::List`]: its answer, or why nothing changed.
    List(Result<ListAnswer, ErrorCode>),
    /// A [`Command::SortedSet`]: its answer, or why nothing changed (`InvalidArgument`: an
    /// increment would make a score NaN).
    SortedSet(Result<crate::SortedSetAnswer, ErrorCode>),
    /// Not applied: this key holds an intent of a transaction across shards (see
    /// [`crate::txn`]). The command changed nothing; the sender waits for the intent to be
    /// resolved and sends it again.
    InTransaction(Bytes),
    /// A [`Command::Prepare`].
    Prepared(crate::txn::PrepareOutcome),
    /// A [`Command::Decide`]: where the transaction stands after it.
    Decided(crate::txn::TxnState),
    /// A [`Command::Resolve`]: for each of its keys, in order, the results of the intent's
    /// commands (empty when the key held no intent of the transaction, or it was dropped).
    Resolved(Vec<Vec<CommandResult>>),
    /// A [`Command::ReadPrefix`]: each key under the prefix with its live record, in key
    /// order, and the shard's part of the listing's Consul index (the highest `ModifyIndex`
    /// among them, or the shard's removal watermark when higher; summed over shards when
    /// the answers of several are merged).
    Entries {
        /// The keys and records.
        entries: Vec<(Bytes, Record)>,
        /// The index part.
        index: u64,
    },
}
