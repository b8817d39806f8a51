//! Ranges of a collection's internal rows, read forwards or backwards, from the store or
//! from a batch being applied (the stored rows with the batch's changes laid over).

use super::Pending;
use crate::StorageError;
use crate::keys::owned_key;
use crate::tables::{Row, Space, TablesSnapshot};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Bound;
use trireme_types::Record;

/// Rows under `prefix` whose remainder (what follows the prefix) lies between `lower` and
/// `upper`, walked lowest first or, with `reverse`, highest first.
#[derive(Debug, Clone)]
pub(super) struct RowSpan {
    pub(super) prefix: Bytes,
    pub(super) lower: Bound<Vec<u8>>,
    pub(super) upper: Bound<Vec<u8>>,
    pub(super) reverse: bool,
}

impl RowSpan {
    /// Every row under `prefix`, lowest first.
    pub(super) fn all(prefix: Bytes) -> RowSpan {
        RowSpan {
            prefix,
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            reverse: false,
        }
    }

    /// The rows under `prefix` after `after` (all of them without it), lowest first.
    pub(super) fn after(prefix: Bytes, after: Option<&[u8]>) -> RowSpan {
        RowSpan {
            lower: after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_vec())),
            ..RowSpan::all(prefix)
        }
    }

    /// Whether no remainder can lie inside the bounds (they cross, or meet with an end
    /// left out): such a span is never handed to a range walk, which refuses it.
    pub(super) fn is_empty(&self) -> bool {
        let (low, low_in) = match &self.lower {
            Bound::Unbounded => return false,
            Bound::Included(low) => (low, true),
            Bound::Excluded(low) => (low, false),
        };
        let (high, high_in) = match &self.upper {
            Bound::Unbounded => return false,
            Bound::Included(high) => (high, true),
            Bound::Excluded(high) => (high, false),
        };
        low > high || (low == high && !(low_in && high_in))
    }

    /// Whether a remainder lies below the upper bound.
    fn below_upper(&self, remainder: &[u8]) -> bool {
        match &self.upper {
            Bound::Unbounded => true,
            Bound::Included(high) => remainder <= &high[..],
            Bound::Excluded(high) => remainder < &high[..],
        }
    }

    /// The bounds over whole keys starting with `full` (a prefix with anything before it).
    fn full_bounds(&self, full: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let join = |rest: &[u8]| {
            let mut key = full.to_vec();
            key.extend_from_slice(rest);
            key
        };
        let lower = match &self.lower {
            Bound::Unbounded => Bound::Included(full.to_vec()),
            Bound::Included(low) => Bound::Included(join(low)),
            Bound::Excluded(low) => Bound::Excluded(join(low)),
        };
        let upper = match &self.upper {
            Bound::Unbounded => {
                crate::tables::prefix_end(full).map_or(Bound::Unbounded, Bound::Excluded)
            }
            Bound::Included(high) => Bound::Included(join(high)),
            Bound::Excluded(high) => Bound::Excluded(join(high)),
        };
        (lower, upper)
    }
}

/// The stored rows of `shard` in `span`, past the first `skip` (walked over, not copied)
/// and at most `limit`, as `snapshot` holds them: with `values`, the remainders and the
/// rows' values, else the remainders only (their values empty), which spares decoding rows
/// that are only to be counted or removed.
pub(super) fn stored_rows(
    snapshot: &TablesSnapshot,
    shard: u32,
    span: &RowSpan,
    skip: u64,
    limit: u64,
    values: bool,
) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
    if span.is_empty() {
        return Ok(Vec::new());
    }
    let full = owned_key(shard, &span.prefix);
    let (lower, upper) = span.full_bounds(&full);
    let range = snapshot.range(Space::Data, as_slices(&lower), as_slices(&upper));
    let rows: Box<dyn Iterator<Item = Result<Row, StorageError>>> = if span.reverse {
        Box::new(range.rev())
    } else {
        Box::new(range)
    };
    let skip = usize::try_from(skip).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for row in rows.skip(skip) {
        if out.len() as u64 >= limit {
            break;
        }
        let (key, value) = row?;
        if values {
            let record = Record::decode(&value)?;
            out.push((Bytes::copy_from_slice(&key[full.len()..]), record.value));
        } else {
            out.push((Bytes::copy_from_slice(&key[full.len()..]), Bytes::new()));
        }
    }
    Ok(out)
}

/// How many stored rows of `shard` lie in `span`, counted without keeping them.
pub(super) fn count_stored_rows(
    snapshot: &TablesSnapshot,
    shard: u32,
    span: &RowSpan,
) -> Result<u64, StorageError> {
    if span.is_empty() {
        return Ok(0);
    }
    let full = owned_key(shard, &span.prefix);
    let (lower, upper) = span.full_bounds(&full);
    let mut count = 0;
    for row in snapshot.range(Space::Data, as_slices(&lower), as_slices(&upper)) {
        row?;
        count += 1;
    }
    Ok(count)
}

fn as_slices(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

impl Pending<'_> {
    /// The rows in `span` as this batch sees them: the stored ones with this batch's changes
    /// laid over, past the first `skip` and at most `limit`; without `values`, remainders
    /// only.
    pub(super) fn rows_in(
        &mut self,
        span: &RowSpan,
        skip: u64,
        limit: u64,
        values: bool,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        if span.is_empty() {
            return Ok(Vec::new());
        }
        // Only this span's changed rows, from its low end: the batch's other changes (and
        // this collection's outside the span, such as many pops' deletions) are not walked.
        let prefix = &span.prefix;
        let join = |rest: &[u8]| {
            let mut row = prefix.to_vec();
            row.extend_from_slice(rest);
            Bytes::from(row)
        };
        let from = match &span.lower {
            Bound::Unbounded => Bound::Included(prefix.clone()),
            Bound::Included(low) => Bound::Included(join(low)),
            Bound::Excluded(low) => Bound::Excluded(join(low)),
        };
        let changed: Vec<Bytes> = self
            .changed_members
            .range::<Bytes, _>((from, Bound::Unbounded))
            .take_while(|row| {
                row.starts_with(&prefix[..]) && span.below_upper(&row[prefix.len()..])
            })
            .cloned()
            .collect();
        // Each changed row can hide at most one stored row: that many more are enough,
        // walking from either end.
        let snapshot = self.storage.tables.snapshot();
        let stored = stored_rows(
            &snapshot,
            self.shard,
            span,
            0,
            skip.saturating_add(limit)
                .saturating_add(changed.len() as u64),
            values,
        )?;
        let mut merged: BTreeMap<Bytes, Bytes> = stored.into_iter().collect();
        for row in &changed {
            let remainder = row.slice(prefix.len()..);
            // A row no longer among the changes was undone with its transaction: the stored
            // one stands.
            match self.changes.get(row) {
                Some(Some(record)) => {
                    let value = if values {
                        record.value.clone()
                    } else {
                        Bytes::new()
                    };
                    merged.insert(remainder, value);
                }
                Some(None) => {
                    merged.remove(&remainder);
                }
                None => {}
            }
        }
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(if span.reverse {
            merged.into_iter().rev().skip(skip).take(take).collect()
        } else {
            merged.into_iter().skip(skip).take(take).collect()
        })
    }

    /// How many rows lie in `span` as this batch sees them.
    pub(super) fn count_rows_in(&mut self, span: &RowSpan) -> Result<u64, StorageError> {
        Ok(self.rows_in(span, 0, u64::MAX, false)?.len() as u64)
    }
}
