//! The best matches of each segment in the order pages are cut in: score, highest first,
//! then key.
//!
//! tantivy's own top-N breaks ties by its internal document order, which differs from shard
//! to shard and from one merge to the next, so a page cut at `offset + limit` could leave out
//! a tied match that the next page expects before it (many matches tie: every document whose
//! field holds just `g7` scores the same for `group:g7`). Within a segment the key column's
//! term ordinals follow the keys' order, so each segment keeps its best by (score, ordinal)
//! cheaply; the caller reads those few keys and merges the segments by (score, key).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::BytesColumn;
use tantivy::{DocAddress, DocId, Score, SegmentOrdinal, SegmentReader};

/// Collects each segment's best `want` matches, as (score, address).
pub(crate) struct TopByScoreThenKey {
    pub want: usize,
}

/// One kept match of a segment; it compares "greater" when it is *worse*, so that the heap's
/// top is the first to give up.
#[derive(Clone, Copy)]
struct Kept {
    score: Score,
    ord: u64,
    doc: DocId,
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
    segment: SegmentOrdinal,
    keys: Option<BytesColumn>,
    want: usize,
    heap: BinaryHeap<Kept>,
}

impl Collector for TopByScoreThenKey {
    type Fruit = Vec<(Score, DocAddress)>;
    type Child = SegmentTop;

    fn for_segment(
        &self,
        ordinal: SegmentOrdinal,
        segment: &SegmentReader,
    ) -> tantivy::Result<SegmentTop> {
        Ok(SegmentTop {
            segment: ordinal,
            keys: segment.fast_fields().bytes("key")?,
            want: self.want,
            heap: BinaryHeap::with_capacity(self.want.min(1024) + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(Score, DocAddress)>>) -> tantivy::Result<Self::Fruit> {
        Ok(fruits.into_iter().flatten().collect())
    }
}

impl SegmentCollector for SegmentTop {
    type Fruit = Vec<(Score, DocAddress)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        if self.want == 0 {
            return;
        }
        let Some(ord) = self.keys.as_ref().and_then(|k| k.term_ords(doc).next()) else {
            return;
        };
        let candidate = Kept { score, ord, doc };
        if self.heap.len() < self.want {
            self.heap.push(candidate);
        } else if self.heap.peek().is_some_and(|worst| candidate < *worst) {
            self.heap.pop();
            self.heap.push(candidate);
        }
    }

    fn harvest(self) -> Self::Fruit {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|kept| (kept.score, DocAddress::new(self.segment, kept.doc)))
            .collect()
    }
}
