//! Whole-collection reads in pages: `HGETALL`, `HKEYS`, `HVALS`, `SMEMBERS`, `LRANGE` and
//! `ZRANGE` by rank over many members. The replica that serves one opens it on a pinned view
//! of its store and hands it out a page at a time, so that neither it, nor a node passing the
//! pages on, nor the client's connection holds the whole answer, while every page still
//! comes from one point of the applied log.

use crate::sorted::Score;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Which members a whole read walks, in its reply's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WholeRead {
    /// Every field of a hash, with its value, in field order.
    Hash,
    /// Every member of a set, in member order.
    Set,
    /// The elements of a list with indexes `start..=stop` (negative from the tail, as
    /// `LRANGE` reads them).
    List {
        /// The first index.
        start: i64,
        /// The last index.
        stop: i64,
    },
    /// The members of a sorted set with ranks `start..=stop` (negative from the end), with
    /// their scores, lowest score first or, with `reverse`, highest first.
    SortedSet {
        /// The first rank.
        start: i64,
        /// The last rank.
        stop: i64,
        /// Highest score first (`ZRANGE ... REV`, `ZREVRANGE`).
        reverse: bool,
    },
}

/// One page of a whole read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WholeItems {
    /// A hash's fields and values.
    Pairs(Vec<(Bytes, Bytes)>),
    /// A set's members or a list's elements.
    Members(Vec<Bytes>),
    /// A sorted set's members and scores.
    Scored(Vec<(Bytes, Score)>),
}

impl WholeItems {
    /// How many items the page holds.
    pub fn len(&self) -> usize {
        match self {
            WholeItems::Pairs(items) => items.len(),
            WholeItems::Members(items) => items.len(),
            WholeItems::Scored(items) => items.len(),
        }
    }

    /// Whether the page holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An empty page of the kind `read` answers.
    pub fn empty(read: &WholeRead) -> WholeItems {
        match read {
            WholeRead::Hash => WholeItems::Pairs(Vec::new()),
            WholeRead::Set | WholeRead::List { .. } => WholeItems::Members(Vec::new()),
            WholeRead::SortedSet { .. } => WholeItems::Scored(Vec::new()),
        }
    }

    /// Appends `more`, a page of the same kind (a page of another kind is left out: the
    /// reads that make pages never mix them).
    pub fn extend(&mut self, more: WholeItems) {
        match (self, more) {
            (WholeItems::Pairs(items), WholeItems::Pairs(more)) => items.extend(more),
            (WholeItems::Members(items), WholeItems::Members(more)) => items.extend(more),
            (WholeItems::Scored(items), WholeItems::Scored(more)) => items.extend(more),
            _ => {}
        }
    }

    /// The encoded size of the page's members and values, roughly: what it costs to hold.
    pub fn bytes(&self) -> usize {
        match self {
            WholeItems::Pairs(items) => items.iter().map(|(f, v)| f.len() + v.len()).sum(),
            WholeItems::Members(items) => items.iter().map(Bytes::len).sum(),
            WholeItems::Scored(items) => items.iter().map(|(m, _)| m.len() + 8).sum(),
        }
    }
}

/// The first page of a whole read, as the serving replica answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WholeOpened {
    /// How many items the whole answer has: the pages add up to exactly this many.
    pub total: u64,
    /// The first items.
    pub first: WholeItems,
    /// Where the rest waits, when there is more: the serving node and its read's number
    /// there.
    pub rest: Option<WholeRest>,
}

/// Where the pages after the first of a whole read are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WholeRest {
    /// The node that holds the read open.
    pub node: u64,
    /// The read's number on that node.
    pub read: u64,
}

/// A later page of a whole read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WholePage {
    /// The items.
    pub items: WholeItems,
    /// Whether they are the last (the serving node has closed the read).
    pub last: bool,
}
