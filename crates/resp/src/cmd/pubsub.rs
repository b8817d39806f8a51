//! SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB.
//!
//! Confirmations and messages are RESP3 push frames after `HELLO 3`, arrays in RESP2, as
//! Redis sends them. `PUBLISH` reaches subscribers on every node and answers how many got the
//! message; `PUBSUB` describes this node's subscriptions (Redis Cluster's `PUBSUB` is per
//! node too).

use super::{CmdError, CmdResult, Ctx, no_more};
use crate::pubsub::Delivery;
use crate::{Args, Reply};
use bytes::Bytes;

/// The commands a RESP2 connection may send while it has subscriptions.
pub(crate) const ALLOWED_WHILE_SUBSCRIBED: [&str; 7] = [
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ping",
    "quit",
    "reset",
];

/// One subscription change's confirmation: `[kind, name, subscriptions left]`.
fn confirmation(kind: &'static str, name: Option<Bytes>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::bulk(kind),
        name.map_or(Reply::Null, Reply::Bulk),
        Reply::integer(count as i64),
    ])
}

/// What a subscriber receives for a published message.
pub(crate) fn message(delivery: Delivery) -> Reply {
    match delivery.pattern {
        None => Reply::Push(vec![
            Reply::bulk("message"),
            Reply::Bulk(delivery.channel),
            Reply::Bulk(delivery.message),
        ]),
        Some(pattern) => Reply::Push(vec![
            Reply::bulk("pmessage"),
            Reply::Bulk(pattern),
            Reply::Bulk(delivery.channel),
            Reply::Bulk(delivery.message),
        ]),
    }
}

/// `SUBSCRIBE channel...` and `PSUBSCRIBE pattern...`.
pub(crate) fn subscribe(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let names = args.rest();
    if names.is_empty() {
        return Err(args.wrong_arity().into());
    }
    let pattern = args.name() == "psubscribe";
    let kind = if pattern { "psubscribe" } else { "subscribe" };
    let mut replies = Vec::with_capacity(names.len());
    for name in names {
        let subs = &mut ctx.client.subscriptions;
        let set = if pattern {
            &mut subs.patterns
        } else {
            &mut subs.channels
        };
        if set.insert(name.clone()) {
            ctx.shared
                .subscribers
                .subscribe(ctx.client.id, name.clone(), pattern, &subs.inbox);
        }
        replies.push(confirmation(kind, Some(name), subs.count()));
    }
    Ok(Reply::Several(replies))
}

/// `UNSUBSCRIBE [channel...]` and `PUNSUBSCRIBE [pattern...]`; without names, from all.
pub(crate) fn unsubscribe(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let pattern = args.name() == "punsubscribe";
    let kind = if pattern {
        "punsubscribe"
    } else {
        "unsubscribe"
    };
    let subs = &mut ctx.client.subscriptions;
    let mut names = args.rest();
    if names.is_empty() {
        names = if pattern {
            subs.patterns.iter().cloned().collect()
        } else {
            subs.channels.iter().cloned().collect()
        };
        if names.is_empty() {
            return Ok(confirmation(kind, None, subs.count()));
        }
    }
    let mut replies = Vec::with_capacity(names.len());
    for name in names {
        let set = if pattern {
            &mut subs.patterns
        } else {
            &mut subs.channels
        };
        if set.remove(&name) {
            ctx.shared
                .subscribers
                .unsubscribe(ctx.client.id, &name, pattern);
        }
        replies.push(confirmation(kind, Some(name), subs.count()));
    }
    Ok(Reply::Several(replies))
}

/// `PUBLISH channel message`: how many subscribers, on every node, received it.
pub(crate) async fn publish(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let channel = args.next_bytes()?;
    let message = args.next_bytes()?;
    no_more(args)?;
    let receivers = ctx.shared.node.publish(channel, message).await;
    Ok(Reply::integer(receivers as i64))
}

/// `PUBSUB CHANNELS [pattern]`, `PUBSUB NUMSUB [channel...]`, `PUBSUB NUMPAT`: this node's.
pub(crate) fn pubsub(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let written = args.next_str()?;
    let subscribers = &ctx.shared.subscribers;
    match written.to_ascii_lowercase().as_str() {
        "channels" => {
            let pattern = if args.remaining() > 0 {
                Some(args.next_bytes()?)
            } else {
                None
            };
            no_more(args)?;
            Ok(Reply::array(
                subscribers
                    .channels(pattern.as_deref())
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ))
        }
        // A flat array in RESP3 too, as Redis answers it.
        "numsub" => Ok(Reply::array(
            args.rest()
                .into_iter()
                .flat_map(|channel| {
                    let n = subscribers.count(&channel);
                    [Reply::Bulk(channel), Reply::integer(n as i64)]
                })
                .collect(),
        )),
        "numpat" => {
            no_more(args)?;
            Ok(Reply::integer(subscribers.pattern_count() as i64))
        }
        _ => Err(CmdError::Reply(format!(
            "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
            written.chars().take(64).collect::<String>()
        ))),
    }
}

/// `PING` on a RESP2 connection with subscriptions: `["pong", message]`, as Redis answers.
pub(crate) fn subscribed_ping(args: &mut Args) -> CmdResult {
    let message = match args.remaining() {
        0 => Bytes::new(),
        1 => args.next_bytes()?,
        _ => return Err(args.wrong_arity().into()),
    };
    Ok(Reply::array(vec![
        Reply::bulk("pong"),
        Reply::Bulk(message),
    ]))
}
