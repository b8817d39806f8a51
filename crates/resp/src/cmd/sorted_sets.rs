//! ZADD, ZINCRBY, ZREM, ZSCORE, ZMSCORE, ZCARD, ZCOUNT, ZLEXCOUNT, ZRANK, ZREVRANK, ZRANGE,
//! ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZPOPMIN, ZPOPMAX,
//! ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZREMRANGEBYLEX, ZSCAN, and the blocking BZPOPMIN and
//! BZPOPMAX.
//!
//! Each member has a row by member and a row by score in the key's shard, so ranges by rank
//! or score walk neighbouring rows. Scores are parsed and printed as Redis 7.0 does
//! (`inf`, exponents, 17 significant digits).

use super::members::ScanPage;
use super::{CmdError, CmdResult, Ctx, no_more};
use crate::reply::format_double;
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use trireme_cluster::{
    LexBound, Score, ScoreBound, SortedSetAnswer, SortedSetOp, SortedSetOutcome, SortedSetRead,
    ZAddCompare, ZAddWhen, ZRange,
};
use trireme_types::ErrorCode;

/// The commands [`parse`] takes: they run alone or queued in a `MULTI`.
pub(crate) const NAMES: &[&str] = &[
    "zadd",
    "zincrby",
    "zrem",
    "zscore",
    "zmscore",
    "zcard",
    "zcount",
    "zlexcount",
    "zrank",
    "zrevrank",
    "zrange",
    "zrevrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zrangebylex",
    "zrevrangebylex",
    "zpopmin",
    "zpopmax",
    "zremrangebyscore",
    "zremrangebyrank",
    "zremrangebylex",
    "bzpopmin",
    "bzpopmax",
];

/// How a sorted set command's answer becomes its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// An integer (`ZCARD`, `ZREM`, `ZCOUNT`, the `ZREMRANGE`s).
    Count,
    /// `ZADD`'s count: members added, and with `CH` those whose score changed too.
    Added {
        /// `CH` was given.
        changed: bool,
    },
    /// A score or a null (`ZSCORE`, `ZINCRBY`, `ZADD ... INCR`).
    Score,
    /// Scores or nulls (`ZMSCORE`).
    Scores,
    /// A rank or a null (`ZRANK`).
    Rank,
    /// Members, with their scores if asked (`ZRANGE`, `ZPOPMIN key count`).
    Members {
        /// `WITHSCORES` (or a pop, which always answers scores).
        scores: bool,
    },
    /// One member and its score, or an empty array (`ZPOPMIN key`).
    PoppedOne,
    /// The key, the member and its score, or a null array (`BZPOPMIN`).
    KeyMemberScore,
}

/// A sorted set command parsed: its key, what it does, and how it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SortedSetCommand {
    pub(crate) key: Bytes,
    pub(crate) op: SortedSetOp,
    pub(crate) shape: Shape,
    /// For a blocking pop, how long to wait (`None`: without a limit).
    pub(crate) block: Option<Option<std::time::Duration>>,
}

fn not_a_float() -> CmdError {
    CmdError::Reply("ERR value is not a valid float".into())
}

/// A score as Redis reads one (`1.5`, `-inf`, `+inf`, `1e3`): NaN is refused, and so is a
/// number too large or too small for a double (`1e400`, `1e-400`), where only the words
/// `inf` and `infinity` mean infinity.
pub(crate) fn parse_score(text: &[u8]) -> Option<Score> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    let value = text.parse::<f64>().ok()?;
    let digits = text.trim_start_matches(['+', '-']);
    let word = digits.eq_ignore_ascii_case("inf") || digits.eq_ignore_ascii_case("infinity");
    let mantissa = digits.split(['e', 'E']).next().unwrap_or_default();
    let underflow = value == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'));
    if (value.is_infinite() && !word) || underflow {
        return None;
    }
    Score::new(value)
}

/// One end of a score range: `1.5`, `(1.5` (left out), `-inf`, `+inf`. Read as leniently as
/// Redis reads it: leading spaces are skipped and an empty end is 0.
fn score_bound(text: &[u8]) -> Result<ScoreBound, CmdError> {
    let (text, exclusive) = match text.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let text = text.trim_ascii_start();
    let score = if text.is_empty() {
        Score::new(0.0)
    } else {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .and_then(Score::new)
    };
    let score = score.ok_or_else(|| CmdError::Reply("ERR min or max is not a float".into()))?;
    Ok(ScoreBound { score, exclusive })
}

/// One end of a member range: `-`, `+`, `[m` (included), `(m` (left out).
fn lex_bound(text: &[u8]) -> Result<LexBound, CmdError> {
    match text.split_first() {
        Some((b'-', [])) => Ok(LexBound::Lowest),
        Some((b'+', [])) => Ok(LexBound::Highest),
        Some((b'[', rest)) => Ok(LexBound::Inclusive(Bytes::copy_from_slice(rest))),
        Some((b'(', rest)) => Ok(LexBound::Exclusive(Bytes::copy_from_slice(rest))),
        _ => Err(CmdError::Reply(
            "ERR min or max not valid string range item".into(),
        )),
    }
}

/// How a range's ends are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A range from its two ends as written (`min` then `max`).
fn range_of(by: By, min: &[u8], max: &[u8]) -> Result<ZRange, CmdError> {
    Ok(match by {
        By::Rank => {
            let int = |b: &[u8]| {
                trireme_types::int::parse_i64(b).ok_or(CmdError::Args(ArgError::NotInteger))
            };
            ZRange::Rank {
                start: int(min)?,
                stop: int(max)?,
            }
        }
        By::Score => ZRange::Score {
            min: score_bound(min)?,
            max: score_bound(max)?,
        },
        By::Lex => ZRange::Lex {
            min: lex_bound(min)?,
            max: lex_bound(max)?,
        },
    })
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`, checked in
/// Redis's order.
fn zadd(args: &mut Args) -> Result<(SortedSetOp, Shape), CmdError> {
    if args.remaining() < 2 {
        return Err(args.wrong_arity().into());
    }
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    loop {
        if args.next_keyword("nx") {
            nx = true;
        } else if args.next_keyword("xx") {
            xx = true;
        } else if args.next_keyword("gt") {
            gt = true;
        } else if args.next_keyword("lt") {
            lt = true;
        } else if args.next_keyword("ch") {
            ch = true;
        } else if args.next_keyword("incr") {
            incr = true;
        } else {
            break;
        }
    }
    let rest = args.rest();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(ArgError::Syntax.into());
    }
    if nx && xx {
        return Err(CmdError::Reply(
            "ERR XX and NX options at the same time are not compatible".into(),
        ));
    }
    if [gt, lt, nx].iter().filter(|set| **set).count() > 1 {
        return Err(CmdError::Reply(
            "ERR GT, LT, and/or NX options at the same time are not compatible".into(),
        ));
    }
    if incr && rest.len() > 2 {
        return Err(CmdError::Reply(
            "ERR INCR option supports a single increment-element pair".into(),
        ));
    }
    let mut members = Vec::with_capacity(rest.len() / 2);
    for pair in rest.chunks_exact(2) {
        members.push((
            parse_score(&pair[0]).ok_or_else(not_a_float)?,
            pair[1].clone(),
        ));
    }
    let op = SortedSetOp::Add {
        members,
        when: if nx {
            ZAddWhen::IfNew
        } else if xx {
            ZAddWhen::IfExists
        } else {
            ZAddWhen::Always
        },
        compare: if gt {
            ZAddCompare::Greater
        } else if lt {
            ZAddCompare::Less
        } else {
            ZAddCompare::Any
        },
        increment: incr,
        max_members: 0,
    };
    let shape = if incr {
        Shape::Score
    } else {
        Shape::Added { changed: ch }
    };
    Ok((op, shape))
}

/// The `ZRANGE` family: `name` fixes what `ZRANGE` leaves to its options.
fn zrange(name: &str, args: &mut Args) -> Result<(SortedSetOp, Shape), CmdError> {
    let first = args.next_bytes()?;
    let second = args.next_bytes()?;
    let (mut by, mut reverse, open) = match name {
        "zrange" => (None, None, true),
        "zrevrange" => (Some(By::Rank), Some(true), false),
        "zrangebyscore" => (Some(By::Score), Some(false), false),
        "zrevrangebyscore" => (Some(By::Score), Some(true), false),
        "zrangebylex" => (Some(By::Lex), Some(false), false),
        _ => (Some(By::Lex), Some(true), false),
    };
    let (mut scores, mut offset, mut limit) = (false, 0i64, -1i64);
    while args.remaining() > 0 {
        if args.next_keyword("withscores") {
            scores = true;
        } else if args.remaining() >= 3 && args.next_keyword("limit") {
            offset = args.next_i64()?;
            limit = args.next_i64()?;
        } else if open && reverse.is_none() && args.next_keyword("rev") {
            reverse = Some(true);
        } else if open && by.is_none() && args.next_keyword("bylex") {
            by = Some(By::Lex);
        } else if open && by.is_none() && args.next_keyword("byscore") {
            by = Some(By::Score);
        } else {
            return Err(ArgError::Syntax.into());
        }
    }
    let (by, reverse) = (by.unwrap_or(By::Rank), reverse.unwrap_or(false));
    if limit != -1 && by == By::Rank {
        return Err(CmdError::Reply(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .into(),
        ));
    }
    if scores && by == By::Lex {
        return Err(CmdError::Reply(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX".into(),
        ));
    }
    // A reversed range by score or member is written high end first.
    let range = if reverse && by != By::Rank {
        range_of(by, &second, &first)?
    } else {
        range_of(by, &first, &second)?
    };
    // A negative offset takes nothing, a negative count everything (as Redis); a range by
    // rank ignores `LIMIT offset -1`, the one form of it that it accepts.
    let (offset, limit) = match u64::try_from(offset) {
        _ if by == By::Rank => (0, u64::MAX),
        Ok(offset) => (offset, u64::try_from(limit).unwrap_or(u64::MAX)),
        Err(_) => (0, 0),
    };
    let read = SortedSetRead::Range {
        range,
        reverse,
        offset,
        limit,
    };
    Ok((SortedSetOp::Read(read), Shape::Members { scores }))
}

/// Parses a sorted set command (all but `ZSCAN`), as it runs alone or queued in a `MULTI`.
pub(crate) fn parse(args: &mut Args) -> Result<SortedSetCommand, CmdError> {
    let name = args.command_name();
    let key = args.next_bytes()?;
    let by_of = |name: &str| match name {
        n if n.ends_with("byscore") || n == "zcount" => By::Score,
        n if n.ends_with("bylex") || n == "zlexcount" => By::Lex,
        _ => By::Rank,
    };
    let mut block = None;
    let (op, shape) = match name.as_str() {
        "bzpopmin" | "bzpopmax" => {
            let (others, wait) = super::lists::other_keys_and_timeout(args, &key)?;
            block = Some(wait);
            let highest = name == "bzpopmax";
            // One key: the plain pop, which every cluster version knows.
            let op = if others.is_empty() {
                SortedSetOp::Pop { count: 1, highest }
            } else {
                SortedSetOp::PopFirst { highest, others }
            };
            (op, Shape::KeyMemberScore)
        }
        "zadd" => zadd(args)?,
        "zincrby" => {
            let by = parse_score(&args.next_bytes()?).ok_or_else(not_a_float)?;
            let member = args.next_bytes()?;
            no_more(args)?;
            let op = SortedSetOp::Add {
                members: vec![(by, member)],
                when: ZAddWhen::Always,
                compare: ZAddCompare::Any,
                increment: true,
                max_members: 0,
            };
            (op, Shape::Score)
        }
        "zrem" => {
            let members = args.rest();
            if members.is_empty() {
                return Err(args.wrong_arity().into());
            }
            (SortedSetOp::Remove { members }, Shape::Count)
        }
        "zscore" | "zmscore" => {
            let members = args.rest();
            if members.is_empty() || (name == "zscore" && members.len() != 1) {
                return Err(args.wrong_arity().into());
            }
            let shape = if name == "zscore" {
                Shape::Score
            } else {
                Shape::Scores
            };
            (SortedSetOp::Read(SortedSetRead::Scores { members }), shape)
        }
        "zcard" => {
            no_more(args)?;
            (SortedSetOp::Read(SortedSetRead::Len), Shape::Count)
        }
        "zcount" | "zlexcount" => {
            let (min, max) = (args.next_bytes()?, args.next_bytes()?);
            no_more(args)?;
            let range = range_of(by_of(&name), &min, &max)?;
            (
                SortedSetOp::Read(SortedSetRead::Count { range }),
                Shape::Count,
            )
        }
        "zrank" | "zrevrank" => {
            let member = args.next_bytes()?;
            no_more(args)?;
            let read = SortedSetRead::Rank {
                member,
                reverse: name == "zrevrank",
            };
            (SortedSetOp::Read(read), Shape::Rank)
        }
        "zpopmin" | "zpopmax" => {
            let highest = name == "zpopmax";
            if args.remaining() == 0 {
                (SortedSetOp::Pop { count: 1, highest }, Shape::PoppedOne)
            } else {
                let count = args.next_i64()?;
                no_more(args)?;
                let count = u64::try_from(count).map_err(|_| {
                    CmdError::Reply("ERR value is out of range, must be positive".into())
                })?;
                let op = SortedSetOp::Pop { count, highest };
                (op, Shape::Members { scores: true })
            }
        }
        "zremrangebyscore" | "zremrangebyrank" | "zremrangebylex" => {
            let (min, max) = (args.next_bytes()?, args.next_bytes()?);
            no_more(args)?;
            let range = range_of(by_of(&name), &min, &max)?;
            (SortedSetOp::RemoveRange { range }, Shape::Count)
        }
        name if name.starts_with("zrange") || name.starts_with("zrevrange") => zrange(name, args)?,
        _ => return Err(ArgError::Syntax.into()),
    };
    Ok(SortedSetCommand {
        key,
        op,
        shape,
        block,
    })
}

/// The reply to a sorted set command on `key` of `shape` that answered `outcome`.
pub(crate) fn reply(shape: Shape, key: &Bytes, outcome: SortedSetOutcome) -> CmdResult {
    let answer = outcome.0.map_err(|code| {
        CmdError::Reply(match code {
            ErrorCode::ValueTooLarge => {
                "ERR the sorted set would pass its member limit (max_collection_members)".into()
            }
            ErrorCode::InvalidArgument => "ERR resulting score is not a number (NaN)".into(),
            other => format!("ERR {other}"),
        })
    })?;
    let score = |s: Option<Score>| s.map_or(Reply::Null, |s| Reply::Double(s.get()));
    Ok(match (shape, answer) {
        (Shape::Count, SortedSetAnswer::Count(n)) => Reply::integer(n as i64),
        (Shape::Added { changed }, SortedSetAnswer::Added { added, updated }) => {
            Reply::integer((added + if changed { updated } else { 0 }) as i64)
        }
        (Shape::Score, SortedSetAnswer::Score(s)) => score(s),
        (Shape::Score, SortedSetAnswer::Scores(scores)) => score(scores.first().copied().flatten()),
        (Shape::Scores, SortedSetAnswer::Scores(scores)) => {
            Reply::array(scores.into_iter().map(score).collect())
        }
        (Shape::Rank, SortedSetAnswer::Rank(rank)) => {
            rank.map_or(Reply::Null, |r| Reply::integer(r as i64))
        }
        (Shape::Members { scores: true }, SortedSetAnswer::Pairs(pairs)) => Reply::Pairs(
            pairs
                .into_iter()
                .map(|(m, s)| (Reply::Bulk(m), Reply::Double(s.get())))
                .collect(),
        ),
        (Shape::Members { scores: false }, SortedSetAnswer::Pairs(pairs)) => {
            Reply::array(pairs.into_iter().map(|(m, _)| Reply::Bulk(m)).collect())
        }
        (Shape::PoppedOne, SortedSetAnswer::Pairs(pairs)) => Reply::array(
            pairs
                .into_iter()
                .take(1)
                .flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s.get())])
                .collect(),
        ),
        (Shape::KeyMemberScore, SortedSetAnswer::Popped(popped)) => match popped {
            Some((key, member, s)) => Reply::array(vec![
                Reply::Bulk(key),
                Reply::Bulk(member),
                Reply::Double(s.get()),
            ]),
            None => Reply::NullArray,
        },
        // A pop of one key (not blocking: in a `MULTI`).
        (Shape::KeyMemberScore, SortedSetAnswer::Pairs(pairs)) => match pairs.into_iter().next() {
            Some((member, s)) => Reply::array(vec![
                Reply::Bulk(key.clone()),
                Reply::Bulk(member),
                Reply::Double(s.get()),
            ]),
            None => Reply::NullArray,
        },
        (shape, other) => Reply::error(format!(
            "ERR internal: {shape:?} cannot answer with {other:?}"
        )),
    })
}

/// Runs a sorted set command parsed by [`parse`]: a read of a replica (the way this
/// connection reads), a write through the log, or a blocking pop that waits for a member.
pub(crate) async fn run(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    run_parsed(ctx, parse(args)?).await
}

/// Runs a sorted set command [`parse`] made.
pub(crate) async fn run_parsed(ctx: &mut Ctx<'_>, command: SortedSetCommand) -> CmdResult {
    let SortedSetCommand {
        key,
        op,
        shape,
        block,
    } = command;
    let node = &ctx.shared.node;
    let outcome = match (op, block) {
        (SortedSetOp::Read(read), _) => {
            node.sorted_set_read(&key, read, ctx.client.read_mode)
                .await?
        }
        (op, Some(wait)) => {
            let highest = match &op {
                SortedSetOp::Pop { highest, .. } | SortedSetOp::PopFirst { highest, .. } => {
                    *highest
                }
                _ => false,
            };
            let mut keys = vec![key.clone()];
            if let SortedSetOp::PopFirst { others, .. } = op {
                keys.extend(others);
            }
            let hung_up = ctx.client.hung_up.clone();
            node.sorted_set_pop_blocking(keys, highest, wait, hung_up)
                .await?
        }
        (op, None) => node.sorted_set(key.clone(), op).await?,
    };
    reply(shape, &key, outcome)
}

/// `ZSCAN key cursor [MATCH pattern] [COUNT n]`: members in member order, each followed by
/// its score as a string (in RESP3 too, as Redis answers), cursors as for `HSCAN`.
pub(crate) async fn zscan(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let key = args.next_bytes()?;
    let Some(scan) = ScanPage::parse(ctx, args, false)? else {
        return Ok(ScanPage::over());
    };
    let read = SortedSetRead::Members {
        after: scan.after.clone(),
        limit: scan.count,
    };
    let outcome = ctx
        .shared
        .node
        .sorted_set_read(&key, read, ctx.client.read_mode)
        .await?;
    let page = match outcome.0 {
        Ok(SortedSetAnswer::Pairs(pairs)) => pairs,
        other => return reply(Shape::Count, &key, SortedSetOutcome(other)),
    };
    let (read, last) = (page.len(), page.last().map(|(m, _)| m.clone()));
    let items = page
        .into_iter()
        .filter(|(m, _)| scan.keeps(m))
        .flat_map(|(m, s)| [Reply::Bulk(m), Reply::bulk(format_double(s.get()))])
        .collect();
    Ok(scan.reply(ctx, read, last, items))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(words: &[&str]) -> Result<SortedSetCommand, String> {
        let request = words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        parse(&mut Args::new(request)).map_err(|e| match Reply::from(e) {
            Reply::Error(text) => text,
            other => format!("{other:?}"),
        })
    }

    #[test]
    fn zadd_options_are_checked_as_redis_checks_them() {
        let err = |words: &[&str]| parsed(words).unwrap_err();
        assert_eq!(
            err(&["zadd", "z", "nx", "xx", "1", "a"]),
            "ERR XX and NX options at the same time are not compatible"
        );
        assert!(err(&["zadd", "z", "gt", "lt", "1", "a"]).starts_with("ERR GT, LT"));
        assert!(err(&["zadd", "z", "incr", "1", "a", "2", "b"]).starts_with("ERR INCR option"));
        assert_eq!(err(&["zadd", "z", "1", "a", "2"]), "ERR syntax error");
        assert_eq!(
            err(&["zadd", "z", "nan", "a"]),
            "ERR value is not a valid float"
        );
        assert_eq!(
            err(&["zadd", "z", " 1", "a"]),
            "ERR value is not a valid float"
        );
        let command = parsed(&["zadd", "z", "XX", "ch", "gt", "-inf", "a", "1e3", "b"]).unwrap();
        assert_eq!(command.shape, Shape::Added { changed: true });
        let SortedSetOp::Add {
            members,
            when,
            compare,
            increment,
            ..
        } = command.op
        else {
            panic!("not an add");
        };
        assert_eq!(
            (when, compare, increment),
            (ZAddWhen::IfExists, ZAddCompare::Greater, false)
        );
        assert_eq!(members[0].0.get(), f64::NEG_INFINITY);
        assert_eq!(members[1].0.get(), 1000.0);
    }

    #[test]
    fn zrange_options_follow_redis() {
        let err = |words: &[&str]| parsed(words).unwrap_err();
        assert!(
            err(&["zrange", "z", "0", "1", "limit", "0", "1"]).contains("LIMIT is only supported")
        );
        assert!(
            err(&["zrange", "z", "-", "+", "bylex", "withscores"])
                .contains("WITHSCORES not supported")
        );
        assert_eq!(
            err(&["zrangebyscore", "z", "0", "1", "rev"]),
            "ERR syntax error"
        );
        assert_eq!(
            err(&["zrangebyscore", "z", "a", "1"]),
            "ERR min or max is not a float"
        );
        assert_eq!(
            err(&["zrangebylex", "z", "a", "+"]),
            "ERR min or max not valid string range item"
        );
        // Reversed by score: the high end first.
        let command = parsed(&[
            "zrange", "z", "(5", "1", "byscore", "rev", "limit", "1", "2",
        ])
        .unwrap();
        let SortedSetOp::Read(SortedSetRead::Range {
            range,
            reverse,
            offset,
            limit,
        }) = command.op
        else {
            panic!("not a range");
        };
        assert!(reverse);
        assert_eq!((offset, limit), (1, 2));
        let ZRange::Score { min, max } = range else {
            panic!("not by score")
        };
        assert_eq!((min.score.get(), min.exclusive), (1.0, false));
        assert_eq!((max.score.get(), max.exclusive), (5.0, true));
    }
}
