//! MULTI, EXEC, DISCARD, WATCH, UNWATCH: Redis transactions as one log entry.
//!
//! Between `MULTI` and `EXEC` commands are only checked (name, arity, slot) and queued, as
//! Redis does. `EXEC` turns each queued command into its log command and sends them, with
//! the watched keys and the `ModifyIndex` each had at `WATCH`, as one
//! [`Command::Transaction`] to the shard of their slot: the state machine applies all of
//! them or, if a watched key changed, none (`EXEC` answers a null). Keys in more than one
//! slot get `CROSSSLOT`, as Redis Cluster answers, unless `[redis] cross_slot_transactions`
//! is on: then a transaction whose keys are in several shards runs as a transaction across
//! shards (see `Node::transaction`), on string keys only.

use super::{CmdError, CmdResult, Ctx, hashes, keys, lists, no_more, sets, sorted_sets, strings};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::read_limit::{Whole, bound_read, too_many_to_combine, too_many_to_read};
use trireme_cluster::{
    Command, CommandResult, Deleted, Done, EditOutcome, FromApplied, HashAnswer, HashOp,
    HashOutcome, HashRead, IncrOutcome, KeyCheck, ListAnswer, ListOp, ListOutcome, ListRead,
    PutCondition, PutOutcome, PutRequest, ReadMode, Records, SetAnswer, SetOp, SetOutcome, SetRead,
    SortedSetAnswer, SortedSetOp, SortedSetOutcome, SortedSetRead, StringEdit, TransactionRequest,
    TtlChanged, TtlUpdate,
};
use trireme_types::key_slot;

use crate::state::Multi;

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// Commands that may be queued: those with a log command of their own (and the hash, set
/// and list commands, which name themselves).
const QUEUEABLE: &[&str] = &[
    "get",
    "set",
    "setnx",
    "getset",
    "incr",
    "decr",
    "incrby",
    "decrby",
    "del",
    "unlink",
    "exists",
    "mget",
    "mset",
    "append",
    "setrange",
    "incrbyfloat",
    "getdel",
    "expire",
    "pexpire",
    "expireat",
    "pexpireat",
    "persist",
    "ttl",
    "pttl",
    "expiretime",
    "pexpiretime",
    "strlen",
    "getrange",
    "substr",
    "type",
    "ping",
    "unwatch",
];

/// Whether a request is one the connection runs itself while a `MULTI` is open.
pub(crate) fn runs_inside_multi(name: &str) -> bool {
    matches!(name, "exec" | "discard" | "multi" | "watch" | "quit")
}

/// `MULTI`.
pub(crate) fn multi(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    no_more(args)?;
    if ctx.client.multi.is_some() {
        return Err(CmdError::Reply("ERR MULTI calls can not be nested".into()));
    }
    ctx.client.multi = Some(Multi::default());
    Ok(Reply::ok())
}

/// `DISCARD`.
pub(crate) fn discard(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    no_more(args)?;
    if ctx.client.multi.take().is_none() {
        return Err(CmdError::Reply("ERR DISCARD without MULTI".into()));
    }
    ctx.client.watches.clear();
    Ok(Reply::ok())
}

/// `UNWATCH`.
pub(crate) fn unwatch(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    no_more(args)?;
    ctx.client.watches.clear();
    Ok(Reply::ok())
}

/// `WATCH key...`: remembers each key's `ModifyIndex` (read linearizably) for `EXEC`.
pub(crate) async fn watch(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::Reply(
            "ERR WATCH inside MULTI is not allowed".into(),
        ));
    }
    let keys = args.rest();
    if keys.is_empty() {
        return Err(args.wrong_arity().into());
    }
    if !one_slot(keys.iter()) && !ctx.shared.node.config().redis_cross_slot {
        return Err(CmdError::Reply(CROSSSLOT.into()));
    }
    let records = ctx.shared.node.get_many(&keys, ReadMode::Default).await?;
    for (key, record) in keys.into_iter().zip(records) {
        if ctx.client.watches.iter().all(|(k, _)| *k != key) {
            ctx.client
                .watches
                .push((key, record.map(|r| r.modify_index)));
        }
    }
    Ok(Reply::ok())
}

fn one_slot<'a>(mut keys: impl Iterator<Item = &'a Bytes>) -> bool {
    let Some(first) = keys.next() else {
        return true;
    };
    let slot = key_slot(first);
    keys.all(|k| key_slot(k) == slot)
}

/// Queues a request of an open `MULTI`: checked as Redis checks it before `EXEC` (a known
/// command, its arity, and here its slot), answered `QUEUED`, or refused and the
/// transaction marked to be discarded.
pub(crate) fn queue(
    multi: &mut Multi,
    request: Vec<Bytes>,
    max_queued: usize,
    cross_slot: bool,
) -> Reply {
    match check_queueable(multi, &request, max_queued, cross_slot) {
        Ok(()) => {
            multi.queued.push(request);
            Reply::simple("QUEUED")
        }
        Err(e) => {
            multi.failed = true;
            Reply::from(e)
        }
    }
}

fn check_queueable(
    multi: &mut Multi,
    request: &[Bytes],
    max_queued: usize,
    cross_slot: bool,
) -> Result<(), CmdError> {
    let mut args = Args::new(request.to_vec());
    let name = args.command_name();
    match super::server::arity_ok(request) {
        None => {
            return Err(CmdError::Reply(super::unknown_command(&mut args)));
        }
        Some(false) => return Err(args.wrong_arity().into()),
        Some(true) => {}
    }
    let collection = super::COLLECTIONS
        .iter()
        .any(|names| names.contains(&name.as_str()));
    if !QUEUEABLE.contains(&name.as_str()) && !collection {
        return Err(CmdError::Reply(format!(
            "ERR '{name}' cannot be queued in MULTI here: only commands on keys can (see docs/redis-compatibility.md)"
        )));
    }
    let bytes: usize = request.iter().map(Bytes::len).sum();
    if multi.bytes + bytes > trireme_cluster::MAX_ENTRY_BYTES {
        return Err(CmdError::Reply(format!(
            "ERR a transaction carries at most {} MiB",
            trireme_cluster::MAX_ENTRY_BYTES >> 20
        )));
    }
    if multi.queued.len() >= max_queued {
        return Err(CmdError::Reply(format!(
            "ERR a transaction holds at most {max_queued} commands ([limits] max_multi_commands)"
        )));
    }
    for key in super::server::keys_of(request) {
        let slot = key_slot(&key);
        if *multi.slot.get_or_insert(slot) != slot && !cross_slot {
            return Err(CmdError::Reply(CROSSSLOT.into()));
        }
    }
    multi.bytes += bytes;
    Ok(())
}

/// `EXEC`: runs the queued commands as one log entry, or none of them.
pub(crate) async fn exec(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    no_more(args)?;
    let Some(multi) = ctx.client.multi.take() else {
        return Err(CmdError::Reply("ERR EXEC without MULTI".into()));
    };
    let watches = std::mem::take(&mut ctx.client.watches);
    if multi.failed {
        return Err(CmdError::Reply(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    let watched_apart = match multi.slot {
        Some(slot) => watches.iter().any(|(k, _)| key_slot(k) != slot),
        None => !one_slot(watches.iter().map(|(k, _)| k)),
    };
    if watched_apart && !ctx.shared.node.config().redis_cross_slot {
        return Err(CmdError::Reply(CROSSSLOT.into()));
    }
    let limits = &ctx.shared.node.config().limits;
    let (max_value, max_read) = (limits.max_value_bytes as u64, limits.max_collection_read);
    // Each queued command becomes a log command and a way to read its result; one whose
    // arguments do not parse answers its error in its place, as Redis answers it at EXEC.
    let mut steps: Vec<Result<Step, CmdError>> = Vec::with_capacity(multi.queued.len());
    let mut commands = Vec::new();
    for request in multi.queued {
        let step = plan(&mut Args::new(request), max_value, max_read);
        if let Ok(Step {
            command: Some(command),
            ..
        }) = &step
        {
            commands.push(command.clone());
        }
        steps.push(step);
    }
    let outcome = ctx
        .shared
        .node
        .transaction(TransactionRequest {
            watches: watches
                .into_iter()
                .map(|(key, index)| (key, KeyCheck::At(index)))
                .collect(),
            commands,
        })
        .await?;
    let Ok(results) = outcome.0 else {
        return Ok(Reply::NullArray);
    };
    Ok(Reply::array(answers(steps, results)))
}

/// Each step's reply from the results of the commands, in order.
fn answers(steps: Vec<Result<Step, CmdError>>, results: Vec<CommandResult>) -> Vec<Reply> {
    let mut results = results.into_iter();
    let mut replies = Vec::with_capacity(steps.len());
    for step in steps {
        let reply = match step {
            Err(e) => Reply::from(e),
            Ok(Step {
                command: None,
                answer,
            }) => answer(CommandResult::Done).unwrap_or_else(Reply::from),
            Ok(Step { answer, .. }) => match results.next() {
                Some(result) => answer(result).unwrap_or_else(Reply::from),
                None => Reply::error("ERR the transaction answered fewer results than commands"),
            },
        };
        replies.push(reply);
    }
    replies
}

/// Runs a pipeline's consecutive `requests` on one key as one log command, in order, each
/// answered as it would be alone: one proposal instead of one commit each. `None` when one
/// of them cannot run that way (not a command `MULTI` takes, arguments that do not parse,
/// or a limit one of them passes), and they must run one by one to get their own errors.
///
/// No other client's command can fall between them, which Redis does not promise either
/// way; what this changes is that they commit together.
pub(crate) async fn run_together(
    ctx: &mut Ctx<'_>,
    requests: Vec<Vec<Bytes>>,
) -> Option<Vec<Reply>> {
    let limits = &ctx.shared.node.config().limits;
    let (max_value, max_read) = (limits.max_value_bytes as u64, limits.max_collection_read);
    let mut steps = Vec::with_capacity(requests.len());
    let mut commands = Vec::with_capacity(requests.len());
    for request in requests {
        let name = String::from_utf8_lossy(request.first()?).to_ascii_lowercase();
        let queueable = QUEUEABLE.contains(&name.as_str())
            || super::COLLECTIONS
                .iter()
                .any(|names| names.contains(&name.as_str()));
        if !queueable || super::server::arity_ok(&request) != Some(true) {
            return None;
        }
        let step = plan(&mut Args::new(request), max_value, max_read).ok()?;
        if let Some(command) = &step.command {
            // Cheap: keys and values are shared buffers.
            commands.push(command.clone());
        }
        steps.push(Ok(step));
    }
    let outcome = ctx
        .shared
        .node
        .transaction(TransactionRequest {
            watches: Vec::new(),
            commands,
        })
        .await;
    Some(match outcome {
        Ok(outcome) => match outcome.0 {
            Ok(results) => answers(steps, results),
            // Only a watched key's check undoes a transaction, and there is none.
            Err(_) => vec![Reply::error("ERR internal: an unwatched run was undone"); steps.len()],
        },
        // Refused before it was proposed (a limit, a member too long): alone, only the
        // command at fault would be.
        Err(trireme_cluster::ClusterError::Request(_)) => return None,
        // Not applied, or not known to be: the same for every command of the run.
        Err(e) => vec![Reply::from(CmdError::from(e)); steps.len()],
    })
}

/// Reads a typed outcome from one result of a transaction.
fn read<T: FromApplied>(result: CommandResult) -> Result<T, CmdError> {
    Ok(T::read(result)?)
}

type Answer = Box<dyn FnOnce(CommandResult) -> CmdResult + Send>;

/// One queued command at `EXEC`: its log command (none for `PING`), and how to turn the
/// command's result into its reply.
struct Step {
    command: Option<Command>,
    answer: Answer,
}

fn step(
    command: Command,
    answer: impl FnOnce(CommandResult) -> CmdResult + Send + 'static,
) -> Step {
    Step {
        command: Some(command),
        answer: Box::new(answer),
    }
}

fn read_keys(keys: Vec<Bytes>) -> Command {
    Command::Read { keys }
}

/// The first record of a read, whatever its type.
fn first(result: CommandResult) -> Result<Option<trireme_types::Record>, CmdError> {
    Ok(read::<Records>(result)?.0.into_iter().next().flatten())
}

/// The first record of a read, which must be a string: `WRONGTYPE` otherwise.
fn first_string(result: CommandResult) -> Result<Option<trireme_types::Record>, CmdError> {
    match first(result)? {
        Some(r) if r.kind != trireme_types::ValueKind::String => {
            Err(CmdError::Reply(super::WRONG_TYPE.into()))
        }
        found => Ok(found),
    }
}

fn edit(key: Bytes, edit: StringEdit, length: bool) -> Step {
    step(Command::Edit { key, edit }, move |r| {
        let reply = strings::edit_reply(read::<EditOutcome>(r)?)?;
        if length {
            strings::length_of(reply)
        } else {
            Ok(reply)
        }
    })
}

/// Parses one queued request into its log command and reply, as the command's own handler
/// would parse it; `max_value` and `max_read` are `[limits] max_value_bytes` and
/// `max_collection_read`.
fn plan(args: &mut Args, max_value: u64, max_read: u64) -> Result<Step, CmdError> {
    let name = args.command_name();
    Ok(match name.as_str() {
        "get" => {
            let key = args.next_bytes()?;
            no_more(args)?;
            step(read_keys(vec![key]), |r| {
                Ok(first_string(r)?.map_or(Reply::Null, |r| Reply::Bulk(r.value)))
            })
        }
        "set" => {
            let (request, return_old) = strings::parse_set(args)?;
            step(request.into_command(), move |r| {
                Ok(strings::set_reply(read::<PutOutcome>(r)?, return_old))
            })
        }
        "setnx" | "getset" => {
            let key = args.next_bytes()?;
            let value = args.next_bytes()?;
            no_more(args)?;
            let nx = name == "setnx";
            let mut request = PutRequest::new(key, value).condition(if nx {
                PutCondition::IfAbsent
            } else {
                PutCondition::IfNotCollection
            });
            if !nx {
                request = request.return_previous();
            }
            step(request.into_command(), move |r| {
                let outcome = read::<PutOutcome>(r)?;
                Ok(if nx {
                    Reply::integer(i64::from(outcome.written))
                } else {
                    strings::old_value(outcome)
                })
            })
        }
        "incr" | "decr" | "incrby" | "decrby" => {
            let (key, delta) = strings::parse_incr(args)?;
            step(Command::Incr { key, delta }, |r| {
                strings::incr_reply(read::<IncrOutcome>(r)?)
            })
        }
        "del" | "unlink" => {
            let keys = args.rest();
            step(Command::Delete { keys, cas: None }, |r| {
                Ok(Reply::integer(read::<Deleted>(r)?.0 as i64))
            })
        }
        "exists" => step(read_keys(args.rest()), |r| {
            let found = read::<Records>(r)?.0.iter().filter(|r| r.is_some()).count();
            Ok(Reply::integer(found as i64))
        }),
        "mget" => step(read_keys(args.rest()), |r| {
            Ok(Reply::array(
                read::<Records>(r)?
                    .0
                    .into_iter()
                    .map(|r| match r {
                        Some(r) if r.kind == trireme_types::ValueKind::String => {
                            Reply::Bulk(r.value)
                        }
                        _ => Reply::Null,
                    })
                    .collect(),
            ))
        }),
        "mset" => {
            let rest = args.rest();
            if !rest.len().is_multiple_of(2) {
                return Err(args.wrong_arity().into());
            }
            let pairs = rest
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            step(Command::PutMany { pairs }, |r| {
                read::<Done>(r)?;
                Ok(Reply::ok())
            })
        }
        "append" => {
            let key = args.next_bytes()?;
            let bytes = args.next_bytes()?;
            no_more(args)?;
            let append = StringEdit::Append {
                bytes,
                max_len: max_value,
            };
            edit(key, append, true)
        }
        "setrange" => {
            let key = args.next_bytes()?;
            let offset = args.next_i64()?;
            let bytes = args.next_bytes()?;
            no_more(args)?;
            let offset = u64::try_from(offset)
                .map_err(|_| CmdError::Reply("ERR offset is out of range".into()))?;
            let change = StringEdit::SetRange {
                offset,
                bytes,
                max_len: max_value,
            };
            edit(key, change, true)
        }
        "incrbyfloat" => {
            let key = args.next_bytes()?;
            let increment = args.next_bytes()?;
            no_more(args)?;
            if trireme_types::int::parse_f64(&increment).is_none() {
                return Err(strings::not_a_float());
            }
            edit(key, StringEdit::IncrByFloat(increment), false)
        }
        "getdel" => {
            let key = args.next_bytes()?;
            no_more(args)?;
            edit(key, StringEdit::GetDel, false)
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" | "persist" => {
            let (key, ttl) = if name == "persist" {
                let key = args.next_bytes()?;
                no_more(args)?;
                (key, TtlUpdate::Clear)
            } else {
                let (key, at, condition) = keys::parse_expire(args)?;
                if condition.is_some() {
                    return Err(CmdError::Reply(format!(
                        "ERR {} with NX, XX, GT or LT cannot run inside MULTI here",
                        name.to_ascii_uppercase()
                    )));
                }
                (key, TtlUpdate::At(at))
            };
            step(Command::SetTtl { key, ttl }, |r| {
                Ok(Reply::integer(i64::from(read::<TtlChanged>(r)?.0)))
            })
        }
        "ttl" | "pttl" | "expiretime" | "pexpiretime" | "strlen" | "type" => {
            let key = args.next_bytes()?;
            no_more(args)?;
            step(read_keys(vec![key]), move |r| {
                Ok(match name.as_str() {
                    "strlen" => {
                        Reply::integer(first_string(r)?.map_or(0, |r| r.value.len() as i64))
                    }
                    "type" => Reply::simple(first(r)?.map_or("none", |r| r.kind.type_name())),
                    ttl => keys::ttl_reply(ttl, first(r)?.as_ref()),
                })
            })
        }
        "getrange" | "substr" => {
            let key = args.next_bytes()?;
            let start = args.next_i64()?;
            let end = args.next_i64()?;
            no_more(args)?;
            step(read_keys(vec![key]), move |r| {
                let value = first_string(r)?.map(|r| r.value).unwrap_or_default();
                Ok(Reply::Bulk(strings::substring(&value, start, end)))
            })
        }
        // Whole reads are bounded by `[limits] max_collection_read` as they are alone (see
        // `trireme_cluster::read_limit`); those without a limit to give (a list range, a set
        // combination) are checked once answered.
        name if hashes::NAMES.contains(&name) => {
            let hashes::HashCommand { key, mut op, shape } = hashes::parse(args)?;
            let bounded = match &mut op {
                HashOp::Read(HashRead::Fields { limit, .. }) => {
                    bound_read(limit, max_read, Whole::Unlimited)
                }
                _ => false,
            };
            step(Command::Hash { key, op }, move |r| {
                let outcome = read::<HashOutcome>(r)?;
                if bounded
                    && matches!(&outcome.0, Ok(HashAnswer::Pairs(p)) if p.len() as u64 > max_read)
                {
                    return Err(too_many_to_read("hash", max_read, "HSCAN").into());
                }
                hashes::reply(shape, outcome)
            })
        }
        name if sets::NAMES.contains(&name) => {
            let sets::SetCommand { key, mut op, shape } = sets::parse(args)?;
            let combine = matches!(op, SetOp::Read(SetRead::Combine { .. }));
            let bounded = match &mut op {
                SetOp::Read(SetRead::Members { limit, .. }) => {
                    bound_read(limit, max_read, Whole::Unlimited)
                }
                _ => combine,
            };
            step(Command::SetMembers { key, op }, move |r| {
                let outcome = read::<SetOutcome>(r)?;
                if bounded
                    && matches!(&outcome.0, Ok(SetAnswer::Members(m)) if m.len() as u64 > max_read)
                {
                    return Err(if combine {
                        too_many_to_combine(max_read)
                    } else {
                        too_many_to_read("set", max_read, "SSCAN")
                    }
                    .into());
                }
                sets::reply(shape, outcome)
            })
        }
        name if lists::NAMES.contains(&name) => {
            // Inside a transaction a blocking command does not block, as in Redis.
            let lists::ListCommand { key, op, shape, .. } = lists::parse(args)?;
            let range = matches!(op, ListOp::Read(ListRead::Range { .. }));
            step(Command::List { key, op }, move |r| {
                let outcome = read::<ListOutcome>(r)?;
                if range
                    && matches!(&outcome.0, Ok(ListAnswer::Elements(e)) if e.len() as u64 > max_read)
                {
                    return Err(
                        too_many_to_read("list", max_read, "LRANGE over a shorter range").into(),
                    );
                }
                lists::reply(shape, outcome)
            })
        }
        name if sorted_sets::NAMES.contains(&name) => {
            // Inside a transaction a blocking pop does not block, as in Redis.
            let sorted_sets::SortedSetCommand {
                key, mut op, shape, ..
            } = sorted_sets::parse(args)?;
            let bounded = match &mut op {
                SortedSetOp::Read(SortedSetRead::Range { limit, .. }) => {
                    bound_read(limit, max_read, Whole::PastMax)
                }
                SortedSetOp::Read(SortedSetRead::Members { limit, .. }) => {
                    bound_read(limit, max_read, Whole::Unlimited)
                }
                _ => false,
            };
            let popped_from = key.clone();
            step(Command::SortedSet { key, op }, move |r| {
                let outcome = read::<SortedSetOutcome>(r)?;
                if bounded
                    && matches!(&outcome.0, Ok(SortedSetAnswer::Pairs(p)) if p.len() as u64 > max_read)
                {
                    return Err(too_many_to_read(
                        "sorted set",
                        max_read,
                        "ZRANGE with LIMIT, or ZSCAN",
                    )
                    .into());
                }
                sorted_sets::reply(shape, &popped_from, outcome)
            })
        }
        "ping" | "unwatch" => {
            let reply = if name == "unwatch" {
                Reply::ok()
            } else {
                match args.remaining() {
                    0 => Reply::simple("PONG"),
                    1 => Reply::Bulk(args.next_bytes()?),
                    _ => return Err(args.wrong_arity().into()),
                }
            };
            Step {
                command: None,
                answer: Box::new(move |_| Ok(reply)),
            }
        }
        _ => return Err(ArgError::Syntax.into()),
    })
}
