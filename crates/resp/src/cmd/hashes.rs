//! HSET, HMSET, HSETNX, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN, HKEYS, HVALS, HINCRBY,
//! HINCRBYFLOAT, HSTRLEN, HSCAN, HRANDFIELD.
//!
//! Each field is a row of its own in the hash key's shard: a write changes only the fields
//! it names, and reads of a field or the count are point lookups.

use super::members::{ScanPage, draw, draw_one, random_count};
use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::{HashAnswer, HashOp, HashOutcome, HashRead};
use trireme_types::ErrorCode;

/// The Redis error for a hash command that changed nothing, in Redis's words.
fn refused(code: ErrorCode, float: bool) -> CmdError {
    CmdError::Reply(match code {
        ErrorCode::NotInteger => "ERR hash value is not an integer".into(),
        ErrorCode::InvalidArgument if float => "ERR hash value is not a float".into(),
        ErrorCode::Overflow if float => "ERR increment would produce NaN or Infinity".into(),
        ErrorCode::Overflow => "ERR increment or decrement would overflow".into(),
        ErrorCode::ValueTooLarge => {
            "ERR the hash would pass its field limit (max_collection_members)".into()
        }
        other => format!("ERR {other}"),
    })
}

/// The answer of a hash command, or its refusal.
fn answer(outcome: HashOutcome, float: bool) -> Result<HashAnswer, CmdError> {
    outcome.0.map_err(|code| refused(code, float))
}

/// The commands [`parse`] takes: they run alone or queued in a `MULTI`.
pub(crate) const NAMES: &[&str] = &[
    "hset",
    "hmset",
    "hsetnx",
    "hget",
    "hmget",
    "hexists",
    "hstrlen",
    "hlen",
    "hgetall",
    "hkeys",
    "hvals",
    "hdel",
    "hincrby",
    "hincrbyfloat",
];

/// How a hash command's answer becomes its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// An integer count (`HSET`, `HSETNX`, `HDEL`, `HLEN`).
    Count,
    /// `OK` (`HMSET`).
    Ok,
    /// One value or a null (`HGET`).
    Value,
    /// Values or nulls (`HMGET`).
    Values,
    /// 1 or 0 (`HEXISTS`).
    Exists,
    /// The value's length (`HSTRLEN`).
    StrLen,
    /// The new integer (`HINCRBY`).
    Int,
    /// The new decimal (`HINCRBYFLOAT`).
    Float,
    /// Fields and values (`HGETALL`): a map in RESP3.
    Map,
    /// Fields (`HKEYS`).
    Keys,
    /// Values (`HVALS`).
    Vals,
}

/// A hash command parsed: its key, what it does, and how it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HashCommand {
    pub(crate) key: Bytes,
    pub(crate) op: HashOp,
    pub(crate) shape: Shape,
}

/// Parses a hash command that reads or writes fields it names (all but `HSCAN` and
/// `HRANDFIELD`), as it runs alone or queued in a `MULTI`.
pub(crate) fn parse(args: &mut Args) -> Result<HashCommand, CmdError> {
    let name = args.command_name();
    let key = args.next_bytes()?;
    let (op, shape) = match name.as_str() {
        "hset" | "hmset" => {
            let pairs = field_values(args)?;
            let op = HashOp::Set {
                pairs,
                only_new: false,
                max_fields: 0,
            };
            (
                op,
                if name == "hmset" {
                    Shape::Ok
                } else {
                    Shape::Count
                },
            )
        }
        "hsetnx" => {
            let field = args.next_bytes()?;
            let value = args.next_bytes()?;
            no_more(args)?;
            let op = HashOp::Set {
                pairs: vec![(field, value)],
                only_new: true,
                max_fields: 0,
            };
            (op, Shape::Count)
        }
        "hget" | "hexists" | "hstrlen" => {
            let field = args.next_bytes()?;
            no_more(args)?;
            let read = HashRead::Get {
                fields: vec![field],
            };
            let shape = match name.as_str() {
                "hget" => Shape::Value,
                "hexists" => Shape::Exists,
                _ => Shape::StrLen,
            };
            (HashOp::Read(read), shape)
        }
        "hmget" | "hdel" => {
            let fields = args.rest();
            if fields.is_empty() {
                return Err(args.wrong_arity().into());
            }
            if name == "hdel" {
                (HashOp::Delete { fields }, Shape::Count)
            } else {
                (HashOp::Read(HashRead::Get { fields }), Shape::Values)
            }
        }
        "hlen" => {
            no_more(args)?;
            (HashOp::Read(HashRead::Len), Shape::Count)
        }
        "hgetall" | "hkeys" | "hvals" => {
            no_more(args)?;
            let read = HashRead::Fields {
                after: None,
                limit: u64::MAX,
            };
            let shape = match name.as_str() {
                "hkeys" => Shape::Keys,
                "hvals" => Shape::Vals,
                _ => Shape::Map,
            };
            (HashOp::Read(read), shape)
        }
        "hincrby" => {
            let field = args.next_bytes()?;
            let delta = args.next_i64()?;
            no_more(args)?;
            let op = HashOp::IncrBy {
                field,
                delta,
                max_fields: 0,
            };
            (op, Shape::Int)
        }
        "hincrbyfloat" => {
            let field = args.next_bytes()?;
            let increment = args.next_bytes()?;
            no_more(args)?;
            match trireme_types::int::parse_f64(&increment) {
                None => return Err(CmdError::Reply("ERR value is not a valid float".into())),
                Some(n) if !n.is_finite() => {
                    return Err(CmdError::Reply("ERR value is NaN or Infinity".into()));
                }
                Some(_) => {}
            }
            let op = HashOp::IncrByFloat {
                field,
                increment,
                max_fields: 0,
            };
            (op, Shape::Float)
        }
        _ => return Err(ArgError::Syntax.into()),
    };
    Ok(HashCommand { key, op, shape })
}

/// The reply to a hash command of `shape` that answered `outcome`.
pub(crate) fn reply(shape: Shape, outcome: HashOutcome) -> CmdResult {
    let answer = answer(outcome, shape == Shape::Float)?;
    Ok(match (shape, answer) {
        (Shape::Ok, _) => Reply::ok(),
        (Shape::Count, HashAnswer::Count(n)) => Reply::integer(n as i64),
        (Shape::Int, HashAnswer::Int(n)) => Reply::integer(n),
        (Shape::Float, HashAnswer::Float(printed)) => Reply::Bulk(printed),
        (Shape::Value, HashAnswer::Values(mut values)) => {
            values.pop().flatten().map_or(Reply::Null, Reply::Bulk)
        }
        (Shape::Exists, HashAnswer::Values(values)) => {
            Reply::integer(i64::from(values.first().is_some_and(Option::is_some)))
        }
        (Shape::StrLen, HashAnswer::Values(values)) => Reply::integer(
            values
                .first()
                .and_then(Option::as_ref)
                .map_or(0, |v| v.len() as i64),
        ),
        (Shape::Values, HashAnswer::Values(values)) => Reply::array(
            values
                .into_iter()
                .map(|v| v.map_or(Reply::Null, Reply::Bulk))
                .collect(),
        ),
        (Shape::Keys, HashAnswer::Pairs(pairs)) => {
            Reply::array(pairs.into_iter().map(|(f, _)| Reply::Bulk(f)).collect())
        }
        (Shape::Vals, HashAnswer::Pairs(pairs)) => {
            Reply::array(pairs.into_iter().map(|(_, v)| Reply::Bulk(v)).collect())
        }
        (Shape::Map, HashAnswer::Pairs(pairs)) => Reply::Map(
            pairs
                .into_iter()
                .map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v)))
                .collect(),
        ),
        (shape, other) => Reply::error(format!(
            "ERR internal: {shape:?} cannot answer with {other:?}"
        )),
    })
}

/// Runs a hash command parsed by [`parse`]: a read of a replica (the way this connection
/// reads), or a write through the log.
pub(crate) async fn run(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let HashCommand { key, op, shape } = parse(args)?;
    let outcome = match op {
        HashOp::Read(read) => {
            ctx.shared
                .node
                .hash_read(&key, read, ctx.client.read_mode)
                .await?
        }
        op => ctx.shared.node.hash(key, op).await?,
    };
    reply(shape, outcome)
}

async fn read(ctx: &mut Ctx<'_>, key: &[u8], read: HashRead) -> Result<HashAnswer, CmdError> {
    let outcome = ctx
        .shared
        .node
        .hash_read(key, read, ctx.client.read_mode)
        .await?;
    answer(outcome, false)
}

fn pairs(answer: HashAnswer) -> Vec<(Bytes, Bytes)> {
    match answer {
        HashAnswer::Pairs(pairs) => pairs,
        _ => Vec::new(),
    }
}

/// Field-value pairs after the key, at least one.
fn field_values(args: &mut Args) -> Result<Vec<(Bytes, Bytes)>, CmdError> {
    let rest = args.rest();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(args.wrong_arity().into());
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    let mut items = rest.into_iter();
    while let (Some(field), Some(value)) = (items.next(), items.next()) {
        pairs.push((field, value));
    }
    Ok(pairs)
}

/// Every field and value of the hash at `key`, in field order.
async fn all_fields(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Bytes, Bytes)>, CmdError> {
    let read_all = HashRead::Fields {
        after: None,
        limit: u64::MAX,
    };
    Ok(pairs(read(ctx, key, read_all).await?))
}

/// `HSCAN key cursor [MATCH pattern] [COUNT n] [NOVALUES]`: pages of `COUNT` fields in field
/// order.
pub(crate) async fn hscan(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let Some(scan) = ScanPage::parse(ctx, args, true)? else {
        return Ok(ScanPage::over());
    };
    let fields = HashRead::Fields {
        after: scan.after.clone(),
        limit: scan.count,
    };
    let page = pairs(read(ctx, &key, fields).await?);
    let (read, last) = (page.len(), page.last().map(|(f, _)| f.clone()));
    let mut items = Vec::with_capacity(page.len() * 2);
    for (field, value) in page.into_iter().filter(|(f, _)| scan.keeps(f)) {
        items.push(Reply::Bulk(field));
        if scan.with_values {
            items.push(Reply::Bulk(value));
        }
    }
    Ok(scan.reply(ctx, read, last, items))
}

/// `HRANDFIELD key [count [WITHVALUES]]`: one random field (a null for a missing key); with
/// a positive count that many distinct fields at most, with a negative one exactly that
/// many, repeats allowed. Reads the whole hash.
pub(crate) async fn hrandfield(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let wanted = random_count(args)?;
    let with_values = wanted.is_some() && args.next_keyword("withvalues");
    if args.remaining() > 0 {
        return Err(ArgError::Syntax.into());
    }
    let fields = all_fields(ctx, &key).await?;
    let Some(wanted) = wanted else {
        return Ok(draw_one(&fields).map_or(Reply::Null, |(field, _)| Reply::Bulk(field)));
    };
    let cap = ctx.shared.node.config().limits.max_collection_members;
    let resp3 = ctx.client.protocol == crate::Protocol::Resp3;
    let mut items = Vec::new();
    for (field, value) in draw(&fields, wanted, cap) {
        match (with_values, resp3) {
            (true, true) => items.push(Reply::array(vec![Reply::Bulk(field), Reply::Bulk(value)])),
            (true, false) => {
                items.push(Reply::Bulk(field));
                items.push(Reply::Bulk(value));
            }
            (false, _) => items.push(Reply::Bulk(field)),
        }
    }
    Ok(Reply::array(items))
}
