//! Redis sorted sets: scores, ranges, and the commands that change or read one.
//!
//! A sorted set is stored as a collection (see [`crate::collection`]) with two rows per
//! member: its member row (ordered by member, its value the score) and a *score row*
//! ordered by score then member, so that a range by rank or by score is a walk over
//! neighbouring rows, not a sort.

use crate::collection::{SCORES, internal_rows_prefix};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A member's score: a double that is never NaN, so scores order and compare whole, and
/// never `-0.0` (stored as `0.0`, which Redis treats as equal). Decoding goes through
/// [`Score::new`] too, so a NaN from a damaged or forged frame is refused, never stored.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Score(f64);

impl TryFrom<f64> for Score {
    type Error = &'static str;

    fn try_from(value: f64) -> Result<Self, Self::Error> {
        Score::new(value).ok_or("a score is not a number (NaN)")
    }
}

impl From<Score> for f64 {
    fn from(score: Score) -> f64 {
        score.0
    }
}

impl Eq for Score {}

impl Score {
    /// Zero.
    pub const ZERO: Score = Score(0.0);

    /// The score `value`, or `None` for NaN.
    pub fn new(value: f64) -> Option<Score> {
        if value.is_nan() {
            None
        } else if value == 0.0 {
            Some(Score(0.0))
        } else {
            Some(Score(value))
        }
    }

    /// The double.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Eight bytes that sort as the scores do (sign bit flipped for positives, every bit
    /// for negatives): the start of a score row's member part.
    pub fn sortable(self) -> [u8; 8] {
        let bits = self.0.to_bits();
        let ordered = if bits >> 63 == 1 {
            !bits
        } else {
            bits ^ (1 << 63)
        };
        ordered.to_be_bytes()
    }

    /// The score that [`Score::sortable`] wrote.
    pub fn from_sortable(bytes: [u8; 8]) -> Score {
        let ordered = u64::from_be_bytes(bytes);
        let bits = if ordered >> 63 == 1 {
            ordered ^ (1 << 63)
        } else {
            !ordered
        };
        Score(f64::from_bits(bits))
    }

    /// The value of a member row: the score's bits.
    pub fn to_row(self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_bits().to_be_bytes())
    }

    /// The score a member row holds.
    pub fn from_row(value: &[u8]) -> Option<Score> {
        let bits: [u8; 8] = value.get(..8)?.try_into().ok()?;
        Score::new(f64::from_bits(u64::from_be_bytes(bits)))
    }
}

/// The first bytes of every score row of version `version` of the sorted set at `key`.
pub fn score_prefix(key: &[u8], version: u64) -> Bytes {
    internal_rows_prefix(SCORES, key, version)
}

/// The part of a score row after [`score_prefix`]: the score, then the member.
pub fn score_suffix(score: Score, member: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + member.len());
    out.extend_from_slice(&score.sortable());
    out.extend_from_slice(member);
    out
}

/// The score row of `member` at `score` in version `version` of the sorted set at `key`.
pub fn score_key(key: &[u8], version: u64, score: Score, member: &[u8]) -> Bytes {
    let mut out = score_prefix(key, version).to_vec();
    out.extend_from_slice(&score_suffix(score, member));
    Bytes::from(out)
}

/// The score and member a score row's suffix (after [`score_prefix`]) names.
pub fn split_score_suffix(suffix: &[u8]) -> Option<(Score, Bytes)> {
    let sortable: [u8; 8] = suffix.get(..8)?.try_into().ok()?;
    Some((
        Score::from_sortable(sortable),
        Bytes::copy_from_slice(&suffix[8..]),
    ))
}

/// One end of a score range (`1.5`, `(1.5`, `-inf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreBound {
    /// The score.
    pub score: Score,
    /// Whether the score itself is left out.
    pub exclusive: bool,
}

/// One end of a member range of a sorted set whose members share one score (`[a`, `(a`,
/// `-`, `+`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LexBound {
    /// Below every member (`-`).
    Lowest,
    /// Above every member (`+`).
    Highest,
    /// This member and beyond (`[m`).
    Inclusive(Bytes),
    /// Beyond this member (`(m`).
    Exclusive(Bytes),
}

/// Which members of a sorted set a range takes, lowest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZRange {
    /// By rank, as Redis counts (negative from the end, both ends included).
    Rank {
        /// The first rank.
        start: i64,
        /// The last rank.
        stop: i64,
    },
    /// By score, from `min` to `max`.
    Score {
        /// The low end.
        min: ScoreBound,
        /// The high end.
        max: ScoreBound,
    },
    /// By member, from `min` to `max` (Redis's `BYLEX`: meant for members of one score).
    Lex {
        /// The low end.
        min: LexBound,
        /// The high end.
        max: LexBound,
    },
}

/// Which members `ZADD` may touch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZAddWhen {
    /// New and existing members.
    #[default]
    Always,
    /// Only new members (`NX`).
    IfNew,
    /// Only existing members (`XX`).
    IfExists,
}

/// Which score updates `ZADD` makes to existing members.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZAddCompare {
    /// Every update.
    #[default]
    Any,
    /// Only to a greater score (`GT`).
    Greater,
    /// Only to a lesser score (`LT`).
    Less,
}

/// A change to, or inside a transaction a read of, one sorted set: see
/// [`crate::Command::SortedSet`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortedSetOp {
    /// Add members or change their scores (`ZADD`, `ZINCRBY`): answers
    /// [`SortedSetAnswer::Added`], or with `increment` [`SortedSetAnswer::Score`] (none when
    /// the conditions left the member alone). A set may not grow past `max_members` (the
    /// proposer's limit, carried so every replica decides alike).
    Add {
        /// Scores and members, in order; a later pair wins over an earlier one.
        members: Vec<(Score, Bytes)>,
        /// Which members it may touch.
        when: ZAddWhen,
        /// Which updates it makes.
        compare: ZAddCompare,
        /// Add the score to the member's (`INCR`, `ZINCRBY`): one pair only.
        increment: bool,
        /// The most members the set may have after the change.
        max_members: u64,
    },
    /// Remove members (`ZREM`), and the set with its last one; answers how many went.
    Remove {
        /// The members.
        members: Vec<Bytes>,
    },
    /// Remove and answer up to `count` members with the lowest scores, or with `highest`
    /// the highest (`ZPOPMIN`, `ZPOPMAX`), in the order they come off.
    Pop {
        /// How many.
        count: u64,
        /// From the top.
        highest: bool,
    },
    /// Remove the members in `range` (`ZREMRANGEBYSCORE`, `ZREMRANGEBYRANK`,
    /// `ZREMRANGEBYLEX`); answers how many went.
    RemoveRange {
        /// Which.
        range: ZRange,
    },
    /// A read at this point of a transaction (`ZSCORE` after `MULTI`).
    Read(SortedSetRead),
    /// Remove and answer the member with the lowest score, or with `highest` the highest,
    /// of the first non-empty sorted set of this key and `others` (`BZPOPMIN`, `BZPOPMAX`
    /// once one has a member): [`SortedSetAnswer::Popped`]. Needs cluster version
    /// [`crate::version::since::SORTED_SET_POP_FIRST`].
    PopFirst {
        /// From the top.
        highest: bool,
        /// The other sorted sets, in the same slot, in order.
        others: Vec<Bytes>,
    },
}

/// A read of one sorted set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortedSetRead {
    /// The number of members (`ZCARD`): [`SortedSetAnswer::Count`].
    Len,
    /// Each member's score (`ZSCORE`, `ZMSCORE`): [`SortedSetAnswer::Scores`].
    Scores {
        /// The members.
        members: Vec<Bytes>,
    },
    /// The member's rank, lowest score first or with `reverse` highest first (`ZRANK`,
    /// `ZREVRANK`): [`SortedSetAnswer::Rank`].
    Rank {
        /// The member.
        member: Bytes,
        /// Count from the highest score.
        reverse: bool,
    },
    /// How many members a score or member range holds (`ZCOUNT`, `ZLEXCOUNT`):
    /// [`SortedSetAnswer::Count`].
    Count {
        /// The range.
        range: ZRange,
    },
    /// The members of `range` with their scores, lowest first or with `reverse` highest
    /// first, skipping `offset` and taking at most `limit` (`ZRANGE` and its variants):
    /// [`SortedSetAnswer::Pairs`].
    Range {
        /// The range (a rank range counts ranks in the direction of `reverse`).
        range: ZRange,
        /// Highest first.
        reverse: bool,
        /// Members of the range to skip.
        offset: u64,
        /// The most members to return.
        limit: u64,
    },
    /// Members in member order after `after`, at most `limit`, with their scores (`ZSCAN`):
    /// [`SortedSetAnswer::Pairs`].
    Members {
        /// Start after this member.
        after: Option<Bytes>,
        /// The most members to return.
        limit: u64,
    },
}

/// What a [`crate::Command::SortedSet`] or a sorted set read answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortedSetAnswer {
    /// A number of members.
    Count(u64),
    /// `ZADD`'s: members added, and existing members whose score changed.
    Added {
        /// New members.
        added: u64,
        /// Existing members with a new score.
        updated: u64,
    },
    /// The member's score after an increment, none if the conditions left it alone.
    Score(Option<Score>),
    /// Each member's score, none for a member not in the set.
    Scores(Vec<Option<Score>>),
    /// A rank, none for a member not in the set.
    Rank(Option<u64>),
    /// Members and their scores, in order.
    Pairs(Vec<(Bytes, Score)>),
    /// The key a member was popped from, the member and its score; none when every set
    /// was empty.
    Popped(Option<(Bytes, Bytes, Score)>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sortable_scores_sort_as_the_doubles_do() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1.5,
            1e300,
            f64::INFINITY,
        ];
        for pair in scores.windows(2) {
            let (a, b) = (Score::new(pair[0]).unwrap(), Score::new(pair[1]).unwrap());
            assert!(a.sortable() < b.sortable(), "{pair:?}");
            assert_eq!(Score::from_sortable(a.sortable()), a);
            assert_eq!(Score::from_row(&a.to_row()), Some(a));
        }
        assert_eq!(
            Score::new(-0.0).unwrap().sortable(),
            Score::new(0.0).unwrap().sortable()
        );
        assert_eq!(Score::new(f64::NAN), None);
        // Decoded as it is encoded, through the same check.
        let encoded = serde_json::to_string(&Score::new(-0.0).unwrap()).unwrap();
        assert_eq!(encoded, "0.0");
        assert_eq!(serde_json::from_str::<Score>("2.5").unwrap().get(), 2.5);
        // A NaN where a score belongs is refused when it is decoded.
        let nan = postcard::to_stdvec(&(Bytes::from_static(b"m"), f64::NAN)).unwrap();
        assert!(postcard::from_bytes::<(Bytes, Score)>(&nan).is_err());
        let fine = postcard::to_stdvec(&(Bytes::from_static(b"m"), 1.5f64)).unwrap();
        let (_, score) = postcard::from_bytes::<(Bytes, Score)>(&fine).unwrap();
        assert_eq!(score.get(), 1.5);
        let row = score_suffix(Score::new(2.0).unwrap(), b"m");
        assert_eq!(
            split_score_suffix(&row),
            Some((Score::new(2.0).unwrap(), Bytes::from_static(b"m")))
        );
    }
}
