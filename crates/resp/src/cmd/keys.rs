//! DEL, EXISTS, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME,
//! PERSIST, TYPE, SCAN, KEYS, DBSIZE, FLUSHDB, FLUSHALL.

use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::TtlUpdate;
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
    let records = ctx
        .shared
        .node
        .get_many(&keys, ctx.client.read_mode)
        .await?;
    Ok(Reply::integer(
        records.iter().filter(|r| r.is_some()).count() as i64,
    ))
}

/// `EXPIRE key seconds`, `PEXPIRE key ms`, `EXPIREAT key unix-s`, `PEXPIREAT key unix-ms`,
/// each with Redis 7's `NX`, `XX`, `GT`, `LT`. A time now or in the past deletes the key, as
/// in Redis.
pub(crate) async fn expire(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let (key, at, condition) = parse_expire(args)?;
    if let Some(condition) = condition {
        return super::optimistic::expire_if(ctx, key, at, condition).await;
    }
    let changed = ctx.shared.node.set_ttl(key, TtlUpdate::At(at)).await?;
    Ok(Reply::integer(i64::from(changed)))
}

/// Parses `EXPIRE` and its relatives: the key, the Unix millisecond it expires at, and the
/// condition, if any.
pub(crate) fn parse_expire(
    args: &mut Args,
) -> Result<(Bytes, u64, Option<super::optimistic::ExpireIf>), CmdError> {
    let key = args.next_bytes()?;
    let amount = args.next_i64()?;
    let condition = super::optimistic::ExpireIf::parse(args)?;
    let (unit, relative) = match args.name() {
        "pexpire" => (1, true),
        "expireat" => (1000, false),
        "pexpireat" => (1, false),
        _ => (1000, true),
    };
    let base = if relative {
        trireme_cluster::now_ms() as i64
    } else {
        0
    };
    let at = amount
        .checked_mul(unit)
        .and_then(|ms| base.checked_add(ms))
        .ok_or_else(|| {
            CmdError::Reply(format!(
                "ERR invalid expire time in '{}' command",
                args.name()
            ))
        })?;
    Ok((key, at.max(0) as u64, condition))
}

/// `TTL`, `PTTL` (time left) and `EXPIRETIME`, `PEXPIRETIME` (the Unix time it ends): -2
/// for a missing key, -1 for a key without expiry; seconds are rounded as Redis rounds them.
pub(crate) async fn ttl(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    no_more(args)?;
    let record = ctx.any_record(&key).await?;
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
    let record = ctx.any_record(&key).await?;
    Ok(Reply::simple(record.map_or("none", |r| r.kind.type_name())))
}

/// `SCAN`'s arguments, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanRequest {
    /// 0 to start, else a cursor the node handed out.
    pub(crate) cursor: u64,
    /// `MATCH`: keep the keys this glob matches.
    pub(crate) pattern: Option<Bytes>,
    /// `COUNT`: keys to read for this page (at most 100,000).
    pub(crate) count: usize,
    /// `TYPE`: keep the keys of this type (`string`, `hash`, ...).
    pub(crate) only_type: Option<String>,
}

impl ScanRequest {
    /// Parses `cursor [MATCH pattern] [COUNT n] [TYPE t]`.
    pub(crate) fn parse(args: &mut Args) -> Result<ScanRequest, CmdError> {
        if args.remaining() == 0 {
            return Err(args.wrong_arity().into());
        }
        let cursor = args
            .next_u64()
            .map_err(|_| CmdError::Reply("ERR invalid cursor".into()))?;
        let mut scan = ScanRequest {
            cursor,
            pattern: None,
            count: 10,
            only_type: None,
        };
        while args.remaining() > 0 {
            if args.next_keyword("match") {
                scan.pattern = Some(args.next_bytes()?);
            } else if args.next_keyword("count") {
                let n = args.next_i64()?;
                if n < 1 {
                    return Err(ArgError::Syntax.into());
                }
                scan.count = (n as usize).min(100_000);
            } else if args.next_keyword("type") {
                scan.only_type = Some(args.next_str()?.to_ascii_lowercase());
            } else {
                return Err(ArgError::Syntax.into());
            }
        }
        Ok(scan)
    }
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`. Cursors are handed out by the server and
/// remember the shard and last key; an unknown cursor starts nothing and returns `0`.
pub(crate) async fn scan(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let ScanRequest {
        cursor,
        pattern,
        count,
        only_type,
    } = ScanRequest::parse(args)?;
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
        .zip(page.kinds)
        .filter(|(k, kind)| {
            only_type.as_deref().is_none_or(|t| t == kind.type_name())
                && pattern.as_ref().is_none_or(|p| crate::glob::matches(p, k))
        })
        .map(|(k, _)| Reply::Bulk(k))
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

/// `RANDOMKEY`: a key from a random shard, the first after a random point of its keys;
/// a null when there are no keys.
pub(crate) async fn randomkey(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    no_more(args)?;
    let shards: Vec<ShardId> = ctx.shared.node.shard_map().shards().collect();
    if shards.is_empty() {
        return Ok(Reply::Null);
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let first = (seed % shards.len() as u64) as usize;
    let point = Bytes::from(seed.rotate_left(17).to_be_bytes().to_vec());
    for i in 0..shards.len() {
        let shard = shards[(first + i) % shards.len()];
        for after in [Some(&point[..]), None] {
            let page = ctx.shared.node.scan_page(shard, after, 1).await?;
            if let Some(key) = page.keys.into_iter().next() {
                return Ok(Reply::Bulk(key));
            }
        }
    }
    Ok(Reply::Null)
}

/// `OBJECT ENCODING key` (the encoding Redis would give the string: `int`, `embstr` or
/// `raw`), `OBJECT HELP`.
pub(crate) async fn object(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let sub = args.next_str()?;
    match sub.to_ascii_lowercase().as_str() {
        "encoding" => {
            let key = args.next_bytes()?;
            no_more(args)?;
            let record = ctx.any_record(&key).await?;
            Ok(record.map_or(Reply::Null, |r| Reply::bulk(encoding(&r))))
        }
        "help" => Ok(Reply::array(vec![Reply::simple(
            "OBJECT ENCODING <key>: the encoding Redis would use for the string at <key>.",
        )])),
        _ => Err(CmdError::Reply(format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            sub.chars().take(64).collect::<String>()
        ))),
    }
}

/// How Redis would encode the value: a string by [`string_encoding`], a hash of up to 128
/// fields as a `listpack` (Redis also looks at the values' lengths), a larger one and a set
/// as a `hashtable`.
fn encoding(record: &trireme_types::Record) -> &'static str {
    match record.kind {
        trireme_types::ValueKind::String => string_encoding(&record.value),
        trireme_types::ValueKind::Hash => {
            if trireme_types::collection::decode_count(&record.value) <= 128 {
                "listpack"
            } else {
                "hashtable"
            }
        }
        // Redis keeps a set of integers as an `intset`; whether every member is one is not
        // known from the key's row, so a set is a `hashtable` here.
        trireme_types::ValueKind::Set => "hashtable",
        // A short sorted set is a `listpack`, a long one a `skiplist`.
        trireme_types::ValueKind::SortedSet => {
            if trireme_types::collection::decode_count(&record.value) <= 128 {
                "listpack"
            } else {
                "skiplist"
            }
        }
        // Redis 7.2 keeps a short list as a `listpack`, a long one as a `quicklist`.
        trireme_types::ValueKind::List => {
            if trireme_types::collection::decode_count(&record.value) <= 128 {
                "listpack"
            } else {
                "quicklist"
            }
        }
    }
}

/// How Redis encodes a string value: small integers as `int`, up to 44 bytes `embstr`.
fn string_encoding(value: &[u8]) -> &'static str {
    if value.len() <= 20 && trireme_types::int::parse_i64(value).is_some() {
        "int"
    } else if value.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

/// `MEMORY USAGE key [SAMPLES n]`: an estimate of the bytes the key takes (key, value and
/// a fixed 48 bytes for its record); a null for a missing key.
pub(crate) async fn memory(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let sub = args.next_str()?;
    if !sub.eq_ignore_ascii_case("usage") {
        return Err(CmdError::Reply(format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            sub.chars().take(64).collect::<String>()
        )));
    }
    let key = args.next_bytes()?;
    if args.next_keyword("samples") {
        args.next_i64()?;
    }
    no_more(args)?;
    let record = ctx.any_record(&key).await?;
    Ok(record.map_or(Reply::Null, |r| {
        Reply::integer((key.len() + r.value.len() + 48) as i64)
    }))
}

#[cfg(test)]
mod tests {
    use super::{ScanRequest, parse_expire};
    use crate::Args;
    use bytes::Bytes;

    fn args(words: &[&str]) -> Args {
        Args::from_words(words)
    }

    #[test]
    fn scan_options_parse() {
        let scan = ScanRequest::parse(&mut args(&["scan", "0"])).unwrap();
        assert_eq!(
            (scan.cursor, scan.count, scan.pattern, scan.only_type),
            (0, 10, None, None)
        );
        let scan = ScanRequest::parse(&mut args(&[
            "scan", "42", "MATCH", "user:*", "count", "1000000", "TYPE", "Hash",
        ]))
        .unwrap();
        assert_eq!(scan.cursor, 42);
        assert_eq!(scan.pattern, Some(Bytes::from_static(b"user:*")));
        assert_eq!(scan.count, 100_000, "COUNT is capped");
        assert_eq!(scan.only_type.as_deref(), Some("hash"));
        assert!(ScanRequest::parse(&mut args(&["scan", "x"])).is_err());
        assert!(ScanRequest::parse(&mut args(&["scan", "0", "count", "0"])).is_err());
        assert!(ScanRequest::parse(&mut args(&["scan", "0", "bogus"])).is_err());
        assert!(ScanRequest::parse(&mut args(&["scan"])).is_err());
    }

    #[test]
    fn expire_times_are_absolute_milliseconds() {
        let (key, at, condition) = parse_expire(&mut args(&["expireat", "k", "10"])).unwrap();
        assert_eq!(
            (key, at, condition.is_none()),
            (Bytes::from_static(b"k"), 10_000, true)
        );
        let (_, at, _) = parse_expire(&mut args(&["pexpireat", "k", "-5"])).unwrap();
        assert_eq!(at, 0, "a time in the past is now");
        let before = trireme_cluster::now_ms();
        let (_, at, condition) = parse_expire(&mut args(&["expire", "k", "60", "NX"])).unwrap();
        assert!((before + 60_000..=trireme_cluster::now_ms() + 60_000).contains(&at));
        assert!(condition.is_some());
        assert!(parse_expire(&mut args(&["expire", "k", "9223372036854775807"])).is_err());
        assert!(parse_expire(&mut args(&["expire", "k", "1", "NX", "XX"])).is_err());
    }
}
