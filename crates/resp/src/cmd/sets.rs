//! SADD, SREM, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SPOP, SRANDMEMBER, SINTER, SUNION,
//! SDIFF, SINTERSTORE, SUNIONSTORE, SDIFFSTORE, SMOVE, SSCAN.
//!
//! Each member is a row of its own in the set key's shard, as a hash's fields are. Commands
//! on several sets need them in one slot (`CROSSSLOT` otherwise, as Redis Cluster answers).

use super::members::{ScanPage, draw, draw_one, random_count};
use super::{CmdError, CmdResult, Ctx, no_more};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::{SetAnswer, SetCombine, SetOp, SetOutcome, SetRead};
use trireme_types::{ErrorCode, key_slot};

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// The commands [`parse`] takes: they run alone or queued in a `MULTI`.
pub(crate) const NAMES: &[&str] = &[
    "sadd",
    "srem",
    "smembers",
    "sismember",
    "smismember",
    "scard",
    "spop",
    "sinter",
    "sunion",
    "sdiff",
    "sinterstore",
    "sunionstore",
    "sdiffstore",
    "smove",
];

/// How a set command's answer becomes its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// An integer (`SADD`, `SREM`, `SCARD`, `SMOVE`, the `STORE`s).
    Count,
    /// 1 or 0 (`SISMEMBER`).
    Flag,
    /// 1s and 0s (`SMISMEMBER`).
    Flags,
    /// A set (`SMEMBERS`, `SINTER`, `SUNION`, `SDIFF`, `SPOP key count`).
    Members,
    /// One member or a null (`SPOP key`).
    One,
}

/// A set command parsed: its key, what it does, and how it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetCommand {
    pub(crate) key: Bytes,
    pub(crate) op: SetOp,
    pub(crate) shape: Shape,
}

impl SetCommand {
    /// Every key the command names.
    fn keys(&self) -> Vec<&Bytes> {
        let mut keys = vec![&self.key];
        match &self.op {
            SetOp::Move { to, .. } => keys.push(to),
            SetOp::Store { sources, .. } => keys.extend(sources),
            SetOp::Read(SetRead::Combine { others, .. }) => keys.extend(others),
            _ => {}
        }
        keys
    }
}

fn combine_of(name: &str) -> SetCombine {
    match name.trim_end_matches("store") {
        "sinter" => SetCombine::Intersection,
        "sunion" => SetCombine::Union,
        _ => SetCombine::Difference,
    }
}

/// Parses a set command that reads or writes the members it names (all but `SSCAN` and
/// `SRANDMEMBER`), as it runs alone or queued in a `MULTI`.
pub(crate) fn parse(args: &mut Args) -> Result<SetCommand, CmdError> {
    let name = args.command_name();
    let key = args.next_bytes()?;
    let (op, shape) = match name.as_str() {
        "sadd" | "srem" | "smismember" => {
            let members = args.rest();
            if members.is_empty() {
                return Err(args.wrong_arity().into());
            }
            match name.as_str() {
                "sadd" => (
                    SetOp::Add {
                        members,
                        max_members: 0,
                    },
                    Shape::Count,
                ),
                "srem" => (SetOp::Remove { members }, Shape::Count),
                _ => (SetOp::Read(SetRead::Contains { members }), Shape::Flags),
            }
        }
        "sismember" => {
            let member = args.next_bytes()?;
            no_more(args)?;
            let read = SetRead::Contains {
                members: vec![member],
            };
            (SetOp::Read(read), Shape::Flag)
        }
        "scard" => {
            no_more(args)?;
            (SetOp::Read(SetRead::Len), Shape::Count)
        }
        "smembers" => {
            no_more(args)?;
            let read = SetRead::Members {
                after: None,
                limit: u64::MAX,
            };
            (SetOp::Read(read), Shape::Members)
        }
        "sinter" | "sunion" | "sdiff" => {
            let others = args.rest();
            let read = SetRead::Combine {
                combine: combine_of(&name),
                others,
            };
            (SetOp::Read(read), Shape::Members)
        }
        "sinterstore" | "sunionstore" | "sdiffstore" => {
            let sources = args.rest();
            if sources.is_empty() {
                return Err(args.wrong_arity().into());
            }
            let op = SetOp::Store {
                combine: combine_of(&name),
                sources,
                max_members: 0,
            };
            (op, Shape::Count)
        }
        "smove" => {
            let to = args.next_bytes()?;
            let member = args.next_bytes()?;
            no_more(args)?;
            let op = SetOp::Move {
                to,
                member,
                max_members: 0,
            };
            (op, Shape::Count)
        }
        "spop" => {
            if args.remaining() == 0 {
                (SetOp::Pop { count: 1, seed: 0 }, Shape::One)
            } else {
                let count = args.next_i64().map_err(|_| out_of_range())?;
                no_more(args)?;
                let count = u64::try_from(count).map_err(|_| out_of_range())?;
                (SetOp::Pop { count, seed: 0 }, Shape::Members)
            }
        }
        _ => return Err(ArgError::Syntax.into()),
    };
    let command = SetCommand { key, op, shape };
    let keys = command.keys();
    if keys.iter().any(|k| key_slot(k) != key_slot(&command.key)) {
        return Err(CmdError::Reply(CROSSSLOT.into()));
    }
    Ok(command)
}

fn out_of_range() -> CmdError {
    CmdError::Reply("ERR value is out of range, must be positive".into())
}

/// The reply to a set command of `shape` that answered `outcome`.
pub(crate) fn reply(shape: Shape, outcome: SetOutcome) -> CmdResult {
    let answer = outcome.0.map_err(|code| {
        CmdError::Reply(match code {
            ErrorCode::ValueTooLarge => {
                "ERR the set would pass its member limit (max_collection_members)".into()
            }
            other => format!("ERR {other}"),
        })
    })?;
    Ok(match (shape, answer) {
        (Shape::Count, SetAnswer::Count(n)) => Reply::integer(n as i64),
        (Shape::Flag, SetAnswer::Flags(flags)) => {
            Reply::integer(i64::from(flags.first().copied().unwrap_or(false)))
        }
        (Shape::Flags, SetAnswer::Flags(flags)) => Reply::array(
            flags
                .into_iter()
                .map(|f| Reply::integer(i64::from(f)))
                .collect(),
        ),
        (Shape::Members, SetAnswer::Members(members)) => {
            Reply::Set(members.into_iter().map(Reply::Bulk).collect())
        }
        (Shape::One, SetAnswer::Members(mut members)) => {
            members.pop().map_or(Reply::Null, Reply::Bulk)
        }
        (shape, other) => Reply::error(format!(
            "ERR internal: {shape:?} cannot answer with {other:?}"
        )),
    })
}

/// Runs a set command parsed by [`parse`]: a read of a replica (the way this connection
/// reads), or a write through the log.
pub(crate) async fn run(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let SetCommand { key, op, shape } = parse(args)?;
    let outcome = match op {
        SetOp::Read(read) => {
            ctx.shared
                .node
                .set_read(&key, read, ctx.client.read_mode)
                .await?
        }
        op => ctx.shared.node.set_members(key, op).await?,
    };
    reply(shape, outcome)
}

/// Members of the set at `key` after `after`, at most `limit`.
async fn members(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    after: Option<Bytes>,
    limit: u64,
) -> Result<Vec<Bytes>, CmdError> {
    let outcome = ctx
        .shared
        .node
        .set_read(key, SetRead::Members { after, limit }, ctx.client.read_mode)
        .await?;
    match outcome.0 {
        Ok(SetAnswer::Members(members)) => Ok(members),
        other => Err(CmdError::Reply(format!(
            "ERR internal: reading members answered {other:?}"
        ))),
    }
}

/// `SSCAN key cursor [MATCH pattern] [COUNT n]`, cursors as for `HSCAN`.
pub(crate) async fn sscan(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let Some(scan) = ScanPage::parse(ctx, args, false)? else {
        return Ok(ScanPage::over());
    };
    let page = members(ctx, &key, scan.after.clone(), scan.count).await?;
    let (read, last) = (page.len(), page.last().cloned());
    let items = page
        .into_iter()
        .filter(|m| scan.keeps(m))
        .map(Reply::Bulk)
        .collect();
    Ok(scan.reply(ctx, read, last, items))
}

/// `SRANDMEMBER key [count]`: one random member (a null for a missing key); with a positive
/// count that many distinct members at most, with a negative one exactly that many, repeats
/// allowed. Reads the whole set.
pub(crate) async fn srandmember(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let wanted = random_count(args)?;
    no_more(args)?;
    let all = members(ctx, &key, None, u64::MAX).await?;
    let Some(wanted) = wanted else {
        return Ok(draw_one(&all).map_or(Reply::Null, Reply::Bulk));
    };
    let cap = ctx.shared.node.config().limits.max_collection_members;
    Ok(Reply::array(
        draw(&all, wanted, cap)
            .into_iter()
            .map(Reply::Bulk)
            .collect(),
    ))
}
