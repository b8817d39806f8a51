//! The best matches of a shard in the order pages are cut in: score, highest first, then key.
//!
//! tantivy's own top-N breaks ties by its internal document order, which differs from shard
//! to shard and from one merge to the next, so a page cut at `offset + limit` could leave out
//! a tied match that the next page expects before it (many matches tie: every document whose
//! field holds just `g7` scores the same for `group:g7`). Within a segment the key column's
//! term ordinals follow the keys' order, so each segment keeps its best by (score, ordinal)
//! cheaply and turns only those into keys; segments are merged by (score, key).

use bytes::Bytes;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::BytesColumn;
use tantivy::{DocId, Score, SegmentOrdinal, SegmentReader};

/// Collects the best `want` matches as (score, key), best first.
pub(crate) struct TopByScoreThenKey {
    pub want: usize,
}

/// One kept match of a segment; it compares "greater" when it is *worse*, so that the heap's
/// top is the first to give up.
#[derive(Clone, Copy)]
struct Kept {
    score: Score,
    ord: u64,
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.ord.cmp(&other.ord))
    }
}

pub(crate) struct SegmentTop {
    keys: Option<BytesColumn>,
    want: usize,
    heap: BinaryHeap<Kept>,
}

impl Collector for TopByScoreThenKey {
    type Fruit = Vec<(Score, Bytes)>;
    type Child = SegmentTop;

    fn for_segment(
        &self,
        _: SegmentOrdinal,
        segment: &SegmentReader,
    ) -> tantivy::Result<SegmentTop> {
        Ok(SegmentTop {
            keys: segment.fast_fields().bytes("key")?,
            want: self.want,
            heap: BinaryHeap::with_capacity(self.want.min(1024) + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(Score, Bytes)>>) -> tantivy::Result<Self::Fruit> {
        let mut all: Vec<(Score, Bytes)> = fruits.into_iter().flatten().collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        all.truncate(self.want);
        Ok(all)
    }
}

impl SegmentCollector for SegmentTop {
    type Fruit = Vec<(Score, Bytes)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        if self.want == 0 {
            return;
        }
        let Some(ord) = self.keys.as_ref().and_then(|k| k.term_ords(doc).next()) else {
            return;
        };
        let candidate = Kept { score, ord };
        if self.heap.len() < self.want {
            self.heap.push(candidate);
        } else if self.heap.peek().is_some_and(|worst| candidate < *worst) {
            self.heap.pop();
            self.heap.push(candidate);
        }
    }

    fn harvest(self) -> Self::Fruit {
        let Some(keys) = self.keys else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(self.heap.len());
        for kept in self.heap.into_sorted_vec() {
            let mut key = Vec::new();
            if keys.ord_to_bytes(kept.ord, &mut key).unwrap_or(false) {
                out.push((kept.score, Bytes::from(key)));
            }
        }
        out
    }
}
