//! ACL checks for RESP: each command is judged, before it runs, by the token its connection
//! authenticated with (`AUTH`, `HELLO ... AUTH`), resolved again for every command so that a
//! token changed or deleted elsewhere takes effect at the next command.
//!
//! A command's keys come from the command table: read-only commands need `key:read` on each,
//! the others `key:write`. Commands over the whole keyspace (`KEYS`, `SCAN`, `RANDOMKEY`,
//! `DBSIZE`) need `key:list` on every key (`key_prefix "" { policy = "list" }`), `FLUSHALL`
//! write on every key; pub/sub channels are Consul's `event` rules. A connection that has not
//! authenticated while the default policy is deny may only `AUTH`, `HELLO` and `QUIT`, as
//! with a Redis password.

use crate::Reply;
use crate::state::{ClientState, Shared};
use bytes::Bytes;
use trireme_types::acl::DefaultPolicy;

/// Commands anyone may send: how a connection authenticates or leaves.
const ALWAYS: [&str; 3] = ["auth", "hello", "quit"];

/// Redis's answer before authentication.
pub(crate) const NOAUTH: &str = "NOAUTH Authentication required.";

/// What a command needs beyond its keys.
enum Need {
    /// Nothing: connection and server commands.
    Nothing,
    /// `key:list` on every key.
    ListAll,
    /// `key:write` on every key.
    WriteAll,
    /// `event:write` on the channel.
    Publish(Bytes),
    /// `event:read` on each channel.
    Subscribe(Vec<Bytes>),
    /// `event:read` on every channel (patterns, channel listings).
    ReadAllEvents,
}

fn need_of(name: &str, request: &[Bytes]) -> Need {
    match name {
        "keys" | "scan" | "randomkey" | "dbsize" => Need::ListAll,
        "flushall" | "flushdb" => Need::WriteAll,
        "publish" => Need::Publish(request.get(1).cloned().unwrap_or_default()),
        "subscribe" => Need::Subscribe(request[1..].to_vec()),
        "psubscribe" | "pubsub" => Need::ReadAllEvents,
        _ => Need::Nothing,
    }
}

/// The refusal for `request` on this connection, or `None` when it may run.
pub(crate) fn refusal(shared: &Shared, client: &ClientState, request: &[Bytes]) -> Option<Reply> {
    let node = &shared.node;
    if !node.acl_enabled() {
        return None;
    }
    let name = String::from_utf8_lossy(request.first()?).to_ascii_lowercase();
    if ALWAYS.contains(&name.as_str()) {
        return None;
    }
    let Ok(caller) = node.resolve_token(client.token.as_deref()) else {
        // The token this connection authenticated with is gone.
        return Some(Reply::error(NOAUTH));
    };
    let anonymous = caller.is_anonymous();
    let can = caller.authorizer();
    let mut keys = super::server::keys_of(request);
    // The command table gives MEMORY no key (its STATS takes none); USAGE reads one.
    if name == "memory"
        && request
            .get(1)
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"usage"))
        && let Some(key) = request.get(2)
    {
        keys.push(key.clone());
    }
    let (allowed, what) = if !keys.is_empty() {
        let read = super::server::reads_only(&name) || name == "watch" || name == "memory";
        let allowed = keys.iter().all(|key| {
            if read {
                can.key_read(key)
            } else {
                can.key_write(key)
            }
        });
        (allowed, "keys")
    } else {
        match need_of(&name, request) {
            Need::Nothing => (
                !(anonymous && node.config().acl.default_policy == DefaultPolicy::Deny),
                "command",
            ),
            Need::ListAll => (can.key_list_prefix(b""), "command"),
            Need::WriteAll => (can.key_write_prefix(b""), "command"),
            Need::Publish(channel) => (can.event_write(&channel), "channels"),
            Need::Subscribe(channels) => (channels.iter().all(|c| can.event_read(c)), "channels"),
            Need::ReadAllEvents => (can.event_read_prefix(b""), "channels"),
        }
    };
    if allowed {
        return None;
    }
    if anonymous {
        return Some(Reply::error(NOAUTH));
    }
    Some(Reply::error(match what {
        "keys" => "NOPERM this user has no permissions to access one of the keys used as arguments"
            .to_string(),
        "channels" => {
            "NOPERM this user has no permissions to access one of the channels used as arguments"
                .to_string()
        }
        _ => format!(
            "NOPERM this user has no permissions to run the '{}' command",
            name.chars().take(64).collect::<String>()
        ),
    }))
}

/// Whether a message on `channel` may still go to this connection: its token must still
/// exist and read the channel, so a revoked subscriber stops receiving at once rather than
/// at a next command it may never send.
pub(crate) fn may_receive(shared: &Shared, client: &ClientState, channel: &[u8]) -> bool {
    let node = &shared.node;
    if !node.acl_enabled() {
        return true;
    }
    node.resolve_token(client.token.as_deref())
        .is_ok_and(|caller| caller.authorizer().event_read(channel))
}
