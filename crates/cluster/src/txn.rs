//! Transactions across shards (see [`trireme_types::txn`] for the protocol): the node that
//! takes the request coordinates it; any node that meets an intent waits it out, and settles
//! it once its transaction is decided or its lease ran out; each shard leader's resolver
//! finishes transactions whose coordinator went away.
//!
//! The coordinator prepares every participating shard at once (a prefix read or delete:
//! every shard, each fenced to the slots the coordinator's map gives it), then writes the
//! decision into the record (one entry of one log: the commit point) and answers from what
//! the prepares judged; a task per node resolves decided transactions in the background,
//! many per command per shard, and then forgets their records. (Before cluster version 4
//! the coordinator resolves every shard first, and answers from the resolves.) A condition
//! that fails in a prepare fails the transaction as it would in one shard; a key held by
//! another transaction makes the coordinator abort its own, drop its intents and try again
//! once that key is free (prepares never wait for each other, so two transactions cannot
//! deadlock). Only a transaction of prefix reads keeps what it prepared while it waits: it
//! holds no key, and prefix reads share their prefixes.

use crate::forward::{GetKeys, Write};
use crate::request::TransactionOutcome;
use crate::router::ShardIndex;
use crate::{ClusterError, Node};
use bytes::Bytes;
use futures::future::join_all;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use trireme_raft::ReadMode;
use trireme_types::txn::{
    Decision, Intent, PrepareOutcome, Resolution, TxnRecord, TxnState, hold_key, hold_target,
    intent_key, record_key,
};
use trireme_types::version::since;
use trireme_types::{
    Command, CommandResult, ErrorCode, KeyCheck, LogCommand, Record, ShardId, ShardMap,
    TriremeError,
};

/// How often each shard leader looks for transactions to finish.
const RESOLVE_INTERVAL: Duration = Duration::from_millis(250);

/// How long after its lease a decided record stays, for its coordinator to resolve and
/// forget it, before the resolver does.
const RECORD_GRACE_MS: u64 = 1_000;

/// How long a request waits on a key held by a decided transaction before it resolves the
/// intent itself (from cluster version 4).
const EARLY_SETTLE: Duration = Duration::from_millis(20);

/// How many second rounds a transaction of prefix reads reads before it holds its prefixes
/// against writes instead.
const DOUBLE_READ_TRIES: u32 = 4;

/// How often a writer that met a listing's prefix hold looks whether it is gone.
const HOLD_POLL: Duration = Duration::from_millis(5);

/// The longest pause between two looks at a key held by a transaction.
const MAX_INTENT_PAUSE: Duration = Duration::from_millis(50);

/// How a try of a transaction across shards ended.
enum Attempt {
    /// Answered: applied, or a condition failed.
    Done(TransactionOutcome),
    /// Aborted without effect; to be tried again, once this key (held by another
    /// transaction) is free: an intent's key, or a prefix hold's key and its shard.
    Again(Option<(Bytes, ShardId)>),
}

impl Node {
    /// Proposes `command` to `shard` and returns what applying it returned. A command refused
    /// because one of its keys holds a transaction's intent is proposed again once the
    /// intent is gone, until the request's timeout.
    pub(crate) async fn apply_on_shard(
        &self,
        shard: ShardId,
        command: Command,
    ) -> Result<CommandResult, ClusterError> {
        let deadline = Instant::now() + self.config.timing.request_timeout;
        let mut waits = 0;
        loop {
            let log = LogCommand {
                now_ms: crate::now_ms(),
                command: command.clone(),
            };
            match self.on_shard(shard, Write(log)).await? {
                CommandResult::InTransaction(key) => {
                    self.wait_out_intent(&key, waits, deadline).await?;
                    waits += 1;
                }
                other => return Ok(other),
            }
        }
    }

    /// [`Node::on_shard`]'s way past a key held by a transaction: waits for it and runs the
    /// read again, until the request's timeout.
    pub(crate) async fn on_shard_past_intents<R: crate::forward::ShardRequest>(
        &self,
        shard: ShardId,
        op: &R,
        mut key: Bytes,
    ) -> Result<R::Answer, ClusterError> {
        let deadline = Instant::now() + self.config.timing.request_timeout;
        let mut waits = 0;
        loop {
            self.wait_out_intent(&key, waits, deadline).await?;
            waits += 1;
            match self.on_shard_once(shard, op).await {
                Err(e) => match held_key(&e) {
                    Some(held) => key = held,
                    None => return Err(e),
                },
                done => return done,
            }
        }
    }

    /// Waits a little for the intent on `key` to go (the `waits`th time of a request that
    /// ends at `deadline`). Once the request has waited a whole lease, the transaction may
    /// have been abandoned: from then on each wait ends by settling the intent.
    async fn wait_out_intent(
        &self,
        key: &Bytes,
        waits: u32,
        deadline: Instant,
    ) -> Result<(), ClusterError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(held_too_long(format!(
                "key {:?}",
                String::from_utf8_lossy(key)
            )));
        }
        let pause = Duration::from_millis(1 << waits.min(6)).min(MAX_INTENT_PAUSE);
        tokio::time::sleep(pause.min(left)).await;
        // Before cluster version 4 an intent is settled by others only once its lease ran
        // out (its coordinator answers from its resolves). From then on the coordinator
        // answers from its prepares, and an intent whose transaction is decided may be
        // resolved by whoever meets it: after a short wait (the coordinator's resolution
        // round usually comes first), and once the lease ran out in any case.
        let waited = self
            .config
            .timing
            .request_timeout
            .saturating_sub(deadline.saturating_duration_since(Instant::now()));
        let settle_after = if self.cluster_version() >= since::PREFIX_TRANSACTIONS {
            EARLY_SETTLE
        } else {
            self.transaction_lease()
        };
        if waited >= settle_after
            && let Err(e) = self.settle_intent(key).await
        {
            tracing::debug!(key = ?String::from_utf8_lossy(key), error = %e, "cannot settle an intent yet");
        }
        Ok(())
    }

    /// Waits until the prefix hold at `key` is gone from `shard` (settling it once its lease
    /// ran out), or the request's `deadline` passes: a writer that met a listing's hold lets
    /// the listing finish rather than race it for the next shard.
    async fn wait_out_hold(
        &self,
        shard: ShardId,
        key: &Bytes,
        deadline: Instant,
    ) -> Result<(), ClusterError> {
        loop {
            let read = Self::read_of(
                &self.shard_map(),
                shard,
                ReadMode::Default,
                GetKeys(vec![key.clone()]),
            );
            let row = match self.on_shard_once(shard, &read).await {
                Ok(mut rows) => rows.0.pop().flatten(),
                // Moved by a split, or between leaders: the next try finds out.
                Err(_) => return Ok(()),
            };
            let Some(hold) = row.and_then(|r| Intent::decode(&r.value)) else {
                return Ok(());
            };
            if crate::now_ms() > hold.expires_ms {
                return self.settle_hold(shard, key.clone(), &hold).await;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let prefix = hold_target(key).map(|(_, p)| p).unwrap_or_default();
                return Err(held_too_long(format!(
                    "prefix {:?}",
                    String::from_utf8_lossy(prefix)
                )));
            }
            tokio::time::sleep(HOLD_POLL.min(left)).await;
        }
    }

    /// Reads the internal row at `key` (an intent, a record), which no intent ever holds.
    async fn read_internal_row(&self, key: &Bytes) -> Result<Option<Record>, ClusterError> {
        self.routed(|routing| {
            let shard = routing.shard_of_key(key);
            let read = Self::read_of(
                &routing,
                shard,
                ReadMode::Default,
                GetKeys(vec![key.clone()]),
            );
            async move { Ok(self.on_shard_once(shard, &read).await?.0.pop().flatten()) }
        })
        .await
    }

    /// Proposes `command` once to the shard that owns `key` (routed again after a split).
    /// Not [`Node::apply_on_shard`]: settling an intent proposes through here, and no
    /// transaction command is ever refused for an intent.
    async fn propose_by_key(
        &self,
        key: &Bytes,
        command: Command,
    ) -> Result<CommandResult, ClusterError> {
        self.routed(|routing| {
            let log = LogCommand {
                now_ms: crate::now_ms(),
                command: command.clone(),
            };
            let shard = routing.shard_of_key(key);
            async move {
                match self.on_shard_once(shard, &Write(log)).await? {
                    CommandResult::Moved => Err(crate::forward::moved(shard)),
                    other => Ok(other),
                }
            }
        })
        .await
    }

    /// Resolves the intent on `key` if its transaction is decided, aborting it first if its
    /// lease ran out while it was pending (see [`Node::transaction_state`]).
    async fn settle_intent(&self, key: &Bytes) -> Result<(), ClusterError> {
        let row = self.read_internal_row(&intent_key(key)).await?;
        let Some(intent) = row.and_then(|r| Intent::decode(&r.value)) else {
            return Ok(());
        };
        let state = self
            .transaction_state(&intent.record, intent.expires_ms)
            .await?;
        if state != TxnState::Pending {
            self.resolve_keys(intent.txn, vec![key.clone()], state == TxnState::Committed)
                .await?;
        }
        Ok(())
    }

    /// [`Node::settle_intent`] for the hold at `key` in `shard`, whose leader this node is: a
    /// hold names no slot, so it is resolved in the shard that holds it.
    async fn settle_hold(
        &self,
        shard: ShardId,
        key: Bytes,
        hold: &Intent,
    ) -> Result<(), ClusterError> {
        let state = self
            .transaction_state(&hold.record, hold.expires_ms)
            .await?;
        if state == TxnState::Pending {
            return Ok(());
        }
        let log = LogCommand {
            now_ms: crate::now_ms(),
            command: Command::ResolveMany {
                slots: Some(slots_of(&self.shard_map(), shard)),
                resolutions: vec![Resolution {
                    txn: hold.txn,
                    keys: vec![key],
                    commit: state == TxnState::Committed,
                }],
            },
        };
        self.on_shard_once(shard, &Write(log)).await?;
        Ok(())
    }

    /// Where the transaction whose record is at `record` stands: once its lease
    /// (`expires_ms`) has run out, decided (aborted first if it was still pending); before,
    /// as its record says from cluster version 4, else `Pending`.
    async fn transaction_state(
        &self,
        record: &Bytes,
        expires_ms: u64,
    ) -> Result<TxnState, ClusterError> {
        if crate::now_ms() > expires_ms {
            return self.decide(record, Decision::AbortIfExpired).await;
        }
        if self.cluster_version() >= since::PREFIX_TRANSACTIONS {
            // Decided already? Its intents are then anybody's to resolve.
            let row = self.read_internal_row(record).await?;
            if let Some(found) = row.and_then(|r| TxnRecord::decode(&r.value)) {
                return Ok(found.state);
            }
        }
        Ok(TxnState::Pending)
    }

    async fn decide(&self, record: &Bytes, decision: Decision) -> Result<TxnState, ClusterError> {
        match self
            .propose_by_key(
                record,
                Command::Decide {
                    record: record.clone(),
                    decision,
                },
            )
            .await?
        {
            CommandResult::Decided(state) => Ok(state),
            other => Err(unexpected("a decision", &other)),
        }
    }

    /// Resolves transaction `txn`'s intents on `keys` (apply or drop), one command per shard
    /// they are in now (a hold's key: every shard); the results of each key's commands, by
    /// key, where the shards answer them (before cluster version 4; from then on commands
    /// are applied at their prepares' indexes and answer what the prepares judged).
    async fn resolve_keys(
        &self,
        txn: u128,
        keys: Vec<Bytes>,
        commit: bool,
    ) -> Result<HashMap<Bytes, Vec<CommandResult>>, ClusterError> {
        let at_prepare = self.cluster_version() >= since::PREFIX_TRANSACTIONS;
        self.routed(|routing| {
            let keys = keys.clone();
            async move {
                let per_shard = by_shard(&routing, keys);
                let routing = &routing;
                let answers = join_all(per_shard.into_iter().map(|(shard, keys)| async move {
                    let command = if at_prepare {
                        Command::ResolveMany {
                            slots: Some(slots_of(routing, shard)),
                            resolutions: vec![Resolution {
                                txn,
                                keys: keys.clone(),
                                commit,
                            }],
                        }
                    } else {
                        Command::Resolve {
                            txn,
                            keys: keys.clone(),
                            commit,
                        }
                    };
                    let log = LogCommand {
                        now_ms: crate::now_ms(),
                        command,
                    };
                    (keys, self.on_shard_once(shard, &Write(log)).await, shard)
                }))
                .await;
                let mut out = HashMap::new();
                for (keys, answer, shard) in answers {
                    match answer? {
                        CommandResult::Resolved(results) => {
                            out.extend(keys.into_iter().zip(results))
                        }
                        CommandResult::Done => {}
                        CommandResult::Moved => return Err(crate::forward::moved(shard)),
                        other => return Err(unexpected("a resolve", &other)),
                    }
                }
                Ok(out)
            }
        })
        .await
    }

    /// A transaction whose keys are in several shards, as [`Node::transaction`] takes it:
    /// each watch (Redis `WATCH`) becomes a check in front of the commands, and a command on
    /// several keys (`MSET`, `DEL a b`, `MGET`) one command per key, for
    /// [`Node::transaction_across_shards`]; the answers are put back together, one per
    /// command given. A failed watch answers its position, as [`Command::Transaction`]
    /// does. The caller has checked the keys and values.
    pub(crate) async fn across_shards_key_by_key(
        &self,
        watches: Vec<(Bytes, KeyCheck)>,
        commands: Vec<Command>,
    ) -> Result<TransactionOutcome, ClusterError> {
        let given = watches.len() + commands.len();
        // For each command sent, the position among the watches and commands given.
        let mut origin: Vec<usize> = Vec::new();
        let mut parts: Vec<Command> = Vec::new();
        let watched = watches.len();
        for (position, (key, check)) in watches.into_iter().enumerate() {
            parts.push(Command::Check { key, check });
            origin.push(position);
        }
        for (position, command) in commands.into_iter().enumerate() {
            for part in one_key_each(command) {
                parts.push(part);
                origin.push(watched + position);
            }
        }
        let outcome = self.transaction_across_shards(parts).await?;
        let results = match outcome.0 {
            Ok(results) => results,
            Err(at) => {
                let position = origin.get(at as usize).copied().unwrap_or(0);
                return Ok(TransactionOutcome(Err(position as u32)));
            }
        };
        let mut answers: Vec<Option<CommandResult>> = vec![None; given];
        for (result, &position) in results.into_iter().zip(&origin) {
            if position < watched {
                continue;
            }
            let slot = &mut answers[position];
            *slot = Some(match (slot.take(), result) {
                (None, result) => result,
                (Some(CommandResult::Deleted(a)), CommandResult::Deleted(b)) => {
                    CommandResult::Deleted(a + b)
                }
                (Some(CommandResult::Records(mut a)), CommandResult::Records(b)) => {
                    a.extend(b);
                    CommandResult::Records(a)
                }
                (Some(CommandResult::Done), CommandResult::Done) => CommandResult::Done,
                (Some(_), other) => return Err(unexpected("a command split by key", &other)),
            });
        }
        Ok(TransactionOutcome(Ok(answers
            .into_iter()
            .skip(watched)
            .map(|a| a.unwrap_or(CommandResult::Done))
            .collect())))
    }

    /// Applies the commands of a Consul transaction whose keys are in several shards,
    /// atomically: one result per command, or the position of the first condition that
    /// failed (nothing applied). Each command names one key.
    pub(crate) async fn transaction_across_shards(
        &self,
        commands: Vec<Command>,
    ) -> Result<TransactionOutcome, ClusterError> {
        self.require_cluster_version(
            trireme_types::version::since::CROSS_SHARD_TRANSACTIONS,
            "a transaction across shards",
        )?;
        for command in &commands {
            if prefix_of(command).is_some() {
                self.require_cluster_version(
                    since::PREFIX_TRANSACTIONS,
                    "a prefix read or delete in a transaction",
                )?;
                continue;
            }
            // Commands on one string key (or lock) each: a prepare judges them and its
            // intent applies them as judged; collections keep rows a prepare does not hold.
            let plain = matches!(
                command,
                Command::Check { .. }
                    | Command::Put { .. }
                    | Command::PutMany { .. }
                    | Command::Read { .. }
                    | Command::Delete { .. }
                    | Command::Lock { .. }
                    | Command::Incr { .. }
                    | Command::Edit { .. }
                    | Command::SetTtl { .. }
            );
            if !plain || command.keys().len() != 1 {
                return Err(ClusterError::Request(TriremeError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "a transaction across shards takes commands on one string key each (reads, writes, deletes, checks, locks, increments, edits, expiries) and prefix reads and deletes, not {}",
                        command.name()
                    ),
                )));
            }
        }
        let deadline = Instant::now() + self.config.timing.request_timeout;
        if self.cluster_version() >= since::PREFIX_TRANSACTIONS
            && commands
                .iter()
                .all(|c| matches!(c, Command::ReadPrefix { .. }))
            && let Some(results) = Box::pin(self.read_prefixes_twice(&commands)).await?
        {
            return Ok(TransactionOutcome(Ok(results)));
        }
        let mut waits = 0;
        loop {
            // Boxed: a request's future nests every layer from the front end down, and this
            // one's is deep enough to pass the compiler's limit unboxed.
            match Box::pin(self.try_across_shards(&commands)).await? {
                Attempt::Done(outcome) => return Ok(outcome),
                Attempt::Again(Some((hold, shard))) if hold_target(&hold).is_some() => {
                    // A prefix read holds a key of this one: it goes as soon as it has read.
                    Box::pin(self.wait_out_hold(shard, &hold, deadline)).await?;
                }
                Attempt::Again(blocker) => {
                    // Another transaction holds a key (or this one ran out of its lease):
                    // wait for it, settling it if it was abandoned.
                    let key = blocker.map_or_else(|| first_key(&commands), |(key, _)| key);
                    self.wait_out_intent(&key, waits, deadline).await?;
                    waits += 1;
                }
            }
        }
    }

    /// A transaction of prefix reads (a consistent listing, a `get-tree` alone) read without
    /// the logs: every prefix is read in every shard twice (`consistent` reads), the second
    /// round after the whole first. When no shard's part of any prefix's index moved between
    /// its two reads, nothing under the prefixes changed anywhere from the last read of the
    /// first round to the first of the second, so the second round is one moment of them
    /// all: a write after a shard's first read has a higher index than any row that read saw
    /// (a transaction's rows carry their prepare's index, also above it, and a prepared key
    /// makes the read wait), and a removal raises the watermark. `None` after a few second
    /// rounds that kept moving: the caller then holds the prefixes.
    async fn read_prefixes_twice(
        &self,
        commands: &[Command],
    ) -> Result<Option<Vec<CommandResult>>, ClusterError> {
        let round = || {
            futures::future::try_join_all(commands.iter().filter_map(|c| {
                let Command::ReadPrefix { prefix } = c else {
                    return None;
                };
                Some(self.list_indexed(
                    prefix,
                    std::ops::Bound::Unbounded,
                    ReadMode::Consistent,
                    usize::MAX,
                ))
            }))
        };
        let mut before: Vec<Vec<ShardIndex>> = round()
            .await?
            .into_iter()
            .map(|(_, _, parts)| parts)
            .collect();
        for _ in 0..DOUBLE_READ_TRIES {
            let answers = round().await?;
            let after: Vec<Vec<ShardIndex>> = answers.iter().map(|a| a.2.clone()).collect();
            if after == before {
                return Ok(Some(
                    answers
                        .into_iter()
                        .map(|(entries, meta, _)| CommandResult::Entries {
                            entries,
                            index: meta.index,
                        })
                        .collect(),
                ));
            }
            before = after;
        }
        Ok(None)
    }

    /// One try: prepare everywhere, decide, resolve.
    async fn try_across_shards(&self, commands: &[Command]) -> Result<Attempt, ClusterError> {
        let seen = self.map_version();
        let map = self.shard_map();
        let mut parts: BTreeMap<ShardId, (Vec<usize>, Vec<Command>)> = BTreeMap::new();
        // Every key that will hold an intent, and the key of every prefix hold.
        let mut all_keys: Vec<Bytes> = Vec::new();
        let mut prefixes: Vec<Bytes> = Vec::new();
        for (i, command) in commands.iter().enumerate() {
            let shards = match prefix_of(command) {
                // A prefix's keys may be in any shard.
                Some(prefix) => {
                    if !prefixes.contains(prefix) {
                        prefixes.push(prefix.clone());
                    }
                    map.shards().collect::<Vec<_>>()
                }
                None => {
                    let key = command.keys()[0].clone();
                    let shard = map.shard_of_key(&key);
                    if !all_keys.contains(&key) {
                        all_keys.push(key);
                    }
                    vec![shard]
                }
            };
            for shard in shards {
                let part = parts.entry(shard).or_default();
                part.0.push(i);
                part.1.push(command.clone());
            }
        }
        // The record goes in a shard this node leads if it can: the prepare that writes it
        // and the decision are then not forwarded.
        let record_shard = parts
            .keys()
            .copied()
            .find(|&shard| self.group(shard).is_some_and(|g| g.is_leader()))
            .unwrap_or_else(|| map.shard_of_key(&first_key(commands)));
        let txn = transaction_id_in(&map, record_shard);
        all_keys.extend(prefixes.iter().map(|p| hold_key(txn, p)));
        let record = record_key(txn);
        let record_shard = map.shard_of_key(&record);
        parts.entry(record_shard).or_default();
        let expires_ms = crate::now_ms() + self.transaction_lease().as_millis() as u64;
        // From protocol 4 each shard's part is fenced to the slots this map gives it: a
        // prefix names no key that a split could refuse.
        let fenced = self.cluster_version() >= since::PREFIX_TRANSACTIONS;
        let prepare = |shard: ShardId| {
            let creates_record = shard == record_shard;
            let mut part = Vec::with_capacity(parts[&shard].1.len() + 1);
            if fenced {
                part.push(Command::OwnsSlots {
                    slots: slots_of(&map, shard),
                });
            }
            part.extend(parts[&shard].1.iter().cloned());
            let command = Command::Prepare {
                txn,
                record: record.clone(),
                expires_ms,
                creates_record,
                all_keys: if creates_record {
                    all_keys.clone()
                } else {
                    Vec::new()
                },
                commands: part,
            };
            async move {
                let log = LogCommand {
                    now_ms: crate::now_ms(),
                    command,
                };
                (shard, self.on_shard_once(shard, &Write(log)).await)
            }
        };
        let mut ready = Vec::new();
        // What each command returned as its shards judged it, by position.
        let mut judged: Vec<Vec<CommandResult>> = vec![Vec::new(); commands.len()];
        let mut failed: Option<usize> = None;
        let mut error = None;
        let mut waiting: Vec<ShardId> = parts.keys().copied().collect();
        // A transaction of prefix reads only (a consistent listing) keeps what it prepared
        // while it waits for the keys another one holds, so that it is not starved by a
        // stream of writes: its holds keep new intents out, and the ones it met go as their
        // transactions end. It holds no key, and reads of a prefix share it, so nothing
        // waits for it while it waits. Any other transaction gives everything up at once
        // instead.
        let reads_only = commands
            .iter()
            .all(|c| matches!(c, Command::ReadPrefix { .. }));
        let mut pauses = 0u32;
        let blocker = loop {
            let mut blocker = None;
            for (shard, answer) in join_all(waiting.iter().map(|&s| prepare(s))).await {
                match answer {
                    Ok(CommandResult::Prepared(PrepareOutcome::Ready(results))) => {
                        for (&position, result) in parts[&shard].0.iter().zip(results) {
                            judged[position].push(result);
                        }
                        ready.push(shard);
                    }
                    Ok(CommandResult::Prepared(PrepareOutcome::Failed(at))) => {
                        // The first condition that fails in the transaction's order: each
                        // shard names its own first.
                        if let Some(&position) = parts[&shard].0.get(at as usize) {
                            failed = Some(failed.map_or(position, |f| f.min(position)));
                        }
                    }
                    Ok(CommandResult::Prepared(PrepareOutcome::Busy(key))) => {
                        blocker = Some((key, shard))
                    }
                    Ok(CommandResult::Prepared(PrepareOutcome::Aborted) | CommandResult::Moved) => {
                    }
                    Ok(CommandResult::Prepared(PrepareOutcome::TooLarge(found))) => {
                        error = Some(ClusterError::Request(TriremeError::new(
                            ErrorCode::RequestTooLarge,
                            format!(
                                "a prefix delete in a transaction may cover at most {} keys in each shard; one shard holds {found} or more under it",
                                trireme_types::txn::MAX_PREFIX_DELETE_KEYS
                            ),
                        )))
                    }
                    Ok(other) => error = Some(unexpected("a prepare", &other)),
                    // A split moved keys, or a shard is between leaders or not open here
                    // yet (a split taking effect): tried again with a newer map.
                    Err(e) if crate::router::is_moved(&e) || crate::router::is_transient(&e) => {}
                    Err(e) => error = Some(e),
                }
            }
            waiting.retain(|shard| !ready.contains(shard));
            let keep_waiting = reads_only
                && !waiting.is_empty()
                && blocker.is_some()
                && failed.is_none()
                && error.is_none()
                && crate::now_ms() + (MAX_INTENT_PAUSE.as_millis() as u64) < expires_ms;
            if !keep_waiting {
                break blocker;
            }
            // Soon: the writers it met give way to it for a while (see `wait_out_intent`).
            tokio::time::sleep(Duration::from_millis(1 << pauses.min(3))).await;
            pauses += 1;
        };
        if ready.len() < parts.len() {
            // The record first: no prepare still on its way can be committed after this.
            self.abort_prepared(txn, &record, &all_keys).await;
            if let Some(position) = failed {
                return Ok(Attempt::Done(TransactionOutcome(Err(position as u32))));
            }
            if let Some(e) = error {
                return Err(e);
            }
            if blocker.is_none() {
                // A split moved keys, or the lease ran out: the map may have changed.
                self.map_change(seen, Duration::from_millis(100)).await;
            }
            return Ok(Attempt::Again(blocker));
        }
        trireme_storage::crash::point("txn-prepared");
        let commit = if fenced {
            Decision::CommitIfPending
        } else {
            Decision::Commit
        };
        match self.decide(&record, commit).await {
            Ok(TxnState::Committed) => {}
            Ok(_) => {
                self.abort_prepared(txn, &record, &all_keys).await;
                return Ok(Attempt::Again(None));
            }
            Err(e) => {
                return Err(ClusterError::Request(TriremeError::new(
                    ErrorCode::Timeout,
                    format!(
                        "the transaction's outcome is unknown ({e}): it commits or aborts as a whole within {} ms; read its keys to learn which",
                        self.transaction_lease().as_millis() as u64
                            + 2 * RESOLVE_INTERVAL.as_millis() as u64
                    ),
                )));
            }
        }
        trireme_storage::crash::point("txn-committed");
        if self.cluster_version() >= since::PREFIX_TRANSACTIONS {
            // Committed: the shards apply each key's part at its prepare's index, so what
            // the prepares judged is the answer, whoever resolves the intents and when.
            self.txn_resolutions.resolve(txn, record, all_keys, true);
            let shards_of = |position: usize| {
                parts
                    .values()
                    .filter(|(at, _)| at.contains(&position))
                    .count()
            };
            let expected: Vec<usize> = (0..commands.len()).map(shards_of).collect();
            return Ok(match merged(commands, judged, &expected) {
                Some(results) => Attempt::Done(TransactionOutcome(Ok(results))),
                None => return Err(answers_lost()),
            });
        }
        let mut resolved = HashMap::new();
        for _ in 0..3 {
            match self.resolve_keys(txn, all_keys.clone(), true).await {
                Ok(results) => {
                    resolved = results;
                    break;
                }
                Err(e) => {
                    tracing::debug!(txn = format!("{txn:032x}"), error = %e, "resolving a committed transaction again");
                }
            }
        }
        if resolved.len() == all_keys.len() {
            self.txn_forgets.forget(record);
        }
        let judged = judged.into_iter().map(|mut j| j.pop()).collect();
        match answers(commands, resolved, judged) {
            Some(results) => Ok(Attempt::Done(TransactionOutcome(Ok(results)))),
            // Committed: this must not read as "not applied".
            None => Err(answers_lost()),
        }
    }

    /// Aborts transaction `txn` and drops its intents on `keys`, as far as it can now: what
    /// is left, its shards' resolvers finish.
    async fn abort_prepared(&self, txn: u128, record: &Bytes, keys: &[Bytes]) {
        match self.decide(record, Decision::Abort).await {
            // Dropped before the next try: two transactions that keep each other's keys
            // busy would otherwise meet again and again.
            Ok(TxnState::Aborted) => {
                if let Err(e) = self.resolve_keys(txn, keys.to_vec(), false).await {
                    tracing::debug!(error = %e, "dropping an aborted transaction's intents");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "aborting a transaction"),
        }
    }

    /// How long a transaction across shards has to commit once it starts: the longest
    /// election timeout (a busy node's prepare and decision take a few rounds each), so
    /// that one whose coordinator died is settled within that and a poll, about twice the
    /// shortest election timeout with the default timing.
    fn transaction_lease(&self) -> Duration {
        self.config.timing.election_max
    }
}

/// Each command's result, in order: what its key's resolve returned, or for a key whose
/// intent somebody else resolved (after the lease ran out), what the command returned as it
/// was judged in the prepare (its reads are the same; a write's index is the prepare's,
/// lower than the write's own, so a `cas` with it fails rather than overwrite a later
/// write). `None` if neither is known.
fn answers(
    commands: &[Command],
    resolved: HashMap<Bytes, Vec<CommandResult>>,
    judged: Vec<Option<CommandResult>>,
) -> Option<Vec<CommandResult>> {
    let mut queues: HashMap<Bytes, VecDeque<CommandResult>> = resolved
        .into_iter()
        .map(|(key, results)| (key, results.into()))
        .collect();
    commands
        .iter()
        .zip(judged)
        .map(|(command, judged)| {
            queues
                .get_mut(command.keys()[0])
                .and_then(VecDeque::pop_front)
                .or(judged)
        })
        .collect()
}

/// Each command's result from what its shards judged in their prepares: a key's command
/// has one, a prefix command one per shard, merged (`None` if a command has none).
fn merged(
    commands: &[Command],
    judged: Vec<Vec<CommandResult>>,
    expected: &[usize],
) -> Option<Vec<CommandResult>> {
    commands
        .iter()
        .zip(judged)
        .zip(expected)
        .map(|((command, mut results), &expected)| {
            // A shard whose prepare was sent twice answers nothing the second time.
            if results.len() != expected {
                return None;
            }
            if prefix_of(command).is_none() {
                return results.pop();
            }
            let (mut deleted, mut index) = (0, 0);
            let mut entries = Vec::new();
            for result in results {
                match result {
                    CommandResult::Deleted(n) => deleted += n,
                    CommandResult::Entries {
                        entries: found,
                        index: part,
                    } => {
                        entries.extend(found);
                        index += part;
                    }
                    _ => return None,
                }
            }
            Some(match command {
                Command::ReadPrefix { .. } => {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                    CommandResult::Entries { entries, index }
                }
                _ => CommandResult::Deleted(deleted),
            })
        })
        .collect()
}

/// What a request answers when `what` (a key, a prefix) stayed held by a transaction for
/// the whole of its timeout.
fn held_too_long(what: String) -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::KeyInTransaction,
        format!(
            "{what} is held by a transaction across shards that did not finish in time; nothing was done, try again"
        ),
    ))
}

fn answers_lost() -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::Timeout,
        "the transaction was committed, but what some of its operations returned is lost: read its keys",
    ))
}

/// `shard`'s slots in `map`, as a fence (see [`Command::OwnsSlots`]).
fn slots_of(map: &ShardMap, shard: ShardId) -> (u16, u16) {
    let slots = map.slots_of(shard);
    (*slots.start(), *slots.end())
}

/// `command` as commands of one key each, in order: `MSET`, `DEL` and `MGET` of several
/// keys become one per key (their answers add up again: `Done`, the count, the records).
fn one_key_each(command: Command) -> Vec<Command> {
    match command {
        Command::PutMany { pairs } if pairs.len() > 1 => pairs
            .into_iter()
            .map(|pair| Command::PutMany { pairs: vec![pair] })
            .collect(),
        Command::Delete { keys, cas } if keys.len() > 1 => keys
            .into_iter()
            .map(|key| Command::Delete {
                keys: vec![key],
                cas,
            })
            .collect(),
        Command::Read { keys } if keys.len() > 1 => keys
            .into_iter()
            .map(|key| Command::Read { keys: vec![key] })
            .collect(),
        other => vec![other],
    }
}

/// The prefix a prefix read or delete covers; `None` for any other command.
fn prefix_of(command: &Command) -> Option<&Bytes> {
    match command {
        Command::DeletePrefix { prefix } | Command::ReadPrefix { prefix } => Some(prefix),
        _ => None,
    }
}

/// The first key a transaction names (a prefix's hold for a prefix command).
fn first_key(commands: &[Command]) -> Bytes {
    commands
        .iter()
        .find_map(|c| c.keys().first().map(|k| (*k).clone()))
        .or_else(|| commands.iter().find_map(prefix_of).cloned())
        .unwrap_or_default()
}

/// `keys` by the shard each is in now; a hold's key in every shard.
fn by_shard(routing: &ShardMap, keys: Vec<Bytes>) -> BTreeMap<ShardId, Vec<Bytes>> {
    let mut per_shard: BTreeMap<ShardId, Vec<Bytes>> = BTreeMap::new();
    for key in keys {
        if hold_target(&key).is_some() {
            for shard in routing.shards() {
                per_shard.entry(shard).or_default().push(key.clone());
            }
        } else {
            per_shard
                .entry(routing.shard_of_key(&key))
                .or_default()
                .push(key);
        }
    }
    per_shard
}

/// The key a "held by a transaction" error names, if it is one.
pub(crate) fn held_key(error: &ClusterError) -> Option<Bytes> {
    match error {
        ClusterError::Storage(trireme_storage::StorageError::InTransaction(key)) => {
            Some(key.clone())
        }
        ClusterError::Remote(e) => trireme_storage::key_in_transaction(e),
        _ => None,
    }
}

fn unexpected(what: &str, result: &CommandResult) -> ClusterError {
    ClusterError::Internal(format!("{what} was answered with {}", result_name(result)))
}

fn result_name(result: &CommandResult) -> String {
    let text = format!("{result:?}");
    text.split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A fresh transaction id whose record lands in `shard` (drawn until one does: about as
/// many draws as there are shards).
fn transaction_id_in(map: &ShardMap, shard: ShardId) -> u128 {
    let mut id: u128 = rand::random();
    for _ in 0..100_000 {
        if map.shard_of_key(&record_key(id)) == shard {
            break;
        }
        id = rand::random();
    }
    id
}

/// Starts each shard leader's resolver: it settles the intents whose transactions' leases
/// ran out, and finishes and forgets the records of transactions whose coordinator did not.
pub(crate) fn spawn_resolver(node: &Arc<Node>) {
    crate::node::spawn_periodic(Arc::downgrade(node), RESOLVE_INTERVAL, resolve_abandoned);
}

async fn resolve_abandoned(node: Arc<Node>) {
    for group in node.local_groups() {
        if !group.is_leader() {
            continue;
        }
        let shard = group.shard();
        let now = crate::now_ms();
        for key in node.storage.expired_intents(shard, now) {
            if let Err(e) = node.settle_intent(&key).await {
                tracing::debug!(shard = shard.0, error = %e, "cannot settle an expired intent yet");
            }
        }
        for (key, hold) in node.storage.expired_holds(shard, now) {
            if let Err(e) = node.settle_hold(shard, key, &hold).await {
                tracing::debug!(shard = shard.0, error = %e, "cannot settle an expired prefix hold yet");
            }
        }
        let cutoff = now.saturating_sub(RECORD_GRACE_MS);
        for (key, record) in node.storage.txn_records_expired_by(shard, cutoff) {
            if let Err(e) = finish_record(&node, &key, record).await {
                tracing::debug!(shard = shard.0, error = %e, "cannot finish a transaction yet");
            }
        }
    }
}

/// Decides (abort, if still pending), resolves every key of, and forgets the record at `key`.
async fn finish_record(node: &Node, key: &Bytes, record: TxnRecord) -> Result<(), ClusterError> {
    let state = match record.state {
        TxnState::Pending => node.decide(key, Decision::AbortIfExpired).await?,
        state => state,
    };
    if state == TxnState::Pending {
        return Ok(());
    }
    let txn = trireme_types::txn::record_txn(key)
        .ok_or_else(|| ClusterError::Internal("a transaction record's key".into()))?;
    if !record.keys.is_empty() {
        node.resolve_keys(txn, record.keys, state == TxnState::Committed)
            .await?;
    }
    node.propose_by_key(
        key,
        Command::Forget {
            records: vec![key.clone()],
        },
    )
    .await?;
    Ok(())
}

/// A decided transaction whose intents are still to be resolved.
#[derive(Debug)]
pub(crate) struct Decided {
    txn: u128,
    record: Bytes,
    keys: Vec<Bytes>,
    commit: bool,
}

/// Decided transactions whose intents are still to be resolved: from cluster version 4 the
/// coordinator answers its client once the decision is written, and one task per node
/// resolves them in the background, many in one command per shard, then forgets their
/// records. Until then their keys stay held: a reader waits the few milliseconds that
/// takes, never sees the old value after the client was answered.
pub(crate) type Resolutions = BackgroundQueue<Decided>;

/// Work for one background task of the node: anyone hands items in, and the task takes the
/// receiving end once, when it starts.
#[derive(Debug)]
pub(crate) struct BackgroundQueue<T> {
    sender: tokio::sync::mpsc::UnboundedSender<T>,
    receiver: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<T>>>,
}

impl<T> Default for BackgroundQueue<T> {
    fn default() -> Self {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        BackgroundQueue {
            sender,
            receiver: std::sync::Mutex::new(Some(receiver)),
        }
    }
}

impl<T> BackgroundQueue<T> {
    /// Hands `item` to the task. Dropped only once the node stops; what is left then is
    /// finished by the shards' resolvers.
    fn push(&self, item: T) {
        let _ = self.sender.send(item);
    }

    /// The receiving end, for the task that starts first; `None` after.
    fn take_receiver(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<T>> {
        self.receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl Resolutions {
    fn resolve(&self, txn: u128, record: Bytes, keys: Vec<Bytes>, commit: bool) {
        self.push(Decided {
            txn,
            record,
            keys,
            commit,
        });
    }
}

/// How many rounds of resolutions a node sends at once: a shard that is slow to answer (an
/// election) holds up only its round.
const RESOLUTION_ROUNDS: usize = 4;

/// Starts the task that resolves the transactions handed to [`Resolutions`]: each round
/// takes every one waiting and sends one `ResolveMany` per shard.
pub(crate) fn spawn_resolutions(node: &Arc<Node>) {
    let Some(mut receiver) = node.txn_resolutions.take_receiver() else {
        return;
    };
    let weak = Arc::downgrade(node);
    let rounds = Arc::new(tokio::sync::Semaphore::new(RESOLUTION_ROUNDS));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = rounds.clone().acquire_owned().await else {
                return;
            };
            let mut decided = Vec::new();
            if receiver.recv_many(&mut decided, 512).await == 0 {
                return;
            }
            let Some(node) = weak.upgrade() else { return };
            tokio::spawn(async move {
                resolve_round(&node, decided).await;
                drop(permit);
            });
        }
    });
}

/// One round: every shard gets the resolutions of its keys in one command; a transaction
/// resolved everywhere is forgotten, one that a shard refused is resolved again on its own.
async fn resolve_round(node: &Arc<Node>, decided: Vec<Decided>) {
    trireme_storage::crash::point("txn-resolving");
    let map = node.shard_map();
    let mut per_shard: BTreeMap<ShardId, (Vec<usize>, Vec<Resolution>)> = BTreeMap::new();
    for (i, d) in decided.iter().enumerate() {
        for (shard, keys) in by_shard(&map, d.keys.clone()) {
            let part = per_shard.entry(shard).or_default();
            part.0.push(i);
            part.1.push(Resolution {
                txn: d.txn,
                keys,
                commit: d.commit,
            });
        }
    }
    let mut failed = vec![false; decided.len()];
    let answers = join_all(per_shard.into_iter().map(|(shard, (which, resolutions))| {
        let log = LogCommand {
            now_ms: crate::now_ms(),
            command: Command::ResolveMany {
                slots: Some(slots_of(&map, shard)),
                resolutions,
            },
        };
        async move { (which, node.on_shard_once(shard, &Write(log)).await) }
    }))
    .await;
    for (which, answer) in answers {
        if !matches!(answer, Ok(CommandResult::Done)) {
            for i in which {
                failed[i] = true;
            }
        }
    }
    for (d, failed) in decided.into_iter().zip(failed) {
        if !failed {
            node.txn_forgets.forget(d.record);
            continue;
        }
        // Moved by a split, or a leader changed: routed again on its own.
        let node = node.clone();
        tokio::spawn(async move {
            match node.resolve_keys(d.txn, d.keys, d.commit).await {
                Ok(_) => node.txn_forgets.forget(d.record),
                Err(e) => {
                    tracing::debug!(txn = format!("{:032x}", d.txn), error = %e, "a decided transaction is left to the resolver")
                }
            }
        });
    }
}

/// Records of committed transactions whose every intent is resolved, to delete: the
/// coordinator answers its client without waiting for that, and one task per node deletes
/// them in the background.
pub(crate) type Forgets = BackgroundQueue<Bytes>;

impl Forgets {
    fn forget(&self, record: Bytes) {
        self.push(record);
    }
}

/// Starts the task that deletes the records handed to [`Forgets`], several at a time.
pub(crate) fn spawn_forgetter(node: &Arc<Node>) {
    let Some(mut receiver) = node.txn_forgets.take_receiver() else {
        return;
    };
    let weak = Arc::downgrade(node);
    tokio::spawn(async move {
        let mut records = Vec::new();
        while receiver.recv_many(&mut records, 1024).await > 0 {
            let Some(node) = weak.upgrade() else { return };
            // One command per shard; a shard that refuses (split since) gets each record
            // routed again on its own.
            let map = node.shard_map();
            let mut per_shard: BTreeMap<ShardId, Vec<Bytes>> = BTreeMap::new();
            for record in records.drain(..) {
                per_shard
                    .entry(map.shard_of_key(&record))
                    .or_default()
                    .push(record);
            }
            let node = &node;
            join_all(per_shard.into_iter().map(|(shard, records)| async move {
                let log = LogCommand {
                    now_ms: crate::now_ms(),
                    command: Command::Forget {
                        records: records.clone(),
                    },
                };
                if matches!(
                    node.on_shard_once(shard, &Write(log)).await,
                    Ok(CommandResult::Done)
                ) {
                    return;
                }
                for record in records {
                    let forget = Command::Forget {
                        records: vec![record.clone()],
                    };
                    if let Err(e) = node.propose_by_key(&record, forget).await {
                        tracing::debug!(error = %e, "a transaction record is left to the resolver");
                    }
                }
            }))
            .await;
        }
    });
}
