//! Commands that decide from what their keys hold, then write: `EXPIRE ... NX|XX|GT|LT`,
//! `RENAME`, `RENAMENX`, `COPY`, `MSETNX`.
//!
//! Each reads its keys, decides, and sends its writes as a transaction that watches the keys
//! at the `ModifyIndex` it read: if another client changed one in between, the transaction
//! applies nothing and the command reads and decides again. So each is atomic, as in Redis,
//! without a log command of its own. Like Redis Cluster, keys in different slots get
//! `CROSSSLOT`.

use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::{
    Command, End, FromApplied, HashAnswer, HashOp, HashRead, KeyCheck, ListAnswer, ListOp,
    ListRead, PutCondition, ReadMode, SetCombine, SetOp, SortedSetAnswer, SortedSetOp,
    SortedSetRead, TransactionRequest, TtlChanged, TtlUpdate, ZAddCompare, ZAddWhen, ZRange,
};
use trireme_types::{Record, ValueKind, key_slot};

/// How many times a command reads and decides again after losing a race, before it answers
/// an error (others keep changing its keys).
const ATTEMPTS: usize = 32;

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// When `EXPIRE` and its relatives change the expiry (Redis 7's `NX`, `XX`, `GT`, `LT`;
/// `XX` combines with `GT` or `LT`, and both must hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ExpireIf {
    /// `NX`: the key has no expiry.
    no_expiry: bool,
    /// `XX`: the key has an expiry.
    has_expiry: bool,
    /// `GT`: the new expiry is later (no expiry counts as never).
    later: bool,
    /// `LT`: the new expiry is earlier (no expiry counts as never).
    earlier: bool,
}

impl ExpireIf {
    /// Parses the options left in `args`: `None` when there are none.
    pub(crate) fn parse(args: &mut Args) -> Result<Option<ExpireIf>, CmdError> {
        if args.remaining() == 0 {
            return Ok(None);
        }
        let mut found = ExpireIf::default();
        while args.remaining() > 0 {
            match args.next_str()?.to_ascii_uppercase().as_str() {
                "NX" => found.no_expiry = true,
                "XX" => found.has_expiry = true,
                "GT" => found.later = true,
                "LT" => found.earlier = true,
                other => {
                    return Err(CmdError::Reply(format!("ERR Unsupported option {other}")));
                }
            }
        }
        if found.no_expiry && (found.has_expiry || found.later || found.earlier) {
            return Err(CmdError::Reply(
                "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
            ));
        }
        if found.later && found.earlier {
            return Err(CmdError::Reply(
                "ERR GT and LT options at the same time are not compatible".into(),
            ));
        }
        Ok(Some(found))
    }

    fn allows(self, current: Option<u64>, new_at: u64) -> bool {
        (!self.no_expiry || current.is_none())
            && (!self.has_expiry || current.is_some())
            && (!self.later || current.is_some_and(|at| new_at > at))
            && (!self.earlier || current.is_none_or(|at| new_at < at))
    }
}

/// Reads `keys` linearizably: their records, in order.
async fn read(ctx: &Ctx<'_>, keys: &[Bytes]) -> Result<Vec<Option<Record>>, CmdError> {
    Ok(ctx.shared.node.get_many(keys, ReadMode::Default).await?)
}

/// Applies `commands` if `keys` still hold `records`: `None` when one changed meanwhile.
async fn apply_if_unchanged(
    ctx: &Ctx<'_>,
    keys: &[Bytes],
    records: &[Option<Record>],
    commands: Vec<Command>,
) -> Result<Option<Vec<trireme_cluster::CommandResult>>, CmdError> {
    let watches = keys
        .iter()
        .cloned()
        .zip(
            records
                .iter()
                .map(|r| KeyCheck::At(r.as_ref().map(|r| r.modify_index))),
        )
        .collect();
    let outcome = ctx
        .shared
        .node
        .transaction(TransactionRequest { watches, commands })
        .await?;
    Ok(outcome.0.ok())
}

fn raced() -> CmdError {
    CmdError::Reply(format!(
        "ERR the keys kept changing under this command ({ATTEMPTS} tries); try again"
    ))
}

fn same_slot(keys: &[Bytes]) -> Result<(), CmdError> {
    match keys.split_first() {
        Some((first, rest)) if rest.iter().any(|k| key_slot(k) != key_slot(first)) => {
            Err(CmdError::Reply(CROSSSLOT.into()))
        }
        _ => Ok(()),
    }
}

/// The expiry change of `EXPIRE`-like commands with an `NX`/`XX`/`GT`/`LT` option.
pub(crate) async fn expire_if(
    ctx: &mut Ctx<'_>,
    key: Bytes,
    at: u64,
    condition: ExpireIf,
) -> CmdResult {
    let keys = [key.clone()];
    for _ in 0..ATTEMPTS {
        let records = read(ctx, &keys).await?;
        let Some(record) = &records[0] else {
            return Ok(Reply::integer(0));
        };
        if !condition.allows(record.expires_at_ms, at) {
            return Ok(Reply::integer(0));
        }
        let command = Command::SetTtl {
            key: key.clone(),
            ttl: TtlUpdate::At(at),
        };
        if let Some(results) = apply_if_unchanged(ctx, &keys, &records, vec![command]).await? {
            let changed = results.into_iter().next().map(TtlChanged::read);
            return Ok(Reply::integer(i64::from(matches!(
                changed,
                Some(Ok(TtlChanged(true)))
            ))));
        }
    }
    Err(raced())
}

/// `RENAME src dst` and `RENAMENX src dst`: the value, flags and expiry (or a hash's fields
/// and expiry) move to `dst`.
pub(crate) async fn rename(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let source = args.next_bytes()?;
    let target = args.next_bytes()?;
    no_more(args)?;
    let only_new = args.name() == "renamenx";
    let keys = [source.clone(), target.clone()];
    same_slot(&keys)?;
    for _ in 0..ATTEMPTS {
        let records = read(ctx, &keys).await?;
        let Some(record) = records[0].clone() else {
            return Err(CmdError::Reply("ERR no such key".into()));
        };
        if source == target {
            return Ok(if only_new {
                Reply::integer(0)
            } else {
                Reply::ok()
            });
        }
        if only_new && records[1].is_some() {
            return Ok(Reply::integer(0));
        }
        let mut commands = copy_of(ctx, &source, &record, target.clone()).await?;
        commands.push(Command::Delete {
            keys: vec![source.clone()],
            cas: None,
        });
        if apply_if_unchanged(ctx, &keys, &records, commands)
            .await?
            .is_some()
        {
            return Ok(if only_new {
                Reply::integer(1)
            } else {
                Reply::ok()
            });
        }
    }
    Err(raced())
}

/// The writes that give `target` what `source` holds (`record`): value, flags and expiry of
/// a string; every field and the expiry of a hash, whose fields are read here (a change
/// after the read moves the hash's `ModifyIndex`, which the caller's watch catches).
async fn copy_of(
    ctx: &Ctx<'_>,
    source: &Bytes,
    record: &Record,
    target: Bytes,
) -> Result<Vec<Command>, CmdError> {
    let ttl = record.expires_at_ms.map_or(TtlUpdate::Clear, TtlUpdate::At);
    match record.kind {
        ValueKind::String => Ok(vec![Command::Put {
            key: target,
            value: record.value.clone(),
            flags: Some(record.flags),
            condition: PutCondition::Always,
            ttl,
            return_previous: false,
        }]),
        ValueKind::Hash => {
            let all = HashRead::Fields {
                after: None,
                limit: u64::MAX,
            };
            let outcome = ctx
                .shared
                .node
                .hash_read(source, all, ReadMode::Default)
                .await?;
            let pairs = match outcome.0 {
                Ok(HashAnswer::Pairs(pairs)) => pairs,
                other => {
                    return Err(CmdError::Reply(format!(
                        "ERR internal: reading the hash answered {other:?}"
                    )));
                }
            };
            let mut commands = vec![
                Command::Delete {
                    keys: vec![target.clone()],
                    cas: None,
                },
                Command::Hash {
                    key: target.clone(),
                    op: HashOp::Set {
                        pairs,
                        only_new: false,
                        max_fields: 0,
                    },
                },
            ];
            if ttl != TtlUpdate::Clear {
                commands.push(Command::SetTtl { key: target, ttl });
            }
            Ok(commands)
        }
        ValueKind::List => {
            let all = ListRead::Range { start: 0, stop: -1 };
            let outcome = ctx
                .shared
                .node
                .list_read(source, all, ReadMode::Default)
                .await?;
            let elements = match outcome.0 {
                Ok(ListAnswer::Elements(elements)) => elements,
                other => {
                    return Err(CmdError::Reply(format!(
                        "ERR internal: reading the list answered {other:?}"
                    )));
                }
            };
            let mut commands = vec![
                Command::Delete {
                    keys: vec![target.clone()],
                    cas: None,
                },
                Command::List {
                    key: target.clone(),
                    op: ListOp::Push {
                        elements,
                        end: End::Right,
                        only_existing: false,
                        max_len: 0,
                    },
                },
            ];
            if ttl != TtlUpdate::Clear {
                commands.push(Command::SetTtl { key: target, ttl });
            }
            Ok(commands)
        }
        ValueKind::SortedSet => {
            let all = SortedSetRead::Range {
                range: ZRange::Rank { start: 0, stop: -1 },
                reverse: false,
                offset: 0,
                limit: u64::MAX,
            };
            let outcome = ctx
                .shared
                .node
                .sorted_set_read(source, all, ReadMode::Default)
                .await?;
            let pairs = match outcome.0 {
                Ok(SortedSetAnswer::Pairs(pairs)) => pairs,
                other => {
                    return Err(CmdError::Reply(format!(
                        "ERR internal: reading the sorted set answered {other:?}"
                    )));
                }
            };
            let mut commands = vec![
                Command::Delete {
                    keys: vec![target.clone()],
                    cas: None,
                },
                Command::SortedSet {
                    key: target.clone(),
                    op: SortedSetOp::Add {
                        members: pairs.into_iter().map(|(m, s)| (s, m)).collect(),
                        when: ZAddWhen::Always,
                        compare: ZAddCompare::Any,
                        increment: false,
                        max_members: 0,
                    },
                },
            ];
            if ttl != TtlUpdate::Clear {
                commands.push(Command::SetTtl { key: target, ttl });
            }
            Ok(commands)
        }
        ValueKind::Set => {
            let combine = SetOp::Store {
                combine: SetCombine::Union,
                sources: vec![source.clone()],
                max_members: 0,
            };
            let mut commands = vec![Command::SetMembers {
                key: target.clone(),
                op: combine,
            }];
            if ttl != TtlUpdate::Clear {
                commands.push(Command::SetTtl { key: target, ttl });
            }
            Ok(commands)
        }
    }
}

/// `COPY src dst [DB 0] [REPLACE]`.
pub(crate) async fn copy(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let source = args.next_bytes()?;
    let target = args.next_bytes()?;
    let mut replace = false;
    while args.remaining() > 0 {
        if args.next_keyword("replace") {
            replace = true;
        } else if args.next_keyword("db") {
            if args.next_i64()? != 0 {
                return Err(CmdError::Reply("ERR DB index is out of range".into()));
            }
        } else {
            return Err(ArgError::Syntax.into());
        }
    }
    let keys = [source.clone(), target.clone()];
    same_slot(&keys)?;
    if source == target {
        return Err(CmdError::Reply(
            "ERR source and destination objects are the same".into(),
        ));
    }
    for _ in 0..ATTEMPTS {
        let records = read(ctx, &keys).await?;
        let Some(record) = &records[0] else {
            return Ok(Reply::integer(0));
        };
        if records[1].is_some() && !replace {
            return Ok(Reply::integer(0));
        }
        let commands = copy_of(ctx, &source, record, target.clone()).await?;
        if apply_if_unchanged(ctx, &keys, &records, commands)
            .await?
            .is_some()
        {
            return Ok(Reply::integer(1));
        }
    }
    Err(raced())
}

/// `MSETNX k v [k v ...]`: all keys are written, or none if any exists. The keys must
/// share a slot, unless `[redis] cross_slot_transactions` is on.
pub(crate) async fn msetnx(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let rest = args.rest();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(args.wrong_arity().into());
    }
    let pairs: Vec<(Bytes, Bytes)> = rest
        .chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    let keys: Vec<Bytes> = pairs.iter().map(|(k, _)| k.clone()).collect();
    if !ctx.shared.node.config().redis_cross_slot {
        same_slot(&keys)?;
    }
    // Watching every key as missing is the whole condition: if the transaction is refused,
    // one of them exists by then, and MSETNX answers 0 as it would have.
    let absent = vec![None; keys.len()];
    let written = apply_if_unchanged(ctx, &keys, &absent, vec![Command::PutMany { pairs }])
        .await?
        .is_some();
    Ok(Reply::integer(i64::from(written)))
}
