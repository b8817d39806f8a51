//! Redis sorted sets in the state machine: the set's record keeps its member count; each
//! member has a member row (its value the score) and a score row ordered by score then
//! member (see [`trireme_types::sorted`]), so ranks and score ranges walk neighbouring rows.

use super::Pending;
use super::hash::{InBatch, MemberSource, Stored};
use super::rows::RowSpan;
use crate::StorageError;
use bytes::Bytes;
use std::collections::BTreeSet;
use std::ops::Bound;
use trireme_types::collection::{decode_count, member_key, member_prefix};
use trireme_types::sorted::{score_key, score_prefix, score_suffix, split_score_suffix};
use trireme_types::{
    ErrorCode, LexBound, Record, Score, ScoreBound, SortedSetAnswer, SortedSetOp, SortedSetRead,
    ValueKind, ZAddCompare, ZAddWhen, ZRange,
};

/// The live sorted set at `key`: `Err(WrongType)` for a key of another type.
fn head(
    source: &mut impl MemberSource,
    key: &Bytes,
) -> Result<Result<Option<Record>, ErrorCode>, StorageError> {
    Ok(match source.head(key)? {
        Some(head) if head.kind != ValueKind::SortedSet => Err(ErrorCode::WrongType),
        head => Ok(head),
    })
}

/// The first eight bytes sorting after every score row of `score`.
fn after_score(score: Score) -> Vec<u8> {
    (u64::from_be_bytes(score.sortable()) + 1)
        .to_be_bytes()
        .to_vec()
}

/// The score rows of the sorted set at `key` from `min` to `max`.
fn score_span(
    key: &[u8],
    version: u64,
    min: ScoreBound,
    max: ScoreBound,
    reverse: bool,
) -> RowSpan {
    RowSpan {
        prefix: score_prefix(key, version),
        lower: if min.exclusive {
            Bound::Included(after_score(min.score))
        } else {
            Bound::Included(min.score.sortable().to_vec())
        },
        upper: if max.exclusive {
            Bound::Excluded(max.score.sortable().to_vec())
        } else {
            Bound::Excluded(after_score(max.score))
        },
        reverse,
    }
}

/// The member rows of the sorted set at `key` from `min` to `max`; `None` when the range
/// takes nothing whatever the set holds (`+` as its low end, `-` as its high end).
fn lex_span(
    key: &[u8],
    version: u64,
    min: &LexBound,
    max: &LexBound,
    reverse: bool,
) -> Option<RowSpan> {
    Some(RowSpan {
        prefix: member_prefix(key, version),
        lower: match min {
            LexBound::Lowest => Bound::Unbounded,
            LexBound::Highest => return None,
            LexBound::Inclusive(m) => Bound::Included(m.to_vec()),
            LexBound::Exclusive(m) => Bound::Excluded(m.to_vec()),
        },
        upper: match max {
            LexBound::Highest => Bound::Unbounded,
            LexBound::Lowest => return None,
            LexBound::Inclusive(m) => Bound::Included(m.to_vec()),
            LexBound::Exclusive(m) => Bound::Excluded(m.to_vec()),
        },
        reverse,
    })
}

/// Redis's ranks `start..=stop` (negative from the end) of a set of `len`, as the number of
/// members to skip and to take; `None` when the range holds none.
pub(super) fn rank_window(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 {
        start.saturating_add(len)
    } else {
        start
    }
    .max(0);
    let stop = if stop < 0 {
        stop.saturating_add(len)
    } else {
        stop
    }
    .min(len - 1);
    (start <= stop && start < len).then(|| (start as u64, (stop - start + 1) as u64))
}

/// The members and scores that score rows (their remainders after the prefix) name.
pub(super) fn from_score_rows(
    rows: Vec<(Bytes, Bytes)>,
) -> Result<Vec<(Bytes, Score)>, StorageError> {
    rows.into_iter()
        .map(|(suffix, _)| {
            split_score_suffix(&suffix)
                .map(|(score, member)| (member, score))
                .ok_or_else(|| StorageError::Corrupt("a sorted set score row".into()))
        })
        .collect()
}

/// The score in a member row's value.
fn decode_score(value: &[u8]) -> Result<Score, StorageError> {
    Score::from_row(value).ok_or_else(|| StorageError::Corrupt("a sorted set score".into()))
}

/// The members in `range` of the sorted set at `key` (whose record is `head`), with their
/// scores, skipping `offset` and taking at most `limit`.
fn range(
    source: &mut impl MemberSource,
    key: &Bytes,
    head: &Record,
    range: &ZRange,
    reverse: bool,
    offset: u64,
    limit: u64,
) -> Result<Vec<(Bytes, Score)>, StorageError> {
    match range {
        ZRange::Rank { start, stop } => {
            let Some((skip, take)) = rank_window(*start, *stop, decode_count(&head.value)) else {
                return Ok(Vec::new());
            };
            let span = RowSpan {
                reverse,
                ..RowSpan::all(score_prefix(key, head.create_index))
            };
            let skip = skip.saturating_add(offset);
            let take = take.saturating_sub(offset).min(limit);
            from_score_rows(source.rows(&span, skip, take)?)
        }
        ZRange::Score { min, max } => {
            let span = score_span(key, head.create_index, *min, *max, reverse);
            from_score_rows(source.rows(&span, offset, limit)?)
        }
        ZRange::Lex { min, max } => {
            let Some(span) = lex_span(key, head.create_index, min, max, reverse) else {
                return Ok(Vec::new());
            };
            source
                .rows(&span, offset, limit)?
                .into_iter()
                .map(|(member, value)| Ok((member, decode_score(&value)?)))
                .collect()
        }
    }
}

/// Answers `read` of the sorted set at `key` from `source`.
fn read(
    source: &mut impl MemberSource,
    key: &Bytes,
    read: &SortedSetRead,
) -> Result<Result<SortedSetAnswer, ErrorCode>, StorageError> {
    let head = match head(source, key)? {
        Ok(Some(head)) => head,
        Ok(None) => {
            return Ok(Ok(match read {
                SortedSetRead::Len | SortedSetRead::Count { .. } => SortedSetAnswer::Count(0),
                SortedSetRead::Scores { members } => {
                    SortedSetAnswer::Scores(vec![None; members.len()])
                }
                SortedSetRead::Rank { .. } => SortedSetAnswer::Rank(None),
                SortedSetRead::Range { .. } | SortedSetRead::Members { .. } => {
                    SortedSetAnswer::Pairs(Vec::new())
                }
            }));
        }
        Err(code) => return Ok(Err(code)),
    };
    Ok(Ok(match read {
        SortedSetRead::Len => SortedSetAnswer::Count(decode_count(&head.value)),
        SortedSetRead::Scores { members } => {
            let mut scores = Vec::with_capacity(members.len());
            for member in members {
                scores.push(
                    match source.member(&member_key(key, head.create_index, member))? {
                        Some(value) => Some(decode_score(&value)?),
                        None => None,
                    },
                );
            }
            SortedSetAnswer::Scores(scores)
        }
        SortedSetRead::Rank { member, reverse } => {
            let Some(value) = source.member(&member_key(key, head.create_index, member))? else {
                return Ok(Ok(SortedSetAnswer::Rank(None)));
            };
            let at = score_suffix(decode_score(&value)?, member);
            let all = RowSpan::all(score_prefix(key, head.create_index));
            let before = if *reverse {
                RowSpan {
                    lower: Bound::Excluded(at),
                    ..all
                }
            } else {
                RowSpan {
                    upper: Bound::Excluded(at),
                    ..all
                }
            };
            SortedSetAnswer::Rank(Some(source.count(&before)?))
        }
        SortedSetRead::Count { range } => SortedSetAnswer::Count(match range {
            ZRange::Rank { start, stop } => {
                rank_window(*start, *stop, decode_count(&head.value)).map_or(0, |(_, n)| n)
            }
            ZRange::Score { min, max } => {
                source.count(&score_span(key, head.create_index, *min, *max, false))?
            }
            ZRange::Lex { min, max } => match lex_span(key, head.create_index, min, max, false) {
                Some(span) => source.count(&span)?,
                None => 0,
            },
        }),
        SortedSetRead::Range {
            range: which,
            reverse,
            offset,
            limit,
        } => SortedSetAnswer::Pairs(range(source, key, &head, which, *reverse, *offset, *limit)?),
        SortedSetRead::Members { after, limit } => {
            let mut pairs = Vec::new();
            let prefix = member_prefix(key, head.create_index);
            for (member, value) in source.members(&prefix, after.as_deref(), *limit)? {
                pairs.push((member, decode_score(&value)?));
            }
            SortedSetAnswer::Pairs(pairs)
        }
    }))
}

impl crate::ShardView<'_> {
    /// Answers a read of the sorted set at `key` as this view holds it at `now`.
    pub fn sorted_set_read(
        &self,
        key: &Bytes,
        sorted_read: &SortedSetRead,
        now: u64,
    ) -> Result<Result<SortedSetAnswer, ErrorCode>, StorageError> {
        let mut stored = Stored {
            snapshot: self.snapshot(),
            shard: self.shard().0,
            now,
        };
        read(&mut stored, key, sorted_read)
    }
}

impl Pending<'_> {
    /// Gives `member` of version `version` of the sorted set at `key` the score `to` (it
    /// had `from`).
    fn write_score(
        &mut self,
        key: &Bytes,
        version: u64,
        member: &Bytes,
        from: Option<Score>,
        to: Score,
        index: u64,
    ) -> Result<(), StorageError> {
        if let Some(from) = from {
            self.set(score_key(key, version, from, member), None)?;
        }
        self.set(
            score_key(key, version, to, member),
            Some(Record::string(Bytes::new(), index)),
        )?;
        self.set(
            member_key(key, version, member),
            Some(Record::string(to.to_row(), index)),
        )
    }

    /// Removes `member` (at `score`) from version `version` of the sorted set at `key`; the
    /// record is the caller's to update.
    fn remove_scored(
        &mut self,
        key: &Bytes,
        version: u64,
        member: &Bytes,
        score: Score,
    ) -> Result<(), StorageError> {
        self.set(score_key(key, version, score, member), None)?;
        self.set(member_key(key, version, member), None)
    }

    /// The score `member` has in version `version` of the sorted set at `key`, as this
    /// batch sees it.
    fn score_in_batch(
        &mut self,
        key: &Bytes,
        version: u64,
        member: &Bytes,
    ) -> Result<Option<Score>, StorageError> {
        match self.member_number(&member_key(key, version, member), ValueKind::SortedSet)? {
            Some(bits) => Ok(Some(decode_score(&bits.to_be_bytes())?)),
            None => Ok(None),
        }
    }

    /// `ZADD` / `ZINCRBY` on the sorted set at `key` whose live record is `before`.
    #[allow(clippy::too_many_arguments)]
    fn add_scored(
        &mut self,
        key: &Bytes,
        before: Option<&Record>,
        members: &[(Score, Bytes)],
        when: ZAddWhen,
        compare: ZAddCompare,
        increment: bool,
        max: u64,
        index: u64,
    ) -> Result<Result<SortedSetAnswer, ErrorCode>, StorageError> {
        let count = before.map_or(0, |h| decode_count(&h.value));
        let version = before.map_or(index, |h| h.create_index);
        // Checked before anything is written: a command past the limit changes nothing.
        if when != ZAddWhen::IfExists {
            let mut new = BTreeSet::new();
            for (_, member) in members {
                if before.is_none() || self.score_in_batch(key, version, member)?.is_none() {
                    new.insert(member);
                }
            }
            if !new.is_empty() && count.saturating_add(new.len() as u64) > max {
                return Ok(Err(ErrorCode::ValueTooLarge));
            }
        }
        if before.is_none() && self.raw(key)?.is_some() {
            // Whatever an expired key of this name left goes first.
            self.set(key.clone(), None)?;
        }
        let (mut added, mut updated, mut last) = (0u64, 0u64, None);
        for (score, member) in members {
            last = None;
            let current = match before {
                Some(_) => self.score_in_batch(key, version, member)?,
                None if added > 0 => self.score_in_batch(key, version, member)?,
                None => None,
            };
            match current {
                Some(current) => {
                    if when == ZAddWhen::IfNew {
                        continue;
                    }
                    let target = if increment {
                        match Score::new(current.get() + score.get()) {
                            Some(target) => target,
                            None => return Ok(Err(ErrorCode::InvalidArgument)),
                        }
                    } else {
                        *score
                    };
                    let allowed = match compare {
                        ZAddCompare::Any => true,
                        ZAddCompare::Greater => target > current,
                        ZAddCompare::Less => target < current,
                    };
                    if !allowed {
                        continue;
                    }
                    if target != current {
                        self.write_score(key, version, member, Some(current), target, index)?;
                        updated += 1;
                    }
                    last = Some(target);
                }
                None => {
                    if when == ZAddWhen::IfExists {
                        continue;
                    }
                    self.write_score(key, version, member, None, *score, index)?;
                    added += 1;
                    last = Some(*score);
                }
            }
        }
        if added + updated > 0 {
            self.set_head(key, before, count + added, index, ValueKind::SortedSet)?;
        }
        Ok(Ok(if increment {
            SortedSetAnswer::Score(last)
        } else {
            SortedSetAnswer::Added { added, updated }
        }))
    }

    /// Removes `pairs` (members and their scores) from the sorted set at `key` whose live
    /// record is `head`.
    fn remove_pairs(
        &mut self,
        key: &Bytes,
        head: &Record,
        pairs: &[(Bytes, Score)],
        index: u64,
    ) -> Result<(), StorageError> {
        if pairs.is_empty() {
            return Ok(());
        }
        for (member, score) in pairs {
            self.remove_scored(key, head.create_index, member, *score)?;
        }
        let count = decode_count(&head.value).saturating_sub(pairs.len() as u64);
        self.set_head(key, Some(head), count, index, ValueKind::SortedSet)
    }

    /// The `count` members with the lowest scores (with `highest`, the highest) of the
    /// sorted set at `key`, as this batch sees it, lowest (highest) first. Many pops of one
    /// set in one batch would each walk every earlier pop's deleted rows; the batch remembers
    /// where its pops of the set reached, and the next one starts there.
    fn pop_scored(
        &mut self,
        key: &Bytes,
        version: u64,
        count: u64,
        highest: bool,
    ) -> Result<Vec<(Bytes, Score)>, StorageError> {
        let prefix = score_prefix(key, version);
        let mut span = RowSpan {
            reverse: highest,
            ..RowSpan::all(prefix.clone())
        };
        if let Some((_, _, reached)) = self
            .pop_hints
            .iter()
            .find(|(p, end, _)| *p == prefix && *end == highest)
        {
            if highest {
                span.upper = Bound::Included(reached.to_vec());
            } else {
                span.lower = Bound::Included(reached.to_vec());
            }
        }
        let rows = self.rows_in(&span, 0, count, false)?;
        if let Some((last, _)) = rows.last() {
            self.pop_hints
                .retain(|(p, end, _)| !(*p == prefix && *end == highest));
            self.pop_hints.push((prefix, highest, last.clone()));
        }
        from_score_rows(rows)
    }

    /// Applies a sorted set command to `key` at `index`.
    pub(super) fn sorted_set(
        &mut self,
        key: &Bytes,
        op: &SortedSetOp,
        index: u64,
        now: u64,
    ) -> Result<Result<SortedSetAnswer, ErrorCode>, StorageError> {
        if let SortedSetOp::Read(sorted_read) = op {
            return read(&mut InBatch { pending: self, now }, key, sorted_read);
        }
        if let SortedSetOp::PopFirst { highest, others } = op {
            for candidate in std::iter::once(key).chain(others) {
                match head(&mut InBatch { pending: self, now }, candidate)? {
                    Err(code) => return Ok(Err(code)),
                    Ok(Some(head)) => {
                        let pairs = self.pop_scored(candidate, head.create_index, 1, *highest)?;
                        self.remove_pairs(candidate, &head, &pairs, index)?;
                        let popped = pairs
                            .into_iter()
                            .next()
                            .map(|(member, score)| (candidate.clone(), member, score));
                        return Ok(Ok(SortedSetAnswer::Popped(popped)));
                    }
                    Ok(None) => {}
                }
            }
            return Ok(Ok(SortedSetAnswer::Popped(None)));
        }
        let before = match head(&mut InBatch { pending: self, now }, key)? {
            Ok(before) => before,
            Err(code) => return Ok(Err(code)),
        };
        if let SortedSetOp::Add {
            members,
            when,
            compare,
            increment,
            max_members,
        } = op
        {
            return self.add_scored(
                key,
                before.as_ref(),
                members,
                *when,
                *compare,
                *increment,
                *max_members,
                index,
            );
        }
        let Some(head) = before else {
            return Ok(Ok(match op {
                SortedSetOp::Pop { .. } => SortedSetAnswer::Pairs(Vec::new()),
                _ => SortedSetAnswer::Count(0),
            }));
        };
        Ok(Ok(match op {
            SortedSetOp::Add { .. } | SortedSetOp::Read(_) | SortedSetOp::PopFirst { .. } => {
                unreachable!("answered above")
            }
            SortedSetOp::Remove { members } => {
                let mut pairs = Vec::new();
                let mut seen = BTreeSet::new();
                for member in members {
                    if seen.insert(member)
                        && let Some(score) = self.score_in_batch(key, head.create_index, member)?
                    {
                        pairs.push((member.clone(), score));
                    }
                }
                self.remove_pairs(key, &head, &pairs, index)?;
                SortedSetAnswer::Count(pairs.len() as u64)
            }
            SortedSetOp::Pop { count, highest } => {
                let pairs = self.pop_scored(key, head.create_index, *count, *highest)?;
                self.remove_pairs(key, &head, &pairs, index)?;
                SortedSetAnswer::Pairs(pairs)
            }
            SortedSetOp::RemoveRange { range: which } => {
                let pairs = range(
                    &mut InBatch { pending: self, now },
                    key,
                    &head,
                    which,
                    false,
                    0,
                    u64::MAX,
                )?;
                self.remove_pairs(key, &head, &pairs, index)?;
                SortedSetAnswer::Count(pairs.len() as u64)
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{apply_all, storage};
    use super::*;
    use trireme_types::ShardId;

    fn score(value: f64) -> Score {
        Score::new(value).expect("a number")
    }

    fn zadd(pairs: &[(f64, &str)]) -> SortedSetOp {
        SortedSetOp::Add {
            members: pairs
                .iter()
                .map(|(s, m)| (score(*s), Bytes::copy_from_slice(m.as_bytes())))
                .collect(),
            when: ZAddWhen::Always,
            compare: ZAddCompare::Any,
            increment: false,
            max_members: 100,
        }
    }

    fn range_read(range: ZRange, reverse: bool) -> SortedSetRead {
        SortedSetRead::Range {
            range,
            reverse,
            offset: 0,
            limit: u64::MAX,
        }
    }

    fn names(answer: &SortedSetAnswer) -> Vec<String> {
        match answer {
            SortedSetAnswer::Pairs(pairs) => pairs
                .iter()
                .map(|(m, s)| format!("{}={}", String::from_utf8_lossy(m), s.get()))
                .collect(),
            other => panic!("not pairs: {other:?}"),
        }
    }

    fn inclusive(value: f64) -> ScoreBound {
        ScoreBound {
            score: score(value),
            exclusive: false,
        }
    }

    #[test]
    fn members_order_by_score_then_name_and_ranges_walk_that_order() {
        let (_dir, storage) = storage();
        let key = Bytes::from_static(b"board");
        let results = apply_all(
            &storage,
            &key,
            vec![
                zadd(&[(2.0, "b"), (1.0, "c"), (2.0, "a"), (-1.5, "z")]),
                zadd(&[(3.0, "c")]),
                SortedSetOp::Read(range_read(ZRange::Rank { start: 0, stop: -1 }, false)),
                SortedSetOp::Read(range_read(ZRange::Rank { start: 0, stop: 1 }, true)),
                SortedSetOp::Read(SortedSetRead::Rank {
                    member: Bytes::from_static(b"b"),
                    reverse: false,
                }),
                SortedSetOp::Read(SortedSetRead::Count {
                    range: ZRange::Score {
                        min: ScoreBound {
                            score: score(-1.5),
                            exclusive: true,
                        },
                        max: inclusive(2.0),
                    },
                }),
            ],
        );
        assert_eq!(
            results[0],
            Ok(SortedSetAnswer::Added {
                added: 4,
                updated: 0
            })
        );
        assert_eq!(
            results[1],
            Ok(SortedSetAnswer::Added {
                added: 0,
                updated: 1
            })
        );
        assert_eq!(
            names(results[2].as_ref().unwrap()),
            ["z=-1.5", "a=2", "b=2", "c=3"]
        );
        assert_eq!(names(results[3].as_ref().unwrap()), ["c=3", "b=2"]);
        assert_eq!(results[4], Ok(SortedSetAnswer::Rank(Some(2))));
        assert_eq!(results[5], Ok(SortedSetAnswer::Count(2)));
        // The old score row of "c" went with its update: a read from the store agrees.
        let stored = storage
            .shard_view(ShardId(0))
            .sorted_set_read(
                &key,
                &range_read(
                    ZRange::Score {
                        min: inclusive(0.0),
                        max: inclusive(f64::INFINITY),
                    },
                    false,
                ),
                0,
            )
            .unwrap();
        assert_eq!(names(stored.as_ref().unwrap()), ["a=2", "b=2", "c=3"]);
    }

    #[test]
    fn conditions_increments_pops_and_removals() {
        let (_dir, storage) = storage();
        let key = Bytes::from_static(b"z");
        let incr = |when, compare, by: f64| SortedSetOp::Add {
            members: vec![(score(by), Bytes::from_static(b"m"))],
            when,
            compare,
            increment: true,
            max_members: 100,
        };
        let results = apply_all(
            &storage,
            &key,
            vec![
                incr(ZAddWhen::IfExists, ZAddCompare::Any, 1.0),
                incr(ZAddWhen::Always, ZAddCompare::Any, 5.0),
                incr(ZAddWhen::Always, ZAddCompare::Greater, -1.0),
                incr(ZAddWhen::IfNew, ZAddCompare::Any, 1.0),
                incr(ZAddWhen::Always, ZAddCompare::Less, -1.5),
                zadd(&[(1.0, "a"), (2.0, "b"), (3.0, "c"), (9.0, "d")]),
                SortedSetOp::Pop {
                    count: 2,
                    highest: true,
                },
                SortedSetOp::RemoveRange {
                    range: ZRange::Lex {
                        min: LexBound::Exclusive(Bytes::from_static(b"a")),
                        max: LexBound::Highest,
                    },
                },
                SortedSetOp::Remove {
                    members: vec![Bytes::from_static(b"a"), Bytes::from_static(b"a")],
                },
                SortedSetOp::Read(SortedSetRead::Len),
                incr(ZAddWhen::Always, ZAddCompare::Any, f64::INFINITY),
                incr(ZAddWhen::Always, ZAddCompare::Any, f64::NEG_INFINITY),
            ],
        );
        assert_eq!(results[0], Ok(SortedSetAnswer::Score(None)));
        assert_eq!(results[1], Ok(SortedSetAnswer::Score(Some(score(5.0)))));
        assert_eq!(results[2], Ok(SortedSetAnswer::Score(None)));
        assert_eq!(results[3], Ok(SortedSetAnswer::Score(None)));
        assert_eq!(results[4], Ok(SortedSetAnswer::Score(Some(score(3.5)))));
        assert_eq!(names(results[6].as_ref().unwrap()), ["d=9", "m=3.5"]);
        // Lex ranges walk member order: b and c go, a stays.
        assert_eq!(results[7], Ok(SortedSetAnswer::Count(2)));
        assert_eq!(results[8], Ok(SortedSetAnswer::Count(1)));
        assert_eq!(results[9], Ok(SortedSetAnswer::Count(0)));
        assert_eq!(
            results[10],
            Ok(SortedSetAnswer::Score(Some(score(f64::INFINITY))))
        );
        // inf + -inf is not a number: refused, the score stays.
        assert_eq!(results[11], Err(ErrorCode::InvalidArgument));
    }

    #[test]
    fn a_zadd_past_the_limit_adds_nothing() {
        let (_dir, storage) = storage();
        let key = Bytes::from_static(b"z");
        let mut big = zadd(&[(1.0, "a"), (2.0, "b"), (3.0, "c")]);
        if let SortedSetOp::Add { max_members, .. } = &mut big {
            *max_members = 2;
        }
        let results = apply_all(
            &storage,
            &key,
            vec![big, SortedSetOp::Read(SortedSetRead::Len)],
        );
        assert_eq!(results[0], Err(ErrorCode::ValueTooLarge));
        assert_eq!(results[1], Ok(SortedSetAnswer::Count(0)));
    }

    #[test]
    fn a_deleted_sorted_set_leaves_no_score_rows_behind() {
        use super::super::testing::run;
        use trireme_types::{Command, CommandResult};
        let (_dir, storage) = storage();
        let key = Bytes::from_static(b"gone");
        apply_all(&storage, &key, vec![zadd(&[(1.0, "a"), (2.0, "b")])]);
        let delete = Command::Delete {
            keys: vec![key.clone()],
            cas: None,
        };
        assert_eq!(
            run(&storage, 2, vec![delete]),
            vec![CommandResult::Deleted(1)]
        );
        // Created again: a rank or a range that found an old score row would count it.
        let again = Command::SortedSet {
            key: key.clone(),
            op: zadd(&[(5.0, "c")]),
        };
        run(&storage, 3, vec![again]);
        let read = |r: SortedSetRead| {
            storage
                .shard_view(ShardId(0))
                .sorted_set_read(&key, &r, 0)
                .unwrap()
        };
        assert_eq!(
            read(SortedSetRead::Rank {
                member: Bytes::from_static(b"c"),
                reverse: false
            }),
            Ok(SortedSetAnswer::Rank(Some(0)))
        );
        let all = read(range_read(ZRange::Rank { start: 0, stop: -1 }, false));
        assert_eq!(names(all.as_ref().unwrap()), ["c=5"]);
        let mut rows = 0;
        assert!(storage.wait_for_purges(std::time::Duration::from_secs(10)));
        storage
            .shard_view(ShardId(0))
            .for_each_record(|_, _| rows += 1)
            .unwrap();
        // The key's record, one member row, one score row: the deleted set's rows are
        // purged in the background.
        assert_eq!(rows, 3);
    }

    #[test]
    fn many_pops_in_one_batch_stay_right_when_rows_come_back() {
        use super::super::testing::run;
        use trireme_types::{Command, CommandResult, KeyCheck};
        let (_dir, storage) = storage();
        let key = Bytes::from_static(b"queue");
        let members: Vec<(f64, String)> =
            (1..=100).map(|i| (i as f64, format!("m{i:03}"))).collect();
        let pairs: Vec<(f64, &str)> = members.iter().map(|(s, m)| (*s, m.as_str())).collect();
        apply_all(&storage, &key, vec![zadd(&pairs)]);
        let pop = |highest| Command::SortedSet {
            key: key.clone(),
            op: SortedSetOp::Pop { count: 1, highest },
        };
        let mut batch: Vec<Command> = (0..40).map(|_| pop(false)).collect();
        // A member below where the pops reached: the next pop must find it.
        batch.push(Command::SortedSet {
            key: key.clone(),
            op: zadd(&[(0.5, "early")]),
        });
        batch.push(pop(false));
        batch.extend((0..3).map(|_| pop(true)));
        // A transaction that pops two and is then undone: both are back for the next pop.
        batch.push(Command::Transaction {
            watches: Vec::new(),
            commands: vec![
                Command::SortedSet {
                    key: key.clone(),
                    op: SortedSetOp::Pop {
                        count: 2,
                        highest: false,
                    },
                },
                Command::Check {
                    key: Bytes::from_static(b"absent"),
                    check: KeyCheck::Exists,
                },
            ],
        });
        batch.push(pop(false));
        let popped: Vec<String> = run(&storage, 2, batch)
            .into_iter()
            .filter_map(|result| match result {
                CommandResult::SortedSet(Ok(answer @ SortedSetAnswer::Pairs(_))) => {
                    Some(names(&answer))
                }
                _ => None,
            })
            .flatten()
            .collect();
        let mut expected: Vec<String> = (1..=40).map(|i| format!("m{i:03}={i}")).collect();
        expected.push("early=0.5".into());
        expected.extend(["m100=100", "m099=99", "m098=98", "m041=41"].map(String::from));
        assert_eq!(popped, expected);
        let rest = storage
            .shard_view(ShardId(0))
            .sorted_set_read(
                &key,
                &range_read(ZRange::Rank { start: 0, stop: 1 }, false),
                0,
            )
            .unwrap();
        assert_eq!(names(rest.as_ref().unwrap()), ["m042=42", "m043=43"]);
    }

    #[test]
    fn rank_windows_follow_redis() {
        assert_eq!(rank_window(0, -1, 4), Some((0, 4)));
        assert_eq!(rank_window(-2, -1, 4), Some((2, 2)));
        assert_eq!(rank_window(-100, 1, 4), Some((0, 2)));
        assert_eq!(rank_window(3, 100, 4), Some((3, 1)));
        assert_eq!(rank_window(4, 5, 4), None);
        assert_eq!(rank_window(2, 1, 4), None);
        assert_eq!(rank_window(0, -1, 0), None);
        assert_eq!(rank_window(i64::MIN, i64::MAX, 3), Some((0, 3)));
    }
}
