//! Command dispatch: one module per command family, each parsing its arguments with [`Args`]
//! and calling the node's router. Errors from the router become `-ERR`, `-TRYAGAIN` or
//! `-TIMEOUT` replies through the one mapping in [`trireme_types::ErrorCode::resp_prefix`].

mod access;
mod cluster;
mod connection;
mod hashes;
mod keys;
mod lists;
mod members;
mod optimistic;
mod pubsub;
mod server;
mod sets;
mod sorted_sets;
mod strings;
mod transaction;
mod whole;

pub(crate) use access::may_receive;
pub(crate) use lists::is_blocking;
pub(crate) use pubsub::message as pubsub_message;
pub(crate) use whole::Streamed;

use crate::state::{ClientState, Shared};
use crate::{ArgError, Args, Reply};
use trireme_cluster::ClusterError;

/// What the connection does after a command.
pub(crate) enum Flow {
    /// Send the reply and go on.
    Reply(Reply),
    /// Send the reply and close the connection.
    Quit(Reply),
    /// Send a long reply page by page as the cluster hands it out (see [`whole`]).
    Stream(Box<whole::Streamed>),
}

/// Why a command failed: bad arguments, or the router's error.
#[derive(Debug)]
pub(crate) enum CmdError {
    Args(ArgError),
    Cluster(ClusterError),
    /// A complete error text (`ERR ...`, `NOPROTO ...`).
    Reply(String),
    /// A complete error text, after which the connection is closed.
    Close(String),
}

impl From<ArgError> for CmdError {
    fn from(e: ArgError) -> Self {
        CmdError::Args(e)
    }
}

impl From<ClusterError> for CmdError {
    fn from(e: ClusterError) -> Self {
        CmdError::Cluster(e)
    }
}

impl From<CmdError> for Reply {
    fn from(e: CmdError) -> Self {
        match e {
            CmdError::Args(e) => Reply::from(e),
            CmdError::Cluster(e) => {
                let e = e.to_client();
                Reply::error(format!("{} {}", e.code.resp_prefix(), e.message))
            }
            CmdError::Reply(text) | CmdError::Close(text) => Reply::error(text),
        }
    }
}

pub(crate) type CmdResult = Result<Reply, CmdError>;

/// Redis's error for a command on a key of another type.
pub(crate) const WRONG_TYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

/// For fixed-arity commands: arguments left over are a wrong number of arguments, as Redis
/// says it (not a syntax error).
pub(crate) fn no_more(args: &Args) -> Result<(), CmdError> {
    if args.remaining() > 0 {
        return Err(args.wrong_arity().into());
    }
    Ok(())
}

/// What a command handler gets.
pub(crate) struct Ctx<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) client: &'a mut ClientState,
}

impl Ctx<'_> {
    /// The live string at `key`, read the way this connection reads (see `READONLY`);
    /// `WRONGTYPE` when the key holds another type.
    pub(crate) async fn record(
        &self,
        key: &[u8],
    ) -> Result<Option<trireme_types::Record>, CmdError> {
        let record = self.any_record(key).await?;
        if record
            .as_ref()
            .is_some_and(|r| r.kind != trireme_types::ValueKind::String)
        {
            return Err(CmdError::Reply(WRONG_TYPE.into()));
        }
        Ok(record)
    }

    /// The live record at `key` whatever its type (`TTL`, `TYPE`, `OBJECT`).
    pub(crate) async fn any_record(
        &self,
        key: &[u8],
    ) -> Result<Option<trireme_types::Record>, CmdError> {
        Ok(self
            .shared
            .node
            .get_record(key, self.client.read_mode)
            .await?)
    }
}

/// Runs one request, or queues it while a `MULTI` is open.
pub(crate) async fn execute(
    shared: &Shared,
    client: &mut ClientState,
    request: Vec<bytes::Bytes>,
) -> Flow {
    if let Some(refusal) = access::refusal(shared, client, &request) {
        // Inside MULTI a refused command fails the transaction, as an unknown one does.
        if let Some(multi) = client.multi.as_mut() {
            multi.failed = true;
        }
        return Flow::Reply(refusal);
    }
    if let Some(multi) = client.multi.as_mut() {
        let name = request
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
            .unwrap_or_default();
        if !transaction::runs_inside_multi(&name) {
            let config = shared.node.config();
            let (max_queued, cross_slot) =
                (config.limits.max_multi_commands, config.redis_cross_slot);
            return Flow::Reply(transaction::queue(multi, request, max_queued, cross_slot));
        }
    }
    dispatch(shared, client, Args::new(request)).await
}

/// Runs a pipeline's consecutive commands on one key as one log command (see
/// [`transaction::run_together`]); `None` when they must run one by one.
pub(crate) async fn run_together(
    shared: &Shared,
    client: &mut ClientState,
    requests: Vec<Vec<bytes::Bytes>>,
) -> Option<Vec<Reply>> {
    // A RESP2 subscriber may only (un)subscribe: each command gets its own refusal.
    if client.protocol == crate::Protocol::Resp2 && client.subscriptions.count() > 0 {
        return None;
    }
    // A command the token may not run gets its own refusal, one by one.
    if requests
        .iter()
        .any(|r| access::refusal(shared, client, r).is_some())
    {
        return None;
    }
    transaction::run_together(&mut Ctx { shared, client }, requests).await
}

/// Whether the command table marks `request`'s command read-only.
pub(crate) fn reads_only(request: &[bytes::Bytes]) -> bool {
    request
        .first()
        .is_some_and(|name| server::reads_only(&String::from_utf8_lossy(name).to_ascii_lowercase()))
}

async fn dispatch(shared: &Shared, client: &mut ClientState, mut args: Args) -> Flow {
    let mut ctx = Ctx { shared, client };
    let name = args.command_name();
    // A RESP2 connection with subscriptions only listens, as in Redis; RESP3 can do both.
    if ctx.client.protocol == crate::Protocol::Resp2 && ctx.client.subscriptions.count() > 0 {
        if name == "ping" {
            return Flow::Reply(pubsub::subscribed_ping(&mut args).unwrap_or_else(Reply::from));
        }
        if !pubsub::ALLOWED_WHILE_SUBSCRIBED.contains(&name.as_str()) {
            return Flow::Reply(Reply::error(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                name.chars().take(64).collect::<String>()
            )));
        }
    }
    let result = match name.as_str() {
        // strings
        "get" => strings::get(&mut ctx, &mut args).await,
        "set" => strings::set(&mut ctx, &mut args).await,
        "mget" => strings::mget(&mut ctx, &mut args).await,
        "mset" => strings::mset(&mut ctx, &mut args).await,
        "incr" | "decr" | "incrby" | "decrby" => strings::incr(&mut ctx, &mut args).await,
        "setnx" => strings::setnx(&mut ctx, &mut args).await,
        "setex" | "psetex" => strings::setex(&mut ctx, &mut args).await,
        "getset" => strings::getset(&mut ctx, &mut args).await,
        "getdel" => strings::getdel(&mut ctx, &mut args).await,
        "getex" => strings::getex(&mut ctx, &mut args).await,
        "append" => strings::append(&mut ctx, &mut args).await,
        "strlen" => strings::strlen(&mut ctx, &mut args).await,
        "getrange" | "substr" => strings::getrange(&mut ctx, &mut args).await,
        "setrange" => strings::setrange(&mut ctx, &mut args).await,
        "incrbyfloat" => strings::incrbyfloat(&mut ctx, &mut args).await,
        // whole collections, and long ranges of them
        name if whole::runs(name) => match whole::run(&mut ctx, &mut args).await {
            Ok(flow) => return flow,
            Err(e) => Err(e),
        },
        // hashes
        name if hashes::NAMES.contains(&name) => hashes::run(&mut ctx, &mut args).await,
        "hscan" => hashes::hscan(&mut ctx, &mut args).await,
        "hrandfield" => hashes::hrandfield(&mut ctx, &mut args).await,
        // sets
        name if sets::NAMES.contains(&name) => sets::run(&mut ctx, &mut args).await,
        "sscan" => sets::sscan(&mut ctx, &mut args).await,
        "srandmember" => sets::srandmember(&mut ctx, &mut args).await,
        // lists
        name if lists::NAMES.contains(&name) => lists::run(&mut ctx, &mut args).await,
        // sorted sets
        name if sorted_sets::NAMES.contains(&name) => sorted_sets::run(&mut ctx, &mut args).await,
        "zscan" => sorted_sets::zscan(&mut ctx, &mut args).await,
        // keys
        "del" | "unlink" => keys::del(&mut ctx, &mut args).await,
        "exists" => keys::exists(&mut ctx, &mut args).await,
        "expire" | "pexpire" | "expireat" | "pexpireat" => keys::expire(&mut ctx, &mut args).await,
        "rename" | "renamenx" => optimistic::rename(&mut ctx, &mut args).await,
        "copy" => optimistic::copy(&mut ctx, &mut args).await,
        "msetnx" => optimistic::msetnx(&mut ctx, &mut args).await,
        "randomkey" => keys::randomkey(&mut ctx, &mut args).await,
        "object" => keys::object(&mut ctx, &mut args).await,
        "memory" => keys::memory(&mut ctx, &mut args).await,
        "readonly" | "readwrite" => cluster::read_mode(&mut ctx, &mut args),
        "asking" => cluster::asking(&mut args),
        "ttl" | "pttl" | "expiretime" | "pexpiretime" => keys::ttl(&mut ctx, &mut args).await,
        "keys" => keys::keys(&mut ctx, &mut args).await,
        "flushdb" | "flushall" => keys::flush(&mut ctx, &mut args).await,
        "persist" => keys::persist(&mut ctx, &mut args).await,
        "type" => keys::key_type(&mut ctx, &mut args).await,
        "scan" => keys::scan(&mut ctx, &mut args).await,
        "dbsize" => keys::dbsize(&mut ctx, &mut args).await,
        // connection
        "ping" => connection::ping(&mut args),
        "echo" => connection::echo(&mut args),
        "hello" => connection::hello(&mut ctx, &mut args).await,
        "select" => connection::select(&mut args),
        "client" => connection::client(&mut ctx, &mut args),
        "auth" => connection::auth(&mut ctx, &mut args).await,
        "quit" => return Flow::Quit(Reply::ok()),
        // server
        "info" => server::info(&mut ctx, &mut args).await,
        "command" => server::command(&mut args),
        "config" => server::config(&mut args),
        "time" => server::time(&mut args),
        "wait" => server::wait(&mut ctx, &mut args),
        // pub/sub
        "subscribe" | "psubscribe" => pubsub::subscribe(&mut ctx, &mut args),
        "unsubscribe" | "punsubscribe" => pubsub::unsubscribe(&mut ctx, &mut args),
        "publish" => pubsub::publish(&mut ctx, &mut args).await,
        "pubsub" => pubsub::pubsub(&mut ctx, &mut args),
        // transactions
        "multi" => transaction::multi(&mut ctx, &mut args),
        "exec" => transaction::exec(&mut ctx, &mut args).await,
        "discard" => transaction::discard(&mut ctx, &mut args),
        "watch" => transaction::watch(&mut ctx, &mut args).await,
        "unwatch" => transaction::unwatch(&mut ctx, &mut args),
        // cluster
        "cluster" => cluster::cluster(&mut ctx, &mut args),
        "" => Err(CmdError::Reply("ERR empty command".into())),
        _ => Err(CmdError::Reply(unknown_command(&mut args))),
    };
    match result {
        Err(CmdError::Close(text)) => Flow::Quit(Reply::error(text)),
        result => Flow::Reply(result.unwrap_or_else(Reply::from)),
    }
}

/// Commands that read or write exactly the key after their name and touch nothing else
/// (no other key, no connection state), so that several of them on different keys may run
/// at once. `DEL` and `EXISTS` count only with one key.
const SINGLE_KEY: [&str; 29] = [
    "get",
    "set",
    "incr",
    "decr",
    "incrby",
    "decrby",
    "ttl",
    "pttl",
    "expire",
    "pexpire",
    "persist",
    "type",
    "del",
    "exists",
    "setnx",
    "setex",
    "psetex",
    "getset",
    "getdel",
    "getex",
    "append",
    "strlen",
    "getrange",
    "substr",
    "setrange",
    "incrbyfloat",
    "expireat",
    "pexpireat",
    "expiretime",
];

/// The names of the collection commands that run alone or queued in a `MULTI`, by type.
pub(crate) const COLLECTIONS: [&[&str]; 4] =
    [hashes::NAMES, sets::NAMES, lists::NAMES, sorted_sets::NAMES];

/// The key of a request that may run beside others (see [`SINGLE_KEY`]), if it is one.
pub(crate) fn single_key(request: &[bytes::Bytes]) -> Option<bytes::Bytes> {
    let name = request.first()?;
    let key = request.get(1)?;
    let multi_key = name.eq_ignore_ascii_case(b"del") || name.eq_ignore_ascii_case(b"exists");
    if multi_key && request.len() != 2 {
        return None;
    }
    let is = |c: &&&str| c.as_bytes().eq_ignore_ascii_case(name);
    // A collection command qualifies when the command table gives it one key. No
    // allocation: this runs for every command of a pipeline.
    let one_key = SINGLE_KEY.iter().any(|c| is(&c))
        || COLLECTIONS
            .iter()
            .find_map(|names| names.iter().find(is))
            .is_some_and(|c| server::takes_one_key(c));
    one_key.then(|| key.clone())
}

fn unknown_command(args: &mut Args) -> String {
    let name = args.written_name().to_string();
    // Redis quotes each argument and follows it with a space, the last one included.
    let shown: String = args
        .rest()
        .iter()
        .take(8)
        .map(|a| format!("'{}' ", String::from_utf8_lossy(&a[..a.len().min(64)])))
        .collect();
    let name: String = name.chars().take(64).collect();
    format!("ERR unknown command '{name}', with args beginning with: {shown}")
}
