//! What the hash and set commands share: walking a collection's members a page at a time
//! (`HSCAN`, `SSCAN`) and drawing random members (`HRANDFIELD`, `SRANDMEMBER`).

use super::{CmdError, Ctx};
use crate::{ArgError, Args, Reply};
use bytes::Bytes;
use rand::Rng;

/// Members one page of a scan reads at most, whatever `COUNT` asks.
const PAGE: u64 = 1_000;

/// A page of `HSCAN` / `SSCAN` to read: after which member, how many, and what to keep.
pub(crate) struct ScanPage {
    pub(crate) after: Option<Bytes>,
    pub(crate) count: u64,
    pub(crate) pattern: Option<Bytes>,
    /// `NOVALUES` (`HSCAN` only) was not given.
    pub(crate) with_values: bool,
}

impl ScanPage {
    /// Parses `cursor [MATCH pattern] [COUNT n] [NOVALUES]` (`NOVALUES` only when
    /// `novalues` allows it). A cursor is handed out by the node and remembers the last
    /// member returned; `None` for one the node does not know (the scan is over).
    pub(crate) fn parse(
        ctx: &Ctx<'_>,
        args: &mut Args,
        novalues: bool,
    ) -> Result<Option<ScanPage>, CmdError> {
        let cursor = args
            .next_u64()
            .map_err(|_| CmdError::Reply("ERR invalid cursor".into()))?;
        let mut page = ScanPage {
            after: None,
            count: 10,
            pattern: None,
            with_values: true,
        };
        while args.remaining() > 0 {
            if args.next_keyword("match") {
                page.pattern = Some(args.next_bytes()?);
            } else if args.next_keyword("count") {
                let n = args.next_i64()?;
                if n < 1 {
                    return Err(ArgError::Syntax.into());
                }
                page.count = (n as u64).min(PAGE);
            } else if novalues && args.next_keyword("novalues") {
                page.with_values = false;
            } else {
                return Err(ArgError::Syntax.into());
            }
        }
        // A page is never more than one read answers: a shorter answer would end the scan.
        let most = ctx.shared.node.config().limits.max_collection_read.max(1);
        page.count = page.count.min(most);
        if cursor != 0 {
            match ctx.shared.cursor(cursor) {
                Some((_, after)) => page.after = after,
                None => return Ok(None),
            }
        }
        Ok(Some(page))
    }

    /// Whether `member` is kept (`MATCH`).
    pub(crate) fn keeps(&self, member: &[u8]) -> bool {
        self.pattern
            .as_ref()
            .is_none_or(|p| crate::glob::matches(p, member))
    }

    /// The reply: the next cursor (0 when the page came back short, so the walk is over)
    /// and `items`.
    pub(crate) fn reply(
        &self,
        ctx: &Ctx<'_>,
        read: usize,
        last: Option<Bytes>,
        items: Vec<Reply>,
    ) -> Reply {
        let next = if read as u64 >= self.count {
            ctx.shared.save_cursor((trireme_types::ShardId(0), last))
        } else {
            0
        };
        Reply::array(vec![Reply::bulk(next.to_string()), Reply::array(items)])
    }

    /// The reply to a cursor the node does not know: the walk is over.
    pub(crate) fn over() -> Reply {
        Reply::array(vec![Reply::bulk("0"), Reply::array(vec![])])
    }
}

/// A `count` argument of `HRANDFIELD` / `SRANDMEMBER`, range-checked as Redis does.
pub(crate) fn random_count(args: &mut Args) -> Result<Option<i64>, CmdError> {
    if args.remaining() == 0 {
        return Ok(None);
    }
    let n = args.next_i64()?;
    if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) {
        return Err(CmdError::Reply("ERR value is out of range".into()));
    }
    Ok(Some(n))
}

/// Members drawn from `all`: with a positive `wanted`, that many distinct ones at most; with
/// a negative one, exactly that many (at most `cap`), repeats allowed.
pub(crate) fn draw<T: Clone>(all: &[T], wanted: i64, cap: u64) -> Vec<T> {
    let mut rng = rand::rng();
    if all.is_empty() {
        Vec::new()
    } else if wanted < 0 {
        (0..wanted.unsigned_abs().min(cap))
            .map(|_| all[rng.random_range(0..all.len())].clone())
            .collect()
    } else {
        let n = (wanted as usize).min(all.len());
        rand::seq::index::sample(&mut rng, all.len(), n)
            .into_iter()
            .map(|i| all[i].clone())
            .collect()
    }
}

/// One member drawn from `all`, if any.
pub(crate) fn draw_one<T: Clone>(all: &[T]) -> Option<T> {
    (!all.is_empty()).then(|| all[rand::rng().random_range(0..all.len())].clone())
}
