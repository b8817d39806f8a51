//! The reads that answer a whole collection, or a long range of one: `HGETALL`, `HKEYS`,
//! `HVALS`, `SMEMBERS`, `LRANGE`, and `ZRANGE`/`ZREVRANGE` by rank.
//!
//! They open a whole read in the cluster (see `trireme_cluster::WholeReader`), which knows
//! the answer's length before its first item. An answer of one page is a reply like any
//! other; a longer one is streamed: the connection writes the header, then each page as it
//! arrives, so neither this node nor the one serving the read holds more than a page of it.
//! Should the read fail half way (the serving node stops), the connection is closed: a
//! reply whose header is out cannot be turned into an error.

use super::hashes::{self, HashCommand};
use super::lists::{self, ListCommand};
use super::sets::{self, SetCommand};
use super::sorted_sets::{self, SortedSetCommand};
use super::{CmdError, Ctx, Flow};
use crate::reply::Aggregate;
use crate::{Args, Protocol, Reply};
use bytes::BytesMut;
use trireme_cluster::{
    HashOp, HashRead, ListOp, ListRead, SetOp, SetRead, SortedSetOp, SortedSetRead, WholeReader,
    ZRange,
};
use trireme_types::whole::{WholeItems, WholeRead};

/// Whether `name` is one of the commands this module runs.
pub(crate) fn runs(name: &str) -> bool {
    matches!(
        name,
        "hgetall" | "hkeys" | "hvals" | "smembers" | "lrange" | "zrange" | "zrevrange"
    )
}

/// How a whole read's items become a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Fields and values (`HGETALL`): a map.
    Map,
    /// Fields (`HKEYS`).
    Keys,
    /// Values (`HVALS`).
    Values,
    /// Members (`SMEMBERS`): a set.
    Set,
    /// Elements (`LRANGE`).
    Elements,
    /// Members with their scores (`ZRANGE ... WITHSCORES`): pairs.
    Scored,
    /// Members only (`ZRANGE`).
    Members,
}

impl Shape {
    fn aggregate(self) -> Aggregate {
        match self {
            Shape::Map => Aggregate::Map,
            Shape::Set => Aggregate::Set,
            Shape::Scored => Aggregate::Pairs,
            Shape::Keys | Shape::Values | Shape::Elements | Shape::Members => Aggregate::Array,
        }
    }

    /// Appends at most `*left` of `items` to `out`, counting them off `left`.
    fn encode_items(
        self,
        items: WholeItems,
        left: &mut u64,
        out: &mut BytesMut,
        protocol: Protocol,
    ) {
        let aggregate = self.aggregate();
        // Counts one item off `left`, if there is room for it.
        let room = |left: &mut u64| {
            let has = *left > 0;
            *left = left.saturating_sub(1);
            has
        };
        match items {
            WholeItems::Pairs(pairs) => {
                for (field, value) in pairs {
                    if !room(left) {
                        return;
                    }
                    match self {
                        Shape::Keys => Reply::Bulk(field).encode_for(out, protocol),
                        Shape::Values => Reply::Bulk(value).encode_for(out, protocol),
                        _ => aggregate.encode_pair(
                            &Reply::Bulk(field),
                            &Reply::Bulk(value),
                            out,
                            protocol,
                        ),
                    }
                }
            }
            WholeItems::Members(members) => {
                for member in members {
                    if !room(left) {
                        return;
                    }
                    Reply::Bulk(member).encode_for(out, protocol);
                }
            }
            WholeItems::Scored(scored) => {
                for (member, score) in scored {
                    if !room(left) {
                        return;
                    }
                    if self == Shape::Scored {
                        aggregate.encode_pair(
                            &Reply::Bulk(member),
                            &Reply::Double(score.get()),
                            out,
                            protocol,
                        );
                    } else {
                        Reply::Bulk(member).encode_for(out, protocol);
                    }
                }
            }
        }
    }

    /// The reply of an answer that came whole in one page.
    fn reply(self, items: WholeItems) -> Reply {
        match (self, items) {
            (Shape::Map, WholeItems::Pairs(pairs)) => Reply::Map(
                pairs
                    .into_iter()
                    .map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v)))
                    .collect(),
            ),
            (Shape::Keys, WholeItems::Pairs(pairs)) => {
                Reply::array(pairs.into_iter().map(|(f, _)| Reply::Bulk(f)).collect())
            }
            (Shape::Values, WholeItems::Pairs(pairs)) => {
                Reply::array(pairs.into_iter().map(|(_, v)| Reply::Bulk(v)).collect())
            }
            (Shape::Set, WholeItems::Members(members)) => {
                Reply::Set(members.into_iter().map(Reply::Bulk).collect())
            }
            (Shape::Elements, WholeItems::Members(members)) => {
                Reply::array(members.into_iter().map(Reply::Bulk).collect())
            }
            (Shape::Scored, WholeItems::Scored(scored)) => Reply::Pairs(
                scored
                    .into_iter()
                    .map(|(m, s)| (Reply::Bulk(m), Reply::Double(s.get())))
                    .collect(),
            ),
            (Shape::Members, WholeItems::Scored(scored)) => {
                Reply::array(scored.into_iter().map(|(m, _)| Reply::Bulk(m)).collect())
            }
            (shape, items) => Reply::error(format!(
                "ERR internal: {shape:?} cannot answer with {} items of another kind",
                items.len()
            )),
        }
    }
}

/// A reply streamed page by page: the connection writes it (see `connection.rs`).
pub(crate) struct Streamed {
    reader: WholeReader,
    shape: Shape,
}

impl Streamed {
    /// Appends the reply's header to `out`; how many items must follow it.
    pub(crate) fn encode_header(&self, out: &mut BytesMut, protocol: Protocol) -> u64 {
        let total = self.reader.total();
        self.shape.aggregate().encode_header(total, out, protocol);
        total
    }

    /// Appends the next page's items to `out` (at most `*left` of them, counted off it);
    /// `false` once there are no more pages.
    pub(crate) async fn encode_next_page(
        &mut self,
        left: &mut u64,
        out: &mut BytesMut,
        protocol: Protocol,
    ) -> Result<bool, trireme_cluster::ClusterError> {
        match self.reader.next_page().await? {
            Some(items) => {
                self.shape.encode_items(items, left, out, protocol);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Runs one of the commands [`runs`] names: a reply, or a stream for a long answer.
pub(crate) async fn run(ctx: &mut Ctx<'_>, args: &mut Args) -> Result<Flow, CmdError> {
    let (key, read, shape) = match args.command_name().as_str() {
        "hgetall" | "hkeys" | "hvals" => match hashes::parse(args)? {
            HashCommand {
                key,
                op: HashOp::Read(HashRead::Fields { .. }),
                shape,
            } => {
                let shape = match shape {
                    hashes::Shape::Keys => Shape::Keys,
                    hashes::Shape::Vals => Shape::Values,
                    _ => Shape::Map,
                };
                (key, WholeRead::Hash, shape)
            }
            other => return Err(unexpected(&other)),
        },
        "smembers" => match sets::parse(args)? {
            SetCommand {
                key,
                op: SetOp::Read(SetRead::Members { .. }),
                ..
            } => (key, WholeRead::Set, Shape::Set),
            other => return Err(unexpected(&other)),
        },
        "lrange" => match lists::parse(args)? {
            ListCommand {
                key,
                op: ListOp::Read(ListRead::Range { start, stop }),
                ..
            } => (key, WholeRead::List { start, stop }, Shape::Elements),
            other => return Err(unexpected(&other)),
        },
        _ => match sorted_sets::parse(args)? {
            SortedSetCommand {
                key,
                op:
                    SortedSetOp::Read(SortedSetRead::Range {
                        range: ZRange::Rank { start, stop },
                        reverse,
                        ..
                    }),
                shape: sorted_sets::Shape::Members { scores },
                ..
            } => {
                let read = WholeRead::SortedSet {
                    start,
                    stop,
                    reverse,
                };
                (
                    key,
                    read,
                    if scores {
                        Shape::Scored
                    } else {
                        Shape::Members
                    },
                )
            }
            // By score or by member: a range with its own LIMIT, read as before.
            command => return Ok(Flow::Reply(sorted_sets::run_parsed(ctx, command).await?)),
        },
    };
    let mut reader = ctx
        .shared
        .node
        .open_whole(&key, read, ctx.client.read_mode)
        .await?;
    if reader.is_one_page() {
        let items = reader
            .next_page()
            .await?
            .unwrap_or_else(|| WholeItems::empty(&read));
        return Ok(Flow::Reply(shape.reply(items)));
    }
    Ok(Flow::Stream(Box::new(Streamed { reader, shape })))
}

fn unexpected(command: &impl std::fmt::Debug) -> CmdError {
    CmdError::Reply(format!("ERR internal: not a whole read: {command:?}"))
}
