//! GET, SET, MGET, MSET, INCR, INCRBY, DECR, DECRBY.

use super::{CmdError, CmdResult, Ctx};
use crate::{ArgError, Args, Reply};
use trireme_cluster::{IncrOutcome, PutCondition, PutRequest, ReadMode, TtlUpdate};

/// Reads from RESP use the default mode: leader lease, falling back to ReadIndex.
const READ_MODE: ReadMode = ReadMode::Default;

pub(crate) async fn get(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    if args.remaining() > 0 {
        return Err(args.wrong_arity().into());
    }
    let record = ctx.shared.node.get_record(&key, READ_MODE).await?;
    Ok(record.map_or(Reply::Null, |r| Reply::Bulk(r.value)))
}

/// Milliseconds from now to an absolute expiry, for `EX`/`PX`, rejecting what Redis rejects.
fn expiry_after(amount: i64, unit_ms: i64, command: &str) -> Result<u64, CmdError> {
    let invalid = || CmdError::Reply(format!("ERR invalid expire time in '{command}' command"));
    if amount <= 0 {
        return Err(invalid());
    }
    let delta = amount.checked_mul(unit_ms).ok_or_else(invalid)?;
    (trireme_cluster::now_ms() as i64)
        .checked_add(delta)
        .map(|at| at as u64)
        .ok_or_else(invalid)
}

fn expiry_at(amount: i64, unit_ms: i64, command: &str) -> Result<u64, CmdError> {
    let invalid = || CmdError::Reply(format!("ERR invalid expire time in '{command}' command"));
    if amount <= 0 {
        return Err(invalid());
    }
    amount
        .checked_mul(unit_ms)
        .map(|at| at as u64)
        .ok_or_else(invalid)
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
pub(crate) async fn set(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let value = args.next_bytes()?;
    let mut condition = PutCondition::Always;
    let mut ttl = TtlUpdate::Clear;
    let mut ttl_given = false;
    let mut return_old = false;
    while args.remaining() > 0 {
        let option = args.next_str()?.to_ascii_uppercase();
        match option.as_str() {
            "NX" if condition == PutCondition::Always => condition = PutCondition::IfAbsent,
            "XX" if condition == PutCondition::Always => condition = PutCondition::IfPresent,
            "GET" => return_old = true,
            "KEEPTTL" if !ttl_given => {
                ttl = TtlUpdate::Keep;
                ttl_given = true;
            }
            "EX" | "PX" | "EXAT" | "PXAT" if !ttl_given => {
                if args.remaining() == 0 {
                    return Err(ArgError::Syntax.into());
                }
                let amount = args.next_i64()?;
                let at = match option.as_str() {
                    "EX" => expiry_after(amount, 1000, "set")?,
                    "PX" => expiry_after(amount, 1, "set")?,
                    "EXAT" => expiry_at(amount, 1000, "set")?,
                    _ => expiry_at(amount, 1, "set")?,
                };
                ttl = TtlUpdate::At(at);
                ttl_given = true;
            }
            _ => return Err(ArgError::Syntax.into()),
        }
    }
    let request = PutRequest::new(key, value).condition(condition).ttl(ttl);
    let outcome = ctx.shared.node.put(request).await?;
    Ok(if return_old {
        outcome
            .previous
            .map_or(Reply::Null, |r| Reply::Bulk(r.value))
    } else if outcome.written {
        Reply::ok()
    } else {
        Reply::Null
    })
}

pub(crate) async fn mget(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(args.wrong_arity().into());
    }
    let records = ctx.shared.node.get_many(&keys, READ_MODE).await?;
    Ok(Reply::array(
        records
            .into_iter()
            .map(|r| r.map_or(Reply::Null, |r| Reply::Bulk(r.value)))
            .collect(),
    ))
}

/// `MSET k v [k v ...]`: atomic per shard, not across shards.
pub(crate) async fn mset(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let rest = args.rest();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(args.wrong_arity().into());
    }
    let pairs = rest
        .chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    ctx.shared.node.put_many(pairs).await?;
    Ok(Reply::ok())
}

pub(crate) async fn incr(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let delta = match args.name() {
        "incr" => 1,
        "decr" => -1,
        "incrby" => args.next_i64()?,
        _ => args
            .next_i64()?
            .checked_neg()
            .ok_or_else(|| CmdError::Reply("ERR decrement would overflow".into()))?,
    };
    if args.remaining() > 0 {
        return Err(args.wrong_arity().into());
    }
    match ctx.shared.node.incr(key, delta).await? {
        IncrOutcome::Value(n) => Ok(Reply::integer(n)),
        IncrOutcome::NotInteger => Err(ArgError::NotInteger.into()),
        IncrOutcome::Overflow => Err(CmdError::Reply(
            "ERR increment or decrement would overflow".into(),
        )),
    }
}
