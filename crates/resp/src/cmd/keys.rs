//! DEL, EXISTS, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME,
//! PERSIST, TYPE, SCAN, KEYS, DBSIZE, FLUSHDB, FLUSHALL.

use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::{ReadMode, TtlUpdate};
use trireme_types::ShardId;

/// `DEL k [k ...]`: atomic per shard, not across shards.
pub(crate) async fn del(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(args.wrong_arity().into());
    }
    let removed = ctx.shared.node.delete_many(keys).await?;
    Ok(Reply::integer(removed as i64))
}

pub(crate) async fn exists(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(args.wrong_arity().into());
    }
    let records = ctx.shared.node.get_many(&keys, ReadMode::Default).await?;
    Ok(Reply::integer(
        records.iter().filter(|r| r.is_some()).count() as i64,
    ))
}

/// `EXPIRE key seconds` / `PEXPIRE key ms`; zero or negative deletes the key, as in Redis.
pub(crate) async fn expire(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let (key, ttl) = parse_expire(args)?;
    let changed = ctx.shared.node.set_ttl(key, ttl).await?;
    Ok(Reply::integer(i64::from(changed)))
}

/// Parses `EXPIRE` / `PEXPIRE`: the key and its new expiry.
pub(crate) fn parse_expire(args: &mut Args) -> Result<(Bytes, TtlUpdate), CmdError> {
    let key = args.next_bytes()?;
    let amount = args.next_i64()?;
    no_more(args)?;
    let unit = if args.name() == "pexpire" { 1 } else { 1000 };
    let invalid = || {
        CmdError::Reply(format!(
            "ERR invalid expire time in '{}' command",
            args.name()
        ))
    };
    let at = amount
        .checked_mul(unit)
        .and_then(|delta| (trireme_cluster::now_ms() as i64).checked_add(delta))
        .ok_or_else(invalid)?;
    Ok((key, TtlUpdate::At(at.max(0) as u64)))
}

/// `EXPIREAT key unix-seconds` / `PEXPIREAT key unix-ms`; a time in the past deletes the
/// key, as in Redis.
pub(crate) async fn expireat(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let amount = args.next_i64()?;
    no_more(args)?;
    let unit = if args.name() == "pexpireat" { 1 } else { 1000 };
    let at = amount.checked_mul(unit).ok_or_else(|| {
        CmdError::Reply(format!(
            "ERR invalid expire time in '{}' command",
            args.name()
        ))
    })?;
    let changed = ctx
        .shared
        .node
        .set_ttl(key, TtlUpdate::At(at.max(0) as u64))
        .await?;
    Ok(Reply::integer(i64::from(changed)))
}

/// `TTL`, `PTTL` (time left) and `EXPIRETIME`, `PEXPIRETIME` (the Unix time it ends): -2
/// for a missing key, -1 for a key without expiry; seconds are rounded as Redis rounds them.
pub(crate) async fn ttl(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    no_more(args)?;
    let record = ctx.shared.node.get_record(&key, ReadMode::Default).await?;
    Ok(ttl_reply(args.name(), record.as_ref()))
}

/// What `TTL`, `PTTL`, `EXPIRETIME` or `PEXPIRETIME` (`name`) answers for `record`.
pub(crate) fn ttl_reply(name: &str, record: Option<&trireme_types::Record>) -> Reply {
    let Some(record) = record else {
        return Reply::integer(-2);
    };
    let Some(at) = record.expires_at_ms else {
        return Reply::integer(-1);
    };
    let (absolute, millis) = match name {
        "pttl" => (false, true),
        "expiretime" => (true, false),
        "pexpiretime" => (true, true),
        _ => (false, false),
    };
    let ms = if absolute {
        at as i64
    } else {
        at.saturating_sub(trireme_cluster::now_ms()) as i64
    };
    Reply::integer(if millis { ms } else { (ms + 500) / 1000 })
}

pub(crate) async fn persist(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    no_more(args)?;
    let changed = ctx.shared.node.set_ttl(key, TtlUpdate::Clear).await?;
    Ok(Reply::integer(i64::from(changed)))
}

pub(crate) async fn key_type(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    no_more(args)?;
    let record = ctx.shared.node.get_record(&key, ReadMode::Default).await?;
    Ok(Reply::simple(if record.is_some() {
        "string"
    } else {
        "none"
    }))
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`. Cursors are handed out by the server and
/// remember the shard and last key; an unknown cursor starts nothing and returns `0`.
pub(crate) async fn scan(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    if args.remaining() == 0 {
        return Err(args.wrong_arity().into());
    }
    let cursor = args
        .next_u64()
        .map_err(|_| CmdError::Reply("ERR invalid cursor".into()))?;
    let mut pattern: Option<Bytes> = None;
    let mut count: usize = 10;
    let mut only_strings = true;
    while args.remaining() > 0 {
        if args.next_keyword("match") {
            pattern = Some(args.next_bytes()?);
        } else if args.next_keyword("count") {
            let n = args.next_i64()?;
            if n < 1 {
                return Err(ArgError::Syntax.into());
            }
            count = (n as usize).min(100_000);
        } else if args.next_keyword("type") {
            only_strings = args.next_str()?.eq_ignore_ascii_case("string");
        } else {
            return Err(ArgError::Syntax.into());
        }
    }
    let (shard, after) = if cursor == 0 {
        (ShardId(0), None)
    } else {
        match ctx.shared.cursor(cursor) {
            Some(position) => position,
            None => return Ok(Reply::array(vec![Reply::bulk("0"), Reply::array(vec![])])),
        }
    };
    let page = ctx
        .shared
        .node
        .scan_page(shard, after.as_deref(), count)
        .await?;
    let keys: Vec<Reply> = page
        .keys
        .into_iter()
        .filter(|k| only_strings && pattern.as_ref().is_none_or(|p| crate::glob::matches(p, k)))
        .map(Reply::Bulk)
        .collect();
    let next = page
        .next
        .map_or(0, |position| ctx.shared.save_cursor(position));
    Ok(Reply::array(vec![
        Reply::bulk(next.to_string()),
        Reply::array(keys),
    ]))
}

pub(crate) async fn dbsize(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    no_more(args)?;
    Ok(Reply::integer(ctx.shared.node.key_count().await? as i64))
}

/// `KEYS pattern`: every matching key, walking every shard (O(keys), as in Redis).
pub(crate) async fn keys(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let pattern = args.next_bytes()?;
    no_more(args)?;
    let mut found = Vec::new();
    let mut position: Option<(ShardId, Option<Bytes>)> = Some((ShardId(0), None));
    while let Some((shard, after)) = position {
        let page = ctx
            .shared
            .node
            .scan_page(shard, after.as_deref(), 10_000)
            .await?;
        found.extend(
            page.keys
                .into_iter()
                .filter(|k| crate::glob::matches(&pattern, k))
                .map(Reply::Bulk),
        );
        position = page.next;
    }
    Ok(Reply::array(found))
}

/// `FLUSHDB` / `FLUSHALL [ASYNC|SYNC]`: deletes every key (one database, so both are the
/// same); atomic per shard, not across shards.
pub(crate) async fn flush(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    if args.remaining() > 0 && !(args.next_keyword("async") || args.next_keyword("sync")) {
        return Err(ArgError::Syntax.into());
    }
    no_more(args)?;
    ctx.shared.node.delete_prefix(b"").await?;
    Ok(Reply::ok())
}
