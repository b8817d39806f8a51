//! LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LRANGE, LINDEX, LSET, LREM, LTRIM, LINSERT,
//! LPOS, LMOVE, RPOPLPUSH, and the blocking BLPOP, BRPOP, BLMOVE, BRPOPLPUSH.
//!
//! Each element is a row named by its position in the list key's shard: pushes and pops at
//! either end touch one row. A blocking command waits on the lists' keys (woken by the apply
//! of a change, never polling) and pops through the log, so an element goes to one client.

use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use std::time::Duration;
use trireme_cluster::{End, ListAnswer, ListOp, ListOutcome, ListRead};
use trireme_types::{ErrorCode, key_slot};

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// The commands [`parse`] takes: they run alone or queued in a `MULTI` (where the blocking
/// ones do not block, as in Redis).
pub(crate) const NAMES: &[&str] = &[
    "lpush",
    "rpush",
    "lpushx",
    "rpushx",
    "lpop",
    "rpop",
    "llen",
    "lrange",
    "lindex",
    "lset",
    "lrem",
    "ltrim",
    "linsert",
    "lpos",
    "lmove",
    "rpoplpush",
    "blpop",
    "brpop",
    "blmove",
    "brpoplpush",
];

/// How a list command's answer becomes its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// An integer (`LPUSH`, `LLEN`, `LREM`, `LINSERT`).
    Count,
    /// `OK` (`LSET`, `LTRIM`).
    Ok,
    /// One element or a null (`LPOP key`, `LINDEX`, `LMOVE`).
    One,
    /// Elements, or a null array for a missing list (`LPOP key count`).
    Popped,
    /// Elements (`LRANGE`).
    Elements,
    /// The key and the element, or a null array (`BLPOP`, `BRPOP`).
    KeyAndElement,
    /// One index or a null (`LPOS` without `COUNT`).
    Position,
    /// Indexes (`LPOS ... COUNT n`).
    Positions,
}

/// A list command parsed: its key, what it does, how it answers, and for a blocking one how
/// long it may wait (`Some(None)`: without a limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListCommand {
    pub(crate) key: Bytes,
    pub(crate) op: ListOp,
    pub(crate) shape: Shape,
    pub(crate) block: Option<Option<Duration>>,
}

fn end_of(args: &mut Args) -> Result<End, CmdError> {
    match args.next_str()?.to_ascii_lowercase().as_str() {
        "left" => Ok(End::Left),
        "right" => Ok(End::Right),
        _ => Err(ArgError::Syntax.into()),
    }
}

/// A blocking command's timeout in seconds, as Redis reads it (0: wait without a limit).
/// The rest of a blocking pop of several keys (`BLPOP`, `BZPOPMIN`): the keys after `key`,
/// all in its slot (`CROSSSLOT` otherwise), and the timeout that comes last.
pub(crate) fn other_keys_and_timeout(
    args: &mut Args,
    key: &Bytes,
) -> Result<(Vec<Bytes>, Option<Duration>), CmdError> {
    let mut others = args.rest();
    let Some(last) = others.pop() else {
        return Err(args.wrong_arity().into());
    };
    let wait = timeout(&mut Args::new(vec![Bytes::from_static(b"t"), last]))?;
    if others.iter().any(|k| key_slot(k) != key_slot(key)) {
        return Err(CmdError::Reply(CROSSSLOT.into()));
    }
    Ok((others, wait))
}

fn timeout(args: &mut Args) -> Result<Option<Duration>, CmdError> {
    let text = args.next_bytes()?;
    let seconds = trireme_types::int::parse_f64(&text)
        .filter(|s| s.is_finite())
        .ok_or_else(|| CmdError::Reply("ERR timeout is not a float or out of range".into()))?;
    if seconds < 0.0 {
        return Err(CmdError::Reply("ERR timeout is negative".into()));
    }
    Ok((seconds > 0.0).then(|| Duration::from_secs_f64(seconds.min(1e9))))
}

fn positive(args: &mut Args) -> Result<u64, CmdError> {
    let n = args.next_i64()?;
    u64::try_from(n)
        .map_err(|_| CmdError::Reply("ERR value is out of range, must be positive".into()))
}

/// Parses a list command (every one but none of the connection's business), as it runs
/// alone or queued in a `MULTI` (where a blocking one does not block, as in Redis).
pub(crate) fn parse(args: &mut Args) -> Result<ListCommand, CmdError> {
    let name = args.command_name();
    let key = args.next_bytes()?;
    let mut block = None;
    let (op, shape) = match name.as_str() {
        "lpush" | "rpush" | "lpushx" | "rpushx" => {
            let elements = args.rest();
            if elements.is_empty() {
                return Err(args.wrong_arity().into());
            }
            let op = ListOp::Push {
                elements,
                end: if name.starts_with('l') {
                    End::Left
                } else {
                    End::Right
                },
                only_existing: name.ends_with('x'),
                max_len: 0,
            };
            (op, Shape::Count)
        }
        "lpop" | "rpop" => {
            let end = if name == "lpop" {
                End::Left
            } else {
                End::Right
            };
            if args.remaining() == 0 {
                (ListOp::Pop { end, count: 1 }, Shape::One)
            } else {
                let count = positive(args)?;
                no_more(args)?;
                (ListOp::Pop { end, count }, Shape::Popped)
            }
        }
        "llen" => {
            no_more(args)?;
            (ListOp::Read(ListRead::Len), Shape::Count)
        }
        "lrange" => {
            let start = args.next_i64()?;
            let stop = args.next_i64()?;
            no_more(args)?;
            (
                ListOp::Read(ListRead::Range { start, stop }),
                Shape::Elements,
            )
        }
        "lindex" => {
            let index = args.next_i64()?;
            no_more(args)?;
            (ListOp::Read(ListRead::Index(index)), Shape::One)
        }
        "lset" => {
            let index = args.next_i64()?;
            let element = args.next_bytes()?;
            no_more(args)?;
            (ListOp::Set { index, element }, Shape::Ok)
        }
        "lrem" => {
            let count = args.next_i64()?;
            let element = args.next_bytes()?;
            no_more(args)?;
            (ListOp::Remove { count, element }, Shape::Count)
        }
        "ltrim" => {
            let start = args.next_i64()?;
            let stop = args.next_i64()?;
            no_more(args)?;
            (ListOp::Trim { start, stop }, Shape::Ok)
        }
        "linsert" => {
            let before = match args.next_str()?.to_ascii_lowercase().as_str() {
                "before" => true,
                "after" => false,
                _ => return Err(ArgError::Syntax.into()),
            };
            let pivot = args.next_bytes()?;
            let element = args.next_bytes()?;
            no_more(args)?;
            let op = ListOp::Insert {
                before,
                pivot,
                element,
                max_len: 0,
            };
            (op, Shape::Count)
        }
        "lpos" => {
            let element = args.next_bytes()?;
            let (mut rank, mut count, mut max_len) = (1i64, None, 0u64);
            while args.remaining() > 0 {
                if args.next_keyword("rank") {
                    rank = args.next_i64()?;
                    if rank == 0 {
                        return Err(CmdError::Reply(
                            "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list".into(),
                        ));
                    }
                    if rank == i64::MIN {
                        return Err(CmdError::Reply("ERR value is out of range".into()));
                    }
                } else if args.next_keyword("count") {
                    let n = args.next_i64()?;
                    count = Some(
                        u64::try_from(n)
                            .map_err(|_| CmdError::Reply("ERR COUNT can't be negative".into()))?,
                    );
                } else if args.next_keyword("maxlen") {
                    let n = args.next_i64()?;
                    max_len = u64::try_from(n)
                        .map_err(|_| CmdError::Reply("ERR MAXLEN can't be negative".into()))?;
                } else {
                    return Err(ArgError::Syntax.into());
                }
            }
            let read = ListRead::Positions {
                element,
                rank,
                count: count.unwrap_or(1),
                max_len,
            };
            let shape = if count.is_some() {
                Shape::Positions
            } else {
                Shape::Position
            };
            (ListOp::Read(read), shape)
        }
        "lmove" | "rpoplpush" | "blmove" | "brpoplpush" => {
            let to = args.next_bytes()?;
            let (from, onto) = if name.ends_with("move") {
                (end_of(args)?, end_of(args)?)
            } else {
                (End::Right, End::Left)
            };
            if name.starts_with('b') {
                block = Some(timeout(args)?);
            }
            no_more(args)?;
            let op = ListOp::Move {
                to,
                from,
                onto,
                max_len: 0,
            };
            (op, Shape::One)
        }
        "blpop" | "brpop" => {
            let (rest, wait) = other_keys_and_timeout(args, &key)?;
            block = Some(wait);
            let end = if name == "blpop" {
                End::Left
            } else {
                End::Right
            };
            (ListOp::PopFirst { end, others: rest }, Shape::KeyAndElement)
        }
        _ => return Err(ArgError::Syntax.into()),
    };
    let others: Vec<&Bytes> = match &op {
        ListOp::Move { to, .. } => vec![to],
        ListOp::PopFirst { others, .. } => others.iter().collect(),
        _ => Vec::new(),
    };
    if others.iter().any(|k| key_slot(k) != key_slot(&key)) {
        return Err(CmdError::Reply(CROSSSLOT.into()));
    }
    Ok(ListCommand {
        key,
        op,
        shape,
        block,
    })
}

/// The reply to a list command of `shape` that answered `outcome`.
pub(crate) fn reply(shape: Shape, outcome: ListOutcome) -> CmdResult {
    let answer = outcome.0.map_err(|code| {
        CmdError::Reply(match code {
            ErrorCode::NotFound => "ERR no such key".into(),
            ErrorCode::InvalidArgument => "ERR index out of range".into(),
            ErrorCode::ValueTooLarge => {
                "ERR the list would pass its length limit (max_collection_members)".into()
            }
            other => format!("ERR {other}"),
        })
    })?;
    Ok(match (shape, answer) {
        (Shape::Ok, _) => Reply::ok(),
        (Shape::Count, ListAnswer::Count(n)) => Reply::integer(n as i64),
        (Shape::Count, ListAnswer::Int(n)) => Reply::integer(n),
        (Shape::One, ListAnswer::Elements(mut elements)) => {
            elements.pop().map_or(Reply::Null, Reply::Bulk)
        }
        // Nothing popped because there is no list: a null (array); `LPOP key 0` of a list
        // that exists answers an empty array.
        (Shape::One, ListAnswer::Popped(None)) => Reply::Null,
        (Shape::Popped, ListAnswer::Popped(None)) => Reply::NullArray,
        (Shape::Popped | Shape::Elements, ListAnswer::Elements(elements)) => {
            Reply::array(elements.into_iter().map(Reply::Bulk).collect())
        }
        (Shape::KeyAndElement, ListAnswer::Popped(popped)) => match popped {
            Some((key, element)) => Reply::array(vec![Reply::Bulk(key), Reply::Bulk(element)]),
            None => Reply::NullArray,
        },
        (Shape::Position, ListAnswer::Positions(positions)) => positions
            .first()
            .map_or(Reply::Null, |p| Reply::integer(*p as i64)),
        (Shape::Positions, ListAnswer::Positions(positions)) => Reply::array(
            positions
                .into_iter()
                .map(|p| Reply::integer(p as i64))
                .collect(),
        ),
        (shape, other) => Reply::error(format!(
            "ERR internal: {shape:?} cannot answer with {other:?}"
        )),
    })
}

/// Runs a list command: a read of a replica (the way this connection reads), a write
/// through the log, or a blocking one that waits for an element.
pub(crate) async fn run(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let ListCommand {
        key,
        op,
        shape,
        block,
    } = parse(args)?;
    let node = &ctx.shared.node;
    let outcome = match (op, block) {
        (ListOp::Read(read), _) => node.list_read(&key, read, ctx.client.read_mode).await?,
        (op, Some(wait)) => {
            let moves = matches!(op, ListOp::Move { .. });
            let hung_up = ctx.client.hung_up.clone();
            let outcome = node.list_command_blocking(key, op, wait, hung_up).await?;
            // A blocking move that waited out its time answers a null array, as Redis.
            if moves && matches!(&outcome.0, Ok(ListAnswer::Elements(e)) if e.is_empty()) {
                return Ok(Reply::NullArray);
            }
            outcome
        }
        (op, None) => node.list_command(key, op).await?,
    };
    reply(shape, outcome)
}

/// Whether a request is a blocking pop (the connection watches for its client hanging up
/// meanwhile).
pub(crate) fn is_blocking(request: &[Bytes]) -> bool {
    request.first().is_some_and(|name| {
        [
            &b"blpop"[..],
            b"brpop",
            b"blmove",
            b"brpoplpush",
            b"bzpopmin",
            b"bzpopmax",
        ]
        .iter()
        .any(|b| name.eq_ignore_ascii_case(b))
    })
}
