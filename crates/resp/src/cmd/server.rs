//! INFO, COMMAND, CONFIG GET, TIME, WAIT.

use super::{CmdError, CmdResult, Ctx};
use crate::{Args, Reply};
use std::sync::atomic::Ordering::Relaxed;

/// The Redis version clients are told: the command set follows Redis 7.2's semantics.
pub(crate) const REDIS_VERSION: &str = "7.2.0";

/// Commands this server implements: name, arity (negative: at least), flags, first key, last
/// key, key step, as `COMMAND` reports them.
const COMMANDS: &[CommandEntry] = &[
    ("get", 2, &["readonly", "fast"], 1, 1, 1),
    ("set", -3, &["write", "denyoom"], 1, 1, 1),
    ("mget", -2, &["readonly", "fast"], 1, -1, 1),
    ("mset", -3, &["write", "denyoom"], 1, -1, 2),
    ("incr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
    ("incrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("decr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
    ("decrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("del", -2, &["write"], 1, -1, 1),
    ("unlink", -2, &["write", "fast"], 1, -1, 1),
    ("exists", -2, &["readonly", "fast"], 1, -1, 1),
    ("expire", -3, &["write", "fast"], 1, 1, 1),
    ("pexpire", -3, &["write", "fast"], 1, 1, 1),
    ("ttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("pttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("persist", 2, &["write", "fast"], 1, 1, 1),
    ("type", 2, &["readonly", "fast"], 1, 1, 1),
    ("scan", -2, &["readonly"], 0, 0, 0),
    ("dbsize", 1, &["readonly", "fast"], 0, 0, 0),
    ("ping", -1, &["fast"], 0, 0, 0),
    ("echo", 2, &["fast"], 0, 0, 0),
    (
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("select", 2, &["loading", "stale", "fast"], 0, 0, 0),
    ("client", -2, &["noscript", "loading", "stale"], 0, 0, 0),
    (
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("info", -1, &["loading", "stale"], 0, 0, 0),
    ("command", -1, &["loading", "stale"], 0, 0, 0),
    (
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    ("cluster", -2, &["stale"], 0, 0, 0),
    ("setnx", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("setex", 4, &["write", "denyoom"], 1, 1, 1),
    ("psetex", 4, &["write", "denyoom"], 1, 1, 1),
    ("getset", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("getdel", 2, &["write", "fast"], 1, 1, 1),
    ("getex", -2, &["write", "fast"], 1, 1, 1),
    ("append", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("strlen", 2, &["readonly", "fast"], 1, 1, 1),
    ("getrange", 4, &["readonly"], 1, 1, 1),
    ("substr", 4, &["readonly"], 1, 1, 1),
    ("setrange", 4, &["write", "denyoom"], 1, 1, 1),
    ("incrbyfloat", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hset", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hmset", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hsetnx", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hget", 3, &["readonly", "fast"], 1, 1, 1),
    ("hmget", -3, &["readonly", "fast"], 1, 1, 1),
    ("hexists", 3, &["readonly", "fast"], 1, 1, 1),
    ("hstrlen", 3, &["readonly", "fast"], 1, 1, 1),
    ("hlen", 2, &["readonly", "fast"], 1, 1, 1),
    ("hgetall", 2, &["readonly"], 1, 1, 1),
    ("hkeys", 2, &["readonly"], 1, 1, 1),
    ("hvals", 2, &["readonly"], 1, 1, 1),
    ("hdel", -3, &["write", "fast"], 1, 1, 1),
    ("hincrby", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hincrbyfloat", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hscan", -3, &["readonly"], 1, 1, 1),
    ("hrandfield", -2, &["readonly"], 1, 1, 1),
    ("sadd", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("srem", -3, &["write", "fast"], 1, 1, 1),
    ("smembers", 2, &["readonly"], 1, 1, 1),
    ("sismember", 3, &["readonly", "fast"], 1, 1, 1),
    ("smismember", -3, &["readonly", "fast"], 1, 1, 1),
    ("scard", 2, &["readonly", "fast"], 1, 1, 1),
    ("spop", -2, &["write", "fast"], 1, 1, 1),
    ("srandmember", -2, &["readonly"], 1, 1, 1),
    ("sinter", -2, &["readonly"], 1, -1, 1),
    ("sunion", -2, &["readonly"], 1, -1, 1),
    ("sdiff", -2, &["readonly"], 1, -1, 1),
    ("sinterstore", -3, &["write", "denyoom"], 1, -1, 1),
    ("sunionstore", -3, &["write", "denyoom"], 1, -1, 1),
    ("sdiffstore", -3, &["write", "denyoom"], 1, -1, 1),
    ("smove", 4, &["write", "fast"], 1, 2, 1),
    ("sscan", -3, &["readonly"], 1, 1, 1),
    ("lpush", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("rpush", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("lpushx", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("rpushx", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("lpop", -2, &["write", "fast"], 1, 1, 1),
    ("rpop", -2, &["write", "fast"], 1, 1, 1),
    ("llen", 2, &["readonly", "fast"], 1, 1, 1),
    ("lrange", 4, &["readonly"], 1, 1, 1),
    ("lindex", 3, &["readonly"], 1, 1, 1),
    ("lset", 4, &["write", "denyoom"], 1, 1, 1),
    ("lrem", 4, &["write"], 1, 1, 1),
    ("ltrim", 4, &["write"], 1, 1, 1),
    ("linsert", 5, &["write", "denyoom"], 1, 1, 1),
    ("lpos", -3, &["readonly"], 1, 1, 1),
    ("lmove", 5, &["write", "denyoom"], 1, 2, 1),
    ("rpoplpush", 3, &["write", "denyoom"], 1, 2, 1),
    ("blpop", -3, &["write", "noscript"], 1, -2, 1),
    ("brpop", -3, &["write", "noscript"], 1, -2, 1),
    ("blmove", 6, &["write", "denyoom", "noscript"], 1, 2, 1),
    ("brpoplpush", 4, &["write", "denyoom", "noscript"], 1, 2, 1),
    ("zadd", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("zincrby", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("zrem", -3, &["write", "fast"], 1, 1, 1),
    ("zscore", 3, &["readonly", "fast"], 1, 1, 1),
    ("zmscore", -3, &["readonly", "fast"], 1, 1, 1),
    ("zcard", 2, &["readonly", "fast"], 1, 1, 1),
    ("zcount", 4, &["readonly", "fast"], 1, 1, 1),
    ("zlexcount", 4, &["readonly", "fast"], 1, 1, 1),
    ("zrank", 3, &["readonly", "fast"], 1, 1, 1),
    ("zrevrank", 3, &["readonly", "fast"], 1, 1, 1),
    ("zrange", -4, &["readonly"], 1, 1, 1),
    ("zrevrange", -4, &["readonly"], 1, 1, 1),
    ("zrangebyscore", -4, &["readonly"], 1, 1, 1),
    ("zrevrangebyscore", -4, &["readonly"], 1, 1, 1),
    ("zrangebylex", -4, &["readonly"], 1, 1, 1),
    ("zrevrangebylex", -4, &["readonly"], 1, 1, 1),
    ("zpopmin", -2, &["write", "fast"], 1, 1, 1),
    ("bzpopmin", -3, &["write", "noscript", "fast"], 1, -2, 1),
    ("bzpopmax", -3, &["write", "noscript", "fast"], 1, -2, 1),
    ("zpopmax", -2, &["write", "fast"], 1, 1, 1),
    ("zremrangebyscore", 4, &["write"], 1, 1, 1),
    ("zremrangebyrank", 4, &["write"], 1, 1, 1),
    ("zremrangebylex", 4, &["write"], 1, 1, 1),
    ("zscan", -3, &["readonly"], 1, 1, 1),
    ("expireat", -3, &["write", "fast"], 1, 1, 1),
    ("pexpireat", -3, &["write", "fast"], 1, 1, 1),
    ("expiretime", 2, &["readonly", "fast"], 1, 1, 1),
    ("pexpiretime", 2, &["readonly", "fast"], 1, 1, 1),
    ("keys", 2, &["readonly"], 0, 0, 0),
    ("flushdb", -1, &["write"], 0, 0, 0),
    ("flushall", -1, &["write"], 0, 0, 0),
    ("time", 1, &["loading", "stale", "fast"], 0, 0, 0),
    ("wait", 3, &["noscript"], 0, 0, 0),
    (
        "multi",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("exec", 1, &["noscript", "loading", "stale"], 0, 0, 0),
    (
        "discard",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "subscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("pubsub", -2, &["pubsub", "loading", "stale"], 0, 0, 0),
    ("rename", 3, &["write"], 1, 2, 1),
    ("renamenx", 3, &["write", "fast"], 1, 2, 1),
    ("copy", -3, &["write", "denyoom"], 1, 2, 1),
    ("msetnx", -3, &["write", "denyoom"], 1, -1, 2),
    ("randomkey", 1, &["readonly"], 0, 0, 0),
    ("object", -2, &["readonly"], 2, 2, 1),
    ("memory", -2, &["readonly"], 0, 0, 0),
    ("readonly", 1, &["loading", "stale", "fast"], 0, 0, 0),
    ("readwrite", 1, &["loading", "stale", "fast"], 0, 0, 0),
    ("asking", 1, &["fast"], 0, 0, 0),
    (
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast"],
        1,
        -1,
        1,
    ),
    (
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
];

type CommandEntry = (&'static str, i64, &'static [&'static str], i64, i64, i64);

/// Whether `request` (name first) has an arity `COMMAND` allows for its name; `None` for a
/// command this server does not have.
pub(crate) fn arity_ok(request: &[bytes::Bytes]) -> Option<bool> {
    let name = String::from_utf8_lossy(request.first()?).to_ascii_lowercase();
    let entry = COMMANDS.iter().find(|c| c.0 == name)?;
    let arity = entry.1;
    let len = request.len() as i64;
    Some(if arity >= 0 {
        len == arity
    } else {
        len >= -arity
    })
}

/// Whether the command table marks `name` read-only.
pub(crate) fn reads_only(name: &str) -> bool {
    COMMANDS
        .iter()
        .any(|c| c.0 == name && c.2.contains(&"readonly"))
}

/// Whether the command table says `name` takes exactly one key, the first argument.
pub(crate) fn takes_one_key(name: &str) -> bool {
    COMMANDS
        .iter()
        .any(|c| c.0 == name && (c.3, c.4, c.5) == (1, 1, 1))
}

/// The keys of `request` by its `COMMAND` key specification (first, last, step).
pub(crate) fn keys_of(request: &[bytes::Bytes]) -> Vec<bytes::Bytes> {
    let Some(name) = request.first() else {
        return Vec::new();
    };
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    let Some(&(_, _, _, first, last, step)) = COMMANDS.iter().find(|c| c.0 == name) else {
        return Vec::new();
    };
    if first <= 0 || step <= 0 {
        return Vec::new();
    }
    let last = if last < 0 {
        request.len() as i64 + last
    } else {
        last
    };
    (first..=last)
        .step_by(step as usize)
        .filter_map(|i| request.get(i as usize).cloned())
        .collect()
}

fn command_info(entry: &CommandEntry) -> Reply {
    let (name, arity, flags, first, last, step) = *entry;
    Reply::array(vec![
        Reply::bulk(name),
        Reply::integer(arity),
        Reply::array(flags.iter().map(|f| Reply::simple(*f)).collect()),
        Reply::integer(first),
        Reply::integer(last),
        Reply::integer(step),
    ])
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS` (empty: no docs here).
pub(crate) fn command(args: &mut Args) -> CmdResult {
    if args.remaining() == 0 {
        return Ok(Reply::array(COMMANDS.iter().map(command_info).collect()));
    }
    let sub = args.next_str()?.to_ascii_lowercase();
    match sub.as_str() {
        "count" => Ok(Reply::integer(COMMANDS.len() as i64)),
        "info" => Ok(Reply::array(
            args.rest()
                .iter()
                .map(|name| {
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    COMMANDS
                        .iter()
                        .find(|c| c.0 == name)
                        .map_or(Reply::NullArray, command_info)
                })
                .collect(),
        )),
        "docs" => Ok(Reply::array(vec![])),
        _ => Err(CmdError::Reply(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            sub.chars().take(64).collect::<String>()
        ))),
    }
}

/// `CONFIG GET pattern`: the few settings clients and redis-benchmark ask for.
pub(crate) fn config(args: &mut Args) -> CmdResult {
    let sub = args.next_str()?.to_ascii_lowercase();
    if sub != "get" {
        return Err(CmdError::Reply(
            "ERR CONFIG is read-only here: only CONFIG GET is supported".into(),
        ));
    }
    let mut out = Vec::new();
    for pattern in args.rest() {
        for (name, value) in [
            ("save", ""),
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("databases", "1"),
            ("maxclients", "10000"),
        ] {
            if crate::glob::matches(&pattern.to_ascii_lowercase(), name.as_bytes()) {
                out.push((Reply::bulk(name), Reply::bulk(value)));
            }
        }
    }
    // A map in RESP3, pairs in a flat array in RESP2, as Redis answers.
    Ok(Reply::Map(out))
}

/// `INFO [section ...]`: server, clients, keyspace, cluster.
pub(crate) async fn info(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let wanted: Vec<String> = args
        .rest()
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let want = |section: &str| {
        wanted.is_empty()
            || wanted
                .iter()
                .any(|w| w == section || w == "all" || w == "everything" || w == "default")
    };
    let node = &ctx.shared.node;
    let mut text = String::new();
    if want("server") {
        text.push_str(&format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\ntrireme_version:{}\r\nredis_mode:cluster\r\nos:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nnode_name:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::process::id(),
            node.me().resp_addr.rsplit(':').next().unwrap_or("0"),
            node.uptime().as_secs(),
            node.uptime().as_secs() / 86_400,
            node.me().name,
        ));
    }
    if want("clients") {
        let m = &ctx.shared.metrics;
        let (open, total) = (
            m.open_connections.load(Relaxed),
            m.connections.load(Relaxed),
        );
        // Redis counts the clients a blocking command holds; here, those of this node.
        let blocked = node.blocking_pops_waiting();
        text.push_str(&format!(
            "# Clients\r\nconnected_clients:{open}\r\nblocked_clients:{blocked}\r\ntotal_connections_received:{total}\r\n\r\n"
        ));
    }
    if want("memory") {
        let rss = crate::memory::resident_bytes().unwrap_or(0);
        let human = crate::memory::human(rss);
        text.push_str(&format!(
            "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{human}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{human}\r\n\r\n"
        ));
    }
    if want("cluster") {
        text.push_str("# Cluster\r\ncluster_enabled:1\r\n\r\n");
    }
    if want("keyspace") {
        text.push_str("# Keyspace\r\n");
        let keys = node.key_count().await?;
        if keys > 0 {
            // A node that cannot count them (an older peer holds a shard) still answers.
            let (expires, avg_ttl) = node.expiring_keys().await.unwrap_or_else(|e| {
                tracing::warn!("INFO keyspace: keys with an expiry not counted: {e}");
                (0, 0)
            });
            text.push_str(&format!(
                "db0:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
            ));
        }
    }
    Ok(Reply::Verbatim(text))
}

/// `TIME`: this node's clock, seconds and microseconds.
pub(crate) fn time(args: &mut Args) -> CmdResult {
    super::no_more(args)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Reply::array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ]))
}

/// `WAIT numreplicas timeout`: answers at once. Every acknowledged write is already on a
/// quorum of its shard's replicas, so the answer is how many replicas besides the leader a
/// quorum holds (1 with three replicas, 0 on a single node), whatever was asked.
pub(crate) fn wait(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let _replicas = args.next_i64()?;
    let timeout = args.next_i64()?;
    super::no_more(args)?;
    if timeout < 0 {
        return Err(CmdError::Reply("ERR timeout is negative".into()));
    }
    let node = &ctx.shared.node;
    let replicas = (node.config().replication_factor as usize).min(node.nodes().len().max(1));
    Ok(Reply::integer((replicas / 2) as i64))
}
