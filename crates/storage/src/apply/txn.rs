//! Applying the commands of transactions across shards (see [`trireme_types::txn`]): prepare
//! (judge, then write intents), decide (the record), resolve (apply or drop the intents) and
//! forget (the record), and refusing other commands on keys that hold an intent.

use super::Pending;
use crate::StorageError;
use crate::intents::Held;
use bytes::Bytes;
use std::sync::Arc;
use trireme_types::session::is_internal_key;
use trireme_types::txn::{
    Decision, Intent, PrepareOutcome, Resolution, TxnRecord, TxnState, hold_key, hold_target,
    intent_key, intent_target,
};
use trireme_types::{Command, CommandResult, Record};

/// What a prefix hold is for, which says what it keeps out. Its row's commands say it: the
/// prefix command that took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldKind {
    /// A prefix delete's: keeps out every write under its prefix, and every other prefix
    /// read or delete over it.
    Delete,
    /// A prefix read's (a transaction that waits for its prefix): keeps out writes; other
    /// reads share it.
    Read,
}

fn hold_kind(hold: &Intent) -> HoldKind {
    match hold.commands.first() {
        Some(Command::DeletePrefix { .. }) => HoldKind::Delete,
        _ => HoldKind::Read,
    }
}

/// What keeps a write out: holds of prefix deletes and of prefix reads.
const WRITES_WAIT_FOR: &[HoldKind] = &[HoldKind::Delete, HoldKind::Read];
/// What keeps a prefix read out: a prefix delete's hold.
const READS_WAIT_FOR: &[HoldKind] = &[HoldKind::Delete];

impl Pending<'_> {
    /// The intent on `key` as this batch sees it.
    pub(super) fn intent_on(&mut self, key: &Bytes) -> Result<Option<Held>, StorageError> {
        if !self.intents_here {
            return Ok(None);
        }
        match self.changes.get(&intent_key(key)) {
            Some(Some(row)) => Ok(Some(Held::of(row)?)),
            Some(None) => Ok(None),
            None => Ok(self.storage.intents.intent(self.shard, key)),
        }
    }

    /// The hold at `row` as this batch sees it.
    fn hold_on(&mut self, row: &Bytes) -> Result<Option<Held>, StorageError> {
        if !self.intents_here {
            return Ok(None);
        }
        match self.changes.get(row) {
            Some(Some(record)) => Ok(Some(Held::of(record)?)),
            Some(None) => Ok(None),
            None => Ok(self.storage.intents.hold(self.shard, row)),
        }
    }

    /// The row of a hold (of a transaction other than `except`) whose prefix `key` is under,
    /// or with `overlapping` one under `key` too, as this batch sees the holds.
    fn hold_over(
        &mut self,
        key: &[u8],
        overlapping: bool,
        except: Option<u128>,
    ) -> Result<Option<Bytes>, StorageError> {
        self.conflicting_hold(key, overlapping, except, WRITES_WAIT_FOR)
    }

    /// [`Pending::hold_over`], counting only the holds of the kinds in `kinds`.
    fn conflicting_hold(
        &mut self,
        key: &[u8],
        overlapping: bool,
        except: Option<u128>,
        kinds: &[HoldKind],
    ) -> Result<Option<Bytes>, StorageError> {
        for (row, held) in self.holds_covering(key, overlapping)? {
            if Some(held.intent.txn) != except && kinds.contains(&hold_kind(&held.intent)) {
                return Ok(Some(row));
            }
        }
        Ok(None)
    }

    /// The holds (rows and what they say) whose prefixes `key` is under, or with
    /// `overlapping` that are under `key` too, as this batch sees them.
    fn holds_covering(
        &mut self,
        key: &[u8],
        overlapping: bool,
    ) -> Result<Vec<(Bytes, Held)>, StorageError> {
        if !self.intents_here {
            return Ok(Vec::new());
        }
        let covers = |row: &[u8]| {
            hold_target(row).is_some_and(|(_, prefix)| {
                key.starts_with(prefix) || (overlapping && prefix.starts_with(key))
            })
        };
        let mut candidates = self
            .storage
            .intents
            .holds_over(self.shard, key, overlapping);
        // Holds written by this batch, not yet in the table.
        candidates.extend(self.txn_rows.iter().filter(|row| covers(row)).cloned());
        candidates.sort();
        candidates.dedup();
        let mut out = Vec::new();
        for row in candidates {
            if let Some(held) = self.hold_on(&row)? {
                out.push((row, held));
            }
        }
        Ok(out)
    }

    /// A key under `prefix` that holds an intent of a transaction other than `except`.
    fn intent_under(
        &mut self,
        prefix: &[u8],
        except: Option<u128>,
    ) -> Result<Option<Bytes>, StorageError> {
        if !self.intents_here {
            return Ok(None);
        }
        let mut candidates = self.storage.intents.under(self.shard, prefix);
        candidates.extend(self.batch_intents_under(prefix));
        for key in candidates {
            if let Some(held) = self.intent_on(&key)?
                && Some(held.intent.txn) != except
            {
                return Ok(Some(key));
            }
        }
        Ok(None)
    }

    /// The keys under `prefix` of the intents this batch wrote (some may be gone since).
    fn batch_intents_under(&self, prefix: &[u8]) -> Vec<Bytes> {
        self.txn_rows
            .iter()
            .filter_map(|row| intent_target(row))
            .filter(|target| target.starts_with(prefix))
            .map(Bytes::copy_from_slice)
            .collect()
    }

    /// The first key of `command` that holds an intent or is under a held prefix, if any:
    /// such a command is refused unapplied. A batch's commands are judged one by one where
    /// they are applied; a prefix delete by every key under its prefix and every hold over
    /// or under it. Reads (a prefix read included) are never refused here.
    pub(super) fn blocked_key(&mut self, command: &Command) -> Result<Option<Bytes>, StorageError> {
        if !self.intents_here {
            return Ok(None);
        }
        match command {
            Command::Batch(_)
            | Command::Reap { .. }
            | Command::Split { .. }
            | Command::Prepare { .. }
            | Command::Decide { .. }
            | Command::Resolve { .. }
            | Command::ResolveMany { .. }
            | Command::ReadPrefix { .. }
            | Command::OwnsSlots { .. }
            | Command::Read { .. }
            | Command::Forget { .. } => Ok(None),
            Command::DeletePrefix { prefix } => {
                if let Some(key) = self.intent_under(prefix, None)? {
                    return Ok(Some(key));
                }
                if self.hold_over(prefix, true, None)?.is_some() {
                    return Ok(Some(prefix.clone()));
                }
                Ok(None)
            }
            _ => {
                let keys: Vec<Bytes> = command
                    .keys()
                    .into_iter()
                    .filter(|key| !is_internal_key(key))
                    .cloned()
                    .collect();
                for key in &keys {
                    if self.intent_on(key)?.is_some() || self.hold_over(key, false, None)?.is_some()
                    {
                        return Ok(Some(key.clone()));
                    }
                }
                Ok(None)
            }
        }
    }

    /// [`Command::Prepare`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prepare(
        &mut self,
        index: u64,
        now: u64,
        txn: u128,
        record: &Bytes,
        expires_ms: u64,
        creates_record: bool,
        all_keys: &[Bytes],
        commands: &[Command],
    ) -> Result<PrepareOutcome, StorageError> {
        if now > expires_ms {
            return Ok(PrepareOutcome::Aborted);
        }
        let mut keys: Vec<Bytes> = Vec::new();
        for key in commands.iter().flat_map(Command::keys) {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        // Each prefix, with what it is held for: a delete over a read.
        let mut prefixes: Vec<(Bytes, HoldKind)> = Vec::new();
        for command in commands {
            let (prefix, kind) = match command {
                Command::DeletePrefix { prefix } => (prefix, HoldKind::Delete),
                Command::ReadPrefix { prefix } => (prefix, HoldKind::Read),
                _ => continue,
            };
            match prefixes.iter_mut().find(|(p, _)| p == prefix) {
                Some((_, held)) if kind == HoldKind::Delete => *held = kind,
                Some(_) => {}
                None => prefixes.push((prefix.clone(), kind)),
            }
        }
        let mut mine = false;
        for key in &keys {
            match self.intent_on(key)? {
                Some(held) if held.intent.txn == txn => mine = true,
                Some(_) => return Ok(PrepareOutcome::Busy(key.clone())),
                None => {}
            }
            // A hold's row as the key to wait on: the coordinator waits longer for a hold
            // (a listing that needs every shard) than for a key.
            if let Some(hold) = self.hold_over(key, false, Some(txn))? {
                return Ok(PrepareOutcome::Busy(hold));
            }
        }
        for (prefix, kind) in &prefixes {
            if self.hold_on(&hold_key(txn, prefix))?.is_some() {
                mine = true;
            }
            if let Some(key) = self.intent_under(prefix, Some(txn))? {
                return Ok(PrepareOutcome::Busy(key));
            }
            let waits_for = match kind {
                HoldKind::Delete => WRITES_WAIT_FOR,
                HoldKind::Read => READS_WAIT_FOR,
            };
            if let Some(hold) = self.conflicting_hold(prefix, true, Some(txn), waits_for)? {
                return Ok(PrepareOutcome::Busy(hold));
            }
        }
        if mine {
            // Sent again after its answer was lost: prepared already.
            return Ok(PrepareOutcome::Ready(Vec::new()));
        }
        if creates_record && let Some(existing) = self.txn_record(record)? {
            match existing.state {
                TxnState::Aborted => return Ok(PrepareOutcome::Aborted),
                TxnState::Committed => return Ok(PrepareOutcome::Ready(Vec::new())),
                TxnState::Pending => {}
            }
        }
        // A prepare of protocol 4 removes its keys' expired records, as the judgement sees
        // them: from here until it is resolved (as judged, see `as_judged`) the key is judged
        // as at this moment, which must not find it alive again. One of protocol 3 leaves
        // them, as the builds of that protocol still replicating it do.
        let judged_at_prepare = commands
            .iter()
            .any(|c| matches!(c, Command::OwnsSlots { .. }));
        if judged_at_prepare {
            for key in &keys {
                if self.raw(key)?.is_some_and(|r| r.is_expired(now)) {
                    self.set(key.clone(), None)?;
                }
            }
        }
        self.expanded = Some(Vec::new());
        let judged = self.judge_transaction(index, now, commands);
        let mut expanded = self.expanded.take().unwrap_or_default().into_iter();
        // The coordinator does not know the fence is there: positions leave it out.
        let fences: Vec<usize> = commands
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, Command::OwnsSlots { .. }))
            .map(|(i, _)| i)
            .collect();
        let mut judged = match judged? {
            Ok(results) => results,
            Err(position) => {
                let before = fences.iter().filter(|&&f| (f as u32) < position).count();
                return Ok(PrepareOutcome::Failed(position - before as u32));
            }
        };
        let found: usize = expanded.as_slice().iter().map(Vec::len).sum();
        if found as u64 > trireme_types::txn::MAX_PREFIX_DELETE_KEYS {
            return Ok(PrepareOutcome::TooLarge(found as u64));
        }
        for i in fences.into_iter().rev() {
            judged.remove(i);
        }
        // A prefix delete becomes a delete of each key it found, in its place: the hold
        // keeps any other key from appearing under the prefix until the resolve.
        let mut parts: Vec<Command> = Vec::with_capacity(commands.len());
        for command in commands {
            match command {
                Command::DeletePrefix { .. } => {
                    for key in expanded.next().unwrap_or_default() {
                        if !keys.contains(&key) {
                            keys.push(key.clone());
                        }
                        parts.push(Command::Delete {
                            keys: vec![key],
                            cas: None,
                        });
                    }
                }
                Command::ReadPrefix { .. } | Command::OwnsSlots { .. } => {}
                other => parts.push(other.clone()),
            }
        }
        let held = |commands: Vec<Command>| Intent {
            txn,
            record: record.clone(),
            expires_ms,
            commands,
        };
        self.intents_here = true;
        for key in &keys {
            let its = parts
                .iter()
                .filter(|c| c.keys().contains(&key))
                .cloned()
                .collect();
            self.set(
                intent_key(key),
                Some(Record::string(held(its).encode(), index)),
            )?;
        }
        for (prefix, kind) in &prefixes {
            // What the hold is for (see `HoldKind`): never applied.
            let what = match kind {
                HoldKind::Delete => Command::DeletePrefix {
                    prefix: prefix.clone(),
                },
                HoldKind::Read => Command::ReadPrefix {
                    prefix: prefix.clone(),
                },
            };
            self.set(
                hold_key(txn, prefix),
                Some(Record::string(held(vec![what]).encode(), index)),
            )?;
        }
        if creates_record {
            let row = TxnRecord {
                state: TxnState::Pending,
                expires_ms,
                keys: all_keys.to_vec(),
            };
            self.set(record.clone(), Some(Record::string(row.encode(), index)))?;
        }
        Ok(PrepareOutcome::Ready(judged))
    }

    /// The transaction record at `record`, as this batch sees it.
    fn txn_record(&mut self, record: &Bytes) -> Result<Option<TxnRecord>, StorageError> {
        let row = match self.changes.get(record) {
            Some(change) => change.clone(),
            None => return Ok(self.storage.intents.record(self.shard, record)),
        };
        row.map(|r| {
            TxnRecord::decode(&r.value)
                .ok_or_else(|| StorageError::Corrupt("a transaction record".into()))
        })
        .transpose()
    }

    /// [`Command::Decide`].
    pub(super) fn decide(
        &mut self,
        index: u64,
        now: u64,
        record: &Bytes,
        decision: Decision,
    ) -> Result<TxnState, StorageError> {
        let Some(mut row) = self.txn_record(record)? else {
            // Nothing prepared the record, or it was forgotten after its transaction ended:
            // either way no prepare may write it from now on (one arriving late finds it
            // aborted), and what a coordinator commits is only ever a prepared record.
            let aborted = TxnRecord {
                state: TxnState::Aborted,
                expires_ms: now,
                keys: Vec::new(),
            };
            self.set(
                record.clone(),
                Some(Record::string(aborted.encode(), index)),
            )?;
            return Ok(TxnState::Aborted);
        };
        if row.state != TxnState::Pending {
            return Ok(row.state);
        }
        let expired = now > row.expires_ms;
        row.state = match decision {
            Decision::Commit if expired => TxnState::Aborted,
            Decision::Commit => TxnState::Committed,
            Decision::Abort => TxnState::Aborted,
            Decision::AbortIfExpired if expired => TxnState::Aborted,
            Decision::AbortIfExpired => return Ok(TxnState::Pending),
            Decision::CommitIfPending => TxnState::Committed,
        };
        self.set(record.clone(), Some(Record::string(row.encode(), index)))?;
        Ok(row.state)
    }

    /// [`Command::Resolve`].
    pub(super) fn resolve(
        &mut self,
        index: u64,
        now: u64,
        txn: u128,
        keys: &[Bytes],
        commit: bool,
    ) -> Result<Vec<Vec<CommandResult>>, StorageError> {
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let held = match self.intent_on(key)? {
                Some(held) if held.intent.txn == txn => held,
                _ => {
                    out.push(Vec::new());
                    continue;
                }
            };
            // Gone first, so that its own commands are not refused for it.
            self.set(intent_key(key), None)?;
            if !commit {
                out.push(Vec::new());
                continue;
            }
            // Judged again, at the resolve's index, as protocol 3 applies it: replicas of
            // that protocol may still apply this entry (`ResolveMany` applies as judged).
            match self.apply_transaction(index, now, &[], &held.intent.commands)? {
                Ok(results) => out.push(results),
                Err(position) => {
                    tracing::warn!(
                        shard = self.shard,
                        position,
                        "a committed transaction's condition no longer held on one key; that key was left as it was"
                    );
                    out.push(Vec::new());
                }
            }
        }
        Ok(out)
    }

    /// One [`Resolution`] of a [`Command::ResolveMany`]: each key's commands applied at the
    /// index of the prepare that wrote its intent, a hold's key removed.
    pub(super) fn resolve_at_prepare(
        &mut self,
        now: u64,
        resolution: &Resolution,
    ) -> Result<(), StorageError> {
        let txn = resolution.txn;
        for key in &resolution.keys {
            if let Some((holder, prefix)) = hold_target(key) {
                if holder == txn && self.hold_on(key)?.is_some() {
                    // The keys its prefix delete found hold intents the coordinator never
                    // knew of: they go with the hold.
                    for under in self.intents_of_under(prefix, txn)? {
                        self.resolve_key(now, txn, &under, resolution.commit)?;
                    }
                    self.set(key.clone(), None)?;
                }
                continue;
            }
            self.resolve_key(now, txn, key, resolution.commit)?;
        }
        Ok(())
    }

    /// Resolves the intent of `txn` on `key`, if it holds one.
    fn resolve_key(
        &mut self,
        now: u64,
        txn: u128,
        key: &Bytes,
        commit: bool,
    ) -> Result<(), StorageError> {
        let Some(held) = self.intent_on(key)?.filter(|h| h.intent.txn == txn) else {
            return Ok(());
        };
        self.set(intent_key(key), None)?;
        if commit {
            self.apply_as_judged(held.index, now, &held.intent)?;
        }
        Ok(())
    }

    /// The keys under `prefix` that hold intents of `txn`, as this batch sees them.
    fn intents_of_under(&mut self, prefix: &[u8], txn: u128) -> Result<Vec<Bytes>, StorageError> {
        let mut candidates: Vec<Bytes> = self.storage.intents.under(self.shard, prefix);
        candidates.extend(self.batch_intents_under(prefix));
        candidates.sort();
        candidates.dedup();
        let mut out = Vec::new();
        for key in candidates {
            if self.intent_on(&key)?.is_some_and(|h| h.intent.txn == txn) {
                out.push(key);
            }
        }
        Ok(out)
    }

    /// Applies a committed intent's commands at `index` as its prepare judged them (see
    /// `as_judged`); what they return.
    fn apply_as_judged(
        &mut self,
        index: u64,
        now: u64,
        intent: &Arc<Intent>,
    ) -> Result<Vec<CommandResult>, StorageError> {
        self.as_judged = true;
        let applied = self.apply_transaction(index, now, &[], &intent.commands);
        self.as_judged = false;
        match applied? {
            Ok(results) => Ok(results),
            Err(position) => {
                // Its conditions held when it was prepared and nothing but time could
                // change the key since, which `as_judged` leaves out: never expected.
                tracing::warn!(
                    shard = self.shard,
                    position,
                    "a committed transaction's condition no longer held on one key; that key was left as it was"
                );
                Ok(Vec::new())
            }
        }
    }

    /// [`Command::Forget`].
    pub(super) fn forget_record(&mut self, record: &Bytes) -> Result<(), StorageError> {
        if self.txn_record(record)?.is_some() {
            self.set(record.clone(), None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::StorageError;
    use bytes::Bytes;
    use trireme_types::txn::{Decision, PrepareOutcome, Resolution, TxnState, record_key};
    use trireme_types::{
        Command, CommandResult, KeyCheck, LockOp, PutCondition, ShardId, TtlUpdate,
    };

    fn put(key: &str, value: &str) -> Command {
        Command::Put {
            key: b(key),
            value: b(value),
            flags: Some(0),
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
            return_previous: true,
        }
    }

    /// A prepare of protocol 4 (fenced to every slot) of `commands`.
    fn prepare(txn: u128, expires_ms: u64, commands: Vec<Command>) -> Command {
        let mut fenced = vec![Command::OwnsSlots { slots: (0, 16383) }];
        fenced.extend(commands);
        Command::Prepare {
            txn,
            record: record_key(txn),
            expires_ms,
            creates_record: true,
            all_keys: bs(&["a", "b"]),
            commands: fenced,
        }
    }

    fn value_of(storage: &crate::Storage, key: &str) -> Result<Option<String>, StorageError> {
        Ok(storage
            .get(ShardId(0), key.as_bytes(), 1)?
            .map(|r| String::from_utf8_lossy(&r.value).into_owned()))
    }

    #[test]
    fn a_prepared_key_refuses_others_until_its_transaction_commits() {
        let (_dir, storage) = storage();
        run(&storage, 1, vec![put("a", "old")]);
        let prepared = run(
            &storage,
            2,
            vec![prepare(
                7,
                1_000,
                vec![
                    Command::Check {
                        key: b("a"),
                        check: KeyCheck::At(Some(1)),
                    },
                    put("a", "new"),
                    put("b", "fresh"),
                ],
            )],
        );
        let [CommandResult::Prepared(PrepareOutcome::Ready(judged))] = &prepared[..] else {
            panic!("{prepared:?}");
        };
        assert_eq!(
            judged.len(),
            3,
            "what each command returned as it was judged"
        );
        assert!(matches!(judged[1], CommandResult::Put { index: 2, .. }));
        // Nothing applied yet; readers and writers are held off.
        assert!(matches!(
            value_of(&storage, "a"),
            Err(StorageError::InTransaction(k)) if k == "a"
        ));
        assert!(matches!(
            storage.scan(ShardId(0), b"", None, 10, 1, None),
            Err(StorageError::InTransaction(_))
        ));
        let refused = run(&storage, 3, vec![put("b", "other"), put("c", "free")]);
        assert_eq!(refused[0], CommandResult::InTransaction(b("b")));
        assert!(matches!(
            refused[1],
            CommandResult::Put { written: true, .. }
        ));
        // Another transaction on the key is busy.
        let busy = run(&storage, 4, vec![prepare(8, 1_000, vec![put("a", "x")])]);
        assert_eq!(
            busy,
            vec![CommandResult::Prepared(PrepareOutcome::Busy(b("a")))]
        );
        // Committed, then resolved: applied at the resolve's index.
        let decided = run(
            &storage,
            5,
            vec![Command::Decide {
                record: record_key(7),
                decision: Decision::Commit,
            }],
        );
        assert_eq!(decided, vec![CommandResult::Decided(TxnState::Committed)]);
        let resolved = run(
            &storage,
            6,
            vec![Command::Resolve {
                txn: 7,
                keys: bs(&["a", "b", "c"]),
                commit: true,
            }],
        );
        let CommandResult::Resolved(per_key) = &resolved[0] else {
            panic!("{resolved:?}");
        };
        assert_eq!(per_key[0].len(), 2, "the check and the put of a");
        assert!(matches!(per_key[0][1], CommandResult::Put { index: 6, .. }));
        assert!(per_key[2].is_empty(), "c held no intent");
        assert_eq!(value_of(&storage, "a").unwrap().as_deref(), Some("new"));
        assert_eq!(value_of(&storage, "b").unwrap().as_deref(), Some("fresh"));
        assert_eq!(
            storage
                .scan(ShardId(0), b"", None, 10, 1, None)
                .unwrap()
                .len(),
            3
        );
        // Resolving again changes nothing.
        let again = run(
            &storage,
            7,
            vec![Command::Resolve {
                txn: 7,
                keys: bs(&["a"]),
                commit: true,
            }],
        );
        assert_eq!(again, vec![CommandResult::Resolved(vec![Vec::new()])]);
        assert_eq!(
            storage
                .get(ShardId(0), b"a", 1)
                .unwrap()
                .unwrap()
                .modify_index,
            6
        );
    }

    #[test]
    fn a_failed_condition_prepares_nothing_and_an_abort_drops_the_intents() {
        let (_dir, storage) = storage();
        run(&storage, 1, vec![put("a", "old")]);
        let failed = run(
            &storage,
            2,
            vec![prepare(
                1,
                1_000,
                vec![
                    put("b", "x"),
                    Command::Check {
                        key: b("a"),
                        check: KeyCheck::At(None),
                    },
                ],
            )],
        );
        assert_eq!(
            failed,
            vec![CommandResult::Prepared(PrepareOutcome::Failed(1))]
        );
        assert_eq!(value_of(&storage, "b").unwrap(), None);
        // Prepared, then aborted by its coordinator: the old values stay.
        run(&storage, 3, vec![prepare(2, 1_000, vec![put("a", "new")])]);
        let results = run(
            &storage,
            4,
            vec![
                Command::Decide {
                    record: record_key(2),
                    decision: Decision::Abort,
                },
                Command::Resolve {
                    txn: 2,
                    keys: bs(&["a"]),
                    commit: false,
                },
                Command::Decide {
                    record: record_key(2),
                    decision: Decision::Commit,
                },
            ],
        );
        assert_eq!(results[0], CommandResult::Decided(TxnState::Aborted));
        assert_eq!(
            results[2],
            CommandResult::Decided(TxnState::Aborted),
            "an abort is final"
        );
        assert_eq!(value_of(&storage, "a").unwrap().as_deref(), Some("old"));
    }

    #[test]
    fn only_an_expired_transaction_is_aborted_by_others() {
        let (_dir, storage) = storage();
        run_at(&storage, 1, 100, vec![prepare(3, 500, vec![put("a", "v")])]);
        let push = |index, now| {
            run_at(
                &storage,
                index,
                now,
                vec![Command::Decide {
                    record: record_key(3),
                    decision: Decision::AbortIfExpired,
                }],
            )
        };
        assert_eq!(
            push(2, 400),
            vec![CommandResult::Decided(TxnState::Pending)]
        );
        assert_eq!(
            push(3, 501),
            vec![CommandResult::Decided(TxnState::Aborted)]
        );
        // A record nobody prepared is written aborted: a prepare arriving late is refused.
        let late = run_at(
            &storage,
            4,
            200,
            vec![
                Command::Decide {
                    record: record_key(4),
                    decision: Decision::AbortIfExpired,
                },
                prepare(4, 1_000, vec![put("c", "v")]),
            ],
        );
        assert_eq!(late[0], CommandResult::Decided(TxnState::Aborted));
        assert_eq!(late[1], CommandResult::Prepared(PrepareOutcome::Aborted));
        // So is a prepare applied after its transaction expired.
        let expired = run_at(
            &storage,
            6,
            2_000,
            vec![prepare(5, 1_000, vec![put("d", "v")])],
        );
        assert_eq!(
            expired,
            vec![CommandResult::Prepared(PrepareOutcome::Aborted)]
        );
        assert_eq!(storage.expired_intents(ShardId(0), 10_000), vec![b("a")]);
    }

    fn commit_and_resolve(
        storage: &crate::Storage,
        first: u64,
        now: u64,
        txn: u128,
        keys: &[&str],
    ) -> Vec<CommandResult> {
        run_at(
            storage,
            first,
            now,
            vec![
                Command::Decide {
                    record: record_key(txn),
                    decision: Decision::Commit,
                },
                resolve_many(txn, bs(keys), true),
            ],
        )
    }

    #[test]
    fn a_ttl_that_runs_out_while_its_key_is_held_does_not_undo_the_keys_part() {
        let (_dir, storage) = storage();
        let with_ttl = |key: &str, at| Command::Put {
            key: b(key),
            value: b("old"),
            flags: Some(0),
            condition: PutCondition::Always,
            ttl: TtlUpdate::At(at),
            return_previous: false,
        };
        // "a" lives until 200; "c" is dead at the prepare (50) but not yet reaped.
        run_at(&storage, 1, 10, vec![with_ttl("a", 200), with_ttl("c", 50)]);
        let prepared = run_at(
            &storage,
            3,
            100,
            vec![prepare(
                5,
                1_000,
                vec![
                    Command::Check {
                        key: b("a"),
                        check: KeyCheck::At(Some(1)),
                    },
                    put("a", "new"),
                    Command::Check {
                        key: b("c"),
                        check: KeyCheck::At(None),
                    },
                    put("c", "fresh"),
                    put("b", "x"),
                ],
            )],
        );
        assert!(
            matches!(
                &prepared[..],
                [CommandResult::Prepared(PrepareOutcome::Ready(_))]
            ),
            "{prepared:?}"
        );
        // Resolved after a's expiry: its part is applied as judged, not judged again.
        let resolved = commit_and_resolve(&storage, 4, 300, 5, &["a", "b", "c"]);
        assert_eq!(resolved[1], CommandResult::Done);
        let at = |key: &str| {
            storage
                .get(ShardId(0), key.as_bytes(), 300)
                .unwrap()
                .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        };
        assert_eq!(at("a").as_deref(), Some("new"));
        assert_eq!(at("b").as_deref(), Some("x"));
        assert_eq!(at("c").as_deref(), Some("fresh"));
    }

    #[test]
    fn a_lock_taken_by_a_transaction_holds_though_its_session_ended_elsewhere_meanwhile() {
        let (_dir, storage) = storage();
        let session = b("s-1");
        let acquire = Command::Lock {
            key: b("a"),
            op: LockOp::Acquire {
                session: session.clone(),
                value: b("leader"),
                flags: 0,
            },
        };
        let ended = |key: &str| Command::Lock {
            key: b(key),
            op: LockOp::SessionEnded {
                session: session.clone(),
                delete: false,
                lock_delay_ms: 0,
            },
        };
        run(
            &storage,
            1,
            vec![prepare(6, 1_000, vec![acquire, put("b", "x")])],
        );
        // The session's end reaches another key of the shard before the resolve ...
        run(&storage, 2, vec![ended("z")]);
        let resolved = commit_and_resolve(&storage, 3, 1, 6, &["a", "b"]);
        assert_eq!(resolved[1], CommandResult::Done);
        let holder = |storage: &crate::Storage| {
            storage
                .get(ShardId(0), b"a", 1)
                .unwrap()
                .and_then(|r| r.lock.session)
        };
        assert_eq!(holder(&storage), Some(session.clone()));
        // ... and this key after it, which releases the lock.
        run(&storage, 5, vec![ended("a")]);
        assert_eq!(holder(&storage), None);
        assert_eq!(value_of(&storage, "b").unwrap().as_deref(), Some("x"));
    }

    fn resolve_many(txn: u128, keys: Vec<Bytes>, commit: bool) -> Command {
        Command::ResolveMany {
            slots: None,
            resolutions: vec![Resolution { txn, keys, commit }],
        }
    }

    #[test]
    fn a_resolve_at_prepare_writes_what_the_prepare_judged() {
        let (_dir, storage) = storage();
        run(&storage, 1, vec![put("a", "old")]);
        let prepared = run(
            &storage,
            2,
            vec![prepare(
                11,
                1_000,
                vec![
                    put("a", "new"),
                    Command::Read { keys: bs(&["a"]) },
                    put("b", "x"),
                ],
            )],
        );
        let [CommandResult::Prepared(PrepareOutcome::Ready(judged))] = &prepared[..] else {
            panic!("{prepared:?}");
        };
        let resolved = run(
            &storage,
            3,
            vec![
                Command::Decide {
                    record: record_key(11),
                    decision: Decision::Commit,
                },
                resolve_many(11, bs(&["a", "b"]), true),
            ],
        );
        assert_eq!(resolved[1], CommandResult::Done);
        let a = storage.get(ShardId(0), b"a", 1).unwrap().unwrap();
        assert_eq!(
            (&a.value[..], a.modify_index, a.create_index),
            (&b"new"[..], 2, 1)
        );
        let CommandResult::Put { index, .. } = judged[0] else {
            panic!("{judged:?}");
        };
        assert_eq!(index, a.modify_index, "the index the client was told");
        let CommandResult::Records(read) = &judged[1] else {
            panic!("{judged:?}");
        };
        assert_eq!(read[0].as_ref().map(|r| &r.value[..]), Some(&b"new"[..]));
        let b_row = storage.get(ShardId(0), b"b", 1).unwrap().unwrap();
        assert_eq!((b_row.create_index, b_row.modify_index), (2, 2));
        // Resolved twice: nothing changes.
        run(&storage, 5, vec![resolve_many(11, bs(&["a", "b"]), true)]);
        assert_eq!(
            storage
                .get(ShardId(0), b"a", 1)
                .unwrap()
                .unwrap()
                .modify_index,
            2
        );
    }

    #[test]
    fn a_prefix_delete_holds_its_prefix_until_resolved() {
        let (_dir, storage) = storage();
        run(
            &storage,
            1,
            vec![put("app/a", "1"), put("app/b", "2"), put("other", "3")],
        );
        let prepared = run(
            &storage,
            4,
            vec![prepare(
                12,
                1_000,
                vec![
                    Command::DeletePrefix { prefix: b("app/") },
                    put("app/b", "again"),
                    Command::ReadPrefix { prefix: b("app/") },
                ],
            )],
        );
        let [CommandResult::Prepared(PrepareOutcome::Ready(judged))] = &prepared[..] else {
            panic!("{prepared:?}");
        };
        assert_eq!(judged[0], CommandResult::Deleted(2));
        let CommandResult::Entries { entries, .. } = &judged[2] else {
            panic!("{judged:?}");
        };
        assert_eq!(
            entries
                .iter()
                .map(|(k, r)| (&k[..], &r.value[..]))
                .collect::<Vec<_>>(),
            vec![(&b"app/b"[..], &b"again"[..])],
            "the read sees the transaction's own writes"
        );
        // Deleted keys are held; a new key under the prefix waits; others go on.
        assert!(matches!(
            storage.get(ShardId(0), b"app/a", 1),
            Err(StorageError::InTransaction(_))
        ));
        let others = run(
            &storage,
            5,
            vec![
                put("app/new", "n"),
                put("other", "4"),
                Command::DeletePrefix { prefix: b("ap") },
            ],
        );
        assert_eq!(others[0], CommandResult::InTransaction(b("app/new")));
        assert!(matches!(
            others[1],
            CommandResult::Put { written: true, .. }
        ));
        assert!(
            matches!(&others[2], CommandResult::InTransaction(k) if k.starts_with(b"app/")),
            "{others:?}"
        );
        // Another transaction over the prefix, or a key under it, is busy.
        let busy = run(
            &storage,
            8,
            vec![
                prepare(13, 1_000, vec![put("app/c", "x")]),
                prepare(14, 1_000, vec![Command::ReadPrefix { prefix: b("app/x") }]),
            ],
        );
        assert_eq!(
            busy[0],
            CommandResult::Prepared(PrepareOutcome::Busy(trireme_types::txn::hold_key(
                12, b"app/"
            ))),
            "the hold to wait for"
        );
        assert!(matches!(
            busy[1],
            CommandResult::Prepared(PrepareOutcome::Busy(_))
        ));
        run(
            &storage,
            10,
            vec![
                Command::Decide {
                    record: record_key(12),
                    decision: Decision::Commit,
                },
                // What the coordinator knows: its own key and the hold; "app/a" goes
                // with the hold.
                resolve_many(
                    12,
                    vec![b("app/b"), trireme_types::txn::hold_key(12, b"app/")],
                    true,
                ),
            ],
        );
        assert_eq!(value_of(&storage, "app/a").unwrap(), None);
        assert_eq!(
            value_of(&storage, "app/b").unwrap().as_deref(),
            Some("again")
        );
        let after = run(&storage, 12, vec![put("app/new", "n")]);
        assert!(
            matches!(after[0], CommandResult::Put { written: true, .. }),
            "{after:?}"
        );
    }

    #[test]
    fn reads_of_a_prefix_share_it_and_a_delete_of_it_waits_for_them() {
        let (_dir, storage) = storage();
        run(&storage, 1, vec![put("cfg/a", "1")]);
        let read = |txn| prepare(txn, 1_000, vec![Command::ReadPrefix { prefix: b("cfg/") }]);
        let results = run(
            &storage,
            2,
            vec![
                read(20),
                read(21),
                prepare(22, 1_000, vec![Command::DeletePrefix { prefix: b("cfg") }]),
            ],
        );
        assert!(matches!(
            &results[..2],
            [
                CommandResult::Prepared(PrepareOutcome::Ready(_)),
                CommandResult::Prepared(PrepareOutcome::Ready(_))
            ]
        ));
        assert!(
            matches!(
                &results[2],
                CommandResult::Prepared(PrepareOutcome::Busy(_))
            ),
            "{results:?}"
        );
        // One read resolved: the other still keeps writes out.
        run(
            &storage,
            5,
            vec![resolve_many(
                20,
                vec![trireme_types::txn::hold_key(20, b"cfg/")],
                true,
            )],
        );
        let write = run(&storage, 6, vec![put("cfg/b", "2")]);
        assert_eq!(write, vec![CommandResult::InTransaction(b("cfg/b"))]);
        run(
            &storage,
            7,
            vec![resolve_many(
                21,
                vec![trireme_types::txn::hold_key(21, b"cfg/")],
                false,
            )],
        );
        let write = run(&storage, 8, vec![put("cfg/b", "2")]);
        assert!(matches!(write[0], CommandResult::Put { written: true, .. }));
    }

    #[test]
    fn a_prepare_or_resolve_fenced_to_the_slots_before_a_split_is_moved() {
        let (_dir, storage) = storage();
        split_in_half(&storage);
        let apply = |command: Command| {
            crate::Storage::apply(
                &storage,
                ShardId(0),
                &[crate::ApplyEntry {
                    index: 200,
                    command: Some(&trireme_types::LogCommand { now_ms: 1, command }),
                }],
                &[],
            )
            .unwrap()
        };
        // The coordinator's map is older than the split: every slot still in shard 0.
        let stale = prepare(30, 1_000, vec![Command::ReadPrefix { prefix: b("") }]);
        assert_eq!(apply(stale), vec![CommandResult::Moved]);
        let resolve = Command::ResolveMany {
            slots: Some((0, 16383)),
            resolutions: Vec::new(),
        };
        assert_eq!(apply(resolve), vec![CommandResult::Moved]);
        // With the slots it owns now, and its record's key among them.
        let txn = (0..)
            .find(|t| trireme_types::key_slot(&record_key(*t)) < 8192)
            .unwrap();
        let fresh = Command::Prepare {
            txn,
            record: record_key(txn),
            expires_ms: 1_000,
            creates_record: true,
            all_keys: Vec::new(),
            commands: vec![
                Command::OwnsSlots { slots: (0, 8191) },
                Command::ReadPrefix { prefix: b("") },
            ],
        };
        assert!(matches!(
            &apply(fresh)[..],
            [CommandResult::Prepared(PrepareOutcome::Ready(judged))] if judged.len() == 1
        ));
    }

    #[test]
    fn a_late_commit_holds_unless_somebody_aborted_first() {
        let (_dir, storage) = storage();
        run_at(
            &storage,
            1,
            100,
            vec![
                prepare(40, 500, vec![put("a", "v")]),
                prepare(41, 500, vec![put("b", "v")]),
            ],
        );
        let decide = |txn, decision| Command::Decide {
            record: record_key(txn),
            decision,
        };
        let late = run_at(
            &storage,
            3,
            900,
            vec![
                decide(40, Decision::Commit),
                decide(41, Decision::AbortIfExpired),
                decide(41, Decision::CommitIfPending),
            ],
        );
        assert_eq!(
            late[0],
            CommandResult::Decided(TxnState::Aborted),
            "protocol 3's commit"
        );
        assert_eq!(late[2], CommandResult::Decided(TxnState::Aborted));
        let on_time = run_at(
            &storage,
            6,
            900,
            vec![
                prepare(42, 1_000, vec![put("c", "v")]),
                decide(42, Decision::CommitIfPending),
            ],
        );
        assert_eq!(on_time[1], CommandResult::Decided(TxnState::Committed));
        let expired_unpushed = run_at(
            &storage,
            8,
            5_000,
            vec![
                prepare(43, 4_000, vec![put("d", "v")]),
                decide(43, Decision::CommitIfPending),
            ],
        );
        assert!(matches!(
            expired_unpushed[0],
            CommandResult::Prepared(PrepareOutcome::Aborted)
        ));
        let (_dir, storage) = super::super::testing::storage();
        run_at(
            &storage,
            1,
            100,
            vec![prepare(44, 500, vec![put("e", "v")])],
        );
        let committed = run_at(
            &storage,
            2,
            900,
            vec![decide(44, Decision::CommitIfPending)],
        );
        assert_eq!(
            committed,
            vec![CommandResult::Decided(TxnState::Committed)],
            "nobody aborted it"
        );
    }

    #[test]
    fn a_hold_stays_in_both_halves_of_a_split() {
        let (_dir, storage) = storage();
        // "b" is in slot 3300 (kept), "foo" in 12182 (moves to shard 1).
        run(
            &storage,
            1,
            vec![prepare(
                15,
                1_000,
                vec![Command::ReadPrefix { prefix: b("") }],
            )],
        );
        split_in_half(&storage);
        for (shard, key) in [(0, "b"), (1, "foo")] {
            let results = crate::Storage::apply(
                &storage,
                ShardId(shard),
                &[crate::ApplyEntry {
                    index: 200,
                    command: Some(&trireme_types::LogCommand {
                        now_ms: 1,
                        command: put(key, "v"),
                    }),
                }],
                &[],
            )
            .unwrap();
            assert_eq!(
                results,
                vec![CommandResult::InTransaction(b(key))],
                "shard {shard}"
            );
        }
    }

    #[test]
    fn intents_move_with_their_keys_in_a_split_and_survive_a_restart() {
        let (dir, storage) = storage();
        // "b" is in slot 3300 (kept), "foo" in 12182 (moves to shard 1).
        run(
            &storage,
            1,
            vec![prepare(9, 1_000, vec![put("b", "1"), put("foo", "2")])],
        );
        split_in_half(&storage);
        assert!(matches!(
            storage.get(ShardId(1), b"foo", 1),
            Err(StorageError::InTransaction(_))
        ));
        assert!(matches!(
            storage.get(ShardId(0), b"b", 1),
            Err(StorageError::InTransaction(_))
        ));
        drop(storage);
        let storage = crate::Storage::open(dir.path(), &crate::StorageOptions::default()).unwrap();
        assert!(matches!(
            storage.get(ShardId(1), b"foo", 1),
            Err(StorageError::InTransaction(_))
        ));
        assert_eq!(storage.get(ShardId(1), b"bar", 1).unwrap(), None);
    }
}
