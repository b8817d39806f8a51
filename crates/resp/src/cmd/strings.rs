//! GET, SET, MGET, MSET, INCR, INCRBY, DECR, DECRBY, SETNX, SETEX, PSETEX, GETSET, GETDEL,
//! GETEX, APPEND, STRLEN, GETRANGE, SUBSTR, SETRANGE, INCRBYFLOAT.

use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::{
    EditOutcome, IncrOutcome, PutCondition, PutOutcome, PutRequest, StringEdit, TtlUpdate,
};

pub(crate) async fn get(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    if args.remaining() > 0 {
        return Err(args.wrong_arity().into());
    }
    let record = ctx.record(&key).await?;
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
    let (request, return_old) = parse_set(args)?;
    let outcome = ctx.shared.node.put(request).await?;
    Ok(set_reply(outcome, return_old))
}

/// `SET`'s reply: the old value with `GET`, else `OK`, or a null when `NX`/`XX` refused.
pub(crate) fn set_reply(outcome: PutOutcome, return_old: bool) -> Reply {
    if return_old {
        old_value(outcome)
    } else if outcome.written {
        Reply::ok()
    } else {
        Reply::Null
    }
}

/// The value a write replaced, for `SET ... GET` and `GETSET`: a key of another type answers
/// `WRONGTYPE` (their conditions kept it from being replaced).
pub(crate) fn old_value(outcome: PutOutcome) -> Reply {
    match outcome.previous {
        Some(r) if r.kind != trireme_types::ValueKind::String => Reply::error(super::WRONG_TYPE),
        Some(r) => Reply::Bulk(r.value),
        None => Reply::Null,
    }
}

/// Parses `SET`'s arguments: the write, and whether the old value is wanted (`GET`).
pub(crate) fn parse_set(args: &mut Args) -> Result<(PutRequest, bool), CmdError> {
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
    if return_old {
        // The old value is read first, so a key of another type is refused, not replaced.
        condition = match condition {
            PutCondition::Always => PutCondition::IfNotCollection,
            PutCondition::IfPresent => PutCondition::IfPresentString,
            other => other,
        };
    }
    let mut request = PutRequest::new(key, value).condition(condition).ttl(ttl);
    if return_old {
        request = request.return_previous();
    }
    Ok((request, return_old))
}

pub(crate) async fn mget(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(args.wrong_arity().into());
    }
    let records = ctx
        .shared
        .node
        .get_many(&keys, ctx.client.read_mode)
        .await?;
    Ok(Reply::array(
        records
            .into_iter()
            // A key of another type reads as missing, as in Redis.
            .map(|r| match r {
                Some(r) if r.kind == trireme_types::ValueKind::String => Reply::Bulk(r.value),
                _ => Reply::Null,
            })
            .collect(),
    ))
}

/// `MSET k v [k v ...]`: atomic per shard, or across shards with `[redis]
/// cross_slot_transactions`.
pub(crate) async fn mset(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let rest = args.rest();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(args.wrong_arity().into());
    }
    let pairs = rest
        .chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    let node = &ctx.shared.node;
    if node.config().redis_cross_slot {
        // One transaction, across shards if it must be.
        let commands = vec![trireme_cluster::Command::PutMany { pairs }];
        node.transaction(trireme_cluster::TransactionRequest {
            watches: Vec::new(),
            commands,
        })
        .await?;
    } else {
        node.put_many(pairs).await?;
    }
    Ok(Reply::ok())
}

pub(crate) async fn incr(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let (key, delta) = parse_incr(args)?;
    incr_reply(ctx.shared.node.incr(key, delta).await?)
}

/// Parses `INCR`, `DECR`, `INCRBY`, `DECRBY`: the key and what to add.
pub(crate) fn parse_incr(args: &mut Args) -> Result<(Bytes, i64), CmdError> {
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
    Ok((key, delta))
}

pub(crate) fn incr_reply(outcome: IncrOutcome) -> CmdResult {
    match outcome {
        IncrOutcome::Value(n) => Ok(Reply::integer(n)),
        IncrOutcome::NotInteger => Err(ArgError::NotInteger.into()),
        IncrOutcome::Overflow => Err(CmdError::Reply(
            "ERR increment or decrement would overflow".into(),
        )),
    }
}

/// `SETNX key value`: 1 if the key was set, 0 if it existed.
pub(crate) async fn setnx(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let value = args.next_bytes()?;
    no_more(args)?;
    let request = PutRequest::new(key, value).condition(PutCondition::IfAbsent);
    let outcome = ctx.shared.node.put(request).await?;
    Ok(Reply::integer(i64::from(outcome.written)))
}

/// `SETEX key seconds value` / `PSETEX key ms value`.
pub(crate) async fn setex(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let amount = args.next_i64()?;
    let value = args.next_bytes()?;
    no_more(args)?;
    let unit = if args.name() == "psetex" { 1 } else { 1000 };
    let at = expiry_after(amount, unit, args.name())?;
    let request = PutRequest::new(key, value).ttl(TtlUpdate::At(at));
    ctx.shared.node.put(request).await?;
    Ok(Reply::ok())
}

/// `GETSET key value`: sets the value (clearing any expiry) and answers the old one.
pub(crate) async fn getset(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let value = args.next_bytes()?;
    no_more(args)?;
    let request = PutRequest::new(key, value)
        .condition(PutCondition::IfNotCollection)
        .return_previous();
    let outcome = ctx.shared.node.put(request).await?;
    Ok(old_value(outcome))
}

/// `GETDEL key`.
pub(crate) async fn getdel(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    no_more(args)?;
    edited(ctx, key, StringEdit::GetDel).await
}

/// `GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]`; without an option, a `GET`.
pub(crate) async fn getex(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let (key, ttl) = parse_getex(args)?;
    match ttl {
        Some(ttl) => edited(ctx, key, StringEdit::GetEx(ttl)).await,
        None => {
            let record = ctx.record(&key).await?;
            Ok(record.map_or(Reply::Null, |r| Reply::Bulk(r.value)))
        }
    }
}

/// Parses `GETEX`'s arguments: the key, and the expiry change if an option asks for one.
pub(crate) fn parse_getex(args: &mut Args) -> Result<(Bytes, Option<TtlUpdate>), CmdError> {
    let key = args.next_bytes()?;
    let mut ttl = None;
    while args.remaining() > 0 {
        let option = args.next_str()?.to_ascii_uppercase();
        if ttl.is_some() {
            return Err(ArgError::Syntax.into());
        }
        ttl = Some(match option.as_str() {
            "PERSIST" => TtlUpdate::Clear,
            "EX" | "PX" | "EXAT" | "PXAT" => {
                if args.remaining() == 0 {
                    return Err(ArgError::Syntax.into());
                }
                let amount = args.next_i64()?;
                TtlUpdate::At(match option.as_str() {
                    "EX" => expiry_after(amount, 1000, "getex")?,
                    "PX" => expiry_after(amount, 1, "getex")?,
                    "EXAT" => expiry_at(amount, 1000, "getex")?,
                    _ => expiry_at(amount, 1, "getex")?,
                })
            }
            _ => return Err(ArgError::Syntax.into()),
        });
    }
    Ok((key, ttl))
}

/// `APPEND key value`: the length after appending.
pub(crate) async fn append(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let bytes = args.next_bytes()?;
    no_more(args)?;
    let edit = StringEdit::Append { bytes, max_len: 0 };
    length_of(edited(ctx, key, edit).await?)
}

/// `SETRANGE key offset value`: the length after writing.
pub(crate) async fn setrange(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let offset = args.next_i64()?;
    let bytes = args.next_bytes()?;
    no_more(args)?;
    let offset =
        u64::try_from(offset).map_err(|_| CmdError::Reply("ERR offset is out of range".into()))?;
    let edit = StringEdit::SetRange {
        offset,
        bytes,
        max_len: 0,
    };
    length_of(edited(ctx, key, edit).await?)
}

/// `INCRBYFLOAT key increment`: the new value, as stored.
pub(crate) async fn incrbyfloat(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let increment = args.next_bytes()?;
    no_more(args)?;
    if trireme_types::int::parse_f64(&increment).is_none() {
        return Err(not_a_float());
    }
    edited(ctx, key, StringEdit::IncrByFloat(increment)).await
}

/// `STRLEN key`: 0 for a missing key.
pub(crate) async fn strlen(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    no_more(args)?;
    let record = ctx.record(&key).await?;
    Ok(Reply::integer(record.map_or(0, |r| r.value.len() as i64)))
}

/// `GETRANGE key start end` (and its old name `SUBSTR`): inclusive, negative offsets count
/// from the end; a missing key is an empty string.
pub(crate) async fn getrange(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let start = args.next_i64()?;
    let end = args.next_i64()?;
    no_more(args)?;
    let record = ctx.record(&key).await?;
    let value = record.map(|r| r.value).unwrap_or_default();
    Ok(Reply::Bulk(substring(&value, start, end)))
}

/// Redis's `GETRANGE` arithmetic.
pub(crate) fn substring(value: &Bytes, start: i64, end: i64) -> Bytes {
    let len = value.len() as i64;
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return Bytes::new();
    }
    let from_end = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    if start > end {
        return Bytes::new();
    }
    value.slice(start as usize..=end as usize)
}

async fn edited(ctx: &mut Ctx<'_>, key: Bytes, edit: StringEdit) -> CmdResult {
    edit_reply(ctx.shared.node.edit(key, edit).await?)
}

/// An edit's reply: the value (`GETDEL`, `INCRBYFLOAT`, ...), or Redis's error.
pub(crate) fn edit_reply(outcome: EditOutcome) -> CmdResult {
    match outcome {
        EditOutcome::Value(value) => Ok(value.map_or(Reply::Null, Reply::Bulk)),
        EditOutcome::NotFloat => Err(not_a_float()),
        EditOutcome::NotFinite => Err(CmdError::Reply(
            "ERR increment would produce NaN or Infinity".into(),
        )),
        EditOutcome::TooLong => Err(CmdError::Reply(
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)".into(),
        )),
    }
}

/// The length of the value in an edit's reply (`APPEND`, `SETRANGE`).
pub(crate) fn length_of(reply: Reply) -> CmdResult {
    Ok(Reply::integer(match reply {
        Reply::Bulk(value) => value.len() as i64,
        _ => 0,
    }))
}

pub(crate) fn not_a_float() -> CmdError {
    CmdError::Reply("ERR value is not a valid float".into())
}

#[cfg(test)]
mod tests {
    use super::{parse_getex, parse_set, substring};
    use crate::Args;
    use bytes::Bytes;
    use trireme_cluster::{PutCondition, TtlUpdate};

    fn args(words: &[&str]) -> Args {
        Args::from_words(words)
    }

    fn error(result: Result<impl std::fmt::Debug, super::CmdError>) -> String {
        match crate::Reply::from(result.expect_err("refused")) {
            crate::Reply::Error(text) => text,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn set_options_parse_as_redis_takes_them() {
        let (request, old) = parse_set(&mut args(&["set", "k", "v"])).unwrap();
        assert_eq!(
            (request.condition, request.ttl, old),
            (PutCondition::Always, TtlUpdate::Clear, false)
        );
        let (request, old) =
            parse_set(&mut args(&["set", "k", "v", "xx", "keepttl", "GET"])).unwrap();
        // GET reads the old value first: a key of another type is refused, not replaced.
        assert_eq!(
            (request.condition, request.ttl, old),
            (PutCondition::IfPresentString, TtlUpdate::Keep, true)
        );
        let (request, _) = parse_set(&mut args(&["set", "k", "v", "NX", "PXAT", "5000"])).unwrap();
        assert_eq!(
            (request.condition, request.ttl),
            (PutCondition::IfAbsent, TtlUpdate::At(5000))
        );
        let (request, _) = parse_set(&mut args(&["set", "k", "v", "get"])).unwrap();
        assert_eq!(request.condition, PutCondition::IfNotCollection);
        let refused = |words: &[&str]| error(parse_set(&mut args(words)));
        assert_eq!(refused(&["set", "k", "v", "nx", "xx"]), "ERR syntax error");
        assert_eq!(
            refused(&["set", "k", "v", "ex", "1", "px", "1"]),
            "ERR syntax error"
        );
        assert_eq!(refused(&["set", "k", "v", "ex"]), "ERR syntax error");
        assert_eq!(
            refused(&["set", "k", "v", "ex", "0"]),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(
            refused(&["set", "k", "v", "ex", "ten"]),
            "ERR value is not an integer or out of range"
        );
    }

    #[test]
    fn getex_takes_one_expiry_option() {
        let (key, ttl) = parse_getex(&mut args(&["getex", "k"])).unwrap();
        assert_eq!((key, ttl), (Bytes::from_static(b"k"), None));
        let (_, ttl) = parse_getex(&mut args(&["getex", "k", "persist"])).unwrap();
        assert_eq!(ttl, Some(TtlUpdate::Clear));
        let (_, ttl) = parse_getex(&mut args(&["getex", "k", "EXAT", "7"])).unwrap();
        assert_eq!(ttl, Some(TtlUpdate::At(7000)));
        let refused = |words: &[&str]| error(parse_getex(&mut args(words)));
        assert_eq!(
            refused(&["getex", "k", "persist", "ex", "1"]),
            "ERR syntax error"
        );
        assert_eq!(refused(&["getex", "k", "forever"]), "ERR syntax error");
    }

    #[test]
    fn getrange_counts_like_redis() {
        let v = Bytes::from_static(b"This is a string");
        let cut = |s, e| String::from_utf8(substring(&v, s, e).to_vec()).unwrap_or_default();
        assert_eq!(cut(0, 3), "This");
        assert_eq!(cut(-3, -1), "ing");
        assert_eq!(cut(0, -1), "This is a string");
        assert_eq!(cut(10, 100), "string");
        assert_eq!(cut(-1, -3), "");
        assert_eq!(cut(5, 2), "");
        assert_eq!(cut(-100, 2), "Thi");
        assert_eq!(substring(&Bytes::new(), 0, -1), Bytes::new());
    }
}
