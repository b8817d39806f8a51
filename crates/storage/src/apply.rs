//! Applying committed commands to a shard's data, atomically with the applied-state metadata.

use crate::key_index::{KeyMeta, MemberRow, ShardKeys, member_number};
use crate::keys::{expiry_key, owned_key};
use crate::purge::DeadVersion;
use crate::store::{REMOVED_ROW, SLOTS_ROW, decode_removal, encode_removal};
use crate::tables::{Batch, Space};
use crate::{Storage, StorageError};
use bytes::Bytes;
use std::collections::HashMap;
use trireme_types::collection::{member_slot, row_parts, split_member_key, versioned_row};
use trireme_types::session::{SessionState, is_internal_key};
use trireme_types::txn::{TxnRecord, hold_target, intent_target, is_record_key, is_txn_row};
use trireme_types::{
    Command, CommandResult, ErrorCode, KeyCheck, LockInfo, LockOp, LockOutcome, LogCommand,
    PutCondition, Record, SessionOp, ShardId, StringEdit, TtlUpdate, ValueKind,
};

mod hash;
#[cfg(test)]
mod indexed;
mod list;
mod rows;
mod set;
mod sorted;
#[cfg(test)]
mod testing;
mod txn;
#[cfg(test)]
mod versions;
mod whole;

pub use whole::WholeScan;

/// One committed log entry to apply: its index, and the command if it carries one (blank and
/// membership entries carry none but still advance the applied state).
#[derive(Debug)]
pub struct ApplyEntry<'a> {
    /// The entry's log index; becomes `ModifyIndex` of what it writes.
    pub index: u64,
    /// The command, if any.
    pub command: Option<&'a LogCommand>,
}

/// A whole shard to install with [`Storage::import_shard`]: its state-machine metadata and its
/// records.
#[derive(Debug, Default)]
pub struct ShardExport {
    /// `data_meta` rows of the shard, name → value.
    pub meta: Vec<(String, Vec<u8>)>,
    /// Every stored key with its encoded record.
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Whether `key` is a collection row of the unversioned layout, which a snapshot carries
/// and which is stored under its record's version: install it after its record.
pub fn is_unversioned_row(key: &[u8]) -> bool {
    row_parts(key).is_some_and(|parts| parts.version.is_none())
}

/// The key a row of a snapshot is stored under: a collection row of the unversioned layout
/// under the version its record holds (`version_of` its collection key); any other row as
/// it is. `None`: an unversioned row whose collection has no record, which nothing reads.
fn stored_row_key(
    key: &[u8],
    mut version_of: impl FnMut(&[u8]) -> Result<Option<u64>, StorageError>,
) -> Result<Option<Bytes>, StorageError> {
    match row_parts(key) {
        Some(parts) if parts.version.is_none() => {
            Ok(version_of(parts.key)?.and_then(|version| versioned_row(key, version)))
        }
        _ => Ok(Some(Bytes::copy_from_slice(key))),
    }
}

/// What a plain write carries over from the record it replaces.
struct WriteMeta {
    flags: u64,
    create_index: u64,
    expires_at_ms: Option<u64>,
    lock: LockInfo,
    kind: ValueKind,
}

/// Changes made by the entries of one apply call, not yet written. Later commands in the same
/// call read earlier ones' results through it.
struct Pending<'s> {
    storage: &'s Storage,
    shard: u32,
    /// The slots the shard owns, once a split has touched it: commands for keys outside are
    /// refused, whoever proposed them before the split.
    owned: Option<(u16, u16)>,
    changes: HashMap<Bytes, Option<Record>>,
    order: Vec<Bytes>,
    /// Expiry of each touched key as stored before this batch, to keep the expiry index right.
    stored_expiry: HashMap<Bytes, Option<u64>>,
    /// Kind and `CreateIndex` (its version) of each touched collection as stored before this
    /// batch: when its record goes or is replaced, that version's rows are dead.
    stored_collections: HashMap<Bytes, (ValueKind, u64)>,
    /// The member rows among `changes`, in order, so that a collection's changed rows are a
    /// range, not a walk over every change of the batch.
    changed_members: std::collections::BTreeSet<Bytes>,
    /// For sorted sets popped in this batch: the score rows' prefix, which end was popped
    /// (the highest), and a remainder beyond which (towards that end) every row is deleted
    /// in this batch, so the next pop starts there instead of walking every earlier pop's
    /// deletion again. Dropped when a row under the prefix is written, or a transaction is
    /// undone.
    pop_hints: Vec<(Bytes, bool, Bytes)>,
    /// While a transaction applies: what each change replaced, to undo them all if one of
    /// its checks fails.
    undo: Option<Vec<(Bytes, Option<Option<Record>>)>>,
    /// The sessions this shard refuses, once read (see [`LockOp::SessionEnded`]).
    ended: Option<Vec<(Bytes, u64)>>,
    /// Whether `ended` changed and its row must be written.
    ended_changed: bool,
    /// The log index of the entry being applied.
    index: u64,
    /// Every key of the shard with what a plain write needs of it (see
    /// [`crate::key_index`]); kept up to date as the batch is written.
    keys: &'s mut ShardKeys,
    /// The index of the last entry in this call that removed a key (the shard's removal
    /// watermark rises to it; an undone removal raises it too, which only costs a watcher a
    /// spurious wake-up).
    removed_at: Option<u64>,
    /// Whether a key of the shard may hold a transaction's intent (known before the batch,
    /// or written by it): only then are commands checked against intents.
    intents_here: bool,
    /// While a committed transaction's intent is resolved: its commands are applied as its
    /// prepare judged them (see [`Pending::resolve`]). Its key was held since, so only time
    /// could change what they find: expiry is not judged again, nor a session that ended in
    /// this shard meanwhile (its end reaches the key after the resolve and releases it).
    as_judged: bool,
    /// While a prepare judges its commands: the keys each prefix delete among them found,
    /// in order, which the prepare then holds and deletes one by one.
    expanded: Option<Vec<Vec<Bytes>>>,
    /// The intents, holds and records this batch wrote (some may be removed again since):
    /// where a check for them looks among the batch's changes, instead of all of them.
    txn_rows: Vec<Bytes>,
}

impl<'s> Pending<'s> {
    /// The key as this batch sees it. Every change below reads the key through here first,
    /// which is what records its stored expiry.
    fn raw(&mut self, key: &Bytes) -> Result<Option<Record>, StorageError> {
        if let Some(change) = self.changes.get(key) {
            return Ok(change.clone());
        }
        let stored = self
            .storage
            .stored_view(ShardId(self.shard))
            .get_stored(key)?;
        self.stored_expiry
            .entry(key.clone())
            .or_insert_with(|| stored.as_ref().and_then(|r| r.expires_at_ms));
        if let Some(r) = &stored
            && r.kind != ValueKind::String
        {
            self.stored_collections
                .insert(key.clone(), (r.kind, r.create_index));
        }
        Ok(stored)
    }

    fn live(&mut self, key: &Bytes, now_ms: u64) -> Result<Option<Record>, StorageError> {
        let judged = self.as_judged;
        Ok(self.raw(key)?.filter(|r| judged || !r.is_expired(now_ms)))
    }

    /// What a plain write needs of `key` as this batch sees it (`None`: absent or expired),
    /// from the key index when it can say, without reading the record. Records the key's
    /// stored expiry and collection kind as [`Pending::raw`] does.
    fn live_meta(&mut self, key: &Bytes, now_ms: u64) -> Result<Option<WriteMeta>, StorageError> {
        if !self.changes.contains_key(key) && member_slot(key).is_none() {
            match self.keys.get(&key[..]) {
                None => {
                    self.stored_expiry.entry(key.clone()).or_insert(None);
                    return Ok(None);
                }
                Some(meta) if !meta.locked => {
                    self.stored_expiry
                        .entry(key.clone())
                        .or_insert_with(|| meta.expires_at_ms());
                    if meta.kind != ValueKind::String {
                        self.stored_collections
                            .insert(key.clone(), (meta.kind, meta.create_index));
                    }
                    let expired =
                        !self.as_judged && meta.expires_at_ms().is_some_and(|at| at <= now_ms);
                    return Ok((!expired).then(|| WriteMeta {
                        flags: meta.flags,
                        create_index: meta.create_index,
                        expires_at_ms: meta.expires_at_ms(),
                        lock: LockInfo::default(),
                        kind: meta.kind,
                    }));
                }
                // A lock's holder is in the record only.
                Some(_) => {}
            }
        }
        Ok(self.live(key, now_ms)?.map(|r| WriteMeta {
            flags: r.flags,
            create_index: r.create_index,
            expires_at_ms: r.expires_at_ms,
            lock: r.lock,
            kind: r.kind,
        }))
    }

    /// The number the member index keeps for member row `row` of a collection of `kind` (see
    /// [`crate::member_index`]) as this batch sees the row, or `None` if there is no such
    /// row: from the batch's changes, else the index, else the row itself.
    pub(super) fn member_number(
        &mut self,
        row: &Bytes,
        kind: ValueKind,
    ) -> Result<Option<u64>, StorageError> {
        let number = |record: &Record| {
            member_number(kind, record)
                .ok_or_else(|| StorageError::Corrupt("a member row of a collection".into()))
        };
        if let Some(change) = self.changes.get(row) {
            return change.as_ref().map(number).transpose();
        }
        // The index holds the stored version's members: a row of another version (a
        // collection created again in this batch) is read.
        if let Some((key, version, member)) = split_member_key(row)
            && self
                .keys
                .get(key)
                .is_some_and(|meta| meta.create_index == version)
            && let Some(known) = self.keys.members.lookup(key, member)
        {
            return Ok(known);
        }
        self.raw(row)?.as_ref().map(number).transpose()
    }

    /// Changes `key` to `record` (`None`: removes it). A collection replaced by anything but
    /// itself leaves its version's rows dead (see [`crate::purge`]).
    fn set(&mut self, key: Bytes, record: Option<Record>) -> Result<(), StorageError> {
        if member_slot(&key).is_some() {
            // A member row has no expiry, is no collection and no row a Consul query lists:
            // none of the bookkeeping below concerns it.
            self.changed_members.insert(key.clone());
            if record.is_some() && !self.pop_hints.is_empty() {
                self.pop_hints
                    .retain(|(prefix, _, _)| !key.starts_with(&prefix[..]));
            }
        } else if is_txn_row(&key) {
            // An intent or a transaction record: no expiry, no collection, never listed, so
            // its removal is no removal a Consul index counts.
            if record.is_some() {
                self.txn_rows.push(key.clone());
            }
        } else {
            if !self.changes.contains_key(&key) && !self.stored_expiry.contains_key(&key) {
                self.raw(&key)?;
            }
            let before = match self.changes.get(&key) {
                Some(change) => change.as_ref().map(|r| (r.kind, r.create_index)),
                None => self.stored_collections.get(&key).copied(),
            };
            if let Some((kind, created)) = before
                && kind != ValueKind::String
                && record
                    .as_ref()
                    .is_none_or(|r| r.kind != kind || r.create_index != created)
            {
                // The old version's stored rows are dead now, and purged in the background
                // once the batch is written; what this batch wrote under it goes here.
                self.drop_changed_rows(&key, created)?;
            }
            if record.is_none() {
                self.removed_at = Some(self.index);
            }
        }
        let replaced = self.changes.insert(key.clone(), record);
        if let Some(undo) = &mut self.undo {
            undo.push((key.clone(), replaced.clone()));
        }
        if replaced.is_none() {
            self.order.push(key);
        }
        Ok(())
    }

    /// Whether `check` holds of `key` as this batch sees it now.
    fn holds(&mut self, key: &Bytes, check: KeyCheck, now: u64) -> Result<bool, StorageError> {
        let index = self.live(key, now)?.map(|r| r.modify_index);
        Ok(match check {
            KeyCheck::At(expected) => index == expected,
            KeyCheck::Exists => index.is_some(),
            KeyCheck::AtOrMissing(expected) => index.is_none_or(|i| i == expected),
        })
    }

    /// Applies a transaction's commands in order, undoing every change if a check fails;
    /// `Err(position)` names the failed check (see [`Command::Transaction`]).
    fn apply_transaction(
        &mut self,
        index: u64,
        now: u64,
        watches: &[(Bytes, KeyCheck)],
        commands: &[Command],
    ) -> Result<Result<Vec<CommandResult>, u32>, StorageError> {
        self.run_transaction(index, now, watches, commands, true)
    }

    /// Judges a transaction's commands as [`Pending::apply_transaction`] would apply them,
    /// then undoes them: what a [`Command::Prepare`] checks before it writes its intents.
    pub(super) fn judge_transaction(
        &mut self,
        index: u64,
        now: u64,
        commands: &[Command],
    ) -> Result<Result<Vec<CommandResult>, u32>, StorageError> {
        self.run_transaction(index, now, &[], commands, false)
    }

    /// Applies a transaction's commands, keeping them if every check holds and `keep`.
    fn run_transaction(
        &mut self,
        index: u64,
        now: u64,
        watches: &[(Bytes, KeyCheck)],
        commands: &[Command],
        keep: bool,
    ) -> Result<Result<Vec<CommandResult>, u32>, StorageError> {
        for (position, (key, check)) in watches.iter().enumerate() {
            if !self.holds(key, *check, now)? {
                return Ok(Err(position as u32));
            }
        }
        let order_before = self.order.len();
        // A transaction inside another (none is built today) adds its undo to the outer one.
        let outer = self.undo.replace(Vec::new());
        let mut results = Vec::with_capacity(commands.len());
        let mut failed = None;
        for (position, command) in commands.iter().enumerate() {
            if let Command::Check { key, check } = command {
                if !self.holds(key, *check, now)? {
                    failed = Some((watches.len() + position) as u32);
                    break;
                }
                results.push(CommandResult::Done);
                continue;
            }
            let result = self.apply_command(index, now, command)?;
            if matches!(
                result,
                CommandResult::Lock(LockOutcome::Done(false) | LockOutcome::SessionEnded)
            ) {
                failed = Some((watches.len() + position) as u32);
                break;
            }
            results.push(result);
        }
        let undo = std::mem::replace(&mut self.undo, outer).unwrap_or_default();
        if failed.is_none() && keep {
            if let Some(outer) = &mut self.undo {
                outer.extend(undo);
            }
            return Ok(Ok(results));
        }
        for (key, replaced) in undo.into_iter().rev() {
            match replaced {
                Some(record) => self.changes.insert(key, record),
                None => self.changes.remove(&key),
            };
        }
        // Rows deleted by the transaction are back.
        self.pop_hints.clear();
        self.order.truncate(order_before);
        Ok(match failed {
            Some(failed) => Err(failed),
            None => Ok(results),
        })
    }

    fn put(
        &mut self,
        key: &Bytes,
        value: Bytes,
        flags: Option<u64>,
        ttl: TtlUpdate,
        index: u64,
        now_ms: u64,
    ) -> Result<(), StorageError> {
        let current = self.live_meta(key, now_ms)?;
        let record = Record {
            value,
            flags: flags.unwrap_or_else(|| current.as_ref().map_or(0, |r| r.flags)),
            create_index: current.as_ref().map_or(index, |r| r.create_index),
            modify_index: index,
            expires_at_ms: match ttl {
                TtlUpdate::Clear => None,
                TtlUpdate::Keep => current.as_ref().and_then(|r| r.expires_at_ms),
                TtlUpdate::At(at) => Some(at),
            },
            // A plain write to a locked key keeps the lock, as in Consul.
            lock: current.map(|r| r.lock).unwrap_or_default(),
            kind: ValueKind::String,
        };
        self.set(key.clone(), Some(record))?;
        Ok(())
    }

    /// The sessions this shard refuses (ended), loaded from its row on first use.
    fn ended_sessions(&mut self) -> Result<&mut Vec<(Bytes, u64)>, StorageError> {
        if self.ended.is_none() {
            let stored = match self.storage.data_meta(ShardId(self.shard), ENDED_ROW)? {
                Some(bytes) => decode_ended(&bytes)?,
                None => Vec::new(),
            };
            self.ended = Some(stored);
        }
        Ok(self.ended.get_or_insert_with(Vec::new))
    }

    /// Applies a Consul lock operation on `key`.
    fn lock(
        &mut self,
        key: &Bytes,
        op: &LockOp,
        index: u64,
        now: u64,
    ) -> Result<LockOutcome, StorageError> {
        let current = self.live(key, now)?;
        let holder = current.as_ref().and_then(|r| r.lock.session.clone());
        Ok(match op {
            LockOp::Acquire {
                session,
                value,
                flags,
            } => {
                if !self.as_judged && self.ended_sessions()?.iter().any(|(s, _)| s == session) {
                    return Ok(LockOutcome::SessionEnded);
                }
                let mut lock = current.as_ref().map(|r| r.lock.clone()).unwrap_or_default();
                match &holder {
                    Some(h) if h == session => {}
                    Some(_) => return Ok(LockOutcome::Done(false)),
                    None if lock.delay_until_ms > now => return Ok(LockOutcome::Done(false)),
                    None => {
                        lock.index += 1;
                        lock.session = Some(session.clone());
                        lock.delay_until_ms = 0;
                    }
                }
                self.write_locked(key, current, value.clone(), *flags, lock, index)?;
                LockOutcome::Done(true)
            }
            LockOp::Release {
                session,
                value,
                flags,
            } => {
                if holder.as_ref() != Some(session) {
                    return Ok(LockOutcome::Done(false));
                }
                let mut lock = current.as_ref().map(|r| r.lock.clone()).unwrap_or_default();
                lock.session = None;
                self.write_locked(key, current, value.clone(), *flags, lock, index)?;
                LockOutcome::Done(true)
            }
            LockOp::CheckHeld { session } => LockOutcome::Done(holder.as_ref() == Some(session)),
            LockOp::SessionEnded {
                session,
                delete,
                lock_delay_ms,
            } => {
                let ended = self.ended_sessions()?;
                ended.retain(|(_, at)| at.saturating_add(ENDED_KEEP_MS) > now);
                if !ended.iter().any(|(s, _)| s == session) {
                    ended.push((session.clone(), now));
                }
                self.ended_changed = true;
                if holder.as_ref() != Some(session) {
                    return Ok(LockOutcome::Done(false));
                }
                if *delete {
                    self.set(key.clone(), None)?;
                } else if let Some(mut record) = current {
                    record.lock.session = None;
                    record.lock.delay_until_ms = now.saturating_add(*lock_delay_ms);
                    record.modify_index = index;
                    self.set(key.clone(), Some(record))?;
                }
                LockOutcome::Done(true)
            }
        })
    }

    /// Writes `key` with a new value, flags and lock, as a Consul PUT would (no expiry).
    fn write_locked(
        &mut self,
        key: &Bytes,
        current: Option<Record>,
        value: Bytes,
        flags: u64,
        lock: LockInfo,
        index: u64,
    ) -> Result<(), StorageError> {
        let record = Record {
            value,
            flags,
            create_index: current.as_ref().map_or(index, |r| r.create_index),
            modify_index: index,
            expires_at_ms: None,
            lock,
            kind: ValueKind::String,
        };
        self.set(key.clone(), Some(record))
    }

    /// Applies a change to a Consul session's row at `key`; the row after it, or `None` when
    /// there is no valid session to change.
    fn session(
        &mut self,
        key: &Bytes,
        op: &SessionOp,
        index: u64,
        now: u64,
    ) -> Result<Option<Record>, StorageError> {
        let current = self.live(key, now)?;
        let state = current
            .as_ref()
            .and_then(|r| SessionState::decode(&r.value));
        let next = match (op, state) {
            (SessionOp::Create(state), _) => state.clone(),
            (SessionOp::Remove, _) => {
                if current.is_some() {
                    self.set(key.clone(), None)?;
                }
                return Ok(None);
            }
            (_, None) => return Ok(None),
            (SessionOp::Invalidate { only_if_expired }, Some(mut state)) => {
                if *only_if_expired && !state.invalidated && !state.expired(now) {
                    return Ok(None);
                }
                state.invalidated = true;
                state
            }
            (_, Some(state)) if state.invalidated => return Ok(None),
            (SessionOp::Renew, Some(mut state)) => {
                // A renewal stamped earlier but applied later (held up on a paused node)
                // must not take back the time a later one granted.
                state.renewed_at_ms = state.renewed_at_ms.max(now);
                state
            }
            (SessionOp::Hold { key: held }, Some(mut state)) => {
                if !state.held.contains(held) {
                    state.held.push(held.clone());
                }
                state
            }
        };
        let record = Record {
            value: next.encode(),
            flags: 0,
            create_index: current.as_ref().map_or(index, |r| r.create_index),
            modify_index: index,
            expires_at_ms: None,
            lock: LockInfo::default(),
            kind: ValueKind::String,
        };
        self.set(key.clone(), Some(record.clone()))?;
        Ok(Some(record))
    }

    /// Applies a [`StringEdit`] to `key`, whose live record is `current`: the value to
    /// answer, or why nothing changed.
    fn edit(
        &mut self,
        key: &Bytes,
        edit: &StringEdit,
        current: Option<Record>,
        index: u64,
        now: u64,
    ) -> Result<Result<Option<Bytes>, ErrorCode>, StorageError> {
        let old = current.as_ref().map(|r| r.value.clone());
        let new_value = match edit {
            StringEdit::GetDel => {
                if current.is_some() {
                    self.set(key.clone(), None)?;
                }
                return Ok(Ok(old));
            }
            StringEdit::GetEx(ttl) => {
                if let Some(mut record) = current {
                    let expires_at_ms = match ttl {
                        TtlUpdate::Clear => None,
                        TtlUpdate::Keep => record.expires_at_ms,
                        TtlUpdate::At(at) => Some(*at),
                    };
                    // Nothing changes (PERSIST on a key without expiry): the key is not
                    // touched, so a WATCH on it holds, as in Redis.
                    if expires_at_ms == record.expires_at_ms {
                        return Ok(Ok(old));
                    }
                    record.expires_at_ms = expires_at_ms;
                    record.modify_index = index;
                    let expired = record.is_expired(now);
                    self.set(key.clone(), (!expired).then_some(record))?;
                }
                return Ok(Ok(old));
            }
            StringEdit::Append { bytes, max_len } => {
                let old = old.unwrap_or_default();
                if (old.len() + bytes.len()) as u64 > *max_len {
                    return Ok(Err(ErrorCode::ValueTooLarge));
                }
                let mut value = Vec::with_capacity(old.len() + bytes.len());
                value.extend_from_slice(&old);
                value.extend_from_slice(bytes);
                Bytes::from(value)
            }
            StringEdit::SetRange {
                offset,
                bytes,
                max_len,
            } => {
                let old = old.unwrap_or_default();
                if bytes.is_empty() {
                    // Nothing to write: the key is left as it is (and not created).
                    return Ok(Ok(current.map(|r| r.value)));
                }
                let end = offset.saturating_add(bytes.len() as u64);
                if end > *max_len {
                    return Ok(Err(ErrorCode::ValueTooLarge));
                }
                let mut value = old.to_vec();
                let (offset, end) = (*offset as usize, end as usize);
                if value.len() < end {
                    value.resize(end, 0);
                }
                value[offset..end].copy_from_slice(bytes);
                Bytes::from(value)
            }
            StringEdit::IncrByFloat(increment) => match add_decimal(old.as_deref(), increment) {
                Ok(sum) => sum,
                Err(code) => return Ok(Err(code)),
            },
        };
        self.put(key, new_value.clone(), None, TtlUpdate::Keep, index, now)?;
        Ok(Ok(Some(new_value)))
    }

    /// Every key of the shard under `prefix` as this batch sees it (rows removed in it
    /// included), in order; internal keys only under an internal prefix.
    fn keys_under(&self, prefix: &[u8]) -> Result<Vec<Bytes>, StorageError> {
        let mut keys: Vec<Bytes> = Vec::new();
        let hide_internal = !is_internal_key(prefix);
        for row in self
            .storage
            .tables
            .prefix(Space::Data, &owned_key(self.shard, prefix))
        {
            let (key, _) = row?;
            if hide_internal && is_internal_key(&key[4..]) {
                continue;
            }
            keys.push(Bytes::copy_from_slice(&key[4..]));
        }
        keys.extend(
            self.changes
                .keys()
                .filter(|k| k.starts_with(prefix) && !(hide_internal && is_internal_key(k)))
                .cloned(),
        );
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Whether every key `command` names is in a slot this shard owns. A batch's commands
    /// are checked one by one (they come from different clients); a prefix delete names no
    /// key and removes only what the shard holds.
    fn owns_keys_of(&self, command: &Command) -> bool {
        let Some(owned) = self.owned else {
            return true;
        };
        match command {
            Command::ResolveMany {
                slots: Some(slots), ..
            } if *slots != owned => return false,
            Command::Prepare {
                commands,
                creates_record,
                record,
                ..
            } => {
                for c in commands {
                    if let Command::OwnsSlots { slots } = c
                        && (*slots != owned
                            || (*creates_record && !crate::store::in_slots(record, Some(owned))))
                    {
                        return false;
                    }
                }
            }
            _ => {}
        }
        // A prefix hold's key names no slot: every shard may hold one.
        command
            .keys()
            .into_iter()
            .all(|key| hold_target(key).is_some() || crate::store::in_slots(key, Some(owned)))
    }

    fn apply(&mut self, index: u64, log: &LogCommand) -> Result<CommandResult, StorageError> {
        self.index = index;
        self.apply_command(index, log.now_ms, &log.command)
    }

    fn apply_command(
        &mut self,
        index: u64,
        now: u64,
        command: &Command,
    ) -> Result<CommandResult, StorageError> {
        if !self.owns_keys_of(command) {
            return Ok(CommandResult::Moved);
        }
        // A committed intent's own commands pass the holds of their transaction.
        if !self.as_judged
            && let Some(key) = self.blocked_key(command)?
        {
            return Ok(CommandResult::InTransaction(key));
        }
        Ok(match command {
            Command::Batch(commands) => CommandResult::Batch(
                commands
                    .iter()
                    .map(|c| self.apply_command(index, now, c))
                    .collect::<Result<_, _>>()?,
            ),
            Command::Put {
                key,
                value,
                flags,
                condition,
                ttl,
                return_previous,
            } => {
                // Only a check of the ModifyIndex, or a caller that wants the old record,
                // reads it; the other conditions are decided by the key index.
                let previous = match (return_previous, condition) {
                    (true, _) | (_, PutCondition::IfModifyIndex(_)) => Some(self.live(key, now)?),
                    _ => None,
                };
                let (exists, string) = match &previous {
                    Some(record) => (
                        record.is_some(),
                        record.as_ref().is_none_or(|r| r.kind == ValueKind::String),
                    ),
                    None => {
                        let meta = self.live_meta(key, now)?;
                        (
                            meta.is_some(),
                            meta.is_none_or(|m| m.kind == ValueKind::String),
                        )
                    }
                };
                let allowed = match condition {
                    PutCondition::Always => true,
                    PutCondition::IfAbsent => !exists,
                    PutCondition::IfPresent => exists,
                    PutCondition::IfModifyIndex(expected) => previous
                        .iter()
                        .flatten()
                        .any(|r| r.modify_index == *expected),
                    PutCondition::IfNotCollection => string,
                    PutCondition::IfPresentString => exists && string,
                };
                // A refusal says why with the record it found.
                let previous = match previous {
                    Some(record) => record,
                    None if !allowed => self.live(key, now)?,
                    None => None,
                };
                if allowed {
                    self.put(key, value.clone(), *flags, *ttl, index, now)?;
                }
                CommandResult::Put {
                    written: allowed,
                    previous,
                    index,
                }
            }
            Command::PutMany { pairs } => {
                for (key, value) in pairs {
                    self.put(key, value.clone(), None, TtlUpdate::Clear, index, now)?;
                }
                CommandResult::Done
            }
            Command::Delete { keys, cas } => {
                let mut removed = 0;
                for key in keys {
                    let Some(raw) = self.raw(key)? else { continue };
                    let live = self.as_judged || !raw.is_expired(now);
                    if let Some(expected) = cas
                        && (!live || raw.modify_index != *expected)
                    {
                        continue;
                    }
                    removed += u64::from(live);
                    self.set(key.clone(), None)?;
                }
                CommandResult::Deleted(removed)
            }
            Command::DeletePrefix { prefix } => {
                let mut removed = 0;
                let mut found = Vec::new();
                for key in self.keys_under(prefix)? {
                    if let Some(raw) = self.raw(&key)? {
                        removed += u64::from(!raw.is_expired(now));
                        self.set(key.clone(), None)?;
                        found.push(key);
                    }
                }
                if let Some(expanded) = &mut self.expanded {
                    expanded.push(found);
                }
                CommandResult::Deleted(removed)
            }
            Command::ReadPrefix { prefix } => {
                let mut entries = Vec::new();
                for key in self.keys_under(prefix)? {
                    if member_slot(&key).is_some() {
                        continue;
                    }
                    if let Some(record) = self.live(&key, now)? {
                        entries.push((key, record));
                    }
                }
                let removed = self
                    .storage
                    .removal_watermark(ShardId(self.shard))?
                    .max(self.removed_at.unwrap_or(0));
                let highest = entries.iter().map(|(_, r)| r.modify_index).max();
                CommandResult::Entries {
                    index: highest.unwrap_or(0).max(removed),
                    entries,
                }
            }
            Command::Incr { key, delta } => {
                let current = self.live(key, now)?;
                let sum = match &current {
                    Some(r) if r.kind != ValueKind::String => Err(ErrorCode::WrongType),
                    current => add_integer(current.as_ref().map(|r| &r.value[..]), *delta),
                };
                match sum {
                    Ok(next) => {
                        self.put(
                            key,
                            Bytes::from(next.to_string()),
                            None,
                            TtlUpdate::Keep,
                            index,
                            now,
                        )?;
                        CommandResult::Incr(Ok(next))
                    }
                    Err(code) => CommandResult::Incr(Err(code)),
                }
            }
            Command::SetTtl { key, ttl } => match self.live(key, now)? {
                // Clearing a TTL the key does not have changes nothing (PERSIST answers 0).
                Some(record) if *ttl == TtlUpdate::Clear && record.expires_at_ms.is_none() => {
                    CommandResult::TtlSet(false)
                }
                Some(mut record) => {
                    record.expires_at_ms = match ttl {
                        TtlUpdate::Clear => None,
                        TtlUpdate::Keep => record.expires_at_ms,
                        TtlUpdate::At(at) => Some(*at),
                    };
                    record.modify_index = index;
                    // An expiry already in the past deletes the key, as in Redis.
                    let expired = record.is_expired(now);
                    self.set(key.clone(), (!expired).then_some(record))?;
                    CommandResult::TtlSet(true)
                }
                None => CommandResult::TtlSet(false),
            },
            Command::Read { keys } => CommandResult::Records(
                keys.iter()
                    .map(|key| self.live(key, now))
                    .collect::<Result<_, _>>()?,
            ),
            Command::Transaction { watches, commands } => {
                CommandResult::Transaction(self.apply_transaction(index, now, watches, commands)?)
            }
            // Judged by the transaction around it; alone it changes nothing.
            Command::Check { .. } => CommandResult::Done,
            // Judged by the prepare around it (see `owns_keys_of`).
            Command::OwnsSlots { .. } => CommandResult::Done,
            Command::Edit { key, edit } => {
                let current = self.live(key, now)?;
                if current
                    .as_ref()
                    .is_some_and(|r| r.kind != ValueKind::String)
                {
                    CommandResult::Edited(Err(ErrorCode::WrongType))
                } else {
                    CommandResult::Edited(self.edit(key, edit, current, index, now)?)
                }
            }
            // Applied by the raft layer through `Storage::split_shard`, which needs what only
            // it knows (the new group's first state); never part of a batch.
            Command::Split { .. } => CommandResult::Moved,
            Command::Lock { key, op } => CommandResult::Lock(self.lock(key, op, index, now)?),
            Command::Session { key, op } => {
                CommandResult::Records(vec![self.session(key, op, index, now)?])
            }
            Command::Hash { key, op } => CommandResult::Hash(self.hash(key, op, index, now)?),
            Command::SetMembers { key, op } => {
                CommandResult::SetMembers(self.set_members(key, op, index, now)?)
            }
            Command::List { key, op } => CommandResult::List(self.list(key, op, index, now)?),
            Command::SortedSet { key, op } => {
                CommandResult::SortedSet(self.sorted_set(key, op, index, now)?)
            }
            Command::Prepare {
                txn,
                record,
                expires_ms,
                creates_record,
                all_keys,
                commands,
            } => CommandResult::Prepared(self.prepare(
                index,
                now,
                *txn,
                record,
                *expires_ms,
                *creates_record,
                all_keys,
                commands,
            )?),
            Command::Decide { record, decision } => {
                CommandResult::Decided(self.decide(index, now, record, *decision)?)
            }
            Command::Resolve { txn, keys, commit } => {
                CommandResult::Resolved(self.resolve(index, now, *txn, keys, *commit)?)
            }
            Command::Forget { records } => {
                for record in records {
                    self.forget_record(record)?;
                }
                CommandResult::Done
            }
            Command::ResolveMany { resolutions, .. } => {
                for resolution in resolutions {
                    self.resolve_at_prepare(now, resolution)?;
                }
                CommandResult::Done
            }
            Command::Reap { keys } => {
                for key in keys {
                    // A key held by a transaction waits for it; the next scan finds it again.
                    if self.intent_on(key)?.is_some() {
                        continue;
                    }
                    if self.raw(key)?.is_some_and(|r| r.is_expired(now)) {
                        self.set(key.clone(), None)?;
                    }
                }
                CommandResult::Done
            }
        })
    }
}

/// `old` as an integer (missing: 0) plus `delta` (`INCRBY`, `HINCRBY`).
fn add_integer(old: Option<&[u8]>, delta: i64) -> Result<i64, ErrorCode> {
    let base = match old {
        None => 0,
        Some(v) => trireme_types::int::parse_i64(v).ok_or(ErrorCode::NotInteger)?,
    };
    base.checked_add(delta).ok_or(ErrorCode::Overflow)
}

/// `old` as a decimal (missing: 0) plus the decimal `increment`, printed as Redis prints it
/// (`INCRBYFLOAT`, `HINCRBYFLOAT`): `InvalidArgument` when either is not a number,
/// `Overflow` when the sum is infinite.
fn add_decimal(old: Option<&[u8]>, increment: &[u8]) -> Result<Bytes, ErrorCode> {
    let base = match old {
        None => Some(0.0),
        Some(v) => trireme_types::int::parse_f64(v),
    };
    let (Some(base), Some(increment)) = (base, trireme_types::int::parse_f64(increment)) else {
        return Err(ErrorCode::InvalidArgument);
    };
    let sum = base + increment;
    if !sum.is_finite() {
        return Err(ErrorCode::Overflow);
    }
    Ok(Bytes::from(trireme_types::int::format_f64(sum)))
}

/// Name of the `data_meta` row listing the sessions a shard refuses (ended), with when.
const ENDED_ROW: &str = "ended_sessions";

/// Name of the `data_meta` row that holds the log index of the last entry applied to the
/// shard, as a big-endian `u64` (see [`ShardView::applied_index`](crate::ShardView::applied_index)).
/// Written with every applied batch; whoever replaces a shard's meta rows (a snapshot
/// installed) writes it too.
pub const APPLIED_INDEX_ROW: &str = "applied_index";

/// How long a shard remembers an ended session: far longer than any request that could carry
/// it can be on its way.
const ENDED_KEEP_MS: u64 = 60 * 60 * 1000;

fn encode_ended(ended: &[(Bytes, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (session, at) in ended {
        out.extend_from_slice(&at.to_be_bytes());
        out.push(session.len().min(255) as u8);
        out.extend_from_slice(&session[..session.len().min(255)]);
    }
    out
}

fn decode_ended(mut bytes: &[u8]) -> Result<Vec<(Bytes, u64)>, StorageError> {
    let corrupt = || StorageError::Corrupt("an ended-sessions row".into());
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let at = u64::from_be_bytes(
            bytes
                .get(..8)
                .ok_or_else(corrupt)?
                .try_into()
                .map_err(|_| corrupt())?,
        );
        let len = *bytes.get(8).ok_or_else(corrupt)? as usize;
        let session = bytes.get(9..9 + len).ok_or_else(corrupt)?;
        out.push((Bytes::copy_from_slice(session), at));
        bytes = &bytes[9 + len..];
    }
    Ok(out)
}

impl Storage {
    /// Applies committed entries to `shard` and records `meta` (the applied log id and
    /// membership, as the raft layer encodes them) in the same atomic batch. Returns one result
    /// per entry. Not synced: the log is the durable record; after a crash the raft layer
    /// re-applies entries past the last applied id found here.
    pub fn apply(
        &self,
        shard: ShardId,
        entries: &[ApplyEntry<'_>],
        meta: &[(&str, Vec<u8>)],
    ) -> Result<Vec<CommandResult>, StorageError> {
        let shard = shard.0;
        self.check_writable()?;
        let started = std::time::Instant::now();
        let index = self.key_index().shard(shard);
        let mut index = index.lock().unwrap_or_else(|e| e.into_inner());
        let keys = match &mut *index {
            Some(keys) => keys,
            built => built.insert(self.build_key_index(shard)?),
        };
        let mut pending = Pending {
            storage: self,
            shard,
            owned: self.slot_range(ShardId(shard))?,
            changes: HashMap::new(),
            order: Vec::new(),
            stored_expiry: HashMap::new(),
            stored_collections: HashMap::new(),
            changed_members: std::collections::BTreeSet::new(),
            pop_hints: Vec::new(),
            undo: None,
            ended: None,
            ended_changed: false,
            index: 0,
            removed_at: None,
            keys,
            intents_here: self.intents.may_block(shard),
            as_judged: false,
            expanded: None,
            txn_rows: Vec::new(),
        };
        let mut results = Vec::with_capacity(entries.len());
        for entry in entries {
            results.push(match entry.command {
                Some(command) => pending.apply(entry.index, command)?,
                None => CommandResult::Done,
            });
        }
        let mut batch = self.tables.batch();
        // Every key the batch changes, for the watchers once it is written. Gathered whether
        // or not anybody watches now: a watch made before the write is to be woken by it
        // (a blocking pop on the leader registers, reads, finds nothing, and waits).
        let mut watched: Vec<Bytes> = Vec::with_capacity(pending.order.len());
        if pending.ended_changed
            && let Some(ended) = &pending.ended
        {
            batch.insert(
                Space::Meta,
                owned_key(shard, ENDED_ROW.as_bytes()),
                encode_ended(ended),
            );
        }
        // A removal is written behind its gate, so that no read pairs the rows from before
        // it with the watermark from after it.
        let gate = match pending.removed_at {
            Some(_) => Some(self.removal_gate(shard)?),
            None => None,
        };
        let mut removing = gate.as_ref().map(|g| g.enter());
        if let Some(at) = pending.removed_at {
            if let Some(removing) = &mut removing {
                removing.raises_to(at);
            }
            self.raise_removal(shard, at)?;
            batch.insert(
                Space::Meta,
                owned_key(shard, REMOVED_ROW.as_bytes()),
                encode_removal(at),
            );
        }
        let observer = self.observer();
        let mut observed = Vec::new();
        let mut member_changes = Vec::new();
        let mut dead = Vec::new();
        // Intents gone in this batch: readers stop looking for them once it is published.
        let mut intents_gone = Vec::new();
        let mut holds_gone = Vec::new();
        for key in pending.order {
            let full = owned_key(shard, &key);
            let record = pending.changes.remove(&key).flatten();
            if let Some(observer) = observer
                && observer.wants(ShardId(shard), &key)
            {
                observed.push((key.clone(), record.clone()));
            }
            let old_expiry = pending.stored_expiry.get(&key).copied().flatten();
            let new_expiry = record.as_ref().and_then(|r| r.expires_at_ms);
            if old_expiry != new_expiry {
                if let Some(at) = old_expiry {
                    batch.remove(Space::Expiry, expiry_key(shard, at, &key));
                }
                if let Some(at) = new_expiry {
                    batch.insert(Space::Expiry, expiry_key(shard, at, &key), b"".to_vec());
                }
            }
            if member_slot(&key).is_none() {
                // A collection gone or replaced leaves its stored version dead: its rows
                // are queued for the purge once the batch is written.
                let before = pending.stored_collections.get(&key).copied();
                let after = record
                    .as_ref()
                    .map(|r| (r.kind, r.create_index))
                    .filter(|(kind, _)| *kind != ValueKind::String);
                if let Some((_, version)) = before
                    && before != after
                {
                    pending.keys.members.forget(&key);
                    dead.push(DeadVersion {
                        shard,
                        key: key.clone(),
                        version,
                    });
                }
                match &record {
                    Some(record) => pending.keys.insert(&key, KeyMeta::of(record)),
                    None => pending.keys.remove(&key),
                }
            } else if split_member_key(&key).is_some() {
                member_changes.push((key.clone(), record.as_ref().map(MemberRow::of)));
            }
            if is_record_key(&key) {
                match record.as_ref().and_then(|r| TxnRecord::decode(&r.value)) {
                    Some(txn) => self.intents.record_written(shard, key.clone(), txn),
                    None => self.intents.record_removed(shard, &key),
                }
            }
            if let Some(target) = intent_target(&key) {
                match &record {
                    // Readers look for it before it is published.
                    Some(row) => self.intents.added(
                        shard,
                        Bytes::copy_from_slice(target),
                        crate::intents::Held::of(row)?,
                    ),
                    None => intents_gone.push(Bytes::copy_from_slice(target)),
                }
            } else if hold_target(&key).is_some() {
                match &record {
                    Some(row) => {
                        self.intents
                            .hold_added(shard, key.clone(), crate::intents::Held::of(row)?)
                    }
                    None => holds_gone.push(key.clone()),
                }
            }
            match record {
                Some(record) => batch.insert(Space::Data, full, record.encode().to_vec()),
                None => batch.remove(Space::Data, full),
            }
            watched.push(key);
        }
        // After every record of the batch is in the key index: a member's collection kind
        // is known there.
        for (changed, row) in member_changes {
            let Some((key, version, member)) = split_member_key(&changed) else {
                continue;
            };
            if pending
                .keys
                .get(key)
                .is_none_or(|meta| meta.create_index != version)
            {
                // A row of a version that died in this batch (the index holds the live one).
                continue;
            }
            match row {
                Some(row) => match pending.keys.get(key).map(|meta| meta.kind) {
                    // A list's elements are not indexed: no write needs to know them.
                    Some(ValueKind::List) => {}
                    kind => match kind.and_then(|kind| row.number(kind)) {
                        Some(number) => pending.keys.members.insert(key, member, number),
                        // A member row without its collection's record (none is written
                        // so), or without a number: never trusted, read.
                        None => pending.keys.members.leave_out(key),
                    },
                },
                None => pending.keys.members.remove(key, member),
            }
        }
        for (name, value) in meta {
            batch.insert(
                Space::Meta,
                owned_key(shard, name.as_bytes()),
                value.clone(),
            );
        }
        if let Some(last) = entries.last() {
            batch.insert(
                Space::Meta,
                owned_key(shard, APPLIED_INDEX_ROW.as_bytes()),
                last.index.to_be_bytes().to_vec(),
            );
        }
        if let Err(e) = batch.commit() {
            // The index already holds what was not written.
            self.key_index().forget(shard);
            if let Err(e) = self.intents.load(&self.tables, shard) {
                tracing::warn!(shard, error = %e, "cannot read a shard's intents again");
            }
            return Err(e);
        }
        for key in &intents_gone {
            self.intents.removed(shard, key);
        }
        for row in &holds_gone {
            self.intents.hold_removed(shard, row);
        }
        crate::crash::point("applied");
        self.purger.queue(dead);
        drop(removing);
        if let (Some(observer), Some(last)) = (observer, entries.last())
            && !observed.is_empty()
        {
            observer.applied(ShardId(shard), last.index, observed);
        }
        self.watchers()
            .keys_changed(watched.iter().map(|k| k.as_ref()));
        let took = started.elapsed();
        self.metrics().applies.record(took);
        self.metrics().apply_batches.record(took);
        Ok(results)
    }

    /// Replaces everything stored for `shard` with `export`, atomically.
    pub fn import_shard(&self, shard: ShardId, export: &ShardExport) -> Result<(), StorageError> {
        let shard = shard.0;
        self.check_writable()?;
        // Rows replaced outside the apply loop. The raft layer never applies to a shard while
        // it installs one (one state machine call at a time); the index is dropped again once
        // the rows are in, so the next apply builds it from them.
        self.key_index().forget(shard);
        self.intents.replacing(shard);
        // Collection rows come in the unversioned layout: stored under their records'
        // versions.
        let versions: HashMap<&[u8], u64> = export
            .records
            .iter()
            .filter(|(key, value)| {
                row_parts(key).is_none() && Record::peek_kind(value) != ValueKind::String
            })
            .map(|(key, value)| Ok((key.as_slice(), Record::decode(value)?.create_index)))
            .collect::<Result<_, StorageError>>()?;
        let mut records = Vec::with_capacity(export.records.len());
        for (key, value) in &export.records {
            if let Some(stored) = stored_row_key(key, |key| Ok(versions.get(key).copied()))? {
                records.push((stored, value));
            }
        }
        // A key must not be both removed and inserted in one batch, so only stale keys go.
        let incoming: std::collections::HashSet<&[u8]> =
            records.iter().map(|(k, _)| &k[..]).collect();
        let mut batch = self.tables.batch();
        for row in self.tables.prefix(Space::Data, &shard.to_be_bytes()) {
            let (key, _) = row?;
            if !incoming.contains(&key[4..]) {
                batch.remove(Space::Data, key);
            }
        }
        self.stage_meta(&mut batch, shard, &export.meta)?;
        let gate = self.removal_gate(shard)?;
        let mut removing = gate.enter();
        removing.raises_to(self.raise_removal_from(shard, &export.meta)?);
        for row in self.tables.prefix(Space::Expiry, &shard.to_be_bytes()) {
            batch.remove(Space::Expiry, row?.0);
        }
        for (key, value) in &records {
            if let Some(at) = Record::peek_expiry(value) {
                batch.insert(Space::Expiry, expiry_key(shard, at, key), b"".to_vec());
            }
            batch.insert(Space::Data, owned_key(shard, key), value.to_vec());
        }
        batch.commit()?;
        self.key_index().forget(shard);
        self.intents.load(&self.tables, shard)?;
        self.forget_slot_range(shard);
        self.watchers().everything_changed();
        if let Some(observer) = self.observer() {
            observer.replaced(ShardId(shard));
        }
        Ok(())
    }

    /// Raises the cached removal watermark of `shard` to the one in `meta` (rows about to
    /// replace the shard's), before they are written.
    fn raise_removal_from(
        &self,
        shard: u32,
        meta: &[(String, Vec<u8>)],
    ) -> Result<u64, StorageError> {
        match meta.iter().find(|(name, _)| name == REMOVED_ROW) {
            Some((_, value)) => {
                let at = decode_removal(value)?;
                self.raise_removal(shard, at)?;
                Ok(at)
            }
            None => Ok(0),
        }
    }

    /// Stages in `batch` the replacement of every `data_meta` row of `shard` by `meta` (a
    /// row is never both removed and inserted in one batch: only stale ones go).
    fn stage_meta(
        &self,
        batch: &mut Batch<'_>,
        shard: u32,
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StorageError> {
        for row in self.tables.prefix(Space::Meta, &shard.to_be_bytes()) {
            let (key, _) = row?;
            if !meta.iter().any(|(name, _)| name.as_bytes() == &key[4..]) {
                batch.remove(Space::Meta, key);
            }
        }
        for (name, value) in meta {
            batch.insert(
                Space::Meta,
                owned_key(shard, name.as_bytes()),
                value.clone(),
            );
        }
        Ok(())
    }

    /// Writes `rows` (stored key without the shard prefix, encoded record) into `shard`, with
    /// their expiry entries, in one batch: a piece of a snapshot being installed into a
    /// replica that holds nothing yet ([`Storage::import_shard`] does it in one batch when
    /// the replica has state to replace). Collection rows of the unversioned layout (what
    /// snapshots carry) go under the version their record holds: that record must be in
    /// this piece or an earlier one (see [`is_unversioned_row`]).
    pub fn import_rows(&self, shard: ShardId, rows: &[(&[u8], &[u8])]) -> Result<(), StorageError> {
        let shard = shard.0;
        self.check_writable()?;
        self.key_index().forget(shard);
        self.intents.replacing(shard);
        let mut piece_versions: HashMap<&[u8], u64> = HashMap::new();
        for (key, value) in rows {
            if row_parts(key).is_none() && Record::peek_kind(value) != ValueKind::String {
                piece_versions.insert(key, Record::decode(value)?.create_index);
            }
        }
        // Records of earlier pieces are committed: one snapshot sees them all.
        let snapshot = self.tables.snapshot();
        let mut stored_versions = crate::purge::CollectionVersions::new(&snapshot, shard);
        let mut version_of = |key: &[u8]| -> Result<Option<u64>, StorageError> {
            match piece_versions.get(key) {
                Some(version) => Ok(Some(*version)),
                None => stored_versions.version_of(shard, key),
            }
        };
        let mut batch = self.tables.batch();
        for (key, value) in rows {
            let Some(stored) = stored_row_key(key, &mut version_of)? else {
                continue;
            };
            if let Some(at) = Record::peek_expiry(value) {
                batch.insert(Space::Expiry, expiry_key(shard, at, &stored), b"".to_vec());
            }
            batch.insert(Space::Data, owned_key(shard, &stored), value.to_vec());
        }
        batch.commit()?;
        self.key_index().forget(shard);
        self.intents.load(&self.tables, shard)?;
        Ok(())
    }

    /// Replaces every `data_meta` row of `shard` with `meta`, in one batch: the last step of
    /// an install by pieces, which makes the installed rows the shard's state.
    pub fn replace_shard_meta(
        &self,
        shard: ShardId,
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StorageError> {
        let shard = shard.0;
        self.check_writable()?;
        let mut batch = self.tables.batch();
        self.stage_meta(&mut batch, shard, meta)?;
        let gate = self.removal_gate(shard)?;
        let mut removing = gate.enter();
        removing.raises_to(self.raise_removal_from(shard, meta)?);
        batch.commit()?;
        self.key_index().forget(shard);
        self.forget_slot_range(shard);
        self.watchers().everything_changed();
        if let Some(observer) = self.observer() {
            observer.replaced(ShardId(shard));
        }
        Ok(())
    }

    /// Applies a split of `parent` at `at_slot` into the new shard `child`, in one atomic
    /// batch: the parent's rows in slots `at_slot..=range.1` leave it, its `slots` row becomes
    /// the lower part, and `parent_meta` (the applied log id) is written. With `seed`, those
    /// rows become the child's, with the child's `slots` row and `seed` (the new group's first
    /// applied state); without, they are dropped (this replica will receive the child from
    /// its leader). `range` is the parent's range as the split's proposer knew it; a parent
    /// whose recorded range differs (the split was applied before, or raced another one) is
    /// left alone. Returns how many rows moved, or `None` when it was left alone.
    ///
    /// `index` is the split entry's log index: the removal watermark of both shards rises to
    /// it (rows left the parent; the child's log continues after it).
    pub fn split_shard(
        &self,
        split: &ShardSplit,
        index: u64,
        parent_meta: &[(&str, Vec<u8>)],
        seed: Option<&[(&str, Vec<u8>)]>,
    ) -> Result<Option<u64>, StorageError> {
        self.check_writable()?;
        let ShardSplit {
            parent,
            child,
            at_slot,
            range,
        } = *split;
        let (parent, child) = (parent.0, child.0);
        self.key_index().forget(parent);
        self.key_index().forget(child);
        self.intents.replacing(parent);
        self.intents.replacing(child);
        let _loaded = LoadIntentsOnDrop {
            storage: self,
            shards: [parent, child],
        };
        let stored = self.slot_range(ShardId(parent))?;
        let mut batch = self.tables.batch();
        for (name, value) in parent_meta {
            batch.insert(
                Space::Meta,
                owned_key(parent, name.as_bytes()),
                value.clone(),
            );
        }
        batch.insert(
            Space::Meta,
            owned_key(parent, APPLIED_INDEX_ROW.as_bytes()),
            index.to_be_bytes().to_vec(),
        );
        let valid = range.0 < at_slot && at_slot <= range.1;
        if !valid || stored.is_some_and(|s| s != range) {
            batch.commit()?;
            return Ok(None);
        }
        let upper = (at_slot, range.1);
        // Both shards' rows change under their gates (always the parent's first).
        let (parent_gate, child_gate) = (self.removal_gate(parent)?, self.removal_gate(child)?);
        let mut removing = (parent_gate.enter(), child_gate.enter());
        removing.0.raises_to(index);
        removing.1.raises_to(index);
        self.raise_removal(parent, index)?;
        batch.insert(
            Space::Meta,
            owned_key(parent, REMOVED_ROW.as_bytes()),
            encode_removal(index),
        );
        let mut moved = 0u64;
        // Rows of dead collection versions leave the parent but the child never gets them.
        let snapshot = self.tables.snapshot();
        let mut live = crate::purge::CollectionVersions::new(&snapshot, parent);
        for row in self.tables.prefix(Space::Data, &parent.to_be_bytes()) {
            let (key, value) = row?;
            let user_key = &key[4..];
            if hold_target(user_key).is_some() {
                // A prefix hold covers keys of both halves: each keeps it.
                if seed.is_some() {
                    batch.insert(Space::Data, owned_key(child, user_key), value.to_vec());
                }
                continue;
            }
            if !crate::store::in_slots(user_key, Some(upper)) {
                continue;
            }
            if let Some(parts) = row_parts(user_key)
                && !parts
                    .version
                    .map_or(Ok(false), |version| live.is_live(parts.key, version))?
            {
                batch.remove(Space::Data, key.clone());
                continue;
            }
            moved += 1;
            batch.remove(Space::Data, key.clone());
            let expires = Record::peek_expiry(&value);
            if let Some(at) = expires {
                batch.remove(Space::Expiry, expiry_key(parent, at, user_key));
            }
            if seed.is_some() {
                if let Some(at) = expires {
                    batch.insert(Space::Expiry, expiry_key(child, at, user_key), b"".to_vec());
                }
                batch.insert(Space::Data, owned_key(child, user_key), value.to_vec());
            }
        }
        batch.insert(
            Space::Meta,
            owned_key(parent, SLOTS_ROW.as_bytes()),
            crate::store::encode_slots((range.0, at_slot - 1)),
        );
        if let Some(seed) = seed {
            batch.insert(
                Space::Meta,
                owned_key(child, SLOTS_ROW.as_bytes()),
                crate::store::encode_slots(upper),
            );
            for (name, value) in seed {
                batch.insert(
                    Space::Meta,
                    owned_key(child, name.as_bytes()),
                    value.clone(),
                );
            }
            // The child's log goes on after the split entry.
            batch.insert(
                Space::Meta,
                owned_key(child, APPLIED_INDEX_ROW.as_bytes()),
                index.to_be_bytes().to_vec(),
            );
            self.raise_removal(child, index)?;
            batch.insert(
                Space::Meta,
                owned_key(child, REMOVED_ROW.as_bytes()),
                encode_removal(index),
            );
            // The keys that move keep being refused to the sessions that ended.
            if let Some(ended) = self.data_meta(ShardId(parent), ENDED_ROW)? {
                batch.insert(
                    Space::Meta,
                    owned_key(child, ENDED_ROW.as_bytes()),
                    ended.to_vec(),
                );
            }
        }
        batch.commit()?;
        // Readers check the cached ranges before they read the rows: forgotten at once.
        self.forget_slot_range(parent);
        self.forget_slot_range(child);
        drop(removing);
        self.watchers().everything_changed();
        if let Some(observer) = self.observer() {
            observer.replaced(ShardId(parent));
            if seed.is_some() {
                observer.replaced(ShardId(child));
            }
        }
        // The child's group starts from these rows, and its log goes on from the split: a
        // crash must not take them back while that log survives, so they are made durable
        // now rather than re-applied from the parent's log. Last, so that nothing above
        // (readers, the gate) waits for the disk.
        self.tables.flush()?;
        Ok(Some(moved))
    }

    /// Whether `shard` has any state-machine state here (rows or an applied log id).
    pub fn has_shard_state(&self, shard: ShardId) -> Result<bool, StorageError> {
        let shard = shard.0;
        let prefix = shard.to_be_bytes();
        Ok(self.tables.prefix(Space::Meta, &prefix).next().is_some()
            || self.tables.prefix(Space::Data, &prefix).next().is_some())
    }
}

/// Reads the intents of shards whose rows a split replaced, however the split ends: until
/// then their reads check every key.
struct LoadIntentsOnDrop<'s> {
    storage: &'s Storage,
    shards: [u32; 2],
}

impl Drop for LoadIntentsOnDrop<'_> {
    fn drop(&mut self) {
        for shard in self.shards {
            if let Err(e) = self.storage.intents.load(&self.storage.tables, shard) {
                // Left marked as being replaced: its reads keep checking, which is safe.
                tracing::warn!(shard, error = %e, "cannot read a shard's intents after a split");
            }
        }
    }
}

/// One split of a shard, as [`Storage::split_shard`] applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSplit {
    /// The shard split.
    pub parent: ShardId,
    /// The new shard.
    pub child: ShardId,
    /// The first slot the new shard owns.
    pub at_slot: u16,
    /// The parent's inclusive slot range before the split.
    pub range: (u16, u16),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StorageOptions;

    fn cmd(now_ms: u64, command: Command) -> LogCommand {
        LogCommand { now_ms, command }
    }

    fn put(key: &str, value: &str, condition: PutCondition, ttl: TtlUpdate) -> Command {
        Command::Put {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            flags: None,
            condition,
            ttl,
            return_previous: false,
        }
    }

    fn run(storage: &Storage, first_index: u64, commands: &[LogCommand]) -> Vec<CommandResult> {
        let entries: Vec<_> = commands
            .iter()
            .enumerate()
            .map(|(i, c)| ApplyEntry {
                index: first_index + i as u64,
                command: Some(c),
            })
            .collect();
        storage
            .apply(ShardId(0), &entries, &[("applied", b"x".to_vec())])
            .unwrap()
    }

    #[test]
    fn put_sets_indexes_and_conditions_decide() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let results = run(
            &storage,
            10,
            &[
                cmd(1, put("a", "1", PutCondition::IfAbsent, TtlUpdate::Clear)),
                cmd(1, put("a", "2", PutCondition::IfAbsent, TtlUpdate::Clear)),
                cmd(
                    1,
                    put("a", "3", PutCondition::IfModifyIndex(10), TtlUpdate::Clear),
                ),
                cmd(
                    1,
                    put("a", "4", PutCondition::IfModifyIndex(10), TtlUpdate::Clear),
                ),
                cmd(1, put("b", "5", PutCondition::IfPresent, TtlUpdate::Clear)),
            ],
        );
        let written: Vec<bool> = results
            .iter()
            .map(|r| matches!(r, CommandResult::Put { written: true, .. }))
            .collect();
        assert_eq!(written, [true, false, true, false, false]);
        let a = storage.get(ShardId(0), b"a", 1).unwrap().unwrap();
        assert_eq!(a.value, Bytes::from_static(b"3"));
        assert_eq!((a.create_index, a.modify_index), (10, 12));
        assert_eq!(storage.get(ShardId(0), b"b", 1).unwrap(), None);
        assert_eq!(
            storage.data_meta(ShardId(0), "applied").unwrap().as_deref(),
            Some(&b"x"[..])
        );
    }

    /// A plain write takes what it carries over (CreateIndex, flags, expiry) from the key
    /// index; the index must follow every way rows change: applies, an imported snapshot,
    /// a reopened store.
    #[test]
    fn plain_writes_carry_over_what_the_key_index_knows() {
        let dir = tempfile::tempdir().unwrap();
        let created = |storage: &Storage, key: &[u8]| {
            let record = storage.get(ShardId(0), key, 1).unwrap().unwrap();
            (record.create_index, record.flags, record.expires_at_ms)
        };
        {
            let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
            let mut flagged = put("f", "1", PutCondition::Always, TtlUpdate::At(50_000));
            if let Command::Put { flags, .. } = &mut flagged {
                *flags = Some(7);
            }
            run(&storage, 10, &[cmd(1, flagged)]);
            run(
                &storage,
                11,
                &[cmd(1, put("f", "2", PutCondition::Always, TtlUpdate::Keep))],
            );
            assert_eq!(created(&storage, b"f"), (10, 7, Some(50_000)));
            // Cleared expiry leaves no expiry entry behind.
            run(
                &storage,
                12,
                &[cmd(
                    1,
                    put("f", "3", PutCondition::Always, TtlUpdate::Clear),
                )],
            );
            assert_eq!(created(&storage, b"f"), (10, 7, None));
            assert_eq!(
                storage.shard_view(ShardId(0)).expiring(1, None).unwrap().0,
                0
            );
            // A key removed and written again is new.
            run(
                &storage,
                13,
                &[cmd(
                    1,
                    Command::Delete {
                        keys: vec![Bytes::from_static(b"f")],
                        cas: None,
                    },
                )],
            );
            run(
                &storage,
                14,
                &[cmd(1, put("f", "4", PutCondition::Always, TtlUpdate::Keep))],
            );
            assert_eq!(created(&storage, b"f"), (14, 0, None));

            // A snapshot replaces the rows: what it brings counts, not what the index held.
            let source_dir = tempfile::tempdir().unwrap();
            let source = Storage::open(source_dir.path(), &StorageOptions::default()).unwrap();
            run(
                &source,
                100,
                &[cmd(
                    1,
                    put("f", "s", PutCondition::Always, TtlUpdate::Clear),
                )],
            );
            let view = source.shard_view(ShardId(0));
            let mut export = ShardExport {
                meta: view.meta().unwrap(),
                records: Vec::new(),
            };
            view.for_each_record(|key, value| export.records.push((key.to_vec(), value.to_vec())))
                .unwrap();
            storage.import_shard(ShardId(0), &export).unwrap();
            run(
                &storage,
                101,
                &[cmd(1, put("f", "5", PutCondition::Always, TtlUpdate::Keep))],
            );
            assert_eq!(created(&storage, b"f"), (100, 0, None));
        }
        // Reopened, the index is built from the rows.
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        run(
            &storage,
            102,
            &[cmd(1, put("f", "6", PutCondition::Always, TtlUpdate::Keep))],
        );
        assert_eq!(created(&storage, b"f"), (100, 0, None));
    }

    /// Without `return_previous` a write whose condition holds says nothing of the record it
    /// replaced (it did not read it); a refused one says what it found; asked, it always does.
    #[test]
    fn a_put_returns_the_previous_record_when_asked_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let previous = |result: &CommandResult| match result {
            CommandResult::Put {
                written, previous, ..
            } => (*written, previous.as_ref().map(|r| r.value.clone())),
            other => panic!("{other:?}"),
        };
        let mut asked = put("k", "3", PutCondition::IfPresent, TtlUpdate::Clear);
        if let Command::Put {
            return_previous, ..
        } = &mut asked
        {
            *return_previous = true;
        }
        let results = run(
            &storage,
            1,
            &[
                cmd(1, put("k", "1", PutCondition::IfAbsent, TtlUpdate::Clear)),
                cmd(
                    1,
                    put("k", "2", PutCondition::IfNotCollection, TtlUpdate::Clear),
                ),
                cmd(1, put("k", "x", PutCondition::IfAbsent, TtlUpdate::Clear)),
                cmd(1, asked),
                cmd(1, put("n", "x", PutCondition::IfPresent, TtlUpdate::Clear)),
            ],
        );
        let seen: Vec<_> = results.iter().map(previous).collect();
        assert_eq!(
            seen,
            [
                (true, None),
                (true, None),
                (false, Some(Bytes::from_static(b"2"))),
                (true, Some(Bytes::from_static(b"2"))),
                (false, None),
            ]
        );
        // Decided by the key index in a later batch too (not only by this batch's changes).
        let results = run(
            &storage,
            10,
            &[
                cmd(1, put("k", "y", PutCondition::IfAbsent, TtlUpdate::Clear)),
                cmd(
                    1,
                    put("k", "4", PutCondition::IfPresentString, TtlUpdate::Clear),
                ),
            ],
        );
        let seen: Vec<_> = results.iter().map(previous).collect();
        assert_eq!(
            seen,
            [(false, Some(Bytes::from_static(b"3"))), (true, None)]
        );
    }

    #[test]
    fn a_late_renewal_never_takes_back_a_later_ones_time() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let key = trireme_types::session::session_key("s1");
        let session = |op: SessionOp| Command::Session {
            key: key.clone(),
            op,
        };
        let state = SessionState {
            id: "s1".into(),
            name: String::new(),
            node: "n1".into(),
            lock_delay_ms: 0,
            behavior: trireme_types::session::SessionBehavior::Release,
            ttl_ms: 1_000,
            renewed_at_ms: 1_000,
            invalidated: false,
            held: Vec::new(),
        };
        // Renewed at 5,000; then a renewal stamped at 3,000 (held up on a paused node)
        // applies: the session stays renewed at 5,000.
        run(
            &storage,
            1,
            &[
                cmd(1_000, session(SessionOp::Create(state))),
                cmd(5_000, session(SessionOp::Renew)),
                cmd(3_000, session(SessionOp::Renew)),
            ],
        );
        let row = storage.get_raw(ShardId(0), &key).unwrap().unwrap();
        let stored = SessionState::decode(&row.value).unwrap();
        assert_eq!(stored.renewed_at_ms, 5_000);
    }

    #[test]
    fn a_transaction_applies_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let key = |k: &str| Bytes::copy_from_slice(k.as_bytes());
        run(
            &storage,
            1,
            &[cmd(
                1,
                put("w", "1", PutCondition::Always, TtlUpdate::Clear),
            )],
        );
        let transaction = |expected: Option<u64>| Command::Transaction {
            watches: vec![(key("w"), KeyCheck::At(expected))],
            commands: vec![
                put("a", "x", PutCondition::Always, TtlUpdate::Clear),
                Command::Read {
                    keys: vec![key("a"), key("missing")],
                },
                Command::Incr {
                    key: key("a"),
                    delta: 1,
                },
            ],
        };
        // The watched key was written at index 1, not 7: nothing happens.
        let stale = run(&storage, 2, &[cmd(1, transaction(Some(7)))]);
        assert_eq!(stale, vec![CommandResult::Transaction(Err(0))]);
        assert_eq!(storage.get(ShardId(0), b"a", 1).unwrap(), None);
        // At the index it has, every command applies in order, the read seeing the write.
        let applied = run(&storage, 3, &[cmd(1, transaction(Some(1)))]);
        let CommandResult::Transaction(Ok(results)) = &applied[0] else {
            panic!("{applied:?}");
        };
        let CommandResult::Records(records) = &results[1] else {
            panic!("{results:?}");
        };
        assert_eq!(records[0].as_ref().map(|r| r.value.clone()), Some(key("x")));
        assert_eq!(records[1], None);
        assert_eq!(results[2], CommandResult::Incr(Err(ErrorCode::NotInteger)));
        assert_eq!(
            storage.get(ShardId(0), b"a", 1).unwrap().unwrap().value,
            key("x")
        );
        // A watch on a missing key holds while it stays missing.
        let absent = Command::Transaction {
            watches: vec![(key("missing"), KeyCheck::At(None))],
            commands: vec![Command::Delete {
                keys: vec![key("a")],
                cas: None,
            }],
        };
        let deleted = run(&storage, 4, &[cmd(1, absent)]);
        assert_eq!(
            deleted,
            vec![CommandResult::Transaction(Ok(vec![
                CommandResult::Deleted(1)
            ]))]
        );
    }

    #[test]
    fn a_failed_check_undoes_the_transaction_but_not_the_entries_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let key = |k: &str| Bytes::copy_from_slice(k.as_bytes());
        let transaction = Command::Transaction {
            watches: Vec::new(),
            commands: vec![
                put("a", "2", PutCondition::Always, TtlUpdate::Clear),
                put("new", "x", PutCondition::Always, TtlUpdate::Clear),
                Command::Check {
                    key: key("a"),
                    check: KeyCheck::At(Some(1)),
                },
            ],
        };
        // One apply run: an entry writing `a`, then the transaction, whose check sees its
        // own write of `a` (index 2, not 1) and fails.
        let results = run(
            &storage,
            1,
            &[
                cmd(1, put("a", "1", PutCondition::Always, TtlUpdate::Clear)),
                cmd(1, transaction),
            ],
        );
        assert_eq!(results[1], CommandResult::Transaction(Err(2)));
        assert_eq!(
            storage.get(ShardId(0), b"a", 1).unwrap().unwrap().value,
            key("1")
        );
        assert_eq!(storage.get(ShardId(0), b"new", 1).unwrap(), None);
    }

    #[test]
    fn transactions_sharing_an_entry_apply_or_undo_each_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let key = |k: &str| Bytes::copy_from_slice(k.as_bytes());
        let guarded = |k: &str, expected: Option<u64>| Command::Transaction {
            watches: vec![(key(k), KeyCheck::At(expected))],
            commands: vec![
                put(k, "txn", PutCondition::Always, TtlUpdate::Clear),
                put(
                    &format!("{k}-side"),
                    "txn",
                    PutCondition::Always,
                    TtlUpdate::Clear,
                ),
            ],
        };
        // One entry (index 1): a put, a transaction whose watch fails (b exists at no
        // index yet seen: it expects index 7), one whose watch holds (c is missing).
        let results = run(
            &storage,
            1,
            &[cmd(
                1,
                Command::Batch(vec![
                    put("a", "plain", PutCondition::Always, TtlUpdate::Clear),
                    guarded("b", Some(7)),
                    guarded("c", None),
                ]),
            )],
        );
        let CommandResult::Batch(results) = &results[0] else {
            panic!("{results:?}");
        };
        assert_eq!(results[1], CommandResult::Transaction(Err(0)));
        assert!(matches!(results[2], CommandResult::Transaction(Ok(_))));
        assert_eq!(
            storage.get(ShardId(0), b"a", 1).unwrap().unwrap().value,
            key("plain")
        );
        assert_eq!(storage.get(ShardId(0), b"b", 1).unwrap(), None);
        assert_eq!(storage.get(ShardId(0), b"b-side", 1).unwrap(), None);
        assert_eq!(
            storage.get(ShardId(0), b"c", 1).unwrap().unwrap().value,
            key("txn")
        );
        assert_eq!(
            storage
                .get(ShardId(0), b"c-side", 1)
                .unwrap()
                .unwrap()
                .value,
            key("txn")
        );
    }

    #[test]
    fn expiry_follows_the_command_clock() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        run(
            &storage,
            1,
            &[cmd(
                100,
                put("k", "v", PutCondition::Always, TtlUpdate::At(200)),
            )],
        );
        assert!(storage.get(ShardId(0), b"k", 199).unwrap().is_some());
        assert!(storage.get(ShardId(0), b"k", 200).unwrap().is_none());
        // An NX put at a time after expiry sees the key as absent.
        let results = run(
            &storage,
            2,
            &[cmd(
                250,
                put("k", "w", PutCondition::IfAbsent, TtlUpdate::Keep),
            )],
        );
        assert!(matches!(
            results[0],
            CommandResult::Put {
                written: true,
                previous: None,
                ..
            }
        ));
        let k = storage.get(ShardId(0), b"k", 10_000).unwrap().unwrap();
        assert_eq!((k.expires_at_ms, k.create_index), (None, 2));
        // Reap removes only what has expired by the reap command's time.
        run(
            &storage,
            3,
            &[
                cmd(300, put("x", "1", PutCondition::Always, TtlUpdate::At(400))),
                cmd(300, put("y", "1", PutCondition::Always, TtlUpdate::At(900))),
            ],
        );
        run(
            &storage,
            5,
            &[cmd(
                500,
                Command::Reap {
                    keys: vec![Bytes::from_static(b"x"), Bytes::from_static(b"y")],
                },
            )],
        );
        assert!(storage.get_raw(ShardId(0), b"x").unwrap().is_none());
        assert!(storage.get_raw(ShardId(0), b"y").unwrap().is_some());
        assert_eq!(
            storage.expired_keys(ShardId(0), 1000, 10).unwrap(),
            vec![Bytes::from_static(b"y")]
        );
    }

    #[test]
    fn incr_delete_and_prefix_delete() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let results = run(
            &storage,
            1,
            &[
                cmd(
                    1,
                    Command::Incr {
                        key: Bytes::from_static(b"n"),
                        delta: 5,
                    },
                ),
                cmd(
                    1,
                    Command::Incr {
                        key: Bytes::from_static(b"n"),
                        delta: -7,
                    },
                ),
                cmd(1, put("s", "abc", PutCondition::Always, TtlUpdate::Clear)),
                cmd(
                    1,
                    Command::Incr {
                        key: Bytes::from_static(b"s"),
                        delta: 1,
                    },
                ),
                cmd(
                    1,
                    put(
                        "max",
                        &i64::MAX.to_string(),
                        PutCondition::Always,
                        TtlUpdate::Clear,
                    ),
                ),
                cmd(
                    1,
                    Command::Incr {
                        key: Bytes::from_static(b"max"),
                        delta: 1,
                    },
                ),
            ],
        );
        assert_eq!(results[0], CommandResult::Incr(Ok(5)));
        assert_eq!(results[1], CommandResult::Incr(Ok(-2)));
        assert_eq!(results[3], CommandResult::Incr(Err(ErrorCode::NotInteger)));
        assert_eq!(results[5], CommandResult::Incr(Err(ErrorCode::Overflow)));
        run(
            &storage,
            10,
            &[
                cmd(1, put("dir/a", "1", PutCondition::Always, TtlUpdate::Clear)),
                cmd(1, put("dir/b", "1", PutCondition::Always, TtlUpdate::Clear)),
            ],
        );
        let results = run(
            &storage,
            12,
            &[
                cmd(1, put("dir/c", "1", PutCondition::Always, TtlUpdate::Clear)),
                cmd(
                    1,
                    Command::DeletePrefix {
                        prefix: Bytes::from_static(b"dir/"),
                    },
                ),
                cmd(
                    1,
                    Command::Delete {
                        keys: vec![Bytes::from_static(b"n")],
                        cas: Some(99),
                    },
                ),
                cmd(
                    1,
                    Command::Delete {
                        keys: vec![Bytes::from_static(b"n"), Bytes::from_static(b"zz")],
                        cas: None,
                    },
                ),
            ],
        );
        assert_eq!(results[1], CommandResult::Deleted(3));
        assert_eq!(results[2], CommandResult::Deleted(0));
        assert_eq!(results[3], CommandResult::Deleted(1));
        assert!(
            storage
                .scan(ShardId(0), b"dir/", None, 100, 1, None)
                .unwrap()
                .is_empty()
        );
        let rest: Vec<_> = storage
            .scan(ShardId(0), b"", None, 100, 1, None)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            rest,
            vec![Bytes::from_static(b"max"), Bytes::from_static(b"s")]
        );
        let after: Vec<_> = storage
            .scan(ShardId(0), b"", Some(b"max"), 100, 1, None)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(after, vec![Bytes::from_static(b"s")]);
    }

    #[test]
    fn a_filtered_scan_counts_every_kept_row_and_returns_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let always = |k, v| put(k, v, PutCondition::Always, TtlUpdate::Clear);
        run(
            &storage,
            1,
            &[
                cmd(1, always("doc/c", "x3")),
                cmd(1, always("doc/a", "x1")),
                cmd(1, always("doc/b", "y")),
                cmd(1, always("docs/a", "x")),
                cmd(
                    1,
                    put("doc/d", "x4", PutCondition::Always, TtlUpdate::At(5)),
                ),
            ],
        );
        let keep_x = |v: &[u8]| v.starts_with(b"x");
        let (kept, first) = storage
            .scan_filtered(ShardId(0), b"doc/", 10, 1, None, keep_x)
            .unwrap();
        assert_eq!(
            kept, 2,
            "doc/a and doc/c; doc/d has expired, docs/a is another prefix"
        );
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, Bytes::from_static(b"doc/a"));
        assert_eq!(first[0].1.value, Bytes::from_static(b"x1"));
        assert_eq!(first[0].1.modify_index, 2);
        let (kept, all) = storage
            .scan_filtered(ShardId(0), b"doc/", 1, 10, None, keep_x)
            .unwrap();
        assert_eq!((kept, all.len()), (3, 3), "doc/d is live before its expiry");
    }

    #[test]
    fn a_batch_applies_in_order_under_one_index() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let batch = Command::Batch(vec![
            put("a", "1", PutCondition::Always, TtlUpdate::Clear),
            Command::Incr {
                key: Bytes::from_static(b"n"),
                delta: 2,
            },
            put("b", "2", PutCondition::IfPresent, TtlUpdate::Clear),
        ]);
        let results = run(&storage, 7, &[cmd(1, batch)]);
        let CommandResult::Batch(inner) = &results[0] else {
            panic!("{results:?}")
        };
        assert!(matches!(
            inner[0],
            CommandResult::Put {
                written: true,
                index: 7,
                ..
            }
        ));
        assert_eq!(inner[1], CommandResult::Incr(Ok(2)));
        assert!(matches!(
            inner[2],
            CommandResult::Put { written: false, .. }
        ));
        assert_eq!(
            storage
                .get(ShardId(0), b"a", 1)
                .unwrap()
                .unwrap()
                .modify_index,
            7
        );
        assert_eq!(
            storage.get(ShardId(0), b"n", 1).unwrap().unwrap().value,
            Bytes::from_static(b"2")
        );
        assert!(storage.get(ShardId(0), b"b", 1).unwrap().is_none());
    }

    #[test]
    fn export_import_round_trip_replaces_the_shard() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        run(
            &storage,
            1,
            &[
                cmd(1, put("keep", "1", PutCondition::Always, TtlUpdate::Clear)),
                cmd(1, put("gone", "1", PutCondition::Always, TtlUpdate::Clear)),
            ],
        );
        let view = storage.shard_view(ShardId(0));
        let mut export = ShardExport {
            meta: view.meta().unwrap(),
            records: Vec::new(),
        };
        view.for_each_record(|key, value| export.records.push((key.to_vec(), value.to_vec())))
            .unwrap();
        assert_eq!(export.records.len(), 2);
        let other_dir = tempfile::tempdir().unwrap();
        let other = Storage::open(other_dir.path(), &StorageOptions::default()).unwrap();
        other
            .apply(
                ShardId(0),
                &[ApplyEntry {
                    index: 1,
                    command: Some(&cmd(
                        1,
                        put("stale", "x", PutCondition::Always, TtlUpdate::Clear),
                    )),
                }],
                &[],
            )
            .unwrap();
        other.import_shard(ShardId(0), &export).unwrap();
        let keys: Vec<_> = other
            .scan(ShardId(0), b"", None, 10, 1, None)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            vec![Bytes::from_static(b"gone"), Bytes::from_static(b"keep")]
        );
        assert_eq!(
            other.data_meta(ShardId(0), "applied").unwrap().as_deref(),
            Some(&b"x"[..])
        );
    }

    #[test]
    fn a_split_moves_the_upper_slots_and_the_parent_refuses_them_after() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        let puts: Vec<LogCommand> = keys
            .iter()
            .map(|k| cmd(1, put(k, "v", PutCondition::Always, TtlUpdate::At(1_000))))
            .collect();
        run(&storage, 1, &puts);
        let split = ShardSplit {
            parent: ShardId(0),
            child: ShardId(5),
            at_slot: 8192,
            range: (0, 16383),
        };
        let seed = [("applied", b"child".to_vec())];
        let moved = storage
            .split_shard(&split, 9, &[("applied", b"s".to_vec())], Some(&seed))
            .unwrap()
            .expect("applied");
        let upper: Vec<&String> = keys
            .iter()
            .filter(|k| trireme_types::key_slot(k.as_bytes()) >= 8192)
            .collect();
        assert_eq!(moved, upper.len() as u64);
        assert!(moved > 50 && moved < 150, "about half move: {moved}");
        assert_eq!(storage.slot_range(ShardId(0)).unwrap(), Some((0, 8191)));
        assert_eq!(storage.slot_range(ShardId(5)).unwrap(), Some((8192, 16383)));
        for key in &keys {
            let upper_key = trireme_types::key_slot(key.as_bytes()) >= 8192;
            assert_eq!(
                storage
                    .get_raw(ShardId(0), key.as_bytes())
                    .unwrap()
                    .is_some(),
                !upper_key
            );
            assert_eq!(
                storage
                    .get_raw(ShardId(5), key.as_bytes())
                    .unwrap()
                    .is_some(),
                upper_key
            );
        }
        // Expiry entries follow their rows.
        assert_eq!(
            storage
                .expired_keys(ShardId(5), 2_000, 1_000)
                .unwrap()
                .len() as u64,
            moved
        );
        assert_eq!(
            storage
                .expired_keys(ShardId(0), 2_000, 1_000)
                .unwrap()
                .len(),
            keys.len() - upper.len()
        );
        // The parent refuses its former keys, and still takes its own.
        let lower = (0..)
            .map(|i| format!("new{i}"))
            .find(|k| trireme_types::key_slot(k.as_bytes()) < 8192)
            .unwrap();
        let results = run(
            &storage,
            300,
            &[
                cmd(
                    1,
                    put(upper[0], "late", PutCondition::Always, TtlUpdate::Clear),
                ),
                cmd(
                    1,
                    Command::Batch(vec![
                        put(upper[1], "late", PutCondition::Always, TtlUpdate::Clear),
                        put(&lower, "ok", PutCondition::Always, TtlUpdate::Clear),
                    ]),
                ),
            ],
        );
        assert_eq!(results[0], CommandResult::Moved);
        let CommandResult::Batch(inner) = &results[1] else {
            panic!("a batch result: {results:?}");
        };
        assert_eq!(inner[0], CommandResult::Moved);
        assert!(matches!(inner[1], CommandResult::Put { written: true, .. }));
        assert!(
            storage
                .get_raw(ShardId(0), upper[0].as_bytes())
                .unwrap()
                .is_none()
        );
        // The same split again (a replayed entry) changes nothing.
        assert_eq!(
            storage
                .split_shard(&split, 10, &[("applied", b"t".to_vec())], Some(&seed))
                .unwrap(),
            None
        );
        // A scan limited to the parent's slots sees only the parent's keys.
        let scanned = storage
            .scan(ShardId(5), b"", None, 1_000, 1, Some((8192, 12000)))
            .unwrap();
        assert!(scanned.len() < upper.len());
        assert!(
            scanned
                .iter()
                .all(|(k, _)| trireme_types::key_slot(k) <= 12000)
        );
    }

    #[test]
    fn a_replica_that_does_not_seed_drops_the_upper_rows() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let puts: Vec<LogCommand> = (0..50)
            .map(|i| {
                cmd(
                    1,
                    put(
                        &format!("k{i}"),
                        "v",
                        PutCondition::Always,
                        TtlUpdate::Clear,
                    ),
                )
            })
            .collect();
        run(&storage, 1, &puts);
        let split = ShardSplit {
            parent: ShardId(0),
            child: ShardId(1),
            at_slot: 100,
            range: (0, 16383),
        };
        storage
            .split_shard(&split, 11, &[], None)
            .unwrap()
            .expect("applied");
        assert!(!storage.has_shard_state(ShardId(1)).unwrap());
        assert_eq!(storage.slot_range(ShardId(1)).unwrap(), None);
        let left = storage.scan(ShardId(0), b"", None, 1_000, 1, None).unwrap();
        assert!(left.iter().all(|(k, _)| trireme_types::key_slot(k) < 100));
    }
}
